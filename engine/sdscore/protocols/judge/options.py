"""`sdscore score judge` options: the JudgeScorer's settings on the command line."""

from __future__ import annotations

import argparse
from pathlib import Path

from sdscore.audio.checks import DEFAULT_MAX_AUDIO_SECONDS, MAX_AUDIO_SECONDS_HELP
from sdscore.llm_judges.cli_types import positive_seconds
from sdscore.llm_judges.client import DEFAULT_TIMEOUT_S
from sdscore.protocols.judge.blueprint_view import check_groups
from sdscore.protocols.judge.choices import PITCH_TRACKERS
from sdscore.protocols.mode_options import refuse_other_modes_options

#: options only the LLM judge reads (the rule judge would ignore them)
_OPENAI = ("openai",)
USED_BY = {name: _OPENAI for name in ("base_url", "model", "mode", "prompt_file", "labels", "drop_group",
                                      "concurrency", "timeout")}


def add_score_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--judge", choices=["rule", "openai"], default="rule", help="rule = offline baseline")
    parser.add_argument("--fusion", choices=["speakbench", "speakbench-paper", "s2sarena", "majority"],
                        default="speakbench")
    parser.add_argument("--base-url", help="OpenAI-compatible endpoint (or SDSCORE_JUDGE_BASE_URL)")
    parser.add_argument("--model", help="judge model name")
    parser.add_argument("--mode", choices=["blueprint", "transcript", "audio"], default="blueprint")
    parser.add_argument("--prompt-file", type=Path, help="your own prompt ([system]/[user] sections)")
    parser.add_argument("--instruction-source", choices=["text", "asr"], default="text")
    parser.add_argument("--labels", choices=["typed", "original"], default="typed",
                        help="typed: C/VQ/P labels with typed ties, fused (TRACE); original: one overall "
                             "1 / 2 / tie label, as the original SpeakBench/S2S-Arena labels (TRACE Tab. 1)")
    parser.add_argument("--drop-group", metavar="GROUP[,GROUP]", default="",
                        help="blueprint mode: leave these feature groups out of the blueprints the judge sees "
                             "(TRACE's feature ablation, Tab. 12): emotion, accent, quality, properties")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight per worker")
    parser.add_argument("--cache-dir", type=Path, help="blueprint and reply caches")
    parser.add_argument("--timeout", type=positive_seconds, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                        help=f"LLM judge: deadline per HTTP attempt, from sending to the whole reply; one "
                             f"past it is retried with backoff (default {DEFAULT_TIMEOUT_S:g})")
    parser.add_argument("--pitch", choices=PITCH_TRACKERS, default="yin",
                        help="blueprint pitch tracker: yin = batched YIN with Praat's 75-600 Hz band and voicing "
                             "rule (median F0 checked against Praat on real voices); aubio = the TRACE authors' "
                             "tracker (aubio yin, 80-300 Hz, confidence >= 0.8), for blueprint fidelity")
    parser.add_argument("--max-audio-seconds", type=float, default=DEFAULT_MAX_AUDIO_SECONDS,
                        help=MAX_AUDIO_SECONDS_HELP)


def score_settings(args: argparse.Namespace) -> dict:
    refuse_other_modes_options(args, add_score_options, "judge", USED_BY)
    return {"judge": args.judge, "fusion": args.fusion, "base_url": args.base_url, "model": args.model,
            "mode": args.mode, "prompt_file": args.prompt_file, "instruction_source": args.instruction_source,
            "labels": args.labels, "drop_groups": list(check_groups(args.drop_group)),
            "concurrency": args.concurrency, "cache_dir": args.cache_dir, "timeout_s": args.timeout,
            "max_audio_seconds": args.max_audio_seconds, "pitch": args.pitch}
