"""The arena audio judge's prompt: a request (audio or text) and two spoken answers, bundled or the user's.

Our own text, written from S2S-Arena's automatic-evaluation setup (§5.4, Appendix D: the input audio
and two responses, "which is better", first or second), not the authors' wording. A file is sections
(sdscore.llm_judges.prompt_files): [system]; [user] with the slots {question}, {first} and {second};
[question_audio] ({audio}) and [question_text] ({text}), the two ways the request is shown.
The bundled pairwise.txt asks for First or Second, as the paper does; pairwise_ties.txt allows Tie.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources

from sdscore.llm_judges.audio_request import AudioClip, AudioRequest
from sdscore.llm_judges.prompt_files import (
    check_sections,
    fill,
    parse_sections,
    read_sections,
)

SECTIONS = {"system": (), "user": ("question", "first", "second"), "question_audio": ("audio",),
            "question_text": ("text",)}


@dataclass(frozen=True)
class ArenaJudgePrompt:
    """The sections of a pairwise prompt and where they came from."""

    sections: dict[str, str]
    source: str

    def request(self, first: str, second: str, question_path: str | None, question_text: str | None) -> AudioRequest:
        """The request showing `first` then `second` (audio paths) after the question: its audio when
        there is some, else its text (ValueError when there is neither)."""
        if question_path is not None:
            question = fill(self.sections["question_audio"], {"audio": AudioClip(question_path)})
        elif question_text is not None and question_text.strip():
            question = fill(self.sections["question_text"], {"text": question_text.strip()})
        else:
            raise ValueError("the battle has neither question_path nor question_text")
        parts = fill(self.sections["user"], {"question": question, "first": AudioClip(first),
                                             "second": AudioClip(second)})
        return AudioRequest(self.sections["system"], tuple(parts))


def load_arena_prompt(prompt_file: str | os.PathLike | None = None, allow_ties: bool = False) -> ArenaJudgePrompt:
    """The bundled prompt (with or without ties) or the user's file; ValueError naming what a file lacks."""
    if prompt_file is None:
        name = "pairwise_ties.txt" if allow_ties else "pairwise.txt"
        text = (resources.files("sdscore.protocols.arena") / "prompts" / name).read_text(encoding="utf-8")
        sections, source = parse_sections(text, f"bundled {name}"), f"bundled {name}"
    else:
        sections, source = read_sections(prompt_file), str(prompt_file)
    check_sections(sections, SECTIONS, source)
    return ArenaJudgePrompt(sections, source)
