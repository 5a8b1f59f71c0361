"""sdscore._core WAV decoding: parity with soundfile on every subtype, and one test per error."""

from __future__ import annotations

import io
import os
import re
import shutil
import struct
import subprocess

import numpy as np
import pytest
import soundfile as sf
import sdscore.audio
from sdscore import _core

SUBTYPES = ["PCM_U8", "PCM_16", "PCM_24", "PCM_32", "FLOAT", "DOUBLE"]
GUID_TAIL = bytes.fromhex("000000001000800000aa00389b71")  # KSDATAFORMAT_SUBTYPE_* bytes 2..15


def chunk(cid: bytes, body: bytes, declared: int | None = None) -> bytes:
    """One RIFF chunk, with its pad byte when the body has odd length."""
    size = len(body) if declared is None else declared
    return cid + struct.pack("<I", size) + body + (b"\0" if len(body) % 2 else b"")


def fmt_chunk(
    tag: int = 1,
    channels: int = 1,
    rate: int = 16000,
    bits: int = 16,
    block_align: int | None = None,
    extensible_subtag: int | None = None,
) -> bytes:
    align = channels * bits // 8 if block_align is None else block_align
    body = struct.pack(
        "<HHIIHH",
        tag if extensible_subtag is None else 0xFFFE,
        channels,
        rate,
        rate * align,
        align,
        bits,
    )
    if extensible_subtag is not None:
        body += struct.pack("<HHI", 22, bits, 0) + struct.pack("<H", extensible_subtag) + GUID_TAIL
    return chunk(b"fmt ", body)


def wav(*chunks: bytes, magic: bytes = b"RIFF", riff_size: int | None = None) -> bytes:
    body = b"WAVE" + b"".join(chunks)
    return magic + struct.pack("<I", len(body) if riff_size is None else riff_size) + body


def pcm16(values: np.ndarray) -> bytes:
    return np.round(np.asarray(values) * 32767).astype("<i2").tobytes()


def soundfile_mono(path_or_bytes) -> tuple[np.ndarray, int]:
    src = io.BytesIO(path_or_bytes) if isinstance(path_or_bytes, bytes) else path_or_bytes
    data, sr = sf.read(src, dtype="float32")
    return (data if data.ndim == 1 else data.mean(axis=1)), sr


def random_audio(frames: int, channels: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.0, 1.0, size=(frames, channels))
    x[:4] = [[-1.0], [1.0], [0.0], [-0.5]]  # full-scale and exact values
    return x if channels > 1 else x[:, 0]


@pytest.mark.parametrize("subtype", SUBTYPES)
@pytest.mark.parametrize("channels", [1, 2, 6])
def test_every_subtype_matches_soundfile(tmp_path, subtype, channels):
    path = tmp_path / f"{subtype}_{channels}.wav"
    sf.write(path, random_audio(1001, channels), 22050, subtype=subtype)
    expected, sr = soundfile_mono(path)
    got, got_sr = _core.read_wav(str(path))
    assert got.dtype == np.float32 and got.ndim == 1 and got_sr == sr == 22050
    if channels == 1:
        np.testing.assert_array_equal(got, expected)  # bit-exact scaling
    else:
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-7)
    from_bytes, _ = _core.decode_wav(path.read_bytes())
    np.testing.assert_array_equal(from_bytes, got)


@pytest.mark.parametrize("subtype", ["PCM_16", "PCM_24", "FLOAT"])
def test_rf64_from_soundfile(tmp_path, subtype):
    path = tmp_path / "rf64.wav"
    sf.write(path, random_audio(777, 2), 48000, subtype=subtype, format="RF64")
    assert path.read_bytes()[:4] == b"RF64"
    expected, _ = soundfile_mono(path)
    got, sr = _core.read_wav(path)
    assert sr == 48000
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-7)


@pytest.mark.parametrize(
    ("subtag", "bits", "dtype"), [(1, 16, "<i2"), (1, 32, "<i4"), (3, 32, "<f4"), (3, 64, "<f8")]
)
def test_wave_format_extensible(subtag, bits, dtype):
    rng = np.random.default_rng(3)
    frames = rng.uniform(-0.9, 0.9, size=(50, 3))
    raw = frames.astype(dtype) if subtag == 3 else (frames * 2 ** (bits - 1)).astype(dtype)
    blob = wav(
        fmt_chunk(channels=3, rate=32000, bits=bits, extensible_subtag=subtag),
        chunk(b"data", raw.tobytes()),
    )
    expected, _ = soundfile_mono(blob)
    got, sr = _core.decode_wav(blob)
    assert sr == 32000
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-7)


def test_skips_list_fact_and_odd_sized_chunks():
    samples = np.linspace(-1, 1, 101)
    blob = wav(
        chunk(b"LIST", b"INFOISFT\x05\x00\x00\x00abcde\x00"),
        chunk(b"junk", b"odd"),
        fmt_chunk(),
        chunk(b"fact", struct.pack("<I", 101)),
        chunk(b"x\x00yz", b"q"),
        chunk(b"data", pcm16(samples)),
        chunk(b"LIST", b"INFOtrailing"),
    )
    got, _ = _core.decode_wav(blob)
    np.testing.assert_array_equal(got, np.round(samples * 32767).astype(np.float32) / 32768)


def test_fmt_after_data_chunk():
    samples = np.linspace(-1, 1, 40)
    blob = wav(chunk(b"data", pcm16(samples)), fmt_chunk(rate=8000))
    got, sr = _core.decode_wav(blob)
    assert sr == 8000
    np.testing.assert_array_equal(got, np.round(samples * 32767).astype(np.float32) / 32768)


def test_unknown_data_size_keeps_whole_frames_present():
    """Streamed writers leave 0xFFFFFFFF ("size unknown"): we decode what is there, whole frames
    only (a trailing partial frame is dropped), like libsndfile."""
    stereo = np.stack([np.linspace(-1, 1, 30), np.linspace(1, -1, 30)], axis=1)
    data = pcm16(stereo.ravel()) + b"\x01\x02\x03"  # 30 frames + a partial one
    blob = wav(
        fmt_chunk(channels=2), b"data" + struct.pack("<I", 0xFFFFFFFF) + data, riff_size=0xFFFFFFFF
    )
    got, _ = _core.decode_wav(blob)
    ints = np.round(stereo * 32767).astype(np.float32) / 32768
    np.testing.assert_allclose(got, ints.mean(axis=1), rtol=0, atol=1e-7)
    np.testing.assert_allclose(got, soundfile_mono(blob)[0], rtol=0, atol=1e-7)


@pytest.mark.parametrize("declared", [0x7FFFF000, 0xFFFFFFFF - 43, 0xFFFFF000])
def test_streaming_placeholder_sizes_run_to_the_end_of_the_file(declared):
    """sox to a pipe writes 0x7FFFF000; a writer that stored "length - 44" before it knew the length
    leaves 2^32 - 44 (Praat's own test sound cl_F1_2b_egg.wav): both are read to the end of the file,
    on the native and the soundfile path."""
    samples = np.linspace(-0.5, 0.5, 40)
    blob = wav(GOOD_FMT, chunk(b"data", pcm16(samples), declared=declared), riff_size=declared)
    got, _ = _core.decode_wav(blob)
    np.testing.assert_array_equal(got, np.round(samples * 32767).astype(np.float32) / 32768)


def test_a_wav_that_sox_streamed_to_a_pipe_loads_on_every_backend(tmp_path):
    """End to end on a real streamed file: `sox ... -t wav - | cat > f.wav` (header size 0x7FFFF000)."""
    sox = shutil.which("sox")
    if sox is None:
        pytest.skip("sox is not installed (make system-deps installs it)")
    path = tmp_path / "piped.wav"
    piped = subprocess.run([sox, "-n", "-r", "16000", "-b", "16", "-t", "wav", "-", "synth", "0.25", "sine", "440"],
                           stdout=subprocess.PIPE, check=True)  # a pipe: sox cannot go back to the header
    path.write_bytes(piped.stdout)
    assert struct.unpack("<I", path.read_bytes()[-8000 - 4:-8000])[0] == 0x7FFFF000  # the data header
    reference, rate = sf.read(path, dtype="float32")
    assert rate == 16000 and reference.shape == (4000,)
    for backend in ("native", "soundfile"):
        got = sdscore.audio.load_many([str(path)], 16000, backend=backend)
        assert got.errors == [None], backend
        np.testing.assert_allclose(got.data, reference, rtol=0, atol=1e-6)


def test_rf64_with_ds64_data_size():
    samples = np.linspace(-0.5, 0.5, 64)
    data = pcm16(samples)
    ds64 = struct.pack("<QQQI", 0, len(data) - 20, 0, 0)  # ds64 says 10 fewer frames
    blob = wav(
        chunk(b"ds64", ds64),
        fmt_chunk(),
        chunk(b"data", data, declared=0xFFFFFFFF),
        magic=b"RF64",
        riff_size=0xFFFFFFFF,
    )
    got, _ = _core.decode_wav(blob)
    assert got.shape == (54,)
    np.testing.assert_array_equal(got, np.round(samples[:54] * 32767).astype(np.float32) / 32768)


def test_decode_wav_accepts_bytes_like_and_rejects_other_buffers():
    blob = wav(fmt_chunk(), chunk(b"data", pcm16(np.zeros(8))))
    for view in (bytearray(blob), memoryview(blob), np.frombuffer(blob, dtype=np.uint8)):
        assert _core.decode_wav(view)[0].shape == (8,)
    with pytest.raises(TypeError, match="bytes-like"):
        _core.decode_wav(np.zeros(4, dtype=np.float32))


def test_read_wav_accepts_pathlike_and_non_utf8_names(tmp_path):
    blob = wav(fmt_chunk(), chunk(b"data", pcm16(np.zeros(8))))
    odd = os.fsdecode(os.fsencode(str(tmp_path)) + b"/caf\xe9.wav")  # latin-1 byte, not UTF-8
    with open(odd, "wb") as f:
        f.write(blob)
    assert _core.read_wav(odd)[0].shape == (8,)
    empty = os.fsdecode(os.fsencode(str(tmp_path)) + b"/\xff.wav")
    open(empty, "wb").close()
    with pytest.raises(ValueError) as info:
        _core.read_wav(empty)
    assert str(info.value) == f"{empty}: empty input (0 bytes)"


# --- errors: every message names the file and the problem --------------------------------

GOOD_FMT = fmt_chunk()
GOOD_DATA = chunk(b"data", pcm16(np.zeros(16)))


def float_wav(values: np.ndarray) -> bytes:
    return wav(fmt_chunk(tag=3, bits=32), chunk(b"data", np.asarray(values, "<f4").tobytes()))


BAD_INPUTS = {
    "empty": (b"", r"empty input \(0 bytes\)"),
    "not_audio": (b"hello, this is a text file, not audio", "not a RIFF/WAVE file"),
    "not_wave_riff": (b"RIFF\x04\x00\x00\x00AVI LIST", "not a RIFF/WAVE file"),
    "short_riff": (b"RIFF\x04\x00", r"truncated header \(6 bytes\)"),
    "truncated_fmt": (wav(GOOD_FMT)[:30], "truncated header: file ends inside the fmt chunk"),
    "cut_before_fmt": (
        wav(chunk(b"LIST", b"x" * 40), GOOD_FMT)[:40],
        "truncated header: file ends before a complete fmt chunk",
    ),
    "short_ds64": (
        wav(chunk(b"ds64", b"\0" * 8), GOOD_FMT, GOOD_DATA, magic=b"RF64"),
        "truncated header: incomplete ds64 chunk",
    ),
    "missing_fmt": (wav(GOOD_DATA), "missing fmt chunk"),
    "missing_data": (wav(GOOD_FMT), "missing data chunk"),
    "tiny_fmt": (
        wav(chunk(b"fmt ", b"\x01\x00" * 4), GOOD_DATA),
        r"fmt chunk too small \(8 bytes\)",
    ),
    "short_extensible": (
        wav(chunk(b"fmt ", fmt_chunk(extensible_subtag=1)[8:32]), GOOD_DATA),
        "WAVE_FORMAT_EXTENSIBLE fmt chunk too small",
    ),
    "zero_length_data": (wav(GOOD_FMT, chunk(b"data", b"")), "no audio samples"),
    # a size the file does not hold: a truncated file (a crashed writer) or a header that lies;
    # libsndfile decodes what is there without a word
    "truncated_data": (
        wav(GOOD_FMT, chunk(b"data", pcm16(np.zeros(30)), declared=10_000)),
        "truncated or lying header: the data chunk declares 10000 bytes but the file holds 60 after it",
    ),
    "lying_data_size": (
        wav(GOOD_FMT, chunk(b"data", pcm16(np.zeros(8)), declared=0x7FFFEFFE)),
        "truncated or lying header: the data chunk declares 2147479550 bytes but the file holds 16 after it",
    ),
    "ds64_beyond_file": (
        wav(chunk(b"ds64", struct.pack("<QQQI", 0, 1 << 40, 0, 0)), GOOD_FMT,
            chunk(b"data", pcm16(np.zeros(8)), declared=0xFFFFFFFF), magic=b"RF64"),
        "truncated or lying header: the data chunk declares 1099511627776 bytes but the file holds 16",
    ),
    "zero_size_with_samples": (
        wav(GOOD_FMT, chunk(b"data", pcm16(np.zeros(8)), declared=0)),
        r"the data chunk declares 0 bytes but 16 bytes follow it \(a streamed file whose header",
    ),
    "partial_frame_only": (
        wav(fmt_chunk(channels=2), chunk(b"data", b"\x00\x01")),
        "no audio samples",
    ),
    "zero_channels": (wav(fmt_chunk(channels=0, block_align=2), GOOD_DATA), "0 channels"),
    "alaw": (wav(fmt_chunk(tag=6, bits=8), GOOD_DATA), "unsupported format tag 0x0006"),
    "pcm12": (
        wav(fmt_chunk(bits=12, block_align=2), GOOD_DATA),
        "unsupported 12 bits per sample for PCM",
    ),
    "float16": (
        wav(fmt_chunk(tag=3, bits=16), GOOD_DATA),
        "unsupported 16 bits per sample for IEEE float",
    ),
    "bad_guid": (
        wav(fmt_chunk(extensible_subtag=1)[:-1] + b"\x00", GOOD_DATA),
        "unsupported WAVE_FORMAT_EXTENSIBLE subformat GUID",
    ),
    "block_align": (
        wav(fmt_chunk(channels=2, block_align=3), GOOD_DATA),
        "block_align 3 is inconsistent with 2 channels x 16 bits",
    ),
    "rate_zero": (wav(fmt_chunk(rate=0), GOOD_DATA), "sample rate 0 Hz is invalid"),
    "rate_absurd": (wav(fmt_chunk(rate=5_000_000), GOOD_DATA), "absurd sample rate 5000000 Hz"),
    "nan": (float_wav([0.0, 0.1, 0.2, np.nan, 0.0]), r"non-finite sample \(NaN/Inf\) at frame 3"),
    "inf": (float_wav([np.inf, 0.0]), r"non-finite sample \(NaN/Inf\) at frame 0"),
    "double_beyond_float32": (
        wav(fmt_chunk(tag=3, bits=64), chunk(b"data", np.array([0, 1e300], "<f8").tobytes())),
        "sample at frame 1 is out of float32 range",
    ),
    "neg_inf_double": (
        wav(fmt_chunk(tag=3, bits=64), chunk(b"data", np.array([0, 1, -np.inf], "<f8").tobytes())),
        r"non-finite sample \(NaN/Inf\) at frame 2",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_raises_value_error_naming_file_and_problem(tmp_path, case):
    blob, problem = BAD_INPUTS[case]
    path = tmp_path / f"{case}.wav"
    path.write_bytes(blob)
    with pytest.raises(ValueError, match="^" + re.escape(str(path)) + ": " + problem):
        _core.read_wav(str(path))
    with pytest.raises(ValueError, match="^clip-7: " + problem):
        _core.decode_wav(blob, "clip-7")


def test_default_name_for_bytes():
    with pytest.raises(ValueError, match="^<bytes>: empty input"):
        _core.decode_wav(b"")


def test_duration_cap(tmp_path):
    path = tmp_path / "long.wav"
    path.write_bytes(wav(fmt_chunk(rate=1000), chunk(b"data", pcm16(np.zeros(12_300)))))
    with pytest.raises(
        ValueError,
        match="^" + re.escape(str(path)) + r": 12\.3 s exceeds the configured cap of 10 s$",
    ):
        _core.read_wav(str(path), max_seconds=10)
    assert _core.read_wav(str(path), max_seconds=12.3)[0].shape == (12_300,)  # at the cap is fine
    assert _core.read_wav(str(path))[0].shape == (12_300,)  # 0 = no cap


@pytest.mark.parametrize("value", [-1.0, float("nan")])
def test_invalid_cap_rejected(value):
    with pytest.raises(ValueError, match="max_seconds must be >= 0"):
        _core.decode_wav(wav(GOOD_FMT, GOOD_DATA), max_seconds=value)


def test_missing_file(tmp_path):
    path = tmp_path / "nonexistent.wav"
    with pytest.raises(FileNotFoundError, match="^" + re.escape(str(path)) + ": no such file$"):
        _core.read_wav(str(path))


def test_directory(tmp_path):
    with pytest.raises(
        IsADirectoryError, match="^" + re.escape(str(tmp_path)) + ": is a directory$"
    ):
        _core.read_wav(str(tmp_path))


def test_fifo_is_rejected_without_blocking(tmp_path):
    path = tmp_path / "pipe.wav"
    os.mkfifo(path)
    with pytest.raises(ValueError, match="^" + re.escape(str(path)) + ": not a regular file$"):
        _core.read_wav(str(path))


def test_unreadable_path_reports_errno_text(tmp_path):
    # A regular file used as a directory (ENOTDIR); works even as root, unlike chmod 000.
    parent = tmp_path / "file.wav"
    parent.write_bytes(wav(GOOD_FMT, GOOD_DATA))
    path = parent / "inner.wav"
    with pytest.raises(ValueError, match="^" + re.escape(str(path)) + ": Not a directory$"):
        _core.read_wav(str(path))
