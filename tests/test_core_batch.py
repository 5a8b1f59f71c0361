"""sdscore._core.load_many: packed output equals one-by-one loading; failures stay per item."""

from __future__ import annotations

import pathlib
import struct

import numpy as np
import pytest
import soundfile as sf
from sdscore import _core

TARGET = 16000


def tone(sr: int, seconds: float, freq: float = 440.0, channels: int = 1) -> np.ndarray:
    t = np.arange(int(sr * seconds)) / sr
    x = 0.5 * np.sin(2 * np.pi * freq * t)
    return np.stack([x, 0.5 * x][:channels], axis=1) if channels > 1 else x


def one_by_one(path: str, sample_rate: int = TARGET, max_seconds: float = 0.0) -> np.ndarray:
    x, sr = _core.read_wav(path, max_seconds=max_seconds)
    return _core.resample(x, sr, sample_rate)


def float_wav_bytes(values) -> bytes:
    data = np.asarray(values, "<f4").tobytes()
    fmt = struct.pack("<HHIIHH", 3, 1, 8000, 32000, 4, 32)
    body = (
        b"WAVE"
        + b"fmt "
        + struct.pack("<I", 16)
        + fmt
        + b"data"
        + struct.pack("<I", len(data))
        + data
    )
    return b"RIFF" + struct.pack("<I", len(body)) + body


@pytest.fixture
def mixed_batch(tmp_path: pathlib.Path) -> tuple[list[str], dict[int, str]]:
    """Good files at several rates/subtypes interleaved with every kind of failure.
    Returns the paths and, for each bad index, the start of its expected error."""
    paths: list[str] = []
    bad: dict[int, str] = {}

    def good(name, sr, seconds, subtype="PCM_16", channels=1, freq=440.0):
        path = tmp_path / name
        sf.write(path, tone(sr, seconds, freq, channels), sr, subtype=subtype)
        paths.append(str(path))

    def failing(name, blob, problem):
        path = tmp_path / name
        if blob is not None:
            path.write_bytes(blob)
        bad[len(paths)] = f"{path}: {problem}"
        paths.append(str(path))

    good("a_22k.wav", 22050, 1.3)
    failing("missing.wav", None, "no such file")
    good("b_44k_stereo.wav", 44100, 0.7, "PCM_24", channels=2, freq=1000.0)
    failing(
        "nan.wav",
        float_wav_bytes([0.0, 0.5, np.nan, 0.1]),
        "non-finite sample (NaN/Inf) at frame 2",
    )
    good("c_16k.wav", 16000, 0.5, "FLOAT", freq=300.0)
    failing("text.wav", b"not audio at all", "not a RIFF/WAVE file")
    good("d_8k.wav", 8000, 2.0, "PCM_U8", freq=200.0)
    failing("empty_data.wav", float_wav_bytes([]), "no audio samples")
    good("e_48k.wav", 48000, 0.25, "DOUBLE", channels=2)
    failing("inf.wav", float_wav_bytes([np.inf]), "non-finite sample (NaN/Inf) at frame 0")
    good("f_44k.wav", 44100, 1.0, "PCM_32")
    dir_path = tmp_path / "a_directory"
    dir_path.mkdir()
    bad[len(paths)] = f"{dir_path}: is a directory"
    paths.append(str(dir_path))
    return paths, bad


def test_mixed_batch_keeps_good_items_identical_to_one_by_one(mixed_batch):
    paths, bad = mixed_batch
    data, offsets, errors, not_wav = _core.load_many(paths, TARGET, num_threads=2)
    assert data.dtype == np.float32 and data.ndim == 1
    assert offsets.dtype == np.int64 and offsets.shape == (len(paths) + 1,)
    assert offsets[0] == 0 and offsets[-1] == len(data) and np.all(np.diff(offsets) >= 0)
    for i, path in enumerate(paths):
        item = data[offsets[i] : offsets[i + 1]]
        if i in bad:
            assert errors[i] == bad[i]
            assert len(item) == 0
        else:
            assert errors[i] is None
            np.testing.assert_array_equal(item, one_by_one(path))
    assert not_wav == [p.endswith("text.wav") for p in paths]


def test_error_text_is_what_read_wav_raises(mixed_batch):
    paths, bad = mixed_batch
    _, _, errors, _ = _core.load_many(paths, TARGET)
    for i in bad:
        with pytest.raises((ValueError, OSError)) as info:
            _core.read_wav(paths[i])
        assert str(info.value) == errors[i]


def test_result_independent_of_thread_count(mixed_batch):
    paths, _ = mixed_batch
    paths = paths * 5  # more items than threads, so scheduling order varies
    runs = [_core.load_many(paths, TARGET, num_threads=t) for t in (1, 2, 3, 0)]
    for data, offsets, errors, not_wav in runs[1:]:
        np.testing.assert_array_equal(data, runs[0][0])
        np.testing.assert_array_equal(offsets, runs[0][1])
        assert errors == runs[0][2] and not_wav == runs[0][3]


def test_same_rate_items_equal_read_wav(tmp_path):
    paths = []
    for i, subtype in enumerate(["PCM_16", "PCM_24", "FLOAT"]):
        path = tmp_path / f"{i}.wav"
        sf.write(path, tone(TARGET, 0.3 + i * 0.1, channels=2), TARGET, subtype=subtype)
        paths.append(str(path))
    data, offsets, errors, _ = _core.load_many(paths, TARGET)
    assert errors == [None] * 3
    for i, path in enumerate(paths):
        np.testing.assert_array_equal(data[offsets[i] : offsets[i + 1]], _core.read_wav(path)[0])


def test_header_larger_than_probe_window(tmp_path):
    """A 100 KiB metadata chunk before fmt/data: the header probe must fall back to a full read."""
    x = tone(22050, 0.2)
    ints = np.round(x * 32767).astype("<i2").tobytes()
    fmt = struct.pack("<HHIIHH", 1, 1, 22050, 44100, 2, 16)
    body = (
        b"WAVE"
        + b"LIST"
        + struct.pack("<I", 100_000)
        + b"\0" * 100_000
        + b"fmt "
        + struct.pack("<I", 16)
        + fmt
        + b"data"
        + struct.pack("<I", len(ints))
        + ints
    )
    path = tmp_path / "big_header.wav"
    path.write_bytes(b"RIFF" + struct.pack("<I", len(body)) + body)
    data, offsets, errors, _ = _core.load_many([str(path)], TARGET)
    assert errors == [None] and list(offsets) == [0, len(data)]
    np.testing.assert_array_equal(data, one_by_one(str(path)))


def test_duration_cap_applies_per_item(tmp_path):
    short, long_ = tmp_path / "short.wav", tmp_path / "long.wav"
    sf.write(short, tone(16000, 1.0), 16000)
    sf.write(long_, tone(16000, 3.0), 16000)
    _, offsets, errors, _ = _core.load_many([str(long_), str(short)], TARGET, max_seconds=2)
    assert errors[0] == f"{long_}: 3 s exceeds the configured cap of 2 s" and errors[1] is None
    assert list(offsets) == [0, 0, 16000]


def test_flac_is_flagged_not_wav_for_fallback(tmp_path):
    path = tmp_path / "speech.flac"
    sf.write(path, tone(16000, 0.1), 16000, format="FLAC")
    _, offsets, errors, not_wav = _core.load_many([str(path)], TARGET)
    assert not_wav == [True] and errors == [f"{path}: not a RIFF/WAVE file"]
    assert list(offsets) == [0, 0]


def test_empty_path_list():
    data, offsets, errors, not_wav = _core.load_many([], TARGET)
    assert data.dtype == np.float32 and data.shape == (0,)
    assert offsets.dtype == np.int64 and list(offsets) == [0]
    assert errors == [] and not_wav == []


def test_all_items_failing_gives_empty_data(tmp_path):
    data, offsets, errors, _ = _core.load_many([str(tmp_path / "x.wav"), str(tmp_path)], TARGET)
    assert data.shape == (0,) and list(offsets) == [0, 0, 0]
    assert all(e is not None for e in errors)


def test_accepts_pathlike(tmp_path):
    path = tmp_path / "p.wav"
    sf.write(path, tone(8000, 0.1), 8000)
    data, _, errors, _ = _core.load_many([path], TARGET)
    assert errors == [None] and len(data) == 1600


@pytest.mark.parametrize("rate", [0, -16000, 1_000_001])
def test_rejects_invalid_sample_rate(rate):
    with pytest.raises(ValueError, match=f"sample_rate must be in 1..1000000 Hz, got {rate}"):
        _core.load_many([], rate)


def test_rejects_negative_thread_count():
    with pytest.raises(ValueError, match="num_threads must be >= 0"):
        _core.load_many([], TARGET, num_threads=-1)


def test_rejects_negative_cap():
    with pytest.raises(ValueError, match="max_seconds must be >= 0"):
        _core.load_many([], TARGET, max_seconds=-3)


def test_rejects_single_path_string():
    with pytest.raises(TypeError, match="expects a list of paths"):
        _core.load_many("one.wav", TARGET)


def test_reused_buffers_keep_every_batch_intact(tmp_path):
    """Large output buffers go back to the core's cache when numpy frees them and are handed to
    the next batch: a view that outlives its batch tuple keeps its samples, and a batch loaded
    into a reused buffer (holding an older batch's samples) equals a fresh one-by-one load."""
    rng = np.random.default_rng(3)
    paths = []
    for i in range(6):
        path = tmp_path / f"n{i}.wav"
        sf.write(path, 0.3 * rng.standard_normal(int(22050 * rng.uniform(20, 40))), 22050, subtype="FLOAT")
        paths.append(str(path))
    expected = [one_by_one(p) for p in paths]
    first = _core.load_many(paths[:3], TARGET, 2)
    kept = first[0][first[1][1] : first[1][2]]  # a view of item 1 only
    assert first[0].nbytes >= 2 << 20  # large enough for the cache
    del first
    for round_ in range(4):  # each batch now gets the buffer the previous one freed
        order = paths[3:] if round_ % 2 else paths[:3]
        data, offsets, errors, _ = _core.load_many(order, TARGET, 2)
        assert not any(errors)
        base = 3 if round_ % 2 else 0
        for i in range(3):
            np.testing.assert_array_equal(data[offsets[i] : offsets[i + 1]], expected[base + i])
        del data
    np.testing.assert_array_equal(kept, expected[1])
