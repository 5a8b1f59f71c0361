"""Prompt files: named sections of text with {slots}, bundled with a protocol or given by the user.

A file is a list of sections, each opened by a header line ``[name]``; a protocol names the sections
it needs and the slots each must hold. Slots are ``{name}`` for known names only; every other brace
is literal text, so a prompt may show JSON. Filling a template gives an ordered list of parts, text
and audio clips, ready for an AudioRequest.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from pathlib import Path

from sdscore.llm_judges.audio_request import AudioClip

_HEADER = re.compile(r"^\[([a-z_]+)\][ \t]*$", re.MULTILINE)
Part = str | AudioClip


def section_headers(names: Sequence[str] | None = None) -> re.Pattern:
    """The header-line pattern: any ``[name]``, or only the given names (other brackets are text)."""
    if names is None:
        return _HEADER
    return re.compile(r"^\[(" + "|".join(re.escape(n) for n in names) + r")\][ \t]*$", re.MULTILINE)


def parse_sections(text: str, source: str, names: Sequence[str] | None = None) -> dict[str, str]:
    """{section name: its text, stripped} of a prompt file's text (ValueError naming the source);
    `names`: only these headers open sections."""
    headers = list(section_headers(names).finditer(text))
    if not headers:
        raise ValueError(f"{source}: no [section] headers (a prompt file starts with e.g. [system])")
    if text[: headers[0].start()].strip():
        raise ValueError(f"{source}: text before the first [section] header")
    sections: dict[str, str] = {}
    for i, header in enumerate(headers):
        end = headers[i + 1].start() if i + 1 < len(headers) else len(text)
        name = header.group(1)
        if name in sections:
            raise ValueError(f"{source}: section [{name}] appears twice")
        sections[name] = text[header.end() : end].strip()
    return sections


def read_sections(path: str | os.PathLike) -> dict[str, str]:
    """The sections of a user's prompt file (ValueError when it cannot be read)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: cannot read prompt file ({error})") from error
    return parse_sections(text, str(path))


def bundled_sections(package: str, name: str) -> dict[str, str]:
    """The sections of a prompt file shipped in ``package``'s prompts/ folder."""
    text = (resources.files(package) / "prompts" / name).read_text(encoding="utf-8")
    return parse_sections(text, f"bundled {name}")


def _slot_pattern(names: Iterable[str]) -> re.Pattern[str]:
    return re.compile(r"\{(" + "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)) + r")\}")


def slots_in(template: str, names: Iterable[str]) -> set[str]:
    """The known slot names that a template uses."""
    return set(_slot_pattern(names).findall(template))


def check_sections(
    sections: Mapping[str, str], required: Mapping[str, Sequence[str]], source: str, optional: Iterable[str] = ()
) -> None:
    """ValueError unless every required section is there and holds its required slots, and no unknown
    section is (a typo would otherwise be ignored)."""
    missing = [name for name in required if name not in sections]
    if missing:
        raise ValueError(f"{source}: missing section(s) {', '.join(f'[{m}]' for m in missing)}")
    unknown = sorted(set(sections) - set(required) - set(optional))
    if unknown:
        known = ", ".join(f"[{n}]" for n in [*required, *optional])
        raise ValueError(f"{source}: unknown section(s) {', '.join(f'[{u}]' for u in unknown)} (known: {known})")
    for name, slots in required.items():
        lacking = [s for s in slots if f"{{{s}}}" not in sections[name]]
        if lacking:
            raise ValueError(f"{source}: section [{name}] lacks {', '.join(f'{{{s}}}' for s in lacking)}")


def fill(template: str, values: Mapping[str, str | AudioClip | Sequence[Part]]) -> list[Part]:
    """The template as parts: each {slot} of ``values`` replaced by its text, clip or list of parts."""
    if not values:
        return [template] if template else []
    parts: list[Part] = []
    position = 0
    for match in _slot_pattern(values).finditer(template):
        parts.append(template[position : match.start()])
        value = values[match.group(1)]
        if isinstance(value, (str, AudioClip)):
            parts.append(value)
        else:
            parts.extend(value)
        position = match.end()
    parts.append(template[position:])
    return [p for p in parts if not (isinstance(p, str) and p == "")]
