"""TRACE blueprint throughput: batched sdscore.features vs the per-file reference pipeline, CPU.

Inputs are spoken responses rendered with flite and espeak-ng voices (6-30 words, about 2-10 s).
The blueprint row times ``BlueprintBuilder(asr=None).build(paths)`` (load_many, silero VAD stepped
in lockstep across files, DNSMOS personalized + P.808 with shared trunks, YIN pitch, BS.1770
loudness; no cache) against the per-file loop a user would write with the reference tools:
``speechmos.dnsmos.run(x, 16000, "dnsmos_personalized")``, ``pyloudnorm.Meter.integrated_loudness``,
``parselmouth.Sound(x24k).to_pitch()`` and silero's ``get_speech_timestamps`` with its default
(JIT) model, after soundfile + soxr loading. Per-extractor rows split the same comparison on
preloaded audio; ASR (pocketsphinx both sides, so about 1x) runs without --quick. Two last rows
are ablations of our own parallelism: YIN over frame runs on all cores vs one thread, and the
blueprint with ASR on a pocketsphinx worker pool (jobs = cores) vs in-process (jobs=1).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Row, parser, render_tts, report
from sdscore.audio import load_many
from sdscore.features import BlueprintBuilder, make_extractor
from sdscore.features.extract import select

RATE = 16000


def load16(path: str) -> np.ndarray:
    x, rate = sf.read(path, dtype="float32", always_2d=True)
    return np.clip(soxr.resample(x.mean(axis=1), rate, RATE), -1.0, 1.0).astype(
        np.float32
    )


class Reference:
    """The per-file reference tools, models loaded once."""

    def __init__(self):
        import parselmouth
        import pyloudnorm
        import torch
        from silero_vad import get_speech_timestamps, load_silero_vad
        from speechmos import dnsmos

        self.dnsmos, self.parselmouth, self.pyloudnorm, self.torch = (
            dnsmos,
            parselmouth,
            pyloudnorm,
            torch,
        )
        self.vad_model, self.get_speech_timestamps = (
            load_silero_vad(),
            get_speech_timestamps,
        )

    def quality(self, x):
        return self.dnsmos.run(x, RATE, model_type="dnsmos_personalized")

    def loudness(self, x):
        meter = self.pyloudnorm.Meter(RATE)
        lufs = meter.integrated_loudness(x.astype(np.float64))
        blocks = np.asarray(meter.blockwise_loudness)
        return lufs, blocks[blocks > lufs - 10].std()

    def pitch(self, x):
        f0 = self.parselmouth.Sound(
            soxr.resample(x, RATE, 24000).astype(np.float64), 24000
        ).to_pitch()
        voiced = f0.selected_array["frequency"]
        voiced = voiced[voiced > 0]
        return (
            voiced.mean(),
            voiced.std(),
            np.interp(
                np.linspace(0, len(voiced) - 1, 20), np.arange(len(voiced)), voiced
            ),
        )

    def vad(self, x):
        return self.get_speech_timestamps(self.torch.from_numpy(x), self.vad_model)

    def blueprint(self, path):
        x = load16(path)
        return self.quality(x), self.loudness(x), self.pitch(x), self.vad(x)


def warm_then_best(
    run: Callable[[Sequence], object], items: Sequence, repeats: int
) -> float:
    """Best seconds of run(items) after one warm-up call on the first item (lazy imports, JIT)."""
    run(items[:1])
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run(items)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    count = 4 if args.quick else 24
    repeats = args.repeats or (1 if args.quick else 2)
    warnings.filterwarnings("ignore")
    ref = Reference()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = render_tts(Path(tmp), count, words=(6, 30), espeak_every=4, prefix="r")
        seconds = sum(sf.info(p).duration for p in paths)
        builder = BlueprintBuilder(asr=None)
        ours = count / warm_then_best(builder.build, paths, repeats)
        peer = count / warm_then_best(
            lambda ps: [ref.blueprint(p) for p in ps], paths, repeats
        )
        rows.append(
            Row("blueprint (vad+quality+pitch+loudness)", "responses/s", ours, peer)
        )
        batch = load_many(paths, RATE)
        arrays = [np.clip(x, -1.0, 1.0) for x in batch]
        extractors = {
            "vad": (make_extractor("vad"), ref.vad, "silero get_speech_timestamps"),
            "pitch": (make_extractor("pitch"), ref.pitch, "parselmouth to_pitch"),
            "loudness": (make_extractor("loudness"), ref.loudness, "pyloudnorm"),
        }
        if (
            not args.quick
        ):  # the slow peers: the blueprint row already covers DNSMOS in --quick
            from pocketsphinx import Decoder

            extractors["quality"] = (
                make_extractor("quality", standard=False),
                ref.quality,
                "speechmos",
            )
            asr = make_extractor("asr")
            decoder = Decoder(samprate=RATE)

            def sphinx(x):
                decoder.start_utt()
                decoder.process_raw(
                    (x * 32767).astype(np.int16).tobytes(), full_utt=True
                )
                decoder.end_utt()
                return [s.word for s in decoder.seg()]

            extractors["asr"] = (asr, sphinx, "pocketsphinx loop")
        for name, (ex, peer_fn, peer_name) in extractors.items():
            ours = seconds / warm_then_best(
                lambda idx, ex=ex: ex.run(select(batch, idx), {}), range(count), repeats
            )
            peer = seconds / warm_then_best(
                lambda idx, fn=peer_fn: [fn(arrays[i]) for i in idx],
                range(count),
                repeats,
            )
            rows.append(Row(f"{name} vs {peer_name}", "audio s/s", ours, peer))
        # our own parallelism against the same code on one core (ablations, not peers)
        cores = os.cpu_count() or 1
        threaded, single = make_extractor("pitch"), make_extractor("pitch", num_threads=1)
        times = {}
        for label, ex in (("threaded", threaded), ("single", single)):
            times[label] = warm_then_best(lambda idx, ex=ex: ex.run(select(batch, idx), {}), range(count), repeats)
        rows.append(Row(f"pitch: YIN on {cores} threads vs 1 thread", "audio s/s",
                        seconds / times["threaded"], seconds / times["single"]))
        if not args.quick:
            pooled, serial = BlueprintBuilder(jobs=cores), BlueprintBuilder(jobs=1)
            try:
                ours = count / warm_then_best(pooled.build, paths, repeats)
                peer = count / warm_then_best(serial.build, paths, repeats)
            finally:
                pooled.close()
                serial.close()
            rows.append(Row(f"blueprint with ASR: pocketsphinx on {cores} worker processes vs in-process",
                            "responses/s", ours, peer))
    report(
        f"features: {count} TTS responses ({seconds:.0f} s of audio), CPU, best of {repeats}",
        rows,
        args.json,
    )


if __name__ == "__main__":
    main()
