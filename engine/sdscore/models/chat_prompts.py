"""Chat messages built from episodes, the system prompt file and the chat template of a model directory.

Shared by the adapters that read a Hugging Face chat template (SDiaReward's Qwen2.5-Omni thinker,
TRL sequence classifiers). A reward model's scores depend on the exact text it was trained on, so
the system prompt is read verbatim from a file (no stripping, no newline translation) and inserted
the way SDiaReward's processor does: only when the conversation does not open with a system turn.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from sdscore.errors import ModelError
from sdscore.models.episodes import Episode

#: the file, inside a checkpoint directory, that holds its system prompt verbatim (UTF-8)
SYSTEM_PROMPT_FILE = "system_prompt.txt"


def episode_label(episode: Episode) -> str:
    """How errors name an episode: its id, or "?" for an anonymous one."""
    return f"episode {episode.id or '?'}"


def read_system_prompt(folder: str | os.PathLike, option: str | os.PathLike | None) -> str | None:
    """The system prompt text: the file `option` names, else FOLDER/system_prompt.txt, else None.

    Read as UTF-8 bytes, verbatim: leading/trailing newlines are part of the prompt. ModelError if
    `option` names a file that does not exist or does not decode.
    """
    path = Path(option) if option is not None else Path(folder) / SYSTEM_PROMPT_FILE
    if option is None and not path.is_file():
        return None
    if not path.is_file():
        raise ModelError(f"system_prompt={os.fspath(option)!r}: no such file (pass the path of a UTF-8 text file)")
    try:
        return path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ModelError(f"{path}: cannot read the system prompt as UTF-8 text: {error}") from error


def with_system_prompt(messages: list[dict], prompt: str | None, as_parts: bool) -> list[dict]:
    """`messages` with a system turn holding `prompt` put first, unless they already open with one.

    as_parts: content as [{"type": "text", "text": prompt}] (SDiaReward's form) instead of a string.
    """
    if prompt is None or (messages and messages[0]["role"] == "system"):
        return messages
    content = [{"type": "text", "text": prompt}] if as_parts else prompt
    return [{"role": "system", "content": content}, *messages]


def multimodal_messages(
    episode: Episode, audio: Sequence[np.ndarray | None], audio_first: bool = False
) -> tuple[list[dict], list[np.ndarray]]:
    """Qwen-Omni chat messages of an episode and its clips in the order their placeholders appear.

    Each turn's content is [{"type": "text", "text"}, {"type": "audio", "audio": "turn N"}] (text
    first, as in SDiaReward's README and inference example; audio_first swaps them); a part is left
    out when the turn lacks it, as SDiaReward's evaluator drops None-valued keys. audio[i] is turn i's
    float32 mono waveform or None. ValueError (naming episode and turn) for inconsistent audio.
    """
    if len(audio) != len(episode.turns):
        raise ValueError(f"{episode_label(episode)}: {len(audio)} audio entries for {len(episode.turns)} turns")
    messages, clips = [], []
    for n, (turn, wave) in enumerate(zip(episode.turns, audio)):
        if wave is None and turn.audio is not None:
            raise ValueError(f"{episode_label(episode)} turn {n}: the turn has audio but no waveform was given")
        parts = []
        if turn.text is not None:
            parts.append({"type": "text", "text": turn.text})
        if wave is not None:
            # a torch tensor (on the model's device) stays one: the scorer already made it float32
            clip = wave if hasattr(wave, "detach") else np.asarray(wave, dtype=np.float32)
            if clip.ndim != 1:
                raise ValueError(f"{episode_label(episode)} turn {n}: waveform must be 1-D mono, got shape {tuple(clip.shape)}")
            parts.insert(0 if audio_first else len(parts), {"type": "audio", "audio": f"turn {n}"})
            clips.append(clip)
        messages.append({"role": turn.role, "content": parts})
    return messages, clips


def text_messages(episode: Episode) -> list[dict]:
    """{"role", "content": text} per turn (a text-only model reads transcripts).

    ValueError naming the episode and turn when a turn has audio but no text.
    """
    messages = []
    for n, turn in enumerate(episode.turns):
        if turn.text is None:
            raise ValueError(
                f"{episode_label(episode)} turn {n}: no text (this model reads text only; give the turn a transcript)"
            )
        messages.append({"role": turn.role, "content": turn.text})
    return messages


def chat_template_in(folder: str | os.PathLike) -> str | None:
    """The chat template saved beside a processor: chat_template.jinja, else chat_template.json, else None."""
    folder = Path(folder)
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    packed = folder / "chat_template.json"
    if packed.is_file():
        try:
            template = json.loads(packed.read_text(encoding="utf-8")).get("chat_template")
        except (OSError, ValueError, AttributeError) as error:
            raise ModelError(f"{packed}: not a JSON object with a 'chat_template' string: {error}") from error
        if not isinstance(template, str):
            raise ModelError(f"{packed}: 'chat_template' must be a string, got {type(template).__name__}")
        return template
    return None
