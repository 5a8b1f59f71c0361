"""`sdscore demo`'s consistency stage: the protocol on bundled defaults over the synthetic corpus."""

from __future__ import annotations

from pathlib import Path

from sdscore.progress import Progress
from sdscore.runtime.run import score_manifest
from sdscore.runtime.sharded_output import parts_folder

#: the synthetic corpus's manifest of this protocol (`sdscore synth` writes it)
CORPUS_MANIFEST = "consistency.parquet"
#: the stage's place among the demo's stages (its report section's too)
ORDER = 1
#: the report's inputs under the demo folder: (results files, METRICS.json); paths relative to it
REPORT_INPUTS = (("consistency/results.parquet",), "consistency/metrics.json")

#: GE2E cosines between TTS turns of one voice run 0.72–0.95 and a gender switch 0.44–0.74 (the
#: switched turn is always the least similar), so the paper's 0.4 flags nothing on this corpus;
#: the demo uses 0.7, the top of the sweep, which its sweep plot shows is the best here.
DEMO_CONSISTENCY_THRESHOLD = 0.7


def run(corpus: Path, out: Path, progress: Progress) -> dict:
    from sdscore.protocols.consistency import run_eval, scoring_job

    results = out / "consistency" / "results.parquet"
    job = scoring_job(embedder="ge2e", method="pairwise", threshold=DEMO_CONSISTENCY_THRESHOLD,
                      cache_dir=out / "cache" / "embeddings")
    score_manifest(job, corpus / "consistency.parquet", results, resume=parts_folder(results).exists(),
                   progress=progress)
    metrics = run_eval(results, out / "consistency" / "metrics.json", plot_path=out / "consistency" / "sweep.png")
    detection, localization = metrics["detection"], metrics["localization"]
    return {
        "protocol": "consistency",
        "title": f"GE2E pairwise, threshold {DEMO_CONSISTENCY_THRESHOLD}",
        "headline": {
            "detection S1": detection["S1"],
            "detection S2 (gender switch)": detection["S2"],
            "detection S3 (similar voice)": detection["S3"],
            "detection balanced": detection["balanced"],
            "localization balanced F1": localization["balanced_f1"],
            "discrimination accuracy": metrics["discrimination"]["accuracy"].get("average"),
            "discrimination NDCG@1": metrics["discrimination"]["ndcg@1"],
        },
        "outputs": [str(results), str(out / "consistency" / "metrics.json"), str(out / "consistency" / "sweep.png")],
    }
