"""The judge protocol's manifest: one row per instruction with two responses (TRACE / HCoT)."""

from __future__ import annotations

from sdscore.corpus.schemas import JUDGE_ITEMS, LABELS, make_spec

SPEC = make_spec(
    "judge",
    JUDGE_ITEMS,
    required=("item_id", "audio1_path", "audio2_path"),
    id_column="item_id",
    unique_key=("dataset", "item_id"),
    allowed_values={name: LABELS for name in ("content", "voice_quality", "paralinguistics", "overall")},
    audio_columns=("instruction_path", "audio1_path", "audio2_path"),
)
