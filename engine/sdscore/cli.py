"""`sdscore <command>`: parses arguments, then calls the same API a user would."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.table import Table

from sdscore.cli_common import console, report_rows, stage_progress
from sdscore.cli_reward import (
    add_corpus_parser,
    add_export_parser,
    add_score_reward_parser,
    add_train_parser,
)
from sdscore.errors import SdscoreError


def _cmd_synth(args: argparse.Namespace) -> int:
    from sdscore.synth import build_corpus

    with stage_progress() as progress:
        summary = build_corpus(args.out, seed=args.seed, size=args.size, progress=progress)
    console.print(f"corpus written to [bold]{args.out}[/bold]: {json.dumps(summary['counts'])}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from sdscore.demo import run_demo

    with stage_progress() as progress:
        report = run_demo(args.out, seed=args.seed, size=args.size, progress=progress)
    _print_demo(report)
    console.print(f"demo report: [bold]{Path(args.out) / 'demo.json'}[/bold]")
    return 0 if report["ok"] else 1


def _print_demo(report: dict) -> None:
    table = Table(title="synthetic corpus: load-and-summarise pass")
    for column in ("manifest", "rows", "audio files", "failed", "audio hours", "load x realtime"):
        table.add_column(column, justify="left" if column == "manifest" else "right")
    for name, m in report["corpus_summary"]["manifests"].items():
        realtime = "-" if m["realtime_factor"] is None else f"{m['realtime_factor']:.0f}"
        table.add_row(
            name, str(m["rows"]), str(m["audio_files"]), str(m["failed"]), f"{m['audio_seconds'] / 3600:.3f}", realtime
        )
    console.print(table)
    for stage in report.get("stages", []):
        metrics = Table(title=f"{stage['protocol']}: {stage['title']}")
        metrics.add_column("metric")
        metrics.add_column("value", justify="right")
        for key, value in stage["headline"].items():
            metrics.add_row(key, "-" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value))
        console.print(metrics)
    for name, error in report.get("failed_stages", {}).items():
        console.print(f"[red]stage {name} failed:[/red] {error}")


def _cmd_score(args: argparse.Namespace) -> int:
    with stage_progress() as progress:
        if args.protocol == "consistency":
            from sdscore.protocols.consistency import run_score

            frame = run_score(
                args.manifest,
                args.out,
                embedder=args.embedder,
                method=args.method,
                threshold=args.threshold,
                model_dir=args.model_dir,
                cache_dir=args.cache_dir,
                progress=progress,
            )
        else:
            from sdscore.protocols.judge import run_score

            frame = run_score(
                args.manifest,
                args.out,
                judge=args.judge,
                fusion=args.fusion,
                base_url=args.base_url,
                model=args.model,
                mode=args.mode,
                prompt_file=args.prompt_file,
                cache_dir=args.cache_dir,
                concurrency=args.concurrency,
                instruction_source=args.instruction_source,
                progress=progress,
            )
    return report_rows(frame, args.out)


def _cmd_eval(args: argparse.Namespace) -> int:
    first = args.results[0]
    if args.protocol != "judge" and len(args.results) > 1:
        raise SdscoreError(f"eval {args.protocol} takes one results file, got {len(args.results)}")
    if args.protocol == "reward":
        from sdscore.protocols.reward import run_eval

        metrics = run_eval(first, args.out, plot_path=args.plot)
    elif args.protocol == "consistency":
        from sdscore.protocols.consistency import run_eval

        metrics = run_eval(first, args.out, plot_path=args.plot)
    elif args.protocol == "judge":
        from sdscore.protocols.judge import run_eval

        metrics = run_eval(args.results, args.out, plots_dir=args.plot, seed=args.seed)
    else:
        from sdscore.protocols.arena import run_eval

        metrics = run_eval(first, args.out, seed=args.seed)
    console.print(f"metrics ({len(json.dumps(metrics))} bytes of JSON) → [bold]{args.out}[/bold]")
    return 0


def _add_score_parsers(sub) -> None:
    score = sub.add_parser("score", help="score a manifest; writes one output row per input row")
    protocols = score.add_subparsers(dest="protocol", required=True)

    consistency = protocols.add_parser("consistency", help="SpeakerSleuth speaker consistency")
    consistency.add_argument("manifest", type=Path)
    consistency.add_argument("--out", required=True, type=Path, help="results Parquet")
    consistency.add_argument("--embedder", choices=["ge2e", "ecapa", "wavlm"], default="ge2e")
    consistency.add_argument("--model-dir", type=Path, help="local model folder (ecapa, wavlm)")
    consistency.add_argument("--method", choices=["pairwise", "centroid", "reference"], default="pairwise")
    consistency.add_argument("--threshold", type=float, help="default: the paper's (0.4 / 0.3 / 0.4)")
    consistency.add_argument("--cache-dir", type=Path, help="embedding cache (keyed by audio content)")

    judge = protocols.add_parser("judge", help="TRACE judging of response pairs")
    judge.add_argument("manifest", type=Path)
    judge.add_argument("--out", required=True, type=Path, help="results Parquet")
    judge.add_argument("--judge", choices=["rule", "openai"], default="rule", help="rule = offline baseline")
    judge.add_argument(
        "--fusion", choices=["speakbench", "speakbench-paper", "s2sarena", "majority"], default="speakbench"
    )
    judge.add_argument("--base-url", help="OpenAI-compatible endpoint (or SDSCORE_JUDGE_BASE_URL)")
    judge.add_argument("--model", help="judge model name")
    judge.add_argument("--mode", choices=["blueprint", "transcript", "audio"], default="blueprint")
    judge.add_argument("--prompt-file", type=Path, help="your own prompt ([system]/[user] sections)")
    judge.add_argument("--instruction-source", choices=["text", "asr"], default="text")
    judge.add_argument("--concurrency", type=int, default=8)
    judge.add_argument("--cache-dir", type=Path, help="blueprint and reply caches")
    score.set_defaults(func=_cmd_score)
    add_score_reward_parser(protocols)


def _add_eval_parser(sub) -> None:
    ev = sub.add_parser("eval", help="metrics of results files (arena: of a battles manifest)")
    ev.add_argument("protocol", choices=["reward", "judge", "consistency", "arena"])
    ev.add_argument("results", nargs="+", type=Path, help="results file(s); judge accepts several")
    ev.add_argument("--out", required=True, type=Path, help="METRICS.json")
    ev.add_argument("--plot", type=Path, help="PNG (reward, consistency) or folder of PNGs (judge)")
    ev.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    ev.set_defaults(func=_cmd_eval)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sdscore", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    synth = sub.add_parser("synth", help="write a deterministic synthetic spoken-dialogue corpus")
    synth.add_argument("--out", required=True, type=Path, help="output folder")
    synth.add_argument("--seed", type=int, default=0)
    synth.add_argument("--size", choices=["tiny", "small", "medium"], default="small")
    synth.set_defaults(func=_cmd_synth)

    demo = sub.add_parser("demo", help="synth + every built protocol on bundled defaults")
    demo.add_argument("--out", type=Path, default=Path("out/demo"), help="output folder")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--size", choices=["tiny", "small", "medium"], default="small")
    demo.set_defaults(func=_cmd_demo)

    _add_score_parsers(sub)
    _add_eval_parser(sub)
    add_corpus_parser(sub)
    add_export_parser(sub)
    add_train_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (SdscoreError, FileNotFoundError, IsADirectoryError, ValueError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
