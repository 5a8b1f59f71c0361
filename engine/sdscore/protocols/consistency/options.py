"""`sdscore score consistency` options: the ConsistencyScorer's settings on the command line."""

from __future__ import annotations

import argparse
from pathlib import Path

from sdscore.audio.checks import DEFAULT_MAX_AUDIO_SECONDS, MAX_AUDIO_SECONDS_HELP


def add_score_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--embedder", choices=["ge2e", "ecapa", "wavlm"], default="ge2e")
    parser.add_argument("--model-dir", type=Path, help="local model folder (ecapa, wavlm)")
    parser.add_argument("--method", choices=["pairwise", "centroid", "reference"], default="pairwise")
    parser.add_argument("--threshold", type=float, help="default: the paper's (0.4 / 0.3 / 0.4)")
    parser.add_argument("--cache-dir", type=Path, help="embedding cache (keyed by audio content)")
    parser.add_argument("--max-audio-seconds", type=float, default=DEFAULT_MAX_AUDIO_SECONDS,
                        help=MAX_AUDIO_SECONDS_HELP)


def score_settings(args: argparse.Namespace) -> dict:
    return {"embedder": args.embedder, "model_dir": args.model_dir, "method": args.method,
            "threshold": args.threshold, "cache_dir": args.cache_dir, "max_audio_seconds": args.max_audio_seconds}
