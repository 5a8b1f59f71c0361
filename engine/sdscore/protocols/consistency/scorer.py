"""consistency (SpeakerSleuth): is a speaker's voice the same across their turns — prepare → score → evaluate.

prepare: every audio file of the manifest (turns, references, candidates) is embedded once, in
one batched and cached pass. score: one `group_cosine` call gives every turn's score (pairwise:
mean cosine to the other turns, flagged below the threshold; centroid: cosine distance to the
turns' centroid, flagged above it; reference: cosine to the reference clip, flagged below it);
a detection row is inconsistent iff a turn is flagged. One `score_candidates` call ranks each
discrimination row's candidates (best first; for centroid, the smallest distance). evaluate
(evaluate.py): SpeakerSleuth's metrics (sdscore.metrics.consistency), and a threshold sweep over the
same scores.
The Scorers (runtime/scorer.py) of `sdscore score consistency`: `ConsistencyScorer`, the embedding
methods', and `LalmConsistencyScorer`, an LALM judge's (lalm_judge.py); `scoring_job` chooses one.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
import polars as pl

from sdscore.corpus import CONSISTENCY_INSTANCES
from sdscore.features.speaker import SpeakerEmbedder
from sdscore.llm_judges.client import configured_client
from sdscore.llm_judges.scoring_jobs import judge_job
from sdscore.progress import Progress
from sdscore.protocols.consistency.choices import EMBEDDER_THRESHOLDS, METHODS
from sdscore.protocols.consistency.lalm_judge import LalmConsistencyJudge
from sdscore.protocols.consistency.settings import ConsistencySettings, LalmConsistencySettings
from sdscore.protocols.consistency.spec import SPEC
from sdscore.runtime.scorer import ScoringJob
from sdscore.runtime.settings import build

#: the judges of `sdscore score consistency --judge`
JUDGES = ("embedding", "openai")
#: the method column of an LALM judge's rows
LALM_METHOD = "lalm"
#: the kernels' output each method reads
_KERNEL_OUTPUT = {"pairwise": "pairwise", "centroid": "centroid", "centroid-raw": "centroid", "reference": "reference"}
RESULTS = pl.Schema({
    "task": pl.String,
    "instance_id": pl.String,
    "dataset": pl.String,
    "scenario": pl.String,
    "method": pl.String,
    "threshold": pl.Float64,
    "inconsistent_pred": pl.Boolean,
    "flagged_turns": pl.List(pl.Int64),
    "true_turns": pl.List(pl.Int64),
    "turn_scores": pl.List(pl.Float64),
    "ranking": pl.List(pl.String),
    "candidate_scores": pl.List(pl.Float64),
    # who scored: the embedder, or the LALM's model name
    "model": pl.String,
    # graded discrimination: the manifest's candidate labels and relevances (relevances null: S1/S3/S2)
    "candidate_labels": pl.List(pl.String),
    "candidate_relevances": pl.List(pl.Float64),
    # LALM judge only: the question, the single pick, each call's option order and parsed answer, raw replies
    "lalm_task": pl.String,
    "choice": pl.String,
    "option_orders": pl.List(pl.List(pl.Int64)),
    "answers": pl.List(pl.String),
    "raw_replies": pl.List(pl.String),
    "cost": pl.Float64,
    "error": pl.String,
})


def check_method(method: str, threshold: float | None, embedder: str | None = None) -> float:
    """The threshold to use: when None, the embedder's default for the method (EMBEDDER_THRESHOLDS),
    else the method's (the paper's); ValueError on an unknown method or a bad value."""
    if method not in METHODS:
        raise ValueError(f"unknown consistency method {method!r}; expected one of {', '.join(METHODS)}")
    if threshold is None:
        return EMBEDDER_THRESHOLDS.get((embedder, method), METHODS[method])
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not math.isfinite(threshold):
        raise ValueError(f"threshold must be a finite number, got {threshold!r}")
    return float(threshold)


def flag_turns(scores: list[float], method: str, threshold: float) -> list[int]:
    """Indices of flagged turns: distance above the threshold (centroids), similarity below it (else)."""
    if method.startswith("centroid"):
        return [t for t, s in enumerate(scores) if s > threshold]
    return [t for t, s in enumerate(scores) if s < threshold]


def _rank(scores: np.ndarray, method: str) -> np.ndarray:
    """Candidate order, best first; ties keep the manifest's order."""
    return np.argsort(scores if method.startswith("centroid") else -scores, kind="stable")


def with_manifest_columns(frame: pl.DataFrame) -> pl.DataFrame:
    """The frame with every CONSISTENCY_INSTANCES column (absent ones null) and an error column."""
    missing = [pl.lit(None, dtype).alias(name) for name, dtype in CONSISTENCY_INSTANCES.items() if name not in frame.columns]
    if "error" not in frame.columns:
        missing.append(pl.lit(None, pl.String).alias("error"))
    return frame.with_columns(missing) if missing else frame


def prepare_consistency(
    frame: pl.DataFrame, embedder: SpeakerEmbedder, progress: Progress | None = None
) -> tuple[dict[str, int], np.ndarray, list[str | None]]:
    """Embed each distinct audio path of the rows without an error: (row of path, emb [P, D], errors [P])."""
    rows = frame.filter(pl.col("error").is_null())
    paths: dict[str, int] = {}
    for column in ("turn_paths", "candidate_paths"):
        for group in rows[column].to_list():
            for path in group or ():
                if path is not None:
                    paths.setdefault(path, len(paths))
    for path in rows["reference_path"].to_list():
        if path is not None:
            paths.setdefault(path, len(paths))
    embeddings, errors = embedder.try_embed_files(list(paths), progress)
    return paths, embeddings, errors


def _row_problem(row: dict, method: str, index: dict[str, int], errors: list[str | None]) -> str | None:
    """Why a manifest row cannot be scored (None if it can)."""
    if row["error"] is not None:
        return row["error"]
    turns = row["turn_paths"] or []
    if not turns or any(p is None for p in turns):
        return "turn_paths must list at least one audio path (and no nulls)"
    if row["task"] not in ("detection", "discrimination"):
        return f"task must be 'detection' or 'discrimination', got {row['task']!r}"
    for t, path in enumerate(turns):
        if errors[index[path]] is not None:
            return f"turn_paths[{t}]: {errors[index[path]]}"
    if method == "reference":
        if row["reference_path"] is None:
            return "method 'reference' needs reference_path"
        if errors[index[row["reference_path"]]] is not None:
            return f"reference_path: {errors[index[row['reference_path']]]}"
    if row["task"] == "discrimination":
        candidates, labels = row["candidate_paths"] or [], row["candidate_scenarios"] or []
        if not candidates or len(candidates) != len(labels) or any(p is None for p in candidates):
            return (f"discrimination needs candidate_paths and candidate_scenarios of equal, non-zero length, "
                    f"got {len(candidates)} and {len(labels)}")
        graded = candidate_problem(labels, row.get("candidate_relevances"))
        if graded is not None:
            return graded
        for c, path in enumerate(candidates):
            if errors[index[path]] is not None:
                return f"candidate_paths[{c}]: {errors[index[path]]}"
    return None


def candidate_problem(labels: list[str], relevances: list[float] | None) -> str | None:
    """Why graded candidates cannot be ranked (None if they can, or when they are not graded)."""
    if relevances is None:
        return None
    if len(relevances) != len(labels):
        return f"candidate_relevances has {len(relevances)} entries but candidate_scenarios has {len(labels)}"
    if len(set(labels)) != len(labels):
        return f"graded candidates need distinct labels, got {labels}"
    if any(r is None or not math.isfinite(r) for r in relevances):
        return f"candidate_relevances must be finite numbers, got {relevances}"
    return None


def score_consistency(
    frame: pl.DataFrame,
    embedder: SpeakerEmbedder,
    method: str = "pairwise",
    threshold: float | None = None,
    *,
    progress: Progress | None = None,
) -> pl.DataFrame:
    """One RESULTS row per manifest row, in order; a row that cannot be scored carries its error.

    turn_scores are the method's per-turn scores (turn order); detection rows get
    inconsistent_pred and flagged_turns, discrimination rows the ranking (scenario labels of the
    candidates, best first) and candidate_scores (in the manifest's candidate order).
    """
    import torch  # here, not at the top: `eval consistency` reads RESULTS and flag_turns without torch

    from sdscore import kernels

    threshold = check_method(method, threshold, getattr(embedder, "name", None))
    frame = with_manifest_columns(frame)
    index, embeddings, errors = prepare_consistency(frame, embedder, progress)
    records = frame.select(*CONSISTENCY_INSTANCES.names(), "error").to_dicts()
    problems = [_row_problem(row, method, index, errors) for row in records]
    scored = [i for i, p in enumerate(problems) if p is None]

    emb = torch.from_numpy(embeddings)
    if method == "centroid":  # unit rows first, so the centroid is the mean direction (cosines are unchanged)
        emb = torch.nn.functional.normalize(emb, dim=1)
    turn_rows = [index[p] for i in scored for p in records[i]["turn_paths"]]
    lengths = [len(records[i]["turn_paths"]) for i in scored]
    offsets = torch.zeros(len(scored) + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(torch.tensor(lengths, dtype=torch.int64), 0)
    turns = emb[turn_rows] if turn_rows else emb.new_zeros(0, embedder.dim)
    reference = None
    if method == "reference":
        reference = emb[[index[records[i]["reference_path"]] for i in scored]] if scored else emb.new_zeros(0, embedder.dim)
    per_turn = kernels.group_cosine(turns, offsets, reference)[_KERNEL_OUTPUT[method]].double().numpy()

    discrimination = [g for g, i in enumerate(scored) if records[i]["task"] == "discrimination"]
    cand_rows = [index[p] for g in discrimination for p in records[scored[g]]["candidate_paths"]]
    cand_group = [g for g in discrimination for _ in records[scored[g]]["candidate_paths"]]
    candidate_scores = np.zeros(0)
    if cand_rows:
        candidate_scores = kernels.score_candidates(
            emb[cand_rows], torch.tensor(cand_group, dtype=torch.int64), turns, offsets, reference
        )[_KERNEL_OUTPUT[method]].double().numpy()

    out = [{
        "task": row["task"], "instance_id": row["instance_id"], "dataset": row["dataset"],
        "scenario": row["scenario"], "method": method, "threshold": threshold, "true_turns": row["true_turns"],
        "model": getattr(embedder, "name", None), "candidate_labels": row["candidate_scenarios"],
        "candidate_relevances": row["candidate_relevances"], "error": problem,
    } for row, problem in zip(records, problems)]
    bounds, cand_start = offsets.tolist(), 0
    for g, i in enumerate(scored):
        scores = per_turn[bounds[g]: bounds[g + 1]].tolist()
        out[i]["turn_scores"] = scores
        if records[i]["task"] == "detection":
            flagged = flag_turns(scores, method, threshold)
            out[i]["flagged_turns"], out[i]["inconsistent_pred"] = flagged, bool(flagged)
        else:
            labels = records[i]["candidate_scenarios"]
            q = candidate_scores[cand_start: cand_start + len(labels)]
            cand_start += len(labels)
            out[i]["candidate_scores"] = q.tolist()
            out[i]["ranking"] = [labels[c] for c in _rank(q, method)]
    return pl.DataFrame(out, schema=RESULTS)


class ConsistencyScorer:
    """The consistency protocol's Scorer: one speaker embedder (loaded once), one method.

    Settings: ConsistencySettings (embedder, method, threshold, model_dir, cache_dir, max_audio_seconds)."""

    settings_class = ConsistencySettings

    def __init__(self, *args: Any, **settings: Any):
        s = build(ConsistencySettings, *args, **settings)
        self.method = s.method
        self.threshold = check_method(s.method, s.threshold, s.embedder)
        self.embedder = SpeakerEmbedder(s.embedder, s.model_dir, cache_dir=s.cache_dir,
                                        max_audio_seconds=s.max_audio_seconds)

    def __call__(self, rows: pl.DataFrame) -> pl.DataFrame:
        return score_consistency(rows, self.embedder, self.method, self.threshold)


class LalmConsistencyScorer:
    """The Scorer of an LALM judge (`sdscore score consistency --judge openai`): the same RESULTS columns
    as the embedding methods (method "lalm", model the judge's), so `sdscore eval consistency` puts both
    kinds of run in one table; threshold and scores stay null.

    Settings: LalmConsistencySettings (task, reference, text_context, per_turn, permutations, seed, and the
    endpoint, cache, parallelism, deadline and audio limits of AudioJudgeConfig)."""

    settings_class = LalmConsistencySettings

    def __init__(self, *args: Any, **settings: Any):
        """Positional settings fill model, base_url; see LalmConsistencySettings (checked: SettingsError)."""
        s = build(LalmConsistencySettings, *args, **settings)
        client = configured_client(s, json_mode=False)
        try:
            self.judge = LalmConsistencyJudge(
                client, s.task, reference=s.reference, text_context=s.text_context, per_turn=s.per_turn,
                permutations=s.permutations, seed=s.seed,
                prompt_file=None if s.prompt_file is None else str(s.prompt_file), audio_rate=s.audio_rate,
                max_request_bytes=s.max_request_bytes, max_audio_seconds=s.max_audio_seconds or None,
            )
        except Exception:
            client.close()
            raise
        self.model = s.model

    def __call__(self, rows: pl.DataFrame) -> pl.DataFrame:
        frame = with_manifest_columns(rows)
        records = frame.select(*CONSISTENCY_INSTANCES.names(), "error").to_dicts()
        for record in records:
            if record["error"] is None and record["task"] == "discrimination":
                record["error"] = candidate_problem(record["candidate_scenarios"] or [], record["candidate_relevances"])
        judged = self.judge.score(records)
        out = []
        for row, result in zip(records, judged):
            out.append({
                "task": row["task"], "instance_id": row["instance_id"], "dataset": row["dataset"],
                "scenario": row["scenario"], "method": LALM_METHOD, "threshold": None, "true_turns": row["true_turns"],
                "model": self.model, "candidate_labels": row["candidate_scenarios"],
                "candidate_relevances": row["candidate_relevances"], **result,
            })
        return pl.DataFrame(out, schema=RESULTS)

    def close(self) -> None:
        self.judge.client.close()


def scoring_job(**settings: Any) -> ScoringJob:
    """The job for ConsistencyScorer's settings, or with judge="openai" LalmConsistencyScorer's; checked up
    front (an LALM judge is built once and closed, so a usage error stops the run before any scoring)."""
    settings = {k: v for k, v in settings.items() if v is not None}
    judge = settings.pop("judge", "embedding")
    if judge not in JUDGES:
        raise ValueError(f"unknown consistency judge {judge!r}; expected one of {list(JUDGES)}")
    if judge == "openai":
        return judge_job(SPEC, LalmConsistencyScorer, settings)
    for name in ("model_dir", "cache_dir"):
        if name in settings:
            settings[name] = os.path.abspath(settings[name])
    # the threshold in force goes into the run record, so --resume never mixes two defaults
    settings["threshold"] = check_method(settings.get("method", "pairwise"), settings.get("threshold"),
                                         settings.get("embedder", "ge2e"))
    return ScoringJob(SPEC, ConsistencyScorer, settings, volatile=("cache_dir",),
                      model_dir=settings.get("model_dir"))
