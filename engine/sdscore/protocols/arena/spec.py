"""The arena protocol's manifest: one row per battle (S2S-Arena / Chatbot Arena)."""

from __future__ import annotations

from sdscore.corpus.schemas import BATTLES, WINNERS, make_spec

SPEC = make_spec(
    "arena",
    BATTLES,
    required=("battle_id", "model_a", "model_b", "winner"),
    id_column="battle_id",
    unique_key=("battle_id",),
    allowed_values={"winner": WINNERS},
    audio_columns=("audio_a_path", "audio_b_path", "question_path"),
)
