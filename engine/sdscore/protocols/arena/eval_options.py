"""`sdscore eval arena`'s own options: which judge's battles give the headline ratings, and the ridge."""

from __future__ import annotations

import argparse


def _non_negative(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not number >= 0 or number == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value!r}")
    return number


def add_eval_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--judge", metavar="NAME", help="the judge whose battles give the headline ratings "
                                                       "(default: the only one, else human)")
    parser.add_argument("--pool-judges", action="store_true", help="rate all judges' battles together")
    parser.add_argument("--l2", type=_non_negative, default=0.0, metavar="L2",
                        help="ridge on the Bradley–Terry log-strengths (default 0: FastChat's MLE); > 0 "
                             "gives finite ratings when a model never loses or never wins, e.g. 0.01")


def eval_settings(args: argparse.Namespace) -> dict:
    """The keyword arguments of arena's evaluate_files from the parsed options."""
    return {"judge": args.judge, "pool_judges": args.pool_judges, "l2": args.l2}
