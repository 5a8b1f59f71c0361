"""Metrics: pure functions on arrays and polars frames (no I/O), one module per concept.

- ``preference``  — reward-model pairwise accuracy, ESDR-Bench summary (SDiaReward)
- ``consistency`` — speaker-consistency detection / localization / discrimination (SpeakerSleuth)
- ``fusion``      — per-dimension judge labels → overall label (TRACE)
- ``agreement``   — judge–human agreement: accuracy, paired bootstrap, McNemar, κ, probes (TRACE)
- ``ratings``     — Elo, Bradley–Terry with bootstrap CIs, win rates, position/length bias (S2S-Arena)

Each is checked in tests against an independent reference (sklearn, scipy, statsmodels) or a
published table.
"""

from sdscore.metrics.agreement import (
    THREE_WAY_LABELS,
    accuracy,
    cohen_kappa,
    collapse_ties,
    confusion_matrix,
    correctness,
    flip_rate,
    mcnemar_p,
    paired_bootstrap_ci,
    paired_bootstrap_difference_ci,
    winner_on_bad,
    winner_slice_accuracy,
)
from sdscore.metrics.consistency import (
    SCENARIOS,
    balanced,
    consistency_summary,
    detection_accuracy,
    discrimination_accuracy,
    exact_match,
    localization_scores,
    localization_summary,
    ndcg_at_k,
)
from sdscore.metrics.fusion import FUSION_RULES, JUDGE_LABELS, fuse, fuse_many
from sdscore.metrics.preference import (
    margin_buckets,
    pairwise_correct,
    preference_accuracy,
    reward_summary,
)
from sdscore.metrics.ratings import (
    WINNERS,
    bootstrap_bradley_terry,
    bradley_terry,
    length_bias,
    online_elo,
    online_elo_by,
    pairwise_win_rate,
    position_bias,
)

__all__ = [
    "FUSION_RULES",
    "JUDGE_LABELS",
    "SCENARIOS",
    "THREE_WAY_LABELS",
    "WINNERS",
    "accuracy",
    "balanced",
    "bootstrap_bradley_terry",
    "bradley_terry",
    "cohen_kappa",
    "collapse_ties",
    "confusion_matrix",
    "consistency_summary",
    "correctness",
    "detection_accuracy",
    "discrimination_accuracy",
    "exact_match",
    "flip_rate",
    "fuse",
    "fuse_many",
    "length_bias",
    "localization_scores",
    "localization_summary",
    "margin_buckets",
    "mcnemar_p",
    "ndcg_at_k",
    "online_elo",
    "online_elo_by",
    "paired_bootstrap_ci",
    "paired_bootstrap_difference_ci",
    "pairwise_correct",
    "pairwise_win_rate",
    "position_bias",
    "preference_accuracy",
    "reward_summary",
    "winner_on_bad",
    "winner_slice_accuracy",
]
