"""The ScoringJob of `sdscore score reward`: the reward model (scoring.py), or with judge="openai" the
zero-shot audio-LLM baseline (audio_judge.py)."""

from __future__ import annotations

import os
from typing import Any

from sdscore.llm_judges.scoring_jobs import judge_job
from sdscore.protocols.reward.audio_judge import RewardAudioJudgeScorer
from sdscore.protocols.reward.scoring import RewardPairsScorer
from sdscore.protocols.reward.spec import SPEC
from sdscore.runtime.scorer import ScoringJob


def scoring_job(**settings: Any) -> ScoringJob:
    """The ScoringJob of `sdscore score reward` (settings: RewardModelSettings, or with judge="openai"
    RewardJudgeSettings, the zero-shot audio-LLM baseline; checked by the job: SettingsError)."""
    from sdscore.checkpoint_files import resolve_device
    from sdscore.models.pretrained import default_model_dir

    settings = {k: v for k, v in settings.items() if v is not None}
    judge = settings.pop("judge", "reward-model")
    if judge == "openai":
        return _audio_judge_job(settings)
    if judge != "reward-model":
        raise ValueError(f"unknown reward judge {judge!r}; expected 'reward-model' or 'openai'")
    resolve_device(settings.get("device", "auto"))  # a device that is not there stops the run before any work
    settings["model"] = os.path.abspath(settings.get("model") or default_model_dir())
    for name in ("base", "system_prompt"):
        if name in settings:
            settings[name] = os.path.abspath(settings[name])
    # RewardModelSettings marks how the work is split (share_prefixes, num_threads) volatile: a resumed run may
    # differ in it
    return ScoringJob(SPEC, RewardPairsScorer, settings, model_dir=settings["model"])


def _audio_judge_job(settings: dict[str, Any]) -> ScoringJob:
    """The job of the audio-LLM judge; built once here so that a usage error stops the run before any pair."""
    return judge_job(SPEC, RewardAudioJudgeScorer, settings)
