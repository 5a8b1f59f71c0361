"""Write-back into a HF dataset folder written by `save_to_disk`: a new save_to_disk folder whose
splits are the input's, in the same row order, with the result columns appended.

The reader stacks the splits in dataset_dict.json's order (hf_dataset_format.split_files), so the
results' rows are cut into the splits in that order. A result column whose name a split already has
is refused (an earlier write-back's columns, say), unless it is one of the manifest's own columns
that the results repeat (those are not added). Needs the `datasets` package.
"""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl

from sdscore.corpus.hf_dataset_format import split_files
from sdscore.corpus.schemas import ManifestSpec
from sdscore.corpus.write_back_rows import COMMAND, OPTION, added_columns, aligned_results
from sdscore.errors import SdscoreError
from sdscore.output_paths import staged_folder


def _datasets():
    try:
        import datasets
    except ImportError:
        raise SdscoreError(f"{OPTION} into a HF dataset needs the `datasets` package (pip install datasets)") from None
    return datasets


def _plain(frame: pl.DataFrame) -> pl.DataFrame:
    """Enums and categoricals as text: `datasets` has no dictionary-typed features."""
    return frame.with_columns(pl.col(c).cast(pl.String) for c, t in frame.schema.items()
                              if isinstance(t, (pl.Categorical, pl.Enum)))


def write_hf_dataset(manifest: str | os.PathLike, results: str | os.PathLike, spec: ManifestSpec,
                     destination: Path, *, overwrite: bool = False) -> Path:
    """Write the dataset at `manifest` again at `destination` with the result columns added."""
    datasets = _datasets()
    folder = Path(manifest)
    frame, _rows = aligned_results(manifest, results, spec)
    loaded = datasets.load_from_disk(str(folder))
    names = list(split_files(folder))
    parts = [(name, loaded[name]) for name in names] if isinstance(loaded, datasets.DatasetDict) else [("", loaded)]
    if sum(part.num_rows for _, part in parts) != frame.height:
        raise SdscoreError(f"{folder}: its splits hold {sum(p.num_rows for _, p in parts)} rows but {results} "
                           f"{frame.height}; {OPTION} needs the results of this dataset")
    columns = added_columns(frame, spec)
    for name, part in parts:
        clash = [c for c in columns if c in part.column_names]
        if clash:
            where = f"split {name!r}" if name else "the dataset"
            raise SdscoreError(f"{folder}: {where} already has the result column(s) {', '.join(clash)} (an earlier "
                               f"write-back?); write back into the dataset the run scored without them")
    table = _plain(frame.select(columns)).to_arrow()
    with staged_folder(destination, overwrite=overwrite, command=COMMAND) as stage:
        out, start = {}, 0
        for name, part in parts:
            extra = datasets.Dataset(datasets.table.InMemoryTable(table.slice(start, part.num_rows)))
            start += part.num_rows
            out[name] = datasets.concatenate_datasets([part, extra], axis=1)
        written = datasets.DatasetDict(out) if isinstance(loaded, datasets.DatasetDict) else out[""]
        written.save_to_disk(str(stage))
    return destination
