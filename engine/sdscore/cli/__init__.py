"""`sdscore <command>`: parses arguments, then calls the same API a user would (one module per verb)."""

from __future__ import annotations

import os
import signal
import sys


def _interrupted_while_starting(signum, frame) -> None:  # noqa: ARG001 - a signal handler's signature
    """Ctrl-C while the CLI's modules load (a second or two): a quiet exit, not an import traceback."""
    os.write(2, b"interrupted\n")
    os._exit(130)


# Only when this process is the `sdscore` program (not a test or an application importing the CLI):
# main() restores Python's handler once it can report an interrupt itself.
if os.path.basename(sys.argv[0]) in ("sdscore", "-m") and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, _interrupted_while_starting)

import argparse  # noqa: E402 - after the start-up handler, so these imports are covered by it
import json  # noqa: E402

from rich.markup import escape
from rich.table import Table  # noqa: E402

from sdscore.cli.bench import add_bench_parser
from sdscore.cli.console import console, stage_progress
from sdscore.cli.corpus import add_corpus_parser
from sdscore.cli.export import add_export_parser
from sdscore.cli.outputs import output_plan
from sdscore.cli.report import add_report_parser
from sdscore.cli.score import add_eval_parser, add_score_parser
from sdscore.cli.serve import add_serve_parser
from sdscore.cli.train import add_train_parser
from sdscore.errors import SdscoreError


def _cmd_synth(args: argparse.Namespace) -> int:
    from sdscore.output_paths import claim_folder
    from sdscore.synth import build_corpus

    out = output_plan(args, "sdscore synth").reused_folder(args.out, "--out")
    claim_folder(out, "sdscore synth", "--out")
    with stage_progress() as progress:
        summary = build_corpus(out, seed=args.seed, size=args.size, progress=progress)
    console.print(f"corpus written to [bold]{out}[/bold]: {json.dumps(summary['counts'])}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from sdscore.demo import run_demo
    from sdscore.output_paths import claim_folder

    out = output_plan(args, "sdscore demo").reused_folder(args.out, "--out")
    claim_folder(out, "sdscore demo", "--out")
    with stage_progress() as progress:
        report = run_demo(out, seed=args.seed, size=args.size, progress=progress)
    _print_demo(report)
    console.print(f"demo summary: [bold]{out / 'demo.json'}[/bold]")
    if report.get("html_report"):
        console.print(f"HTML report: [bold]{report['html_report']}[/bold]")
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
        if stage.get("table"):  # a paper's table as plain text (naturalness: Table III per system)
            console.print(stage["table"], markup=False, highlight=False, soft_wrap=True)
    for name, error in report.get("failed_stages", {}).items():
        console.print(f"[red]stage {name} failed:[/red] {error}")


def selected_protocol(argv: list[str] | None) -> str | None:
    """The protocol of a `score PROTOCOL ...` / `eval PROTOCOL ...` command line, else None."""
    from sdscore.protocols.registry import PROTOCOLS

    if argv is not None and len(argv) >= 2 and argv[0] in ("score", "eval") and argv[1] in PROTOCOLS:
        return argv[1]
    return None


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The whole CLI parser; given the command line of a `score`/`eval` of one protocol, only that
    protocol's options are declared (the others keep their name and help), so a command imports the
    options, settings and choices of the protocol it runs and of no other."""
    from sdscore import __version__

    parser = argparse.ArgumentParser(prog="sdscore", description=__doc__)
    parser.add_argument("--version", action="version", version=f"sdscore {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    synth = sub.add_parser("synth", help="write a deterministic synthetic spoken-dialogue corpus")
    synth.add_argument("--out", required=True, help="output folder (new, empty, or an earlier `sdscore synth` "
                       "folder, whose files are reused as a render cache)")
    synth.add_argument("--seed", type=int, default=0)
    synth.add_argument("--size", choices=["tiny", "small", "medium"], default="small")
    synth.set_defaults(func=_cmd_synth)

    demo = sub.add_parser("demo", help="synth + every built protocol on bundled defaults")
    demo.add_argument("--out", default="out/demo", help="output folder (new, empty, or an earlier demo's)")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--size", choices=["tiny", "small", "medium"], default="small")
    demo.set_defaults(func=_cmd_demo)

    only = selected_protocol(argv)
    add_score_parser(sub, only)
    add_eval_parser(sub, only)
    add_corpus_parser(sub)
    add_export_parser(sub)
    add_report_parser(sub)
    add_train_parser(sub)
    add_bench_parser(sub)
    add_serve_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    if signal.getsignal(signal.SIGINT) is _interrupted_while_starting:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # from here an interrupt is reported below
    args = None
    try:
        argv = sys.argv[1:] if argv is None else list(argv)
        args = build_parser(argv).parse_args(argv)
        return args.func(args)
    except (SdscoreError, FileNotFoundError, IsADirectoryError, ValueError) as exc:
        console.print("[red]error:[/red]", escape(str(exc)), soft_wrap=True)  # one line, however long
        return 2
    except KeyboardInterrupt:
        scoring = args is not None and args.command == "score"
        resume = " (finished windows are kept: rerun with --resume to continue)" if scoring else ""
        console.print(f"[red]interrupted[/red]{resume}")
        return 130
