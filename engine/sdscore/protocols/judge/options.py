"""`sdscore score judge` options: the JudgeScorer's settings on the command line."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_score_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--judge", choices=["rule", "openai"], default="rule", help="rule = offline baseline")
    parser.add_argument("--fusion", choices=["speakbench", "speakbench-paper", "s2sarena", "majority"],
                        default="speakbench")
    parser.add_argument("--base-url", help="OpenAI-compatible endpoint (or SDSCORE_JUDGE_BASE_URL)")
    parser.add_argument("--model", help="judge model name")
    parser.add_argument("--mode", choices=["blueprint", "transcript", "audio"], default="blueprint")
    parser.add_argument("--prompt-file", type=Path, help="your own prompt ([system]/[user] sections)")
    parser.add_argument("--instruction-source", choices=["text", "asr"], default="text")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight per worker")
    parser.add_argument("--cache-dir", type=Path, help="blueprint and reply caches")


def score_settings(args: argparse.Namespace) -> dict:
    return {"judge": args.judge, "fusion": args.fusion, "base_url": args.base_url, "model": args.model,
            "mode": args.mode, "prompt_file": args.prompt_file, "instruction_source": args.instruction_source,
            "concurrency": args.concurrency, "cache_dir": args.cache_dir}
