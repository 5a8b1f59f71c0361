"""Naturalness throughput: `sdscore score naturalness` (batched) vs the SPEARBench authors' per-answer pipeline.

Inputs: answers of the small synthetic corpus (out/bench-corpus-small, built once: flite and
espeak-ng voices at 16, 22.05 and 32 kHz, 3-10 s each), the first --answers rows of its
naturalness.parquet (beyond its 40 rows, copies whose audio files are copied to new paths, so no
clip is analysed twice; there is no cache dir, so nothing is reused between rounds either).

Ours is the whole command `sdscore score naturalness MANIFEST --out OUT.parquet` (default --jobs:
the CPU count), timed from process start to exit: imports and model loading are in. It also does
more than the peers: VAD of the question clips, the language column, both WER normalisations.
The peers are this script re-run with --child, in a fresh process each, timed the same way:

- "authors' loop": what bin/base_metrics.py and bin/distrib_baselines/run_f0_extraction.py of
  thomasthebaud/SPEAR-benchmark-code do, one pass over the answers per metric, the clip read again
  in each pass (soundfile, soxr to 16 kHz where the file is not): silero-vad's own
  ``get_speech_timestamps`` with its ONNX model (onset of the first segment; samples / 16000
  instead of their return_seconds=True, which rounds to 0.1 s: the same work), pocketsphinx
  (Decoder settings of sdscore's PocketsphinxAsr, one utterance at a time), jiwer wer/cer with
  the authors' reference cleaning, ``speechmos.dnsmos.run(x, 16000, "dnsmos")`` (P.835 OVRL and
  P.808 in one call), ``parselmouth.Sound(path).to_pitch_ac(75, 500)`` + their F0 statistics,
  and the interruption columns.
- "Pool(2)": the same per-answer functions, the clip read once per answer, spread over a
  multiprocessing Pool of 2 workers (models loaded once per worker), jiwer in the parent. torch
  and onnxruntime keep their default threads: one thread per worker measured no faster here
  (12 answers: 37.6 and 34.8 s with one thread, 34.6 and 33.9 s with the defaults).

The three commands run once per round, rounds interleaved (3; --repeats; 1 with --quick), median
wall time reported. The first round's outputs are compared before the table is printed, and the
bench stops when they disagree: every side gives one row per answer and no error; our
pocketsphinx transcript must equal the peer's on every 16 kHz file (the same samples reach both
decoders; other files are resampled by different resamplers), and where the transcripts are equal,
WER and CER must be equal (1e-9); the two peers must give identical transcripts; DNSMOS OVRL and
P.808, F0 mean and the VAD onset are reported as max |difference| (DNSMOS must be within 0.01 on
the 16 kHz files, as tests/test_real_speech.py asks of speechmos; resampled files differ more).

Takes, after the one-time corpus build (about 1-2 min): about 9 minutes on 2 CPU cores with the
default 24 answers (pocketsphinx and speechmos cost about 1.7-1.9 s each per answer in the
peers); --quick (4 answers, 1 round) under a minute.
"""

from __future__ import annotations

import os

_ENV = dict(os.environ)  # children get this environment, before any import here edits os.environ

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))
from common import Row, parser, report

CORPUS = REPO / "out" / "bench-corpus-small"
MANIFEST = "naturalness.parquet"
RATE = 16000
F0_FLOOR, F0_CEILING = 75, 500
POOL_WORKERS = 2
DNSMOS_ABS = 0.01  # tests/test_real_speech.py's bound of ours vs speechmos


# ------------------------------------------------------------------- peer side (the --child process)


def load16(path: str):
    """float32 mono at 16 kHz: soundfile, then soxr where the file has another rate, clipped to [-1, 1]."""
    import soundfile as sf
    import soxr

    x, rate = sf.read(path, dtype="float32", always_2d=True)
    x = x.mean(axis=1)
    if rate != RATE:
        x = soxr.resample(x, rate, RATE)
    return np.clip(x, -1.0, 1.0).astype(np.float32)


class PeerModels:
    """The reference tools, loaded once (per process)."""

    def __init__(self):
        import warnings

        warnings.filterwarnings("ignore")
        import torch
        from pocketsphinx import Decoder
        from silero_vad import get_speech_timestamps, load_silero_vad
        from speechmos import dnsmos

        self.torch, self.get_speech_timestamps, self.dnsmos = torch, get_speech_timestamps, dnsmos
        self.vad_model = load_silero_vad(onnx=True)
        self.decoder = Decoder(samprate=RATE)  # sdscore's PocketsphinxAsr settings

    def onset_ms(self, x) -> float:
        """base_metrics.compute_latency: 1000 x the first speech onset, 0 without speech."""
        segments = self.get_speech_timestamps(self.torch.from_numpy(x), self.vad_model)
        return 1000.0 * segments[0]["start"] / RATE if segments else 0.0

    def transcribe(self, x) -> str:
        """pocketsphinx on one utterance, as sdscore's PocketsphinxAsr.decode (fillers dropped)."""
        import re

        d = self.decoder
        d.reinit_feat()
        d.start_utt()
        d.process_raw((np.clip(x, -1.0, 1.0) * 32767).astype(np.int16).tobytes(), full_utt=True)
        d.end_utt()
        return " ".join(re.sub(r"\(\d+\)$", "", s.word) for s in d.seg() if not s.word.startswith(("<", "[")))

    def mos(self, x) -> dict:
        """speechmos DNSMOS P.835 (OVRL) and P.808 of one clip."""
        out = self.dnsmos.run(x, RATE, model_type="dnsmos")
        return {"ovrl": float(out["ovrl_mos"]), "p808": float(out["p808_mos"])}

    @staticmethod
    def f0(path: str) -> dict:
        """run_f0_extraction.py: Praat autocorrelation pitch 75-500 Hz of the file, F0 statistics."""
        import parselmouth

        snd = parselmouth.Sound(path)
        f0 = snd.to_pitch_ac(pitch_floor=F0_FLOOR, pitch_ceiling=F0_CEILING).selected_array["frequency"]
        voiced = f0[f0 > 0]
        out = {"voiced_ratio": len(voiced) / len(f0) if len(f0) else 0.0, "f0_mean": None, "f0_std": None}
        if len(voiced):
            p10, p25, p75, p90 = np.percentile(voiced, [10, 25, 75, 90])
            out.update(f0_mean=float(voiced.mean()), f0_std=float(voiced.std()), f0_median=float(np.median(voiced)),
                       f0_min=float(voiced.min()), f0_max=float(voiced.max()), f0_p10=float(p10), f0_p25=float(p25),
                       f0_p75=float(p75), f0_p90=float(p90))
        return out


def clean_reference(text: str) -> str:
    """base_metrics.clean_reference: split at speaker tags (kept), rejoined with spaces."""
    import re

    return " ".join(re.split(r"(P\d{4}A?:\s*)", text))


def error_rates(reference: str, hypothesis: str) -> tuple[float, float]:
    """base_metrics.compute_wer / compute_cer with jiwer."""
    from jiwer import cer, wer

    reference, hypothesis = clean_reference(reference).strip(".? "), hypothesis.strip(".? ")
    return float(wer(reference, hypothesis)), float(cer(reference, hypothesis))


_WORKER: PeerModels | None = None


def _init_worker() -> None:
    global _WORKER
    _WORKER = PeerModels()


def _one_answer(path: str) -> dict:
    """Every per-answer metric of one clip, read once (the Pool peer's task)."""
    x = load16(path)
    return {"onset_ms": _WORKER.onset_ms(x), "transcript": _WORKER.transcribe(x), **_WORKER.mos(x),
            **_WORKER.f0(path)}


def peer_child(spec: dict) -> dict:
    """Score spec["answers"] with the reference tools; spec["workers"] 0 = the authors' one-process loop."""
    began = time.perf_counter()
    answers = json.loads(Path(spec["answers"]).read_text())
    paths = [a["answer_audio_path"] for a in answers]
    passes: dict[str, float] = {}
    if spec["workers"] == 0:
        models = PeerModels()
        passes["imports + model load"] = time.perf_counter() - began
        results: list[dict] = [{} for _ in answers]
        for name, fn in (("vad", lambda p: {"onset_ms": models.onset_ms(load16(p))}),
                         ("asr", lambda p: {"transcript": models.transcribe(load16(p))}),
                         ("dnsmos", lambda p: models.mos(load16(p))),
                         ("f0", models.f0)):
            t = time.perf_counter()
            for r, p in zip(results, paths):
                r.update(fn(p))
            passes[name] = time.perf_counter() - t
    else:
        from multiprocessing import Pool

        with Pool(spec["workers"], initializer=_init_worker) as pool:
            results = pool.map(_one_answer, paths, chunksize=1)
        passes["pool (load + all metrics)"] = time.perf_counter() - began
    t = time.perf_counter()
    for r, a in zip(results, answers):
        r["item_id"] = a["item_id"]
        r["wer"], r["cer"] = error_rates(a["transcript_answer"], r["transcript"])
        start = a["answer_start_time"]
        r["interrupted"], r["interrupted_ms"] = int(start < 0.0), 1000.0 * -start if start < 0.0 else 0.0
    passes["wer/cer + interruptions"] = time.perf_counter() - t
    Path(spec["out"]).write_text(json.dumps({"rows": results, "passes": passes}))
    return {"rows": len(results)}


# ---------------------------------------------------------------------------------------- parent side


def ensure_corpus() -> None:
    """The small synthetic corpus, built once into out/bench-corpus-small."""
    if (CORPUS / MANIFEST).is_file():
        return
    from sdscore.synth import build_corpus

    print(f"building the small synthetic corpus into {CORPUS} (once) ...", file=sys.stderr, flush=True)
    build_corpus(CORPUS, seed=0, size="small")


def make_manifest(n: int, folder: Path) -> tuple[Path, Path, list[dict]]:
    """The first n answers (manifest Parquet for ours, JSON for the peers), audio paths absolute;
    beyond the corpus's rows, copies with ids "<id>~r<c>" and their audio copied to new paths."""
    import polars as pl
    from sdscore.manifests import resolve_audio_paths

    base = resolve_audio_paths(pl.read_parquet(CORPUS / MANIFEST), "naturalness", str(CORPUS))
    parts = []
    for c in range(-(-n // base.height)):
        if c == 0:
            parts.append(base)
            continue
        copy = folder / f"copy{c}"
        copy.mkdir()
        moved = {}
        for column in ("audio_path", "answer_audio_path"):
            for src in base[column].drop_nulls().unique():
                if src not in moved:
                    moved[src] = str(copy / f"{len(moved):04d}-{Path(src).name}")
                    shutil.copyfile(src, moved[src])
        parts.append(base.with_columns(pl.col("item_id") + f"~r{c}",
                                       *(pl.col(k).replace_strict(moved, default=None)
                                         for k in ("audio_path", "answer_audio_path"))))
    frame = pl.concat(parts).head(n)
    manifest, answers = folder / "naturalness.parquet", folder / "answers.json"
    frame.write_parquet(manifest)
    rows = frame.select("item_id", "answer_audio_path", "transcript_answer", "answer_start_time").to_dicts()
    answers.write_text(json.dumps(rows))
    return manifest, answers, rows


def sdscore_command() -> list[str]:
    """The `sdscore` console script of this environment (else python -m sdscore.cli)."""
    script = Path(sys.executable).with_name("sdscore")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "sdscore.cli"]


def timed(name: str, command: list[str]) -> float:
    """Wall seconds of one fresh process; stops the bench when it fails."""
    began = time.perf_counter()
    done = subprocess.run(command, check=False, capture_output=True, text=True, env=_ENV, timeout=1800)
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"{name} failed (exit {done.returncode}): {' '.join(command)}\n{done.stdout[-3000:]}\n"
                         f"{done.stderr[-3000:]}")
    return seconds


def checks(ours_path: Path, authors_path: Path, pool_path: Path, answers: list[dict]) -> str:
    """One line on how the outputs agree; SystemExit where they must agree and do not."""
    import polars as pl
    import soundfile as sf

    n = len(answers)
    ours = pl.read_parquet(ours_path)
    if ours.height != n or ours["error"].null_count() != n:
        raise SystemExit(f"ours: {ours.height} rows, {n - ours['error'].null_count()} with errors; "
                         f"expected {n} good rows")
    ours = {r["item_id"]: r for r in ours.to_dicts()}
    authors, pool = (json.loads(p.read_text())["rows"] for p in (authors_path, pool_path))
    for name, rows in (("authors' loop", authors), ("Pool(2)", pool)):
        if [r["item_id"] for r in rows] != [a["item_id"] for a in answers]:
            raise SystemExit(f"{name}: {len(rows)} rows, expected one per answer ({n}) in manifest order")
    differ = [a["item_id"] for a, p in zip(authors, pool) if a["transcript"] != p["transcript"]]
    if differ:
        raise SystemExit(f"the two peers transcribe {len(differ)} answers differently: {differ[:5]}")
    native = {a["item_id"]: sf.info(a["answer_audio_path"]).samplerate == RATE for a in answers}
    same, rate_diff = 0, 0.0
    for r in authors:
        o = ours[r["item_id"]]
        if o["transcript_pocketsphinx"] == r["transcript"]:
            same += 1
            rate_diff = max(rate_diff, abs(o["wer_pocketsphinx"] - r["wer"]), abs(o["cer_pocketsphinx"] - r["cer"]))
        elif native[r["item_id"]]:  # the same samples reach both decoders: the transcripts must match
            raise SystemExit(f"{r['item_id']} (a 16 kHz file): ours transcribes {o['transcript_pocketsphinx']!r}, "
                             f"the peer {r['transcript']!r}")
    if rate_diff > 1e-9:
        raise SystemExit(f"equal transcripts but WER/CER differ by {rate_diff:g}")
    n_native = sum(native.values())

    def worst(ours_key: str, peer_key: str, only_native: bool = False) -> float:
        return max((abs(ours[r["item_id"]][ours_key] - r[peer_key]) for r in authors
                    if (native[r["item_id"]] or not only_native) and r[peer_key] is not None
                    and ours[r["item_id"]][ours_key] is not None), default=0.0)

    mos = max(worst("mos_dnsmos_ovrl", "ovrl", True), worst("mos_p808", "p808", True))
    if mos > DNSMOS_ABS:
        raise SystemExit(f"DNSMOS OVRL/P.808 differ from speechmos by up to {mos:.4f} (> {DNSMOS_ABS}) on 16 kHz files")
    mos_all = max(worst("mos_dnsmos_ovrl", "ovrl"), worst("mos_p808", "p808"))
    return (f"checks: {n} rows each, no errors; the two peers' transcripts equal; ours = peer transcript on "
            f"{same}/{n} answers (all 16 kHz files; the others: 22.05/32 kHz files, resampled by different "
            f"resamplers), WER/CER equal on all "
            f"{same} (max |diff| {rate_diff:.0e}); max |diff| vs speechmos OVRL/P.808 {mos:.4f} on the "
            f"{n_native} 16 kHz files, {mos_all:.4f} on all; VAD onset "
            f"{worst('latency_onset_ms', 'onset_ms', True):.1f} ms on 16 kHz files, "
            f"{worst('latency_onset_ms', 'onset_ms'):.1f} ms on all; F0 mean {worst('f0_mean', 'f0_mean', True):.2e} Hz "
            f"on the {n_native} 16 kHz files, {worst('f0_mean', 'f0_mean'):.2f} Hz on all (Praat on the file's "
            f"own rate vs ours at 16 kHz)")


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--answers", type=int, default=None, help="answers scored per run (default 24; --quick 4)")
    p.add_argument("--child", help=argparse.SUPPRESS)  # internal: one peer run (a JSON spec)
    args = p.parse_args()
    if args.child:
        print(json.dumps(peer_child(json.loads(args.child))), flush=True)
        return
    import soundfile as sf

    began = time.perf_counter()
    n = args.answers if args.answers is not None else (4 if args.quick else 24)
    if n < 1:
        raise SystemExit("--answers must be at least 1")
    n_rounds = args.repeats or (1 if args.quick else 3)
    ensure_corpus()
    with tempfile.TemporaryDirectory(prefix="sdscore-naturalness-") as tmp:
        folder = Path(tmp)
        manifest, answers_json, answers = make_manifest(n, folder)
        audio_seconds = sum(sf.info(a["answer_audio_path"]).duration for a in answers)
        me = [sys.executable, str(Path(__file__).resolve()), "--child"]
        commands = {
            "ours": lambda out: [*sdscore_command(), "score", "naturalness", str(manifest), "--out", str(out)],
            "authors' loop": lambda out: [*me, json.dumps({"answers": str(answers_json), "out": str(out),
                                                           "workers": 0})],
            "Pool(2)": lambda out: [*me, json.dumps({"answers": str(answers_json), "out": str(out),
                                                     "workers": POOL_WORKERS})],
        }
        suffix = {"ours": "parquet", "authors' loop": "json", "Pool(2)": "json"}
        seconds: dict[str, list[float]] = {name: [] for name in commands}
        for r in range(n_rounds):
            for name, command in commands.items():
                out = folder / f"{name.split()[0].strip(chr(39))}-r{r}.{suffix[name]}"
                seconds[name].append(timed(name, command(out)))
                print(f"  round {r + 1}/{n_rounds} {name}: {seconds[name][-1]:.1f} s", file=sys.stderr, flush=True)
        first = {name: folder / f"{name.split()[0].strip(chr(39))}-r0.{suffix[name]}" for name in commands}
        note = checks(first["ours"], first["authors' loop"], first["Pool(2)"], answers)
        passes = {name: json.loads(first[name].read_text())["passes"] for name in ("authors' loop", "Pool(2)")}
    median = {name: statistics.median(v) for name, v in seconds.items()}
    ours = n / median["ours"]
    rows = [
        Row(f"naturalness, {n} answers: ours vs the authors' per-answer loop (1 process)", "answers/s", ours,
            n / median["authors' loop"]),
        Row(f"naturalness, {n} answers: ours vs the same per-answer functions on Pool({POOL_WORKERS})", "answers/s",
            ours, n / median["Pool(2)"]),
    ]
    print("\n" + note)
    print("wall seconds per round (median -> answers/s): " + "; ".join(
        f"{k} " + ", ".join(f"{s:.1f}" for s in v) + f" ({median[k]:.1f} -> {n / median[k]:.3f})"
        for k, v in seconds.items()))
    print("peer time inside its process, first round: " + "; ".join(
        f"{k}: " + ", ".join(f"{part} {s:.1f} s" for part, s in v.items()) for k, v in passes.items()))
    report(f"naturalness: {n} answers ({audio_seconds:.0f} s of audio) of the small synthetic corpus, CPU "
           f"({os.cpu_count()} cores); whole command per run in a fresh process (imports, model load in), no cache; "
           f"median of {n_rounds} interleaved round(s); ours = `sdscore score naturalness` (default --jobs)",
           rows, args.json,
           peers=f"the authors' per-answer loop in one fresh process, and the same functions on multiprocessing."
                 f"Pool({POOL_WORKERS}) (fresh processes, default pools)")
    print(f"\ntotal {time.perf_counter() - began:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
