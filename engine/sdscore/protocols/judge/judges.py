"""make_judge: the judge that a JudgeSettings (settings.py) describes — the rule baseline, or an LLM
judge at an OpenAI-compatible endpoint with its client and prompt."""

from __future__ import annotations

from sdscore.llm_judges.client import configured_client
from sdscore.protocols.judge.llm_judge import LLMJudge
from sdscore.protocols.judge.prompts import load_prompt
from sdscore.protocols.judge.rule_judge import RuleBaselineJudge
from sdscore.protocols.judge.settings import JudgeSettings, LlmJudgeSettings, RuleJudgeSettings


def make_judge(settings: JudgeSettings | None = None) -> RuleBaselineJudge | LLMJudge:
    """The judge of `settings` (judge/settings.py; None: the rule baseline's defaults): RuleJudgeSettings →
    the rule baseline; LlmJudgeSettings → an LLM judge at an OpenAI-compatible endpoint (base_url, else
    SDSCORE_JUDGE_BASE_URL / OPENAI_BASE_URL; replies cached under cache_dir/replies; max_audio_seconds
    caps the files an audio-mode judge sends). Build the settings with `judge_settings(judge, **keywords)`
    to check keywords, or construct the class. The Scorer-level settings (fusion, pitch) are read by
    JudgeScorer, not here."""
    if settings is None:
        settings = RuleJudgeSettings()
    if isinstance(settings, LlmJudgeSettings):
        client = configured_client(settings)
        try:
            prompt = load_prompt(settings.mode, None if settings.prompt_file is None else str(settings.prompt_file),
                                 settings.labels)
            return LLMJudge(client, settings.mode, prompt, settings.instruction_source, name=f"llm-{settings.mode}",
                            max_audio_seconds=settings.max_audio_seconds, labels=settings.labels,
                            drop_groups=settings.drop_groups)
        except Exception:
            client.close()
            raise
    if isinstance(settings, RuleJudgeSettings):
        return RuleBaselineJudge(instruction_source=settings.instruction_source)
    raise TypeError(f"make_judge takes RuleJudgeSettings or LlmJudgeSettings (judge_settings(judge, **keywords) "
                    f"builds one), got {type(settings).__name__}")
