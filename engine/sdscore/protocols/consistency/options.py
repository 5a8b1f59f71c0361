"""`sdscore score consistency` options: the embedding Scorer's or the LALM judge's settings on the command line.

The LALM judge's endpoint options keep the names of `sdscore score judge` (--base-url, --model,
--prompt-file, --concurrency, --cache-dir, --timeout).
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
from sdscore.protocols.consistency.choices import LALM_TASKS, METHODS, PERMUTATIONS
from sdscore.protocols.mode_options import refuse_other_modes_options

#: options of one --judge only (the other would ignore them)
USED_BY = {
    **{name: ("embedding",) for name in ("embedder", "model_dir", "method", "threshold")},
    **{name: ("openai",) for name in ("base_url", "model", "task", "no_reference", "with_text_context", "per_turn",
                                       "permutations", "seed", "prompt_file", "concurrency", "timeout",
                                       "audio_rate", "max_request_bytes")},
}


def add_score_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--judge", choices=["embedding", "openai"], default="embedding",
                        help="embedding: speaker-embedding methods (offline); openai: an audio LLM at an "
                             "OpenAI-compatible endpoint")
    parser.add_argument("--embedder", choices=["ge2e", "ecapa", "wavlm"], default="ge2e")
    parser.add_argument("--model-dir", type=Path, help="local model folder (ecapa, wavlm)")
    parser.add_argument("--method", choices=list(METHODS), default="pairwise",
                        help="centroid: mean of unit-normalised embeddings; centroid-raw: mean of raw ones")
    parser.add_argument("--threshold", type=float,
                        help="default: the paper's (pairwise 0.4, centroid 0.3, reference 0.4), but 0.56 for "
                             "GE2E pairwise/reference (chosen on real voices: GE2E cosines run high)")
    parser.add_argument("--cache-dir", type=Path, help="embedding cache / LLM reply cache (keyed by content)")
    parser.add_argument("--max-audio-seconds", type=float, default=DEFAULT_MAX_AUDIO_SECONDS,
                        help=MAX_AUDIO_SECONDS_HELP)
    lalm = parser.add_argument_group("LALM judge (--judge openai)")
    lalm.add_argument("--base-url", help="OpenAI-compatible endpoint (or SDSCORE_JUDGE_BASE_URL)")
    lalm.add_argument("--model", help="judge model name")
    lalm.add_argument("--task", choices=list(LALM_TASKS), default="auto",
                      help="auto: detection rows get the YES/NO question, discrimination rows the A/B/C one")
    lalm.add_argument("--no-reference", action="store_true", help="leave the reference clip out")
    lalm.add_argument("--with-text-context", action="store_true",
                      help="interleave the interlocutors' turns as text (dialogue_speakers/dialogue_texts)")
    lalm.add_argument("--per-turn", action="store_true", help="one call per turn against the reference")
    lalm.add_argument("--permutations", choices=list(PERMUTATIONS), default="one",
                      help="one: a seeded random option order per row; all: every order (position bias)")
    lalm.add_argument("--seed", type=int, default=0, help="seed of the option orders")
    lalm.add_argument("--prompt-file", type=Path, help="your own prompt for the --task asked (see the README)")
    lalm.add_argument("--concurrency", type=int, default=8, help="requests in flight per worker")
    lalm.add_argument("--timeout", type=positive_seconds, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                      help=f"deadline per HTTP attempt, from sending to the whole reply (default {DEFAULT_TIMEOUT_S:g})")
    lalm.add_argument("--audio-rate", type=int, default=DEFAULT_AUDIO_RATE, help="Hz the clips are sent at")
    lalm.add_argument("--max-request-bytes", type=int, default=DEFAULT_MAX_REQUEST_BYTES,
                      help="largest base64 audio payload of one request; a row over it fails")


def score_settings(args: argparse.Namespace) -> dict:
    refuse_other_modes_options(args, add_score_options, "judge", USED_BY)
    if args.judge == "openai":
        refuse_other_modes_options(args, add_score_options, "permutations", {"seed": ("one",)})
        return {"judge": "openai", "model": args.model, "base_url": args.base_url, "task": args.task,
                "reference": not args.no_reference, "text_context": args.with_text_context,
                "per_turn": args.per_turn, "permutations": args.permutations, "seed": args.seed,
                "prompt_file": args.prompt_file, "concurrency": args.concurrency, "cache_dir": args.cache_dir,
                "timeout_s": args.timeout, "audio_rate": args.audio_rate,
                "max_request_bytes": args.max_request_bytes, "max_audio_seconds": args.max_audio_seconds}
    return {"embedder": args.embedder, "model_dir": args.model_dir, "method": args.method,
            "threshold": args.threshold, "cache_dir": args.cache_dir, "max_audio_seconds": args.max_audio_seconds}
