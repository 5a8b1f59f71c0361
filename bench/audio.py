"""Audio seconds decoded + resampled to 16 kHz per second: sdscore.audio.load_many vs the peers.

Peers, on the same files in the same run: a plain soundfile.read + soxr.resample(HQ) loop, the
same on a thread pool of as many threads as load_many uses, and librosa.load(sr=16000). All are
timed in interleaved rounds (common.interleaved_rounds): each row is the median of its per-round
ratios, so the VM's drift between runs falls on both sides.
"""

from __future__ import annotations

import os
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sdscore.audio  # noqa: E402
from common import Row, interleaved_rounds, parser, rate_row, report  # noqa: E402

TARGET = 16000


def speechlike(seconds: float, rate: int, rng: np.random.Generator) -> np.ndarray:
    """A voiced harmonic source with vibrato, syllable envelope and noise bursts (int16-safe)."""
    t = np.arange(int(seconds * rate)) / rate
    f0 = rng.uniform(90, 220) * (1 + 0.08 * np.sin(2 * np.pi * rng.uniform(2, 5) * t))
    phase = 2 * np.pi * np.cumsum(f0) / rate
    voiced = sum(np.sin(k * phase) / k for k in range(1, 30) if k * 250 < rate / 2)
    envelope = np.clip(np.sin(2 * np.pi * rng.uniform(3, 5) * t), 0, None) ** 0.5
    noise = rng.standard_normal(len(t)) * (envelope < 0.1) * 0.05
    x = voiced * envelope * 0.2 + noise
    return (x / max(1e-9, np.abs(x).max()) * 0.8).astype(np.float32)


def write_files(folder: Path, rate: int, count: int, rng: np.random.Generator) -> list[str]:
    paths = []
    for i in range(count):
        path = folder / f"{rate}_{i:04d}.wav"
        sf.write(path, speechlike(rng.uniform(3.0, 8.0), rate, rng), rate, subtype="PCM_16")
        paths.append(str(path))
    return paths


def soundfile_soxr(path: str) -> np.ndarray:
    x, rate = sf.read(path, dtype="float32")
    return soxr.resample(x, rate, TARGET, quality="HQ")


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    count = 40 if args.quick else 200
    repeats = args.repeats or 3
    threads = os.cpu_count() or 1
    rng = np.random.default_rng(0)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(threads) as pool:
        for rate in (22050, 44100):
            paths = write_files(Path(tmp), rate, count, rng)
            seconds = sum(sf.info(p).duration for p in paths)
            runs = {
                "ours": lambda: sdscore.audio.load_many(paths, TARGET, threads),
                "loop": lambda: [soundfile_soxr(p) for p in paths],
                "pooled": lambda: list(pool.map(soundfile_soxr, paths)),
            }
            if not args.quick or rate == 44100:
                import librosa

                runs["librosa"] = lambda: [librosa.load(p, sr=TARGET) for p in paths]
            timed = interleaved_rounds(runs, repeats)
            rows.append(rate_row(f"load_many vs soundfile+soxr loop, {rate}->16k", "audio s/s", seconds,
                                 timed["ours"], timed["loop"]))
            rows.append(rate_row(f"load_many vs {threads}-thread soundfile+soxr, {rate}->16k", "audio s/s", seconds,
                                 timed["ours"], timed["pooled"]))
            if "librosa" in timed:
                rows.append(rate_row(f"load_many vs librosa.load loop, {rate}->16k", "audio s/s", seconds,
                                     timed["ours"], timed["librosa"]))
    report(f"audio: {count} files per rate, {threads} threads, median of {max(repeats, 3)} interleaved rounds", rows,
           args.json)


if __name__ == "__main__":
    main()
