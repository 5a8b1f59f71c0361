"""A Hugging Face dataset saved as a folder: `save_to_disk` (Arrow) or split files (Parquet/JSON/JSONL).

Every split is read and stacked with a `split` column. SDiaReward pairs without an id get
"<split>/<row in split>", so that ids stay unique across splits.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from sdscore.corpus import sdiareward_format
from sdscore.corpus.native_format import (
    arrow_batches,
    jsonl_objects,
    read_arrow,
    read_json,
    read_jsonl,
    read_parquet,
)
from sdscore.corpus.raw_table import RawTable
from sdscore.corpus.sdiareward_format import is_sdiareward_row, pairs_frame
from sdscore.errors import ManifestError

DATA_SUFFIXES = (".arrow", ".parquet", ".jsonl", ".ndjson", ".json")
_METADATA_FILES = {"dataset_dict.json", "dataset_info.json", "state.json"}
_SPLIT_ORDER = {"train": 0, "validation": 1, "valid": 1, "dev": 1, "test": 2}
_READERS = {
    ".arrow": read_arrow,
    ".parquet": read_parquet,
    ".jsonl": read_jsonl,
    ".ndjson": read_jsonl,
    ".json": read_json,
}


def read_dataset_folder(path: str, source: str) -> RawTable:
    """Read every split of a dataset folder into one table, labelling rows with their split."""
    folder = Path(path)
    splits = split_files(folder)
    if not splits:
        raise ManifestError(
            f"{source}: the folder holds no dataset splits (expected dataset_dict.json with split "
            f"folders of .arrow files, or {', '.join(DATA_SUFFIXES[1:])} files)"
        )
    frames, hints, bounds = [], set(), []
    start = 0
    for split, files in splits.items():
        frame, hint = _read_split(split, files, source, str(folder))
        if split:
            frame = frame.with_columns(pl.lit(split, pl.String).alias("split"))
        frames.append(frame)
        hints.add(hint)
        bounds.append((start, start + frame.height, split))
        start += frame.height
    combined = pl.concat(frames, how="diagonal_relaxed") if len(frames) > 1 else frames[0]
    hint = hints.pop() if len(hints) == 1 else None
    return RawTable(combined.lazy(), source, str(folder), _split_locator(bounds), hint, "HF dataset")


def split_files(folder: Path) -> dict[str, list[Path]]:
    """Map split names to their data files, in order ("" for a folder that is one dataset)."""
    manifest = folder / "dataset_dict.json"
    if manifest.is_file():
        names = json.loads(manifest.read_text()).get("splits", [])
        return {name: sorted((folder / name).glob("*.arrow")) for name in names}
    if (folder / "state.json").is_file():
        return {"": sorted(folder.glob("*.arrow"))}
    splits: dict[str, list[Path]] = {}
    for place in (folder, folder / "data"):
        for file in sorted(place.glob("*")) if place.is_dir() else []:
            if file.suffix in DATA_SUFFIXES and file.name not in _METADATA_FILES:
                splits.setdefault(_split_name(file), []).append(file)
    return dict(sorted(splits.items(), key=lambda item: (_SPLIT_ORDER.get(item[0], len(_SPLIT_ORDER)), item[0])))


def _split_name(file: Path) -> str:
    """train-00000-of-00002.parquet → train; validation.jsonl → validation."""
    return file.name.split(".")[0].split("-")[0]


def _read_split(split: str, files: list[Path], source: str, base_dir: str) -> tuple[pl.DataFrame, str | None]:
    rows = itertools.chain.from_iterable(_rows(file, source) for file in files)
    if is_sdiareward_row(next(rows, None)):
        prefix = f"{split}/" if split else ""
        columnar = _columnar_pairs(files, prefix)
        if columnar is not None:
            return columnar, "reward"
        rows = itertools.chain.from_iterable(_rows(file, source) for file in files)
        return pairs_frame(rows, id_prefix=prefix), "reward"
    tables = [_READERS[file.suffix](str(file), f"{source}/{file.name}", base_dir) for file in files]
    frames = [table.frame.collect() for table in tables]
    frame = pl.concat(frames, how="diagonal_relaxed") if len(frames) > 1 else frames[0]
    return frame, tables[0].protocol_hint


def _columnar_pairs(files: list[Path], id_prefix: str) -> pl.DataFrame | None:
    """Convert a split's SDiaReward files by columns; None if any file or layout needs the row converter."""
    import pyarrow as pa
    import pyarrow.json as pa_json

    frames = []
    try:
        for file in files:
            if file.suffix == ".parquet":
                frames.append(pl.read_parquet(file))
            elif file.suffix == ".arrow":
                schema, batches = arrow_batches(str(file), str(file))
                frames.append(pl.from_arrow(pa.Table.from_batches(list(batches), schema=schema)))
            elif file.suffix in (".jsonl", ".ndjson"):
                frames.append(pl.from_arrow(pa_json.read_json(file)))
            else:
                return None
        combined = pl.concat(frames, how="vertical_relaxed") if len(frames) > 1 else frames[0]
        converted = sdiareward_format.columnar_pairs(combined.lazy(), id_prefix)
        return None if converted is None else converted.collect()
    except (pa.ArrowInvalid, pl.exceptions.SchemaError, pl.exceptions.InvalidOperationError):
        return None


def _rows(file: Path, source: str) -> Iterator[Any]:
    """The rows of one data file as Python objects, streamed where the format allows."""
    label = f"{source}/{file.name}"
    if file.suffix in (".jsonl", ".ndjson"):
        yield from jsonl_objects(str(file), label)
    elif file.suffix == ".json":
        rows = json.loads(file.read_bytes())
        yield from rows if isinstance(rows, list) else [rows]
    elif file.suffix == ".parquet":
        import pyarrow.parquet as pq

        for batch in pq.ParquetFile(file).iter_batches(batch_size=10_000):
            yield from batch.to_pylist()
    else:
        _schema, batches = arrow_batches(str(file), label)
        for batch in batches:
            yield from batch.to_pylist()


def _split_locator(bounds: list[tuple[int, int, str]]):
    def locate(indices: Sequence[int]) -> list[str]:
        labels = []
        for index in indices:
            split, start = next(((s, b) for b, e, s in bounds if b <= index < e), ("", 0))
            inner = f" ({split} row {index - start + 1})" if split else ""
            labels.append(f"row {index + 1}{inner}")
        return labels

    return locate
