"""consistency (SpeakerSleuth): is a speaker's voice the same across their turns — embedding methods
and LALM judges, evaluated with the same metrics."""

from sdscore.protocols.consistency.evaluation import (
    compare_runs,
    evaluate_consistency,
    evaluate_files,
    format_table,
    option_summary,
    run_eval,
)
from sdscore.protocols.consistency.jobs import scoring_job
from sdscore.protocols.consistency.lalm_judge import LalmConsistencyJudge
from sdscore.protocols.consistency.lalm_prompts import load_consistency_prompt
from sdscore.protocols.consistency.protocol import (
    METHODS,
    RESULTS,
    SWEEP,
    ConsistencyScorer,
    check_method,
    flag_turns,
    prepare_consistency,
    score_consistency,
    sweep_thresholds,
)

__all__ = [
    "METHODS",
    "RESULTS",
    "SWEEP",
    "ConsistencyScorer",
    "LalmConsistencyJudge",
    "check_method",
    "compare_runs",
    "evaluate_consistency",
    "evaluate_files",
    "format_table",
    "load_consistency_prompt",
    "option_summary",
    "prepare_consistency",
    "run_eval",
    "score_consistency",
    "scoring_job",
    "sweep_thresholds",
    "flag_turns",
]
