"""Resumable output: results written shard by shard beside the target, merged at the end.

`OUT.parquet` is produced from `OUT.parquet.parts/part-NNNNNN.parquet` (one per fixed slice of
input rows, each written atomically) plus `run.json` recording what produced them. An interrupted
run resumes with `resume=True`: finished shards are kept, the rest are scored; the final merge is
one atomic write, after which the parts folder is removed. Shards written by a different run
configuration are refused rather than mixed.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import polars as pl

from sdscore.atomic_write import write_json
from sdscore.corpus.write import write_manifest
from sdscore.errors import SdscoreError

RUN_FILE = "run.json"


class ShardedOutput:
    """Shards of `out` for a run of `n_rows` input rows cut into slices of `shard_rows`."""

    def __init__(self, out: str | os.PathLike, n_rows: int, shard_rows: int, config: dict, resume: bool):
        if shard_rows < 1:
            raise ValueError(f"shard_rows must be >= 1, got {shard_rows}")
        self.out = Path(out)
        self.parts = self.out.with_name(self.out.name + ".parts")
        self.n_rows = n_rows
        self.shard_rows = shard_rows
        self.config = {**config, "n_rows": n_rows, "shard_rows": shard_rows}
        self._open(resume)

    def _open(self, resume: bool) -> None:
        run_file = self.parts / RUN_FILE
        if self.parts.exists() and not resume:
            raise SdscoreError(
                f"{self.parts}: holds shards of an unfinished run; pass --resume to continue it, "
                f"or delete the folder to start over"
            )
        if self.parts.exists():
            try:
                previous = json.loads(run_file.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise SdscoreError(f"{run_file}: cannot read the earlier run's settings ({exc})") from exc
            if previous != self.config:
                changed = sorted(k for k in set(previous) | set(self.config) if previous.get(k) != self.config.get(k))
                raise SdscoreError(
                    f"{self.parts}: was written with different settings ({', '.join(changed)} differ); "
                    f"delete the folder to start over with the new ones"
                )
            return
        self.parts.mkdir(parents=True)
        write_json(run_file, self.config)

    @property
    def n_shards(self) -> int:
        return (self.n_rows + self.shard_rows - 1) // self.shard_rows

    def shard_path(self, k: int) -> Path:
        return self.parts / f"part-{k:06d}.parquet"

    def shard_rows_range(self, k: int) -> tuple[int, int]:
        """[start, stop) of input rows in shard k."""
        return k * self.shard_rows, min(self.n_rows, (k + 1) * self.shard_rows)

    def pending(self) -> list[int]:
        """Shards not yet written."""
        return [k for k in range(self.n_shards) if not self.shard_path(k).is_file()]

    def write_shard(self, k: int, frame: pl.DataFrame) -> None:
        start, stop = self.shard_rows_range(k)
        if frame.height != stop - start:
            raise AssertionError(f"shard {k}: {frame.height} rows for input rows {start}..{stop}")
        write_manifest(frame, self.shard_path(k))

    def finish(self, empty: Callable[[], pl.DataFrame]) -> pl.DataFrame:
        """Merge the shards in order into `out` (atomically), remove the parts, return the results."""
        missing = self.pending()
        if missing:
            raise SdscoreError(f"{self.parts}: shards {missing[:5]} missing; cannot merge")
        frames = [pl.read_parquet(self.shard_path(k)) for k in range(self.n_shards)]
        results = pl.concat(frames, how="vertical") if frames else empty()
        write_manifest(results, self.out)
        shutil.rmtree(self.parts)
        return results
