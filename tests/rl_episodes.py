"""Shared by the RL tests: the shipped compact reward model and short spoken episodes."""

from __future__ import annotations

import io

import numpy as np
import soundfile as sf
from sdscore.models.episodes import Episode, Turn

SR = 16000
QUESTIONS = ["what is the weather like today?", "can you book a table for two?", "how far is the station?",
             "tell me a joke", "what time is it in tokyo?"]


def wave(rng: np.random.Generator, seconds: float) -> np.ndarray:
    """A short voiced-like signal: a pitch-modulated tone plus noise (float32, 16 kHz)."""
    n = int(seconds * SR)
    t = np.arange(n) / SR
    f0 = rng.uniform(100, 250) * (1 + 0.1 * np.sin(2 * np.pi * rng.uniform(1, 4) * t))
    tone = 0.3 * np.sin(2 * np.pi * np.cumsum(f0) / SR)
    return (tone + 0.02 * rng.standard_normal(n)).astype(np.float32)


def episodes(n: int, seed: int = 0) -> list[Episode]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        turns = [Turn("user", QUESTIONS[i % len(QUESTIONS)], wave(rng, rng.uniform(0.4, 1.2))),
                 Turn("assistant", f"answer number {i}", wave(rng, rng.uniform(0.3, 1.5)))]
        out.append(Episode(tuple(turns), id=f"e{i}"))
    return out


def wav_bytes(samples: np.ndarray, rate: int = SR, fmt: str = "WAV") -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, samples, rate, format=fmt, subtype="PCM_16")
    return buffer.getvalue()


def compact_scorer(**options):
    from sdscore.models.pretrained import default_model_dir
    from sdscore.runtime.reward.episode_scorer import RewardScorer

    return RewardScorer.from_pretrained(default_model_dir(), device="cpu", **options)
