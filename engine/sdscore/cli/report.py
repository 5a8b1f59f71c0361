"""`sdscore report`: one evaluation (METRICS.json + its results files) as a self-contained HTML file."""

from __future__ import annotations

import argparse
from pathlib import Path

from sdscore.cli.console import console
from sdscore.cli.outputs import add_overwrite_option, output_plan
from sdscore.protocols.registry import PROTOCOLS


def _megabytes(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not number >= 0:
        raise argparse.ArgumentTypeError(f"expected a size in MB >= 0, got {value!r}")
    return number


def add_audio_options(parser: argparse.ArgumentParser) -> None:
    """How much audio the report embeds (base64 WAV); clips past the limits are linked by file: URI."""
    parser.add_argument("--audio-clip-mb", type=_megabytes, default=2.0, metavar="MB",
                        help="embed a clip up to this size (default 2; 0: link every clip)")
    parser.add_argument("--audio-total-mb", type=_megabytes, default=20.0, metavar="MB",
                        help="embed clips until the report holds this much audio (default 20)")


def write_protocol_report(protocol: str, results: list[Path], metrics: Path, out: Path, args: argparse.Namespace,
                          manifest: Path | None = None) -> Path:
    """The report of one evaluation, with the audio limits of `args`; prints where it went."""
    from sdscore.report_document import report_files

    path = report_files(protocol, results, metrics, out, manifest=manifest,
                        clip_limit=int(args.audio_clip_mb * 2**20), report_limit=int(args.audio_total_mb * 2**20))
    console.print(f"report → [bold]{path}[/bold]")
    return path


def _cmd_report(args: argparse.Namespace) -> int:
    out = output_plan(args, "sdscore report").file(args.out, "--out")
    write_protocol_report(args.protocol, args.results, args.metrics, out, args, manifest=args.manifest)
    return 0


def add_report_parser(sub) -> None:
    """`sdscore report --protocol P RESULTS... --metrics METRICS.json --out report.html`."""
    report = sub.add_parser("report", help="an evaluation as one self-contained HTML file (tables, plots, audio)")
    report.add_argument("--protocol", required=True, choices=list(PROTOCOLS))
    report.add_argument("results", nargs="+", type=Path,
                        help="the results file(s) the metrics came from (arena: the battles manifest)")
    report.add_argument("--metrics", required=True, type=Path, help="METRICS.json written by `sdscore eval`")
    report.add_argument("--out", required=True, help="the HTML file to write")
    report.add_argument("--manifest", type=Path,
                        help="where the items' audio is found (default: the manifest the results' provenance names)")
    add_overwrite_option(report)
    add_audio_options(report)
    report.set_defaults(func=_cmd_report)
