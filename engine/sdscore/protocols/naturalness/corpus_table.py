"""SPEARBench's Table I: number and hours of the original conversations and of the selected dialogues,
per subset and split, as the authors' bin/data_prep_summary.py counts them.

- original conversations: the distinct conversation_id values of the segments table or Seamless
  Interaction folder select-dialogues read (selection.read_source; the conversations it cannot read
  are left out and listed under "unreadable_conversations"); original hours: per conversation the
  longest of its audio files from their headers (the released code: the longer of the two
  participants' files), summed;
- selected dialogues: the selection's metadata.csv rows; contexts+questions hours: the sum of
  question_end_time (the question clip runs from the first context utterance to the question's end);
  answers hours: the sum of answer_duration; total selected hours: both.

Columns: one per (subset, split) of the conversations (a Seamless folder's, or the segments table's
optional `subset` and `split` columns; absent: "all"), then the total. A selected dialogue's column:
the metadata's own subset/split (select-dialogues writes them), else its conversation's in the segments
table, else "all".
"""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl

from sdscore import storage
from sdscore.audio.checks import sound_info
from sdscore.audio.embedded_clips import is_embedded
from sdscore.corpus.read import collect_table
from sdscore.errors import AudioError, ManifestError

ALL = "all"
ROWS = (("original_conversations", "Original conversations", "count"),
        ("original_hours", "Original hours", "hours"),
        ("selected_dialogues", "Selected dialogues", "count"),
        ("context_question_hours", "Contexts+Questions", "hours"),
        ("answer_hours", "Answers", "hours"),
        ("total_selected_hours", "Total selected hours", "hours"))
_SPLIT_ORDER = {"train": 0, "dev": 1, "valid": 1, "validation": 1, "test": 2}


def _text(value) -> str:
    return ALL if value is None or not str(value).strip() else str(value).strip()


def _group(row: dict) -> tuple[str, str]:
    return _text(row.get("subset")), _text(row.get("split"))


def _read(path: str | os.PathLike, required: tuple[str, ...], what: str) -> tuple[pl.DataFrame, Path, str]:
    table, frame = collect_table(path, what)
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise ManifestError(f"{table.source}: the {what} lacks column(s) {', '.join(missing)} "
                            f"(Table I needs {', '.join(required)})")
    return frame, table.base_dir, table.source


def _seconds(path: str, conversation: str, source: str) -> float:
    local = None if storage.is_remote(path) or is_embedded(path) else storage.normalize(path)
    if local is not None and os.path.exists(local) and not os.path.isfile(local):  # a FIFO would block the reader
        raise AudioError(f"{source}: conversation {conversation!r}: the audio {path} is not a regular file")
    try:
        info = sound_info(path)
    except Exception as error:  # noqa: BLE001 - soundfile and the stores raise many kinds
        raise AudioError(f"{source}: conversation {conversation!r}: cannot read the audio {path} "
                         f"({str(error).splitlines()[0] if str(error) else type(error).__name__})") from None
    if info.samplerate <= 0:
        raise AudioError(f"{source}: conversation {conversation!r}: {path} has sample rate {info.samplerate}")
    return info.frames / info.samplerate


def original_conversations(segments: str | os.PathLike) -> tuple[dict[str, dict], list[str]]:
    """(conversation_id → {"group": (subset, split), "seconds": the longest of its audio files}, the
    conversations left out as unreadable), from a segments table or a Seamless Interaction folder
    (selection.read_source, as select-dialogues reads them). A conversation with a bad row is left
    out: the reader skips it (a Seamless interaction whole; a table's bad rows, and the conversation
    when none of its rows is readable)."""
    from sdscore.protocols.naturalness.selection import read_source

    table = read_source(segments)
    durations: dict[str, float] = {}
    out: dict[str, dict] = {}
    for s in table.segments:
        entry = out.setdefault(s.conversation_id, {"group": _group(table.conversations.get(s.conversation_id, {})),
                                                   "seconds": 0.0})
        if s.audio_path not in durations:
            durations[s.audio_path] = _seconds(s.audio_path, s.conversation_id, table.source)
        entry["seconds"] = max(entry["seconds"], durations[s.audio_path])
    skipped = sorted({c for c, _ in table.problems if c and c not in out})
    return out, skipped


def selected_dialogues(selection: str | os.PathLike, groups: dict[str, tuple[str, str]] | None) -> list[dict]:
    """Per metadata row: its (subset, split), question_end_time and answer_duration (seconds). A
    selection folder means its metadata.csv."""
    path = Path(selection)
    if path.is_dir():
        path = path / "metadata.csv"
    frame, _, source = _read(path, ("conversation_id", "question_end_time", "answer_duration"), "selection metadata")
    rows = []
    for i, row in enumerate(frame.iter_rows(named=True)):
        conversation = None if row["conversation_id"] is None else str(row["conversation_id"])
        if _group(row) != (ALL, ALL):
            group = _group(row)
        elif groups is not None:
            if conversation not in groups:
                raise ManifestError(f"{source} row {i + 1}: conversation {conversation!r} is not in the segments "
                                    "table (give the segments table the selection was made from)")
            group = groups[conversation]
        else:
            group = _group(row)
        values = []
        for column in ("question_end_time", "answer_duration"):
            try:
                value = float(row[column])
            except (TypeError, ValueError):
                value = float("nan")
            if not value >= 0 or value == float("inf"):
                raise ManifestError(f"{source} row {i + 1}: {column} {row[column]} is not a non-negative number")
            values.append(value)
        rows.append({"group": group, "question_end_time": values[0], "answer_duration": values[1]})
    return rows


def _order(groups) -> list[tuple[str, str]]:
    return sorted(set(groups), key=lambda g: (g[0], _SPLIT_ORDER.get(g[1].lower(), 3), g[1]))


def corpus_table(segments: str | os.PathLike | None = None, selection: str | os.PathLike | None = None, *,
                 subsets: tuple[str, ...] | None = None, splits: tuple[str, ...] | None = None) -> dict:
    """Table I from the segments table and/or the selection (metadata.csv or its folder): columns
    [{"subset", "split"}, ..., total] and per ROWS key its values (null with "reasons" when the table it
    comes from was not given). subsets / splits (eval's --subset / --split): only those columns
    (ManifestError when none is left)."""
    if segments is None and selection is None:
        raise ValueError("Table I needs the segments table, the selection, or both")
    conversations, skipped = original_conversations(segments) if segments is not None else (None, [])
    groups = None if conversations is None else {c: e["group"] for c, e in conversations.items()}
    dialogues = selected_dialogues(selection, groups) if selection is not None else None

    def wanted(group: tuple[str, str]) -> bool:
        return (subsets is None or group[0] in subsets) and (splits is None or group[1] in splits)

    if subsets is not None or splits is not None:
        found = {e["group"] for e in (conversations or {}).values()} | {d["group"] for d in dialogues or []}
        if not any(wanted(g) for g in found):
            asked = "; ".join(f"{k} {', '.join(v)}" for k, v in (("subset", subsets), ("split", splits)) if v)
            raise ManifestError(f"Table I: no conversation of {asked} (found "
                                f"{', '.join('/'.join(g) for g in _order(found)) or 'none'})")
        conversations = None if conversations is None else {c: e for c, e in conversations.items()
                                                            if wanted(e["group"])}
        dialogues = None if dialogues is None else [d for d in dialogues if wanted(d["group"])]
    columns = _order([*(e["group"] for e in (conversations or {}).values()),
                      *(d["group"] for d in dialogues or [])])

    def per_column(values: dict) -> list:
        cells = [values.get(c, 0) for c in columns]
        return [*cells, sum(cells)]

    rows: dict[str, list | None] = dict.fromkeys(key for key, _, _ in ROWS)
    reasons = {}
    if conversations is not None:
        count, hours = {}, {}
        for entry in conversations.values():
            count[entry["group"]] = count.get(entry["group"], 0) + 1
            hours[entry["group"]] = hours.get(entry["group"], 0.0) + entry["seconds"] / 3600
        rows["original_conversations"], rows["original_hours"] = per_column(count), per_column(hours)
    else:
        reasons["original"] = "no segments table given (eval naturalness --segments)"
    if dialogues is not None:
        count, context, answer = {}, {}, {}
        for d in dialogues:
            count[d["group"]] = count.get(d["group"], 0) + 1
            context[d["group"]] = context.get(d["group"], 0.0) + d["question_end_time"] / 3600
            answer[d["group"]] = answer.get(d["group"], 0.0) + d["answer_duration"] / 3600
        rows["selected_dialogues"] = per_column(count)
        rows["context_question_hours"], rows["answer_hours"] = per_column(context), per_column(answer)
        rows["total_selected_hours"] = [a + b for a, b in zip(rows["context_question_hours"], rows["answer_hours"])]
    else:
        reasons["selected"] = "no selection given (eval naturalness --selection)"
    return {"columns": [{"subset": s, "split": p} for s, p in columns] + [{"subset": "total", "split": ""}],
            "rows": rows, "reasons": reasons, "unreadable_conversations": skipped,
            "sources": {"segments": None if segments is None else str(segments),
                        "selection": None if selection is None else str(selection)}}


def format_corpus_table(table: dict) -> str:
    """Table I as plain text (counts as integers, hours with 2 decimals and 'h'; '-' where not given)."""
    header = [""] + [c["subset"] if c["subset"] == "total" else f"{c['subset']}/{c['split']}"
                     for c in table["columns"]]
    lines = [header]
    for key, label, kind in ROWS:
        values = table["rows"][key]
        cells = (["-"] * (len(header) - 1) if values is None else
                 [f"{v:.0f}" if kind == "count" else f"{v:.2f}h" for v in values])
        lines.append([label, *cells])
    widths = [max(len(r[i]) for r in lines) for i in range(len(header))]
    text = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in lines]
    text.insert(1, "-" * len(text[0]))
    skipped = table.get("unreadable_conversations") or []
    if skipped:
        text.append(f"{len(skipped)} unreadable conversation(s) left out: {', '.join(skipped[:5])}"
                    + (" ..." if len(skipped) > 5 else ""))
    return "\n".join(text)
