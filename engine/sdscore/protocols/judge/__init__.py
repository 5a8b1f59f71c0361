"""The judge protocol (TRACE): blueprint/transcript/audio LLM judges over an OpenAI-compatible
endpoint, a rule baseline, deterministic fusion, and agreement statistics with human labels.

Names are imported from their modules on first use (lazy_exports), so reading the protocol's CLI
options loads no model code."""

from sdscore.lazy_exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "sdscore.metrics.fusion": ("FUSION_RULES", "JUDGE_LABELS", "fuse", "fuse_many"),
    ".blueprint_view": ("FEATURE_GROUPS",),
    ".interface": ("DIMENSIONS", "Judge", "JudgeItem", "Verdict"),
    ".llm_judge": ("LLMJudge",),
    ".overall_replies": ("LABEL_MODES", "ORIGINAL_LABELS", "parse_overall_reply"),
    ".probes": ("ablation_flip_rates", "attribution", "content_counterfactual"),
    ".prompts": ("PROMPT_MODES", "PromptTemplate", "load_prompt"),
    ".evaluate": ("evaluate_files", "evaluate_judges", "run_eval"),
    ".judges": ("make_judge",),
    ".replies": ("parse_reply",),
    ".demo": ("demo_judge",),
    ".rule_judge": ("RuleBaselineJudge", "RuleThresholds"),
    ".results": ("results_settings",),
    ".scorer": ("JudgeScorer", "score_judge", "scoring_job"),
    ".settings": ("JudgeSettings", "LlmJudgeSettings", "RuleJudgeSettings", "judge_settings"),
})
