"""bench/asr.py: the parameter count behind its memory check equals transformers' for every shape it
builds, and a shape too big for the machine is refused up front with the figure (it was killed by
the kernel: large-v3 in fp32 on a 24 GiB CPU machine)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))
import asr  # noqa: E402


@pytest.mark.parametrize("name", sorted(asr.SHAPES))
def test_parameter_count_matches_transformers(name):
    transformers = pytest.importorskip("transformers")
    shape = asr.SHAPES[name][0]
    with torch.device("meta"):
        model = transformers.WhisperForConditionalGeneration(transformers.WhisperConfig(**shape))
    counted = sum(p.numel() for p in model.parameters())
    assert abs(asr.parameters(shape) - counted) <= 0.01 * counted, (asr.parameters(shape), counted)


def test_a_shape_too_big_for_the_memory_is_refused(monkeypatch, tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 25165824 kB\nMemAvailable: 20971520 kB\n")  # 20 GiB available
    real_open = open

    def fake_open(path, *args, **kwargs):
        return real_open(meminfo if path == "/proc/meminfo" else path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", fake_open)
    too_big = r"needs about 2\d\.\d GiB on the CPU .* 20\.0 GiB are available; use --shape base"
    with pytest.raises(SystemExit, match=too_big):
        asr.refuse_if_too_big(asr.LARGE_V3, torch.float32, "cpu")
    asr.refuse_if_too_big(asr.BASE, torch.float32, "cpu")  # 74 M parameters: fine
    asr.refuse_if_too_big(asr.LARGE_V3, torch.float32, "cuda")  # device memory is not the host's
