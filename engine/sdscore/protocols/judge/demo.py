"""The judge stage of `sdscore demo`: the rule baseline fused two ways, scored on the runtime."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sdscore.progress import Progress
from sdscore.protocols.judge.evaluate import run_eval
from sdscore.protocols.judge.scorer import scoring_job
from sdscore.runtime.run import score_manifest
from sdscore.runtime.sharded_output import parts_folder


def demo_judge(
    manifest: str | os.PathLike, out_dir: str | os.PathLike, progress: Progress | None = None
) -> dict[str, Any]:
    """The judge stage of `sdscore demo`: the rule baseline fused by `speakbench` and, as TRACE's
    Tab. 11 ablation, by `majority`; metrics and confusion plots under out_dir; returns a summary."""
    out = Path(out_dir)
    results = []
    for fusion in ("speakbench", "majority"):
        path = out / f"rule-{fusion}.parquet"
        job = scoring_job(judge="rule", fusion=fusion, cache_dir=out / "cache")
        score_manifest(job, manifest, path, resume=parts_folder(path).exists(), progress=progress)
        results.append(path)
    metrics = run_eval(results, out / "metrics.json", plots_dir=out / "plots")
    return {
        "judge": "rule baseline",
        "metrics": str(out / "metrics.json"),
        "overall_accuracy": {name: m["accuracy"]["overall"] for name, m in metrics["judges"].items()},
        "overall_ci95": {name: m["overall_ci95"] for name, m in metrics["judges"].items()},
        "errors": {name: m["n_errors"] for name, m in metrics["judges"].items()},
        "mcnemar": metrics["mcnemar"],
    }
