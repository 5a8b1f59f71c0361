"""`sdscore score PROTOCOL` and `sdscore eval PROTOCOL`: generic over the protocol registry."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from sdscore.cli.console import console, stage_progress
from sdscore.cli.outputs import add_overwrite_option, output_plan
from sdscore.cli.report import add_audio_options
from sdscore.errors import SdscoreError
from sdscore.protocols.registry import PROTOCOLS, protocol, score


def _positive(value: str) -> int:
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value!r}")
    return count


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {value!r}")
    return seconds


def _location(value: str) -> Path | str:
    """A manifest argument: a local path (a file:// URI becomes one), or an s3:// / gs:// URI as text."""
    from sdscore import storage

    try:
        text = storage.normalize(value)
    except storage.StorageError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text if storage.is_remote(text) else Path(text)


def _add_runtime_options(parser: argparse.ArgumentParser) -> None:
    """The runtime's options, the same for every protocol."""
    parser.add_argument("manifest", type=_location)
    parser.add_argument("--out", required=True, help="results Parquet (one row per manifest row)")
    parser.add_argument("--workers", type=_positive, default=1,
                        help="worker processes on this machine, each with its own Scorer (with --ray: actors)")
    parser.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                        help="run on Ray Data: a local Ray instance, or the cluster at ADDRESS (e.g. auto)")
    parser.add_argument("--ray-cpus", type=float, metavar="N",
                        help="CPUs per Ray actor, which reads, scores and writes its own windows (default 0.5: "
                        "Ray's CPUs are bookkeeping, and a fraction keeps --workers actors schedulable beside "
                        "the driver and Ray Data's own tasks; an actor runs max(1, floor(N)) compute threads)")
    parser.add_argument("--ray-gpus", type=float, metavar="N", default=0.0, help="GPUs per Ray actor (default 0)")
    parser.add_argument("--window-rows", type=_positive,
                        help="rows per window and per resumable shard (default 1024, or the unfinished run's)")
    parser.add_argument("--resume", action="store_true", help="continue an interrupted run from its shards")
    parser.add_argument("--progress-every", type=_seconds, metavar="SECONDS",
                        help="when stderr is not a terminal: a progress line every SECONDS (default "
                             "$SDSCORE_PROGRESS_EVERY, else 30; 0: none)")
    parser.add_argument("--format", choices=["parquet", "jsonl", "versa", "scp"], default="parquet",
                        help="also write the finished results as JSONL, VERSA-style JSONL (numbers, one object per key; "
                             "text columns and errors beside it in OUT.versa.text.jsonl) "
                             "or a folder of Kaldi-style <metric>.scp files (--out stays the Parquet results)")
    parser.add_argument("--format-out", metavar="PATH",
                        help="where --format goes (default: beside --out: OUT.jsonl, OUT.versa.jsonl, OUT_scp/)")
    parser.add_argument("--write-back", metavar="PATH",
                        help="also write the input again at PATH with the results added (the input is never "
                             "changed): a HF save_to_disk folder gets the result columns, a Lhotse CutSet or "
                             "SupervisionSet (PATH .jsonl or .jsonl.gz) gets them in each supervision's custom, "
                             "a Kaldi data directory is copied with one <metric>.scp per numeric column")
    add_overwrite_option(parser)


def _plan_score_outputs(args: argparse.Namespace) -> tuple[Path | str, Path | None, Path | None]:
    """Check --out, its shards and lock, --format-out and --write-back before any work; returns (out,
    format_out, write_back) (out: an s3:// or gs:// URI as text)."""
    from sdscore import storage
    from sdscore.corpus.output_formats import default_destination
    from sdscore.runtime.sharded_output import parts_folder

    args.out = storage.normalize(args.out) if args.out else args.out  # file:// → its path: the local policy applies
    if storage.is_remote(args.out):
        if args.write_back is not None:
            raise SdscoreError(f"{args.out}: --write-back needs a local --out")
        return _plan_object_output(args), None, None
    plan = output_plan(args, "sdscore score")
    write_back = None
    if args.write_back is not None:
        from sdscore.corpus.write_back import plan_write_back

        write_back = plan_write_back(plan, args.manifest, args.write_back)
    finished = args.out and os.path.isfile(args.out) and not os.path.islink(args.out) \
        and not parts_folder(Path(args.out)).exists()
    if args.resume and finished and not args.overwrite:
        raise SdscoreError(f"{args.out}: this run has already finished (no shards left to resume); "
                           "pass --overwrite to score it again, or choose another --out")
    out = plan.file(args.out, "--out")
    plan.reserve(parts_folder(out), "--out's shard folder")
    plan.reserve(out.with_name(out.name + ".lock"), "--out's lock file")
    if args.format == "parquet" and args.format_out is None:
        return out, None, write_back
    if args.format_out is None:
        destination = default_destination(out, args.format)
    else:
        destination = args.format_out
    if args.format == "scp":
        return out, plan.folder(destination, "--format-out"), write_back
    if args.format == "versa":
        from sdscore.corpus.output_formats import versa_text_file

        plan.file(versa_text_file(destination), "--format-out's text file")
    return out, plan.file(destination, "--format-out"), write_back


def _plan_object_output(args: argparse.Namespace) -> str:
    """Check an --out on an object store before any work: a .parquet URI, not the manifest, not an
    existing object without --overwrite, no --format (its files are written locally: give a local --out)."""
    from sdscore import storage
    from sdscore.runtime.run import check_object_output

    out = check_object_output(args.out, args.manifest)
    if args.format != "parquet" or args.format_out is not None:
        raise SdscoreError(f"{out}: --format/--format-out need a local --out; convert the results afterwards "
                           "from a local copy")
    if storage.exists(out) and not storage.list_files(out + ".parts"):
        if args.resume and not args.overwrite:
            raise SdscoreError(f"{out}: this run has already finished (no shards left to resume); "
                               "pass --overwrite to score it again, or choose another --out")
        if not args.overwrite:
            raise SdscoreError(f"{out}: --out exists; pass --overwrite to replace it, or choose another path")
    return out


def _cmd_score(args: argparse.Namespace) -> int:
    entry = protocol(args.protocol)
    executor, address, options = None, None, {}  # None: processes when --workers > 1, else in this process
    if args.ray is not None:
        executor, address = "ray", None if args.ray == "local" else args.ray
        options = {"num_cpus_per_actor": args.ray_cpus, "num_gpus_per_actor": args.ray_gpus}
    elif args.ray_cpus is not None or args.ray_gpus:
        raise ValueError("--ray-cpus / --ray-gpus need --ray")
    out, format_out, write_back_to = _plan_score_outputs(args)
    read_options = entry.read_options(args)  # how the manifest is read: the run and --write-back alike
    with stage_progress(args.progress_every) as progress:
        summary = score(entry.name, args.manifest, out, executor=executor, workers=args.workers,
                        ray_address=address, resume=args.resume, window_rows=args.window_rows,
                        executor_options=options, progress=progress, read_options=read_options,
                        **entry.options().score_settings(args))
    resumed = f" ({summary.resumed_shards} shards kept from the interrupted run)" if summary.resumed_shards else ""
    console.print(f"{summary.rows} rows scored in {summary.seconds:.1f} s, {summary.failed} with errors{resumed} "
                  f"→ [bold]{summary.out}[/bold]")
    if format_out is not None:
        from sdscore.corpus.output_formats import write_results_as

        written = write_results_as(summary.out, args.format, entry.manifest_spec(), format_out, overwrite=args.overwrite)
        console.print(f"{args.format} → [bold]{written}[/bold]")
    if write_back_to is not None:
        from sdscore.corpus.write_back import write_back

        written = write_back(args.manifest, summary.out, entry.manifest_spec(), write_back_to, overwrite=args.overwrite,
                             **read_options)
        console.print(f"results written back → [bold]{written}[/bold]")
    return 1 if summary.failed else 0


def add_score_parser(sub, only: str | None = None) -> None:
    """`sdscore score PROTOCOL MANIFEST --out OUT.parquet [runtime options] [protocol options]`; with
    `only`, the other protocols get their name and help but no options (their modules stay unloaded)."""
    score = sub.add_parser("score", help="score a manifest; writes one output row per input row")
    protocols = score.add_subparsers(dest="protocol", required=True)
    for entry in PROTOCOLS.values():
        if entry.scores:
            parser = protocols.add_parser(entry.name, help=entry.help)
            if only is not None and entry.name != only:
                continue
            _add_runtime_options(parser)
            entry.options().add_score_options(parser)
    score.set_defaults(func=_cmd_score)


def _cmd_eval(args: argparse.Namespace) -> int:
    from sdscore.metrics._inputs import nonfinite_note
    from sdscore.output_paths import seal_folder

    plan = output_plan(args, "sdscore eval")
    out = plan.file(args.out, "--out")
    entry = protocol(args.protocol)
    plot = None
    if getattr(args, "plot", None) is not None:
        plot = plan.folder(args.plot, "--plot") if entry.plot_folder else plan.file(args.plot, "--plot")
    report = None if args.report is None else plan.file(args.report, "--report")
    eval_options = entry.eval_options_module()  # the options only this kind has (see add_eval_parser)
    options = {} if eval_options is None else eval_options.eval_settings(args)
    metrics = entry.evaluate_files(args.results, out, plot=plot, seed=getattr(args, "seed", 0), **options)
    note = nonfinite_note(metrics)  # rows whose scores are NaN/inf, left out of the metrics: one line, never silent
    if note:
        console.print(note, markup=False, highlight=False, soft_wrap=True)
    if plot is not None and entry.plot_folder and plot.is_dir():
        seal_folder(plot, "sdscore eval --plot")
    table = entry.format_table(metrics)
    if table:
        console.print(table, markup=False, highlight=False, soft_wrap=True)
    console.print(f"metrics ({len(json.dumps(metrics))} bytes of JSON) → [bold]{out}[/bold]")
    if report is not None:
        from sdscore.cli.report import write_protocol_report

        write_protocol_report(args.protocol, args.results, out, report, args)
    return 0


def add_eval_parser(sub, only: str | None = None) -> None:
    """`sdscore eval PROTOCOL RESULTS... --out METRICS.json [its options]`: each kind its own options and
    help; with `only`, the other kinds get their name and help but no options."""
    ev = sub.add_parser("eval", help="metrics of results files (arena: of a battles manifest)")
    kinds = ev.add_subparsers(dest="protocol", required=True, metavar="{" + ",".join(PROTOCOLS) + "}")
    for entry in PROTOCOLS.values():
        parser = kinds.add_parser(entry.name, help=f"{entry.help}: metrics of {entry.results_help.split(' (')[0]}",
                                  description=f"Metrics of {entry.results_help}, written as METRICS.json.")
        if only is not None and entry.name != only:
            continue
        parser.add_argument("results", nargs="+", type=Path, metavar="RESULTS", help=entry.results_help)
        parser.add_argument("--out", required=True, help="METRICS.json")
        if entry.plot_help:
            parser.add_argument("--plot", help=entry.plot_help)
        if entry.eval_seeded:
            parser.add_argument("--seed", type=int, default=0, help="bootstrap seed")
        if entry.eval_options:
            entry.eval_options_module().add_eval_options(parser)
        parser.add_argument("--report", metavar="HTML",
                            help="also write the evaluation as a self-contained HTML report (see `sdscore report`)")
        add_overwrite_option(parser)
        add_audio_options(parser)
    ev.set_defaults(func=_cmd_eval)
