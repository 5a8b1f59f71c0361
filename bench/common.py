"""Shared plumbing of the bench/ scripts: best-of timing, the `name | ours | peer | ratio` table."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np


@dataclass
class Row:
    """One comparison: throughput of ours and of the peer in `unit` (higher is better)."""

    name: str
    unit: str
    ours: float
    peer: float

    @property
    def ratio(self) -> float:
        return self.ours / self.peer if self.peer > 0 else float("inf")


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="small inputs; finishes in < 1 min on 2 cores")
    p.add_argument("--json", action="store_true", help="end with one JSON line of the rows")
    p.add_argument("--repeats", type=int, default=None, help="timed repeats per measurement (best kept)")
    return p


def best_seconds(fn: Callable[[], object], repeats: int) -> float:
    """Best wall time of `repeats` calls after one untimed warm-up call."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def report(title: str, rows: list[Row], as_json: bool) -> None:
    """Print the table (and the JSON line when asked)."""
    width = max(len(r.name) for r in rows)
    print(f"\n{title}")
    print(f"{'name':<{width}} | {'ours':>12} | {'peer':>12} | {'ratio':>6} | unit")
    print(f"{'-' * width}-+-{'-' * 12}-+-{'-' * 12}-+-{'-' * 6}-+-----")
    for r in rows:
        print(f"{r.name:<{width}} | {r.ours:>12.1f} | {r.peer:>12.1f} | {r.ratio:>6.2f} | {r.unit}")
    if as_json:
        print(json.dumps({"rows": [{**asdict(r), "ratio": round(r.ratio, 4)} for r in rows]}))


WORDS = [
    "sure",
    "here",
    "is",
    "a",
    "short",
    "answer",
    "to",
    "your",
    "question",
    "the",
    "weather",
    "tomorrow",
    "will",
    "be",
    "sunny",
    "with",
    "a",
    "light",
    "breeze",
    "and",
    "you",
    "should",
    "bring",
    "a",
    "jacket",
    "because",
    "evenings",
    "get",
    "cold",
    "near",
    "the",
    "river",
]
FLITE_VOICES = ("slt", "awb", "rms", "kal")
ESPEAK_VOICES = ("en-us", "en+f3", "en-gb", "en+m3")


def render_tts(folder: Path, count: int, words: tuple[int, int], espeak_every: int, prefix: str) -> list[str]:
    """count seeded TTS files of words[0]..words[1] words; every espeak_every-th from espeak-ng, else flite."""
    if shutil.which("flite") is None or shutil.which("espeak-ng") is None:
        raise SystemExit("the benchmark needs flite and espeak-ng to render speech (make install)")
    rng = np.random.default_rng(0)
    paths = []
    for i in range(count):
        text = " ".join(rng.choice(WORDS, int(rng.integers(words[0], words[1] + 1))))
        path = folder / f"{prefix}{i:03d}.wav"
        if i % espeak_every == espeak_every - 1:
            voice = ESPEAK_VOICES[i // espeak_every % len(ESPEAK_VOICES)]
            subprocess.run(["espeak-ng", "-v", voice, "-w", str(path), text], check=True)
        else:
            voice = FLITE_VOICES[i % len(FLITE_VOICES)]
            subprocess.run(["flite", "-voice", voice, "-t", text, "-o", str(path)], check=True)
        paths.append(str(path))
    return paths
