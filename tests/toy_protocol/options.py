"""`sdscore score toy`'s own option."""

import argparse


def add_score_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--weight", type=float, default=1.0, help="score = word count × weight")


def score_settings(args: argparse.Namespace) -> dict:
    return {"weight": args.weight}
