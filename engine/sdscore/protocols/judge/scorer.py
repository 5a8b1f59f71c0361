"""The judge protocol's Scorer: one judge (rule baseline or LLM at an OpenAI-compatible endpoint)
and one blueprint builder, both set up once; each batch of item rows is judged and fused."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import polars as pl

from sdscore.llm_judges.client import base_url_from_env
from sdscore.protocols.judge.llm_judge import LLMJudge
from sdscore.protocols.judge.protocol import blueprint_paths, make_judge, score_judge
from sdscore.protocols.judge.settings import OPTIONS, LlmJudgeSettings, judge_settings
from sdscore.protocols.judge.spec import SPEC
from sdscore.runtime.scorer import ScoringJob


class JudgeScorer:
    """Settings: judge ("rule" | "openai") and that judge's settings class (judge/settings.py):
    RuleJudgeSettings (fusion, instruction_source, cache_dir — blueprints and replies, keyed by content —,
    pitch, max_audio_seconds), or LlmJudgeSettings (those, the endpoint, prompt, deadline, parallelism and
    prices of JudgeConfig, mode, labels, drop_groups). Keyword arguments only; checked (SettingsError)."""

    settings_class = OPTIONS

    def __init__(self, judge: str = "rule", **settings: Any):
        from sdscore.features.blueprint import BlueprintBuilder

        s = judge_settings(judge, **settings)
        self.fusion = s.fusion
        self.judge = make_judge(s)
        cache = None if s.cache_dir is None else Path(s.cache_dir) / "blueprints"
        try:
            self.blueprints = BlueprintBuilder(cache_dir=cache, max_audio_seconds=s.max_audio_seconds, pitch=s.pitch)
        except BaseException:
            self._close_judge()
            raise

    def __call__(self, rows: pl.DataFrame) -> pl.DataFrame:
        paths = blueprint_paths(rows, self.judge)
        blueprints = dict(zip(paths, self.blueprints.build(paths))) if paths else None
        return score_judge(rows, self.judge, self.fusion, blueprints)

    def _close_judge(self) -> None:
        if isinstance(self.judge, LLMJudge):
            self.judge.client.close()

    def close(self) -> None:
        self.blueprints.close()
        self._close_judge()


def scoring_job(**settings: Any) -> ScoringJob:
    """The ScoringJob of `sdscore score judge` (settings: judge and JudgeScorer's), checked up front
    (judge_settings: a keyword of the other judge, an unknown name, type or choice); an LLM judge is
    built once and closed, so a missing endpoint or model, or a bad prompt file, stops the run before any
    scoring. The endpoint goes into the run record (it is part of what produced the scores); cache_dir,
    concurrency and timeout_s are volatile (a resumed run may change them)."""
    settings = {k: v for k, v in settings.items() if v is not None}
    judge = settings.pop("judge", "rule")
    config = judge_settings(judge, **settings)
    if isinstance(config, LlmJudgeSettings):
        if config.base_url is None:
            settings["base_url"] = base_url_from_env()
        settings["drop_groups"] = config.drop_groups  # one spelling in the provenance: FEATURE_GROUPS' order
        make_judge(config).client.close()
    for name in ("prompt_file", "cache_dir"):
        if name in settings:
            settings[name] = os.path.abspath(settings[name])
    return ScoringJob(SPEC, JudgeScorer, {"judge": judge, **settings})
