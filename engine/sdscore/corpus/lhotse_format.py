"""Lhotse manifests (JSONL, optionally gzipped) → consistency instances, one per speaker.

Reads a CutSet (MonoCut / MultiCut lines), or a SupervisionSet with its RecordingSet beside it (Lhotse recipes
name them `<prefix>_supervisions_<part>.jsonl.gz` and `<prefix>_recordings_<part>.jsonl.gz`). Every
supervision with a speaker is one turn: its recording's file, sliced at the supervision (clipped
to its cut); a speaker's turns (or, grouped by recording, a speaker's turns in one recording), in
file order, become one detection instance (`turn_paths` with
`turn_paths_offset` / `turn_paths_duration`), scenario S1 with no altered turns — the corpus says all
are that speaker — unless the supervisions' `custom` give `scenario` and `altered` (true on the
altered turns). Only local files are read: command, URL and in-memory sources are refused (that
speaker's row error, naming the line), as are MixedCuts, recordings with transforms (speed or
volume perturbation, resampling) and cuts picking some channels of a multi-channel recording. Relative source paths are resolved against the manifest's folder.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl

from sdscore.corpus.raw_table import PARSE_ERROR, RawTable, data_row_labels
from sdscore.corpus.slice_columns import duration_column, offset_column
from sdscore.errors import ManifestError

AUDIO_COLUMN = "turn_paths"


def is_lhotse_row(row: Any) -> bool:
    """True for a line of a Lhotse CutSet, RecordingSet or SupervisionSet."""
    if not isinstance(row, dict):
        return False
    if row.get("type") in ("MonoCut", "MultiCut", "MixedCut", "PaddingCut", "DataCut"):
        return True
    if {"id", "sources", "sampling_rate", "num_samples"} <= row.keys():
        return True
    return {"id", "recording_id", "start", "duration"} <= row.keys() and "speaker" in row


def manifest_lines(path: str, source: str) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON) of each non-blank line of a .jsonl or .jsonl.gz file."""
    opener = gzip.open if path.lower().endswith(".gz") else open
    try:
        with opener(path, "rb") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    yield number, json.loads(line)
                except (json.JSONDecodeError, UnicodeDecodeError) as error:
                    raise ManifestError(f"{source}: line {number} is not valid JSON ({error})") from None
    except (OSError, EOFError) as error:  # gzip.BadGzipFile is an OSError
        raise ManifestError(f"{source}: cannot read the Lhotse manifest ({error})") from None


def first_row(path: str, source: str) -> Any:
    """The first JSON row of a manifest (None for an empty file)."""
    for _number, row in manifest_lines(path, source):
        return row
    return None


def _audio_file(recording: Any) -> tuple[str | None, str | None]:
    """(file path, problem) of a recording dict: one local file source holding all its channels."""
    if not isinstance(recording, dict):
        return None, "has no recording"
    sources = recording.get("sources") or []
    if len(sources) != 1:
        return None, f"recording {recording.get('id')!r} has {len(sources)} audio sources; sdscore reads one file per recording"
    kind, where = sources[0].get("type"), sources[0].get("source")
    if kind != "file":
        return None, (f"recording {recording.get('id')!r} is a {kind!r} source ({str(where)[:80]!r}); sdscore reads "
                      "local files only (no commands, URLs or in-memory audio)")
    if not isinstance(where, str) or not where:
        return None, f"recording {recording.get('id')!r} has no file path"
    if recording.get("transforms"):
        names = ", ".join(str(t.get("name") if isinstance(t, dict) else t) for t in recording["transforms"])
        return None, (f"recording {recording.get('id')!r} has audio transforms ({names}); sdscore reads the file "
                      "as stored, so it refuses rather than score different audio")
    return where, None


#: how supervisions become instances: every turn of a speaker in the file, or of a speaker in one recording
GROUPINGS = ("speaker", "recording")
#: RawTable.format_name of the tables read here
FORMAT_NAME = "Lhotse"


class _Turns:
    """Turns gathered per speaker (or per recording and speaker), in file order, with the problems
    found on their lines."""

    def __init__(self, group_by: str = "speaker") -> None:
        if group_by not in GROUPINGS:
            raise ValueError(f"unknown Lhotse grouping {group_by!r}; expected one of {', '.join(GROUPINGS)}")
        self.group_by = group_by
        self.by_speaker: dict[str, dict[str, list]] = {}  # instance id → its turns
        self.speakers: dict[str, str] = {}  # instance id → speaker
        self.unassigned: list[tuple[str, int, str]] = []  # (id, line, problem) of lines without a speaker
        self.seen: dict[str, int] = {}  # supervision id → its first line

    def speaker(self, name: str) -> dict[str, list]:
        return self.by_speaker.setdefault(name, {"paths": [], "offsets": [], "durations": [], "ids": [],
                                                  "lines": [], "problems": [], "scenarios": [], "altered": []})

    def add(self, line: int, supervision: dict, path: str | None, offset: float | None, duration: float | None,
            problem: str | None) -> None:
        speaker = supervision.get("speaker")
        key = str(supervision.get("id"))
        if key in self.seen and problem is None:
            path, offset, duration = None, None, None
            problem = f"supervision id {key!r} is listed twice (first on line {self.seen[key]})"
        self.seen.setdefault(key, line)
        if not isinstance(speaker, str) or not speaker:
            self.unassigned.append((str(supervision.get("id")), line, problem or "supervision has no speaker"))
            return
        instance = speaker
        if self.group_by == "recording":
            instance = f"{supervision.get('recording_id')}/{speaker}"
        self.speakers[instance] = speaker
        turns = self.speaker(instance)
        custom = supervision.get("custom") or {}
        for key, value in (("paths", path), ("offsets", offset), ("durations", duration), ("ids", supervision.get("id")),
                           ("lines", line), ("scenarios", custom.get("scenario")), ("altered", bool(custom.get("altered")))):
            turns[key].append(value)
        if problem is not None:
            turns["problems"].append(f"line {line}: {problem}")

    def table(self, source: str, base_dir: str) -> RawTable:
        rows: dict[str, list] = {name: [] for name in (
            "instance_id", "task", "speaker_id", "scenario", AUDIO_COLUMN, offset_column(AUDIO_COLUMN),
            duration_column(AUDIO_COLUMN), "true_turns", "turn_ids", PARSE_ERROR)}
        for instance, turns in self.by_speaker.items():
            problems = list(turns["problems"])
            scenarios = {s for s in turns["scenarios"] if s is not None}
            if len(scenarios) > 1:
                problems.append(f"the speaker's turns disagree on custom scenario ({', '.join(sorted(scenarios))})")
            altered = [i for i, flag in enumerate(turns["altered"]) if flag]
            scenario = scenarios.pop() if len(scenarios) == 1 else ("S2" if altered else "S1")
            values = (instance, "detection", self.speakers[instance], scenario, turns["paths"], turns["offsets"],
                      turns["durations"], altered, turns["ids"], "; ".join(problems) or None)
            for name, value in zip(rows, values):
                rows[name].append(value)
        for item, line, problem in self.unassigned:
            for name, value in zip(rows, (item, "detection", None, "S1", [], [], [], [], [item], f"line {line}: {problem}")):
                rows[name].append(value)
        frame = pl.DataFrame(rows, schema={
            "instance_id": pl.String, "task": pl.String, "speaker_id": pl.String, "scenario": pl.String,
            AUDIO_COLUMN: pl.List(pl.String), offset_column(AUDIO_COLUMN): pl.List(pl.Float64),
            duration_column(AUDIO_COLUMN): pl.List(pl.Float64), "true_turns": pl.List(pl.Int64),
            "turn_ids": pl.List(pl.String), PARSE_ERROR: pl.String})
        # each problem names its line: the runtime's windows number rows but keep no locator
        return RawTable(frame.lazy(), source, base_dir, data_row_labels, "consistency", FORMAT_NAME)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _cut_turns(turns: _Turns, line: int, cut: Any) -> None:
    """Add the turns of one CutSet line."""
    if not isinstance(cut, dict):
        turns.unassigned.append(("?", line, f"is {type(cut).__name__}, expected a cut object"))
        return
    kind = cut.get("type")
    supervisions = cut.get("supervisions") or []
    start, length = _number(cut.get("start")), _number(cut.get("duration"))
    path, problem = _audio_file(cut.get("recording"))
    if kind not in ("MonoCut", "MultiCut"):
        path, problem = None, f"a {kind} cut: sdscore reads MonoCuts and MultiCuts (one recording, one time range)"
    elif start is None or length is None or start < 0 or length <= 0:
        path, problem = None, f"cut start {cut.get('start')!r} / duration {cut.get('duration')!r} are not valid seconds"
    elif problem is None:
        channels = (cut.get("recording") or {}).get("channel_ids") or [0]
        picked = cut.get("channel", 0)
        picked = picked if isinstance(picked, list) else [picked]
        if sorted(picked) != sorted(channels):
            path, problem = None, (f"the cut reads channel(s) {picked} of a recording with channels {channels}; "
                                   "sdscore mixes all channels of a file")
    if not supervisions:
        turns.unassigned.append((str(cut.get("id")), line, problem or "cut has no supervisions (no speaker)"))
        return
    for supervision in supervisions:
        if not isinstance(supervision, dict):
            turns.unassigned.append((str(cut.get("id")), line, "a supervision is not an object"))
            continue
        offset = duration = None
        sup_problem = problem
        if sup_problem is None:
            s_start, s_length = _number(supervision.get("start")), _number(supervision.get("duration"))
            if s_start is None or s_length is None or s_length <= 0:
                sup_problem = f"supervision {supervision.get('id')!r} has no valid start/duration"
            else:
                lo, hi = max(s_start, 0.0), min(s_start + s_length, length)
                if hi <= lo:
                    sup_problem = f"supervision {supervision.get('id')!r} lies outside its cut"
                else:
                    offset, duration = start + lo, hi - lo
        turns.add(line, supervision, path if sup_problem is None else None, offset, duration, sup_problem)


def recordings_path_for(supervisions_path: str) -> str | None:
    """The RecordingSet beside a SupervisionSet file (`..._supervisions_...` → `..._recordings_...`)."""
    folder, name = os.path.split(supervisions_path)
    if "supervisions" not in name:
        return None
    candidate = os.path.join(folder, name.replace("supervisions", "recordings"))
    return candidate if os.path.isfile(candidate) else None


def read_lhotse_manifest(path: str, source: str, base_dir: str, group_by: str = "speaker") -> RawTable:
    """Read a Lhotse CutSet, or a SupervisionSet with its RecordingSet, as consistency instances:
    group_by "speaker", one per speaker id in the file (instance_id = the speaker), or "recording",
    one per speaker of each recording (instance_id = "<recording id>/<speaker>")."""
    first = first_row(path, source)
    turns = _Turns(group_by)
    if isinstance(first, dict) and "type" in first:
        for line, cut in manifest_lines(path, source):
            _cut_turns(turns, line, cut)
        return turns.table(source, base_dir)
    if isinstance(first, dict) and "sources" in first:
        raise ManifestError(f"{source}: a Lhotse RecordingSet has no speakers; read its SupervisionSet "
                            "(with the RecordingSet beside it) or a CutSet")
    recordings_file = recordings_path_for(path)
    if recordings_file is None:
        raise ManifestError(f"{source}: a Lhotse SupervisionSet needs its RecordingSet beside it "
                            f"(expected {Path(path).name.replace('supervisions', 'recordings')!r})")
    recordings: dict[str, dict] = {}
    for line, recording in manifest_lines(recordings_file, recordings_file):
        if not isinstance(recording, dict) or "id" not in recording:
            raise ManifestError(f"{recordings_file}: line {line} is not a Lhotse recording")
        if recording["id"] in recordings:
            raise ManifestError(f"{recordings_file}: line {line}: recording {recording['id']!r} is listed twice")
        recordings[recording["id"]] = recording
    for line, supervision in manifest_lines(path, source):
        if not isinstance(supervision, dict):
            turns.unassigned.append(("?", line, f"is {type(supervision).__name__}, expected a supervision object"))
            continue
        recording = recordings.get(supervision.get("recording_id"))
        if recording is None:
            turns.add(line, supervision, None, None, None,
                      f"recording {supervision.get('recording_id')!r} is not in {Path(recordings_file).name}")
            continue
        as_cut = {"type": "MonoCut", "start": supervision.get("start"), "duration": supervision.get("duration"),
                  "channel": supervision.get("channel", 0), "recording": recording,
                  "supervisions": [{**supervision, "start": 0.0}], "id": supervision.get("id")}
        _cut_turns(turns, line, as_cut)
    return turns.table(source, base_dir)
