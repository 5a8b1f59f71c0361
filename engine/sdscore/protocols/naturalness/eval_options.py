"""`sdscore eval naturalness`'s own options: which systems are half-duplex, a LaTeX Table III, and the
segments table and selection that Table I counts."""

from __future__ import annotations

import argparse


def add_eval_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--half-duplex", action="append", metavar="SYSTEM",
                        help="a system that cannot answer while the question plays (half-duplex or non-streaming): "
                             "its interruption columns are left blank, as SPEARBench's Table III (repeat the option "
                             "for several)")
    parser.add_argument("--subset", action="append", metavar="SUBSET",
                        help="evaluate only the rows of this subset (e.g. improvised or naturalistic: the results' "
                             "subset column, from select-dialogues on a Seamless Interaction folder; repeat for several)")
    parser.add_argument("--split", action="append", metavar="SPLIT",
                        help="evaluate only the rows of this split (e.g. dev or test: the results' split column; "
                             "repeat for several)")
    parser.add_argument("--latex", metavar="TEX", help="also write Table III as a LaTeX tabular (booktabs; mean ± "
                                                       "std, best model bold, nulls explained in footnotes)")
    parser.add_argument("--segments", metavar="TABLE",
                        help="the segments table or Seamless Interaction folder the dialogues were selected from: "
                             "Table I's original conversations and hours (per conversation its longest audio file)")
    parser.add_argument("--selection", metavar="FOLDER",
                        help="the select-dialogues output (its folder or metadata.csv): Table I's selected dialogues "
                             "and hours of contexts+questions and answers")


def eval_settings(args: argparse.Namespace) -> dict:
    """The keyword arguments of naturalness's evaluate_files from the parsed options (--latex checked
    as an output: an existing file is replaced only with --overwrite)."""
    from sdscore.output_paths import plan_from_args

    latex = None if args.latex is None else plan_from_args(args, "sdscore eval").file(args.latex, "--latex")
    return {"half_duplex": tuple(args.half_duplex or ()), "latex": latex,
            "subsets": None if args.subset is None else tuple(args.subset),
            "splits": None if args.split is None else tuple(args.split),
            "segments": args.segments, "selection": args.selection}
