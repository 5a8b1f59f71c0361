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
REPORT_INPUTS = (("naturalness/results-items.parquet", "naturalness/results-selected.parquet",
                  "naturalness/stances-items.parquet", "naturalness/stances-selected.parquet"),
                 "naturalness/metrics.json")


def run(corpus: Path, out: Path, progress: Progress) -> dict:
    """Dialogue selection from the synthetic conversations → score → Table III per system, together
    with the two-system items (human answers and a half-duplex robotic model); the stances by a FAKE
    judge (demo_stance_judge.py: ratings from the clips' loudness, not a model) on the same rows."""
    from sdscore.protocols.naturalness import scoring_job
    from sdscore.protocols.naturalness.demo_stance_judge import MODEL, FakeStanceJudge
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
    manifests = (("items", corpus / "naturalness.parquet"), ("selected", Path(selected["metadata"])))
    for name, manifest in manifests:
        results = folder / f"results-{name}.parquet"
        score_manifest(job, manifest, results, resume=parts_folder(results).exists(), progress=progress)
        outputs.append(results)
    with FakeStanceJudge() as judge:
        # the judge's reply cache is keyed by request content, not by the fake server's port
        stances = scoring_job(judge="openai", model=MODEL, base_url=judge.base_url, concurrency=2,
                              cache_dir=out / "cache" / "naturalness-stances")
        for name, manifest in manifests:
            results = folder / f"stances-{name}.parquet"
            _drop_unfinished_fake_run(results, MODEL)  # its record names the fake server's former port
            score_manifest(stances, manifest, results, progress=progress)
            outputs.append(results)
    metrics = evaluate_files(outputs, folder / "metrics.json", plot=folder / "figures",
                             half_duplex=half_duplex, segments=corpus / CONVERSATIONS_TABLE,
                             selection=selected["metadata"])
    headline = {"dialogues selected": f"{selected['dialogues']} from {selected['conversations']} conversations"}
    for system, m in metrics["systems"].items():
        headline[f"{system}: WER %, latency ms, interrupted %, pitch variation"] = ", ".join(
            "-" if m[k]["value"] is None else f"{m[k]['value']:.3g}"
            for k in ("wer_pct", "latency_ms", "interrupted_pct", "pitch_variation"))
        surprisal = m["turn_taking_ngram"]["value"]
        headline[f"{system}: turn-taking n-gram surprisal (nats/frame; model-free baseline)"] = (
            "-" if surprisal is None else f"{surprisal:.3g}")
        same = m["stance_same_pct"]["value"]
        headline[f"{system}: same stance % (FAKE judge: clip loudness)"] = "-" if same is None else f"{same:.3g}"
    return {
        "protocol": "naturalness",
        "title": "SPEARBench Table III on the synthetic items and the selected dialogues",
        "headline": headline,
        "table": format_table(metrics),
        "outputs": [*map(str, outputs), str(folder / "metrics.json"), str(folder / "figures")],
    }


def _drop_unfinished_fake_run(results: Path, model: str) -> None:
    """Remove the shards an interrupted demo left of the fake judge's run on `results` (their record
    holds the fake server's earlier port, so they cannot be resumed; the reply cache keeps the work),
    only when the record says this demo's fake judge made them."""
    import json
    import shutil

    from sdscore.runtime.sharded_output import RUN_FILE

    parts = parts_folder(results)
    try:
        record = json.loads((parts / RUN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if model in json.dumps(record):
        shutil.rmtree(parts)
