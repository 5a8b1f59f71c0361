"""Batched torch Whisper log-mel (sdscore.models.whisper_log_mel) against clip_features and the
feature extractor's own 300 s call, with the tiny SDiaReward layout's preprocessor (n_samples 4.8M)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from sdscore.models import whisper_log_mel as wlm
from sdscore.models.sdiareward_qwen import clip_features, clip_frames
from sdscore.models.whisper_log_mel import whisper_log_mel
from tiny_reward_models import OMNI_PREPROCESSOR

SR = 16000
TOL = 1e-5  # the tolerance the module states for float32 on the CPU


def _extractor(folder, **changes):
    from transformers import WhisperFeatureExtractor

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "preprocessor_config.json").write_text(json.dumps({**OMNI_PREPROCESSOR, **changes}), encoding="utf-8")
    return WhisperFeatureExtractor.from_pretrained(folder)


@pytest.fixture(scope="module")
def fe(tmp_path_factory):
    extractor = _extractor(tmp_path_factory.mktemp("whisper-fe"))
    assert extractor.n_samples == 4_800_000  # 300 s, as Qwen2.5-Omni
    return extractor


def _speech(seconds: float, seed: int, level: float = 0.3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = max(1, round(seconds * SR))
    t = np.arange(n) / SR
    return (level * np.sin(2 * np.pi * (120 + 35 * seed) * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))
            + 0.02 * rng.standard_normal(n)).astype(np.float32)


def _clips() -> list[np.ndarray]:
    """0.05 s .. 20 s, silence, full-scale noise, a quiet clip beside loud ones, exact hop multiples."""
    rng = np.random.default_rng(7)
    return [
        _speech(0.05, 1), _speech(0.5, 2), _speech(1.0, 3), _speech(3.33, 4), _speech(20.0, 5),
        np.zeros(SR * 2, dtype=np.float32),  # silence: every frame at the floor
        rng.uniform(-1.0, 1.0, SR * 4).astype(np.float32),  # full-scale noise
        _speech(7.0, 6, level=1e-4),  # its own max, not its neighbours'
        _speech(160 * 250 / SR, 8), _speech(2.0, 9).astype(np.float64),  # a hop multiple; float64 input
        np.ones(1, dtype=np.float32),  # one sample, one frame
    ]


def _assert_equal_to(ours: torch.Tensor, reference, atol: float = TOL) -> None:
    reference = torch.as_tensor(np.asarray(reference))
    assert ours.dtype == torch.float32 and ours.shape == reference.shape
    if ours.numel():
        assert (ours - reference).abs().max().item() <= atol


def test_one_batch_equals_clip_features_clip_by_clip(fe):
    clips = _clips()
    ours = whisper_log_mel(clips, fe)
    assert len(ours) == len(clips)
    for clip, features in zip(clips, ours):
        assert features.shape == (128, clip_frames(fe, len(clip)))
        _assert_equal_to(features, clip_features(fe, clip))


def test_each_clip_alone_equals_the_batch(fe):
    """Zero padding to the batch's longest clip changes neither the frames nor the maximum."""
    clips = _clips()
    batch = whisper_log_mel(clips, fe)
    for clip, features in zip(clips, batch):
        _assert_equal_to(whisper_log_mel([clip], fe)[0], features, atol=1e-6)


@pytest.mark.parametrize("which", [0, 4, 6])  # 0.05 s, 20 s, full-scale noise
def test_equals_the_extractor_on_the_full_300s_buffer(fe, which):
    clip = _clips()[which]
    full = fe(clip, sampling_rate=SR, padding="max_length", return_attention_mask=False, return_tensors="np")
    frames = clip_frames(fe, len(clip))
    ours = whisper_log_mel([_speech(1.3, 11), clip], fe)[1]
    _assert_equal_to(ours, full["input_features"][0, :, :frames])


def test_silence_sits_at_the_floor(fe):
    (silence,) = whisper_log_mel([np.zeros(SR, dtype=np.float32)], fe)
    assert torch.equal(silence, torch.full_like(silence, (-10.0 + 4.0) / 4.0))


def test_clips_near_or_over_n_samples_use_the_full_buffer(fe, monkeypatch):
    """Those clips go through clip_features (the end reflection could mirror the clip); the rest
    still go in one batch, and the outputs keep the clips' order."""
    long_clip = _speech(4_800_000 / SR, 12)[: 4_800_000 - 300]
    over = np.concatenate([long_clip, _speech(0.5, 13)])  # truncated to n_samples, as the processor does
    short = _speech(0.7, 14)
    batches = []
    rows = wlm._log_mel_rows
    monkeypatch.setattr(wlm, "_log_mel_rows", lambda batch, f: batches.append(batch.shape) or rows(batch, f))
    ours = whisper_log_mel([long_clip, short, over], fe)
    assert batches == [(1, 160 * (clip_frames(fe, len(short)) + wlm.TAIL_HOPS))]
    for clip, features in zip([long_clip, short, over], ours):
        _assert_equal_to(features, clip_features(fe, clip))
    assert ours[2].shape == (128, 30000)


@pytest.mark.parametrize("changes", [{"padding_value": 0.25}, {"dither": 1e-4}])
def test_non_zero_padding_or_dither_fall_back_to_clip_features(tmp_path, monkeypatch, changes):
    fe = _extractor(tmp_path, **changes)

    def refuse(*_):
        raise AssertionError("the zero-padded batch must not be used")

    monkeypatch.setattr(wlm, "_log_mel_rows", refuse)
    clip = _speech(0.3, 15)
    (ours,) = whisper_log_mel([clip], fe)
    assert ours.shape == (128, clip_frames(fe, len(clip)))
    if "padding_value" in changes:
        _assert_equal_to(ours, clip_features(fe, clip))


def test_empty_inputs(fe):
    assert whisper_log_mel([], fe) == []
    (empty,) = whisper_log_mel([np.zeros(0, dtype=np.float32)], fe)
    assert empty.shape == (128, 0)


def test_bad_clip_is_named(fe):
    with pytest.raises(ValueError, match="audio clip 1: expected a 1-D waveform"):
        whisper_log_mel([_speech(0.2, 1), np.zeros((2, 100), dtype=np.float32)], fe)


def test_results_land_on_the_asked_device(fe):
    (out,) = whisper_log_mel([_speech(0.4, 16)], fe, device=torch.device("cpu"))
    assert out.device.type == "cpu"
    if torch.cuda.is_available():
        clips = _clips()
        for clip, features in zip(clips, whisper_log_mel(clips, fe, device="cuda")):
            assert features.device.type == "cuda"
            _assert_equal_to(features.cpu(), clip_features(fe, clip), atol=2e-3)  # cuFFT rounding: not measured yet
