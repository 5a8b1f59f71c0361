"""Shared plumbing of the bench/ scripts: interleaved rounds, the `name | ours | peer | ratio` table.

A ratio is measured as interleaved rounds (`interleaved_rounds`): each round times every
contender once, in turn, so slow drift of a shared machine lands on both sides of a ratio alike;
the row keeps each round's ratio and reports their median.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np


@dataclass
class Row:
    """One comparison: throughput of ours and of the peer in `unit` (higher is better)."""

    name: str
    unit: str
    ours: float
    peer: float
    #: ours/peer of each interleaved round; when given, `ratio` is their median
    round_ratios: list[float] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        if self.round_ratios:
            return float(np.median(self.round_ratios))
        return self.ours / self.peer if self.peer > 0 else float("inf")


MIN_ROUNDS = 3


def interleaved_rounds(runs: dict[str, Callable[[], object]], rounds: int, warm_up: bool = True,
                       sync: Callable[[], None] | None = None) -> dict[str, list[float]]:
    """Wall seconds of each run in each of `rounds` rounds (at least MIN_ROUNDS); a round calls
    every run once, in turn. warm_up: one untimed call of each first; sync: called before every
    clock read (e.g. torch.cuda.synchronize)."""
    rounds = max(int(rounds), MIN_ROUNDS)
    if warm_up:
        for fn in runs.values():
            fn()
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, fn in runs.items():
            if sync:
                sync()
            start = time.perf_counter()
            fn()
            if sync:
                sync()
            seconds[name].append(time.perf_counter() - start)
    return seconds


def rate_row(name: str, unit: str, work: float, ours: list[float], peer: list[float]) -> Row:
    """A Row of throughputs `work / seconds` from the interleaved rounds of two runs: ours and peer
    are the median rates, the ratio the median of the per-round ratios."""
    if len(ours) != len(peer) or not ours:
        raise ValueError(f"{name}: {len(ours)} rounds of ours but {len(peer)} of the peer")
    ratios = [p / o for o, p in zip(ours, peer)]
    return Row(name, unit, work / float(np.median(ours)), work / float(np.median(peer)), ratios)


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


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), or the platform's processor string elsewhere."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def pool_threads() -> str:
    """Each thread pool of this process and its size: torch's intra-op and inter-op teams (when torch
    is loaded; a bench that does not use torch does not import it for this line) and every BLAS/OpenMP
    pool threadpoolctl finds."""
    import sys

    pools = []
    torch = sys.modules.get("torch")
    if torch is not None:
        pools.append(f"torch intra-op {torch.get_num_threads()}, inter-op {torch.get_num_interop_threads()}")
    try:
        from threadpoolctl import threadpool_info

        pools += [f"{p['internal_api']} ({Path(p['filepath']).name}) {p['num_threads']}" for p in threadpool_info()]
    except ImportError:
        pass
    return ", ".join(pools) or "none loaded"


def source_revision() -> str:
    """The git commit of the checkout the bench runs from, '+ local changes' when the tree differs."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head or "unknown") + (" + local changes" if dirty else "")


def measured_line() -> str:
    """When, where and on what the rows above were measured: UTC time, CPU model, the CPUs this
    process may use (affinity, cgroup quota), the load average, the commit and this process's pools."""
    import datetime

    from sdscore.runtime.compute_budget import affinity_cores, quota_cores

    load = " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    quota = quota_cores()
    return (f"measured {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC on {cpu_model()}: "
            f"{os.cpu_count()} CPUs, {affinity_cores()} in this process's affinity, cgroup quota "
            f"{'none' if quota is None else quota}; load average {load}; sdscore {source_revision()}; "
            f"this process's pools: {pool_threads()}")


def report(title: str, rows: list[Row], as_json: bool, peers: str = "") -> None:
    """Print the table (and the JSON line when asked), after a line saying when and on what it was
    measured and, when given, how the peers ran (processes, threads per pool)."""
    width = max(len(r.name) for r in rows)
    print(f"\n{title}")
    print(measured_line())
    if peers:
        print(f"peers: {peers}")
    print(f"{'name':<{width}} | {'ours':>12} | {'peer':>12} | {'ratio':>6} | unit")
    print(f"{'-' * width}-+-{'-' * 12}-+-{'-' * 12}-+-{'-' * 6}-+-----")
    for r in rows:
        rounds = f" | rounds {' '.join(f'{x:.2f}' for x in r.round_ratios)}" if r.round_ratios else ""
        print(f"{r.name:<{width}} | {r.ours:>12.1f} | {r.peer:>12.1f} | {r.ratio:>6.2f} | {r.unit}{rounds}")
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


#: a folder of clips rendered ahead (bench/gpu/prepare.sh): on machines without flite and
#: espeak-ng (the lent GPU machine), render_tts copies the clip of each (voice, text) from there
TTS_CACHE_ENV = "SDSCORE_TTS_CACHE"


def _cache_name(engine: str, voice: str, text: str) -> str:
    import hashlib

    return hashlib.sha1(f"{engine}|{voice}|{text}".encode()).hexdigest()[:20] + ".flac"


def _from_cache(cache: Path, name: str, path: Path) -> bool:
    """Write the cached clip `name` (FLAC, 16-bit) as the 16-bit WAV `path`; False when absent."""
    if not (cache / name).is_file():
        return False
    import soundfile as sf

    samples, rate = sf.read(cache / name, dtype="int16")
    sf.write(path, samples, rate, subtype="PCM_16")
    return True


def _to_cache(cache: Path, name: str, path: Path) -> None:
    import soundfile as sf

    samples, rate = sf.read(path, dtype="int16")
    cache.mkdir(parents=True, exist_ok=True)
    sf.write(cache / name, samples, rate, format="FLAC", subtype="PCM_16")


def render_tts(folder: Path, count: int, words: tuple[int, int], espeak_every: int, prefix: str) -> list[str]:
    """count seeded TTS files of words[0]..words[1] words; every espeak_every-th from espeak-ng, else flite.

    With $SDSCORE_TTS_CACHE set, a clip found there is copied instead of rendered, and a clip
    rendered is added there (bench/gpu/prepare.sh fills it for the GPU run)."""
    cache = Path(os.environ[TTS_CACHE_ENV]) if os.environ.get(TTS_CACHE_ENV) else None
    have_tts = shutil.which("flite") is not None and shutil.which("espeak-ng") is not None
    if not have_tts and cache is None:
        raise SystemExit("the benchmark needs flite and espeak-ng to render speech (make install)")
    rng = np.random.default_rng(0)
    paths = []
    for i in range(count):
        text = " ".join(rng.choice(WORDS, int(rng.integers(words[0], words[1] + 1))))
        path = folder / f"{prefix}{i:03d}.wav"
        if i % espeak_every == espeak_every - 1:
            voice = ESPEAK_VOICES[i // espeak_every % len(ESPEAK_VOICES)]
            command = ["espeak-ng", "-v", voice, "-w", str(path), text]
        else:
            voice = FLITE_VOICES[i % len(FLITE_VOICES)]
            command = ["flite", "-voice", voice, "-t", text, "-o", str(path)]
        name = _cache_name(command[0], voice, text)
        if cache is None or not _from_cache(cache, name, path):
            if not have_tts:
                raise SystemExit(f"clip {i} ({command[0]} voice {voice!r}: {text!r}) is not in "
                                 f"${TTS_CACHE_ENV}={cache} and flite/espeak-ng are not installed here; "
                                 "fill the cache with bench/gpu/prepare.sh")
            subprocess.run(command, check=True)
            if cache is not None:
                _to_cache(cache, name, path)
        paths.append(str(path))
    return paths
