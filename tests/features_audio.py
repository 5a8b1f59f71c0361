"""Real speech for the feature-extractor tests: flite / espeak-ng renderings, plus synthetic signals."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr
from sdscore.audio.batch import AudioBatch
from sdscore.ragged import pack

RATE = 16000
SENTENCES = {
    "slt": (
        "flite",
        "slt",
        "The quick brown fox jumps over the lazy dog near the river bank.",
    ),
    "rms": (
        "flite",
        "rms",
        "Hello there. I will answer slowly. Let us count: one, two, three, four.",
    ),
    "awb": ("flite", "awb", "Sure, the capital of Australia is Canberra."),
    "kal": ("flite", "kal", "Turn left at the next corner."),
    "espeak": (
        "espeak-ng",
        "en-us",
        "This is a robotic voice speaking for a short while",
    ),
}


def render(folder: Path, names=tuple(SENTENCES)) -> dict[str, Path]:
    """TTS files (their native rates) for the given SENTENCES keys; skips when a voice tool is missing."""
    paths = {}
    for name in names:
        tool, voice, text = SENTENCES[name]
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
        path = folder / f"{name}.wav"
        if tool == "flite":
            subprocess.run(
                ["flite", "-voice", voice, "-t", text, "-o", str(path)], check=True
            )
        else:
            subprocess.run(
                ["espeak-ng", "-v", voice, "-w", str(path), text], check=True
            )
        paths[name] = path
    return paths


def read16(path: Path) -> np.ndarray:
    """A file as float32 mono at 16 kHz, clipped to [-1, 1] (what every reference accepts)."""
    x, rate = sf.read(path, dtype="float32", always_2d=True)
    x = soxr.resample(x.mean(axis=1), rate, RATE) if rate != RATE else x.mean(axis=1)
    return np.clip(x, -1.0, 1.0).astype(np.float32)


def harmonic(
    f0: float,
    seconds: float,
    rate: int = RATE,
    level: float = 0.2,
    vibrato: float = 0.0,
) -> np.ndarray:
    """A voiced-like harmonic tone (14 partials) at f0 Hz, optionally with ±vibrato Hz at 3 Hz."""
    t = np.arange(int(seconds * rate)) / rate
    phase = 2 * np.pi * np.cumsum(f0 + vibrato * np.sin(2 * np.pi * 3 * t)) / rate
    partials = [np.sin(k * phase) / k for k in range(1, 15) if k * f0 < rate / 2]
    return (level * sum(partials)).astype(np.float32)


def batch_of(
    items: list[np.ndarray], rate: int = RATE, errors: list[str | None] | None = None
) -> AudioBatch:
    """An AudioBatch of arrays (errors default to all loaded)."""
    data, offsets = pack([np.asarray(x, dtype=np.float32) for x in items])
    return AudioBatch(data, offsets, errors or [None] * len(items), rate)


def band_rel_rms(a: np.ndarray, b: np.ndarray, rate: int, band_hz: float) -> float:
    """Relative RMS difference of two signals below band_hz (FFT brick wall)."""
    n = min(len(a), len(b))
    fa, fb = np.fft.rfft(a[:n]), np.fft.rfft(b[:n])
    keep = np.fft.rfftfreq(n, 1 / rate) < band_hz
    return float(np.linalg.norm((fa - fb)[keep]) / np.linalg.norm(fb[keep]))
