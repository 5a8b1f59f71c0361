"""bench/reward.py, checked where it can be on a CPU: the Qwen2.5-Omni-3B shape its GPU rows build,
the analytic useful-FLOP count its MFU rows divide by time (against torch.utils.flop_counter and
the real module's weights), and the N-process loop peer (same scores as the in-process loop)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import reward as bench  # noqa: E402
from tiny_reward_models import (  # noqa: E402
    OMNI_3B_SIZES,
    OMNI_NAMED_TOKENS,
    OMNI_SPECIAL_TOKENS,
    build_tiny_sdiareward,
    byte_level_tokenizer,
    tiny_thinker_config,
)

from sdscore.models.episodes import Episode, Turn  # noqa: E402
from sdscore.models.loading import load_reward_model  # noqa: E402
from sdscore.runtime.reward.episode_scorer import RewardScorer  # noqa: E402


def test_omni_3b_shape_has_the_published_sizes():
    """Qwen2.5-Omni-3B's thinker: a 3.09 B-parameter Qwen2.5-3B language model and a 0.64 B
    Whisper-large-v3-sized audio tower (counted on the meta device: no memory is allocated)."""
    from transformers import Qwen2_5OmniThinkerModel

    config = tiny_thinker_config(byte_level_tokenizer(OMNI_SPECIAL_TOKENS, OMNI_NAMED_TOKENS), OMNI_3B_SIZES)
    with torch.device("meta"):
        thinker = Qwen2_5OmniThinkerModel._from_config(config)
    count = {name: sum(p.numel() for p in getattr(thinker, name).parameters()) for name in ("language_model", "audio_tower")}
    assert 3.05e9 < count["language_model"] < 3.12e9
    assert 0.62e9 < count["audio_tower"] < 0.65e9
    text = config.text_config
    assert (text.hidden_size, text.num_hidden_layers, text.num_attention_heads, text.num_key_value_heads) == (2048, 36, 16, 2)


def _linear_weights(module: nn.Module) -> int:
    return sum(m.weight.numel() for m in module.modules() if isinstance(m, nn.Linear))


def test_counted_flops_cover_the_language_model(tmp_path):
    """The MFU numerator: FLOPs counted over one score_pairs pass are at least 2 x the language
    model's Linear weights x the attended tokens (attention, the audio tower and padding come on
    top), and not wildly more."""
    ckpt, base = build_tiny_sdiareward(tmp_path / "ckpt", tmp_path / "base")
    model = load_reward_model(ckpt, base=base)
    rng = np.random.default_rng(0)
    wave = lambda s: (0.1 * rng.standard_normal(int(s * 16000))).astype(np.float32)  # noqa: E731
    pairs = []
    for i in range(3):
        context = (Turn("user", "how are you", wave(0.8 + 0.3 * i)),)
        pairs.append((Episode(context + (Turn("assistant", "fine thanks", wave(0.6)),), "modality", f"{i}/c"),
                      Episode(context + (Turn("assistant", "go away", wave(1.1)),), "modality", f"{i}/r")))
    tokens = sum(model.prepare(e, [t.audio for t in e.turns]).length for pair in pairs for e in pair)
    floor = 2 * _linear_weights(model.backbone.language_model) * tokens
    scorer = RewardScorer(model, device="cpu", max_batch=4)
    flops = bench.counted_flops(lambda: bench.ours(scorer, pairs))
    assert floor <= flops <= 20 * floor



def _clip(folder, name: str, seconds: float, seed: int) -> str:
    import soundfile as sf

    path = folder / name
    wave = 0.1 * np.random.default_rng(seed).standard_normal(int(seconds * 16000))
    sf.write(path, wave.astype(np.float32), 16000, subtype="FLOAT")
    return str(path)


def test_useful_flops_match_the_flop_counter_on_an_unpadded_forward(tmp_path):
    """The MFU numerator, checked against torch.utils.flop_counter on one batch-1 forward of the
    transformers thinker (eager attention everywhere, so the counter sees attention as matmuls;
    clips of whole 200-frame windows, so the audio tower runs no padding): the analytic count
    with dense attention is within 2 %, and the causal count is smaller by exactly the masked
    half of the language model's attention."""
    ckpt, base = build_tiny_sdiareward(tmp_path / "ckpt", tmp_path / "base")
    model = load_reward_model(ckpt, base=base, attn_implementation="eager")
    model.backbone.audio_tower.config._attn_implementation = "eager"
    episode = Episode((Turn("user", "how are you", _clip(tmp_path, "a.wav", 2.0, 0)),
                       Turn("assistant", "fine thanks", _clip(tmp_path, "b.wav", 4.0, 1))), "modality", "x")
    [item] = bench.prepared_items(model, [(episode, episode)])[:1]
    clips = item.inputs["features"]
    assert [f.shape[1] for f in clips] == [200, 400]
    ids = item.inputs["input_ids"][None]
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
              "input_features": torch.stack([nn.functional.pad(clips[0], (0, 200)), clips[1]]),
              "feature_attention_mask": torch.tensor([[1] * 200 + [0] * 200, [1] * 400])}

    def forward():
        hidden = model.backbone(**inputs, use_cache=False).last_hidden_state
        return bench._mean_pool_score(model, hidden, inputs["attention_mask"])

    with torch.inference_mode():
        counted = bench.counted_flops(forward)
    dense = bench.useful_flops(model, [item], causal=False)
    assert abs(dense - counted) <= 0.02 * counted
    text = model.backbone.config.text_config
    half = 2 * text.num_hidden_layers * text.hidden_size * (item.length**2 - item.length)
    assert bench.useful_flops(model, [item]) == dense - half


def test_audio_tower_flops_count_windows_not_the_300_s_buffer():
    """A 30-s clip (3000 frames) costs 15 windows of 100 tokens; attention grows with the window
    count, not with the square of the clip."""
    from types import SimpleNamespace

    config = SimpleNamespace(d_model=4, num_mel_bins=2, encoder_ffn_dim=8, encoder_layers=1, output_dim=3, n_window=100)
    one, fifteen = bench.audio_tower_flops(config, 200), bench.audio_tower_flops(config, 3000)
    assert fifteen == 15 * one
    assert bench.audio_tower_flops(config, 250) < bench.audio_tower_flops(config, 400)


def _three_pairs(tmp_path):
    """Three pairs sharing a one-turn spoken context, answers of different lengths."""
    pairs = []
    for i in range(3):
        context = (Turn("user", "hello there", _clip(tmp_path, f"u{i}.wav", 0.7 + 0.2 * i, i)),)
        pairs.append((Episode(context + (Turn("assistant", "yes", _clip(tmp_path, f"c{i}.wav", 0.9, 10 + i)),), "modality", f"{i}/c"),
                      Episode(context + (Turn("assistant", "no", _clip(tmp_path, f"r{i}.wav", 1.2, 20 + i)),), "modality", f"{i}/r")))
    return pairs


def test_process_loop_gives_the_in_process_loop_scores(tmp_path):
    """Peer (b) in 2 worker processes (model loaded per process, pairs split evenly) returns the
    one-by-one loop's scores, in pair order."""
    ckpt, base = build_tiny_sdiareward(tmp_path / "ckpt", tmp_path / "base")
    model = load_reward_model(ckpt, base=base)
    pairs = _three_pairs(tmp_path)
    expected = bench.peer_loop(model, pairs)
    with bench.ProcessLoop(ckpt, base, processes=2) as procs:
        got = procs.run(pairs)
        batched = procs.run(pairs, batched=True)  # ours, run the same way
    assert got.shape == batched.shape == (3, 2)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(batched, expected, rtol=1e-5, atol=1e-5)


def test_process_loop_runs_the_compact_model_and_ours_batched(tmp_path):
    """The compact model needs no base folder: its workers load it alone, and ours run batched in
    them gives the one-by-one loop's scores (the quiet bench run hung on workers that could not load it)."""
    from sdscore.models.pretrained import default_model_dir

    model = bench.load_reward_model(default_model_dir())
    pairs = _three_pairs(tmp_path)
    expected = bench.peer_loop(model, pairs)
    with bench.ProcessLoop(default_model_dir(), None, processes=2, max_batch=16) as procs:
        np.testing.assert_allclose(procs.run(pairs, batched=True), expected, rtol=1e-5, atol=1e-5)


def test_process_loop_whose_workers_cannot_load_fails_instead_of_hanging(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "STARTUP_SECONDS", 20)
    with pytest.raises(SystemExit, match=r"the 2 worker processes did not all load .*missing within 20 s"):
        bench.ProcessLoop(tmp_path / "missing", None, processes=2)


def test_lm_flops_per_token_are_twice_the_3b_layers_matmul_weights():
    """At Qwen2.5-Omni-3B's shape (GQA 16/2 heads), the per-token matmul FLOPs of `lm_flops` are
    2 x the Linear weights of the language model's layers as transformers builds them (meta
    device), about 5.5 GFLOP per token."""
    from transformers import Qwen2_5OmniThinkerModel

    config = tiny_thinker_config(byte_level_tokenizer(OMNI_SPECIAL_TOKENS, OMNI_NAMED_TOKENS), OMNI_3B_SIZES)
    with torch.device("meta"):
        thinker = Qwen2_5OmniThinkerModel._from_config(config)
    text = config.text_config
    attention_of_one_token = 4 * text.num_hidden_layers * text.hidden_size
    per_token = bench.lm_flops(text, 1, causal=False) - attention_of_one_token
    assert per_token == 2 * _linear_weights(thinker.language_model.layers)
    assert 5.4e9 < per_token < 5.6e9


def test_peers_a_and_c_give_the_loop_scores(tmp_path):
    """Peer (a), the authors' processor loop on 300-s padded clips, and peer (c), the batched HF
    forward with padding, score what the one-by-one loop scores (fp32, CPU)."""
    ckpt, base = build_tiny_sdiareward(tmp_path / "ckpt", tmp_path / "base")
    model = load_reward_model(ckpt, base=base)
    context = (Turn("user", "what time is it", _clip(tmp_path, "u.wav", 1.3, 0)),)
    pairs = [(Episode(context + (Turn("assistant", "noon", _clip(tmp_path, "c.wav", 0.8, 1)),), "modality", "0/c"),
              Episode(context + (Turn("assistant", "no idea at all", _clip(tmp_path, "r.wav", 2.1, 2)),), "modality", "0/r")),
             (Episode((Turn("user", "hi", _clip(tmp_path, "v.wav", 0.5, 3)),
                       Turn("assistant", "hello", _clip(tmp_path, "d.wav", 1.0, 4))), "modality", "1/c"),
              Episode((Turn("user", "hi", _clip(tmp_path, "v.wav", 0.5, 3)),
                       Turn("assistant", "bye", _clip(tmp_path, "e.wav", 0.6, 5))), "modality", "1/r"))]
    expected = bench.peer_loop(model, pairs)
    fe = bench.authors_feature_extractor(model)
    assert fe.n_samples == 300 * 16000
    np.testing.assert_allclose(bench.authors_loop(model, pairs[:1], fe), expected[:1], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(bench.hf_batched(model, pairs, 3), expected, rtol=1e-5, atol=1e-5)


def test_compact_flops_match_the_flop_counter_and_the_forward_rows_run(tmp_path):
    """The compact model's MFU numerator: torch.utils.flop_counter's count of its forward on one
    unpadded episode (the projections and the mean pooling's matmul; the counter does not see torch's
    CPU SDPA) plus bidirectional attention, 4·D per query-key pair and layer; and compact_forward_rows
    gives, per batch layout, the fused-vs-padded row and both MFU rows."""
    from sdscore.models.compact import CompactConfig, CompactRewardModel

    config = CompactConfig(n_mels=32, frames_per_token=4, d_model=32, n_layers=2, n_heads=2, ff_size=64)
    model = CompactRewardModel.from_config(config, seed=0)
    episode = Episode((Turn("user", "how are you today"), Turn("assistant", "fine, thanks")), "modality", "x")
    [item] = model.prepare_many([episode], [[None, None]], inference=True)
    batch = model.collate([item])
    with torch.inference_mode():
        counted = bench.counted_flops(lambda: model.pooled(batch))
    attention = config.n_layers * 4 * config.d_model * item.length**2
    assert counted > 0 and bench.compact_flops(config, [item.length]) == counted + attention
    pairs = [(episode, Episode((Turn("user", "hi", _clip(tmp_path, f"{i}.wav", 0.3 + 0.4 * i, i)),), "modality", "y"))
             for i in range(3)]
    rows = bench.compact_forward_rows("tiny", model, pairs, 1, 4)
    assert [r.unit for r in rows] == ["GFLOP/s"] * 6
    assert ["fused packed forward vs padded forward" in r.name for r in rows] == [True, False, False] * 2
    assert all(r.ours > 0 and r.peer > 0 for r in rows)
