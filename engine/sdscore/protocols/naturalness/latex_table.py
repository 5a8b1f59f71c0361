"""Table III of `sdscore eval naturalness` as a LaTeX tabular, laid out as SPEARBench's (booktabs).

Column groups as the paper's (Speech quality, Interruptions, Language and Dialect, Emotions,
Stances, Explainable features), an arrow on the columns where higher (↑) or lower (↓) is better, the
reference system first and a rule below it; among the other systems the best value of each arrowed
column is bold and the second best italic, as the paper marks them. A mean is written "mean ± std"
(``std=True``); a null value is "--", and every column with a null value gets a footnote line with
the first system's reason.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from sdscore.atomic_write import write_text


@dataclass(frozen=True)
class Column:
    """One Table III column: its group, LaTeX label, metrics key, digits and which way is better
    (+1 higher, -1 lower, 0 neither: no arrow and no marks)."""

    group: str
    label: str
    key: str
    digits: int
    better: int


COLUMNS = (
    Column("Speech quality", "DNSMOS", "mos_dnsmos_ovrl", 2, +1),
    Column("Speech quality", "P.808", "mos_p808", 2, +1),
    Column("Speech quality", r"WER (\%)", "wer_pct", 1, -1),
    Column("Speech quality", r"CER (\%)", "cer_pct", 1, -1),
    Column("Interruptions", "Latency (ms)", "latency_ms", 0, -1),
    Column("Interruptions", "Interr.\\ time (ms)", "interrupted_ms", 0, -1),
    Column("Interruptions", r"Interr.\ \%", "interrupted_pct", 1, -1),
    Column("Turn-Taking", r"N-gram surpr.\ (nats)", "turn_taking_ngram", 3, -1),
    Column("Turn-Taking", r"VAP surpr.\ (nats)", "turn_taking_vap", 3, -1),
    Column("Language and Dialect", r"English \%", "english_pct_known", 1, +1),
    Column("Language and Dialect", r"Same dialect \%", "same_dialect_pct", 1, +1),
    Column("Language and Dialect", r"Dialectal $\beta$", "dialectal_beta", 2, +1),
    Column("Language and Dialect", r"tr($\Sigma$)", "dialectal_variance", 1, +1),
    Column("Emotions", "Emotional nat.", "emotional_naturalness", 2, +1),
    Column("Emotions", r"Arousal $\rho$", "arousal_rho", 2, +1),
    Column("Emotions", r"Valence $\rho$", "valence_rho", 2, +1),
    Column("Emotions", r"Dominance $\rho$", "dominance_rho", 2, +1),
    Column("Stances", r"Same stance \%", "stance_same_pct", 1, 0),
    Column("Stances", r"More negative \%", "stance_more_negative_pct", 1, 0),
    Column("Stances", r"More positive \%", "stance_more_positive_pct", 1, 0),
    Column("Explainable features", "Duration (s)", "answer_duration_s", 1, 0),
    Column("Explainable features", "Voiced ratio", "voiced_ratio", 3, 0),
    Column("Explainable features", "Pitch var.", "pitch_variation", 3, +1),
)
_ARROWS = {+1: r"$\uparrow$", -1: r"$\downarrow$", 0: ""}
_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
            "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def escape(text: str) -> str:
    """Text safe in a LaTeX cell."""
    return "".join(_SPECIAL.get(c, c) for c in str(text))


def _groups() -> list[tuple[str, int]]:
    groups: list[tuple[str, int]] = []
    for column in COLUMNS:
        if groups and groups[-1][0] == column.group:
            groups[-1] = (column.group, groups[-1][1] + 1)
        else:
            groups.append((column.group, 1))
    return groups


def _ranks(metrics: dict, column: Column, others: list[str]) -> dict[str, int]:
    """system → 0 (best) or 1 (second best) among `others` on an arrowed column (ties share a rank)."""
    if column.better == 0:
        return {}
    values = {name: metrics["systems"][name].get(column.key, {}).get("value") for name in others}
    distinct = sorted({round(v, column.digits) for v in values.values() if v is not None},
                      reverse=column.better > 0)[:2]
    return {name: distinct.index(round(v, column.digits)) for name, v in values.items()
            if v is not None and round(v, column.digits) in distinct}


def _cell(record: dict, column: Column, rank: int | None, std: bool) -> str:
    value = record.get("value")
    if value is None:
        return "--"
    text = f"{value:.{column.digits}f}"
    if rank == 0:
        text = rf"\textbf{{{text}}}"
    elif rank == 1:
        text = rf"\textit{{{text}}}"
    spread = record.get("std")
    if std and spread is not None:
        text += rf" {{\scriptsize $\pm$ {spread:.{column.digits}f}}}"
    return text


def format_latex(metrics: dict, *, std: bool = True) -> str:
    """Table III of `evaluate_naturalness`' metrics as a booktabs tabular and its footnotes."""
    systems = list(metrics["systems"])
    reference = metrics.get("reference_system")
    others = [name for name in systems if name != reference]
    ranks = {column.key: _ranks(metrics, column, others) for column in COLUMNS}
    spec = "l|" + "|".join("c" * span for _, span in _groups())
    end = r" \\"
    lines = [
        rf"\begin{{tabular}}{{{spec}}}",
        r"\toprule",
        " & ".join(["", *(rf"\multicolumn{{{span}}}{{c}}{{{group}}}" for group, span in _groups())]) + end,
        " & ".join(["Models", *(f"{c.label}{_ARROWS[c.better]}" for c in COLUMNS)]) + end,
        r"\midrule",
    ]
    for i, name in enumerate(systems):
        values = metrics["systems"][name]
        cells = [escape(name), *(_cell(values.get(c.key, {}), c, ranks[c.key].get(name), std) for c in COLUMNS)]
        lines.append(" & ".join(cells) + end)
        if name == reference and i < len(systems) - 1:
            lines.append(r"\midrule")
    lines += [r"\bottomrule", r"\end{tabular}"]
    notes = _footnotes(metrics, systems)
    caveats = _caveats(metrics, systems)
    if notes or std or caveats:
        lines.append(r"\par\smallskip\footnotesize")
        if std:
            lines.append(r"$\pm$: sample standard deviation over the rows behind each mean.\\")
        lines += [rf"{label}: -- {escape(reason)}.\\" for label, reason in notes]
        lines += [rf"{label}: {escape(caveat)}.\\" for label, caveat in caveats]
    return "\n".join(lines) + "\n"


def _footnotes(metrics: dict, systems: list[str]) -> list[tuple[str, str]]:
    """(column label, the first null value's reason) for every column with a null value."""
    notes = []
    for column in COLUMNS:
        for name in systems:
            record = metrics["systems"][name].get(column.key, {})
            if record.get("value") is None:
                reason = record.get("reason") or "no value"
                notes.append((column.label, f"{name}: {reason}"))
                break
    return notes


def _caveats(metrics: dict, systems: list[str]) -> list[tuple[str, str]]:
    """(column label, the first caveat) for every column whose values carry one (a random-weight model's)."""
    notes = []
    for column in COLUMNS:
        caveat = next((metrics["systems"][n].get(column.key, {}).get("caveat") for n in systems
                       if metrics["systems"][n].get(column.key, {}).get("caveat")), None)
        if caveat:
            notes.append((column.label, caveat))
    return notes


def write_latex(metrics: dict, path: str | os.PathLike, *, std: bool = True) -> None:
    """format_latex's table, written atomically to `path`."""
    write_text(path, format_latex(metrics, std=std))
