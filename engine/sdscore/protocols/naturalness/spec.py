"""The naturalness protocol's manifest: one row per question/answer item (SPEARBench)."""

from __future__ import annotations

from sdscore.corpus.schemas import NATURALNESS_ITEMS, make_spec
from sdscore.protocols.naturalness.results import ASR_ENGINES

SPEC = make_spec(
    "naturalness",
    NATURALNESS_ITEMS,
    required=("item_id", "answer_audio_path"),
    id_column="item_id",
    unique_key=("item_id",),
    allowed_values={},
    audio_columns=("audio_path", "answer_audio_path", "dialogue_path"),
    # the report's WER % / CER % (results hold fractions)
    percent_columns=tuple(f"{metric}_{engine}" for engine in ASR_ENGINES
                          for metric in ("wer", "cer", "wer_clean", "cer_clean")),
)
