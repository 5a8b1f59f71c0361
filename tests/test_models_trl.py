"""TRL sequence-classification adapter on a tiny Qwen2 reward checkpoint: equal to the HF model's logits."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from sdscore.errors import ModelError
from sdscore.models.episodes import Episode, Turn
from sdscore.models.loading import detect_kind, load_reward_model
from sdscore.models.trl_seqcls import TrlSequenceClassifier
from tiny_reward_models import build_tiny_sdiareward, build_tiny_trl

TOL = 1e-5


def _episodes() -> list[Episode]:
    return [
        Episode((Turn("user", "hello there"), Turn("assistant", "hi! how can I help you today?")), id="a"),
        Episode((Turn("user", "what's up"), Turn("assistant", "not much"), Turn("user", "tell me more"),
                 Turn("assistant", "sure: it is a long story, so get comfortable.", "a.wav")), id="b"),
        Episode((Turn("system", "Be brief."), Turn("user", "ok?"), Turn("assistant", "ok")), id="c"),
        Episode((Turn("assistant", "x"),), id="d"),
    ]


@pytest.fixture(scope="module")
def trl_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("trl")
    return {"chat": build_tiny_trl(root / "chat", seed=0), "plain": build_tiny_trl(root / "plain", seed=3,
                                                                                  chat_template=False)}


def _hf_scores(folder, episodes, system=None) -> torch.Tensor:
    """The checkpoint read as TRL does: template over the messages, model(input_ids, attention_mask).logits."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(folder).eval()
    scores = []
    for episode in episodes:
        messages = [{"role": t.role, "content": t.text} for t in episode.turns]
        if system is not None and messages[0]["role"] != "system":
            messages.insert(0, {"role": "system", "content": system})
        if tokenizer.chat_template:
            ids = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"]
        else:
            ids = tokenizer("\n".join(m["content"] for m in messages))["input_ids"] + [tokenizer.eos_token_id]
        ids = torch.tensor([ids])
        with torch.no_grad():
            scores.append(model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[:, 0])
    return torch.cat(scores)


def _ours(model, episodes, batched: bool) -> torch.Tensor:
    prepared = [model.prepare(e, [None] * len(e.turns)) for e in episodes]
    with torch.no_grad():
        if batched:
            return model(model.collate(prepared))
        return torch.cat([model(model.collate([p])) for p in prepared])


@pytest.mark.parametrize("layout", ["chat", "plain"])
def test_scores_equal_the_hf_classifier(trl_dirs, layout):
    episodes = _episodes()
    model = load_reward_model(trl_dirs[layout])
    assert isinstance(model, TrlSequenceClassifier)
    expected = _hf_scores(trl_dirs[layout], episodes)
    assert expected.abs().min() > 1e-3  # not trivially zero
    torch.testing.assert_close(_ours(model, episodes, batched=False), expected, atol=TOL, rtol=0)


@pytest.mark.parametrize("layout", ["chat", "plain"])
def test_batch_with_left_padding_equals_one_by_one(trl_dirs, layout):
    episodes = _episodes()
    model = load_reward_model(trl_dirs[layout])
    prepared = [model.prepare(e, [None] * len(e.turns)) for e in episodes]
    assert len({p.length for p in prepared}) == len(prepared)
    assert model.collate(prepared)["attention_mask"][:, -1].all()
    one_by_one = _ours(model, episodes, batched=False)
    torch.testing.assert_close(_ours(model, episodes, batched=True), one_by_one, atol=TOL, rtol=0)
    torch.testing.assert_close(_ours(model, episodes[::-1], batched=True), one_by_one.flip(0), atol=TOL, rtol=0)


def test_reward_is_read_at_the_last_non_pad_token(trl_dirs):
    """A sequence ending in the pad token (pad == eos setups) is scored where transformers scores it."""
    model = load_reward_model(trl_dirs["chat"])
    pad = model.reward_pad_id
    ids = torch.tensor([model.token_ids(_episodes()[0]) + [pad, pad]])
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(trl_dirs["chat"]).eval()
    with torch.no_grad():
        expected = hf(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[:, 0]
        ours = model({"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    torch.testing.assert_close(ours, expected, atol=TOL, rtol=0)


def test_system_prompt_file_is_inserted(trl_dirs, tmp_path):
    prompt = tmp_path / "judge.txt"
    prompt.write_text("Judge the last reply.\n", encoding="utf-8")
    model = load_reward_model(trl_dirs["chat"], system_prompt=prompt)
    episodes = _episodes()
    expected = _hf_scores(trl_dirs["chat"], episodes, system="Judge the last reply.\n")
    torch.testing.assert_close(_ours(model, episodes, batched=True), expected, atol=TOL, rtol=0)
    assert "Judge the last reply" not in model.tokenizer.decode(model.token_ids(episodes[2]))  # own system turn


def test_head_is_the_checkpoint_score_layer(trl_dirs):
    model = load_reward_model(trl_dirs["chat"])
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(trl_dirs["chat"])
    assert set(model.head_state()) == {"score_head.weight"}
    torch.testing.assert_close(model.head_state()["score_head.weight"], hf.score.weight.detach())
    assert model.hidden_size == 32 and model.pooler.kind == "last"


def test_audio_only_turn_is_an_error_naming_episode_and_turn(trl_dirs):
    model = load_reward_model(trl_dirs["chat"])
    episode = Episode((Turn("user", "hi"), Turn("assistant", None, "reply.wav")), id="p9/chosen")
    with pytest.raises(ValueError, match=r"episode p9/chosen turn 1: no text \(this model reads text only"):
        model.prepare(episode, [None, np.zeros(160, np.float32)])


def test_load_errors(trl_dirs, tmp_path):
    with pytest.raises(ModelError, match=r"unknown options \['base'\]"):
        load_reward_model(trl_dirs["chat"], base=tmp_path)
    with pytest.raises(ModelError, match=r"system_prompt=.*: no such file"):
        load_reward_model(trl_dirs["chat"], system_prompt=tmp_path / "nope.txt")
    two = tmp_path / "two_labels"
    two.mkdir()
    config = json.loads((trl_dirs["chat"] / "config.json").read_text())
    config["id2label"] = {"0": "bad", "1": "good"}
    config.pop("num_labels", None)
    (two / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match=r"num_labels is 2; a reward model has num_labels=1"):
        load_reward_model(two)
    no_tok = tmp_path / "no_tokenizer"
    no_tok.mkdir()
    for name in ("config.json", "model.safetensors"):
        (no_tok / name).write_bytes((trl_dirs["chat"] / name).read_bytes())
    with pytest.raises(ModelError, match=r"cannot load the tokenizer saved with the model"):
        load_reward_model(no_tok)
    with pytest.raises(ModelError, match=r"config\.json is missing"):
        TrlSequenceClassifier.from_dir(tmp_path / "nowhere")


def test_claims_only_its_own_layout(trl_dirs, tmp_path):
    ckpt, _ = build_tiny_sdiareward(tmp_path / "sdia", tmp_path / "base")
    (tmp_path / "empty").mkdir()
    assert TrlSequenceClassifier.claims(trl_dirs["chat"])
    assert not TrlSequenceClassifier.claims(ckpt)
    assert not TrlSequenceClassifier.claims(tmp_path / "empty")
    assert detect_kind(trl_dirs["plain"]) == "trl-seqcls"
