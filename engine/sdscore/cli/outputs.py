"""The output options every writing command shares: `--overwrite`, and the OutputPlan of a run.

Output options are parsed as text (an empty `--out ""` must stay empty, not become "."); every
Path-valued option of the command is an input the outputs may not be, hold, or hard-link to.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sdscore.output_paths import OutputPlan


def add_overwrite_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--overwrite", action="store_true",
                        help="replace existing outputs (a folder only when it is an earlier sdscore output "
                             "holding nothing else)")


def output_plan(args: argparse.Namespace, command: str, extra_inputs: tuple[str, ...] = ("model",)) -> OutputPlan:
    """A plan whose inputs are every Path (or list of Paths) among the parsed arguments, and the
    text options named in extra_inputs when they name an existing path (`score reward --model DIR`)."""
    inputs = [Path(v) for name in extra_inputs if isinstance(v := getattr(args, name, None), str) and v
              and Path(v).exists()]
    for value in vars(args).values():
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(item, Path):
                inputs.append(item)
    return OutputPlan(inputs, overwrite=bool(getattr(args, "overwrite", False)), command=command)
