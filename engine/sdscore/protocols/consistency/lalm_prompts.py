"""The consistency protocol's LALM-judge prompts: one file per question family, bundled or the user's.

Our own texts, written from SpeakerSleuth's task descriptions (§3, Appendix C and H), not the authors'
wording. A file is sections (sdscore.llm_judges.prompt_files): [system]; [user], the message, whose
{turns} / {options} / {reference} / {clip} slots take the rendered pieces; line templates [turn],
[missing_turn], [option], [reference], and, for the text-context condition, [context_turn] (an
interlocutor's turn as text) and [context_audio_turn] (the target's turn inside the dialogue).
Slots anywhere in [user]: {target_speaker}, {n_turns}, {masked_number}, {letters} ("A, B, or C"),
{ranking_example} ("A > B > C").
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from sdscore.llm_judges.audio_request import AudioClip, AudioRequest
from sdscore.llm_judges.prompt_files import Part, bundled_sections, check_sections, fill, read_sections

_TURN_SECTIONS = {"turn": ("number", "audio"), "reference": ("audio",)}
_CONTEXT_SECTIONS = {"context_turn": ("number", "speaker", "text"), "context_audio_turn": ("number", "speaker", "audio")}
_OPTION = {"option": ("letter", "audio")}
#: family → (required sections and their slots, optional sections)
FAMILIES: dict[str, tuple[dict[str, tuple[str, ...]], tuple[str, ...]]] = {
    "detection": ({"system": (), "user": ("turns",), **_TURN_SECTIONS}, tuple(_CONTEXT_SECTIONS)),
    "localization": ({"system": (), "user": ("turns",), **_TURN_SECTIONS}, tuple(_CONTEXT_SECTIONS)),
    "discrimination": ({"system": (), "user": ("turns", "options"), "turn": ("number", "audio"),
                        "missing_turn": ("number",), **_OPTION}, ("reference",)),
    "ranking": ({"system": (), "user": ("turns", "options"), "turn": ("number", "audio"),
                 "missing_turn": ("number",), **_OPTION}, ("reference",)),
    "per_turn": ({"system": (), "user": ("reference", "clip")}, ()),
    "per_turn_discrimination": ({"system": (), "user": ("reference", "options"), **_OPTION}, ()),
    "per_turn_ranking": ({"system": (), "user": ("reference", "options"), **_OPTION}, ()),
}


def family_of(task: str, per_turn: bool) -> str:
    """The prompt family of an LALM task (detection | localization | discrimination | ranking)."""
    if task in ("detection", "localization"):
        return "per_turn" if per_turn else task
    if task in ("discrimination", "ranking"):
        return f"per_turn_{task}" if per_turn else task
    raise ValueError(f"unknown LALM task {task!r}; expected detection, localization, discrimination or ranking")


def letters_text(letters: tuple[str, ...]) -> str:
    """"A, B, or C" (or "A or B")."""
    return " or ".join(letters) if len(letters) <= 2 else ", ".join(letters[:-1]) + f", or {letters[-1]}"


@dataclass(frozen=True)
class ConsistencyPrompt:
    """The sections of one family's prompt and where they came from."""

    family: str
    sections: dict[str, str]
    source: str

    @property
    def has_context(self) -> bool:
        return all(name in self.sections for name in _CONTEXT_SECTIONS)

    def _user(self, common: dict, **pieces) -> AudioRequest:
        return AudioRequest(self.sections["system"], tuple(fill(self.sections["user"], {**common, **pieces})))

    def _reference(self, reference: str | None) -> list[Part]:
        if reference is None or "reference" not in self.sections:
            return []
        return fill(self.sections["reference"], {"audio": AudioClip(reference)})

    def _options(self, options: list[str], letters: tuple[str, ...]) -> list[Part]:
        parts: list[Part] = []
        for letter, path in zip(letters, options):
            parts += [*fill(self.sections["option"], {"letter": letter, "audio": AudioClip(path)}), "\n"]
        return parts

    def turns_request(self, turns: list[str], reference: str | None, target: str,
                      context: list[tuple[str, str | None]] | None = None) -> tuple[AudioRequest, dict[int, int]]:
        """Detection / localization: every turn at once. context: the dialogue as (speaker, text or None
        for the target's next audio turn). Returns the request and shown turn number → turn index."""
        parts: list[Part] = []
        numbers: dict[int, int] = {}
        if context is None:
            for i, path in enumerate(turns):
                parts += [*fill(self.sections["turn"], {"number": str(i + 1), "audio": AudioClip(path)}), "\n"]
                numbers[i + 1] = i
        else:
            audio_turns = iter(enumerate(turns))
            for number, (speaker, text) in enumerate(context, start=1):
                if text is None:
                    i, path = next(audio_turns)
                    values = {"number": str(number), "speaker": speaker, "audio": AudioClip(path)}
                    parts += [*fill(self.sections["context_audio_turn"], values), "\n"]
                    numbers[number] = i
                else:
                    values = {"number": str(number), "speaker": speaker, "text": text}
                    parts += [*fill(self.sections["context_turn"], values), "\n"]
        common = {"target_speaker": target, "n_turns": str(len(turns))}
        return self._user(common, turns=parts, reference=self._reference(reference)), numbers

    def masked_request(self, turns: list[str], masked_turn: int, options: list[str], letters: tuple[str, ...],
                       reference: str | None, target: str) -> AudioRequest:
        """Discrimination / ranking: the context turns with the masked position, then the options."""
        shown: list[Part] = []
        for number in range(1, len(turns) + 2):
            if number - 1 == masked_turn:
                shown += [*fill(self.sections["missing_turn"], {"number": str(number)}), "\n"]
                continue
            path = turns[number - 1 if number - 1 < masked_turn else number - 2]
            shown += [*fill(self.sections["turn"], {"number": str(number), "audio": AudioClip(path)}), "\n"]
        common = {"target_speaker": target, "n_turns": str(len(turns) + 1), "masked_number": str(masked_turn + 1),
                  "letters": letters_text(letters), "ranking_example": " > ".join(letters)}
        return self._user(common, turns=shown, options=self._options(options, letters),
                          reference=self._reference(reference))

    def clip_request(self, reference: str, clip: str, target: str) -> AudioRequest:
        """Per turn: one clip against the reference."""
        return self._user({"target_speaker": target}, reference=AudioClip(reference), clip=AudioClip(clip))

    def options_request(self, reference: str, options: list[str], letters: tuple[str, ...], target: str) -> AudioRequest:
        """Per turn, discrimination / ranking: the options against the reference only."""
        common = {"target_speaker": target, "letters": letters_text(letters), "ranking_example": " > ".join(letters)}
        return self._user(common, reference=AudioClip(reference), options=self._options(options, letters))


def load_consistency_prompt(family: str, prompt_file: str | os.PathLike | None = None,
                            with_text_context: bool = False) -> ConsistencyPrompt:
    """The bundled prompt of a family, or the user's file; ValueError naming what the file lacks."""
    if family not in FAMILIES:
        raise ValueError(f"unknown prompt family {family!r}; expected one of {list(FAMILIES)}")
    required, optional = FAMILIES[family]
    if prompt_file is None:
        sections, source = bundled_sections("sdscore.protocols.consistency", f"{family}.txt"), f"bundled {family} prompt"
    else:
        sections, source = read_sections(prompt_file), str(prompt_file)
    check_sections(sections, required, source, optional)
    prompt = ConsistencyPrompt(family, sections, source)
    if with_text_context:
        if family not in ("detection", "localization"):
            raise ValueError(f"text context applies to detection and localization prompts, not {family}")
        if not prompt.has_context:
            raise ValueError(f"{source}: the text-context condition needs [context_turn] and [context_audio_turn]")
        check_sections({k: sections[k] for k in _CONTEXT_SECTIONS}, _CONTEXT_SECTIONS, source)
    return prompt
