"""`sdscore demo`'s naturalness stage: the protocol on bundled defaults over the synthetic corpus."""

from __future__ import annotations

from pathlib import Path

from sdscore.progress import Progress
from sdscore.runtime.run import score_manifest
from sdscore.runtime.sharded_output import parts_folder

#: the synthetic corpus's manifest of this protocol (`sdscore synth` writes it)
CORPUS_MANIFEST = "naturalness.parquet"
#: the stage's place among the demo's stages (its report section's too)
ORDER = 3
#: the report's inputs under the demo folder: (results files, METRICS.json); paths relative to it
REPORT_INPUTS = (("naturalness/results-items.parquet", "naturalness/results-selected.parquet"),
                 "naturalness/metrics.json")


def run(corpus: Path, out: Path, progress: Progress) -> dict:
    """Dialogue selection from the synthetic conversations → score → Table III per system, together
    with the two-system items (human answers and a half-duplex robotic model)."""
    from sdscore.protocols.naturalness import scoring_job
    from sdscore.protocols.naturalness.evaluate import evaluate_files, format_table
    from sdscore.protocols.naturalness.selection import select_dialogues
    from sdscore.synth.conversations import CONVERSATIONS_TABLE
    from sdscore.synth.naturalness_items import SYSTEMS

    half_duplex = (SYSTEMS[1],)  # the synthetic half-duplex model: no interruption columns

    folder = out / "naturalness"
    selected = select_dialogues(corpus / CONVERSATIONS_TABLE, folder / "selected", overwrite=True,
                                progress=progress)
    job = scoring_job(cache_dir=out / "cache" / "naturalness")
    outputs = []
    for name, manifest in (("items", corpus / "naturalness.parquet"), ("selected", Path(selected["metadata"]))):
        results = folder / f"results-{name}.parquet"
        score_manifest(job, manifest, results, resume=parts_folder(results).exists(), progress=progress)
        outputs.append(results)
    metrics = evaluate_files(outputs, folder / "metrics.json", plot=folder / "figures",
                             half_duplex=half_duplex)
    headline = {"dialogues selected": f"{selected['dialogues']} from {selected['conversations']} conversations"}
    for system, m in metrics["systems"].items():
        headline[f"{system}: WER %, latency ms, interrupted %, pitch variation"] = ", ".join(
            "-" if m[k]["value"] is None else f"{m[k]['value']:.3g}"
            for k in ("wer_pct", "latency_ms", "interrupted_pct", "pitch_variation"))
    return {
        "protocol": "naturalness",
        "title": "SPEARBench Table III on the synthetic items and the selected dialogues",
        "headline": headline,
        "table": format_table(metrics),
        "outputs": [*map(str, outputs), str(folder / "metrics.json"), str(folder / "figures")],
    }
