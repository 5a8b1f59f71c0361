"""`sdscore corpus stratify|select-dialogues|sample-check|filter-sdiareward`: build benchmark manifests."""

from __future__ import annotations

import argparse
from pathlib import Path

from sdscore.cli.console import console
from sdscore.cli.outputs import add_overwrite_option, output_plan


def _cmd_stratify(args: argparse.Namespace) -> int:
    from rich.table import Table

    from sdscore.corpus.stratify import run_stratify
    from sdscore.protocols.reward.spec import SPEC

    plan = output_plan(args, "sdscore corpus stratify")
    out = plan.file(args.out, "--out")
    remaining = None if args.remaining is None else plan.file(args.remaining, "--remaining")
    summary = run_stratify(args.manifest, out, args.per_bucket, args.by, args.seed, remaining_out=remaining,
                           spec=SPEC)
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


def _cmd_select_dialogues(args: argparse.Namespace) -> int:
    import warnings

    from rich.markup import escape

    from sdscore.cli.console import stage_progress
    from sdscore.protocols.naturalness.selection import select_dialogues

    output_plan(args, "sdscore corpus select-dialogues").folder(args.out, "--out")
    with stage_progress() as progress, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # skipped conversations are printed below, from the summary
        summary = select_dialogues(
            args.segments, args.out, turn_rule=args.turn_rule, max_context_segments=args.max_context_segments,
            min_answer_seconds=args.min_answer_seconds, backchannel_max=args.backchannel_max,
            mask_answer_overlap=args.mask_answer_overlap, overwrite=args.overwrite,
            errors="raise" if args.strict else "skip", progress=progress, subsets=args.subset, splits=args.split,
            conversations=args.conversations,
        )
    for entry in summary["skipped"]:
        console.print(f"[yellow]skipped conversation {escape(repr(entry['conversation_id']))}:[/yellow]")
        for problem in entry["problems"]:
            console.print("  " + escape(problem))
    console.print(f"{summary['dialogues']} dialogues from {summary['selected_conversations']} of "
                  f"{summary['conversations']} conversations ({len(summary['skipped'])} skipped) → "
                  f"[bold]{escape(summary['metadata'])}[/bold]")
    return 1 if summary["skipped"] else 0


def _cmd_sample_check(args: argparse.Namespace) -> int:
    from rich.table import Table

    from sdscore.protocols.reward.human_check import run_sample_check

    out = output_plan(args, "sdscore corpus sample-check").file(args.out, "--out")
    rows = run_sample_check(args.results, out, per_bucket=args.per_bucket, wrong=args.wrong, seed=args.seed)
    table = Table(title="human-check sample (SDiaReward Table 3 buckets)")
    for column in ("bucket", "pairs", "mean margin"):
        table.add_column(column, justify="left" if column == "bucket" else "right")
    for row in rows:
        margin = "-" if row["mean_margin"] is None else f"{row['mean_margin']:.2f}"
        table.add_row(row["bucket"], str(row["count"]), margin)
    console.print(table)
    console.print(f"{sum(r['count'] for r in rows)} pairs → [bold]{args.out}[/bold] (fill in human_agrees)")
    return 0


def _cmd_filter_sdiareward(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from sdscore.corpus import read_manifest, write_manifest
    from sdscore.protocols.reward.dataset_filters import filter_pairs
    from sdscore.protocols.reward.spec import SPEC

    out = output_plan(args, "sdscore corpus filter-sdiareward").file(args.out, "--out")
    pairs = read_manifest(args.manifest, SPEC)
    kept, dropped = filter_pairs(pairs, max_turns=args.max_turns,
                                 max_turn_seconds=None if args.no_durations else args.max_turn_seconds)
    write_manifest(kept, out)
    for reason, n in dropped.items():
        console.print(f"dropped {n}: {escape(reason)}")
    console.print(f"{kept.height} of {pairs.height} pairs kept → [bold]{args.out}[/bold]")
    return 0


def add_corpus_parser(sub) -> None:
    """`sdscore corpus stratify MANIFEST --out BENCH.parquet [...]`, `sdscore corpus select-dialogues SEGMENTS --out DIR`."""
    corpus = sub.add_parser("corpus", help="build benchmark manifests from a corpus")
    tools = corpus.add_subparsers(dest="tool", required=True)
    stratify = tools.add_parser("stratify", help="at most K reward pairs per (source, category) bucket (ESDR-Bench)")
    stratify.add_argument("manifest", type=Path)
    stratify.add_argument("--out", required=True, help="benchmark manifest (Parquet or JSONL)")
    stratify.add_argument("--per-bucket", type=int, default=50)
    stratify.add_argument("--by", default="source,category", help="comma-separated bucket columns")
    stratify.add_argument("--seed", type=int, default=0)
    stratify.add_argument("--remaining", help="write the pairs not selected here (e.g. a training set)")
    add_overwrite_option(stratify)
    stratify.set_defaults(func=_cmd_stratify)

    select = tools.add_parser(
        "select-dialogues",
        help="SPEARBench dialogues (context, question ending in '?', answer) from timed two-speaker segments",
    )
    select.add_argument("segments", type=Path, help="segments table: conversation_id, speaker, start, end, text, "
                        "audio_path[, channel, subset, split] (CSV/TSV/Parquet/JSONL), or a Seamless Interaction "
                        "folder (improvised/ and naturalistic/, each with train/ dev/ test/)")
    select.add_argument("--subset", action="append", metavar="SUBSET",
                        help="only conversations of this subset (Seamless Interaction: improvised or naturalistic; a "
                        "table: its subset column); repeat for several")
    select.add_argument("--conversations", type=Path, metavar="TABLE",
                        help="per conversation_id its relationship and/or conversation_prompt (the emotional-"
                        "naturalness inputs), written beside each dialogue in metadata.csv")
    select.add_argument("--split", action="append", metavar="SPLIT",
                        help="only conversations of this split (Seamless Interaction: train, dev or test; a table: "
                        "its split column); repeat for several")
    select.add_argument("--out", required=True, help="output folder: metadata.csv and audio/")
    select.add_argument("--turn-rule", choices=("released", "paper"), default="released",
                        help="released (default): the authors' code — a question utterance ending in '?', the "
                        "answer until the asker speaks again; paper: merged turns, backchannels ignored")
    select.add_argument("--max-context-segments", type=int, default=4,
                        help="context utterances before the question (default 4, as the authors' code)")
    select.add_argument("--min-answer-seconds", type=float, default=1.0, help="shortest answer (default 1.0)")
    select.add_argument("--backchannel-max", type=float, default=0.5,
                        help="--turn-rule paper: the other speaker's utterances up to this long do not take the "
                        "floor (default 0.5)")
    select.add_argument("--mask-answer-overlap", action="store_true",
                        help="silence the answerer's channel of the question clip from the answer's start (the "
                        "authors keep it)")
    select.add_argument("--overwrite", action="store_true", help="replace an earlier selection in --out (only "
                        "when sdscore wrote everything in it)")
    select.add_argument("--strict", action="store_true", help="stop at the first bad row instead of skipping "
                        "its conversation")
    select.set_defaults(func=_cmd_select_dialogues)

    check = tools.add_parser("sample-check", help="reward pairs for a human check: model-wrong, high- and "
                             "low-confidence, random buckets (SDiaReward Table 3)")
    check.add_argument("results", type=Path, help="reward results (sdscore score reward)")
    check.add_argument("--out", required=True, help="the sample (Parquet or JSONL)")
    add_overwrite_option(check)
    check.add_argument("--per-bucket", type=int, default=20, help="pairs in high, low and random (default 20)")
    check.add_argument("--wrong", type=int, default=15, help="mis-ranked pairs (default 15)")
    check.add_argument("--seed", type=int, default=0)
    check.set_defaults(func=_cmd_sample_check)

    filt = tools.add_parser("filter-sdiareward", help="SDiaReward's rule-based filters: even, alternating turns, "
                            "at most 16 turns, no turn over 60 s; prints what was dropped and why")
    filt.add_argument("manifest", type=Path, help="reward pairs (any format read_manifest takes)")
    filt.add_argument("--out", required=True, help="the kept pairs (Parquet or JSONL)")
    add_overwrite_option(filt)
    filt.add_argument("--max-turns", type=int, default=16)
    filt.add_argument("--max-turn-seconds", type=float, default=60.0)
    filt.add_argument("--no-durations", action="store_true", help="skip the duration rule (no audio header read)")
    filt.set_defaults(func=_cmd_filter_sdiareward)
