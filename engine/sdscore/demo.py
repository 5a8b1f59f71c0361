"""`sdscore demo`: the synthetic corpus, then each built protocol on bundled defaults."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

from sdscore import audio
from sdscore.atomic_write import write_json
from sdscore.corpus import audio_paths, read_manifest
from sdscore.errors import SdscoreError
from sdscore.progress import Progress, no_progress


def demo_stages() -> dict:
    """protocol name → its demo stage module (run, CORPUS_MANIFEST, REPORT_INPUTS), from the registry,
    in the stages' order."""
    from sdscore.protocols.registry import PROTOCOLS

    stages = {name: entry.demo_stage_module() for name, entry in PROTOCOLS.items() if entry.demo_stage}
    return dict(sorted(stages.items(), key=lambda item: item[1].ORDER))


def corpus_manifests() -> dict[str, object]:
    """manifest file written by `sdscore synth` → the ManifestSpec it is read with (registry order)."""
    from sdscore.protocols.registry import PROTOCOLS

    return {entry.demo_stage_module().CORPUS_MANIFEST: entry.manifest_spec()
            for entry in PROTOCOLS.values() if entry.demo_stage}


LOAD_CHUNK = 256


def ensure_corpus(corpus_dir: Path, seed: int, size: str, progress: Progress) -> dict:
    """Build the synthetic corpus unless one with the same seed, size and corpus version is already
    there (one from an older sdscore is rebuilt; its renders are reused)."""
    from sdscore.synth import build_corpus
    from sdscore.synth.build import CORPUS_VERSION

    meta = corpus_dir / "corpus.json"
    if meta.exists():
        summary = json.loads(meta.read_text())
        same = (summary.get("seed"), summary.get("size"), summary.get("corpus_version"))
        if same == (seed, size, CORPUS_VERSION):
            return summary
    return build_corpus(corpus_dir, seed=seed, size=size, progress=progress)


def summarize_corpus(corpus_dir: Path, progress: Progress = no_progress, sample_rate: int = 16000) -> dict:
    """Read every manifest, load all of its audio in batches and report counts and throughput."""
    result: dict = {"sample_rate": sample_rate, "manifests": {}}
    for filename, spec in corpus_manifests().items():
        path, protocol = corpus_dir / filename, spec.name
        if not path.exists():
            continue
        frame = read_manifest(path, spec)
        paths = audio_paths(frame, spec)
        seconds, failed, errors, elapsed = 0.0, 0, [], 0.0
        for start in range(0, len(paths), LOAD_CHUNK):
            t0 = time.perf_counter()
            batch = audio.load_many(paths[start : start + LOAD_CHUNK], sample_rate)
            elapsed += time.perf_counter() - t0
            seconds += float(batch.durations.sum())
            bad = [e for e in batch.errors if e is not None]
            failed += len(bad)
            errors.extend(bad[: max(0, 5 - len(errors))])
            progress(f"load {protocol} audio", min(start + LOAD_CHUNK, len(paths)), len(paths))
        result["manifests"][filename] = {
            "protocol": protocol,
            "rows": frame.height,
            "columns": [c for c in frame.columns if c in spec.schema],
            "audio_files": len(paths),
            "failed": failed,
            "first_errors": errors,
            "audio_seconds": round(seconds, 3),
            "load_seconds": round(elapsed, 4),
            "realtime_factor": round(seconds / elapsed, 1) if elapsed > 0 else None,
        }
    return result



def write_demo_report(out: str | os.PathLike, stages: list[dict] | None = None, failures: dict | None = None,
                      progress: Progress = no_progress) -> Path:
    """One HTML report of a demo folder (out/report.html), a section per protocol stage; callable on an
    existing demo folder (stages: demo.json's, read from there when not given)."""
    from sdscore.report.html import AudioEmbedder, read_metrics, write_report
    from sdscore.report_document import protocol_section

    out = Path(out)
    if stages is None:
        summary = json.loads((out / "demo.json").read_text())
        stages, failures = summary.get("stages", []), summary.get("failed_stages", {})
    embedder, modules = AudioEmbedder(), demo_stages()
    sections, notes = [], [f"stage {name} failed: {error}" for name, error in (failures or {}).items()]
    for i, stage in enumerate(stages):
        progress("report", i, len(stages))
        results, metrics = modules[stage["protocol"]].REPORT_INPUTS
        # a stage's optional results (naturalness's stance files) may be absent: the rest still shows
        present = [out / r for r in results if (out / r).exists()] or [out / r for r in results]
        try:
            sections.append(protocol_section(stage["protocol"], read_metrics(out / metrics),
                                             present, metrics_path=out / metrics,
                                             title=f"{stage['protocol']}: {stage['title']}", embedder=embedder))
        except (SdscoreError, ValueError, KeyError, OSError) as exc:  # the other stages' sections still render
            notes.append(f"no {stage['protocol']} section: {type(exc).__name__}: {exc}")
    progress("report", len(stages), len(stages))
    notes.insert(0, "sdscore demo on the synthetic corpus: every protocol on bundled defaults (demo models, "
                    "not the papers' checkpoints).")
    return write_report(out / "report.html", sections, "sdscore demo report", notes, embedder=embedder)



def run_demo(out: str | os.PathLike, *, seed: int = 0, size: str = "small", progress: Progress = no_progress) -> dict:
    """Synthetic corpus, load pass, then every built protocol under `out`; writes `out/demo.json` and
    the HTML report `out/report.html`.

    A stage that fails records its error and the others still run; `ok` is False then.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    corpus = out / "corpus"
    ensure_corpus(corpus, seed, size, progress)
    summary = summarize_corpus(corpus, progress)
    ok = all(m["failed"] == 0 for m in summary["manifests"].values())
    stages, failures = [], {}
    for name, stage in demo_stages().items():
        try:
            stages.append(stage.run(corpus, out, progress))
        except Exception as exc:  # one stage's failure must not hide the others' results
            failures[name] = f"{type(exc).__name__}: {exc}"
    try:
        html = str(write_demo_report(out, stages, failures, progress))
    except Exception as exc:  # the stages' results stand without their report
        html, failures["report"] = None, f"{type(exc).__name__}: {exc}"
    report = {
        "seed": seed,
        "size": size,
        "ok": ok and not failures,
        "corpus_summary": summary,
        "stages": stages,
        "failed_stages": failures,
        "html_report": html,
    }
    write_json(out / "demo.json", report, default=_json_default)
    return report


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
