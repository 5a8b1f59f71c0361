"""`sdscore demo`'s reward stage: the protocol on bundled defaults over the synthetic corpus."""

from __future__ import annotations

from pathlib import Path

from sdscore.progress import Progress
from sdscore.runtime.run import score_manifest
from sdscore.runtime.sharded_output import parts_folder

#: the synthetic corpus's manifest of this protocol (`sdscore synth` writes it)
CORPUS_MANIFEST = "reward_pairs.parquet"
#: the stage's place among the demo's stages (its report section's too)
ORDER = 0
#: the report's inputs under the demo folder: (results files, METRICS.json); paths relative to it
REPORT_INPUTS = (("reward/results.parquet",), "reward/metrics.json")


def run(corpus: Path, out: Path, progress: Progress) -> dict:
    from sdscore.models.pretrained import default_model_dir
    from sdscore.protocols.reward import run_eval, scoring_job

    folder = out / "reward"
    results = folder / "results.parquet"
    model_dir = default_model_dir()
    score_manifest(scoring_job(model=model_dir), corpus / "reward_pairs.parquet", results,
                   resume=parts_folder(results).exists(), progress=progress)
    metrics = run_eval(results, folder / "metrics.json", plot_path=folder / "rewards.png")
    headline = {f"accuracy, {name}": s["accuracy"] for name, s in metrics["subsets"].items()}
    headline |= {"modality micro": metrics["modality_micro"], "overall macro": metrics["overall_macro"]}
    return {
        "protocol": "reward",
        "title": f"shipped compact demo model ({model_dir.name}) on the synthetic pairs",
        "headline": headline,
        "outputs": [str(results), str(folder / "metrics.json"), str(folder / "rewards.png")],
    }
