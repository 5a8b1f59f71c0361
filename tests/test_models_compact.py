"""Compact reward model: log-mel vs librosa, padding invariance, truncation, save/load, errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import librosa
import numpy as np
import pytest
import torch

from sdscore.errors import AudioError, ModelError
from sdscore.models import byte_tokens as bt
from sdscore.models.compact import CONFIG_FILE, WEIGHTS_FILE, CompactConfig, CompactRewardModel, PackedRows
from sdscore.models.episodes import Episode, Turn
from sdscore.models.loading import detect_kind, load_reward_model
from sdscore.models.log_mel import compress, log_mel, mel_filterbank, mel_power

SR = 16000
SMALL = CompactConfig(n_mels=32, frames_per_token=4, d_model=32, n_layers=2, n_heads=2, ff_size=64)


def tone(seconds: float, hz: float = 220.0, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SR)) / SR
    return (0.5 * np.sin(2 * np.pi * hz * t) + 0.01 * rng.standard_normal(t.size)).astype(np.float32)


def ragged_episodes() -> list[tuple[Episode, list]]:
    """Text-only, audio-only, empty-text, 0.1 s clip, differing turn counts and criteria."""
    return [
        (Episode((Turn("user", "Hello, how are you?"), Turn("assistant", "Fine, thanks!")), "colloquialness", "text"),
         [None, None]),
        (Episode((Turn("user", audio="a.wav"), Turn("assistant", audio="b.wav")), "modality", "audio"),
         [tone(0.7, 180), tone(1.3, 300, 1)]),
        (Episode((Turn("user", "", "c.wav"),), None, "empty-text"), [tone(0.5, 250, 2)]),
        (Episode((Turn("system", "judge"), Turn("user", "short clip", "d.wav"), Turn("assistant", "ok", "e.wav"),
                  Turn("user", "bye"), Turn("assistant", "Ünïcode ✓", "f.wav")), "modality", "long"),
         [None, tone(0.1, 400, 3), tone(0.9, 150, 4), None, tone(0.4, 500, 5)]),
    ]


@pytest.fixture(scope="module")
def model() -> CompactRewardModel:
    return CompactRewardModel.from_config(SMALL, seed=1)


def scores(model: CompactRewardModel, pairs) -> torch.Tensor:
    with torch.no_grad():
        return model(model.collate([model.prepare(ep, audio) for ep, audio in pairs]))


# --- front end -----------------------------------------------------------------------------


def test_mel_filterbank_matches_librosa():
    ours = mel_filterbank(SR, 400, 64, 0.0, 8000.0)
    ref = librosa.filters.mel(sr=SR, n_fft=400, n_mels=64, fmin=0.0, fmax=8000.0)
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-6 * ref.max())


@pytest.mark.parametrize("seconds", [0.1, 1.37])
def test_mel_power_and_log_mel_match_librosa(seconds):
    x = tone(seconds, 330.0) + 0.05 * np.random.default_rng(5).standard_normal(int(seconds * SR)).astype(np.float32)
    ours = mel_power(x, SR, 400, 160, 64, 0.0, 8000.0)
    ref = librosa.feature.melspectrogram(
        y=x, sr=SR, n_fft=400, hop_length=160, n_mels=64, fmin=0.0, fmax=8000.0,
        center=True, pad_mode="constant", power=2.0,
    )
    assert ours.shape == ref.shape
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-5 * ref.max())
    np.testing.assert_allclose(log_mel(x, SR, 400, 160, 64, 0.0, 8000.0), compress(ref).T, atol=1e-4)


def test_compress_floors_80_db_below_peak():
    out = compress(np.array([[1.0, 1e-3, 0.0]]))
    np.testing.assert_allclose(out, [[1.0, 0.25, -1.0]])  # log10 0, -3, floor -8; then (x + 4) / 4


# --- layout --------------------------------------------------------------------------------


def test_prepare_layout_interleaves_turns(model):
    ep = Episode((Turn("user", "hi"), Turn("assistant", "hello", "x.wav")), "modality")
    item = model.prepare(ep, [None, tone(0.1)])
    ids = item.inputs["token_ids"]
    pad, p = bt.PAD, SMALL.bytes_per_token
    n_audio = -(-11 // SMALL.frames_per_token)  # 0.1 s → 11 frames (center padding) → 2 tokens

    def special(i):
        return [i] + [pad] * (p - 1)

    expected = [
        special(bt.CRITERION["modality"]),
        special(bt.ROLE["user"]), [*b"hi", pad, pad], special(bt.TURN_END),
        special(bt.ROLE["assistant"]), [*b"hell"], [ord("o"), pad, pad, pad],
        *[special(bt.AUDIO)] * n_audio, special(bt.TURN_END),
    ]
    assert ids.tolist() == expected
    assert item.length == len(expected)
    assert item.inputs["segment_ids"].tolist() == [0] + [1] * 3 + [2] * (len(expected) - 4)
    assert item.inputs["audio_frames"].shape == (n_audio, SMALL.frame_size)


def test_text_patches_of_multibyte_and_empty_text(model):
    p, pad = SMALL.bytes_per_token, bt.PAD
    ep = Episode((Turn("user", "é✓"), Turn("assistant", ""), Turn("user", audio="x.wav")), None)
    ids = model.prepare(ep, [None, None, None]).inputs["token_ids"].tolist()
    assert p == 4 and ids[2:4] == [[0xC3, 0xA9, 0xE2, 0x9C], [0x93, pad, pad, pad]]  # 2 + 3 UTF-8 bytes → 2 patches
    assert [row[0] for row in ids] == [bt.CRITERION[None], bt.ROLE["user"], 0xC3, 0x93, bt.TURN_END,
                                      bt.ROLE["assistant"], bt.TURN_END, bt.ROLE["user"], bt.TURN_END]


def test_truncation_keeps_the_end():
    long_text = "word " * 200
    ep = Episode((Turn("user", long_text, "a.wav"), Turn("assistant", "final answer", "b.wav")), "modality")
    audio = [tone(0.5), tone(0.3, 500)]
    full = CompactRewardModel.from_config(SMALL).prepare(ep, audio)
    cut = CompactRewardModel.from_config(CompactConfig(**{**SMALL.__dict__, "max_len": 40})).prepare(ep, audio)
    assert cut.length == 40
    ids, full_ids = cut.inputs["token_ids"], full.inputs["token_ids"]
    assert ids[0, 0] == bt.CRITERION["modality"]
    assert ids[1:].tolist() == full_ids[-39:].tolist()
    n_audio = int((ids[:, 0] == bt.AUDIO).sum())
    np.testing.assert_array_equal(cut.inputs["audio_frames"], full.inputs["audio_frames"][-n_audio:])
    assert cut.inputs["segment_ids"][1:].tolist() == full.inputs["segment_ids"][-39:].tolist()


def test_max_clip_seconds_cuts_each_clip():
    m = CompactRewardModel.from_config(CompactConfig(**{**SMALL.__dict__, "max_clip_seconds": 0.5}))
    x = tone(2.0)
    np.testing.assert_array_equal(m.audio_tokens(x), m.audio_tokens(x[:8000]))


def test_torch_tensor_audio_and_empty_clip(model):
    x = tone(0.4)
    np.testing.assert_array_equal(model.audio_tokens(torch.from_numpy(x)), model.audio_tokens(x))
    assert model.audio_tokens(np.zeros(0, np.float32)).shape == (0, SMALL.frame_size)


def test_prepare_many_featurises_a_shared_clip_once(model, monkeypatch):
    """A pair's context clip (the same array in both episodes) goes through the front end once; a
    bad episode's error stays in its slot and the features equal episode-by-episode prepare."""
    context, final_a, final_b = tone(0.6, 200), tone(0.3, 300, 1), tone(0.4, 350, 2)
    chosen = Episode((Turn("user", "q", "c.wav"), Turn("assistant", "a", "a.wav")), "modality", "chosen")
    rejected = Episode((Turn("user", "q", "c.wav"), Turn("assistant", "b", "b.wav")), "modality", "rejected")
    broken = Episode((Turn("user", "q", "c.wav"),), "modality", "broken")
    seen = []
    original = model._stacked
    monkeypatch.setattr(model, "_stacked", lambda waves, *rest: seen.append(len(waves)) or original(waves, *rest))
    got = model.prepare_many([chosen, broken, rejected],
                             [[context, final_a], [np.full(100, np.nan, np.float32)], [context, final_b]])
    assert seen == [3]
    assert isinstance(got[1], AudioError) and "episode broken turn 0" in str(got[1])
    monkeypatch.undo()
    for item, episode, waves in ((got[0], chosen, [context, final_a]), (got[2], rejected, [context, final_b])):
        alone = model.prepare(episode, waves)
        for key, value in alone.inputs.items():
            np.testing.assert_array_equal(item.inputs[key], value)


def test_inference_prepare_projects_each_distinct_clip_once(model, monkeypatch):
    """prepare_many(inference=True) on the CPU carries frame_proj outputs ("audio_embeds"), one
    projection per chunk of distinct clips; collate + hidden give the states of the plain path."""
    context, final_a, final_b = tone(0.6, 200), tone(0.3, 300, 1), tone(0.4, 350, 2)
    chosen = Episode((Turn("user", "q", "c.wav"), Turn("assistant", "a", "a.wav")), "modality", "chosen")
    rejected = Episode((Turn("user", "q", "c.wav"), Turn("assistant", "b", "b.wav")), "modality", "rejected")
    silent = Episode((Turn("user", "no audio here"),), "colloquialness", "silent")
    episodes, audio = [chosen, rejected, silent], [[context, final_a], [context, final_b], [None]]
    rows = []
    original = model._project_frames
    monkeypatch.setattr(model, "_project_frames", lambda frames: rows.append(len(frames)) or original(frames))
    fast = model.prepare_many(episodes, audio, inference=True)
    monkeypatch.undo()
    plain = model.prepare_many(episodes, audio)
    n_distinct = sum(len(model.audio_tokens(w)) for w in (context, final_a, final_b))
    assert rows == [0, n_distinct]  # the empty placeholder, then one chunk of the three clips
    for f, p in zip(fast, plain):
        assert set(f.inputs) == {"token_ids", "segment_ids", "audio_embeds"} and f.length == p.length
        assert f.inputs["audio_embeds"].shape == (len(p.inputs["audio_frames"]), model.config.d_model)
    with torch.inference_mode():
        got, _ = model.hidden(model.collate(fast))
        want, _ = model.hidden(model.collate(plain))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="mixes items prepared with and without inference=True"):
        model.collate([fast[0], plain[1]])
    with pytest.raises(ValueError, match="collate_dense needs items prepared with inference=False"):
        model.collate_dense(fast)


# --- padding invariance and batching ---------------------------------------------------------


@pytest.mark.parametrize("side", ["left", "right"])
def test_ragged_batch_equals_one_by_one(model, side):
    model.padding_side = side
    try:
        pairs = ragged_episodes()
        batched = scores(model, pairs)
        single = torch.cat([scores(model, [p]) for p in pairs])
    finally:
        model.padding_side = "right"
    torch.testing.assert_close(batched, single, rtol=0, atol=1e-5)
    assert torch.isfinite(batched).all()


def test_left_and_right_padding_give_the_same_scores(model):
    pairs = ragged_episodes()
    right = scores(model, pairs)
    model.padding_side = "left"
    try:
        left = scores(model, pairs)
        pooled_left = model.pooled(model.collate([model.prepare(e, a) for e, a in pairs]))
    finally:
        model.padding_side = "right"
    pooled_right = model.pooled(model.collate([model.prepare(e, a) for e, a in pairs]))
    torch.testing.assert_close(left, right, rtol=0, atol=1e-5)
    torch.testing.assert_close(pooled_left, pooled_right, rtol=0, atol=1e-5)


@pytest.mark.parametrize("pooling", ["attn", "last"])
def test_other_poolings_are_padding_invariant(pooling):
    m = CompactRewardModel.from_config(CompactConfig(**{**SMALL.__dict__, "pooling": pooling}), seed=2)
    pairs = ragged_episodes()
    single = torch.cat([scores(m, [p]) for p in pairs])
    m.padding_side = "left"
    torch.testing.assert_close(scores(m, pairs), single, rtol=0, atol=1e-5)

@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("rows", [[0, 1, 2, 3], [0], [3, 0, 1]], ids=["all", "no-audio-at-all", "reordered"])
def test_packed_and_dense_audio_frames_give_the_same_states(model, side, rows):
    """collate packs the frames of the audio positions [N, F]; collate_dense (the exported layout)
    places them [B, L, F]: the same hidden states, and the packed rows are the dense audio rows."""
    pairs = [ragged_episodes()[r] for r in rows]
    items = [model.prepare(e, a) for e, a in pairs]
    model.padding_side = side
    try:
        packed, dense = model.collate(items), model.collate_dense(items)
        with torch.no_grad():
            (h_packed, mask), (h_dense, _) = model.hidden(packed), model.hidden(dense)
    finally:
        model.padding_side = "right"
    is_audio = dense["token_ids"][..., 0] == bt.AUDIO
    assert packed["audio_frames"].shape == (int(is_audio.sum()), SMALL.frame_size)
    torch.testing.assert_close(packed["audio_frames"], dense["audio_frames"][is_audio], rtol=0, atol=0)
    assert not dense["audio_frames"][~is_audio].any()
    keep = mask.bool()
    torch.testing.assert_close(h_packed[keep], h_dense[keep], rtol=0, atol=1e-6)
    for key in ("token_ids", "segment_ids", "attention_mask"):
        assert torch.equal(packed[key], dense[key])



@pytest.mark.parametrize("side", ["left", "right"])
def test_span_attention_path_gives_the_sdpa_states(model, side):
    """inference_pooled (what the scorer runs: attention in the compiled core on the CPU) equals
    pooled (torch SDPA over the padded batch), and one-by-one equals batched on that path too."""
    pairs = ragged_episodes()
    model.padding_side = side
    try:
        batch = model.collate([model.prepare(e, a) for e, a in pairs])
        with torch.inference_mode():
            fast, sdpa = model.inference_pooled(batch), model.pooled(batch)
            (h_span, mask), (h_sdpa, _) = model.hidden(batch, attention="span"), model.hidden(batch)
            single = torch.cat([model.inference_pooled(model.collate([model.prepare(e, a)])) for e, a in pairs])
    finally:
        model.padding_side = "right"
    torch.testing.assert_close(fast, sdpa, rtol=0, atol=1e-5)
    torch.testing.assert_close(h_span[mask.bool()], h_sdpa[mask.bool()], rtol=0, atol=1e-5)
    torch.testing.assert_close(single, fast, rtol=0, atol=1e-5)


@pytest.mark.parametrize("pooling", ["mean", "attn", "last"])
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("inference", [True, False], ids=["audio-embeds", "audio-frames"])
def test_packed_forward_equals_the_padded_forward(side, pooling, inference):
    """The fused forward over the batch's tokens only (PackedRows) gives the padded span-attention
    forward's pooled states and the SDPA ones, and batched equals one-by-one on it."""
    m = CompactRewardModel.from_config(CompactConfig(**{**SMALL.__dict__, "pooling": pooling}), seed=3)
    pairs = ragged_episodes()
    m.padding_side = side
    items = [item for item in m.prepare_many([e for e, _ in pairs], [a for _, a in pairs], inference=inference)]
    batch = m.collate(items)
    rows = PackedRows.of(batch["attention_mask"])
    assert rows is not None and rows.grid is not None and not rows.on_grid  # ragged: the tokens, copied to the grid and back
    with torch.inference_mode():
        packed = m.packed_pooled(batch, rows)
        hidden, mask = m.hidden(batch, attention="span")
        padded, sdpa = m.pooler(hidden, mask).float(), m.pooled(batch)
        single = torch.cat([m.packed_pooled(one, PackedRows.of(one["attention_mask"]))
                            for one in (m.collate([item]) for item in items)])
    torch.testing.assert_close(packed, padded, rtol=0, atol=1e-5)
    torch.testing.assert_close(packed, sdpa, rtol=0, atol=1e-5)
    torch.testing.assert_close(single, packed, rtol=0, atol=1e-5)


def test_packed_rows_lay_out_each_row_once():
    right = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 0, 0]])
    rows = PackedRows.of(right)
    assert rows.flat.tolist() == [0, 1, 2, 4, 12, 13]
    assert rows.rank.tolist() == [0, 1, 2, 0, 0, 1] and rows.offsets.tolist() == [0, 3, 4, 4, 6]
    assert rows.grid.tolist() == [0, 1, 2, 3, 9, 10]  # right-aligned [4 rows, 3 wide]
    left = PackedRows.of(right.flip(1))
    assert left.flat.tolist() == [1, 2, 3, 7, 14, 15] and left.rank.tolist() == rows.rank.tolist()
    assert rows.cells.tolist() == [0, 1, 2, 4, 5, 5, 8, 8, 8, 12, 13, 14]  # padding cells: a padding position of the row
    assert left.cells.tolist() == [1, 2, 3, 7, 4, 4, 8, 8, 8, 14, 15, 12] and rows.cell_rank.tolist() == [0, 1, 2] * 4
    full = PackedRows.of(torch.ones(2, 3, dtype=torch.bool))
    assert full.grid is None and not full.on_grid  # the tokens are the grid: no copies
    assert PackedRows.of(torch.tensor([[1, 0, 1]])) is None  # a hole: not one run
    assert PackedRows.of(torch.zeros(2, 3)) is None  # nothing to attend
    assert not rows.on_grid  # 6 tokens in a 4 x 3 grid: half of it padding, the forward works on the tokens
    assert PackedRows.of(torch.tensor([[1] * 10, [1] * 9 + [0]])).on_grid  # 5 % padding: on the grid's cells


@pytest.mark.parametrize("side", ["left", "right"])
def test_grid_forward_equals_the_padded_forward(model, side):
    """A batch with little padding runs on the grid's cells (padding cells included): the same pooled
    states as the padded forward and as each episode alone."""
    def episode(text: str) -> Episode:
        return Episode((Turn("user", text, "a.wav"), Turn("assistant", "fine, thanks")), "modality", text)

    model.padding_side = side
    try:
        items = [model.prepare(episode(text), [tone(0.8, 220), None]) for text in ["hello there, how are you?"] * 5 + ["hello"]]
        batch = model.collate(items)
        rows = PackedRows.of(batch["attention_mask"])
        assert rows.on_grid and rows.grid is not None
        with torch.inference_mode():
            grid = model.packed_pooled(batch, rows)
            hidden, mask = model.hidden(batch, attention="span")
            single = torch.cat([model.inference_pooled(model.collate([item])) for item in items])
    finally:
        model.padding_side = "right"
    torch.testing.assert_close(grid, model.pooler(hidden, mask).float(), rtol=0, atol=1e-5)
    torch.testing.assert_close(single, grid, rtol=0, atol=1e-5)


def test_inference_pooled_takes_the_fused_forward_for_span_masks(model, monkeypatch):
    pairs = ragged_episodes()
    calls = []
    real = model.packed_pooled
    monkeypatch.setattr(model, "packed_pooled", lambda batch, rows: calls.append(rows) or real(batch, rows))
    with torch.inference_mode():
        model.inference_pooled(model.collate([model.prepare(e, a) for e, a in pairs]))  # ragged
        model.inference_pooled(model.collate([model.prepare(*pairs[1])]))  # one row: no padding
        model.inference_pooled(model.collate_dense([model.prepare(*pairs[1])]))  # dense frames: the padded path
    assert len(calls) == 2 and calls[1].grid is None


def test_span_attention_falls_back_to_sdpa_for_a_mask_with_holes(model):
    batch = model.collate([model.prepare(e, a) for e, a in ragged_episodes()])
    batch["attention_mask"] = batch["attention_mask"].clone()
    batch["attention_mask"][3, 2] = 0  # not one run of positions: span attention cannot express it
    with torch.inference_mode():
        (h_span, mask), (h_sdpa, _) = model.hidden(batch, attention="span"), model.hidden(batch)
    assert torch.equal(h_span, h_sdpa)
    with pytest.raises(ValueError, match="attention must be 'sdpa' or 'span'"):
        model.hidden(batch, attention="flash")


# --- disk ------------------------------------------------------------------------------------


def test_same_seed_same_weights_and_global_rng_untouched():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = CompactRewardModel.from_config(SMALL, seed=7)
    assert torch.equal(torch.rand(1), before)
    b = CompactRewardModel.from_config(SMALL, seed=7)
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(x, y), name


def test_save_load_round_trip_gives_the_same_scores(model, tmp_path):
    model.save_pretrained(tmp_path / "m", card={"trained_on": "nothing (random weights)"})
    assert detect_kind(tmp_path / "m") == "compact"
    loaded = load_reward_model(tmp_path / "m")
    assert isinstance(loaded, CompactRewardModel) and not loaded.training
    assert loaded.config == model.config and loaded.card["trained_on"] == "nothing (random weights)"
    pairs = ragged_episodes()
    torch.testing.assert_close(scores(loaded, pairs), scores(model, pairs), rtol=0, atol=1e-6)
    meta = json.loads((tmp_path / "m" / CONFIG_FILE).read_text())
    assert meta["kind"] == "compact" and meta["pooling"] == "mean" and meta["sample_rate"] == SR
    assert meta["config"]["d_model"] == SMALL.d_model
    left = load_reward_model(tmp_path / "m", padding_side="left")
    assert left.padding_side == "left"
    torch.testing.assert_close(scores(left, pairs), scores(model, pairs), rtol=0, atol=1e-5)


def test_default_model_is_small_on_disk(tmp_path):
    CompactRewardModel.from_config().save_pretrained(tmp_path)
    assert (tmp_path / WEIGHTS_FILE).stat().st_size < 2 * 1024 * 1024


# --- errors ----------------------------------------------------------------------------------


@pytest.fixture()
def saved(model, tmp_path):
    return model.save_pretrained(tmp_path / "saved")


def test_missing_directory(tmp_path):
    with pytest.raises(ModelError, match="not a directory"):
        CompactRewardModel.from_dir(tmp_path / "nope")


def test_missing_config(saved):
    (saved / CONFIG_FILE).unlink()
    with pytest.raises(ModelError, match="sdscore_reward.json is missing"):
        CompactRewardModel.from_dir(saved)
    with pytest.raises(ModelError, match="no reward model layout recognised"):
        load_reward_model(saved)


def test_corrupt_config(saved):
    (saved / CONFIG_FILE).write_text("{not json")
    with pytest.raises(ModelError, match="corrupt JSON"):
        load_reward_model(saved)


def test_wrong_kind_and_future_version(saved):
    meta = json.loads((saved / CONFIG_FILE).read_text())
    (saved / CONFIG_FILE).write_text(json.dumps({**meta, "version": 99}))
    with pytest.raises(ModelError, match="format version 99 is not supported"):
        load_reward_model(saved)
    (saved / CONFIG_FILE).write_text(json.dumps({**meta, "kind": "other"}))
    with pytest.raises(ModelError, match="kind is 'other', expected 'compact'"):
        CompactRewardModel.from_dir(saved)


def with_config(saved, **changes) -> None:
    """Rewrite the saved model's config with `changes` (everything else as saved)."""
    meta = json.loads((saved / CONFIG_FILE).read_text())
    (saved / CONFIG_FILE).write_text(json.dumps({**meta, "config": {**meta["config"], **changes}}))


def test_bad_config_values(saved):
    with_config(saved, n_layers=0)
    with pytest.raises(ModelError, match="n_layers must be a positive integer"):
        load_reward_model(saved)
    with_config(saved, n_layers=SMALL.n_layers, bogus=1)
    with pytest.raises(ModelError, match=r"unknown compact config keys \['bogus'\]"):
        load_reward_model(saved)


def test_missing_and_corrupt_weights(saved):
    (saved / WEIGHTS_FILE).write_bytes(b"\x00garbage")
    with pytest.raises(ModelError, match="corrupt safetensors file"):
        load_reward_model(saved)
    (saved / WEIGHTS_FILE).unlink()
    with pytest.raises(ModelError, match="model.safetensors is missing"):
        load_reward_model(saved)


def test_weights_that_do_not_fit_the_config(saved):
    with_config(saved, n_layers=3)
    with pytest.raises(ModelError, match="weights do not fit the config: missing"):
        load_reward_model(saved)
    with_config(saved, n_layers=SMALL.n_layers, ff_size=48)
    with pytest.raises(ModelError, match="has shape .* the config needs"):
        load_reward_model(saved)


def test_unknown_load_option(saved):
    with pytest.raises(ModelError, match=r"unknown options \['flash'\]"):
        load_reward_model(saved, flash=True)


def test_bad_audio_is_named(model):
    ep = Episode((Turn("user", "x", "a.wav"),), None, "pair-7/chosen")
    with pytest.raises(AudioError, match="episode pair-7/chosen turn 0: audio has NaN or Inf"):
        model.prepare(ep, [np.array([0.0, np.nan] * 100, np.float32)])
    with pytest.raises(AudioError, match=r"mono 1-D waveform, got shape \(2, 100\)"):
        model.prepare(ep, [np.zeros((2, 100), np.float32)])
    with pytest.raises(ValueError, match="1 turns but 2 audio slots"):
        model.prepare(ep, [None, None])
    with pytest.raises(ValueError, match="at least one prepared episode"):
        model.collate([])


def test_bad_config_is_refused():
    with pytest.raises(ValueError, match="d_model 30 must be a multiple of 2 \\* n_heads"):
        CompactConfig(d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="padding_side must be 'left' or 'right'"):
        CompactConfig(padding_side="middle")
    with pytest.raises(ValueError, match="unknown pooling 'max'"):
        CompactConfig(pooling="max")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("pooling", ["mean", "attn", "last"])
def test_cuda_scores_match_cpu(pooling):
    m = CompactRewardModel.from_config(CompactConfig(**{**SMALL.__dict__, "pooling": pooling}), seed=4)
    pairs = ragged_episodes()
    cpu = scores(m, pairs)
    batch = m.collate([m.prepare(ep, audio) for ep, audio in pairs])
    with torch.no_grad():
        gpu = m.cuda()({k: v.cuda() for k, v in batch.items()}).cpu()
    torch.testing.assert_close(gpu, cpu, rtol=0, atol=1e-4)


def test_bundled_demo_model_loads_and_prefers_natural_speech():
    from sdscore.models.compact import bundled_model_dir

    folder = bundled_model_dir()
    assert (folder / WEIGHTS_FILE).stat().st_size < 2 * 1024 * 1024
    m = load_reward_model(folder)
    card = m.card
    assert card["heldout_accuracy"]["by_subset"] and "demo" in card["description"]
    ep = Episode((Turn("user", "Hi there, um, how's it going?"), Turn("assistant", "Oh, pretty good, you know!")),
                 "colloquialness")
    assert torch.isfinite(scores(m, [(ep, [None, None])])).all()
    with pytest.raises(ModelError, match="no bundled reward model 'nope'; bundled: \\['compact-synth'\\]"):
        bundled_model_dir("nope")


def test_batched_front_end_equals_clip_by_clip():
    """stacked_log_mel_many over ragged clips == mel_power + silence padding + compress per clip."""
    from sdscore.models.log_mel import stacked_log_mel_many

    rng = np.random.default_rng(5)
    k, hop = 8, 160
    lengths = [1, hop - 1, hop, hop + 1, 7 * hop, 8 * hop - 1, 8 * hop, 16000, 23456, 3, 40000, 200000]
    waves = [(0.1 * rng.standard_normal(n) * rng.uniform(0.01, 3)).astype(np.float32) for n in lengths]
    waves.insert(4, np.zeros(0, np.float32))
    got = stacked_log_mel_many(waves, SR, 400, hop, 64, 0.0, 8000.0, 80.0, k)
    for wave, tokens in zip(waves, got):
        if wave.size == 0:
            assert tokens.shape == (0, k * 64)
            continue
        mel = mel_power(wave, SR, 400, hop, 64, 0.0, 8000.0)
        n_tokens = -(-mel.shape[1] // k)
        mel = np.pad(mel, ((0, 0), (0, n_tokens * k - mel.shape[1])))
        expected = compress(mel, 80.0).T.reshape(n_tokens, k * 64)
        np.testing.assert_allclose(tokens, expected, atol=2e-5, rtol=0)


def _ragged_spectrum(seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """A random (re, im) spectrum of clips of 1, 7, 8, 31, 32, 33 and 100 frames (the vector mel
    pass takes 32 frames at a time) with very different levels."""
    rng = np.random.default_rng(seed)
    counts = np.array([1, 7, 8, 31, 32, 33, 100])
    spec = rng.standard_normal((counts.sum(), 201, 2)).astype(np.float32)
    spec *= np.repeat(rng.uniform(1e-4, 10, len(counts)), counts)[:, None, None].astype(np.float32)
    return spec, counts


def test_front_end_core_thread_counts_agree():
    """Clips spread over threads give bit-identical frames and tokens."""
    from sdscore import _core

    spec, counts = _ragged_spectrum()
    filters = mel_filterbank(SR, 400, 64, 0.0, 8000.0)
    one = _core.log_mel_tokens(spec, counts, filters, 80.0, 8, 1)
    for threads in (2, 3, 16):
        np.testing.assert_array_equal(_core.log_mel_tokens(spec, counts, filters, 80.0, 8, threads), one)
    waves = [np.random.default_rng(n).standard_normal(n).astype(np.float32) for n in (0, 1, 399, 4000, 16001)]
    window = np.hanning(400).astype(np.float32)
    np.testing.assert_array_equal(_core.stft_frames(waves, 400, 160, window, 3), _core.stft_frames(waves, 400, 160, window, 1))


def test_front_end_portable_loops_agree_with_the_vector_kernel(tmp_path):
    """SDSCORE_DISABLE_SIMD=1 forces the one-frame-at-a-time mel loop; both give the same tokens."""
    from sdscore import _core

    spec, counts = _ragged_spectrum(4)
    np.save(tmp_path / "spec.npy", spec)
    np.save(tmp_path / "counts.npy", counts)
    np.save(tmp_path / "filters.npy", mel_filterbank(SR, 400, 64, 0.0, 8000.0))
    code = (
        "import sys, numpy as np; from sdscore import _core; d = sys.argv[1]; print(_core.simd_isa()); "
        "np.save(d + '/out.npy', _core.log_mel_tokens(np.load(d + '/spec.npy'), np.load(d + '/counts.npy'), "
        "np.load(d + '/filters.npy'), 80.0, 8, 2))"
    )
    env = dict(os.environ, SDSCORE_DISABLE_SIMD="1")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, check=True, capture_output=True,
                         text=True, timeout=120)
    assert out.stdout.strip() == "generic"
    vector = _core.log_mel_tokens(spec, counts, np.load(tmp_path / "filters.npy"), 80.0, 8, 2)
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), vector, atol=1e-6, rtol=0)


def _two_step_tokens(waves, n_fft, hop, window, filters, k=8):
    """stft_frames + torch.fft.rfft + log_mel_tokens: the core's path without its own FFT."""
    from sdscore import _core

    spec = torch.view_as_real(torch.fft.rfft(torch.from_numpy(_core.stft_frames(waves, n_fft, hop, window)), dim=-1))
    counts = np.array([1 + len(w) // hop for w in waves], dtype=np.int64)
    return _core.log_mel_tokens(spec.numpy(), counts, filters, 80.0, k)


@pytest.mark.parametrize("n_fft, hop", [(400, 160), (512, 128), (480, 100), (30, 7), (6, 1)])
def test_fused_front_end_equals_the_two_step_path(n_fft, hop):
    """log_mel_from_waves (AVX2 FFT with 8 frames in the lanes, radices 4/2/3/5, n_fft not a
    multiple of 8 too) gives the tokens of frames + torch rFFT + log_mel_tokens, on ragged clips
    whose frame counts fall on and around multiples of 8 and 32; thread counts agree bit for bit."""
    from sdscore import _core

    if not _core.fused_log_mel_supported(n_fft):
        pytest.skip("no AVX2+FMA here (the fused front end is not built for this CPU)")
    rng = np.random.default_rng(n_fft)
    lengths = [1, hop - 1, hop, 7 * hop, 8 * hop - 1, 31 * hop, 32 * hop, 33 * hop + 5, 100 * hop + 3]
    waves = [(rng.standard_normal(n) * rng.uniform(1e-3, 3)).astype(np.float32) for n in lengths]
    window = np.hanning(n_fft + 1)[:n_fft].astype(np.float32)
    filters = mel_filterbank(SR, n_fft, 16 if n_fft < 64 else 64, 0.0, 8000.0)
    fused = _core.log_mel_from_waves(waves, n_fft, hop, window, filters, 80.0, 8, 1)
    np.testing.assert_allclose(fused, _two_step_tokens(waves, n_fft, hop, window, filters), atol=2e-5, rtol=0)
    np.testing.assert_array_equal(_core.log_mel_from_waves(waves, n_fft, hop, window, filters, 80.0, 8, 3), fused)


def test_fused_front_end_support_and_errors():
    from sdscore import _core

    assert not _core.fused_log_mel_supported(398)  # 199 is prime
    assert not _core.fused_log_mel_supported(401) and not _core.fused_log_mel_supported(0)
    if not _core.fused_log_mel_supported(400):
        pytest.skip("no AVX2+FMA here")
    window, filters = np.hanning(400).astype(np.float32), np.ones((64, 201), np.float32)
    with pytest.raises(ValueError, match="n_fft=398 is not supported here"):
        _core.log_mel_from_waves([np.zeros(500, np.float32)], 398, 160, window[:398], filters[:, :200], 80.0, 8)
    with pytest.raises(ValueError, match="clip 1 must be a 1-D waveform"):
        _core.log_mel_from_waves([np.zeros(500, np.float32), np.zeros((2, 5), np.float32)], 400, 160, window,
                                 filters, 80.0, 8)
    with pytest.raises(ValueError, match=r"filters must be \[n_mels, 201\]"):
        _core.log_mel_from_waves([np.zeros(500, np.float32)], 400, 160, window, filters[:, :200], 80.0, 8)
    with pytest.raises(ValueError, match="window must have n_fft=400 samples"):
        _core.log_mel_from_waves([np.zeros(500, np.float32)], 400, 160, window[:10], filters, 80.0, 8)
    assert _core.log_mel_from_waves([], 400, 160, window, filters, 80.0, 8).shape == (0, 512)


def test_front_end_core_names_bad_arguments():
    from sdscore import _core

    window, filters = np.hanning(400).astype(np.float32), np.ones((64, 201), np.float32)
    with pytest.raises(ValueError, match="clip 1 must be a 1-D waveform"):
        _core.stft_frames([np.zeros(500, np.float32), np.zeros((2, 500), np.float32)], 400, 160, window)
    with pytest.raises(ValueError, match="window must have n_fft=400 samples"):
        _core.stft_frames([np.zeros(500, np.float32)], 400, 160, window[:300])
    spec = np.zeros((5, 201, 2), np.float32)
    with pytest.raises(ValueError, match="the clips have 6 frames but spec has 5"):
        _core.log_mel_tokens(spec, np.array([3, 3]), filters, 80.0, 8)
    with pytest.raises(ValueError, match="clip 1 has no frames"):
        _core.log_mel_tokens(spec, np.array([5, 0]), filters, 80.0, 8)
    with pytest.raises(ValueError, match=r"filters must be \[n_mels, 201\]"):
        _core.log_mel_tokens(spec, np.array([5]), filters[:, :200], 80.0, 8)
    with pytest.raises(ValueError, match="num_threads must be >= 1"):
        _core.log_mel_tokens(spec, np.array([5]), filters, 80.0, 8, 0)
    with pytest.raises(ValueError, match="num_threads must be >= 1"):
        _core.stft_frames([np.zeros(500, np.float32)], 400, 160, window, 0)
    assert _core.stft_frames([], 400, 160, window).shape == (0, 400)
