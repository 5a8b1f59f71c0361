"""`sdscore train reward`: Bradley–Terry + center-loss training from a reward-pairs manifest.

Full training (models/training.py) fits a compact model, fresh or from a checkpoint folder.
`--head-only` fits just the score head on pooled states (models/head_only.py): read from a results
file written by `sdscore score reward --store-pooled`, or computed here once with the base model —
what SDiaReward's released scripts effectively train (backbone frozen, linear probe).
"""

from __future__ import annotations

import os
from dataclasses import fields
from typing import Any

import numpy as np
import polars as pl

from sdscore.corpus import read_manifest
from sdscore.errors import ManifestError
from sdscore.progress import Progress
from sdscore.protocols.reward.results import POOLED_COLUMNS
from sdscore.protocols.reward.spec import SPEC


def _valid_pairs(path: str | os.PathLike, progress: Progress | None) -> pl.DataFrame:
    """Validated pairs; malformed rows are dropped with a count (training cannot use them)."""
    pairs = read_manifest(path, SPEC, errors="collect")
    bad = pairs.filter(pl.col("error").is_not_null())
    if bad.height:
        shown = "; ".join(bad["error"].head(3).to_list())
        if bad.height == pairs.height:
            raise ManifestError(f"{path}: no valid pair to train on ({shown})")
        print(f"warning: {path}: {bad.height} malformed pairs skipped ({shown}{' ...' if bad.height > 3 else ''})")
    return pairs.filter(pl.col("error").is_null()).drop("error")


def _options(cls, values: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in values.items() if k in names and v is not None}


def run_train(
    manifest: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    init: str | os.PathLike | None = None,
    eval_manifest: str | os.PathLike | None = None,
    progress: Progress | None = None,
    **config: Any,
) -> dict:
    """Train a compact reward model (fresh with default hyperparameters, or fine-tune `init`).

    config: TrainConfig fields (lr, epochs, max_steps, batch_size, warmup_ratio, weight_decay,
    max_grad_norm, eval_every, eval_fraction, center_lambda, seed, device). Returns the summary.
    """
    from sdscore.models.compact import CompactConfig, CompactRewardModel
    from sdscore.models.loading import load_reward_model
    from sdscore.models.training import TrainConfig, train_reward

    train_config = TrainConfig(**_options(TrainConfig, config))
    train = _valid_pairs(manifest, progress)
    held = _valid_pairs(eval_manifest, progress) if eval_manifest is not None else None
    if init is None:
        model = CompactRewardModel.from_config(CompactConfig(), seed=train_config.seed)
    else:
        model = load_reward_model(init)
    return train_reward(model, train, held, out_dir, train_config, progress)


def _pooled_from_results(results_path: str | os.PathLike, pairs: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    results = pl.read_parquet(results_path)
    missing = [c for c in ("pair_id", *POOLED_COLUMNS) if c not in results.columns]
    if missing:
        raise ManifestError(f"{results_path}: no {missing} columns (score with `sdscore score reward --store-pooled`)")
    joined = pairs.select("pair_id").join(results.filter(pl.col("error").is_null()), on="pair_id", how="left")
    lost = joined.filter(pl.col(POOLED_COLUMNS[0]).is_null())["pair_id"]
    if lost.len():
        raise ManifestError(f"{results_path}: no pooled states for {lost.len()} pairs, e.g. {lost.head(3).to_list()}")
    return tuple(np.stack(joined[c].to_numpy()).astype(np.float32) for c in POOLED_COLUMNS)


def run_train_head(
    manifest: str | os.PathLike,
    out_dir: str | os.PathLike,
    base_model: str | os.PathLike,
    *,
    pooled: str | os.PathLike | None = None,
    eval_fraction: float = 0.1,
    model_options: dict | None = None,
    progress: Progress | None = None,
    **config: Any,
) -> dict:
    """Fit a new score head over `base_model`'s pooled states; write a head-only folder to out_dir.

    pooled: a results file with chosen_pooled/rejected_pooled (pooled with the base model's own
    pooling); without it the states are computed once here. Pairs with a failed side are skipped.
    config: HeadTrainConfig fields (lr, epochs, batch_size, center_lambda, bias, seed, ...).
    """
    from sdscore.models.head_only import HeadTrainConfig, save_head_only, train_head
    from sdscore.models.training import hash_split
    from sdscore.protocols.reward.scorer import score_pairs_frame
    from sdscore.runtime.reward.episode_scorer import RewardScorer

    head_config = HeadTrainConfig(**_options(HeadTrainConfig, config))
    pairs = _valid_pairs(manifest, progress)
    scorer = RewardScorer.from_pretrained(base_model, model_options=model_options)
    pooling = scorer.model.pooler.kind
    if pooled is None:
        results = score_pairs_frame(pairs, scorer, store_pooled=True, progress=progress)
        failed = results.filter(pl.col("error").is_not_null())
        if failed.height:
            print(f"warning: {failed.height} pairs could not be scored and are skipped, e.g. {failed['error'][0]}")
        keep = results["error"].is_null()
        pairs, results = pairs.filter(keep), results.filter(keep)
        chosen, rejected = (np.stack(results[c].to_numpy()).astype(np.float32) for c in POOLED_COLUMNS)
    else:
        chosen, rejected = _pooled_from_results(pooled, pairs)
    held = np.isin(pairs["pair_id"].to_numpy(), hash_split(pairs, eval_fraction)[1]["pair_id"].to_numpy())
    margins = pairs["margin"].cast(pl.Float64).fill_null(0.0).to_numpy()
    history: list = []
    state = train_head(
        chosen[~held], rejected[~held], margins[~held],
        chosen[held] if held.any() else None, rejected[held] if held.any() else None,
        margins[held] if held.any() else None,
        pooling=pooling, config=head_config, states_pooling=pooling, history=history,
    )
    card = {"trained_on": os.path.abspath(manifest), "train_pairs": int((~held).sum()), "eval_pairs": int(held.sum()),
            "last_epoch": history[-1] if history else None}
    base = os.path.abspath(base_model)
    save_head_only(out_dir, base, scorer.model.kind, pooling, state, card)
    return {"out": os.fspath(out_dir), "base_model": base, "pooling": pooling, **card}
