"""Robustness of the WAV decoder on arbitrary bytes: libFuzzer + sanitizers, and hypothesis."""

from __future__ import annotations

import io
import os
import pathlib
import shutil
import subprocess

import numpy as np
import pytest
import soundfile as sf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sdscore import _core

ROOT = pathlib.Path(__file__).resolve().parents[1]
FUZZ_SCRIPT = ROOT / "csrc" / "fuzz" / "run_fuzzer.sh"
SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: libFuzzer", "runtime error:", "SUMMARY: ")


def libfuzzer_clang(tmp_path: pathlib.Path) -> tuple[str | None, str]:
    """(clang++ able to build a libFuzzer target, or None; why not)."""
    clangxx = next(
        filter(None, map(shutil.which, ["clang++"] + [f"clang++-{v}" for v in range(19, 13, -1)])),
        None,
    )
    if clangxx is None:
        return None, "clang++ not found (apt-get install -y clang libclang-rt-14-dev)"
    probe = tmp_path / "probe.cpp"
    probe.write_text(
        "#include <cstddef>\n#include <cstdint>\n"
        'extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n'
    )
    build = subprocess.run(
        [clangxx, "-fsanitize=fuzzer,address,undefined", str(probe), "-o", str(tmp_path / "probe")],
        check=False,
        capture_output=True,
        text=True,
    )
    if build.returncode != 0:
        return (
            None,
            f"{clangxx} cannot link the libFuzzer/ASan runtimes (apt-get install -y libclang-rt-14-dev)",
        )
    return clangxx, ""


@pytest.mark.slow
def test_libfuzzer_finds_no_crash(tmp_path):
    clangxx, reason = libfuzzer_clang(tmp_path)
    if clangxx is None:
        pytest.skip(reason)
    artifacts = ROOT / ".fuzz" / "artifacts"
    before = set(artifacts.iterdir()) if artifacts.exists() else set()
    run = subprocess.run(
        ["bash", str(FUZZ_SCRIPT), "20"],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, CLANGXX=clangxx),
    )
    log = run.stdout + run.stderr
    # the report's head says what failed; its tail holds the stats (peak RSS, executions)
    errors = "\n".join(line for line in log.splitlines() if "ERROR" in line or "SUMMARY" in line)
    assert run.returncode == 0, f"{errors}\n...\n{log[-2000:]}"
    assert not [m for m in SANITIZER_MARKERS if m in log], f"{errors}\n...\n{log[-2000:]}"
    assert "Done " in log  # libFuzzer ran to its time limit
    assert set(artifacts.iterdir()) == before  # no crash/leak/timeout reproducer written


def valid_wav(subtype: str, channels: int, frames: int, fmt: str = "WAV") -> bytes:
    buf = io.BytesIO()
    x = np.random.default_rng(frames).uniform(-1, 1, (frames, channels))
    sf.write(buf, x, 16000, subtype=subtype, format=fmt)
    return buf.getvalue()


SEEDS = [
    valid_wav(s, c, n)
    for s in ("PCM_U8", "PCM_16", "PCM_24", "PCM_32", "FLOAT", "DOUBLE")
    for c, n in ((1, 9), (2, 5), (6, 3))
] + [valid_wav("PCM_16", 2, 7, fmt="RF64")]


def assert_valid_or_value_error(blob: bytes) -> None:
    try:
        x, sr = _core.decode_wav(blob, "fuzz")
    except ValueError as exc:
        assert str(exc).startswith("fuzz: ")
        return
    assert isinstance(sr, int) and 1 <= sr <= 1_000_000
    assert x.dtype == np.float32 and x.ndim == 1 and len(x) > 0
    assert np.all(np.isfinite(x))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=512))
def test_random_bytes(blob):
    assert_valid_or_value_error(blob)
    assert_valid_or_value_error(b"RIFF" + blob[:4] + b"WAVE" + blob[4:])


@st.composite
def mutated_wav(draw):
    blob = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["byte", "u32", "truncate", "append"]))
        if kind == "byte" and blob:  # overwrite a header byte
            pos = draw(st.integers(0, min(len(blob), 120) - 1))
            blob[pos] = draw(st.integers(0, 255))
        elif kind == "u32" and len(blob) >= 4:  # forge a size/rate/format field
            pos = draw(st.integers(0, min(len(blob), 116) - 4))
            value = draw(
                st.sampled_from([0, 1, 2, 3, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF])
                | st.integers(0, 2**32 - 1)
            )
            blob[pos : pos + 4] = value.to_bytes(4, "little")
        elif kind == "truncate":
            del blob[draw(st.integers(0, len(blob))) :]
        elif kind == "append":
            blob += draw(st.binary(max_size=64))
    return bytes(blob)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_wav())
def test_mutated_wav_headers(blob):
    assert_valid_or_value_error(blob)


@pytest.mark.parametrize("seed", range(len(SEEDS)))
def test_every_truncation_of_a_valid_file(seed):
    blob = SEEDS[seed]
    for end in range(len(blob) + 1):
        assert_valid_or_value_error(blob[:end])
