"""`sdscore train reward`: Bradley–Terry + center-loss training, or a head-only fit."""

from __future__ import annotations

import argparse
from pathlib import Path

from sdscore.cli.console import console, stage_progress
from sdscore.cli.outputs import add_overwrite_option, output_plan


def _cmd_train_reward(args: argparse.Namespace) -> int:
    import json

    from sdscore.output_paths import staged_folder
    from sdscore.protocols.reward.training import run_train, run_train_head

    if args.head_only and args.init is None:
        raise ValueError("--head-only needs --init BASE_MODEL_DIR (the model whose pooled states are used)")
    out = output_plan(args, "sdscore train").folder(args.out, "--out")
    with stage_progress() as progress, \
            staged_folder(out, overwrite=args.overwrite, command="sdscore train") as stage:
        if args.head_only:
            options = {k: str(v) for k, v in (("base", args.base), ("system_prompt", args.system_prompt)) if v}
            summary = run_train_head(
                args.manifest, stage, args.init, pooled=args.pooled, eval_fraction=args.eval_fraction,
                model_options=options, progress=progress, lr=args.lr, epochs=args.epochs, seed=args.seed,
                center_lambda=args.center_lambda,
            )
        else:
            summary = run_train(
                args.manifest, stage, init=args.init, eval_manifest=args.eval, progress=progress,
                lr=args.lr, epochs=args.epochs, max_steps=args.max_steps, batch_size=args.batch_size,
                warmup_ratio=args.warmup_ratio, weight_decay=args.weight_decay, max_grad_norm=args.grad_clip,
                eval_every=args.eval_every, eval_fraction=args.eval_fraction, center_lambda=args.center_lambda,
                seed=args.seed, device=args.device,
            )
    summary = {k: str(out) if v == str(stage) else v for k, v in summary.items()}  # the staged name is gone
    console.print_json(json.dumps(summary, default=str))
    console.print(f"model → [bold]{out}[/bold]")
    return 0


def add_train_parser(sub) -> None:
    """`sdscore train reward MANIFEST --out DIR [...]`."""
    train = sub.add_parser("train", help="train a reward model (Bradley–Terry + center loss)")
    kinds = train.add_subparsers(dest="protocol", required=True)
    reward = kinds.add_parser("reward", help="train on a reward-pairs manifest")
    reward.add_argument("manifest", type=Path)
    reward.add_argument("--out", required=True, help="model folder (best checkpoint by eval loss)")
    add_overwrite_option(reward)
    reward.add_argument("--init", type=Path, help="start from this model folder (default: a fresh compact model)")
    reward.add_argument("--eval", type=Path, help="eval manifest (default: --eval-fraction of the pairs by id hash)")
    reward.add_argument("--eval-fraction", type=float, default=0.1)
    reward.add_argument("--head-only", action="store_true", help="fit only the score head over --init's pooled states")
    reward.add_argument("--pooled", type=Path, help="--head-only: results file from `score reward --store-pooled`")
    reward.add_argument("--base", type=Path, help="--head-only with a Qwen2.5-Omni model: its base folder")
    reward.add_argument("--system-prompt", type=Path, help="--head-only with a Qwen2.5-Omni model: prompt file")
    reward.add_argument("--lr", type=float, help="default 1e-3 (compact from scratch), 1e-2 (head only)")
    reward.add_argument("--epochs", type=int)
    reward.add_argument("--max-steps", type=int)
    reward.add_argument("--batch-size", type=int, help="pairs per step")
    reward.add_argument("--warmup-ratio", type=float, help="cosine schedule warmup (default 0.15)")
    reward.add_argument("--weight-decay", type=float, help="AdamW (default 0.05)")
    reward.add_argument("--grad-clip", type=float, help="max grad norm (default 1.0)")
    reward.add_argument("--eval-every", type=int, help="steps between evaluations (default 50)")
    reward.add_argument("--center-lambda", type=float, help="center-loss weight λ (default 0.01)")
    reward.add_argument("--seed", type=int)
    reward.add_argument("--device", help="cpu | cuda | auto")
    reward.set_defaults(func=_cmd_train_reward)
