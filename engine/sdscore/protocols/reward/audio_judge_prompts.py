"""Prompts of the zero-shot audio-LLM reward baseline: two dialogues in one request, one per criterion.

Our own texts, written from what SDiaReward's baseline prompts (its Figures 12-13) ask of a judge:
modality (does the dialogue sound like real people talking, with the final turn weighed most) and
colloquialness (spoken vs written style). A file is sections (sdscore.llm_judges.prompt_files):
[system]; [user], the message, whose {dialogues} slot takes both rendered dialogues; [dialogue]
({number}, {turns}); [turn], a turn with audio ({dialogue}, {number}, {role}, {audio}; {text} is its
transcript); [text_turn], a turn without audio ({dialogue}, {number}, {role}, {text}). [user] may
also use {criterion}. A user's file replaces the bundled prompt for every pair, whatever its criterion.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from sdscore.errors import JudgeError
from sdscore.llm_judges.audio_request import AudioClip, AudioRequest
from sdscore.llm_judges.prompt_files import (
    Part,
    bundled_sections,
    check_sections,
    fill,
    read_sections,
)

REQUIRED = {"system": (), "user": ("dialogues",), "dialogue": ("number", "turns"),
            "turn": ("dialogue", "number", "role", "audio")}
OPTIONAL = ("text_turn",)
BUNDLED = {"modality": "modality.txt", "colloquialness": "colloquialness.txt"}
NO_TRANSCRIPT = "(no transcript)"


@dataclass(frozen=True)
class PairPrompt:
    """The sections of one pair prompt and where they came from."""

    sections: dict[str, str]
    source: str

    def _turn(self, dialogue: int, number: int, turn: dict) -> list[Part]:
        role = turn.get("role") or "unknown"
        text, path = turn.get("text"), turn.get("audio_path")
        values = {"dialogue": str(dialogue), "number": str(number), "role": role}
        if path:
            return fill(self.sections["turn"], {**values, "audio": AudioClip(path), "text": text or NO_TRANSCRIPT})
        if not text:
            raise JudgeError(f"dialogue {dialogue}, turn {number} has neither audio nor text")
        if "text_turn" not in self.sections:
            raise JudgeError(f"dialogue {dialogue}, turn {number} has no audio and the prompt ({self.source}) "
                             f"has no [text_turn] section")
        return fill(self.sections["text_turn"], {**values, "text": text})

    def request(self, first: Sequence[dict], second: Sequence[dict], criterion: str) -> AudioRequest:
        """Both dialogues, `first` shown as Dialogue 1; JudgeError for an empty dialogue or an unusable turn."""
        dialogues: list[Part] = []
        for number, turns in ((1, first), (2, second)):
            if not turns:
                raise JudgeError(f"dialogue {number} has no turns")
            lines: list[Part] = []
            for k, turn in enumerate(turns, start=1):
                lines += [*self._turn(number, k, turn), "\n"]
            dialogues += [*fill(self.sections["dialogue"], {"number": str(number), "turns": lines}), "\n\n"]
        parts = fill(self.sections["user"], {"dialogues": dialogues, "criterion": criterion})
        return AudioRequest(self.sections["system"], tuple(parts))


def load_pair_prompt(criterion: str | None = None, prompt_file: str | os.PathLike | None = None) -> PairPrompt:
    """The bundled prompt of a criterion (modality | colloquialness), or the user's file (ValueError
    naming what it lacks)."""
    if prompt_file is None:
        if criterion not in BUNDLED:
            raise ValueError(f"no bundled pair prompt for criterion {criterion!r}; expected one of {list(BUNDLED)}")
        sections = bundled_sections("sdscore.protocols.reward", BUNDLED[criterion])
        source = f"bundled {criterion} pair prompt"
    else:
        sections, source = read_sections(prompt_file), os.fspath(prompt_file)
    check_sections(sections, REQUIRED, source, OPTIONAL)
    if "text_turn" in sections:
        check_sections({"text_turn": sections["text_turn"]}, {"text_turn": ("dialogue", "number", "role", "text")},
                       source)
    return PairPrompt(sections, source)
