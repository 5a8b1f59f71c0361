"""Table III's Emotional Naturalness score per system: the predictor's logits shifted so that 99 % of
the human (reference) dev answers score > 0, reported on the rows the shift was not chosen on, with
the paper's paired Friedman test of each system against the human answers.

- Dev and test: with a `split` column whose reference rows include "dev" (the Seamless Interaction
  split select-dialogues writes), the shift is chosen on the reference's dev rows and every value is
  reported on the rows whose split is not "dev" — as the authors' normalize_score.py shifts test by
  the original/dev answers. Otherwise the questions are halved by a hash of their question_key
  (blake2b, so one question's answers from every system fall in the same half): the shift is chosen
  on the reference's answers in the dev half, every value is reported on the other half.
- The shift: with the dev logits sorted x_(0) ≤ … ≤ x_(n−1) and k = ⌊0.01 n⌋, shift = ε − x_(k)
  (ε = 1e−6): every dev logit but the k smallest is then > 0, so at least 99 % are. (The authors take
  np.quantile(dev, 0.01) with linear interpolation, which leaves fewer than 99 % positive for some n,
  e.g. 98.7 % of 150.)
- The score: the mean (± sample std) of the shifted logits of a system's test rows; the paired
  Friedman test (sdscore.metrics.naturalness.friedman_statistic, k = 2) pairs each system with the
  reference by question_key on the test rows (a system's several answers to one question averaged).
"""

from __future__ import annotations

import hashlib
import math

import numpy as np
import polars as pl

from sdscore.metrics.naturalness import friedman_statistic

LOGIT = "emotional_naturalness_logit"
MODEL = "emotional_naturalness_model"
POSITIVE_FRACTION = 0.99
EPSILON = 1e-6
DEV_SPLIT = "dev"
RANDOM_MARK = "random weights"
RANDOM_CAVEAT = ("RANDOM-WEIGHT predictor ({models}): not a trained model, so these scores mean nothing (the demo "
                 "shows how the column is computed)")


def logit_shift(dev_logits) -> float:
    """The shift that puts at least POSITIVE_FRACTION of `dev_logits` above 0 (module docstring)."""
    x = np.sort(np.asarray(dev_logits, dtype=np.float64))
    if x.size == 0 or not np.isfinite(x).all():
        raise ValueError("the shift needs at least one finite dev logit")
    k = int(np.floor((1.0 - POSITIVE_FRACTION) * x.size + 1e-9))
    return float(EPSILON - x[k])


def _dev_by_hash(key: str | None) -> bool:
    return key is not None and hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()[0] % 2 == 0


def calibration_split(frame: pl.DataFrame, reference: str) -> tuple[pl.Series, str]:
    """(is_dev per row, the rule used): the reference's split "dev" when it has such rows and some rows
    are not dev; else the question_key hash halves."""
    if "split" in frame.columns:
        split = frame["split"].cast(pl.String).str.strip_chars().str.to_lowercase()
        is_dev = (split == DEV_SPLIT).fill_null(False)
        reference_dev = (is_dev & (frame["system"] == reference)).any()
        if reference_dev and not is_dev.all():
            return is_dev, f"split: the shift from the reference's split '{DEV_SPLIT}' rows, values on the other rows"
    keys = frame["question_key"].to_list() if "question_key" in frame.columns else [None] * frame.height
    return (pl.Series([_dev_by_hash(k) for k in keys], dtype=pl.Boolean),
            "question halves: the shift from the reference's answers to the questions whose question_key hashes "
            "to the dev half (blake2b), values on the other half")


def emotional_naturalness_values(systems: dict, reference: str) -> tuple[dict[str, dict], dict]:
    """(system → the Table III record, the calibration record). `systems`: name → an object with
    `rows` (its scored rows) and `reason(columns, words)` (evaluate._System)."""
    names = list(systems)
    frames = [systems[n].rows.select(c for c in ("system", "question_key", "split", LOGIT, MODEL)
                                     if c in systems[n].rows.columns) for n in names]
    frame = pl.concat(frames) if frames else pl.DataFrame()
    frame = frame.with_columns(pl.col(LOGIT).cast(pl.Float64)).filter(
        pl.col(LOGIT).is_not_null() & pl.col(LOGIT).is_finite())
    models = sorted(set(frame[MODEL].drop_nulls().to_list())) if frame.height else []
    random = [m for m in models if RANDOM_MARK in m.lower()]

    def null(name: str, why: str | None = None) -> dict:
        record = systems[name].reason((LOGIT,), ("emotional", "naturalness"))
        return {**record, "reason": why} if why else record

    if frame.height == 0:
        return {n: null(n) for n in names}, {"shift": None, "reason": "no emotional_naturalness_logit value"}
    is_dev, rule = calibration_split(frame, reference)
    frame = frame.with_columns(is_dev.alias("_dev"))
    dev = frame.filter(pl.col("_dev") & (pl.col("system") == reference))[LOGIT].to_numpy()
    if dev.size == 0:
        why = (f"no {reference!r} answer with a score in the dev rows ({rule.split(':')[0]}) to calibrate the "
               "logit shift on")
        return {n: null(n, why) for n in names}, {"shift": None, "rule": rule, "reason": why}
    shift = logit_shift(dev)
    test = frame.filter(~pl.col("_dev")).with_columns((pl.col(LOGIT) + shift).alias("_score"))
    reference_test = test.filter(pl.col("system") == reference)
    calibration = {
        "shift": shift, "rule": rule, "positive_fraction_target": POSITIVE_FRACTION, "n_dev": int(dev.size),
        "dev_positive_pct": float(100 * np.mean(dev + shift > 0)),
        "n_test_reference": reference_test.height,
        "test_reference_positive_pct": (float(100 * (reference_test["_score"] > 0).mean())
                                        if reference_test.height else None),
        "models": models, "random_weights": bool(random),
    }
    extra = {"models": models, **({"caveat": RANDOM_CAVEAT.format(models=", ".join(random))} if random else {})}
    out = {}
    for name in names:
        scores = test.filter(pl.col("system") == name)["_score"]
        if scores.len() == 0:
            out[name] = null(name, f"no scored test row ({rule.split(':')[0]}: the dev rows only calibrate the "
                                   "shift)" if frame.filter(pl.col("system") == name).height else None)
            continue
        value, std = float(scores.mean()), float(scores.std(ddof=1)) if scores.len() > 1 else None
        if not all(math.isfinite(v) for v in (value, std) if v is not None):
            out[name] = null(name, f"system {name!r}: its shifted emotional_naturalness_logit values are too large "
                                   f"to summarise (the mean or std overflows: largest |value| "
                                   f"{float(scores.abs().max()):g})")
            continue
        out[name] = {"value": value, "n": scores.len(), "std": std, "shift": shift, **extra}
        if name != reference:
            out[name]["friedman_vs_reference"] = _friedman(test, name, reference)
    return out, calibration


def _friedman(test: pl.DataFrame, name: str, reference: str) -> dict:
    """The paired Friedman test of `name` against `reference` on the test questions both answered."""
    def per_question(system: str) -> pl.DataFrame:
        return (test.filter((pl.col("system") == system) & pl.col("question_key").is_not_null())
                .group_by("question_key").agg(pl.col("_score").mean().alias(system)))

    both = per_question(name).join(per_question(reference), on="question_key").sort("question_key")
    try:
        return friedman_statistic(both.select(name, reference).to_numpy())
    except ValueError as error:
        return {"p_value": None, "n_blocks": both.height, "reason": str(error)}


FIGURE = "fig2_emotional_naturalness"


def plot_emotional_naturalness(frame: pl.DataFrame, metrics: dict, path) -> dict:
    """Fig. 2 (bottom): the shifted scores of each system's test rows (the rows Table III averages) as
    histograms; {"path": ...} or {"skipped": why}. `frame`: the scored rows eval read."""
    from sdscore.report.naturalness_plots import NoPlotData, plot_score_histograms

    calibration = metrics.get("emotional_naturalness_calibration") or {}
    if calibration.get("shift") is None:
        return {"skipped": f"no emotional naturalness score: {calibration.get('reason', 'no calibration')}"}
    rows = frame.with_columns(pl.col(LOGIT).cast(pl.Float64)).filter(
        pl.col(LOGIT).is_not_null() & pl.col(LOGIT).is_finite())
    is_dev, _ = calibration_split(rows, metrics["reference_system"])
    test = rows.filter(~is_dev).with_columns((pl.col(LOGIT) + calibration["shift"]).alias("score"))
    title = "Emotional naturalness per answer (SPEARBench Fig. 2 bottom; test rows)"
    if calibration.get("random_weights"):
        title += "\nRANDOM-WEIGHT predictor: the scores mean nothing"
    try:
        drawn = plot_score_histograms(test, path, column="score", systems=list(metrics["systems"]), title=title,
                                      label="shifted logit (higher: more human-like)")
    except NoPlotData as reason:
        return {"skipped": str(reason)}
    return {"path": str(drawn)}
