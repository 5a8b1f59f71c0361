"""The reward commands of `sdscore`: score reward, train reward, export, corpus stratify."""

from __future__ import annotations

import argparse
from pathlib import Path

from sdscore.cli_common import console, report_rows, stage_progress


def _cmd_score_reward(args: argparse.Namespace) -> int:
    from sdscore.models.pretrained import default_model_dir
    from sdscore.protocols.reward import run_score

    with stage_progress() as progress:
        frame = run_score(
            args.manifest, args.out, args.model or default_model_dir(),
            base=args.base, system_prompt=args.system_prompt, backend=args.backend, device=args.device,
            dtype=args.dtype, max_batch=args.max_batch, max_tokens=args.max_tokens, workers=args.workers,
            store_pooled=args.store_pooled, resume=args.resume, progress=progress,
        )
    return report_rows(frame, args.out)


def _workers(value: str) -> int | str:
    if value == "auto":
        return value
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"expected 'auto' or an integer >= 1, got {value!r}")
    return count


def add_score_reward_parser(protocols) -> None:
    """`sdscore score reward MANIFEST --model DIR --out OUT.parquet [...]`."""
    reward = protocols.add_parser("reward", help="SDiaReward reward-model scoring of preference pairs")
    reward.add_argument("manifest", type=Path)
    reward.add_argument("--out", required=True, type=Path, help="results Parquet (one row per pair)")
    reward.add_argument("--model", type=Path, help="reward model folder (default: the shipped compact demo model)")
    reward.add_argument("--base", type=Path, help="base Qwen2.5-Omni folder (config, tokenizer, processor)")
    reward.add_argument("--system-prompt", type=Path, help="system prompt file the checkpoint was trained with")
    reward.add_argument("--backend", choices=["auto", "torch", "onnxruntime", "tensorrt"], default="auto",
                        help="onnxruntime / tensorrt run MODEL/export/ written by `sdscore export`")
    reward.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    reward.add_argument("--dtype", default="auto", help="auto (bf16 on GPU, fp32 on CPU) | float32 | bfloat16")
    reward.add_argument("--max-batch", type=int, default=16, help="episodes per forward")
    reward.add_argument("--max-tokens", type=int, help="cap on batch × longest sequence")
    reward.add_argument("--workers", type=_workers, default=1,
                        help="CPU worker processes, each with its own model copy (N or auto; default 1)")
    reward.add_argument("--store-pooled", action="store_true", help="also store pooled states (for --head-only)")
    reward.add_argument("--resume", action="store_true", help="continue an interrupted run from its shards")
    reward.set_defaults(func=_cmd_score_reward)


def _cmd_stratify(args: argparse.Namespace) -> int:
    from rich.table import Table

    from sdscore.corpus.stratify import run_stratify

    summary = run_stratify(args.manifest, args.out, args.per_bucket, args.by, args.seed, remaining_out=args.remaining)
    table = Table(title=f"stratified: at most {args.per_bucket} per ({args.by})")
    keys = [k for k in summary["buckets"][0] if k not in ("available", "selected")] if summary["buckets"] else []
    for column in [*keys, "available", "selected"]:
        table.add_column(column, justify="right" if column in ("available", "selected") else "left")
    for bucket in summary["buckets"]:
        table.add_row(*(str(bucket[k]) for k in [*keys, "available", "selected"]))
    console.print(table)
    counts = summary["counts"]
    console.print(f"{counts['selected']} of {counts['input']} pairs → [bold]{args.out}[/bold]"
                  + (f", {counts['remaining']} → [bold]{args.remaining}[/bold]" if args.remaining else ""))
    return 0


def add_corpus_parser(sub) -> None:
    """`sdscore corpus stratify MANIFEST --out BENCH.parquet [...]`."""
    corpus = sub.add_parser("corpus", help="build benchmark manifests from a corpus")
    tools = corpus.add_subparsers(dest="tool", required=True)
    stratify = tools.add_parser("stratify", help="at most K reward pairs per (source, category) bucket (ESDR-Bench)")
    stratify.add_argument("manifest", type=Path)
    stratify.add_argument("--out", required=True, type=Path, help="benchmark manifest (Parquet or JSONL)")
    stratify.add_argument("--per-bucket", type=int, default=50)
    stratify.add_argument("--by", default="source,category", help="comma-separated bucket columns")
    stratify.add_argument("--seed", type=int, default=0)
    stratify.add_argument("--remaining", type=Path, help="write the pairs not selected here (e.g. a training set)")
    stratify.set_defaults(func=_cmd_stratify)


def _cmd_export(args: argparse.Namespace) -> int:
    from sdscore.runtime.onnx_export import export_model

    written = export_model(args.model_dir, args.format, args.out, what=args.what, max_batch=args.max_batch,
                           max_length=args.max_length, fp16=args.fp16)
    for path in written:
        console.print(f"wrote [bold]{path}[/bold]")
    return 0


def add_export_parser(sub) -> None:
    """`sdscore export MODEL_DIR --format onnx|tensorrt [...]`."""
    export = sub.add_parser("export", help="export a reward model (or its pooling + head) to ONNX / TensorRT")
    export.add_argument("model_dir", type=Path)
    export.add_argument("--format", choices=["onnx", "tensorrt"], default="onnx")
    export.add_argument("--out", type=Path, help="output folder (default MODEL_DIR/export)")
    export.add_argument("--what", choices=["model", "head"], default="model",
                        help="model: the whole dense model (compact); head: pooling + head over hidden states")
    export.add_argument("--max-batch", type=int, default=64, help="TensorRT profile: largest batch")
    export.add_argument("--max-length", type=int, default=4096, help="TensorRT profile: longest sequence")
    export.add_argument("--fp16", action="store_true", help="TensorRT: allow fp16 kernels")
    export.set_defaults(func=_cmd_export)


def _cmd_train_reward(args: argparse.Namespace) -> int:
    import json

    from sdscore.protocols.reward_training import run_train, run_train_head

    with stage_progress() as progress:
        if args.head_only:
            if args.init is None:
                raise ValueError("--head-only needs --init BASE_MODEL_DIR (the model whose pooled states are used)")
            options = {k: str(v) for k, v in (("base", args.base), ("system_prompt", args.system_prompt)) if v}
            summary = run_train_head(
                args.manifest, args.out, args.init, pooled=args.pooled, eval_fraction=args.eval_fraction,
                model_options=options, progress=progress, lr=args.lr, epochs=args.epochs, seed=args.seed,
                center_lambda=args.center_lambda,
            )
        else:
            summary = run_train(
                args.manifest, args.out, init=args.init, eval_manifest=args.eval, progress=progress,
                lr=args.lr, epochs=args.epochs, max_steps=args.max_steps, batch_size=args.batch_size,
                warmup_ratio=args.warmup_ratio, weight_decay=args.weight_decay, max_grad_norm=args.grad_clip,
                eval_every=args.eval_every, eval_fraction=args.eval_fraction, center_lambda=args.center_lambda,
                seed=args.seed, device=args.device,
            )
    console.print_json(json.dumps(summary, default=str))
    console.print(f"model → [bold]{args.out}[/bold]")
    return 0


def add_train_parser(sub) -> None:
    """`sdscore train reward MANIFEST --out DIR [...]`."""
    train = sub.add_parser("train", help="train a reward model (Bradley–Terry + center loss)")
    kinds = train.add_subparsers(dest="protocol", required=True)
    reward = kinds.add_parser("reward", help="train on a reward-pairs manifest")
    reward.add_argument("manifest", type=Path)
    reward.add_argument("--out", required=True, type=Path, help="model folder (best checkpoint by eval loss)")
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
