"""Options that belong to one mode of a command (`--judge openai`'s endpoint, a reward model's
device) are refused in another mode, not silently ignored.

`sdscore score judge --base-url URL --model m` without `--judge openai` used to run the rule judge
and record model "m"; now it stops before any work and says which mode the options need.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence

from sdscore.errors import SdscoreError


def refuse_other_modes_options(
    args: argparse.Namespace,
    add_options: Callable[[argparse.ArgumentParser], None],
    mode_dest: str,
    used_by: Mapping[str, Sequence[str]],
) -> None:
    """SdscoreError naming every option given away from its default whose modes (used_by: dest →
    the values of `mode_dest` that use it) exclude the chosen one. The defaults and spellings are
    read from `add_options`, the function that adds the options to the command's parser."""
    parser = argparse.ArgumentParser(add_help=False)
    add_options(parser)
    flags = {action.dest: action.option_strings[0] for action in parser._actions if action.option_strings}
    mode = getattr(args, mode_dest)
    stray: dict[str, list[str]] = {}
    for dest, modes in used_by.items():
        if mode not in modes and getattr(args, dest, None) != parser.get_default(dest):
            stray.setdefault(" or ".join(f"{flags[mode_dest]} {m}" for m in modes), []).append(flags[dest])
    if stray:
        needs = "; ".join(f"{', '.join(options)} {'is' if len(options) == 1 else 'are'} for {wanted}"
                          for wanted, options in stray.items())
        raise SdscoreError(f"{needs}; with {flags[mode_dest]} {mode} {'it' if _count(stray) == 1 else 'they'} "
                           f"would be ignored: drop {'it' if _count(stray) == 1 else 'them'} or choose that mode")


def _count(stray: Mapping[str, list[str]]) -> int:
    return sum(len(options) for options in stray.values())
