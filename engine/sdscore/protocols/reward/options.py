"""`sdscore score reward` options: the RewardPairsScorer's settings on the command line, or with
--judge openai the zero-shot audio-LLM judge's (endpoint options named as in `score consistency`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from sdscore.audio.checks import DEFAULT_MAX_AUDIO_SECONDS, MAX_AUDIO_SECONDS_HELP
from sdscore.llm_judges.audio_request import DEFAULT_AUDIO_RATE, DEFAULT_MAX_REQUEST_BYTES
from sdscore.llm_judges.cli_types import positive_seconds
from sdscore.llm_judges.client import DEFAULT_TIMEOUT_S
from sdscore.protocols.mode_options import refuse_other_modes_options

#: options of one --judge only (the other would ignore them); --model names either's model
USED_BY = {
    **{name: ("reward-model",) for name in ("base", "system_prompt", "backend", "device", "dtype", "max_batch",
                                             "max_tokens", "no_prefix_sharing", "store_pooled")},
    **{name: ("openai",) for name in ("base_url", "orders", "seed", "prompt_file", "concurrency", "cache_dir",
                                       "timeout", "audio_rate", "max_request_bytes")},
}


def add_score_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--judge", choices=["reward-model", "openai"], default="reward-model",
                        help="reward-model: a reward model scores each episode; openai: an audio LLM at an "
                             "OpenAI-compatible endpoint says which episode of each pair is better (zero-shot baseline)")
    parser.add_argument("--model", help="reward model folder (default: the shipped compact demo model); "
                                        "with --judge openai: the judge model's name")
    parser.add_argument("--base", type=Path, help="base Qwen2.5-Omni folder (config, tokenizer, processor)")
    parser.add_argument("--system-prompt", type=Path, help="system prompt file the checkpoint was trained with")
    parser.add_argument("--backend", choices=["auto", "torch", "onnxruntime", "tensorrt"], default="auto",
                        help="onnxruntime / tensorrt run MODEL/export/ written by `sdscore export`")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    parser.add_argument("--dtype", default="auto", help="auto (bf16 on GPU, fp32 on CPU) | float32 | bfloat16")
    parser.add_argument("--max-batch", type=int, default=16, help="episodes per forward")
    parser.add_argument("--max-tokens", type=int, help="cap on positions per batch: batch × longest sequence, or the "
                        "summed length for models that pack (SDiaReward; default from free device memory)")
    parser.add_argument("--no-prefix-sharing", action="store_true",
                        help="score each episode whole (by default a pair's shared context runs once)")
    parser.add_argument("--store-pooled", action="store_true", help="also store pooled states (for --head-only)")
    parser.add_argument("--max-audio-seconds", type=float, default=DEFAULT_MAX_AUDIO_SECONDS,
                        help=MAX_AUDIO_SECONDS_HELP)
    judge = parser.add_argument_group("audio-LLM judge (--judge openai)")
    judge.add_argument("--base-url", help="OpenAI-compatible endpoint (or SDSCORE_JUDGE_BASE_URL)")
    judge.add_argument("--orders", choices=["both", "shown"], default="both",
                       help="both: ask with the chosen episode first and again with it second; shown: one "
                            "order per pair, drawn with --seed")
    judge.add_argument("--seed", type=int, default=0, help="seed of the orders drawn with --orders shown")
    judge.add_argument("--prompt-file", type=Path, help="your own pair prompt, used for every criterion")
    judge.add_argument("--concurrency", type=int, default=8, help="requests in flight per worker")
    judge.add_argument("--cache-dir", type=Path, help="cache of validated replies (keyed by request content)")
    judge.add_argument("--timeout", type=positive_seconds, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                       help=f"deadline per HTTP attempt, from sending to the whole reply (default {DEFAULT_TIMEOUT_S:g})")
    judge.add_argument("--audio-rate", type=int, default=DEFAULT_AUDIO_RATE, help="Hz the clips are sent at")
    judge.add_argument("--max-request-bytes", type=int, default=DEFAULT_MAX_REQUEST_BYTES,
                       help="largest base64 audio payload of one request; a pair over it fails")


def score_settings(args: argparse.Namespace) -> dict:
    refuse_other_modes_options(args, add_score_options, "judge", USED_BY)
    if args.judge == "openai":
        refuse_other_modes_options(args, add_score_options, "orders", {"seed": ("shown",)})
        return {"judge": "openai", "model": args.model, "base_url": args.base_url, "orders": args.orders,
                "seed": args.seed, "prompt_file": args.prompt_file, "concurrency": args.concurrency,
                "cache_dir": args.cache_dir, "timeout_s": args.timeout, "audio_rate": args.audio_rate,
                "max_request_bytes": args.max_request_bytes, "max_audio_seconds": args.max_audio_seconds}
    return {
        "model": None if args.model is None else Path(args.model), "base": args.base,
        "system_prompt": args.system_prompt, "backend": args.backend,
        "device": args.device, "dtype": args.dtype, "max_batch": args.max_batch, "max_tokens": args.max_tokens,
        "store_pooled": args.store_pooled, "max_audio_seconds": args.max_audio_seconds,
        "share_prefixes": not args.no_prefix_sharing,
    }
