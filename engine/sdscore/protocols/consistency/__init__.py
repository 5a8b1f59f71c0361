"""consistency (SpeakerSleuth): is a speaker's voice the same across their turns — embedding methods
and LALM judges, evaluated with the same metrics.

Names are imported from their modules on first use (lazy_exports), so reading the protocol's CLI
options loads no model code."""

from sdscore.lazy_exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    ".evaluate": ("SWEEP", "compare_runs", "evaluate_consistency", "evaluate_files", "format_table",
                  "option_summary", "run_eval", "sweep_thresholds"),
    ".choices": ("METHODS",),
    ".lalm_judge": ("LalmConsistencyJudge",),
    ".lalm_prompts": ("load_consistency_prompt",),
    ".scorer": ("RESULTS", "ConsistencyScorer", "LalmConsistencyScorer", "check_method", "flag_turns",
                "prepare_consistency", "score_consistency", "scoring_job"),
})
