"""`sdscore corpus stratify`: build benchmark manifests from a corpus."""

from __future__ import annotations

import argparse
from pathlib import Path

from sdscore.cli.console import console


def _cmd_stratify(args: argparse.Namespace) -> int:
    from rich.table import Table

    from sdscore.corpus.stratify import run_stratify

    summary = run_stratify(args.manifest, args.out, args.per_bucket, args.by, args.seed, remaining_out=args.remaining)
    table = Table(title=f"stratified: at most {args.per_bucket} per ({args.by})")
    keys = [k for k in summary["buckets"][0] if k not in ("available", "selected")] if summary["buckets"] else []
    for column in [*keys, "available", "selected"]:
        table.add_column(column, justify="right" if column in ("available", "selected") else "left")
    for bucket in summary["buckets"]:
        table.add_row(*(str(bucket[k]) for k in [*keys, "available", "selected"]))
    console.print(table)
    counts = summary["counts"]
    console.print(f"{counts['selected']} of {counts['input']} pairs → [bold]{args.out}[/bold]"
                  + (f", {counts['remaining']} → [bold]{args.remaining}[/bold]" if args.remaining else ""))
    return 0


def add_corpus_parser(sub) -> None:
    """`sdscore corpus stratify MANIFEST --out BENCH.parquet [...]`."""
    corpus = sub.add_parser("corpus", help="build benchmark manifests from a corpus")
    tools = corpus.add_subparsers(dest="tool", required=True)
    stratify = tools.add_parser("stratify", help="at most K reward pairs per (source, category) bucket (ESDR-Bench)")
    stratify.add_argument("manifest", type=Path)
    stratify.add_argument("--out", required=True, type=Path, help="benchmark manifest (Parquet or JSONL)")
    stratify.add_argument("--per-bucket", type=int, default=50)
    stratify.add_argument("--by", default="source,category", help="comma-separated bucket columns")
    stratify.add_argument("--seed", type=int, default=0)
    stratify.add_argument("--remaining", type=Path, help="write the pairs not selected here (e.g. a training set)")
    stratify.set_defaults(func=_cmd_stratify)
