"""Speaker-consistency metrics (SpeakerSleuth §5 and Appendix B.3): detection, localization, discrimination.

Scenarios: S1 consistent, S2 one turn converted to another gender, S3 one turn converted to the
most similar other speaker. Balancing (Bal) weighs S1 against the mean of S2 and S3 because they
reward opposite behaviours: ``Bal = ½(x_S1 + (x_S2 + x_S3)/2)``.

Localization conventions, from the paper's wording (Appendix B.3): P = 0 when nothing is
flagged, R = 0 when the true set is empty, F1 = 1 when both are empty; otherwise
F1 = 2PR/(P+R), taken as 0 when P = R = 0 (left implicit in the paper). Consequences:
S1's true set is empty, so its P and R are 0 by convention and its F1 is 1 exactly when nothing
is flagged (the paper reports only F1 for S1; for embedding methods it equals S1 detection
accuracy). Metrics are per instance, then macro-averaged, so the reported F1 is not the harmonic
mean of the reported P and R (GPT-4o-audio S2: P 12.6, R 25.9, F1 15.0).

Discrimination: ranking relevances S1 = 2, S3 = 1, S2 = 0; NDCG@k with gain 2^rel − 1 and
discount log2(i + 1), i from 1; the ideal order S1 ≻ S3 ≻ S2 is also the only exact match.
Graded discrimination (any number of candidates with given relevances, e.g. the VC quality ranking
of Table 5): the ideal order sorts the relevances; a ranking is an exact match when its relevances
never increase (candidates of equal relevance may come in any order); a pick is right when its
relevance is the row's highest; NDCG is 1 when every relevance is 0 (every order is ideal).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from sdscore.metrics._inputs import (
    as_1d,
    as_bool_1d,
    as_label_array,
    check_columns,
    check_same_length,
    drop_error_rows,
    mean_or_none,
)

SCENARIOS = ("S1", "S2", "S3")
RELEVANCE = {"S1": 2, "S3": 1, "S2": 0}
IDEAL_RANKING = ("S1", "S3", "S2")
TASKS = ("detection", "discrimination")
LOCALIZATION_KEYS = (
    "S1_f1", "S2_precision", "S2_recall", "S2_f1", "S3_precision", "S3_recall", "S3_f1", "balanced_f1",
)


def balanced(s1: float | None, s2: float | None, s3: float | None) -> float | None:
    """``½(s1 + (s2 + s3)/2)``: S1 weighs as much as S2 and S3 together; None if any is None."""
    if s1 is None or s2 is None or s3 is None:
        return None
    return 0.5 * (s1 + 0.5 * (s2 + s3))


def detection_accuracy(scenarios, inconsistent_pred) -> dict:
    """Per-scenario accuracy of the binary verdict (truth: inconsistent iff not S1) and ``balanced``.

    A scenario without instances gives None, and then ``balanced`` is None too.
    """
    scenarios = as_label_array(scenarios, SCENARIOS, "scenarios")
    predicted = as_bool_1d(inconsistent_pred, "inconsistent_pred")
    check_same_length(scenarios=scenarios, inconsistent_pred=predicted)
    hit = predicted == (scenarios != "S1")
    result = {name: mean_or_none(hit[scenarios == name]) for name in SCENARIOS}
    result["balanced"] = balanced(result["S1"], result["S2"], result["S3"])
    return result


def _as_turn_sets(values, name: str) -> list[frozenset[int]]:
    if isinstance(values, pl.Series):
        values = values.to_list()
    sets = []
    for position, turns in enumerate(values):
        if turns is None or isinstance(turns, (str, bytes)) or not hasattr(turns, "__iter__"):
            raise ValueError(f"{name}[{position}] must be a list of turn indices, got {turns!r}")
        items = list(turns)
        if not all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in items):
            raise ValueError(f"{name}[{position}] must hold integer turn indices, got {items!r}")
        sets.append(frozenset(int(t) for t in items))
    return sets


def localization_scores(flagged_turns, true_turns) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-instance (precision, recall, f1), each float64 ``[n]``, with the conventions above."""
    flagged = _as_turn_sets(flagged_turns, "flagged_turns")
    truth = _as_turn_sets(true_turns, "true_turns")
    check_same_length(flagged_turns=flagged, true_turns=truth)
    n_flagged = np.array([len(s) for s in flagged], dtype=np.float64)
    n_true = np.array([len(s) for s in truth], dtype=np.float64)
    n_hit = np.array([len(f & t) for f, t in zip(flagged, truth)], dtype=np.float64)
    precision = np.divide(n_hit, n_flagged, out=np.zeros_like(n_hit), where=n_flagged > 0)
    recall = np.divide(n_hit, n_true, out=np.zeros_like(n_hit), where=n_true > 0)
    total = precision + recall
    f1 = np.divide(2 * precision * recall, total, out=np.zeros_like(total), where=total > 0)
    f1[(n_flagged == 0) & (n_true == 0)] = 1.0
    return precision, recall, f1


def localization_summary(scenarios, flagged_turns, true_turns) -> dict:
    """Macro-averaged localization per scenario, keys as in SpeakerSleuth Table 2.

    S1_f1; S2/S3 precision, recall, f1; balanced_f1. The true sets must match the scenarios:
    empty for S1, non-empty for S2 and S3 (ValueError naming the instance otherwise).
    """
    scenarios = as_label_array(scenarios, SCENARIOS, "scenarios")
    precision, recall, f1 = localization_scores(flagged_turns, true_turns)
    check_same_length(scenarios=scenarios, flagged_turns=precision)
    truth = _as_turn_sets(true_turns, "true_turns")
    for position, (scenario, turns) in enumerate(zip(scenarios, truth)):
        if (scenario == "S1") != (len(turns) == 0):
            rule = "S1 must have no true inconsistent turns" if scenario == "S1" else f"{scenario} needs true turns"
            raise ValueError(f"instance {position}: {rule}, got {sorted(turns)}")
    result = {"S1_f1": mean_or_none(f1[scenarios == "S1"])}
    for name in ("S2", "S3"):
        mask = scenarios == name
        result[f"{name}_precision"] = mean_or_none(precision[mask])
        result[f"{name}_recall"] = mean_or_none(recall[mask])
        result[f"{name}_f1"] = mean_or_none(f1[mask])
    result["balanced_f1"] = balanced(result["S1_f1"], result["S2_f1"], result["S3_f1"])
    return result


def relevance_matrix(rankings) -> np.ndarray:
    """Int64 ``[n, 3]`` relevances of each ranking, best first; each must order S1, S2, S3 once."""
    if isinstance(rankings, pl.Series):
        rankings = rankings.to_list()
    rows = []
    for position, ranking in enumerate(rankings):
        if ranking is None or isinstance(ranking, str) or sorted(ranking) != sorted(SCENARIOS):
            raise ValueError(f"rankings[{position}] must order each of {list(SCENARIOS)} once, got {ranking!r}")
        rows.append([RELEVANCE[label] for label in ranking])
    return np.array(rows, dtype=np.int64).reshape(len(rows), len(SCENARIOS))


def ndcg_at_k(rankings, k: int) -> np.ndarray:
    """Per-ranking NDCG@k, float64 ``[n]``: gain 2^rel − 1, discount log2(i + 1) for rank i ≥ 1."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= len(SCENARIOS):
        raise ValueError(f"k must be an integer in 1..{len(SCENARIOS)}, got {k!r}")
    return graded_ndcg_at_k(list(relevance_matrix(rankings).astype(np.float64)), k)


def exact_match(rankings) -> np.ndarray:
    """Boolean ``[n]``: the full ranking is S1 ≻ S3 ≻ S2."""
    relevance = relevance_matrix(rankings)
    return (relevance == np.array([RELEVANCE[label] for label in IDEAL_RANKING])).all(axis=1)


def _dcg(gains: np.ndarray, k: int) -> float:
    top = gains[:k]
    return float(((2.0 ** top - 1.0) / np.log2(np.arange(2, top.size + 2))).sum())


def graded_ndcg_at_k(ranked_relevances, k: int) -> np.ndarray:
    """NDCG@k per ranking, float64 ``[n]``, from each ranking's relevances in ranked order (any length;
    a ranking shorter than k counts all its items). 1 when every relevance is 0."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    out = np.empty(len(ranked_relevances), dtype=np.float64)
    for position, values in enumerate(ranked_relevances):
        rel = np.asarray(values, dtype=np.float64)
        if rel.ndim != 1 or rel.size == 0 or not np.isfinite(rel).all():
            raise ValueError(f"ranked_relevances[{position}] must be a non-empty list of finite numbers, got {values!r}")
        ideal = _dcg(np.sort(rel)[::-1], int(k))
        out[position] = 1.0 if ideal == 0 else _dcg(rel, int(k)) / ideal
    return out


def graded_exact_match(ranked_relevances) -> np.ndarray:
    """Boolean ``[n]``: the relevances never increase down the ranking (ties in any order)."""
    return np.array([bool(np.all(np.diff(np.asarray(r, dtype=np.float64)) <= 0)) for r in ranked_relevances],
                    dtype=bool)


def ranked_relevances(rankings, relevances: list[dict[str, float]]) -> list[np.ndarray]:
    """Each ranking's relevances in ranked order; each ranking must order its row's labels once each."""
    if isinstance(rankings, pl.Series):
        rankings = rankings.to_list()
    check_same_length(rankings=rankings, relevances=relevances)
    out = []
    for position, (ranking, table) in enumerate(zip(rankings, relevances)):
        if ranking is None or isinstance(ranking, str) or sorted(ranking) != sorted(table):
            raise ValueError(f"rankings[{position}] must order each of {sorted(table)} once, got {ranking!r}")
        out.append(np.array([table[label] for label in ranking], dtype=np.float64))
    return out


def _accuracy_by_dataset(hit: np.ndarray, datasets) -> dict:
    datasets = as_1d(datasets, "datasets", dtype=object)
    check_same_length(choices=hit, datasets=datasets)
    names = list(dict.fromkeys(datasets.tolist()))
    if "average" in names or None in names:
        raise ValueError(f"dataset names must be set and differ from 'average', got {names}")
    result = {str(name): float(hit[datasets == name].mean()) for name in names}
    result["average"] = mean_or_none(hit)
    return result


def discrimination_accuracy(choices, datasets) -> dict:
    """Share of instances whose chosen candidate is S1: per dataset and ``average`` over all instances.

    The average is over instances (weighted by dataset size), as in SpeakerSleuth Table 2 (Avg).
    """
    choices = as_label_array(choices, SCENARIOS, "choices")
    return _accuracy_by_dataset(choices == "S1", datasets)


def _relevance_tables(rows: pl.DataFrame) -> list[dict[str, float]]:
    """Per discrimination row: label → relevance (graded columns when set, else SpeakerSleuth's S1/S3/S2)."""
    graded = "candidate_relevances" in rows.columns and "candidate_labels" in rows.columns
    labels = rows["candidate_labels"].to_list() if graded else [None] * rows.height
    values = rows["candidate_relevances"].to_list() if graded else [None] * rows.height
    tables = []
    for position, (names, grades) in enumerate(zip(labels, values)):
        if grades is None:
            tables.append(dict(RELEVANCE))
            continue
        if names is None or len(names) != len(grades) or len(set(names)) != len(names):
            raise ValueError(f"discrimination row {position}: candidate_labels must be distinct and match "
                             f"candidate_relevances, got {names!r} and {grades!r}")
        tables.append({str(n): float(g) for n, g in zip(names, grades)})
    return tables


def discrimination_summary(rows: pl.DataFrame) -> dict:
    """Accuracy per dataset (the pick: ``choice`` when set, else the top of ``ranking``) and, over rows
    with a ranking, NDCG@1, NDCG@2 and exact match; graded rows use their own relevances."""
    check_columns(rows, ["ranking", "dataset"], "discrimination")
    tables = _relevance_tables(rows)
    rankings = rows["ranking"].to_list()
    choices = rows["choice"].to_list() if "choice" in rows.columns else [None] * rows.height
    ranked = [i for i, r in enumerate(rankings) if r is not None]
    graded = ranked_relevances([rankings[i] for i in ranked], [tables[i] for i in ranked])
    picks = []
    for position, (choice, ranking, table) in enumerate(zip(choices, rankings, tables)):
        pick = choice if choice is not None else (ranking[0] if ranking else None)
        if pick is None:
            raise ValueError(f"discrimination row {position} has neither a ranking nor a choice")
        if pick not in table:
            raise ValueError(f"choices has unknown label {pick!r} at position {position}; expected one of {list(table)}")
        picks.append(table[pick] == max(table.values()))
    result: dict = {"accuracy": _accuracy_by_dataset(np.array(picks, dtype=bool), rows["dataset"]),
                    "ndcg@1": None, "ndcg@2": None, "exact_match": None, "n_ranked": len(ranked)}
    if graded:
        result["ndcg@1"] = float(graded_ndcg_at_k(graded, 1).mean())
        result["ndcg@2"] = float(graded_ndcg_at_k(graded, 2).mean())
        result["exact_match"] = float(graded_exact_match(graded).mean())
    return result


def consistency_summary(frame: pl.DataFrame) -> dict:
    """All SpeakerSleuth Table 2 metrics from a scored frame, as fractions in [0, 1].

    Columns: task ("detection" | "discrimination"), instance_id, dataset, scenario,
    inconsistent_pred, flagged_turns, true_turns (detection rows); ranking, best first
    (discrimination rows); error. Rows with an error are left out and counted in ``n_errors``.
    Localization uses detection rows whose flagged_turns is not null (None if there are none).
    Classification takes ``choice`` when that optional column is set on a row (a separate
    single-choice query, as in the paper), else the top of ``ranking``; ranking metrics use the rows
    with a ranking. Graded rows (candidate_labels + candidate_relevances) use their own relevances.
    Returns {detection, localization, discrimination, counts, n_errors}; undefined values are None.
    """
    check_columns(frame, ["task"], "consistency")
    frame, n_errors = drop_error_rows(frame)
    as_label_array(frame["task"], TASKS, "task")
    detection_rows = frame.filter(pl.col("task") == "detection")
    discrimination_rows = frame.filter(pl.col("task") == "discrimination")

    detection = {name: None for name in (*SCENARIOS, "balanced")}
    localization: dict = {key: None for key in LOCALIZATION_KEYS}
    n_localized = 0
    if detection_rows.height:
        check_columns(detection_rows, ["scenario", "inconsistent_pred"], "detection")
        if detection_rows["inconsistent_pred"].null_count():
            raise ValueError("detection rows need inconsistent_pred (a null is only allowed with an error)")
        detection = detection_accuracy(detection_rows["scenario"], detection_rows["inconsistent_pred"])
        if "flagged_turns" in detection_rows.columns:
            located = detection_rows.filter(pl.col("flagged_turns").is_not_null())
            n_localized = located.height
            if n_localized:
                check_columns(located, ["true_turns"], "localization")
                localization = localization_summary(located["scenario"], located["flagged_turns"], located["true_turns"])

    discrimination: dict = {"accuracy": None, "ndcg@1": None, "ndcg@2": None, "exact_match": None, "n_ranked": 0}
    if discrimination_rows.height:
        discrimination = discrimination_summary(discrimination_rows)

    scenarios = detection_rows["scenario"].to_list() if detection_rows.height else []
    counts = {
        "detection": {name: scenarios.count(name) for name in SCENARIOS},
        "localization": n_localized,
        "discrimination": discrimination_rows.height,
    }
    return {
        "detection": detection,
        "localization": localization,
        "discrimination": discrimination,
        "counts": counts,
        "n_errors": n_errors,
    }

