"""References to audio clips embedded in a table's cells: ``embedded://<file>#<row>/<column>[/...]``.

The format only (a string convention, no I/O), shared by the corpus readers that write references
(sdscore.corpus.embedded_audio) and the audio readers that resolve them (sdscore.audio.embedded_clips);
it imports nothing heavy, so `import sdscore.audio` stays free of polars."""

from __future__ import annotations

import os
from collections.abc import Sequence
from urllib.parse import quote, unquote

from sdscore.errors import AudioError

SCHEME = "embedded://"


def is_embedded(path) -> bool:
    """Whether a path is an embedded-clip reference (`embedded://...`)."""
    return isinstance(path, str) and path.startswith(SCHEME)


def make_reference(file: str, row: int, steps: Sequence[str]) -> str:
    """The reference of the clip at `steps` (column, then list indices / struct fields) of `row`."""
    location = quote(os.path.abspath(file), safe="/")
    return f"{SCHEME}{location}#{int(row)}/" + "/".join(quote(str(step), safe="") for step in steps)


def parse_reference(reference: str) -> tuple[str, int, list[str]]:
    """(file, 0-based row, steps) of a reference; AudioError for a malformed one."""
    body = reference[len(SCHEME):] if is_embedded(reference) else ""
    location, _, cell = body.partition("#")
    row, _, rest = cell.partition("/")
    if not location or not row.isdigit() or not rest:
        raise AudioError(f"{reference}: not an embedded-audio reference (expected {SCHEME}FILE#ROW/COLUMN)")
    return unquote(location), int(row), [unquote(step) for step in rest.split("/")]


def describe(reference: str) -> str:
    """A reference as errors name it: the file, the row (1-based) and the column (and where inside it)."""
    try:
        file, row, steps = parse_reference(reference)
    except AudioError:
        return reference
    where = f"{file} row {row + 1}, column {steps[0]!r}"
    for step in steps[1:]:
        where += f" item {int(step) + 1}" if step.isdigit() else f" field {step!r}"
    return where
