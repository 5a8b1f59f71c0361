"""The output options every writing command shares: `--overwrite`, and the OutputPlan of a run.

Output options are parsed as text (an empty `--out ""` must stay empty, not become "."); every
Path-valued option of the command is an input the outputs may not be, hold, or hard-link to.
"""

from __future__ import annotations

import argparse

from sdscore.output_paths import plan_from_args as output_plan  # noqa: F401  (the commands' name for it)


def add_overwrite_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--overwrite", action="store_true",
                        help="replace existing outputs (a folder only when it is an earlier sdscore output "
                             "holding nothing else)")
