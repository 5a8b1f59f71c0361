"""The reward protocol's manifest: one row per preference pair (SDiaReward / ESDR-Bench)."""

from __future__ import annotations

from sdscore.corpus.row_checks import RowCheck, turn_list_checks
from sdscore.corpus.schemas import CRITERIA, REWARD_PAIRS, make_spec


def reward_row_checks() -> list[RowCheck]:
    """The pairs' turn lists: not empty, known roles, each turn with text or audio."""
    return turn_list_checks("chosen") + turn_list_checks("rejected")


SPEC = make_spec(
    "reward",
    REWARD_PAIRS,
    required=("pair_id", "criterion", "chosen", "rejected"),
    id_column="pair_id",
    unique_key=("pair_id",),
    allowed_values={"criterion": CRITERIA},
    audio_columns=(),  # paths live inside the chosen/rejected turn structs
    row_checks=reward_row_checks,
)
