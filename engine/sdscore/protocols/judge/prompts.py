"""Judge prompts: a system text and a user template per mode, bundled or loaded from a file.

Modes: ``blueprint`` (TRACE: each response as its acoustic blueprint JSON), ``transcript``
(transcripts only) and ``audio`` (the recordings themselves, as input_audio parts of base64 WAV, for
audio-capable endpoints). Templates name their slots in braces; every other brace is literal
text, so a prompt that shows a JSON schema needs no escaping. Slots: {instruction},
{response_1}, {response_2} (text modes) and {instruction_audio}, {audio_1}, {audio_2} (audio
mode); the authors' names are accepted as aliases ({user_prompt}, {model_a_transcript},
{audio_a.json}, {instruction.wav}, {audio_a.wav}, ...), so their prompts load verbatim.

A prompt file holds a ``[system]`` section and a ``[user]`` section, each header on a line of its
own; without ``[system]`` the bundled system text is used, and a file with no headers at all is
the user template.

Label modes: ``typed`` (the bundled ``system.txt`` and ``<mode>.txt``: labels per dimension, typed
ties) and ``original`` (``original-system.txt`` and ``original-<mode>.txt``: one overall label 1 / 2 /
tie, TRACE's original-label setting of Tab. 1; our own text written from the paper's description).
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from sdscore.llm_judges.prompt_files import parse_sections, section_headers
from sdscore.protocols.judge.overall_replies import LABEL_MODES

PROMPT_MODES = ("blueprint", "transcript", "audio")
#: slots a template of each mode must contain
REQUIRED_SLOTS = {
    "blueprint": ("response_1", "response_2"),
    "transcript": ("response_1", "response_2"),
    "audio": ("audio_1", "audio_2"),
}
#: slots each mode fills (the rest are refused)
MODE_SLOTS = {
    "blueprint": ("instruction", "response_1", "response_2"),
    "transcript": ("instruction", "response_1", "response_2"),
    "audio": ("instruction", "instruction_audio", "audio_1", "audio_2"),
}
SLOT_ALIASES = {
    "user_prompt": "instruction",
    "model_a_transcript": "response_1",
    "model_b_transcript": "response_2",
    "audio_a.json": "response_1",
    "audio_b.json": "response_2",
    "instruction.wav": "instruction_audio",
    "audio_a.wav": "audio_1",
    "audio_b.wav": "audio_2",
}
_ALL_SLOTS = sorted({s for slots in MODE_SLOTS.values() for s in slots} | set(SLOT_ALIASES), key=len, reverse=True)
_SLOT = re.compile(r"\{(" + "|".join(re.escape(s) for s in _ALL_SLOTS) + r")\}")
_SECTION_NAMES = ("system", "user")
_SECTION = section_headers(_SECTION_NAMES)
#: what an empty slot says (an item without instruction audio, say)
NOT_AVAILABLE = "(not available)"


def _bundled(name: str) -> str:
    return (resources.files("sdscore.protocols.judge") / "prompts" / name).read_text(encoding="utf-8")


def _sections(text: str, source: str) -> tuple[str | None, str]:
    """(system or None, user) from a prompt file's text; without headers the whole text is the user part."""
    if not _SECTION.search(text):
        return None, text.strip()
    parts = parse_sections(text, source, _SECTION_NAMES)
    if "user" not in parts:
        raise ValueError(f"{source}: no [user] section")
    return parts.get("system"), parts["user"]


@dataclass(frozen=True)
class PromptTemplate:
    """The system text and user template of one mode, with where they came from."""

    mode: str
    system: str
    user: str
    source: str
    labels: str = "typed"  # the reply the prompt asks for: "typed" per dimension or one "original" label

    def __post_init__(self) -> None:
        if self.labels not in LABEL_MODES:
            raise ValueError(f"unknown label mode {self.labels!r}; expected one of {list(LABEL_MODES)}")
        slots = {SLOT_ALIASES.get(s, s) for s in _SLOT.findall(self.user)}
        missing = [s for s in REQUIRED_SLOTS[self.mode] if s not in slots]
        if missing:
            raise ValueError(
                f"{self.source}: the {self.mode} user template lacks " + ", ".join(f"{{{s}}}" for s in missing)
            )
        refused = sorted(slots - set(MODE_SLOTS[self.mode]))
        if refused:
            raise ValueError(
                f"{self.source}: {', '.join(f'{{{s}}}' for s in refused)} cannot be filled in {self.mode} mode"
            )

    def messages(self, fields: Mapping[str, str | bytes | None]) -> list[dict[str, Any]]:
        """Chat messages with slots filled: text as text, bytes as WAV audio parts, None as NOT_AVAILABLE."""
        pieces: list[str | bytes] = []
        position = 0
        for match in _SLOT.finditer(self.user):
            pieces.append(self.user[position : match.start()])
            value = fields.get(SLOT_ALIASES.get(match.group(1), match.group(1)))
            pieces.append(NOT_AVAILABLE if value is None else value)
            position = match.end()
        pieces.append(self.user[position:])
        system = {"role": "system", "content": self.system}
        if not any(isinstance(piece, bytes) for piece in pieces):
            return [system, {"role": "user", "content": "".join(pieces)}]  # type: ignore[arg-type]
        return [system, {"role": "user", "content": _parts(pieces)}]


def _parts(pieces: list[str | bytes]) -> list[dict[str, Any]]:
    """OpenAI content parts: runs of text joined, each audio clip an input_audio part."""
    parts: list[dict[str, Any]] = []
    text = ""
    for piece in pieces:
        if isinstance(piece, str):
            text += piece
            continue
        if text.strip():
            parts.append({"type": "text", "text": text.strip()})
        text = ""
        data = base64.b64encode(piece).decode("ascii")
        parts.append({"type": "input_audio", "input_audio": {"data": data, "format": "wav"}})
    if text.strip():
        parts.append({"type": "text", "text": text.strip()})
    return parts


def load_prompt(mode: str = "blueprint", prompt_file: str | os.PathLike | None = None,
                labels: str = "typed") -> PromptTemplate:
    """The bundled prompt of mode and label mode, or the one in prompt_file (see the module doc)."""
    if mode not in PROMPT_MODES:
        raise ValueError(f"unknown prompt mode {mode!r}; expected one of {list(PROMPT_MODES)}")
    if labels not in LABEL_MODES:
        raise ValueError(f"unknown label mode {labels!r}; expected one of {list(LABEL_MODES)}")
    prefix = "" if labels == "typed" else f"{labels}-"
    bundled_system = _bundled(f"{prefix}system.txt").strip()
    if prompt_file is None:
        name = f"bundled {mode} prompt" if labels == "typed" else f"bundled {mode} prompt ({labels} labels)"
        return PromptTemplate(mode, bundled_system, _bundled(f"{prefix}{mode}.txt").strip(), name, labels)
    path = Path(prompt_file)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: cannot read prompt file ({error})") from error
    system, user = _sections(text, str(path))
    return PromptTemplate(mode, bundled_system if system is None else system, user, str(path), labels)
