"""`sdscore score consistency` options, generated from the Scorers' settings (settings.py)."""

from __future__ import annotations

import argparse

from sdscore.protocols.consistency.settings import OPTIONS
from sdscore.runtime.settings import add_options, keywords, settings_from_args


#: how a Lhotse manifest's turns become instances (corpus.lhotse_format.GROUPINGS, which imports polars:
#: the parser is built without it; a test keeps the two equal)
LHOTSE_GROUPINGS = ("speaker", "recording")


def add_score_options(parser: argparse.ArgumentParser) -> None:
    add_options(parser, OPTIONS)
    parser.add_argument("--lhotse-group-by", choices=LHOTSE_GROUPINGS,
                        help="a Lhotse CutSet or SupervisionSet's instances: one per speaker across the file "
                             "(the default) or one per speaker of each recording (instance_id RECORDING/SPEAKER); "
                             "--write-back matches the results the same way; refused for other manifests")


def read_options(args: argparse.Namespace) -> dict:
    """The manifest reader's keywords (corpus.read.load_table) from a parsed command line: only the
    options given, so a manifest they do not apply to is refused rather than silently read as it is."""
    return {} if args.lhotse_group_by is None else {"lhotse_group_by": args.lhotse_group_by}


def score_settings(args: argparse.Namespace) -> dict:
    """The keywords of `scoring_job` from a parsed command line (options of the other --judge, and --seed
    with --permutations all, are refused)."""
    mode, settings = settings_from_args(OPTIONS, args)
    return {"judge": mode, **keywords(settings)}
