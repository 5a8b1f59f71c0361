"""Audio seconds decoded + resampled to 16 kHz per second: sdscore.audio.load_many vs the peers.

Peers, on the same files in the same run: a plain soundfile.read + soxr.resample(HQ) loop, the
same on a thread pool of as many threads as load_many uses, and librosa.load(sr=16000). All are
timed in interleaved rounds (common.interleaved_rounds): each row is the median of its per-round
ratios, so the VM's drift between runs falls on both sides.

Then the resampler alone, per core, at every ratio the loaders meet (telephone-band and other
upsampling included): sdscore._core.resample vs soxr.resample(quality="HQ") (the same band
edges: flat to 0.913, stopband from 1.0 of the lower Nyquist), one call per clip on the same
speech-like clips, one thread each (neither spawns any). These rows time CPU seconds of the
calling thread (time.thread_time), not wall time: both sides run on that one thread, so this is
the cost per core, and a co-tenant that preempts the thread does not land in one side's rounds.
Each timed call repeats the clip list until ours takes ~30 ms; rounds interleave ours and soxr.
`--resample-only` runs just these rows.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sdscore.audio  # noqa: E402
from common import MIN_ROUNDS, Row, interleaved_rounds, parser, rate_row, report  # noqa: E402
from sdscore import _core  # noqa: E402

TARGET = 16000
#: (from, to) Hz of the per-core resampler rows: upsampling first (telephone band, 11.025/22.05 kHz
#: to 24 kHz, 16 kHz to 24/48 kHz), then the downsampling ratios of the loading rows
RESAMPLE_PAIRS = [(8000, 16000), (8000, 24000), (11025, 24000), (22050, 24000), (16000, 24000), (16000, 48000),
                  (11025, 16000), (22050, 16000), (44100, 16000), (48000, 16000)]
RESAMPLE_ROUNDS = 9
RESAMPLE_CALL_SECONDS = 0.03  # CPU seconds of ours per timed call (the clip list repeated)


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


def thread_seconds(fn) -> float:
    """CPU seconds the calling thread spent in fn()."""
    start = time.thread_time()
    fn()
    return time.thread_time() - start


def resample_rows(clips_per_pair: int, rounds: int, rng: np.random.Generator) -> list[Row]:
    """Per-core rows: audio seconds resampled per CPU second of one thread, ours vs soxr HQ, per ratio."""
    rows = []
    for sr_in, sr_out in RESAMPLE_PAIRS:
        clips = [speechlike(rng.uniform(3.0, 8.0), sr_in, rng) for _ in range(clips_per_pair)]
        once = thread_seconds(lambda: [_core.resample(c, sr_in, sr_out) for c in clips])  # also designs the bank
        repeat = max(1, round(RESAMPLE_CALL_SECONDS / max(once, 1e-6)))
        batch = clips * repeat
        runs = {
            "ours": lambda: [_core.resample(c, sr_in, sr_out) for c in batch],
            "soxr": lambda: [soxr.resample(c, sr_in, sr_out, quality="HQ") for c in batch],
        }
        timed: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(max(rounds, MIN_ROUNDS)):
            for name, fn in runs.items():
                timed[name].append(thread_seconds(fn))
        seconds = repeat * sum(len(c) for c in clips) / sr_in
        rows.append(rate_row(f"resample vs soxr HQ, 1 thread each, {sr_in}->{sr_out}", "audio s/CPU s", seconds,
                             timed["ours"], timed["soxr"]))
    return rows


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--resample-only", action="store_true", help="only the per-core resampler rows")
    args = p.parse_args()
    count = 40 if args.quick else 200
    repeats = args.repeats or 3
    threads = os.cpu_count() or 1
    rng = np.random.default_rng(0)
    isa = _core.simd_isa()
    rounds = max(repeats, RESAMPLE_ROUNDS)
    resampled = resample_rows(10 if args.quick else 40, rounds, rng)
    if args.resample_only:
        report(f"resampler per core ({isa} kernels): {10 if args.quick else 40} clips of 3-8 s per ratio, "
               f"1 thread each, median of {rounds} interleaved rounds", resampled, args.json,
               peers="soxr.resample(HQ) on 1 thread per clip, in this process")
        return
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
    rows += resampled
    report(f"audio: {count} files per rate, {threads} threads, median of {max(repeats, 3)} interleaved rounds; "
           f"resampler rows per core ({isa} kernels), {10 if args.quick else 40} clips per ratio, {rounds} rounds",
           rows, args.json,
           peers=f"soundfile + soxr HQ loop on 1 thread; the same on a {threads}-thread pool; librosa.load loop "
                 f"(its soxr_hq) on 1 thread; all in this process")


if __name__ == "__main__":
    main()
