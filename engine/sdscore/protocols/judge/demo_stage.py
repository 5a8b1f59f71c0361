"""`sdscore demo`'s judge stage: the protocol on bundled defaults over the synthetic corpus."""

from __future__ import annotations

from pathlib import Path

from sdscore.progress import Progress

#: the synthetic corpus's manifest of this protocol (`sdscore synth` writes it)
CORPUS_MANIFEST = "judge_items.parquet"
#: the stage's place among the demo's stages (its report section's too)
ORDER = 2
#: the report's inputs under the demo folder: (results files, METRICS.json); paths relative to it
REPORT_INPUTS = (("judge/rule-speakbench.parquet", "judge/rule-majority.parquet"), "judge/metrics.json")


def run(corpus: Path, out: Path, progress: Progress) -> dict:
    from sdscore.protocols.judge import demo_judge

    summary = demo_judge(corpus / "judge_items.parquet", out / "judge", progress=progress)
    headline = {f"overall accuracy, {name}": acc for name, acc in summary["overall_accuracy"].items()}
    headline |= {f"McNemar p, {m['a']} vs {m['b']}": m["p_value"] for m in summary["mcnemar"]}
    return {
        "protocol": "judge",
        "title": "rule baseline judge on blueprints, speakbench vs majority fusion",
        "headline": headline,
        "outputs": [summary["metrics"]],
    }
