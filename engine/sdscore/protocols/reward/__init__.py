"""reward (SDiaReward / ESDR-Bench): score preference pairs with a reward model, evaluate, train.

Names are imported from their modules on first use (lazy_exports), so reading the protocol's CLI
options loads no model code."""

from sdscore.lazy_exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    ".evaluate": ("MARGIN_EDGES", "evaluate_files", "evaluate_reward", "run_eval"),
    ".results": ("DEFAULT_SUBSET", "POOLED_COLUMNS", "RESULT_SCHEMA"),
    ".scorer": ("RewardPairsScorer", "score_pairs_frame", "scoring_job"),
})
