"""Train a reward model on preference pairs: Bradley–Terry + centering, AdamW, cosine, best-by-eval-loss.

SDiaReward's recipe (RESEARCH.md): AdamW (weight decay 0.05), cosine schedule after a 0.15 warmup,
gradient clipping at 1.0, evaluation every N steps, the checkpoint with the lowest eval loss kept.
Its lr 2e-5 fits a pretrained 7B backbone under a linear probe; the compact model trains from
scratch, so the default here is 1e-3 (pass lr=2e-5 to fine-tune a large backbone).

Every episode is prepared once (audio loaded with sdscore.audio.load_many, chunk by chunk, then
`model.prepare`) and the Prepared items stay in memory, so steps are collate + forward + backward.
The output folder holds the best checkpoint (`model.save_pretrained`) and `training_log.json`;
a checkpoint is written to a temp folder beside it and swapped in by rename.
"""

from __future__ import annotations

import copy
import hashlib
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch

from sdscore import audio as audio_io
from sdscore.atomic_write import write_json
from sdscore.checkpoint_files import resolve_device
from sdscore.errors import AudioError, ModelError
from sdscore.models.base import Prepared, RewardModel, batch_to
from sdscore.models.episodes import Episode, episodes_from_pairs
from sdscore.models.losses import bradley_terry_loss, pairwise_correct
from sdscore.output_paths import check_replaceable_folder, staged_folder

LOG_FILE = "training_log.json"
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class TrainConfig:
    """Training hyperparameters; defaults suit the compact model trained from scratch on CPU."""

    lr: float = 1e-3
    weight_decay: float = 0.05
    betas: tuple[float, float] = (0.9, 0.999)
    warmup_ratio: float = 0.15
    max_grad_norm: float = 1.0
    batch_size: int = 16  # pairs per step (2 × batch_size episodes per forward)
    epochs: int = 10
    max_steps: int | None = None  # overrides epochs when set
    eval_every: int = 50  # steps; the last step is always evaluated
    eval_fraction: float = 0.1  # held out by a stable hash of pair_id when no eval frame is given
    center_lambda: float = 0.01
    seed: int = 0
    device: str = "cpu"  # "cpu", "cuda", "cuda:1", or "auto"
    eval_batch_size: int = 32
    load_chunk: int = 256  # pairs whose audio is loaded at once while preparing
    num_threads: int | None = None  # audio decoding threads (default: the compute budget's cores())
    card: dict[str, Any] = field(default_factory=dict)  # extra card fields saved with the model

    def __post_init__(self) -> None:
        for name in ("batch_size", "epochs", "eval_every", "eval_batch_size", "load_chunk"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"train config: {name} must be a positive integer, got {value!r}")
        if self.max_steps is not None and (not isinstance(self.max_steps, int) or self.max_steps < 1):
            raise ValueError(f"train config: max_steps must be a positive integer or None, got {self.max_steps!r}")
        if not self.lr > 0:
            raise ValueError(f"train config: lr must be > 0, got {self.lr}")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ValueError(f"train config: warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        if not 0.0 <= self.eval_fraction < 1.0:
            raise ValueError(f"train config: eval_fraction must be in [0, 1), got {self.eval_fraction}")


@dataclass
class PreparedPairs:
    """Prepared chosen/rejected episodes of N pairs, their margins (NaN = none) and labels."""

    pair_ids: list[str]
    chosen: list[Prepared]
    rejected: list[Prepared]
    margins: np.ndarray  # float32 [N]
    subsets: list[str | None]

    def __len__(self) -> int:
        return len(self.pair_ids)


def hash_split(pairs: pl.DataFrame, eval_fraction: float) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(train, eval): a pair is held out iff sha1(pair_id) maps below eval_fraction (stable across runs)."""
    held = [
        int.from_bytes(hashlib.sha1(str(pid).encode("utf-8")).digest()[:8], "big") / 2.0**64 < eval_fraction
        for pid in pairs["pair_id"].to_list()
    ]
    mask = pl.Series(held, dtype=pl.Boolean)
    return pairs.filter(~mask), pairs.filter(mask)


def prepare_pairs(
    model: RewardModel, pairs: pl.DataFrame, num_threads: int | None = None, chunk: int = 256,
    progress: Progress | None = None, stage: str = "prepare",
) -> PreparedPairs:
    """Load each pair's audio (load_many, `chunk` pairs at a time) and prepare both episodes."""
    chosen_eps, rejected_eps = episodes_from_pairs(pairs)
    ids = pairs["pair_id"].to_list()
    margins = pairs["margin"].cast(pl.Float32).fill_null(float("nan")).to_numpy() if "margin" in pairs.columns \
        else np.full(len(ids), np.nan, np.float32)
    subsets = pairs["subset"].to_list() if "subset" in pairs.columns else [None] * len(ids)
    chosen, rejected = [], []
    for start in range(0, len(ids), chunk):
        span = range(start, min(start + chunk, len(ids)))
        episodes = [ep for i in span for ep in (chosen_eps[i], rejected_eps[i])]
        waves = _load_audio(episodes, model.sample_rate, num_threads)
        for i in span:
            for ep, out in ((chosen_eps[i], chosen), (rejected_eps[i], rejected)):
                out.append(model.prepare(ep, [waves.get(_key(t.audio), t.audio) for t in ep.turns]))
        if progress is not None:
            progress(stage, span.stop, len(ids))
    return PreparedPairs(ids, chosen, rejected, np.array(margins, dtype=np.float32), subsets)


def _key(audio: Any) -> str | None:
    return os.fspath(audio) if isinstance(audio, (str, os.PathLike)) else None


def _load_audio(episodes: Sequence[Episode], sample_rate: int, num_threads: int | None) -> dict[str | None, Any]:
    """Waveforms of every audio path in `episodes` by path; AudioError naming the first bad pair."""
    paths = sorted({p for ep in episodes for p in ep.audio_paths()})
    batch = audio_io.load_many(paths, sample_rate, num_threads=num_threads)
    errors = {p: e for p, e in zip(paths, batch.errors) if e is not None}
    for ep in episodes:
        bad = [p for p in ep.audio_paths() if p in errors]
        if bad:
            pair = ep.id.rsplit("/", 1)[0] or "?"
            raise AudioError(f"pair {pair} ({ep.id}): {errors[bad[0]]}")
    waves: dict[str | None, Any] = {p: batch[i] for i, p in enumerate(paths)}
    waves[None] = None
    return waves


def cosine_schedule(step: int, total: int, warmup: int) -> float:
    """LR multiplier: linear warmup to 1 over `warmup` steps, then cosine decay to 0 at `total`."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def batch_order(lengths: np.ndarray, batch_size: int, generator: np.random.Generator) -> list[np.ndarray]:
    """One epoch of batches: shuffle, sort windows of 8 batches by length (less padding), shuffle batches."""
    order = generator.permutation(len(lengths))
    window = batch_size * 8
    batches = []
    for start in range(0, len(order), window):
        part = order[start : start + window]
        part = part[np.argsort(lengths[part], kind="stable")]
        batches += [part[i : i + batch_size] for i in range(0, len(part), batch_size)]
    return [batches[i] for i in generator.permutation(len(batches))]


def _to(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return batch_to(batch, device)


def pair_rewards(model: RewardModel, data: PreparedPairs, idx: Sequence[int], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(chosen, rejected) rewards [n] of pairs `idx`, both sides in one forward."""
    items = [data.chosen[i] for i in idx] + [data.rejected[i] for i in idx]
    rewards = model(_to(model.collate(items), device))
    return rewards[: len(idx)], rewards[len(idx) :]


@torch.no_grad()
def evaluate_pairs(model: RewardModel, data: PreparedPairs, config: TrainConfig, device: torch.device) -> dict[str, Any]:
    """Eval loss (the training loss, centering included), accuracy, and accuracy per subset."""
    was_training = model.training
    model.eval()
    chosen, rejected = [], []
    for start in range(0, len(data), config.eval_batch_size):
        rc, rr = pair_rewards(model, data, range(start, min(start + config.eval_batch_size, len(data))), device)
        chosen.append(rc.float().cpu())
        rejected.append(rr.float().cpu())
    model.train(was_training)
    rc, rr = torch.cat(chosen), torch.cat(rejected)
    loss = bradley_terry_loss(rc, rr, torch.from_numpy(data.margins), config.center_lambda)
    correct = pairwise_correct(rc, rr).numpy()
    by_subset = {}
    for name in sorted({s for s in data.subsets if s is not None}):
        rows = np.array([s == name for s in data.subsets])
        by_subset[name] = {"accuracy": float(correct[rows].mean()), "pairs": int(rows.sum())}
    return {
        "loss": float(loss), "accuracy": float(correct.mean()), "by_subset": by_subset,
        "chosen_mean": float(rc.mean()), "rejected_mean": float(rr.mean()),
    }


def train_reward(
    model: RewardModel,
    train_pairs: pl.DataFrame,
    eval_pairs: pl.DataFrame | None,
    out_dir: str | os.PathLike,
    config: TrainConfig | None = None,
    progress: Progress | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Train `model` in place on REWARD_PAIRS frames; save the best checkpoint to out_dir; return a summary.

    out_dir follows the output-path policy (output_paths.py): a new or empty folder, or with
    `overwrite` one that sdscore wrote whole; a folder holding any other file is never replaced.

    eval_pairs None: `config.eval_fraction` of train_pairs is held out by pair_id hash (0 = no eval,
    the final weights are saved). On return the model holds the saved (best) weights, in eval mode.
    progress(stage, done, total) is called while preparing and per step.
    """
    config = config or TrainConfig()
    out = Path(out_dir)
    check_replaceable_folder(out, overwrite, "out_dir")
    if not hasattr(model, "save_pretrained"):
        raise ModelError(f"{type(model).__name__} has no save_pretrained: it cannot be trained here")
    if eval_pairs is None and config.eval_fraction > 0:
        train_pairs, eval_pairs = hash_split(train_pairs, config.eval_fraction)
    if train_pairs.height == 0:
        raise ValueError("no training pairs (the frame is empty, or eval_fraction held out every pair)")
    device = resolve_device(config.device)
    started = time.perf_counter()
    train = prepare_pairs(model, train_pairs, config.num_threads, config.load_chunk, progress, "train: prepare")
    held = None
    if eval_pairs is not None and eval_pairs.height:
        held = prepare_pairs(model, eval_pairs, config.num_threads, config.load_chunk, progress, "eval: prepare")
    prepared_s = time.perf_counter() - started

    steps_per_epoch = math.ceil(len(train) / config.batch_size)
    total = config.max_steps or config.epochs * steps_per_epoch
    warmup = int(config.warmup_ratio * total)
    model.to(device)
    optimizer = torch.optim.AdamW(_param_groups(model, config.weight_decay), lr=config.lr, betas=config.betas)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: cosine_schedule(s, total, warmup))
    rng = np.random.default_rng(config.seed)
    lengths = np.array([max(c.length, r.length) for c, r in zip(train.chosen, train.rejected)])
    log: dict[str, Any] = {"config": _jsonable(asdict(config)), "train_pairs": len(train),
                           "eval_pairs": len(held) if held else 0, "steps": [], "eval": [], "best": None}
    best_state, best_loss = None, math.inf
    saved = False  # after the first checkpoint, out_dir is the folder this run wrote
    step, epoch, batches = 0, 0, []
    with torch.random.fork_rng(devices=[] if device.type == "cpu" else [device]):
        torch.manual_seed(config.seed)
        model.train()
        while step < total:
            if not batches:
                batches, epoch = batch_order(lengths, config.batch_size, rng), epoch + 1
            idx = batches.pop(0)
            rc, rr = pair_rewards(model, train, idx, device)
            margin = torch.from_numpy(train.margins[idx]).to(device)
            loss = bradley_terry_loss(rc, rr, margin, config.center_lambda)
            if not bool(torch.isfinite(loss)):
                raise FloatingPointError(
                    f"training diverged at step {step + 1}: loss is {float(loss.detach())} (try a lower lr than {config.lr})"
                )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
            optimizer.step()
            schedule.step()
            step += 1
            log["steps"].append({
                "step": step, "epoch": epoch, "loss": float(loss.detach()), "lr": optimizer.param_groups[0]["lr"],
                "grad_norm": float(grad_norm), "accuracy": float(pairwise_correct(rc, rr).float().mean()),
            })
            if progress is not None:
                progress("train: steps", step, total)
            if held is None or not (step % config.eval_every == 0 or step == total):
                continue
            row = {"step": step, "epoch": epoch, **evaluate_pairs(model, held, config, device)}
            log["eval"].append(row)
            if row["loss"] < best_loss:
                best_loss, best_state = row["loss"], copy.deepcopy(model.state_dict())
                log["best"] = {k: row[k] for k in ("step", "loss", "accuracy", "by_subset")}
                _save_checkpoint(model, out, _card(config, log, len(train)), log, overwrite=overwrite or saved)
                saved = True
            write_json(out / LOG_FILE, log)
    if best_state is None:  # no eval pairs: the final weights are the checkpoint
        log["best"] = {"step": step, "loss": None, "accuracy": None, "by_subset": {}}
        best_state = model.state_dict()
        _save_checkpoint(model, out, _card(config, log, len(train)), log, overwrite=overwrite or saved)
    model.load_state_dict(best_state)
    model.eval()
    log["seconds"] = {"prepare": round(prepared_s, 3), "total": round(time.perf_counter() - started, 3)}
    write_json(out / LOG_FILE, log)
    return {
        "out_dir": str(out), "train_pairs": len(train), "eval_pairs": log["eval_pairs"], "steps": step,
        "epochs": epoch, "best_step": log["best"]["step"], "best_eval_loss": log["best"]["loss"],
        "best_eval_accuracy": log["best"]["accuracy"], "eval_by_subset": log["best"]["by_subset"],
        "final_train_loss": log["steps"][-1]["loss"], "seconds": log["seconds"],
    }


def _card(config: TrainConfig, log: dict[str, Any], n_train: int) -> dict[str, Any]:
    """Card fields saved with a checkpoint: the user's, plus what training knows."""
    best = log["best"]
    return {**config.card, "training": {
        "train_pairs": n_train, "eval_pairs": log["eval_pairs"], "step": best["step"],
        "eval_loss": best["loss"], "eval_accuracy": best["accuracy"], "eval_by_subset": best["by_subset"],
        "config": _jsonable(asdict(config)),
    }}


def _save_checkpoint(model: RewardModel, out: Path, card: dict[str, Any], log: dict[str, Any],
                     overwrite: bool) -> None:
    """Write the model to a temp folder beside `out` (with sdscore's marker), then swap it in by rename.

    The first save replaces `out` only as train_reward's check allowed; later saves replace the
    folder the first one wrote (its marker lists every file), so nothing else is ever deleted."""
    with staged_folder(out, overwrite=overwrite, command="sdscore train") as stage:
        model.save_pretrained(stage, card=card)
        write_json(stage / LOG_FILE, log)


def _param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Weight decay on matrices and embeddings; none on biases and LayerNorm weights (as HF Trainer)."""
    decay, plain = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.ndim >= 2 else plain).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": plain, "weight_decay": 0.0}]


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value
