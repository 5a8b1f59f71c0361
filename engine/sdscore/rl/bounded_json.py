"""JSON from an untrusted client, its nesting depth checked before the parser recurses into it.

`json.loads` recurses once per nesting level, so a body of 200,000 ``[`` ends in RecursionError.
`loads_bounded` first measures the depth on the text with its strings blanked out (a bracket in a
string is not structure), in fixed-size slices so a large body costs bounded memory, and refuses
anything deeper than asked before `json.loads` sees it.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

from sdscore.errors import SdscoreError

# a JSON string: a quote, then runs of plain characters or backslash escapes, then a quote
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_SLICE = 1 << 20


class JSONBodyError(SdscoreError):
    """A request body that is not UTF-8 JSON, or is nested deeper than allowed."""


def json_depth(text: str, stop_above: int | None = None) -> int:
    """The deepest nesting of arrays and objects in `text` (0 for a scalar). With `stop_above`,
    the scan stops after the slice (1 MiB) in which the depth first passes it, and returns the
    deepest nesting seen so far (more than `stop_above`)."""
    structure = _STRING.sub('""', text).encode("utf-8")  # what is left is ASCII in valid JSON
    view = np.frombuffer(structure, np.uint8)
    depth = peak = 0
    for start in range(0, len(view), _SLICE):
        part = view[start:start + _SLICE]
        opens = (part == ord("[")) | (part == ord("{"))
        closes = (part == ord("]")) | (part == ord("}"))
        step = opens.astype(np.int32) - closes.astype(np.int32)
        running = np.cumsum(step) + depth
        peak = max(peak, int(running.max()))
        depth = int(running[-1])
        if stop_above is not None and peak > stop_above:
            break
    return peak


def loads_bounded(data: bytes | str, max_depth: int, what: str = "request body") -> Any:
    """`json.loads` of UTF-8 `data` nested at most `max_depth` deep; JSONBodyError otherwise."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JSONBodyError(f"malformed JSON: the {what} is not UTF-8 ({exc})") from None
    else:
        text = data
    # fewer opening brackets than the limit cannot nest deeper than it (the common case: audio is
    # base64 text without brackets), so the scan runs only when it could find something
    could_exceed = text.count("[") + text.count("{") > max_depth
    if could_exceed and json_depth(text, stop_above=max_depth) > max_depth:
        raise JSONBodyError(f"the {what} nests arrays/objects more than {max_depth} deep "
                            f"(the server's limit); flatten it")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise JSONBodyError(f"malformed JSON: {exc}") from None
