"""SPEARBench dialogue selection: question/answer dialogues cut from timed two-speaker conversations.

Input: a segments table (CSV, TSV, Parquet, JSON or JSONL) with one row per utterance:
conversation_id, speaker, start, end (seconds), text, audio_path and an optional channel (the
channel of a multi-channel file; absent or null: the file is that speaker's own channel).
Or a Seamless Interaction folder (seamless_reader.py): its interactions become the conversations,
each with its subset (improvised/naturalistic) and split (train/dev/test); a table may carry the same
in optional ``subset`` and ``split`` columns. ``subsets`` / ``splits`` keep only those conversations.
A conversation's ``relationship`` and ``conversation_prompt`` (the emotional-naturalness inputs) come
from optional columns of the same names, or from a conversations table (``conversations``).
Output: per valid dialogue a question clip, an answer clip and a two-channel dialogue file, and
metadata.csv in SPEARBench's columns, which `read_manifest` reads as protocol "naturalness".

Dialogues follow dialogue_turns.py: by default the authors' released rule (``turn_rule="released"``),
else the paper's turns (``"paper"``).

Clips, as the authors' prepare_data_from_seamless.py cuts them (sample bounds = round(seconds x
rate)): the question clip is stereo, one channel per speaker in dyad order (spk1 left, spk2
right), from the clip's start (the first context utterance) to the question's end — the answerer's
channel as recorded, so an answer that overlaps the question is heard in it (``mask_answer_overlap``
silences the answerer's channel from the answer's start instead); the answer clip is the
answerer's channel over the answer (the authors write it twice, as stereo; it is mono here); the
dialogue file holds channel 0 asker, channel 1 answerer from the clip's start to the answer's end.

metadata.csv as theirs: times relative to the question clip's start (context_end_time = the
question's start, question_end_time = its end; answer_start_time relative to the question's end),
speakers "spk1|spk2" in dyad order, transcript_question the context and question utterances and
transcript_answer the answer's, each utterance written "speaker: text" and joined by spaces (so the
asker is the last tag of transcript_question); item_id is their dialogue name; then sdscore's
dialogue_path, subset, split, relationship and conversation_prompt (null when the input does not say).
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import polars as pl
import soundfile as sf

from sdscore import audio
from sdscore.atomic_write import atomic_path, write_json
from sdscore.audio.checks import check_target_rate
from sdscore.corpus.audio_paths import resolve_path
from sdscore.corpus.read import collect_table
from sdscore.errors import AudioError, ManifestError, SdscoreError
from sdscore.output_paths import check_replaceable_folder, staged_folder
from sdscore.protocols.naturalness.channels import read_channels
from sdscore.protocols.naturalness.dialogue_turns import (
    RELEASED,
    TURN_RULES,
    Dialogue,
    Segment,
    Turn,
    TurnRule,
    find_dialogues,
    merge_turns,
    released_dialogues,
    select_conversation,
)
from sdscore.runtime.compute_budget import cores, thread_pool_size

REQUIRED_COLUMNS = ("conversation_id", "speaker", "start", "end", "text", "audio_path")
#: metadata.csv columns: SPEARBench's, then item_id and dialogue_path (sdscore's naturalness manifest)
METADATA_COLUMNS = (
    "audio_path", "answer_audio_path", "context_end_time", "question_end_time", "answer_duration",
    "speakers", "conversation_id", "transcript_question", "transcript_answer", "answer_start_time",
    "finish_reason", "item_id", "dialogue_path", "subset", "split", "relationship", "conversation_prompt",
)
#: optional segments-table columns naming each conversation's subset and split (as a Seamless folder's)
LABEL_COLUMNS = ("subset", "split")
#: what a conversations table (``conversations=``) may give per conversation_id
INFO_COLUMNS = ("relationship", "conversation_prompt")
#: per-conversation values a segments table may carry, written to every dialogue's metadata row
CONVERSATION_COLUMNS = LABEL_COLUMNS + INFO_COLUMNS
METADATA_FILE = "metadata.csv"
SUMMARY_FILE = "selection.json"
CLIP_FOLDERS = {"question": "audio/question", "answer": "audio/answer", "dialogue": "audio/dialogue"}
#: A segment may end this far past its audio's end (annotation rounding); the clip is zero-padded.
AUDIO_END_TOLERANCE_S = 0.1
#: characters a speaker id may not hold: metadata's speakers column is "spk1|spk2", and transcripts
#: tag each utterance "speaker: text"
SPEAKER_FORBIDDEN = ("|", ":")


@dataclass(frozen=True)
class SegmentTable:
    """A segments table as read: the rows that parsed, and (conversation_id, message) per bad row;
    conversations: conversation_id → its subset/split where the input names them."""

    source: str
    rows: int
    segments: tuple[Segment, ...]
    problems: tuple[tuple[str | None, str], ...]
    conversations: dict[str, dict[str, str]] = field(default_factory=dict)


def read_segments(path: str | os.PathLike) -> SegmentTable:
    """Read a segments table; relative audio paths resolve against its folder. A missing column or
    an unreadable file raises ManifestError; a bad row becomes a problem naming the row."""
    table, frame = collect_table(path, "segments table")
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise ManifestError(
            f"{table.source}: missing column(s) {', '.join(missing)}; a segments table needs "
            f"{', '.join(REQUIRED_COLUMNS)} (and optionally channel)"
        )
    paths = frame.select(resolve_path(pl.col("audio_path").cast(pl.String), table.base_dir))["audio_path"]
    conversations, label_problems = _conversation_labels(frame, table.source)
    channels = frame["channel"].to_list() if "channel" in frame.columns else [None] * frame.height
    labels = table.locate_rows(range(frame.height))  # one call: a JSONL locator reads its file per call
    segments, problems = [], []
    for row, path_value, channel, where in zip(frame.select(REQUIRED_COLUMNS).iter_rows(named=True), paths,
                                               channels, labels):
        label = f"{table.source} {where}"
        conversation, found = _text(row["conversation_id"]), []
        speaker = _text(row["speaker"])
        for name, value in (("conversation_id", conversation), ("speaker", speaker), ("audio_path", path_value)):
            if not value:
                found.append(f"{name} is missing")
        bad = [c for c in SPEAKER_FORBIDDEN if speaker and c in speaker]
        if bad:
            found.append(f"speaker {speaker!r} contains {bad[0]!r} (metadata.csv writes speakers 'spk1|spk2' and "
                         "transcripts 'speaker: text')")
        start, problem = _seconds(row["start"], "start")
        found += [problem] if problem else []
        end, problem = _seconds(row["end"], "end")
        found += [problem] if problem else []
        if start is not None and end is not None and end < start:
            found.append(f"end {end:g} is before start {start:g}")
        channel, problem = _channel(channel)
        found += [problem] if problem else []
        if found:
            problems.append((conversation or None, f"{label}: {'; '.join(found)}"))
        else:
            segments.append(Segment(conversation, speaker, start, end, _text(row["text"]) or "", path_value,
                                    channel, label))
    return SegmentTable(table.source, frame.height, tuple(segments), tuple(problems) + label_problems,
                        conversations)


def _conversation_labels(frame: pl.DataFrame, source: str) -> tuple[dict, tuple]:
    """conversation → {subset, split, ...} from the optional CONVERSATION_COLUMNS (first non-null
    value), and a problem per conversation whose rows disagree."""
    present = [c for c in CONVERSATION_COLUMNS if c in frame.columns]
    labels: dict[str, dict[str, str]] = {}
    problems = []
    if not present:
        return labels, ()
    ids = [_text(v) for v in frame["conversation_id"].to_list()]
    for column in present:
        for conversation, value in zip(ids, frame[column].to_list()):
            value = _text(value)
            if conversation is None or value is None:
                continue
            seen = labels.setdefault(conversation, {}).setdefault(column, value)
            if seen != value:
                problems.append((conversation, f"{source}: conversation {conversation!r} has {column} {seen!r} "
                                               f"and {value!r}; a conversation has one {column}"))
    return labels, tuple(dict.fromkeys(problems))


def read_conversations(path: str | os.PathLike) -> dict[str, dict[str, str]]:
    """A conversations table: conversation_id and any of INFO_COLUMNS (other columns are ignored), one
    row per conversation → {column: value} of its non-null cells. ManifestError naming the file for
    a missing column and the rows of a repeated conversation_id or a missing id."""
    table, frame = collect_table(path, "conversations table")
    given = [c for c in INFO_COLUMNS if c in frame.columns]
    if "conversation_id" not in frame.columns or not given:
        raise ManifestError(f"{table.source}: a conversations table needs conversation_id and one or more of "
                            f"{', '.join(INFO_COLUMNS)} (found: {', '.join(frame.columns) or 'no columns'})")
    labels = table.locate_rows(range(frame.height))
    info: dict[str, dict[str, str]] = {}
    first: dict[str, str] = {}
    for row, where in zip(frame.select("conversation_id", *given).iter_rows(named=True), labels):
        conversation = _text(row["conversation_id"])
        if conversation is None:
            raise ManifestError(f"{table.source} {where}: conversation_id is missing")
        if conversation in info:
            raise ManifestError(f"{table.source} {where}: conversation {conversation!r} is also in "
                                f"{first[conversation]}; one row per conversation")
        first[conversation] = where
        info[conversation] = {c: v for c in given if (v := _text(row[c])) is not None}
    return info


def with_conversations(table: SegmentTable, info: dict[str, dict[str, str]], source: str) -> SegmentTable:
    """The table with a conversations table's values added to its conversations; a conversation whose
    segments table says otherwise gets a problem (and is skipped). ManifestError when the table names
    none of the conversations read (its ids spelled otherwise: every dialogue would silently lack them)."""
    merged = {c: dict(v) for c, v in table.conversations.items()}
    problems = list(table.problems)
    known = {s.conversation_id for s in table.segments} | set(merged)
    if info and known and not known & set(info):
        raise ManifestError(f"{source}: none of its {len(info)} conversation_id values is a conversation of "
                            f"{table.source} (it has e.g. {sorted(info)[0]!r}; the corpus {sorted(known)[0]!r})")
    for conversation in known:
        for column, value in info.get(conversation, {}).items():
            seen = merged.setdefault(conversation, {}).setdefault(column, value)
            if seen != value:
                problems.append((conversation, f"{source}: conversation {conversation!r} has {column} {value!r} "
                                               f"where {table.source} has {seen!r}"))
    return SegmentTable(table.source, table.rows, table.segments, tuple(problems), merged)


def read_source(path: str | os.PathLike, *, subsets: Iterable[str] | None = None,
                splits: Iterable[str] | None = None) -> SegmentTable:
    """A segments table or a Seamless Interaction folder (seamless_reader.read_seamless), keeping only
    the conversations of the given subsets and splits (None: all). ManifestError when a filter is
    given for a table without that column."""
    from sdscore.protocols.naturalness.seamless_reader import is_seamless_folder, read_seamless

    if Path(path).is_dir():
        if not is_seamless_folder(path):
            raise ManifestError(f"{path}: a folder, but not a Seamless Interaction folder (improvised/ or "
                                "naturalistic/ inside); give a segments table file or such a folder")
        corpus = read_seamless(path, subsets=subsets, splits=splits)
        if (subsets is not None or splits is not None) and not corpus.conversations and not corpus.problems:
            _refuse_empty_filter(path, subsets, splits, _seamless_folders(Path(path)), "subset/split folders")
        return SegmentTable(corpus.source, corpus.rows, corpus.segments, corpus.problems, corpus.conversations)
    table = read_segments(path)
    wanted = {"subset": subsets, "split": splits}
    wanted = {k: set(v) for k, v in wanted.items() if v is not None}
    if not wanted:
        return table
    for column in wanted:
        if not any(column in info for info in table.conversations.values()):
            raise ManifestError(f"{table.source}: no {column} column (or only nulls) to filter by --{column} "
                                f"{', '.join(sorted(wanted[column]))}")

    def keep(conversation: str | None) -> bool:
        info = table.conversations.get(conversation, {})
        return all(info.get(column) in values for column, values in wanted.items())

    kept = {c: i for c, i in table.conversations.items() if keep(c)}
    problems = tuple(p for p in table.problems if keep(p[0]))
    if not kept and not problems:
        present = sorted({"/".join(str(info.get(c, "(none)")) for c in wanted)
                          for info in table.conversations.values()})
        _refuse_empty_filter(table.source, subsets, splits, present, f"{'/'.join(wanted)} values")
    return SegmentTable(table.source, table.rows, tuple(s for s in table.segments if keep(s.conversation_id)),
                        problems, kept)


def _seamless_folders(root: Path) -> list[str]:
    """The <subset>/<split> folders present under a Seamless Interaction folder ("(empty)": no file inside)."""
    from sdscore.protocols.naturalness.seamless_reader import SPLITS, SUBSETS

    def empty(folder: Path) -> bool:
        return not any(files for _, _, files in os.walk(folder))

    return [f"{subset}/{split}" + (" (empty)" if empty(root / subset / split) else "")
            for subset in SUBSETS for split in SPLITS if (root / subset / split).is_dir()]


def _refuse_empty_filter(source, subsets, splits, present: list[str], what: str) -> None:
    """ManifestError: the --subset/--split filters keep no conversation (nothing is written)."""
    asked = "; ".join(f"--{name} {', '.join(values)}" for name, values in (("subset", subsets), ("split", splits))
                      if values is not None)
    raise ManifestError(f"{source}: {asked} match no conversation; the {what} present are "
                        f"{', '.join(present) if present else '(none)'}")


def _text(value) -> str | None:
    """A cell as stripped text (None for null or blank)."""
    return None if value is None else str(value).strip() or None


def _seconds(value, name: str) -> tuple[float | None, str | None]:
    """(seconds, None) or (None, why the cell is not a non-negative finite number)."""
    if _text(value) is None:
        return None, f"{name} is missing"
    try:
        seconds = None if isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        seconds = None
    if seconds is None:
        return None, f"{name} {value!r} is not a number"
    if not math.isfinite(seconds) or seconds < 0:
        return None, f"{name} is {seconds}" if not math.isfinite(seconds) else f"{name} {seconds:g} is negative"
    return seconds, None


def _channel(value) -> tuple[int | None, str | None]:
    """(channel or None, None) or (None, why the cell is not a non-negative integer)."""
    if _text(value) is None:
        return None, None
    try:
        number = math.nan if isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number) or number < 0 or number != int(number):
        return None, f"unknown channel {value!r} (expected a channel index 0, 1, ...)"
    return int(number), None


@dataclass(frozen=True)
class SelectionPlan:
    """The dialogues of a segments table before any audio is read: per conversation its dialogues,
    its segments, and the problems of the conversations skipped."""

    dialogues: dict[str, list[Dialogue]]
    segments: dict[str | None, list[Segment]]
    skipped: dict[str | None, list[str]]


def plan_dialogues(table: SegmentTable, *, turn_rule: TurnRule = RELEASED, max_context_segments: int = 4,
                   min_answer_seconds: float = 1.0, backchannel_max: float = 0.5) -> SelectionPlan:
    """Every conversation's dialogues (dialogue_turns.select_conversation); a conversation with a bad
    row, a third speaker or speakers sharing a channel is skipped with its problems."""
    by_conversation: dict[str | None, list[Segment]] = {}
    skipped: dict[str | None, list[str]] = {}
    for conversation, message in table.problems:
        skipped.setdefault(conversation, []).append(message)
    for s in table.segments:
        by_conversation.setdefault(s.conversation_id, []).append(s)
    planned: dict[str, list[Dialogue]] = {}
    for conversation, segments in by_conversation.items():
        if conversation in skipped:
            continue
        try:
            _check_sources(segments)
            planned[conversation] = select_conversation(
                segments, turn_rule=turn_rule, max_context_segments=max_context_segments,
                min_answer_seconds=min_answer_seconds, backchannel_max=backchannel_max,
            )
        except ManifestError as error:
            skipped[conversation] = [str(error)]
    return SelectionPlan(planned, by_conversation, skipped)


def select_dialogues(
    segments_path: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    turn_rule: TurnRule = RELEASED,
    max_context_segments: int = 4,
    min_answer_seconds: float = 1.0,
    backchannel_max: float = 0.5,
    mask_answer_overlap: bool = False,
    sample_rate: int = 16000,
    overwrite: bool = False,
    errors: Literal["skip", "raise"] = "skip",
    workers: int | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    subsets: Iterable[str] | None = None,
    splits: Iterable[str] | None = None,
    conversations: str | os.PathLike | None = None,
) -> dict:
    """`sdscore corpus select-dialogues`: select, cut and export every valid dialogue; returns the summary.

    segments_path: a segments table or a Seamless Interaction folder (read_source); subsets / splits
    keep only those conversations (None: all); conversations: a table of per-conversation
    relationship / conversation_prompt (read_conversations) written beside each dialogue.

    A conversation with a bad row (or unreadable audio) is skipped with a warning and listed in the
    summary's ``skipped`` (errors="raise": its first problem is raised instead). The selection is
    built in a temp folder beside out_dir and renamed into place (output_paths.staged_folder): an
    existing non-empty out_dir is refused unless overwrite, and even then unless it is an earlier
    selection holding nothing sdscore did not write.
    Audio is read once per conversation, and only for conversations with dialogues.
    """
    settings = _check_settings(turn_rule, max_context_segments, min_answer_seconds, backchannel_max,
                               mask_answer_overlap, errors)
    sample_rate = check_target_rate(sample_rate)
    out = Path(out_dir)
    check_replaceable_folder(out, overwrite, "the output folder")
    subsets = None if subsets is None else tuple(subsets)
    splits = None if splits is None else tuple(splits)
    table = read_source(segments_path, subsets=subsets, splits=splits)
    if conversations is not None:
        table = with_conversations(table, read_conversations(conversations), str(conversations))
    plan = plan_dialogues(table, turn_rule=turn_rule, max_context_segments=max_context_segments,
                          min_answer_seconds=min_answer_seconds, backchannel_max=backchannel_max)
    planned, by_conversation, skipped = plan.dialogues, plan.segments, plan.skipped
    if errors == "raise" and skipped:
        raise ManifestError(next(iter(skipped.values()))[0])

    with staged_folder(out, overwrite=overwrite, command="sdscore corpus select-dialogues") as stage:
        summary = _export_selection(planned, by_conversation, skipped, table, settings, sample_rate, out, stage,
                                    errors, workers, progress, (subsets, splits))
    for entry in summary["skipped"]:
        warnings.warn(f"conversation {entry['conversation_id']!r} skipped: " + " | ".join(entry["problems"]),
                      stacklevel=2)
    return summary


def _export_selection(planned, by_conversation, skipped, table, settings, sample_rate, out: Path, stage: Path,
                      errors, workers, progress, filters) -> dict:
    """Cut and write every planned dialogue into `stage` (which becomes `out`); returns the summary."""
    todo = [(c, d) for c, d in planned.items() if d]

    def export(job):
        try:
            return _export_conversation(job[1], by_conversation[job[0]], stage, sample_rate,
                                        settings["mask_answer_overlap"]), None
        except SdscoreError as error:
            return [], error

    # default: the compute budget's cores(), at most 8 (each conversation is a few file reads and writes)
    threads = thread_pool_size(workers or min(8, cores()), items=len(todo))
    results = []
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for result in pool.map(export, todo):
            results.append(result)
            if progress is not None:
                progress("select dialogues", len(results), len(todo))
    rows = []
    for (conversation, _), (written, error) in zip(todo, results):
        if error is not None:
            if errors == "raise":
                raise error
            skipped[conversation] = [str(error)]
        else:
            labels = table.conversations.get(conversation, {})
            rows.extend({**row, **{c: labels.get(c) for c in CONVERSATION_COLUMNS}} for row in written)
    _write_metadata(stage / METADATA_FILE, rows)

    skipped_list = [{"conversation_id": c, "problems": p} for c, p in skipped.items()]
    summary = {
        "segments": table.source,
        "out_dir": str(out),
        "metadata": str(out / METADATA_FILE),
        "settings": {**settings, "sample_rate": sample_rate},
        "filters": {"subset": None if filters[0] is None else list(filters[0]),
                    "split": None if filters[1] is None else list(filters[1])},
        "conversation_info": {c: sum(1 for r in rows if r.get(c) is not None) for c in INFO_COLUMNS},
        "rows": table.rows,
        "conversations": len(set(by_conversation) | set(skipped)),
        "selected_conversations": len({r["conversation_id"] for r in rows}),
        "dialogues": len(rows),
        "skipped": skipped_list,
    }
    write_json(stage / SUMMARY_FILE, summary)
    return summary


def _check_settings(turn_rule, max_context_segments, min_answer_seconds, backchannel_max, mask_answer_overlap,
                    errors) -> dict:
    """The settings as a dict; ValueError naming the first one out of range."""
    if turn_rule not in TURN_RULES:
        raise ValueError(f"turn_rule must be one of {', '.join(TURN_RULES)}, got {turn_rule!r}")
    if not isinstance(max_context_segments, int) or isinstance(max_context_segments, bool) \
            or max_context_segments < 1:
        raise ValueError(f"max_context_segments must be an integer >= 1, got {max_context_segments!r}")
    named = {"min_answer_seconds": min_answer_seconds, "backchannel_max": backchannel_max}
    for name, value in named.items():
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be a non-negative number of seconds, got {value!r}")
    if not isinstance(mask_answer_overlap, bool):
        raise ValueError(f"mask_answer_overlap must be True or False, got {mask_answer_overlap!r}")
    if errors not in ("skip", "raise"):
        raise ValueError(f"errors must be 'skip' or 'raise', got {errors!r}")
    return {"turn_rule": turn_rule, "max_context_segments": int(max_context_segments),
            **{k: float(v) for k, v in named.items()}, "mask_answer_overlap": mask_answer_overlap}


def _check_sources(segments: list[Segment]) -> None:
    """Each speaker has one audio source (path, channel) and the speakers' sources differ."""
    first: dict[str, Segment] = {}
    for s in segments:
        seen = first.setdefault(s.speaker, s)
        if (s.audio_path, s.channel) != (seen.audio_path, seen.channel):
            raise ManifestError(
                f"{s.where()}: speaker {s.speaker!r} has audio {_source(s)} here but {_source(seen)} in "
                f"{seen.where()}; a speaker's segments must all be on one channel"
            )
    if len(first) == 2:
        a, b = first.values()
        if (a.audio_path, a.channel) == (b.audio_path, b.channel):
            raise ManifestError(
                f"{b.where()}: speakers {a.speaker!r} and {b.speaker!r} share the audio {_source(a)}; each "
                "speaker needs their own channel (a mono file or a channel index)"
            )


def _source(s: Segment) -> str:
    return repr(s.audio_path) + ("" if s.channel is None else f" channel {s.channel}")


def _export_conversation(dialogues: list[Dialogue], segments: list[Segment], out: Path, sr: int,
                         mask_answer_overlap: bool) -> list[dict]:
    """Load the conversation's two channels once, write every dialogue's clips, return metadata rows."""
    channels = _load_channels(segments, sr)
    rows = []
    for d in dialogues:
        spk1, spk2 = d.speakers
        s0, qe = _sample(d.start, sr), _sample(d.question.end, sr)
        a0, ae = _sample(d.answer.start, sr), _sample(d.answer_end, sr)
        question = np.stack([_span(channels[spk1], s0, qe), _span(channels[spk2], s0, qe)], axis=1)
        if mask_answer_overlap:
            question[max(0, a0 - s0):, d.speakers.index(d.answerer)] = 0.0
        answer = _span(channels[d.answerer], a0, ae)
        end = max(ae, qe)
        dialogue = np.stack([_span(channels[d.asker], s0, end), _span(channels[d.answerer], s0, end)], axis=1)
        name = _file_name(d.item_id)
        paths = {kind: f"{folder}/{name}.wav" for kind, folder in CLIP_FOLDERS.items()}
        for kind, samples in (("question", question), ("answer", answer), ("dialogue", dialogue)):
            _write_wav(out / paths[kind], samples, sr)
        rows.append({
            "audio_path": paths["question"], "answer_audio_path": paths["answer"],
            "context_end_time": (_sample(d.context_end, sr) - s0) / sr, "question_end_time": (qe - s0) / sr,
            "answer_duration": (ae - a0) / sr, "speakers": f"{spk1}|{spk2}",
            "conversation_id": d.conversation_id,
            "transcript_question": tagged_transcript((*d.context, *d.question.segments)),
            "transcript_answer": tagged_transcript(d.answer.segments), "answer_start_time": (a0 - qe) / sr,
            "finish_reason": "stop", "item_id": d.item_id, "dialogue_path": paths["dialogue"],
        })
    return rows


def tagged_transcript(segments) -> str:
    """Utterances as the authors' metadata writes them: "speaker: text", joined by spaces."""
    return " ".join(f"{s.speaker}: {s.text}" for s in segments)


def _load_channels(segments: list[Segment], sr: int) -> dict[str, np.ndarray]:
    """Each speaker's channel at sr: mono files in one load_many call, multi-channel files read once."""
    sources = {}
    for s in segments:
        sources.setdefault(s.speaker, s)
    mono = [s for s in sources.values() if s.channel is None]
    channels: dict[str, np.ndarray] = {}
    if mono:
        # one thread: this runs on the export pool, which already spreads conversations over the cores
        batch = audio.load_many([s.audio_path for s in mono], sample_rate=sr, num_threads=1, max_seconds=0.0)
        for s, wave, error in zip(mono, batch, batch.errors):
            if error is not None:
                raise AudioError(f"{_rows_of(segments, s.speaker)}: {error}")
            channels[s.speaker] = wave
    by_file: dict[str, list[Segment]] = {}
    for s in sources.values():
        if s.channel is not None:
            by_file.setdefault(s.audio_path, []).append(s)
    for path, users in by_file.items():
        try:
            waves = read_channels(path, [s.channel for s in users], sr)
        except AudioError as error:
            raise AudioError(f"{_rows_of(segments, users[0].speaker)}: {error}") from None
        channels.update({s.speaker: w for s, w in zip(users, waves)})
    for speaker, wave in channels.items():
        last = max((s for s in segments if s.speaker == speaker), key=lambda s: s.end)
        if last.end > len(wave) / sr + AUDIO_END_TOLERANCE_S:
            raise AudioError(f"{last.where()}: ends at {last.end:g} s, after the end of its audio "
                             f"{_source(last)} ({len(wave) / sr:g} s)")
    return channels


def _rows_of(segments: list[Segment], speaker: str) -> str:
    """'<first row> (and N more rows of speaker X)': where an audio problem is reported."""
    own = [s for s in segments if s.speaker == speaker]
    more = f" (and {len(own) - 1} more rows of speaker {speaker!r})" if len(own) > 1 else ""
    return own[0].where() + more


def _sample(seconds: float, sr: int) -> int:
    return round(seconds * sr)


def _span(wave: np.ndarray, start: int, end: int, length: int | None = None) -> np.ndarray:
    """wave[start:end] as float32, zero-padded past the wave's end (and to ``length`` samples)."""
    n = max(0, end - start) if length is None else length
    piece = np.zeros(n, np.float32)
    got = wave[start:max(start, min(end, len(wave)))]
    piece[: len(got)] = got
    return piece


def _file_name(item_id: str) -> str:
    """A file-system-safe name for an item id (a hash keeps altered ids apart)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", item_id)[:120].strip("._") or "item"
    if safe != item_id:
        safe += "-" + hashlib.sha1(item_id.encode()).hexdigest()[:8]
    return safe


def _write_wav(path: Path, samples: np.ndarray, sr: int) -> None:
    """16-bit PCM WAV, atomically; float samples map to round(x * 32768), so 16-bit input is kept exactly."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pcm = np.clip(np.round(np.asarray(samples, np.float64) * 32768), -32768, 32767).astype(np.int16)
    with atomic_path(path) as temp:
        sf.write(str(temp), pcm, sr, subtype="PCM_16", format="WAV")


def _write_metadata(path: Path, rows: list[dict]) -> None:
    """metadata.csv in METADATA_COLUMNS order, atomically (a header alone when there are no rows)."""
    schema = {c: pl.Float64 if c.endswith(("_time", "_duration")) else pl.String for c in METADATA_COLUMNS}
    frame = pl.DataFrame(rows, schema=schema) if rows else pl.DataFrame(schema=schema)
    with atomic_path(path) as temp:
        frame.write_csv(temp)


__all__ = ["TURN_RULES", "Dialogue", "Segment", "SegmentTable", "SelectionPlan", "Turn", "find_dialogues",
           "merge_turns", "plan_dialogues", "read_conversations", "read_segments", "read_source",
           "released_dialogues", "with_conversations",
           "select_conversation", "select_dialogues", "tagged_transcript"]
