"""reward (SDiaReward / ESDR-Bench): score preference pairs with a reward model, evaluate, train."""

from sdscore.protocols.reward.evaluation import MARGIN_EDGES, evaluate_files, evaluate_reward, run_eval
from sdscore.protocols.reward.scoring import (
    DEFAULT_SUBSET,
    POOLED_COLUMNS,
    RESULT_SCHEMA,
    RewardPairsScorer,
    score_pairs_frame,
    scoring_job,
)

__all__ = [
    "DEFAULT_SUBSET",
    "MARGIN_EDGES",
    "POOLED_COLUMNS",
    "RESULT_SCHEMA",
    "RewardPairsScorer",
    "evaluate_files",
    "evaluate_reward",
    "run_eval",
    "score_pairs_frame",
    "scoring_job",
]
