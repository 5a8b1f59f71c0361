"""reward scoring: preference pairs → rewards of both episodes, as one results row per pair.

The rows have results.py's columns. `RewardPairsScorer` is the protocol's Scorer (runtime/scorer.py):
the runtime streams the manifest through it; `scoring_job` (the ScoringJob of `sdscore score reward`)
chooses it, or with judge="openai" audio_judge.RewardAudioJudgeScorer (an audio LLM's pairwise choice).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import polars as pl

from sdscore.llm_judges.scoring_jobs import judge_job
from sdscore.progress import Progress
from sdscore.protocols.reward.audio_judge import RewardAudioJudgeScorer
from sdscore.protocols.reward.results import DEFAULT_SUBSET, POOLED_COLUMNS, RESULT_SCHEMA
from sdscore.protocols.reward.settings import RewardModelSettings
from sdscore.protocols.reward.spec import SPEC
from sdscore.runtime.scorer import ScoringJob
from sdscore.runtime.settings import build


def _results_frame(pairs: pl.DataFrame, chosen: np.ndarray, rejected: np.ndarray, errors: list[str | None],
                   warnings: list[str | None], pooled: tuple[np.ndarray, np.ndarray] | None) -> pl.DataFrame:
    ok = np.array([e is None for e in errors], dtype=bool)
    chosen = np.where(ok, chosen, np.nan)
    rejected = np.where(ok, rejected, np.nan)
    subset = [s if s is not None else DEFAULT_SUBSET.get(c, c)
              for s, c in zip(pairs["subset"].to_list(), pairs["criterion"].to_list())]
    frame = pl.DataFrame(
        {
            "pair_id": pairs["pair_id"],
            "criterion": pairs["criterion"],
            "subset": pl.Series(subset, dtype=pl.String),
            "category": pairs["category"],
            "source": pairs["source"],
            "chosen_reward": pl.Series(chosen, dtype=pl.Float64).fill_nan(None),
            "rejected_reward": pl.Series(rejected, dtype=pl.Float64).fill_nan(None),
            "margin": pl.Series(chosen - rejected, dtype=pl.Float64).fill_nan(None),
            "correct": pl.Series(np.where(ok, chosen > rejected, False), dtype=pl.Boolean),
            "error": pl.Series(errors, dtype=pl.String),
            "warning": pl.Series(warnings, dtype=pl.String),
        },
        schema=RESULT_SCHEMA,
    ).with_columns(pl.when(pl.col("error").is_null()).then(pl.col("correct")).alias("correct"))
    if pooled is not None:
        width = pooled[0].shape[1]
        for name, states in zip(POOLED_COLUMNS, pooled):
            states = np.where(ok[:, None], states, np.nan).astype(np.float32)
            frame = frame.with_columns(pl.Series(name, states, dtype=pl.Array(pl.Float32, width)))
    return frame


def score_pairs_frame(pairs: pl.DataFrame, scorer, store_pooled: bool = False,
                      progress: Progress | None = None) -> pl.DataFrame:
    """Results rows for REWARD_PAIRS rows (read with errors="collect": rows with an `error` keep it).

    Both episodes of every valid pair go through one RewardScorer run (bucketed together); a pair
    whose chosen or rejected episode failed gets null rewards and the error of each side.
    """
    from sdscore.models.episodes import episodes_from_pairs

    n = pairs.height
    invalid = pairs["error"].to_list() if "error" in pairs.columns else [None] * n
    valid = [i for i in range(n) if invalid[i] is None]
    chosen_r, rejected_r = np.full(n, np.nan), np.full(n, np.nan)
    width = scorer.model.hidden_size
    pooled = (np.full((n, width), np.nan, np.float32), np.full((n, width), np.nan, np.float32)) if store_pooled else None
    errors: list[str | None] = list(invalid)
    warnings: list[str | None] = [None] * n
    if valid:
        subset = pairs[valid]
        chosen, rejected = episodes_from_pairs(subset)
        rewards, states, episode_errors, episode_warnings = scorer.score_pairs_detailed(
            chosen, rejected, store_pooled, progress)
        m = len(valid)
        rewards = rewards.numpy()
        chosen_r[valid], rejected_r[valid] = rewards[:m], rewards[m:]
        if pooled is not None:
            pooled[0][valid], pooled[1][valid] = states[:m].numpy(), states[m:].numpy()
        for k, i in enumerate(valid):
            sides = [f"{side}: {e}" for side, e in (("chosen", episode_errors[k]), ("rejected", episode_errors[m + k]))
                     if e is not None]
            errors[i] = "; ".join(sides) if sides else None
            notes = [f"{side}: {w}" for side, w in (("chosen", episode_warnings[k]),
                                                     ("rejected", episode_warnings[m + k])) if w is not None]
            warnings[i] = "; ".join(notes) if notes else None
    return _results_frame(pairs, chosen_r, rejected_r, errors, warnings, pooled)


class RewardPairsScorer:
    """The reward protocol's Scorer: loads the reward model once, scores batches of pair rows.

    Settings: RewardModelSettings (model, base, system_prompt, backend, device, dtype, max_batch,
    max_tokens, store_pooled, max_audio_seconds; share_prefixes and num_threads, which change no score)."""

    settings_class = RewardModelSettings

    def __init__(self, *args: Any, **settings: Any):
        """A positional setting fills model; see RewardModelSettings (checked: SettingsError)."""
        s = build(RewardModelSettings, *args, **settings)
        from sdscore.models.pretrained import default_model_dir
        from sdscore.runtime.reward.episode_scorer import RewardScorer

        options = {k: os.fspath(v) for k, v in (("base", s.base), ("system_prompt", s.system_prompt)) if v is not None}
        self.store_pooled = s.store_pooled
        self.scorer = RewardScorer.from_pretrained(
            s.model or default_model_dir(), backend=s.backend, device=s.device, dtype=s.dtype, model_options=options,
            max_batch=s.max_batch, max_tokens=s.max_tokens, num_threads=s.num_threads,
            max_audio_seconds=s.max_audio_seconds, share_prefixes=s.share_prefixes,
        )

    def __call__(self, rows: pl.DataFrame, progress: Progress | None = None) -> pl.DataFrame:
        """progress: after each batch of episodes the reward model scores (the runtime counts rows by it)."""
        return score_pairs_frame(rows, self.scorer, self.store_pooled, progress)


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
