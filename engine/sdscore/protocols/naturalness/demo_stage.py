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
    judge (demo_stance_judge.py: ratings from the clips' loudness, not a model) on the same rows; the
    emotion columns (arousal/valence/dominance, emotional naturalness) from RANDOM-WEIGHT models
    (demo_emotion_models.py), labelled as such in Table III and the headline."""
    from sdscore.atomic_write import write_json
    from sdscore.protocols.naturalness import scoring_job
    from sdscore.protocols.naturalness.demo_emotion_models import random_emotion_models
    from sdscore.protocols.naturalness.demo_stance_judge import MODEL, FakeStanceJudge
    from sdscore.protocols.naturalness.evaluate import evaluate_files, format_table
    from sdscore.protocols.naturalness.selection import select_dialogues
    from sdscore.synth.conversations import CONVERSATIONS_TABLE
    from sdscore.synth.naturalness_items import SYSTEMS

    half_duplex = (SYSTEMS[1],)  # the synthetic half-duplex model: no interruption columns

    folder = out / "naturalness"
    selected = select_dialogues(corpus / CONVERSATIONS_TABLE, folder / "selected", overwrite=True,
                                progress=progress)
    # no emotion model ships: RANDOM-WEIGHT ones (demo_emotion_models.py) run the emotion columns' real code
    models = random_emotion_models(folder / "random-models")
    emotion = {} if isinstance(models, str) else {"emotion_dir": models[0], "emotional_naturalness_dir": models[1]}
    job = scoring_job(cache_dir=out / "cache" / "naturalness", **emotion)
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
    if not isinstance(models, str):  # the arousal/valence/dominance correlations come from the random model too
        for values in metrics["systems"].values():
            for key in ("arousal_rho", "valence_rho", "dominance_rho"):
                values[key]["caveat"] = RANDOM_EMOTION_CAVEAT
        write_json(folder / "metrics.json", metrics)
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
        emotional = m["emotional_naturalness"]["value"]
        headline[f"{system}: emotional naturalness (RANDOM-WEIGHT models)"] = (
            "-" if emotional is None else f"{emotional:.3g}")
    if isinstance(models, str):
        headline["emotional naturalness"] = f"not run: {models}"
    return {
        "protocol": "naturalness",
        "title": "SPEARBench Table III on the synthetic items and the selected dialogues",
        "headline": headline,
        "table": format_table(metrics),
        "outputs": [*map(str, outputs), str(folder / "metrics.json"), str(folder / "figures")],
    }


RANDOM_EMOTION_CAVEAT = ("from the demo's RANDOM-WEIGHT emotion model (demo_emotion_models.py): not a trained model, "
                         "so these values mean nothing")


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
