"""reward (SDiaReward / ESDR-Bench): score preference pairs with a reward model, then evaluate.

Results hold one row per pair: pair_id, criterion, subset, category, chosen_reward,
rejected_reward, margin (= chosen − rejected), correct, error, and optionally the pooled states
chosen_pooled / rejected_pooled (so a new head can be fitted without re-running the backbone).
Any scorer that writes these columns can be evaluated.
"""

from __future__ import annotations

import math
import os

import numpy as np
import polars as pl

from sdscore.atomic_write import write_json
from sdscore.corpus import read_manifest
from sdscore.metrics._inputs import error_mask
from sdscore.metrics.preference import correct_column, margin_buckets, reward_summary
from sdscore.progress import Progress

#: Columns of a results file, in order (pooled columns only when asked for).
RESULT_SCHEMA = pl.Schema(
    {
        "pair_id": pl.String,
        "criterion": pl.String,
        "subset": pl.String,
        "category": pl.String,
        "chosen_reward": pl.Float64,
        "rejected_reward": pl.Float64,
        "margin": pl.Float64,
        "correct": pl.Boolean,
        "error": pl.String,
    }
)
POOLED_COLUMNS = ("chosen_pooled", "rejected_pooled")
#: subset name of a pair whose manifest row has none, per criterion
DEFAULT_SUBSET = {"modality": "modality", "colloquialness": "colloquial"}
#: pairs per resumable shard of `score` output
SHARD_ROWS = 4096


def _results_frame(pairs: pl.DataFrame, chosen: np.ndarray, rejected: np.ndarray, errors: list[str | None],
                   pooled: tuple[np.ndarray, np.ndarray] | None) -> pl.DataFrame:
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
            "chosen_reward": pl.Series(chosen, dtype=pl.Float64).fill_nan(None),
            "rejected_reward": pl.Series(rejected, dtype=pl.Float64).fill_nan(None),
            "margin": pl.Series(chosen - rejected, dtype=pl.Float64).fill_nan(None),
            "correct": pl.Series(np.where(ok, chosen > rejected, False), dtype=pl.Boolean),
            "error": pl.Series(errors, dtype=pl.String),
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
    if valid:
        subset = pairs[valid]
        chosen, rejected = episodes_from_pairs(subset)
        rewards, states, episode_errors = scorer.score_pairs_detailed(chosen, rejected, store_pooled, progress)
        m = len(valid)
        rewards = rewards.numpy()
        chosen_r[valid], rejected_r[valid] = rewards[:m], rewards[m:]
        if pooled is not None:
            pooled[0][valid], pooled[1][valid] = states[:m].numpy(), states[m:].numpy()
        for k, i in enumerate(valid):
            sides = [f"{side}: {e}" for side, e in (("chosen", episode_errors[k]), ("rejected", episode_errors[m + k]))
                     if e is not None]
            errors[i] = "; ".join(sides) if sides else None
    return _results_frame(pairs, chosen_r, rejected_r, errors, pooled)


def run_score(
    manifest_path: str | os.PathLike,
    out_path: str | os.PathLike,
    model_dir: str | os.PathLike,
    *,
    base: str | os.PathLike | None = None,
    system_prompt: str | os.PathLike | None = None,
    backend: str = "auto",
    device: str = "auto",
    dtype: str = "auto",
    max_batch: int = 16,
    max_tokens: int | None = None,
    workers: int | str = 1,
    store_pooled: bool = False,
    resume: bool = False,
    shard_rows: int = SHARD_ROWS,
    progress: Progress | None = None,
) -> pl.DataFrame:
    """`sdscore score reward`: score every pair of a manifest into OUT.parquet, resumably.

    Malformed manifest rows are kept with their validation error. Output is written shard by
    shard (runtime/sharded_output.py); with resume=True an interrupted run continues.
    """
    from sdscore.runtime.reward_scorer import RewardScorer
    from sdscore.runtime.sharded_output import ShardedOutput

    pairs = read_manifest(manifest_path, "reward", errors="collect")
    options = {k: os.fspath(v) for k, v in (("base", base), ("system_prompt", system_prompt)) if v is not None}
    scorer = RewardScorer.from_pretrained(
        model_dir, backend=backend, device=device, dtype=dtype, model_options=options,
        max_batch=max_batch, max_tokens=max_tokens, workers=workers,
    )
    config = {
        "manifest": os.path.abspath(manifest_path), "model": os.path.abspath(model_dir), "options": options,
        "backend": backend, "store_pooled": store_pooled,
    }
    output = ShardedOutput(out_path, pairs.height, shard_rows, config, resume)
    pending = output.pending()
    done_before = pairs.height - sum(output.shard_rows_range(k)[1] - output.shard_rows_range(k)[0] for k in pending)
    with scorer:  # stops worker processes, if any
        for k in pending:
            start, stop = output.shard_rows_range(k)

            def shard_progress(stage: str, done: int, total: int, _before: int = done_before) -> None:
                if progress:  # episodes of this shard → pairs of the whole run
                    progress("reward: score pairs", _before + math.floor(done / 2), pairs.height)

            output.write_shard(k, score_pairs_frame(pairs[start:stop], scorer, store_pooled, shard_progress))
            done_before += stop - start
    return output.finish(lambda: _results_frame(pairs.clear(), np.zeros(0), np.zeros(0), [], None))

#: |chosen − rejected| bucket edges for the confidence analysis (rewards are centred near 0).
MARGIN_EDGES = (0.0, 0.25, 0.5, 1.0, 2.0, float("inf"))


def evaluate_reward(results: pl.DataFrame) -> dict:
    """Table 2 metrics plus accuracy per |reward gap| bucket."""
    metrics = reward_summary(results)
    scored = results.filter(pl.Series(~error_mask(results)))
    if scored.height and {"chosen_reward", "rejected_reward"} <= set(scored.columns):
        gap = np.abs(scored["chosen_reward"].to_numpy() - scored["rejected_reward"].to_numpy())
        buckets = margin_buckets(gap, correct_column(scored), MARGIN_EDGES)
        metrics["margin_buckets"] = [  # JSON has no infinity: an open upper edge is null
            {**b, "upper": None if np.isinf(b["upper"]) else b["upper"]} for b in buckets.to_dicts()
        ]
    return metrics


def run_eval(
    results_path: str | os.PathLike, out_json: str | os.PathLike, plot_path: str | os.PathLike | None = None
) -> dict:
    """`sdscore eval reward`: metrics of a results Parquet as JSON (atomic), and the violin/box PNG when asked."""
    results = pl.read_parquet(results_path)
    metrics = evaluate_reward(results)
    write_json(out_json, metrics)
    if plot_path is not None:
        from sdscore.report.reward_plots import plot_reward_distributions

        plot_reward_distributions(results, plot_path, title=f"rewards per subset: {os.path.basename(results_path)}")
    return metrics
