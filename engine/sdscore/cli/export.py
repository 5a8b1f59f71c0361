"""`sdscore export`: a reward model (or its pooling + head) to ONNX / TensorRT."""

from __future__ import annotations

import argparse
from pathlib import Path

from sdscore.cli.console import console
from sdscore.cli.outputs import add_overwrite_option, output_plan


def _cmd_export(args: argparse.Namespace) -> int:
    from sdscore.runtime.reward.onnx_export import export_model

    from sdscore.output_paths import staged_folder

    out = Path(args.model_dir) / "export" if args.out is None else args.out
    out = output_plan(args, "sdscore export").folder(out, "--out")
    with staged_folder(out, overwrite=args.overwrite, command="sdscore export") as stage:
        written = export_model(args.model_dir, args.format, stage, what=args.what, max_batch=args.max_batch,
                               max_length=args.max_length, fp16=args.fp16)
    for path in written:
        console.print(f"wrote [bold]{out / Path(path).relative_to(stage)}[/bold]")
    return 0


def add_export_parser(sub) -> None:
    """`sdscore export MODEL_DIR --format onnx|tensorrt [...]`."""
    export = sub.add_parser("export", help="export a reward model (or its pooling + head) to ONNX / TensorRT")
    export.add_argument("model_dir", type=Path)
    export.add_argument("--format", choices=["onnx", "tensorrt"], default="onnx")
    export.add_argument("--out", help="output folder (default MODEL_DIR/export)")
    add_overwrite_option(export)
    export.add_argument("--what", choices=["model", "head"], default="model",
                        help="model: the whole dense model (compact); head: pooling + head over hidden states")
    export.add_argument("--max-batch", type=int, default=64, help="TensorRT profile: largest batch")
    export.add_argument("--max-length", type=int, default=4096, help="TensorRT profile: longest sequence")
    export.add_argument("--fp16", action="store_true", help="TensorRT: allow fp16 kernels")
    export.set_defaults(func=_cmd_export)
