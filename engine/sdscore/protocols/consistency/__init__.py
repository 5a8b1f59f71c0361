"""consistency (SpeakerSleuth): is a speaker's voice the same across their turns."""

from sdscore.protocols.consistency.protocol import (
    METHODS,
    RESULTS,
    SWEEP,
    ConsistencyScorer,
    check_method,
    evaluate_consistency,
    evaluate_files,
    flag_turns,
    prepare_consistency,
    run_eval,
    score_consistency,
    scoring_job,
    sweep_thresholds,
)

__all__ = [
    "METHODS",
    "RESULTS",
    "SWEEP",
    "ConsistencyScorer",
    "check_method",
    "evaluate_consistency",
    "evaluate_files",
    "flag_turns",
    "prepare_consistency",
    "run_eval",
    "score_consistency",
    "scoring_job",
    "sweep_thresholds",
]
