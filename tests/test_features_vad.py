"""Silero VAD stepped in lockstep across files == silero's own get_speech_timestamps per file."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from features_audio import RATE, batch_of, read16, render
from sdscore.features.vad import WINDOW, SileroVad, VadSettings, speech_timestamps

silero = pytest.importorskip("silero_vad")


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """TTS sentences joined by pauses of 0.15-1.2 s, plus noise, silence and a 20 ms click."""
    paths = render(tmp_path_factory.mktemp("vad"))
    speech = [read16(p) for p in paths.values()]
    rng = np.random.default_rng(1)
    gap = lambda s: np.zeros(int(s * RATE), np.float32)
    return [
        np.concatenate([speech[0], gap(0.6), speech[1], gap(0.15), speech[2]]),
        np.concatenate([gap(1.2), speech[3], gap(1.0)]),
        speech[4],
        (0.05 * rng.standard_normal(RATE)).astype(np.float32),
        np.zeros(RATE // 2, np.float32),
        (0.3 * rng.standard_normal(320)).astype(np.float32),
    ]


@pytest.fixture(scope="module")
def vad():
    return SileroVad()


def reference(x: np.ndarray, model, **kw) -> list[tuple[int, int]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spans = silero.get_speech_timestamps(torch.from_numpy(x.copy()), model, **kw)
    return [(s["start"], s["end"]) for s in spans]


def in_samples(segments) -> list[tuple[int, int]]:
    return [(round(s * RATE), round(e * RATE)) for s, e in segments]


def test_same_segments_as_silero_onnx_and_jit(clips, vad):
    ours = vad.run(batch_of(clips), {})["vad_segments"]
    onnx_model = silero.load_silero_vad(onnx=True)
    jit_model = silero.load_silero_vad()
    assert len(ours[0]) >= 2, "the pauses between sentences split the first clip"
    assert ours[4] == []
    for x, segments in zip(clips, ours):
        assert in_samples(segments) == reference(x, onnx_model)
        jit = reference(x, jit_model)
        assert len(jit) == len(segments)
        for (s, e), (rs, re) in zip(in_samples(segments), jit):
            assert abs(s - rs) <= WINDOW and abs(e - re) <= WINDOW


def test_lockstep_batch_equals_one_file_at_a_time(clips, vad):
    together = vad.speech_probs(batch_of(clips))
    threaded = SileroVad(num_threads=2).speech_probs(batch_of(clips))
    for x, probs, probs2 in zip(clips, together, threaded):
        alone = vad.speech_probs(batch_of([x]))[0]
        assert len(probs) == -(-len(x) // WINDOW)
        np.testing.assert_allclose(probs, alone, atol=1e-6)
        np.testing.assert_allclose(probs2, alone, atol=1e-6)


def test_empty_items_give_no_segments(vad):
    out = vad.run(batch_of([np.zeros(0), np.zeros(100)]), {})["vad_segments"]
    assert out == [[], []]


def test_other_rates_are_resampled_to_16k(clips, vad):
    import soxr

    x8k = soxr.resample(clips[1], RATE, 8000)
    segments = vad.run(batch_of([x8k], rate=8000), {})["vad_segments"][0]
    direct = vad.run(batch_of([clips[1]]), {})["vad_segments"][0]
    assert len(segments) == len(direct)
    np.testing.assert_allclose(
        np.array(segments), np.array(direct), atol=2 * WINDOW / RATE
    )


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"threshold": 0.3, "min_silence_duration_ms": 300, "speech_pad_ms": 100},
        {"max_speech_duration_s": 1.0},
        {"max_speech_duration_s": 0.8, "use_max_poss_sil_at_max_speech": False},
        {"min_speech_duration_ms": 0, "neg_threshold": 0.45, "speech_pad_ms": 0},
    ],
)
def test_post_processing_is_silero_exactly(settings):
    rng = np.random.default_rng(7)
    for trial in range(40):
        n = int(rng.integers(1, 400))
        # smooth random probabilities with long runs, so every branch of the state machine fires
        probs = np.clip(
            np.repeat(rng.uniform(0, 1, n // 8 + 1), 8)[:n] + rng.normal(0, 0.1, n),
            0,
            1,
        )
        probs = probs.astype(np.float32)
        length = n * WINDOW - int(rng.integers(0, WINDOW))
        expected = silero.get_speech_timestamps_from_probs(
            probs.tolist(), audio_length_samples=length, **settings
        )
        ours = speech_timestamps(probs, length, VadSettings(**settings))
        assert ours == [(s["start"], s["end"]) for s in expected], (trial, settings)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="num_threads must be >= 1, got 0"):
        SileroVad(num_threads=0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'thresh'"):
        SileroVad(thresh=0.5)
