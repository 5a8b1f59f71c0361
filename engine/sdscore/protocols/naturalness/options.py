"""`sdscore score naturalness` options, generated from the NaturalnessScorer's settings (settings.py)."""

from __future__ import annotations

import argparse

from sdscore.protocols.naturalness.settings import OPTIONS
from sdscore.runtime.settings import add_options, keywords, settings_from_args


def add_score_options(parser: argparse.ArgumentParser) -> None:
    add_options(parser, OPTIONS)


def score_settings(args: argparse.Namespace) -> dict:
    """The keywords of `scoring_job` from a parsed command line (options of the other --judge refused);
    the default mode adds no keyword, so a features run's record is what it was before --judge."""
    mode, settings = settings_from_args(OPTIONS, args)
    given = keywords(settings)
    return given if mode == OPTIONS.mode_default else {"judge": mode, **given}
