"""Seamless Interaction corpus folders → the timed segments `corpus select-dialogues` selects from.

The layout read (facebookresearch/seamless_interaction, README and fs.py, as of commit acc817c):

- ``<root>/<subset>/<split>/...``: subset (their "label") ``improvised`` or ``naturalistic``, split
  ``train``, ``dev`` or ``test``. Below the split folder any depth is walked, so both of the
  authors' layouts read:
  * what their download tools write (S3 ``gather_file_id_data_from_s3`` and extracted HF archives):
    ``<batch:04d>/<archive:04d>/<file_id>.wav`` beside ``<file_id>.json``, the JSON holding
    ``"id"``, ``"metadata:transcript"`` (a list), ``"metadata:vad"`` and optional
    ``"annotations:<type>"``;
  * the per-modality folders of their README tree / S3 paths: ``audio/<file_id>.wav`` and
    ``transcript/<file_id>.jsonl`` (or ``metadata/transcript/<file_id>.jsonl``), one transcript
    entry per line.
- ``file_id`` = ``V<vendor>_S<session>_I<interaction>_P<participant>`` (digits; the participant
  may end in a letter, e.g. ``P0059A``): one file per participant. The interaction
  ``V<vendor>_S<session>_I<interaction>`` groups its two participants; each has their own
  (speaker-bleed denoised) audio file, so every participant is their own channel.
- A transcript entry: ``{"transcript": text, "start": s, "end": s, "words": [{"word", "start",
  "end", "score"}]}``, times in seconds from the start of the participant's file (both
  participants' files of one interaction share that origin). Without ``"transcript"`` the text is
  the entry's words joined by spaces.

Out come segments: conversation_id = the interaction key, speaker = the participant id
("P0947", as the authors' "P####:" transcript tags), start/end/text per transcript entry,
audio_path = the participant's WAV (the whole file: channel None), and per conversation its
subset and split. Participants are ordered by id (the first is spk1). Not read: VAD, video,
movement/SMPL-H/keypoint features, the annotation files, and the corpus-wide interactions.csv,
participants.csv and relationships.csv (their columns are not published with the code).

A bad or missing file is a problem of its interaction, named with the file and the problem; the
other interactions are read.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from sdscore.errors import ManifestError
from sdscore.protocols.naturalness.dialogue_turns import Segment

SUBSETS = ("improvised", "naturalistic")
SPLITS = ("train", "dev", "test")
#: a participant file's name (stem): interaction key, then the participant
FILE_ID = re.compile(r"^(V\d+_S\d+_I\d+)_(P\d+[A-Za-z]*)$")
#: folders of the per-participant annotation JSONs (not transcripts; not read)
ANNOTATION_FOLDERS = frozenset({"1P-IS", "1P-R", "3P-IS", "3P-R", "3P-V"})
TRANSCRIPT_KEY = "metadata:transcript"


@dataclass(frozen=True)
class SeamlessCorpus:
    """The segments of a Seamless Interaction folder: per interaction read, its subset and split;
    problems as (interaction key, message) for every interaction that could not be read whole."""

    source: str
    segments: tuple[Segment, ...]
    problems: tuple[tuple[str, str], ...]
    conversations: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return len(self.segments)


@dataclass
class _Participant:
    wavs: list[Path] = field(default_factory=list)
    bundles: list[Path] = field(default_factory=list)  # <file_id>.json holding metadata:transcript
    transcripts: list[Path] = field(default_factory=list)  # transcript/<file_id>.jsonl


def is_seamless_folder(path: str | os.PathLike) -> bool:
    """Whether path is a folder holding an improvised/ or naturalistic/ folder."""
    root = Path(path)
    return root.is_dir() and any((root / subset).is_dir() for subset in SUBSETS)


def _choices(values: Iterable[str] | None, allowed: tuple[str, ...], name: str) -> tuple[str, ...]:
    if values is None:
        return allowed
    chosen = tuple(dict.fromkeys(values))
    bad = [v for v in chosen if v not in allowed]
    if bad or not chosen:
        raise ManifestError(f"unknown Seamless Interaction {name} {bad[0] if bad else '(none given)'!r}; "
                            f"expected {', '.join(allowed)}")
    return chosen


def read_seamless(root: str | os.PathLike, *, subsets: Iterable[str] | None = None,
                  splits: Iterable[str] | None = None) -> SeamlessCorpus:
    """Every interaction under root/<subset>/<split>/ (only the subsets and splits given, default
    all). ManifestError when root is not such a folder or a filter names an unknown value; a bad
    interaction becomes a problem naming its file, and the others are read."""
    base = Path(root)
    subsets, splits = _choices(subsets, SUBSETS, "subset"), _choices(splits, SPLITS, "split")
    if not base.is_dir():
        raise ManifestError(f"{base}: not a folder (a Seamless Interaction folder holds improvised/ and/or "
                            "naturalistic/, each with train/, dev/ or test/)")
    if not is_seamless_folder(base):
        raise ManifestError(f"{base}: no improvised/ or naturalistic/ folder; not a Seamless Interaction folder")
    segments: list[Segment] = []
    problems: list[tuple[str, str]] = []
    conversations: dict[str, dict[str, str]] = {}
    seen: dict[str, Path] = {}  # interaction → the split folder it was first found in
    for subset in subsets:
        for split in splits:
            folder = base / subset / split
            if not folder.is_dir():
                continue
            for interaction, participants in sorted(_index(folder).items()):
                if interaction in seen:
                    problems.append((interaction, f"{folder}: interaction {interaction} is also in {seen[interaction]}"))
                    continue
                seen[interaction] = folder
                read, found = _read_interaction(interaction, participants, folder)
                if found:
                    problems.extend((interaction, p) for p in found)
                else:
                    segments.extend(read)
                    conversations[interaction] = {"subset": subset, "split": split}
    return SeamlessCorpus(str(base), tuple(segments), tuple(problems), conversations)


def _index(folder: Path) -> dict[str, dict[str, _Participant]]:
    """interaction → participant → their files, from one walk of a split folder."""
    found: dict[str, dict[str, _Participant]] = {}
    for directory, subfolders, files in os.walk(folder):
        subfolders.sort()
        here = Path(directory)
        for name in sorted(files):
            stem, suffix = os.path.splitext(name)
            match = FILE_ID.match(stem)
            if not match:
                continue
            participant = found.setdefault(match[1], {}).setdefault(match[2], _Participant())
            if suffix == ".wav":
                participant.wavs.append(here / name)
            elif suffix == ".json" and here.name not in ANNOTATION_FOLDERS:
                participant.bundles.append(here / name)
            elif suffix == ".jsonl" and here.name == "transcript":
                participant.transcripts.append(here / name)
    return found


def _read_interaction(interaction: str, participants: dict[str, _Participant],
                      folder: Path) -> tuple[list[Segment], list[str]]:
    """The interaction's segments (participants in id order), or the problems that stop it."""
    if len(participants) != 2:
        files = sorted(str(p) for who in participants.values() for p in (*who.wavs, *who.bundles, *who.transcripts))
        return [], [f"{folder}: interaction {interaction} has {len(participants)} participant(s) "
                    f"({', '.join(sorted(participants))}: {', '.join(files)}); a dyad needs 2"]
    segments, problems = [], []
    for speaker in sorted(participants):
        files = participants[speaker]
        file_id = f"{interaction}_{speaker}"
        if len(files.wavs) != 1:
            problems.append(f"{folder}: {file_id}.wav " + ("is missing" if not files.wavs else
                            "is there more than once: " + ", ".join(map(str, files.wavs))))
        elif (problem := _not_a_file(files.wavs[0])) is not None:
            problems.append(problem)
        sources = [*files.bundles, *files.transcripts]
        if len(sources) != 1:
            problems.append(f"{folder}: {file_id}: " + (
                f"no transcript ({file_id}.json with '{TRANSCRIPT_KEY}', or transcript/{file_id}.jsonl)"
                if not sources else "more than one transcript: " + ", ".join(map(str, sources))))
            continue
        entries, problem = _transcript(sources[0], file_id)
        if problem:
            problems.append(problem)
            continue
        for index, entry in enumerate(entries):
            where = f"{sources[0]} transcript entry {index}"
            segment, problem = _segment(entry, interaction, speaker, files.wavs[0] if files.wavs else None, where)
            if problem:
                problems.append(problem)
            elif segment is not None:
                segments.append(segment)
    return segments, problems


def _not_a_file(path: Path) -> str | None:
    """The problem of a path that is not a regular file (a FIFO would block its reader), else None."""
    try:
        mode = os.stat(path).st_mode
    except OSError as error:
        return f"{path}: cannot be read ({error.strerror or error})"
    return None if stat.S_ISREG(mode) else f"{path}: not a regular file (a FIFO, socket or device is not read)"


def _json(text: str) -> tuple[object, str | None]:
    """(value, None) or (None, why the text is not JSON sdscore reads)."""
    try:
        return json.loads(text), None
    except json.JSONDecodeError as error:
        return None, f"not JSON ({error.msg} at line {error.lineno})"
    except ValueError as error:  # an integer of more digits than Python converts
        return None, f"not JSON sdscore reads ({str(error).split(';')[0]})"
    except RecursionError:
        return None, "not JSON sdscore reads (nested too deeply)"


def _transcript(path: Path, file_id: str) -> tuple[list, str | None]:
    """(entries, None) or ([], the problem naming the file)."""
    if (problem := _not_a_file(path)) is not None:
        return [], problem
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        return [], f"{path}: cannot be read ({error})"
    if path.suffix == ".jsonl":
        entries = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            entry, problem = _json(line)
            if problem:
                return [], f"{path} line {number}: {problem.replace(' at line 1)', ')')}"
            entries.append(entry)
        return entries, None
    bundle, problem = _json(text)
    if problem:
        return [], f"{path}: {problem}"
    if not isinstance(bundle, dict):
        return [], f"{path}: holds a {type(bundle).__name__}, not an object with '{TRANSCRIPT_KEY}'"
    if bundle.get("id") not in (None, file_id):
        return [], f"{path}: its id {bundle['id']!r} is not the file's name {file_id!r}"
    entries = bundle.get(TRANSCRIPT_KEY)
    if entries is None:
        return [], f"{path}: no '{TRANSCRIPT_KEY}' (this participant has no transcript)"
    if not isinstance(entries, list):
        return [], f"{path}: '{TRANSCRIPT_KEY}' is a {type(entries).__name__}, not a list of entries"
    return entries, None


def _segment(entry, interaction: str, speaker: str, wav: Path | None,
             where: str) -> tuple[Segment | None, str | None]:
    """One transcript entry as a Segment, or the problem naming it."""
    if not isinstance(entry, dict):
        return None, f"{where}: a {type(entry).__name__}, not an object with start, end and transcript"
    times = {}
    for name in ("start", "end"):
        value = entry.get(name)
        try:
            number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        except OverflowError:  # an integer past float's range
            number = None
        if number is None or not math.isfinite(number) or number < 0:
            shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:20] + "..."
            return None, f"{where}: {name} {shown} is not a non-negative number of seconds"
        times[name] = number
    if times["end"] < times["start"]:
        return None, f"{where}: end {times['end']:g} is before start {times['start']:g}"
    text = entry.get("transcript")
    if text is None:
        words = entry.get("words")
        if not isinstance(words, list) or not all(isinstance(w, dict) and isinstance(w.get("word"), str)
                                                  for w in words):
            return None, f"{where}: no 'transcript' text and no 'words' list of {{'word': ...}}"
        text = " ".join(w["word"].strip() for w in words if w["word"].strip())
    if not isinstance(text, str):
        return None, f"{where}: transcript {text!r} is not text"
    if wav is None:  # reported once by the caller
        return None, None
    return Segment(interaction, speaker, times["start"], times["end"], text.strip(), str(wav), None, where), None


__all__ = ["ANNOTATION_FOLDERS", "FILE_ID", "SPLITS", "SUBSETS", "SeamlessCorpus", "is_seamless_folder",
           "read_seamless"]
