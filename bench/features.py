"""TRACE blueprint throughput: batched sdscore.features vs the per-file reference pipeline, CPU.

Inputs are spoken responses rendered with flite and espeak-ng voices (6-30 words, about 2-10 s).
The blueprint row times ``BlueprintBuilder(asr=None).build(paths)`` (load_many, silero VAD stepped
in lockstep across files, DNSMOS personalized + P.808 with shared trunks, YIN pitch, BS.1770
loudness; no cache) against the per-file loop a user would write with the reference tools:
``speechmos.dnsmos.run(x, 16000, "dnsmos_personalized")``, ``pyloudnorm.Meter.integrated_loudness``,
``parselmouth.Sound(x24k).to_pitch()`` and silero's ``get_speech_timestamps`` with its default
(JIT) model, after soundfile + soxr loading. The VAD row has two peers, silero's JIT model and
its ONNX model (onnxruntime), and names the faster one. Every row is timed as interleaved rounds
(bench/common.py), the ratio being the median of the per-round ratios. Per-extractor rows split the same comparison on
preloaded audio; ASR (pocketsphinx both sides, so about 1x) runs without --quick. Two last rows
are ablations of our own parallelism: YIN over frame runs on all cores vs one thread, and the
blueprint with ASR on a pocketsphinx worker pool (jobs = cores) vs in-process (jobs=1).
"""

from __future__ import annotations

import os
import sys
import tempfile
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import MIN_ROUNDS, Row, interleaved_rounds, parser, rate_row, render_tts, report
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
        self.vad_onnx_model = load_silero_vad(onnx=True)

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

    def vad_onnx(self, x):
        """The same call on silero's ONNX model (onnxruntime), the package's other shipped form."""
        return self.get_speech_timestamps(self.torch.from_numpy(x), self.vad_onnx_model)

    def blueprint(self, path):
        x = load16(path)
        return self.quality(x), self.loudness(x), self.pitch(x), self.vad(x)


def timed_rows(name: str, unit: str, work: float, runs: dict[str, Callable[[], object]],
               warm_ups: Sequence[Callable[[], object]], rounds: int, ours: str = "ours") -> list[Row]:
    """One row per peer in `runs`: `ours` against it, over the same interleaved rounds. warm_ups run
    once, untimed, first (on one item: a full warm-up would double the slow peers' cost)."""
    for fn in warm_ups:
        fn()
    seconds = interleaved_rounds(runs, rounds, warm_up=False)
    peers = [k for k in runs if k != ours]
    rows = [rate_row(f"{name} vs {peer}", unit, work, seconds[ours], seconds[peer]) for peer in peers]
    if len(peers) > 1:
        best = min(peers, key=lambda k: float(np.median(seconds[k])))
        print(f"{name}: best peer is {best}")
        rows = [Row(r.name + (" [best peer]" if r.name.endswith(best) else ""), r.unit, r.ours, r.peer, r.round_ratios)
                for r in rows]
    return rows


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    count = 4 if args.quick else 24
    rounds = args.repeats or 3
    warnings.filterwarnings("ignore")
    ref = Reference()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = render_tts(Path(tmp), count, words=(6, 30), espeak_every=4, prefix="r")
        seconds = sum(sf.info(p).duration for p in paths)
        builder = BlueprintBuilder(asr=None)
        rows += timed_rows(
            "blueprint (vad+quality+pitch+loudness)", "responses/s", count,
            {"ours": lambda: builder.build(paths), "per-file reference tools": lambda: [ref.blueprint(p) for p in paths]},
            [lambda: builder.build(paths[:1]), lambda: ref.blueprint(paths[0])], rounds,
        )
        batch = load_many(paths, RATE)
        arrays = [np.clip(x, -1.0, 1.0) for x in batch]
        everything = range(count)

        def ours_run(ex):
            return lambda: ex.run(select(batch, everything), {})

        def peer_run(fn):
            return lambda: [fn(x) for x in arrays]

        def warm(ex, fn):
            return [lambda: ex.run(select(batch, range(1)), {}), lambda: fn(arrays[0])]

        vad = make_extractor("vad")
        rows += timed_rows(
            "vad", "audio s/s", seconds,
            {"ours": ours_run(vad), "silero get_speech_timestamps (JIT model)": peer_run(ref.vad),
             "silero get_speech_timestamps (ONNX model)": peer_run(ref.vad_onnx)},
            warm(vad, ref.vad) + [lambda: ref.vad_onnx(arrays[0])], rounds,
        )
        extractors = {
            "pitch": (make_extractor("pitch"), ref.pitch, "parselmouth to_pitch"),
            "loudness": (make_extractor("loudness"), ref.loudness, "pyloudnorm"),
        }
        if not args.quick:  # the slow peers: the blueprint row already covers DNSMOS in --quick
            from pocketsphinx import Decoder

            extractors["quality"] = (make_extractor("quality", standard=False), ref.quality, "speechmos")
            decoder = Decoder(samprate=RATE)

            def sphinx(x):
                decoder.start_utt()
                decoder.process_raw((x * 32767).astype(np.int16).tobytes(), full_utt=True)
                decoder.end_utt()
                return [s.word for s in decoder.seg()]

            extractors["asr"] = (make_extractor("asr"), sphinx, "pocketsphinx loop")
        for name, (ex, peer_fn, peer_name) in extractors.items():
            rows += timed_rows(name, "audio s/s", seconds, {"ours": ours_run(ex), peer_name: peer_run(peer_fn)},
                               warm(ex, peer_fn), rounds)
        # our own parallelism against the same code on one core (ablations, not peers)
        cores = os.cpu_count() or 1
        threaded, single = make_extractor("pitch"), make_extractor("pitch", num_threads=1)
        rows += timed_rows(f"pitch: YIN on {cores} threads", "audio s/s", seconds,
                           {"ours": ours_run(threaded), "1 thread": ours_run(single)},
                           [ours_run(threaded), ours_run(single)], rounds)
        if not args.quick:
            pooled, serial = BlueprintBuilder(jobs=cores), BlueprintBuilder(jobs=1)
            try:
                rows += timed_rows(
                    f"blueprint with ASR: pocketsphinx on {cores} worker processes", "responses/s", count,
                    {"ours": lambda: pooled.build(paths), "in-process": lambda: serial.build(paths)},
                    [lambda: pooled.build(paths[:1]), lambda: serial.build(paths[:1])], rounds,
                )
            finally:
                pooled.close()
                serial.close()
    report(
        f"features: {count} TTS responses ({seconds:.0f} s of audio), CPU, median of {max(rounds, MIN_ROUNDS)} "
        f"interleaved rounds",
        rows,
        args.json,
        peers="the per-file reference loop in this process (speechmos, pyloudnorm, parselmouth, silero JIT/ONNX "
              "with their default threads: the pools listed above)",
    )


if __name__ == "__main__":
    main()
