"""Audio clips embedded in a dataset file (HF `datasets` Audio columns), read by reference.

A manifest reader does not copy an embedded clip anywhere: it puts a reference in the row instead
of a path, ``embedded://<file>#<row>/<column>[/<list index or struct field>...]`` (the file's
absolute path percent-quoted, the row 0-based in the file; sdscore.corpus.embedded_audio), and
every audio reader resolves it here by reading that one cell's bytes from the file: an Arrow IPC file or stream (what
`save_to_disk` writes) is memory-mapped, so a clip's bytes are read from the page cache and never
held beyond its decode; a Parquet file is read one row group's column at a time (the last few
kept per process). The bytes are then decoded as a file with those bytes would be, by the
decoder of objects on a store (`sdscore.audio.remote_audio`, `sdscore.audio.memory.decode_bytes`:
WAV by the native core, everything else by libsndfile).

Errors name the file, the row (1-based, as in the file) and the column, e.g.
``/data/ds/train/data-00000-of-00001.arrow row 13, column 'answer_audio_path'``.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import io
import os
import threading
import numpy as np

from sdscore.embedded_refs import SCHEME, describe, is_embedded, make_reference, parse_reference
from sdscore.errors import AudioError

__all__ = ["SCHEME", "describe", "embedded_digest", "is_embedded", "make_reference", "open_embedded",
           "parse_reference", "read_embedded"]

_ARROW_SUFFIXES = (".arrow", ".feather", ".ipc")


class _ArrowCells:
    """An Arrow IPC file or stream, memory-mapped: its record batches and their first rows."""

    def __init__(self, file: str):
        import pyarrow as pa

        source = pa.memory_map(file)
        try:
            batches = list(pa.ipc.open_stream(source))
        except pa.ArrowInvalid:
            reader = pa.ipc.open_file(source)
            batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
        self.batches = batches
        self.starts = np.cumsum([0] + [b.num_rows for b in batches]).tolist()

    def cell(self, row: int, column: str):
        index = bisect.bisect_right(self.starts, row) - 1
        if row < 0 or index >= len(self.batches):
            raise IndexError(f"the file has {self.starts[-1]} rows")
        return self.batches[index].column(column)[row - self.starts[index]]


class _ParquetCells:
    """A Parquet file: its row groups' first rows; a row group's column is read when a cell asks."""

    def __init__(self, file: str):
        import pyarrow.parquet as pq

        self.file = pq.ParquetFile(file)
        meta = self.file.metadata
        self.starts = np.cumsum([0] + [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]).tolist()
        self._lock = threading.Lock()
        self._groups: dict[tuple[int, str], object] = {}  # the last few row groups' columns read

    def cell(self, row: int, column: str):
        index = bisect.bisect_right(self.starts, row) - 1
        if row < 0 or index >= len(self.starts) - 1:
            raise IndexError(f"the file has {self.starts[-1]} rows")
        key = (index, column)
        with self._lock:
            values = self._groups.get(key)
            if values is None:
                values = self.file.read_row_group(index, columns=[column]).column(0)
                if len(self._groups) >= 4:
                    self._groups.pop(next(iter(self._groups)))
                self._groups[key] = values
        return values[row - self.starts[index]]


@functools.lru_cache(maxsize=16)
def _cells(file: str, size: int, mtime_ns: int):
    """The opened file (re-opened when its size or modification time changes)."""
    return _ArrowCells(file) if file.lower().endswith(_ARROW_SUFFIXES) else _ParquetCells(file)


def read_embedded(reference: str) -> memoryview:
    """The encoded bytes of one embedded clip (a view of the memory-mapped file for Arrow);
    AudioError naming the file, row and column when the file, row, column or bytes are missing."""
    file, row, steps = parse_reference(reference)
    name = describe(reference)
    try:
        info = os.stat(file)
        value = _cells(file, info.st_size, info.st_mtime_ns).cell(row, steps[0])
        for step in steps[1:]:
            value = value[int(step)] if step.isdigit() and not hasattr(value, "keys") else value[step]
        data = value["bytes"]
    except FileNotFoundError:
        raise AudioError(f"{name}: the dataset file is gone (no such file)") from None
    except (IndexError, KeyError, TypeError, ValueError, OSError) as error:
        raise AudioError(f"{name}: cannot read the embedded audio ({error})") from None
    if not data.is_valid:
        raise AudioError(f"{name}: no embedded audio bytes")
    return memoryview(data.as_buffer())


def embedded_digest(reference: str, digest_size: int) -> str:
    """Blake2b hex digest of the clip's bytes: the digest a file holding those bytes would have."""
    return hashlib.blake2b(read_embedded(reference), digest_size=digest_size).hexdigest()


def open_embedded(reference: str) -> io.BytesIO:
    """The clip's bytes as a seekable file object (for soundfile's header and slice reads)."""
    return io.BytesIO(read_embedded(reference))
