"""`sdscore score judge` options, generated from the judges' settings (settings.py)."""

from __future__ import annotations

import argparse

from sdscore.protocols.judge.settings import OPTIONS
from sdscore.runtime.settings import add_options, keywords, settings_from_args


def add_score_options(parser: argparse.ArgumentParser) -> None:
    add_options(parser, OPTIONS)


def score_settings(args: argparse.Namespace) -> dict:
    """The keywords of `scoring_job` from a parsed command line (options of the other --judge are refused)."""
    mode, settings = settings_from_args(OPTIONS, args)
    return {"judge": mode, **keywords(settings)}
