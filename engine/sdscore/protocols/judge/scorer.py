"""The judge protocol's Scorer: one judge (rule baseline or LLM at an OpenAI-compatible endpoint)
and one blueprint builder, both set up once; each batch of item rows is judged and fused."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from sdscore.audio.checks import DEFAULT_MAX_AUDIO_SECONDS
from sdscore.llm_judges.client import DEFAULT_TIMEOUT_S, Price, base_url_from_env
from sdscore.protocols.judge.blueprint_view import check_groups
from sdscore.protocols.judge.choices import PITCH_TRACKERS
from sdscore.protocols.judge.llm_judge import LLMJudge
from sdscore.protocols.judge.protocol import (
    blueprint_paths,
    check_fusion,
    make_judge,
    score_judge,
)
from sdscore.protocols.judge.spec import SPEC
from sdscore.runtime.scorer import ScoringJob


def check_pitch(pitch: str) -> None:
    if pitch not in PITCH_TRACKERS:
        raise ValueError(f"unknown pitch tracker {pitch!r}; expected one of {list(PITCH_TRACKERS)}")


class JudgeScorer:
    """Settings: judge (rule | openai), fusion, base_url, model, mode, prompt_file, instruction_source,
    cache_dir (blueprints and replies, keyed by content), concurrency, prices, max_audio_seconds (longer
    audio files fail their rows; 0: no cap), timeout_s (an LLM judge's deadline per HTTP attempt, from
    sending the request to the whole reply), labels ("typed" C/VQ/P, or one "original" overall label),
    drop_groups (blueprint feature groups left out of the prompt: TRACE's feature ablation), pitch (the
    blueprints' pitch tracker: "yin" or "aubio", see BlueprintBuilder)."""

    def __init__(self, judge: str = "rule", fusion: str = "speakbench", *, base_url: str | None = None,
                 model: str | None = None, mode: str = "blueprint", prompt_file: str | os.PathLike | None = None,
                 instruction_source: str = "text", cache_dir: str | os.PathLike | None = None,
                 concurrency: int = 8, prices: Mapping[str, Price] | None = None,
                 max_audio_seconds: float = DEFAULT_MAX_AUDIO_SECONDS, timeout_s: float = DEFAULT_TIMEOUT_S,
                 labels: str = "typed", drop_groups: Sequence[str] = (), pitch: str = "yin"):
        from sdscore.features.blueprint import BlueprintBuilder

        check_fusion(fusion)
        self.fusion = fusion
        self.judge = make_judge(
            judge, base_url=base_url, model=model, mode=mode, prompt_file=prompt_file, cache_dir=cache_dir,
            concurrency=concurrency, instruction_source=instruction_source, prices=prices, timeout_s=timeout_s,
            max_audio_seconds=max_audio_seconds, labels=labels, drop_groups=drop_groups,
        )
        self.blueprints = BlueprintBuilder(cache_dir=None if cache_dir is None else Path(cache_dir) / "blueprints",
                                           max_audio_seconds=max_audio_seconds, pitch=pitch)

    def __call__(self, rows: pl.DataFrame) -> pl.DataFrame:
        paths = blueprint_paths(rows, self.judge)
        blueprints = dict(zip(paths, self.blueprints.build(paths))) if paths else None
        return score_judge(rows, self.judge, self.fusion, blueprints)

    def close(self) -> None:
        self.blueprints.close()
        if isinstance(self.judge, LLMJudge):
            self.judge.client.close()


def scoring_job(**settings: Any) -> ScoringJob:
    """The ScoringJob of `sdscore score judge` (settings: JudgeScorer's), checked up front: an LLM judge
    needs its endpoint and model, so a usage error stops the run before any scoring."""
    settings = {k: v for k, v in settings.items() if v is not None}
    check_fusion(settings.get("fusion", "speakbench"))
    check_pitch(settings.get("pitch", "yin"))
    if "drop_groups" in settings:  # one spelling in the provenance: a list in FEATURE_GROUPS' order
        settings["drop_groups"] = list(check_groups(settings["drop_groups"]))
    if settings.get("judge", "rule") == "openai":  # the endpoint is part of what produced the scores
        if "base_url" not in settings:
            settings["base_url"] = base_url_from_env()
        make_judge(**{k: v for k, v in settings.items() if k not in ("fusion", "pitch")}).client.close()
    elif settings.get("labels", "typed") != "typed" or settings.get("drop_groups"):
        raise ValueError("--labels original and --drop-group need --judge openai (the rule judge gives typed "
                         "labels from the whole blueprint)")
    for name in ("prompt_file", "cache_dir"):
        if name in settings:
            settings[name] = os.path.abspath(settings[name])
    # a deadline decides whether a row fails, not what a reply says: a resumed run may use another
    return ScoringJob(SPEC, JudgeScorer, settings, volatile=("cache_dir", "concurrency", "timeout_s"))
