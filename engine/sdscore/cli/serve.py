"""`sdscore serve [MODEL_DIR]`: the reward model behind HTTP, micro-batched (sdscore.rl.server)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from sdscore.cli.console import console


def _cmd_serve(args: argparse.Namespace) -> int:
    from sdscore.rl.audio_paths import AudioPathPolicy
    from sdscore.rl.batcher import RewardBatcher
    from sdscore.rl.openrlhf_format import DEFAULT_STRIP_TOKENS, RewardFormat, policy_special_tokens
    from sdscore.rl.server import ServerLimits, serve
    from sdscore.runtime.reward.episode_scorer import RewardScorer

    token = os.environ.get(args.token_env) or None
    # the limits first: a bad folder or timeout is reported before the model loads
    limits = ServerLimits(max_body_bytes=int(args.max_body_mb * 1024 * 1024), request_timeout_s=args.timeout_s,
                          allow_paths=tuple(args.allow_paths or ()), error_reward=args.error_reward,
                          body_timeout_s=args.body_timeout_s, idle_timeout_s=args.idle_timeout_s,
                          max_connections=args.max_connections)
    AudioPathPolicy.allowing(limits.allow_paths)
    strip = tuple(args.strip_tokens or ())
    if args.policy_tokenizer is not None:
        strip += policy_special_tokens(args.policy_tokenizer)
    reward_format = RewardFormat(strip_tokens=strip or DEFAULT_STRIP_TOKENS, score_transform=args.score_transform,
                                 score_range=tuple(args.score_range) if args.score_range else None)
    if args.host not in ("127.0.0.1", "localhost", "::1") and token is None:
        console.print(f"[yellow]warning:[/yellow] listening on {args.host} without a token "
                      f"(set ${args.token_env} to require one)")
    if args.model is None:
        from sdscore.models.pretrained import default_model_dir

        args.model = default_model_dir()
        console.print(f"no MODEL_DIR given: serving the shipped demo model {args.model}")
    scorer = RewardScorer.from_pretrained(args.model, backend=args.backend, device=args.device)
    # the model scores on this (the main) thread and HTTP runs on another: see RewardBatcher(worker=)
    batcher = RewardBatcher(scorer, max_batch=args.max_batch, max_tokens=args.max_tokens,
                            max_wait_ms=args.max_wait_ms, max_queue=args.max_queue, worker="caller")
    auth = f"bearer token from ${args.token_env}" if token else "no token"
    paths = ("audio paths under " + ", ".join(map(str, limits.allow_paths)) if limits.allow_paths
             else "no server-local audio paths")
    console.print(f"serving {args.model} on http://{args.host}:{args.port} ({auth}; {paths}; "
                  f"max batch {args.max_batch}, max wait {args.max_wait_ms:g} ms)")
    if not serve(batcher, host=args.host, port=args.port, token=token, limits=limits, log_level=args.log_level,
                 reward_format=reward_format):
        console.print(f"[red]error:[/red] the server could not start on {args.host}:{args.port} (see the log above)")
        return 2
    return 0


def _port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        port = -1
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"expected a TCP port in 1..65535, got {value!r}")
    return port


def add_serve_parser(sub) -> None:
    serve = sub.add_parser("serve", help="serve a reward model over HTTP (micro-batched; /score, /get_reward)")
    serve.add_argument("model", nargs="?", type=Path, help="reward-model folder (default: the shipped demo model)")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    serve.add_argument("--port", type=_port, default=8000, help="TCP port (default 8000)")
    serve.add_argument("--max-batch", type=int, default=64, help="episodes per batch at most (default 64)")
    serve.add_argument("--max-wait-ms", type=float, default=5.0,
                       help="how long a batch waits for more requests after its first (default 5)")
    serve.add_argument("--max-tokens", type=int, help="estimated tokens per batch at most (default: no budget)")
    serve.add_argument("--max-queue", type=int, default=4096,
                       help="episodes waiting at most; beyond it requests get 503, and a request with more "
                            "episodes than this 413 (default 4096)")
    serve.add_argument("--max-body-mb", type=float, default=32.0, help="request body cap in MiB (default 32)")
    serve.add_argument("--timeout-s", type=float, default=120.0, help="per-request timeout (default 120 s)")
    serve.add_argument("--token-env", default="SDSCORE_SERVE_TOKEN", metavar="NAME",
                       help="environment variable holding the bearer token; when set, requests need it")
    paths = serve.add_mutually_exclusive_group()
    paths.add_argument("--allow-paths", action="append", metavar="DIR",
                       help="read server-local audio paths, but only under DIR (checked after symlinks are "
                            "resolved); repeat for more folders. Default: none (base64 audio only)")
    paths.add_argument("--no-paths", action="store_true",
                       help="base64 audio only: the default now, kept so older command lines still run")
    serve.add_argument("--body-timeout-s", type=float, default=60.0,
                       help="a request's whole body must arrive within this (else 408; default 60 s)")
    serve.add_argument("--idle-timeout-s", type=float, default=15.0,
                       help="close a connection with no request in progress after this (default 15 s)")
    serve.add_argument("--max-connections", type=int, default=1024,
                       help="connections open at once; more are closed as they arrive (default 1024)")
    serve.add_argument("--error-reward", type=float,
                       help="/get_reward: the reward of a sample that cannot be scored, answered with 200 and "
                            "the reason (default: answer 422)")
    serve.add_argument("--policy-tokenizer", type=Path, metavar="DIR",
                       help="/get_reward: strip the special tokens of the policy's tokenizer in DIR (a local "
                            "folder) from queries and prompts")
    serve.add_argument("--strip-tokens", action="append", metavar="TOKEN",
                       help="/get_reward: strip TOKEN from queries and prompts; repeatable. Default, without "
                            "this or --policy-tokenizer: the EOS, padding and chat-template tokens of common "
                            "policies (</s>, <|im_end|>, <|eot_id|>, ...)")
    serve.add_argument("--score-transform", default="none", choices=["none", "sigmoid", "minmax"],
                       help="/get_reward: what 'scores' (OpenRLHF's dynamic-filter input) holds: the rewards "
                            "(none, the default), 1/(1+e^-reward) (sigmoid) or the reward's place in "
                            "--score-range clipped to 0..1 (minmax); 'rewards' stay raw")
    serve.add_argument("--score-range", type=float, nargs=2, metavar=("LOW", "HIGH"),
                       help="/get_reward: the reward range --score-transform minmax maps to 0..1")
    serve.add_argument("--backend", default="auto", choices=["auto", "torch", "onnxruntime", "tensorrt"])
    serve.add_argument("--device", default="auto")
    serve.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    serve.set_defaults(func=_cmd_serve)
