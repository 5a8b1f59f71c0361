"""The judge protocol (TRACE): blueprint/transcript/audio LLM judges over an OpenAI-compatible
endpoint, a rule baseline, deterministic fusion, and agreement statistics with human labels."""

from sdscore.metrics.fusion import FUSION_RULES, JUDGE_LABELS, fuse, fuse_many
from sdscore.protocols.judge.blueprint_view import FEATURE_GROUPS
from sdscore.protocols.judge.interface import DIMENSIONS, Judge, JudgeItem, Verdict
from sdscore.protocols.judge.llm_judge import LLMJudge
from sdscore.protocols.judge.overall_replies import (
    LABEL_MODES,
    ORIGINAL_LABELS,
    parse_overall_reply,
)
from sdscore.protocols.judge.probes import (
    ablation_flip_rates,
    attribution,
    content_counterfactual,
)
from sdscore.protocols.judge.prompts import PROMPT_MODES, PromptTemplate, load_prompt
from sdscore.protocols.judge.protocol import (
    evaluate_files,
    evaluate_judges,
    make_judge,
    results_settings,
    run_eval,
    score_judge,
)
from sdscore.protocols.judge.replies import parse_reply
from sdscore.protocols.judge.demo import demo_judge
from sdscore.protocols.judge.rule_judge import RuleBaselineJudge, RuleThresholds
from sdscore.protocols.judge.scorer import JudgeScorer, scoring_job

__all__ = [
    "DIMENSIONS",
    "FEATURE_GROUPS",
    "FUSION_RULES",
    "JUDGE_LABELS",
    "LABEL_MODES",
    "ORIGINAL_LABELS",
    "PROMPT_MODES",
    "Judge",
    "JudgeItem",
    "JudgeScorer",
    "LLMJudge",
    "PromptTemplate",
    "RuleBaselineJudge",
    "RuleThresholds",
    "Verdict",
    "ablation_flip_rates",
    "attribution",
    "content_counterfactual",
    "demo_judge",
    "evaluate_files",
    "evaluate_judges",
    "fuse",
    "fuse_many",
    "load_prompt",
    "make_judge",
    "parse_overall_reply",
    "parse_reply",
    "results_settings",
    "run_eval",
    "score_judge",
    "scoring_job",
]
