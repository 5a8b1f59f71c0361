"""Kaldi data directories → naturalness items: one item per utterance.

Files (https://kaldi-asr.org/doc/data_prep.html): `wav.scp` (`<recording-id> <extended-filename>`),
and optionally `segments` (`<utterance-id> <recording-id> <start> <end>`, seconds; end -1 = to the
end of the file), `text` (`<utterance-id> <transcript>`) and `utt2spk` (`<utterance-id> <speaker>`).
Without `segments` each recording is one utterance. A wav.scp value that is a command pipe
(`sox ... - |`) is refused (that row's error, naming the line), never executed: sdscore only reads
files. Segments become `answer_audio_path_offset` / `answer_audio_path_duration` slice columns.

Bad lines are the errors of their rows, naming the line ("segments line 7: ..."); problems that make the directory
ambiguous (a recording or utterance listed twice in wav.scp / text / utt2spk, a text line for an
utterance that does not exist) are one ManifestError naming file and line.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import polars as pl

from sdscore.corpus.raw_table import PARSE_ERROR, RawTable, data_row_labels
from sdscore.corpus.slice_columns import duration_column, offset_column
from sdscore.errors import ManifestError

WAV_SCP = "wav.scp"
AUDIO_COLUMN = "answer_audio_path"


def is_kaldi_dir(path: str | os.PathLike) -> bool:
    """True for a folder holding a wav.scp (a Kaldi data directory)."""
    return (Path(path) / WAV_SCP).is_file()


def _lines(path: Path) -> list[tuple[int, list[str]]]:
    """(line number, [first field, rest of the line]) of each non-blank line."""
    out = []
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ManifestError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if line:
            out.append((number, line.split(maxsplit=1)))
    return out


def _table(path: Path, what: str) -> dict[str, tuple[int, str | None]]:
    """`<key> <value>` lines as {key: (line, value)}; a key listed twice is a ManifestError."""
    table: dict[str, tuple[int, str | None]] = {}
    for number, fields in _lines(path):
        key, value = fields[0], fields[1] if len(fields) > 1 else None
        if key in table:
            raise ManifestError(f"{path}: line {number}: {what} {key!r} is listed twice (first on line {table[key][0]})")
        table[key] = (number, value)
    return table


def _recording(scp: Path, recordings: dict, recording_id: str) -> tuple[str | None, str | None]:
    """(audio path, problem) of a recording id."""
    if recording_id not in recordings:
        return None, f"recording {recording_id!r} is not in {WAV_SCP}"
    number, value = recordings[recording_id]
    if value is None:
        return None, f"{WAV_SCP} line {number}: no file name after the recording id {recording_id!r}"
    if value.rstrip().endswith("|"):
        return None, (f"{WAV_SCP} line {number}: {recording_id!r} is a command pipe ({value!r}); sdscore does not "
                      "run commands: extract the audio to files and list those")
    return value.strip(), None


def _segment(fields: list[str]) -> tuple[str | None, float | None, float | None, str | None]:
    """(recording id, offset, duration, problem) of a segments line's fields after the utterance id."""
    parts = fields[1].split() if len(fields) > 1 else []
    if len(parts) != 3:
        return None, None, None, f"expected '<utterance-id> <recording-id> <start> <end>', found {len(parts) + 1} fields"
    recording_id, start_text, end_text = parts
    try:
        start, end = float(start_text), float(end_text)
    except ValueError:
        return recording_id, None, None, f"start {start_text!r} and end {end_text!r} must be numbers of seconds"
    if not math.isfinite(start) or start < 0:
        return recording_id, None, None, f"start {start_text} must be a non-negative number of seconds"
    if end == -1:
        return recording_id, start, None, None
    if not math.isfinite(end) or end <= start:
        return recording_id, None, None, f"end {end_text} must be after start {start_text} (or -1: the end of the file)"
    return recording_id, start, end - start, None


def read_kaldi_dir(path: str, source: str) -> RawTable:
    """Read a Kaldi data directory (or the wav.scp file in one) as naturalness items."""
    folder = Path(path)
    if folder.is_file():
        folder = folder.parent
    scp = folder / WAV_SCP
    if not scp.is_file():
        raise ManifestError(f"{source}: no {WAV_SCP} in the Kaldi data directory")
    recordings = _table(scp, "recording")
    rows: dict[str, list] = {name: [] for name in (
        "item_id", "conversation_id", AUDIO_COLUMN, offset_column(AUDIO_COLUMN), duration_column(AUDIO_COLUMN), PARSE_ERROR)}

    def add(item, recording_id, audio, offset, duration, problem):
        for name, value in zip(rows, (item, recording_id, audio, offset, duration, problem)):
            rows[name].append(value)

    segments_file = folder / "segments"
    if segments_file.is_file():
        for number, fields in _lines(segments_file):
            recording_id, offset, duration, problem = _segment(fields)
            audio, missing = (None, None) if recording_id is None else _recording(scp, recordings, recording_id)
            problem = problem or missing
            add(fields[0], recording_id, audio if problem is None else None, offset, duration,
                None if problem is None else f"segments line {number}: {problem}")
    else:
        for recording_id, (number, _value) in recordings.items():
            audio, problem = _recording(scp, recordings, recording_id)
            add(recording_id, recording_id, audio, None, None, problem)

    frame = pl.DataFrame(rows, schema={
        "item_id": pl.String, "conversation_id": pl.String, AUDIO_COLUMN: pl.String,
        offset_column(AUDIO_COLUMN): pl.Float64, duration_column(AUDIO_COLUMN): pl.Float64, PARSE_ERROR: pl.String})
    utterances = set(frame["item_id"].to_list())
    for name, column, what in (("text", "transcript_answer", "transcript"), ("utt2spk", "speaker", "speaker")):
        file = folder / name
        if not file.is_file():
            continue
        values = _table(file, "utterance")
        for key, (number, _value) in values.items():
            if key not in utterances:
                raise ManifestError(f"{file}: line {number}: utterance {key!r} is not in "
                                    f"{'segments' if segments_file.is_file() else WAV_SCP}")
        frame = frame.with_columns(pl.Series(column, [values.get(u, (0, None))[1] for u in frame["item_id"]], pl.String))
    frame = frame.select([c for c in frame.columns if c != PARSE_ERROR] + [PARSE_ERROR])
    # rows are numbered as data rows (a row's error names its line: the runtime's windows keep no locator)
    return RawTable(frame.lazy(), str(source), str(folder), data_row_labels, "naturalness", "Kaldi")
