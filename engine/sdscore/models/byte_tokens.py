"""Token vocabulary of the compact reward model: UTF-8 bytes plus a few structural tokens.

No external tokenizer: text is its UTF-8 bytes (ids 0-255), so any language encodes and nothing
is out of vocabulary. A text token is a patch of `bytes_per_token` consecutive bytes (the last
patch of a turn padded with PAD), which keeps sequences short; the model embeds each slot of a
patch with its own table and sums them. Structural tokens are patches [id, PAD, ...]. Audio
positions carry AUDIO and get their content from the stacked log-mel frames instead.
"""

from __future__ import annotations

PAD = 256
AUDIO = 257
TURN_END = 258
CRITERION = {None: 259, "modality": 260, "colloquialness": 261}
ROLE = {"user": 262, "assistant": 263, "system": 264}
VOCAB_SIZE = 272  # 265 used; rounded up to a multiple of 16

#: segment ids: the criterion token, the context turns, the candidate (final) turn
SEGMENT_CRITERION, SEGMENT_CONTEXT, SEGMENT_FINAL = 0, 1, 2
N_SEGMENTS = 3


def criterion_id(criterion: str | None) -> int:
    """The id of an episode's criterion token; ValueError for an unknown criterion."""
    if criterion not in CRITERION:
        raise ValueError(f"unknown criterion {criterion!r}; expected one of {[c for c in CRITERION if c]} or None")
    return CRITERION[criterion]


def role_id(role: str) -> int:
    """The id of a turn's role token; ValueError for an unknown role."""
    if role not in ROLE:
        raise ValueError(f"unknown turn role {role!r}; expected one of {sorted(ROLE)}")
    return ROLE[role]
