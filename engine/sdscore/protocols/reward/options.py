"""`sdscore score reward` options: the RewardPairsScorer's settings on the command line."""

from __future__ import annotations

import argparse
from pathlib import Path

from sdscore.audio.checks import DEFAULT_MAX_AUDIO_SECONDS, MAX_AUDIO_SECONDS_HELP


def add_score_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", type=Path, help="reward model folder (default: the shipped compact demo model)")
    parser.add_argument("--base", type=Path, help="base Qwen2.5-Omni folder (config, tokenizer, processor)")
    parser.add_argument("--system-prompt", type=Path, help="system prompt file the checkpoint was trained with")
    parser.add_argument("--backend", choices=["auto", "torch", "onnxruntime", "tensorrt"], default="auto",
                        help="onnxruntime / tensorrt run MODEL/export/ written by `sdscore export`")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    parser.add_argument("--dtype", default="auto", help="auto (bf16 on GPU, fp32 on CPU) | float32 | bfloat16")
    parser.add_argument("--max-batch", type=int, default=16, help="episodes per forward")
    parser.add_argument("--max-tokens", type=int, help="cap on batch × longest sequence")
    parser.add_argument("--store-pooled", action="store_true", help="also store pooled states (for --head-only)")
    parser.add_argument("--max-audio-seconds", type=float, default=DEFAULT_MAX_AUDIO_SECONDS,
                        help=MAX_AUDIO_SECONDS_HELP)


def score_settings(args: argparse.Namespace) -> dict:
    return {
        "model": args.model, "base": args.base, "system_prompt": args.system_prompt, "backend": args.backend,
        "device": args.device, "dtype": args.dtype, "max_batch": args.max_batch, "max_tokens": args.max_tokens,
        "store_pooled": args.store_pooled, "max_audio_seconds": args.max_audio_seconds,
    }
