"""The tables in docs/ that are generated from the code: each protocol's manifest schema (from its
registry entry's ManifestSpec) and the options of `sdscore score NAME` / `sdscore eval NAME` (from the
argparse parser the CLI builds), so the docs cannot drift from what the program accepts.

A generated block sits between two markers in a docs page:

    <!-- generated: KIND [PROTOCOL] -->
    ...
    <!-- end generated -->

KIND is `manifest`, `options` or `eval-options` (each with a protocol name) or `runtime-options`
(the options every `sdscore score` has). `python -m sdscore.docs_tables --write` rewrites every
block; `--check` exits 1 naming each stale or missing block. An upper layer: it reads the registry
and the CLI.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sdscore.errors import SdscoreError

#: The command that regenerates the blocks (what a stale-block message tells the reader to run).
REGENERATE = "python -m sdscore.docs_tables --write"
END = "<!-- end generated -->"
_START = re.compile(r"<!-- generated: ([a-z-]+)(?: ([A-Za-z0-9_-]+))? -->")
#: The blocks every registered protocol's page must hold, by kind.
PROTOCOL_KINDS = ("manifest", "options", "eval-options")


class DocsTablesError(SdscoreError):
    """A docs page whose generated blocks cannot be read or rendered (names the file and line)."""


def default_docs_folder() -> Path:
    """docs/ of the source checkout this package is installed from (an editable install)."""
    return Path(__file__).resolve().parents[2] / "docs"


# ------------------------------------------------------------------------------------------- rendering

def _cell(text: object) -> str:
    """Text fit for one markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(text: object) -> str:
    return f"`{text}`" if text not in ("", None) else ""


def manifest_table(name: str) -> str:
    """The manifest schema of protocol `name`: one row per column, its type, whether it is required, its
    role (id column, unique key, audio path) and its allowed values; then the spec's own row checks."""
    from sdscore.corpus.column_types import describe_dtype
    from sdscore.protocols.registry import protocol

    spec = protocol(name).manifest_spec()
    rows = ["| column | type | required | role | allowed values |", "|---|---|---|---|---|"]
    for column, dtype in spec.schema.items():
        role = []
        if column == spec.id_column:
            role.append("id (filled from the row number when absent)")
        if column in spec.unique_key:
            role.append("unique key" if len(spec.unique_key) == 1 else f"unique key ({' + '.join(spec.unique_key)})")
        if column in spec.audio_columns:
            role.append("audio path(s), relative to the manifest")
        allowed = spec.allowed_values.get(column)
        rows.append("| " + " | ".join((
            _code(column), _cell(describe_dtype(dtype)), "yes" if column in spec.required else "",
            _cell("; ".join(role)), _cell(", ".join(f"`{value}`" for value in allowed) if allowed else ""),
        )) + " |")
    checks = (spec.row_checks.__doc__ or "").strip().split("\n")[0]
    lines = rows
    if spec.row_checks() and checks:
        lines = rows + ["", f"Row checks beyond the columns' types, required columns and allowed values: {_cell(checks)}"]
    return "\n".join(lines)


def _value(action: argparse.Action) -> str:
    """What an option takes, as `--help` shows it: nothing for a flag, its choices, or its metavar."""
    if action.nargs == 0:
        return ""
    if not action.option_strings:  # a positional argument: how many it takes
        return {"+": "one or more", "*": "any number", "?": "optional"}.get(action.nargs, "")
    if action.choices is not None:
        return " \\| ".join(f"`{choice}`" for choice in action.choices)
    metavar = action.metavar or action.dest.upper()
    return _code(metavar if isinstance(metavar, str) else " ".join(metavar))


def _default(action: argparse.Action) -> str:
    if action.nargs == 0 or action.default in (None, "", argparse.SUPPRESS) or action.required:
        return ""
    return _code(action.default)


def _help(action: argparse.Action, prog: str) -> str:
    text = action.help or ""
    if "%" in text:
        text = text % {**vars(action), "prog": prog, "default": action.default}
    return _cell(text)


def options_table(actions: list[argparse.Action], prog: str) -> str:
    """One row per option or positional argument: its flags, value, default and help."""
    rows = ["| option | value | default | help |", "|---|---|---|---|"]
    for action in actions:
        if isinstance(action, argparse._HelpAction):
            continue
        name = ", ".join(f"`{flag}`" for flag in action.option_strings) or _code(action.metavar or action.dest.upper())
        if action.required and action.option_strings:
            name += " (required)"
        rows.append(f"| {name} | {_value(action)} | {_default(action)} | {_help(action, prog)} |")
    return "\n".join(rows)


def _subparser(parser: argparse.ArgumentParser, *path: str) -> argparse.ArgumentParser:
    for name in path:
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        if name not in commands.choices:
            raise DocsTablesError(f"`sdscore {' '.join(path)}` does not exist (no {name!r} among "
                                  f"{', '.join(commands.choices)})")
        parser = commands.choices[name]
    return parser


def _runtime_dests() -> set[str]:
    """The destinations of the options every `sdscore score` has (the runtime's, not a protocol's)."""
    from sdscore.cli.score import _add_runtime_options

    parser = argparse.ArgumentParser(add_help=False)
    _add_runtime_options(parser)
    return {action.dest for action in parser._actions}


def _cli() -> argparse.ArgumentParser:
    from sdscore.cli import build_parser

    return build_parser()


def score_options_table(name: str) -> str:
    """`sdscore score NAME`'s own options (the runtime's are left to runtime_options_table)."""
    parser = _subparser(_cli(), "score", name)
    runtime = _runtime_dests()
    return options_table([a for a in parser._actions if a.dest not in runtime], parser.prog)


def eval_options_table(name: str) -> str:
    parser = _subparser(_cli(), "eval", name)
    return options_table(list(parser._actions), parser.prog)


def runtime_options_table() -> str:
    """The runtime's options, as the first scoring protocol's parser has them (every one has the same)."""
    from sdscore.protocols.registry import PROTOCOLS

    first = next(entry.name for entry in PROTOCOLS.values() if entry.scores)
    parser = _subparser(_cli(), "score", first)
    runtime = _runtime_dests()
    return options_table([a for a in parser._actions if a.dest in runtime], "sdscore score PROTOCOL")


#: kind → (renderer, whether it takes a protocol name)
RENDERERS: dict[str, tuple[Callable[..., str], bool]] = {
    "manifest": (manifest_table, True),
    "options": (score_options_table, True),
    "eval-options": (eval_options_table, True),
    "runtime-options": (runtime_options_table, False),
}


def render(kind: str, name: str | None = None) -> str:
    """The markdown of one generated block (without its markers)."""
    from sdscore.protocols.registry import PROTOCOLS

    if kind not in RENDERERS:
        raise DocsTablesError(f"unknown generated block kind {kind!r}; expected one of {', '.join(RENDERERS)}")
    renderer, takes_name = RENDERERS[kind]
    if not takes_name:
        if name is not None:
            raise DocsTablesError(f"a {kind!r} block takes no protocol name, got {name!r}")
        return renderer()
    if name is None:
        raise DocsTablesError(f"a {kind!r} block needs a protocol name (<!-- generated: {kind} NAME -->)")
    if name not in PROTOCOLS:
        raise DocsTablesError(f"unknown protocol {name!r}; expected one of {', '.join(PROTOCOLS)}")
    if kind == "options" and not PROTOCOLS[name].scores:
        raise DocsTablesError(f"protocol {name!r} has no scoring pass, so no `sdscore score {name}` options")
    return renderer(name)


# --------------------------------------------------------------------------------------------- blocks

@dataclass(frozen=True)
class Block:
    """One generated block of a page: text[start:end] is its content between the two markers."""

    path: Path
    line: int  # 1-based line of its start marker
    kind: str
    name: str | None
    start: int
    end: int

    @property
    def label(self) -> str:
        return self.kind if self.name is None else f"{self.kind} {self.name}"


def find_blocks(text: str, path: Path) -> list[Block]:
    """The generated blocks of a page, in order; a start marker without its end, or a block inside a
    block, is a DocsTablesError naming the file and line."""
    blocks, position = [], 0
    while (match := _START.search(text, position)) is not None:
        line = text.count("\n", 0, match.start()) + 1
        end = text.find(END, match.end())
        nested = _START.search(text, match.end())
        if end < 0:
            raise DocsTablesError(f"{path}:{line}: '{match.group(0)}' has no '{END}' after it")
        if nested is not None and nested.start() < end:
            inner = text.count("\n", 0, nested.start()) + 1
            raise DocsTablesError(f"{path}:{inner}: a generated block starts inside the block of line {line}")
        blocks.append(Block(path, line, match.group(1), match.group(2), match.end(), end))
        position = end + len(END)
    return blocks


def refreshed(text: str, path: Path) -> tuple[str, list[Block]]:
    """The page with every block rendered afresh, and the blocks whose content changed."""
    stale, pieces, position = [], [], 0
    for block in find_blocks(text, path):
        content = "\n" + render(block.kind, block.name) + "\n"
        if text[block.start:block.end] != content:
            stale.append(block)
        pieces += [text[position:block.start], content]
        position = block.end
    return "".join(pieces) + text[position:], stale


def missing_blocks(docs: Path, pages: dict[Path, list[Block]]) -> list[str]:
    """Every registered protocol needs docs/NAME.md with its manifest, options (when it scores) and
    eval-options blocks; the runtime's options need one block somewhere."""
    from sdscore.protocols.registry import PROTOCOLS

    present = {(b.kind, b.name) for blocks in pages.values() for b in blocks}
    missing = []
    for entry in PROTOCOLS.values():
        for kind in PROTOCOL_KINDS:
            if kind == "options" and not entry.scores:
                continue
            if (kind, entry.name) not in present:
                missing.append(f"{docs / (entry.name + '.md')}: no '<!-- generated: {kind} {entry.name} -->' block")
    if ("runtime-options", None) not in present:
        missing.append(f"{docs / 'runtime.md'}: no '<!-- generated: runtime-options -->' block")
    return missing


def check(docs: Path) -> list[str]:
    """One line per stale or missing block of docs/*.md (empty: the docs are current)."""
    problems, pages = [], {}
    for path in _pages(docs):
        _, stale = refreshed(path.read_text(encoding="utf-8"), path)
        pages[path] = find_blocks(path.read_text(encoding="utf-8"), path)
        problems += [f"{b.path}:{b.line}: generated block '{b.label}' is stale" for b in stale]
    return problems + missing_blocks(docs, pages)


def write(docs: Path) -> list[Path]:
    """Rewrite every stale block in place; returns the pages changed."""
    changed = []
    for path in _pages(docs):
        text = path.read_text(encoding="utf-8")
        new, stale = refreshed(text, path)
        if stale:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed


def _pages(docs: Path) -> list[Path]:
    if not docs.is_dir():
        raise DocsTablesError(f"{docs}: not a folder of docs pages (pass --docs DIR)")
    return sorted(docs.glob("*.md"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sdscore.docs_tables", description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite the generated blocks of docs/*.md")
    mode.add_argument("--check", action="store_true", help="exit 1 naming each stale or missing block")
    parser.add_argument("--docs", type=Path, default=None, help="the docs folder (default: the checkout's docs/)")
    args = parser.parse_args(argv)
    docs = args.docs or default_docs_folder()
    try:
        if args.write:
            changed = write(docs)
            print("\n".join(f"rewrote {path}" for path in changed) or "every generated block is current")
            problems = missing_blocks(docs, {p: find_blocks(p.read_text(encoding="utf-8"), p) for p in _pages(docs)})
        else:
            problems = check(docs)
    except SdscoreError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems and args.check:
        print(f"regenerate with: {REGENERATE}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
