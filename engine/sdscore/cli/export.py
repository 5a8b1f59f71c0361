"""`sdscore export`: a reward model (or its pooling + head) to ONNX / TensorRT."""

from __future__ import annotations

import argparse
from pathlib import Path

from sdscore.cli.console import console


def _cmd_export(args: argparse.Namespace) -> int:
    from sdscore.runtime.reward.onnx_export import export_model

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
