"""SDiaReward Qwen2.5-Omni adapter on tiny random checkpoints: equal to the authors' forward, batch-invariant."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from sdscore.errors import ModelError
from sdscore.models.episodes import Episode, Turn
from sdscore.models.loading import detect_kind, load_reward_model
from sdscore.models.sdiareward_qwen import (
    SDiaRewardQwenOmni,
    audio_token_count,
    clip_features,
)
from tiny_reward_models import TINY_SYSTEM_PROMPT, build_tiny_sdiareward, build_tiny_trl

SR = 16000
TOL = 1e-5


def _wave(seconds: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = round(seconds * SR)
    t = np.arange(n) / SR
    return (0.3 * np.sin(2 * np.pi * (150 + 40 * seed) * t) + 0.05 * rng.standard_normal(n)).astype(np.float32)


def _episodes() -> list[tuple[Episode, list[np.ndarray | None]]]:
    """Episodes of different lengths: audio + text turns, audio-only, text-only, own system turn."""
    a, b, c, d = _wave(1.0, 1), _wave(0.55, 2), _wave(4.3, 3), _wave(2.0, 4)
    return [
        (Episode((Turn("user", "hello there", "u.wav"), Turn("assistant", "hi! how can I help?", "a.wav")), id="av"),
         [a, b]),
        (Episode((Turn("user", "what's up"), Turn("assistant", None, "a.wav"), Turn("user", "tell me more", "u2.wav"),
                  Turn("assistant", "sure, here it is")), id="mixed"), [None, c, d, None]),
        (Episode((Turn("user", "text only, please"), Turn("assistant", "ok")), id="text"), [None, None]),
        (Episode((Turn("system", "Be brief."), Turn("user", None, "u.wav"), Turn("assistant", "fine")), id="sys"),
         [None, b, None]),
        (Episode((Turn("assistant", "x"),), id="one"), [None]),
    ]


class _AudioTextProcessor(transformers.Qwen2_5OmniProcessor):
    """The stock processor without image/video parts (their classes need torchvision, absent here)."""

    def check_argument_for_proper_class(self, argument_name, argument):
        return None if argument is None else super().check_argument_for_proper_class(argument_name, argument)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("sdiareward")
    mean_ckpt, base = build_tiny_sdiareward(root / "mean", root / "base", pooling="mean", seed=0)
    attn_ckpt, _ = build_tiny_sdiareward(root / "attn", root / "base_attn", pooling="attn", seed=1)
    return {"root": root, "base": base, "mean": mean_ckpt, "attn": attn_ckpt}


@pytest.fixture(scope="module")
def processor(tiny):
    """The authors' input pipeline: the base processor's tokenizer, feature extractor, chat template."""
    import json

    base = tiny["base"]
    template = json.loads((base / "chat_template.json").read_text())["chat_template"]
    return _AudioTextProcessor(
        image_processor=None, video_processor=None, chat_template=template,
        feature_extractor=transformers.WhisperFeatureExtractor.from_pretrained(base),
        tokenizer=transformers.AutoTokenizer.from_pretrained(base),
    )


def _authors_inputs(processor, episode: Episode, audio) -> dict[str, torch.Tensor]:
    """What eval_model.get_score feeds the model: system prompt inserted, template, processor at batch 1."""
    conversation = []
    for turn, wave in zip(episode.turns, audio):
        parts = ([{"type": "text", "text": turn.text}] if turn.text is not None else [])
        parts += [{"type": "audio", "audio": wave}] if wave is not None else []
        conversation.append({"role": turn.role, "content": parts})
    if conversation[0]["role"] != "system":
        conversation.insert(0, {"role": "system", "content": [{"type": "text", "text": TINY_SYSTEM_PROMPT}]})
    text = processor.apply_chat_template(conversation, add_generation_prompt=False, tokenize=False)
    clips = [w for w in audio if w is not None]
    return dict(processor(text=text, audio=clips or None, return_tensors="pt", padding=False))


@pytest.fixture(scope="module")
def authors_inputs(processor):
    """Their processor's outputs for every case, one episode at a time (computed once: 300 s padding)."""
    return [_authors_inputs(processor, episode, audio) for episode, audio in _episodes()]


_HIDDEN: dict[str, list[torch.Tensor]] = {}


def _authors_scores(ckpt, base, inputs, pooling: str) -> torch.Tensor:
    """Mirror of their QwenOmniThinkerReward.forward: thinker last layer, their pooling formula, score_head."""
    from safetensors.torch import load_file

    if str(ckpt) not in _HIDDEN:
        config = transformers.Qwen2_5OmniThinkerConfig.from_pretrained(base)
        thinker = transformers.Qwen2_5OmniThinkerForConditionalGeneration.from_pretrained(ckpt, config=config).eval()
        with torch.no_grad():
            _HIDDEN[str(ckpt)] = [thinker.model(**x).last_hidden_state for x in inputs]  # [1, T, H] each
    weights = load_file(ckpt / "model.safetensors")
    scores = []
    for h, x in zip(_HIDDEN[str(ckpt)], inputs):
        mask = x["attention_mask"]
        if pooling == "mean":
            w = mask.unsqueeze(-1).to(h.dtype)
            pooled = (h * w).sum(1) / w.sum(1).clamp(min=1.0)
        elif pooling == "last":
            idx = (mask.long().sum(1) - 1).clamp(min=0)
            pooled = h[torch.arange(h.shape[0]), idx]
        else:
            logits = h @ weights["pooler.attn.weight"][0] + weights["pooler.attn.bias"][0]
            attn = torch.softmax(logits.masked_fill(mask == 0, -1e9), dim=-1)
            pooled = (h * attn.unsqueeze(-1)).sum(1)
        scores.append((pooled @ weights["score_head.weight"].T)[0, 0])
    return torch.stack(scores)


def _ours(model, cases, batched: bool) -> torch.Tensor:
    prepared = [model.prepare(e, a) for e, a in cases]
    with torch.no_grad():
        if batched:
            return model(model.collate(prepared))
        return torch.cat([model(model.collate([p])) for p in prepared])


def test_scores_equal_the_authors_forward(tiny, authors_inputs):
    cases = _episodes()
    model = load_reward_model(tiny["mean"], base=tiny["base"])
    assert isinstance(model, SDiaRewardQwenOmni) and model.pooler.kind == "mean"
    expected = _authors_scores(tiny["mean"], tiny["base"], authors_inputs, "mean")
    torch.testing.assert_close(_ours(model, cases, batched=False), expected, atol=TOL, rtol=0)


def test_batch_with_left_padding_equals_one_by_one(tiny):
    cases = _episodes()
    model = load_reward_model(tiny["mean"], base=tiny["base"])
    prepared = [model.prepare(e, a) for e, a in cases]
    assert len({p.length for p in prepared}) == len(prepared)  # all lengths differ: real padding
    batch = model.collate(prepared)
    assert batch["attention_mask"][:, -1].all() and not batch["attention_mask"][:, 0].all()  # left padding
    one_by_one = _ours(model, cases, batched=False)
    torch.testing.assert_close(_ours(model, cases, batched=True), one_by_one, atol=TOL, rtol=0)
    reordered = [cases[i] for i in (3, 0, 4, 2, 1)]
    torch.testing.assert_close(_ours(model, reordered, batched=True), one_by_one[[3, 0, 4, 2, 1]], atol=TOL, rtol=0)


@pytest.mark.parametrize("pooling", ["mean", "attn", "last"])
def test_poolings_equal_the_authors_formulas(tiny, authors_inputs, pooling):
    cases = _episodes()
    ckpt = tiny["attn"] if pooling == "attn" else tiny["mean"]
    model = load_reward_model(ckpt, base=tiny["base"], pooling=pooling)
    assert model.pooler.kind == pooling
    expected = _authors_scores(ckpt, tiny["base"], authors_inputs, pooling)
    torch.testing.assert_close(_ours(model, cases, batched=True), expected, atol=TOL, rtol=0)


def test_attention_pooling_is_the_default_when_the_checkpoint_has_it(tiny):
    assert load_reward_model(tiny["attn"], base=tiny["base"]).pooler.kind == "attn"
    assert set(load_reward_model(tiny["attn"], base=tiny["base"]).head_state()) == {
        "pooler.attn.weight", "pooler.attn.bias", "score_head.weight"}


def test_prepare_counts_every_backbone_token(tiny, authors_inputs):
    model = load_reward_model(tiny["mean"], base=tiny["base"])
    for (episode, audio), inputs in zip(_episodes(), authors_inputs):
        prepared = model.prepare(episode, audio)
        ids = inputs["input_ids"][0]
        assert prepared.length == len(ids)
        assert torch.equal(prepared.inputs["input_ids"], ids)
    assert audio_token_count(100) == 25 and audio_token_count(30000) == 7500  # 1 s → 25 tokens, 300 s → 7500


@pytest.mark.parametrize("samples", [400, 3201, 16000 * 3 + 7, 4_800_000 - 300, 4_800_000 + 2000])
def test_clip_features_equal_the_300s_padded_extractor(processor, samples):
    fe = processor.feature_extractor
    wave = _wave(samples / SR, samples % 7)
    full = fe(wave, sampling_rate=SR, padding="max_length", return_attention_mask=True, return_tensors="np")
    frames = int(full["attention_mask"].sum())
    ours = clip_features(fe, wave)
    assert ours.shape == (128, frames)
    np.testing.assert_allclose(ours.numpy(), full["input_features"][0, :, :frames], atol=2e-6, rtol=0)


def test_processor_files_in_the_checkpoint_replace_base(tiny):
    root = tiny["root"]
    ckpt, _ = build_tiny_sdiareward(root / "with_proc", root / "base_proc", seed=0, with_processor=True)
    cases = _episodes()[:2]
    own = load_reward_model(ckpt)
    torch.testing.assert_close(
        _ours(own, cases, batched=True), _ours(load_reward_model(tiny["mean"], base=tiny["base"]), cases, True),
        atol=TOL, rtol=0)


def test_system_prompt_option_is_read_verbatim(tiny, tmp_path):
    prompt = tmp_path / "prompt.txt"
    prompt.write_bytes(b"\nAnother judge.\r\n\n")
    model = load_reward_model(tiny["mean"], base=tiny["base"], system_prompt=prompt)
    assert model.system_prompt == "\nAnother judge.\r\n\n"
    text, _ = model.render(*_episodes()[2])
    assert text.startswith("<|im_start|>system\n\nAnother judge.\r\n\n<|im_end|>\n<|im_start|>user\n")
    own_system, _ = model.render(*_episodes()[3])
    assert "Another judge" not in own_system and own_system.startswith("<|im_start|>system\nBe brief.<|im_end|>")


def test_prepare_is_thread_safe(tiny):
    model = load_reward_model(tiny["mean"], base=tiny["base"])
    cases = _episodes() * 4
    with ThreadPoolExecutor(4) as pool:
        threaded = list(pool.map(lambda c: model.prepare(*c), cases))
    for (episode, audio), got in zip(cases, threaded):
        assert torch.equal(got.inputs["input_ids"], model.prepare(episode, audio).inputs["input_ids"])


def test_bad_episodes_raise_value_errors_naming_the_turn(tiny):
    model = load_reward_model(tiny["mean"], base=tiny["base"])
    episode = Episode((Turn("user", "hi", "u.wav"), Turn("assistant", "yo")), id="e7")
    with pytest.raises(ValueError, match=r"episode e7 turn 0: the turn has audio but no waveform"):
        model.prepare(episode, [None, None])
    with pytest.raises(ValueError, match=r"episode e7: 1 audio entries for 2 turns"):
        model.prepare(episode, [None])
    with pytest.raises(ValueError, match=r"episode e7: audio clip 0 is too short"):
        model.prepare(episode, [np.zeros(100, np.float32), None])
    with pytest.raises(ValueError, match=r"episode e7: audio clip 0 is too short \(0 samples\)"):
        model.prepare(episode, [np.zeros(0, np.float32), None])
    with pytest.raises(ValueError, match=r"episode e7: 2 audio placeholders for 1 clips"):
        model.prepare(Episode((Turn("user", "<|AUDIO|>", "u.wav"),), id="e7"), [_wave(0.5, 0)])


def test_load_errors_say_what_is_missing(tiny, tmp_path):
    root = tiny["root"]
    with pytest.raises(ModelError, match=r"needs base=<Qwen2.5-Omni directory>"):
        load_reward_model(tiny["mean"])
    with pytest.raises(ModelError, match=r"base='.*nowhere': not a directory"):
        load_reward_model(tiny["mean"], base=tmp_path / "nowhere")
    no_prompt, _ = build_tiny_sdiareward(root / "no_prompt", root / "base_np", system_prompt=None)
    with pytest.raises(ModelError, match=r"scores only reproduce with the authors' exact prompt"):
        load_reward_model(no_prompt, base=tiny["base"])
    with pytest.raises(ModelError, match=r"system_prompt=.*: no such file"):
        load_reward_model(tiny["mean"], base=tiny["base"], system_prompt=tmp_path / "missing.txt")
    no_head, _ = build_tiny_sdiareward(root / "no_head", root / "base_nh", score_head=False)
    with pytest.raises(ModelError, match=r"no score_head\.weight in \['model\.safetensors'\]"):
        load_reward_model(no_head, base=tiny["base"])
    with pytest.raises(ModelError, match=r"pooling='attn' needs pooler\.attn\.weight"):
        load_reward_model(tiny["mean"], base=tiny["base"], pooling="attn")
    with pytest.raises(ModelError, match=r"unknown pooling 'max'"):
        load_reward_model(tiny["mean"], base=tiny["base"], pooling="max")
    with pytest.raises(ModelError, match=r"unknown options \['batch'\]"):
        load_reward_model(tiny["mean"], base=tiny["base"], batch=4)
    broken = tmp_path / "broken_base"
    shutil.copytree(tiny["base"], broken)
    (broken / "preprocessor_config.json").unlink()
    with pytest.raises(ModelError, match=r"preprocessor_config\.json \(the Whisper feature extractor\) is missing"):
        load_reward_model(tiny["mean"], base=broken)


def test_claims_only_its_own_layout(tiny, tmp_path):
    trl = build_tiny_trl(tmp_path / "trl")
    (tmp_path / "empty").mkdir()
    assert SDiaRewardQwenOmni.claims(tiny["mean"])
    assert not SDiaRewardQwenOmni.claims(trl)
    assert not SDiaRewardQwenOmni.claims(tmp_path / "empty")
    assert detect_kind(tiny["mean"]) == "sdiareward-qwen-omni"
