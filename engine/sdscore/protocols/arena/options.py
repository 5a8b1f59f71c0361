"""`sdscore score arena` options: the audio judge's settings on the command line.

The endpoint options keep the names of `sdscore score consistency --judge openai` (--base-url, --model,
--prompt-file, --seed, --concurrency, --cache-dir, --timeout, --audio-rate, --max-request-bytes).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sdscore.audio.checks import DEFAULT_MAX_AUDIO_SECONDS, MAX_AUDIO_SECONDS_HELP
from sdscore.llm_judges.audio_request import (
    DEFAULT_AUDIO_RATE,
    DEFAULT_MAX_REQUEST_BYTES,
)
from sdscore.llm_judges.cli_types import positive_seconds
from sdscore.llm_judges.client import DEFAULT_TIMEOUT_S
from sdscore.protocols.arena.choices import ORDERS
from sdscore.protocols.mode_options import refuse_other_modes_options


def add_score_options(parser: argparse.ArgumentParser) -> None:
    judge = parser.add_argument_group("audio judge")
    judge.add_argument("--judge", choices=["openai"], required=True,
                       help="openai: an audio LLM at an OpenAI-compatible endpoint judges each battle")
    judge.add_argument("--base-url", help="OpenAI-compatible endpoint (or SDSCORE_JUDGE_BASE_URL)")
    judge.add_argument("--model", required=True, help="judge model name (the results' judge column)")
    judge.add_argument("--orders", choices=list(ORDERS), default="both",
                       help="both: A-B and B-A (position consistency); shown: A-B only; random: one seeded order")
    judge.add_argument("--allow-ties", action="store_true",
                       help="the judge may answer Tie (bundled prompt: First, Second or Tie)")
    judge.add_argument("--seed", type=int, default=0, help="seed of --orders random")
    judge.add_argument("--prompt-file", type=Path, help="your own prompt (sections: see the README)")
    judge.add_argument("--cache-dir", type=Path, help="reply cache (keyed by request content)")
    judge.add_argument("--concurrency", type=int, default=8, help="requests in flight per worker")
    judge.add_argument("--timeout", type=positive_seconds, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                       help="deadline per HTTP attempt, from sending to the whole reply "
                            f"(default {DEFAULT_TIMEOUT_S:g})")
    judge.add_argument("--audio-rate", type=int, default=DEFAULT_AUDIO_RATE, help="Hz the clips are sent at")
    judge.add_argument("--max-request-bytes", type=int, default=DEFAULT_MAX_REQUEST_BYTES,
                       help="largest base64 audio payload of one request; a battle over it fails")
    judge.add_argument("--max-audio-seconds", type=float, default=DEFAULT_MAX_AUDIO_SECONDS,
                       help=MAX_AUDIO_SECONDS_HELP)


def score_settings(args: argparse.Namespace) -> dict:
    refuse_other_modes_options(args, add_score_options, "orders", {"seed": ("random",)})
    return {"judge": args.judge, "model": args.model, "base_url": args.base_url, "orders": args.orders,
            "allow_ties": args.allow_ties, "seed": args.seed, "prompt_file": args.prompt_file,
            "concurrency": args.concurrency, "cache_dir": args.cache_dir, "timeout_s": args.timeout,
            "audio_rate": args.audio_rate, "max_request_bytes": args.max_request_bytes,
            "max_audio_seconds": args.max_audio_seconds}
