"""`sdscore eval naturalness`: SPEARBench Table III per system from the RESULTS table, paired tests
against the reference (human) answers, and Figs. 3, 4 and 6.

Which rows enter each value (every value is {"value", "n", ...}, or value null with a "reason"; a
value that is a mean over rows also has "std", the sample standard deviation (ddof 1; null for one
row) of the same rows, as the authors' benchmark_line --use-std):

- scored rows (no error) for everything except interruptions; interruption % and the mean
  interrupted_ms are over ALL rows with a value (zeros included; error rows too, since they come
  from the manifest's answer_start_time, not from the audio), as the authors average them; a
  half-duplex system (``half_duplex``; half-duplex or non-streaming: it cannot answer while the
  question plays) has both null, as the authors' benchmark_line blanks them;
- MOS: means of mos_dnsmos_ovrl and mos_p808 (DNSMOS OVRL and P.808 stand in for UTMOS, which
  ships in no package) and of mos_local when a local MOS model was given;
- WER/CER in percent (as Table III prints them), per ASR engine and normalisation (authors',
  clean), over rows with that engine's transcript and a value; wer_pct/cer_pct pool every engine's
  values (the authors' benchmark line concatenates their WER_* columns);
- latency_ms (the authors' newest definition), latency_paper_ms (the paper's) and latency_onset_ms:
  means over rows with latency ≥ 0 (n_negative says how many rows were left out);
- english_pct_known (Table III's English %): language "en" over rows with a known language — the
  authors' benchmark_line leaves "unknown - ..." predictions out; english_pct counts them as
  non-English (their language_dialect_summary); language_unknown_pct is their share;
- same_dialect_pct: dialect_question_label == dialect_answer_label over rows with both;
- dialectal_beta, dialectal_variance, arousal/valence/dominance_rho, pitch_variation: see
  sdscore.metrics.naturalness; rows whose dialect vectors hold a non-finite value are left out.

Turn-taking (Table III's Turn-Taking, Fig. 2 top): turn_taking_ngram, the model-free baseline, is
computed here from the rows' voice-activity columns (turn_taking_ngram.py: a 5-gram fitted on these
results' question clips, each answer's own conversation left out); turn_taking_vap is the Scorer's
(--turn-taking-model). Both are means over scored rows with a value, in nats per frame.

Stances (Table III's same / more negative / more positive %, Fig. 5) come from the stance judge's
results files (`score naturalness --judge openai`), given beside the feature results: see
stance_eval.py; a system without them has the three values null with the reason.

Paired tests: per per-row metric, each system against the reference on questions both answered
(rows paired by question_key; a system's duplicate rows for one question are averaged), Wilcoxon
signed-rank; and Friedman's test over every system with values, on the questions all answered.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import polars as pl

from sdscore.atomic_write import write_json
from sdscore.corpus.results_file import read_results
from sdscore.errors import ManifestError
from sdscore.metrics._inputs import error_mask, nonfinite_report
from sdscore.metrics.naturalness import (
    WILCOXON,
    avd_correlation,
    dialectal_entrainment,
    dialectal_variance,
    paired_friedman,
    paired_wilcoxon,
    pitch_variation,
    speaker_normalise,
)
from sdscore.protocols.naturalness.results import (
    ASR_ENGINES,
    AVD,
    DIALECT_GROUPS,
    F0_FEATURES,
    HUMAN_SYSTEM,
    PITCH_VARIATION_FEATURES,
    RESULTS,
)
from sdscore.protocols.naturalness.spec import SPEC
from sdscore.protocols.naturalness.turn_taking_ngram import DEFINITION as TURN_TAKING_NGRAM
from sdscore.protocols.naturalness.turn_taking_ngram import with_ngram_scores

#: Per-row metrics that get paired tests: column → only rows with a value ≥ 0 (latencies).
PAIRED_METRICS: dict[str, bool] = {
    "latency_ms": True, "latency_paper_ms": True, "latency_onset_ms": True, "interrupted_ms": False,
    "mos_dnsmos_ovrl": False, "mos_p808": False, "mos_local": False,
    **{f"{m}_{e}": False for e in ASR_ENGINES for m in ("wer", "cer", "wer_clean", "cer_clean")},
    "answer_duration_s": False, "voiced_ratio": False, "turn_taking_ngram": False, "turn_taking_vap": False,
}
#: The per-row scores whose NaN/±inf are left out of their metrics and reported (a system's nonfinite_excluded).
NONFINITE_COLUMNS = (*PAIRED_METRICS, *(f"{dim}_{side}" for dim in AVD for side in ("question", "answer")),
                     "dialect_question", "dialect_answer",
                     "emotional_naturalness_logit")  # emotional_naturalness_eval.LOGIT (imported late there)
#: Words of the `unavailable` notes ("group: reason") that explain each column's nulls.
_NOTE_WORDS = {"mos_dnsmos_ovrl": ("mos",), "mos_p808": ("mos",), "mos_local": ("mos_local",),
               "latency_ms": ("latency_ms",), "latency_paper_ms": ("latency_paper_ms",),
               "language": ("language", "lid"),
               "dialect": ("dialect",), "avd": ("emotion", *AVD), "f0": ("f0", "pitch"),
               "turn_taking_ngram": ("turn-taking",), "turn_taking_vap": ("turn_taking_vap", "turn-taking")}
_ENGLISH = {"en", "eng", "english"}
#: the interruption values a half-duplex system leaves null
INTERRUPTION_KEYS = ("interrupted_pct", "interrupted_ms")
HALF_DUPLEX_REASON = ("half-duplex system (half_duplex / --half-duplex): it cannot answer while the question plays, "
                      "so interruptions are not reported (as SPEARBench's Table III)")


def _record(value, n: int, **extra) -> dict:
    """A computed value (float, finite) with the number of rows behind it."""
    return {"value": float(value), "n": int(n), **extra}


def _mean_record(values: pl.Series, scale: float = 1.0, **extra) -> dict:
    """The mean of finite values (times scale) with their sample std (ddof 1; None for one value)."""
    std = float(values.std(ddof=1)) * scale if values.len() > 1 else None
    mean = float(values.mean()) * scale
    if not all(math.isfinite(v) for v in (mean, std) if v is not None):
        return {"value": None, "n": 0, **extra, "reason": f"{values.name}: the values are too large to summarise (the "
                f"mean or std overflows; largest |value| {float(values.abs().max()):g})"}
    return _record(mean, values.len(), std=std, **extra)


class _System:
    """One system's rows and the means of telling why a value is null."""

    def __init__(self, name: str, rows: pl.DataFrame, absent: set[str], half_duplex: bool = False):
        self.name, self.all_rows, self.absent, self.half_duplex = name, rows, absent, half_duplex
        failed = error_mask(rows)
        self.rows = rows.filter(pl.Series(~failed))
        self.n_errors = int(failed.sum())
        # the rows whose scores hold NaN/±inf (left out of those metrics only): error rows count for
        # interrupted_ms alone, the one score read from every row
        scored_only = [c for c in NONFINITE_COLUMNS if c != "interrupted_ms" and c in rows.columns]
        masked = rows.with_columns(pl.Series("_failed", failed)).with_columns(
            pl.when(pl.col("_failed")).then(None).otherwise(pl.col(c)).alias(c) for c in scored_only)
        self.nonfinite = nonfinite_report(masked, NONFINITE_COLUMNS, SPEC.unique_key)
        notes: list[str] = []
        for text in self.rows["unavailable"].drop_nulls().to_list():
            notes.extend(part.strip() for part in text.split("; ") if part.strip())
        self.notes = list(dict.fromkeys(notes))

    def reason(self, columns: tuple[str, ...], words: tuple[str, ...] = ()) -> dict:
        """A null value with why: absent columns, no scored row, or all null (with the scorer's notes)."""
        missing = [c for c in columns if c in self.absent]
        if self.all_rows.height == 0:
            why = f"system {self.name!r} has no row in the feature results (only stance results were given)"
        elif missing:
            why = f"column{'s' if len(missing) > 1 else ''} {', '.join(missing)} absent from the results"
        elif self.rows.height == 0:
            why = f"system {self.name!r} has no scored row (all {self.n_errors} rows have an error)"
        else:
            why = f"{', '.join(columns)}: no usable value on the {self.rows.height} scored rows"
            words = words or columns
            matched = [note for note in self.notes
                       if set(note.split(":")[0].replace("/", " ").split()) & set(words)]
            if matched:
                why += f" ({'; '.join(matched[:3])})"
        return {"value": None, "n": 0, "reason": why}


def _finite(rows: pl.DataFrame, column: str) -> tuple[pl.Series, dict]:
    """The finite values of `column`, and {"n_nonfinite": k} when k NaN/±inf values were left out (else {})."""
    series = rows[column].cast(pl.Float64).drop_nulls()
    finite = series.filter(series.is_finite())
    dropped = series.len() - finite.len()
    return finite, ({"n_nonfinite": dropped} if dropped else {})


def _mean(system: _System, column: str, *, scale: float = 1.0, all_rows: bool = False,
          nonnegative: bool = False, where: pl.Expr | None = None) -> dict:
    rows = system.all_rows if all_rows else system.rows
    if where is not None:
        rows = rows.filter(where)
    values, extra = _finite(rows, column) if column in rows.columns else (pl.Series([], dtype=pl.Float64), {})
    if nonnegative:
        extra["n_negative"] = int((values < 0).sum())
        values = values.filter(values >= 0)
    if values.len() == 0:
        return {**system.reason((column,), _NOTE_WORDS.get(column, ())), **extra}
    return _mean_record(values, scale, **extra)


def _asr(system: _System) -> dict:
    out: dict[str, dict] = {}
    for metric in ("wer", "cer", "wer_clean", "cer_clean"):
        pooled, n_nonfinite = [], 0
        for engine in ASR_ENGINES:
            column = f"{metric}_{engine}"
            words = (column, f"wer_{engine}", f"wer_clean_{engine}", engine)
            rows = system.rows.filter(pl.col(f"transcript_{engine}").is_not_null())
            values, dropped = _finite(rows, column)
            pooled.append(values)
            n_nonfinite += dropped.get("n_nonfinite", 0)
            out[f"{metric}_pct_{engine}"] = (_mean_record(values, 100.0, **dropped) if values.len()
                                             else {**system.reason((column, f"transcript_{engine}"), words), **dropped})
        values = pl.concat(pooled)
        dropped = {"n_nonfinite": n_nonfinite} if n_nonfinite else {}
        out[f"{metric}_pct"] = (_mean_record(values, 100.0, engines=list(ASR_ENGINES), **dropped) if values.len()
                                else {**system.reason(tuple(f"{metric}_{e}" for e in ASR_ENGINES)), **dropped})
    return out


def _language(system: _System) -> dict:
    languages = [str(v).strip().lower() for v in system.rows["language"].drop_nulls().to_list()]
    if not languages:
        reason = system.reason(("language",), _NOTE_WORDS["language"])
        return {"english_pct": reason, "english_pct_known": reason, "language_unknown_pct": reason}
    english = sum(v in _ENGLISH for v in languages)
    unknown = sum(v.startswith("unknown") for v in languages)
    known = len(languages) - unknown
    return {
        "english_pct": _record(100 * english / len(languages), len(languages)),
        "english_pct_known": (_record(100 * english / known, known) if known else
                              {"value": None, "n": 0, "reason": "every language prediction is 'unknown - ...'"}),
        "language_unknown_pct": _record(100 * unknown / len(languages), len(languages)),
    }


def _dialect_matrix(system: _System, column: str, rows: pl.DataFrame) -> np.ndarray:
    vectors = rows[column].to_list()
    width = len(DIALECT_GROUPS)
    bad = next((v for v in vectors if len(v) != width), None)
    if bad is not None:
        raise ValueError(f"system {system.name!r}: {column} holds a vector of {len(bad)} values; "
                         f"expected {width} (one per DIALECT_GROUPS entry)")
    return np.asarray(vectors, dtype=np.float64).reshape(len(vectors), width)


def _dialect(system: _System) -> dict:
    out: dict[str, dict] = {}
    labelled = system.rows.filter(pl.col("dialect_question_label").is_not_null()
                                  & pl.col("dialect_answer_label").is_not_null())
    out["same_dialect_pct"] = (
        _record(100 * (labelled["dialect_question_label"] == labelled["dialect_answer_label"]).mean(), labelled.height)
        if labelled.height else system.reason(("dialect_question_label", "dialect_answer_label"), ("dialect",)))
    pairs = system.rows.filter(pl.col("dialect_question").is_not_null() & pl.col("dialect_answer").is_not_null())
    q = _dialect_matrix(system, "dialect_question", pairs)
    a = _dialect_matrix(system, "dialect_answer", pairs)
    keep = np.isfinite(q).all(axis=1) & np.isfinite(a).all(axis=1)
    dropped = {"n_nonfinite": int((~keep).sum())}
    if keep.any():
        out["dialectal_beta"] = _guarded(dialectal_entrainment, (q[keep], a[keep]), int(keep.sum()), **dropped)
    else:
        out["dialectal_beta"] = {**system.reason(("dialect_question", "dialect_answer"), ("dialect",)), **dropped}
    answers = system.rows.filter(pl.col("dialect_answer").is_not_null())
    a = _dialect_matrix(system, "dialect_answer", answers)
    keep = np.isfinite(a).all(axis=1)
    dropped = {"n_nonfinite": int((~keep).sum())}
    out["dialectal_variance"] = (_guarded(dialectal_variance, (a[keep],), int(keep.sum()), **dropped)
                                 if keep.any() else {**system.reason(("dialect_answer",), ("dialect",)), **dropped})
    return out


def _guarded(metric, args: tuple, n: int, **extra) -> dict:
    """metric(*args) as a record, or null with the metric's own ValueError as the reason."""
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            value = metric(*args)
    except ValueError as error:
        return {"value": None, "n": n, "reason": str(error), **extra}
    if not math.isfinite(value):
        return {"value": None, "n": n, "reason": f"{getattr(metric, '__name__', 'the metric')} is {value} (its inputs "
                f"hold values too large to compute with)", **extra}
    return _record(value, n, **extra)


def _avd(system: _System) -> dict:
    out = {}
    for dim in AVD:
        q, a = f"{dim}_question", f"{dim}_answer"
        rows = system.rows.select(pl.col(q).cast(pl.Float64), pl.col(a).cast(pl.Float64)).drop_nulls()
        n_pairs = rows.height
        rows = rows.filter(pl.col(q).is_finite() & pl.col(a).is_finite())
        dropped = {"n_nonfinite": n_pairs - rows.height} if n_pairs > rows.height else {}
        out[f"{dim}_rho"] = (_guarded(avd_correlation, (rows[q].to_numpy(), rows[a].to_numpy()), rows.height, **dropped)
                             if rows.height else {**system.reason((q, a), _NOTE_WORDS["avd"]), **dropped})
    return out


def speaker_normalised(frame: pl.DataFrame) -> pl.DataFrame:
    """The frame with every F0 feature divided by the mean f0_mean of its (system, asker) rows."""
    groups = list(zip(frame["system"].to_list(), frame["asker"].to_list()))
    f0 = frame.select(pl.col(name).cast(pl.Float64) for name in F0_FEATURES).to_numpy()
    mean = frame["f0_mean"].cast(pl.Float64).to_numpy()
    normalised = speaker_normalise(f0, mean, groups)
    return frame.with_columns(pl.Series(name, normalised[:, i]) for i, name in enumerate(F0_FEATURES))


def _pitch(system: _System, normalised: pl.DataFrame) -> dict:
    values = normalised.select(PITCH_VARIATION_FEATURES).to_numpy()
    n = int(np.isfinite(values).any(axis=1).sum())
    if n == 0:
        return system.reason(("f0_mean", *PITCH_VARIATION_FEATURES), _NOTE_WORDS["f0"])
    return _guarded(pitch_variation, (values,), n, features=list(PITCH_VARIATION_FEATURES))


def _system_metrics(system: _System, normalised: pl.DataFrame) -> dict:
    out: dict = {"n_rows": system.all_rows.height, "n_scored": system.rows.height, "n_errors": system.n_errors}
    if system.nonfinite is not None:
        out["nonfinite_excluded"] = system.nonfinite
    for column in ("mos_dnsmos_ovrl", "mos_p808", "mos_local"):
        out[column] = _mean(system, column)
    out.update(_asr(system))
    out["latency_ms"] = _mean(system, "latency_ms", nonnegative=True)
    out["latency_paper_ms"] = _mean(system, "latency_paper_ms", nonnegative=True)
    out["latency_onset_ms"] = _mean(system, "latency_onset_ms", nonnegative=True)
    if system.half_duplex:
        out.update({key: {"value": None, "n": 0, "reason": HALF_DUPLEX_REASON} for key in INTERRUPTION_KEYS})
    else:
        out["interrupted_pct"] = _mean(system, "interrupted", scale=100.0, all_rows=True)
        out["interrupted_ms"] = _mean(system, "interrupted_ms", all_rows=True)
    out["turn_taking_ngram"] = _mean(system, "turn_taking_ngram")
    out["turn_taking_vap"] = _mean(system, "turn_taking_vap")
    out.update(_language(system))
    out.update(_dialect(system))
    out.update(_avd(system))
    out["answer_duration_s"] = _mean(system, "answer_duration_s")
    out["voiced_ratio"] = _mean(system, "voiced_ratio")
    out["pitch_variation"] = _pitch(system, normalised)
    return out


def _per_question(rows: pl.DataFrame, column: str, nonnegative: bool) -> pl.DataFrame:
    """question_key → the mean value of `column` over a system's usable rows of that question."""
    value = pl.col(column).cast(pl.Float64)
    keep = pl.col("question_key").is_not_null() & value.is_not_null() & value.is_finite()
    if nonnegative:
        keep &= value >= 0
    return rows.filter(keep).group_by("question_key").agg(value.mean().alias(column))


def _paired_tests(systems: dict[str, _System], reference: str) -> tuple[dict, dict]:
    """Wilcoxon per system against the reference, and Friedman over all systems, per metric."""
    tests: dict[str, dict] = {}
    friedman: dict[str, dict] = {}
    for column, nonnegative in PAIRED_METRICS.items():
        tables = {}
        for name, system in systems.items():
            if column == "interrupted_ms" and system.half_duplex:
                continue  # not reported for a half-duplex system
            rows = system.all_rows if column == "interrupted_ms" else system.rows
            table = _per_question(rows, column, nonnegative) if column in rows.columns else None
            if table is not None and table.height:
                tables[name] = table
        for name in systems:
            if name == reference:
                continue
            if name not in tables or reference not in tables:
                who = name if name not in tables else reference
                reason = (HALF_DUPLEX_REASON if column == "interrupted_ms" and systems[who].half_duplex
                          else f"{who!r} has no {column} value on a row with a question_key")
                result = {"test": WILCOXON, "p_value": None, "n_pairs": 0, "reason": reason}
            else:
                both = tables[name].join(tables[reference], on="question_key", suffix="_reference").sort("question_key")
                try:
                    result = paired_wilcoxon(both[column].to_numpy(), both[f"{column}_reference"].to_numpy())
                except ValueError as error:
                    result = {"test": WILCOXON, "p_value": None, "n_pairs": both.height, "reason": str(error)}
            tests.setdefault(name, {})[column] = result
        friedman[column] = _friedman(tables, column)
    return tests, friedman


def _friedman(tables: dict[str, pl.DataFrame], column: str) -> dict:
    names = list(tables)
    if len(names) < 3:
        return {"p_value": None, "systems": names, "reason": f"{len(names)} system(s) have {column} values; "
                "Friedman's test needs at least 3"}
    joined = tables[names[0]].rename({column: names[0]})
    for name in names[1:]:
        joined = joined.join(tables[name].rename({column: name}), on="question_key")
    try:
        return {**paired_friedman(joined.select(names).to_numpy()), "systems": names}
    except ValueError as error:
        return {"p_value": None, "systems": names, "n_questions": joined.height, "reason": str(error)}


def _prepared(results: pl.DataFrame) -> tuple[pl.DataFrame, set[str]]:
    """Every RESULTS column typed (absent ones added as nulls and remembered); null system = human."""
    if "system" not in results.columns:
        raise ValueError(f"results lack the 'system' column (found: {', '.join(results.columns) or 'no columns'})")
    absent = {name for name in RESULTS.names() if name not in results.columns}
    typed = []
    for name, dtype in RESULTS.items():
        if name in absent:
            typed.append(pl.lit(None, dtype).alias(name))
            continue
        try:
            typed.append(results[name].cast(dtype, strict=True))
        except pl.exceptions.PolarsError as error:
            raise ValueError(f"results column {name!r} holds {results[name].dtype} values that are not {dtype} "
                             f"({str(error).splitlines()[0][:120]})") from None
    frame = results.with_columns(typed).with_columns(pl.col("system").fill_null(HUMAN_SYSTEM))
    return frame, absent


def system_order(frame: pl.DataFrame, reference_system: str) -> list[str]:
    """The reference system first (when present), then the others by name."""
    names = sorted(set(frame["system"].to_list()))
    return [reference_system] * (reference_system in names) + [n for n in names if n != reference_system]


def evaluate_naturalness(results: pl.DataFrame, *, reference_system: str = HUMAN_SYSTEM,
                         half_duplex: tuple[str, ...] | list[str] = (), stances: pl.DataFrame | None = None) -> dict:
    """Table III per system, paired tests against `reference_system`, and the definitions used.
    half_duplex: systems whose interruption values are null (ValueError for a name not in the results);
    stances: the stance judge's results (STANCE_RESULTS rows; null system = human), if any."""
    from sdscore.protocols.naturalness.distributional_features import distributional_metrics
    from sdscore.protocols.naturalness.emotional_naturalness_eval import emotional_naturalness_values
    from sdscore.protocols.naturalness.stance_eval import stance_metrics, table_values

    frame, absent = _prepared(results)
    frame = with_ngram_scores(frame, absent)  # fitted on these results' question clips
    if stances is not None:
        stances = stances.with_columns(pl.col("system").fill_null(HUMAN_SYSTEM))
    if frame.height == 0 and (stances is None or stances.height == 0):
        raise ValueError("the naturalness results hold no rows")
    normalised = speaker_normalised(frame.filter(pl.Series(~error_mask(frame))))
    order = system_order(pl.concat([frame.select("system"), *([] if stances is None else [stances.select("system")])]),
                         reference_system)
    unknown = [name for name in half_duplex if name not in order]
    if unknown:
        raise ValueError(f"half-duplex system {unknown[0]!r} is not in the results (systems: {', '.join(order)})")
    systems = {name: _System(name, frame.filter(pl.col("system") == name), absent, name in half_duplex)
               for name in order}
    per_system = {name: _system_metrics(system, normalised.filter(pl.col("system") == name))
                  for name, system in systems.items()}
    stance_values = stance_metrics(stances, order, reference_system)
    for name, values in per_system.items():
        values.update(table_values(stance_values[name]))
        values["stances"] = stance_values[name]
    emotional, calibration = emotional_naturalness_values(systems, reference_system)
    for name, values in per_system.items():
        values["emotional_naturalness"] = emotional[name]
    features, explainable = distributional_metrics(frame.filter(pl.Series(~error_mask(frame))), order, reference_system)
    for name, values in per_system.items():
        values["explainable_features"] = features[name]
    if reference_system in systems:
        tests, friedman = _paired_tests(systems, reference_system)
    else:
        tests, friedman = {}, {}
    return {
        "reference_system": reference_system,
        "reference_present": reference_system in systems,
        "half_duplex": [name for name in order if name in half_duplex],
        "systems": per_system,
        "paired_tests": tests,
        "friedman": friedman,
        "emotional_naturalness_calibration": calibration,
        "explainable_features": explainable,
        "definitions": DEFINITIONS,
    }


DEFINITIONS = {
    "mos": "mos_dnsmos_ovrl and mos_p808 are DNSMOS OVRL and P.808 MOS, offline substitutes for UTMOS",
    "wer_cer": "percent; per ASR engine over rows with its transcript; wer_pct/cer_pct pool all engines",
    "std": "beside each mean: the sample standard deviation (ddof=1) of the same rows; null for one row",
    "latency": "ms, mean over rows with latency >= 0; latency_ms the authors' newest definition (interrupted "
               "answers counted from the question's speech end), latency_paper_ms the paper's (interrupted "
               "answers left out), latency_onset_ms the first VAD onset in the answer clip",
    "interruptions": "interrupted_pct and interrupted_ms over all rows with a value, zeros included; null for "
                     "half-duplex systems",
    "english_pct_known": "Table III's English %: language 'en' over rows with a known language ('unknown - ...' "
                         "left out, as the authors' benchmark_line)",
    "english_pct": "language 'en' over rows with a language; 'unknown - ...' counted as non-English",
    "dialectal_beta": "np.polyfit slope of min-max-normalised flattened answer on question log-logits",
    "dialectal_variance": "trace of the answers' log-logit covariance (ddof=1)",
    "avd_rho": "Pearson correlation of question and answer values",
    "emotional_naturalness": "the emotional-naturalness predictor's human-like logit (emotion embeddings and AVD of "
                             "question and answer, MiniLM embedding of the conversation prompt, one-hot relationship) "
                             "plus a shift that puts 99% of the reference's dev answers above 0; mean over the other "
                             "(test) rows; friedman_vs_reference: the paired Friedman test against the reference "
                             "(emotional_naturalness_eval.py; emotional_naturalness_calibration: the shift and split)",
    "turn_taking_ngram": TURN_TAKING_NGRAM,
    "turn_taking_vap": "nats per 50 Hz frame: VAP evaluators' (--turn-taking-model) mean -ln P(observed state of the "
                       "next 2 s of both speakers' voice activity, 4 bins each) over the answer window, averaged over "
                       "the evaluators; lower is more typical",
    "pitch_variation": "mean over f0 min/p10/p25/median/p75/p90/max of the std (ddof=1) of values "
                       "divided by the mean f0_mean of the same (system, asker)",
    "paired_tests": f"{WILCOXON}, rows paired by question_key; p_value null with a reason when undefined",
    "stances": "an audio-LLM judge rates question and answer on StanceBench's 10 dimensions (-1/0/+1); "
               "stance_same_pct / stance_more_negative_pct / stance_more_positive_pct: the answer's rating equal "
               "to, below or above the question's, pooled over rows and dimensions; stances.per_dimension per "
               "dimension; stances.vs_reference the same against the reference answer to the same question",
    "explainable_features": "per system (explainable_features): the mean ± std of SPEARBench's spectral (F0 in Hz), "
                            "temporal and lexical distributional features per answer (distributional_features.py), "
                            "each feature's AUROC P(reference > system), the means of the correlation clusters and, "
                            "with dev and test rows, lda_baseline: the released per-feature LDA (fitted on dev) "
                            "accuracy/AUROC on test and mean P(reference) of the system's test answers; "
                            "top-level explainable_features: the clusters (average linkage on 1 - |Spearman rho|, "
                            "cut at |rho| 0.8), each cluster's and the general first principal component, and every "
                            "answer's coordinates on the first two principal components of the z-scored features, "
                            "fitted on all systems' scored rows pooled",
    "table_i": "SPEARBench's Table I (eval --segments/--selection): original conversations and hours (per "
               "conversation its longest audio file), selected dialogues, hours of contexts+questions (sum of "
               "question_end_time), answers (sum of answer_duration) and both, per subset/split",
}

#: Table III columns: (header, key, digits).
TABLE_COLUMNS = (
    ("DNSMOS", "mos_dnsmos_ovrl", 2), ("P.808", "mos_p808", 2), ("WER%", "wer_pct", 1), ("CER%", "cer_pct", 1),
    ("Lat.ms", "latency_ms", 0), ("Int.ms", "interrupted_ms", 0), ("Int.%", "interrupted_pct", 1),
    ("TT-ngram", "turn_taking_ngram", 3), ("TT-VAP", "turn_taking_vap", 3),
    ("Eng.%", "english_pct_known", 1), ("SameDial%", "same_dialect_pct", 1), ("β", "dialectal_beta", 2),
    ("tr(Σ)", "dialectal_variance", 1), ("EmoNat", "emotional_naturalness", 2), ("ρA", "arousal_rho", 2), ("ρV", "valence_rho", 2),
    ("ρD", "dominance_rho", 2), ("Same%", "stance_same_pct", 1), ("Neg%", "stance_more_negative_pct", 1),
    ("Pos%", "stance_more_positive_pct", 1), ("Dur.s", "answer_duration_s", 1), ("Voiced", "voiced_ratio", 3),
    ("PitchVar", "pitch_variation", 3),
)


def format_table(metrics: dict, *, std: bool = True) -> str:
    """Table III rows as plain text (reference system first); '-' where a value is null; with std,
    a mean's cell is "mean±std" (the std rounded as the mean)."""
    header = ["System", *(h for h, _, _ in TABLE_COLUMNS)]
    rows = [header]
    for name, values in metrics["systems"].items():
        cells = [name]
        for _, key, digits in TABLE_COLUMNS:
            record = values.get(key, {})
            value, spread = record.get("value"), record.get("std")
            cell = "-" if value is None else f"{value:.{digits}f}"
            if std and value is not None and spread is not None:
                cell += f"±{spread:.{digits}f}"
            cells.append(cell)
        rows.append(cells)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))
             for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    lines.append("DNSMOS/P.808 stand in for UTMOS; WER/CER in percent, pooled over ASR engines (authors' "
                 "normalisation); latency over rows >= 0 (the authors' newest definition); interruptions over all "
                 "rows (- for half-duplex systems); TT-ngram the turn-taking n-gram baseline's surprisal (nats per "
                 "frame, lower is more typical) and TT-VAP the VAP evaluators' (--turn-taking-model); English % over "
                 "known languages; stances (Same/Neg/Pos %) the "
                 "answer against the question, from the stance judge's results; ± the sample std.")
    for header, key, _ in TABLE_COLUMNS:  # a value's caveat (a random-weight model's scores), once per column
        caveat = next((v[key]["caveat"] for v in metrics["systems"].values() if v.get(key, {}).get("caveat")), None)
        if caveat:
            lines.append(f"{header}: {caveat}.")
    if metrics.get("explainable_features") is not None:
        from sdscore.protocols.naturalness.distributional_features import format_explainable

        lines += ["", format_explainable({n: v.get("explainable_features") or {} for n, v in metrics["systems"].items()},
                                         metrics["explainable_features"])]
    if metrics.get("table_i") is not None:
        from sdscore.protocols.naturalness.corpus_table import format_corpus_table

        lines += ["", "Table I: original conversations and selected dialogues", format_corpus_table(metrics["table_i"])]
    return "\n".join(lines)


def row_filters(frame: pl.DataFrame, wanted: dict, source: str) -> pl.DataFrame:
    """The rows whose column holds one of the wanted values, per column (None: no filter);
    ManifestError when a filtered column is absent or all null, or nothing is left."""
    for column, values in wanted.items():
        if values is None:
            continue
        if column not in frame.columns or frame[column].null_count() == frame.height:
            raise ManifestError(f"{source}: --{column} {', '.join(values)}, but the results have no {column} values "
                                f"(select-dialogues writes them for a Seamless Interaction folder or a segments "
                                f"table with a {column} column)")
        frame = frame.filter(pl.col(column).cast(pl.String).is_in(list(values)))
    if frame.height == 0 and any(v is not None for v in wanted.values()):
        asked = "; ".join(f"{k} {', '.join(v)}" for k, v in wanted.items() if v is not None)
        raise ManifestError(f"{source}: no row of {asked}")
    return frame


def evaluate_files(results: list, out_json: str | os.PathLike, *, plot=None, seed: int = 0,
                   half_duplex: tuple[str, ...] | list[str] = (), latex: str | os.PathLike | None = None,
                   subsets: tuple[str, ...] | None = None, splits: tuple[str, ...] | None = None,
                   segments: str | os.PathLike | None = None, selection: str | os.PathLike | None = None) -> dict:
    """Metrics of one or more results files (concatenated, e.g. one per system) as JSON; with
    `plot` a folder, Figs. 3, 4 and 6 are written there (a figure without data is skipped with
    its reason under "figures"); with `latex` a file, Table III as a LaTeX tabular (latex_table.py).
    half_duplex: systems whose interruption values are null. subsets / splits: only the rows whose
    subset / split column holds one of these (row_filters). segments / selection: the segments table and
    the selection (metadata.csv or its folder) for Table I (corpus_table.py). seed is unused: nothing is
    resampled."""
    from sdscore.protocols.naturalness.stance_scorer import MARKER, STANCE_RESULTS

    paths = [Path(p) for p in results]
    if not paths:
        raise ValueError("eval naturalness needs at least one results file")
    read = [read_results(path, RESULTS, required=("system",), add_absent=False,
                         unique=("system", *SPEC.unique_key)) for path in paths]
    stance_paths = [path for path, f in zip(paths, read) if MARKER in f.columns]
    frames = [f for f in read if MARKER not in f.columns]
    frame = pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame(schema={"system": pl.String})
    stances = (pl.concat([read_results(path, STANCE_RESULTS, required=("system",)).select(STANCE_RESULTS.names())
                          for path in stance_paths]) if stance_paths else None)
    wanted = {"subset": subsets, "split": splits}
    if frames:
        frame = row_filters(frame, wanted, ", ".join(str(p) for p in paths if p not in stance_paths))
    stances = None if stances is None else row_filters(stances, wanted, ", ".join(map(str, stance_paths)))
    metrics = evaluate_naturalness(frame, half_duplex=tuple(half_duplex), stances=stances)
    metrics["filters"] = {k: None if v is None else list(v) for k, v in wanted.items()}
    metrics["results_files"] = [str(p) for p in paths]
    metrics["stance_results_files"] = [str(p) for p in stance_paths]
    if plot is not None:
        from sdscore.report.naturalness_plots import plot_naturalness_figures

        prepared, _ = _prepared(frame)
        scored = speaker_normalised(prepared.filter(pl.Series(~error_mask(prepared))))
        metrics["figures"] = plot_naturalness_figures(
            scored, plot, groups=DIALECT_GROUPS, dims=AVD, features=PITCH_VARIATION_FEATURES,
            systems=list(metrics["systems"]))
        from sdscore.protocols.naturalness.stance_eval import plot_stances
        from sdscore.report.naturalness_plots import NoPlotData

        try:
            path = plot_stances({n: m["stances"] for n, m in metrics["systems"].items()},
                                Path(plot) / "fig5_stances.png")
            metrics["figures"]["fig5_stances"] = {"path": str(path)}
        except NoPlotData as reason:
            metrics["figures"]["fig5_stances"] = {"skipped": str(reason)}
        from sdscore.report.naturalness_plots import plot_score_histograms

        with_scores = with_ngram_scores(*_prepared(frame))
        with_scores = with_scores.filter(pl.Series(~error_mask(with_scores)))
        for name, column, what in (("fig2_turn_taking", "turn_taking_ngram", "model-free n-gram baseline"),
                                   ("fig2_turn_taking_vap", "turn_taking_vap", "VAP evaluators")):
            try:
                path = plot_score_histograms(
                    with_scores, Path(plot) / f"{name}.png", column=column,
                    label=f"turn-taking surprisal, {what} (nats per frame; lower: more typical)",
                    title=f"Turn-taking naturalness per answer\n(SPEARBench Fig. 2 top; {what})",
                    systems=list(metrics["systems"]))
                metrics["figures"][name] = {"path": str(path)}
            except NoPlotData as reason:
                metrics["figures"][name] = {"skipped": str(reason)}
        from sdscore.protocols.naturalness.emotional_naturalness_eval import FIGURE as EMOTIONAL
        from sdscore.protocols.naturalness.emotional_naturalness_eval import plot_emotional_naturalness

        metrics["figures"][EMOTIONAL] = plot_emotional_naturalness(scored, metrics, Path(plot) / f"{EMOTIONAL}.png")
        from sdscore.protocols.naturalness.distributional_features import FIGURE, plot_feature_pca

        try:
            path = plot_feature_pca(metrics["explainable_features"], Path(plot) / f"{FIGURE}.png",
                                    list(metrics["systems"]))
            metrics["figures"][FIGURE] = {"path": str(path)}
        except NoPlotData as reason:
            metrics["figures"][FIGURE] = {"skipped": str(reason)}
    if segments is not None or selection is not None:
        from sdscore.protocols.naturalness.corpus_table import corpus_table

        metrics["table_i"] = corpus_table(segments, selection, subsets=subsets, splits=splits)
    if latex is not None:
        from sdscore.protocols.naturalness.latex_table import write_latex

        write_latex(metrics, latex)
        metrics["latex"] = str(latex)
    write_json(out_json, metrics)
    return metrics
