"""A 1M-row reward manifest reads and validates without per-row Python objects or audio access.

Memory, not time, is asserted: RSS growth in a fresh process, and Python-side allocations (tracemalloc),
which would be gigabytes if rows were ever materialised as Python dicts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

ROWS = 1_000_000
ENGINE = Path(__file__).resolve().parents[1] / "engine"

_READER = textwrap.dedent(
    """
    import json, resource, sys, tracemalloc
    import polars as pl
    from sdscore.manifests import read_manifest
    pl.select(pl.lit(1))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    frame = read_manifest(sys.argv[1])
    python_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({
        "rows": frame.height,
        "last_audio": frame["rejected"][-1][1]["audio_path"],
        "frame_bytes": frame.estimated_size(),
        "rss_growth_bytes": (after - before) * 1024,
        "python_peak_bytes": python_peak,
    }))
    """
)


def write_reward_parquet(path: Path, rows: int) -> None:
    """rows pairs of two turns each (user question, assistant answer), relative audio paths."""
    index = pl.int_range(rows, eager=True)
    question = pl.select(pl.format("q/{}.wav", index)).to_series().to_arrow()
    good = pl.select(pl.format("good/{}.wav", index)).to_series().to_arrow()
    bad = pl.select(pl.format("bad/{}.wav", index)).to_series().to_arrow()
    roles = pa.array(["user", "assistant"] * rows)
    texts = pa.nulls(2 * rows, pa.string())
    order = pa.array(np.stack([np.arange(rows), np.arange(rows) + rows], axis=1).ravel())
    offsets = pa.array(np.arange(0, 2 * rows + 1, 2, dtype=np.int32))

    def turns(answers: pa.Array) -> pa.Array:
        audio = pa.concat_arrays([question.cast(pa.string()), answers.cast(pa.string())]).take(order)
        structs = pa.StructArray.from_arrays([roles, texts, audio], names=["role", "text", "audio_path"])
        return pa.ListArray.from_arrays(offsets, structs)

    table = pa.table(
        {
            "pair_id": index.cast(pl.String).to_arrow().cast(pa.string()),
            "criterion": pa.array(["modality"] * rows),
            "chosen": turns(good),
            "rejected": turns(bad),
        }
    )
    pq.write_table(table, path)


def test_million_row_manifest_reads_within_memory_bounds(tmp_path):
    path = tmp_path / "pairs.parquet"
    write_reward_parquet(path, ROWS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ENGINE), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", _READER, str(path)], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["rows"] == ROWS
    assert report["last_audio"] == str(tmp_path / f"bad/{ROWS - 1}.wav")
    # Generous: polars' reader and the path rewrite hold transient copies (about 3.5x here).
    assert report["rss_growth_bytes"] < 6 * report["frame_bytes"] + 512 * 2**20, report
    # Python objects for every row would take gigabytes; the frame lives in Arrow buffers.
    assert report["python_peak_bytes"] < 64 * 2**20, report
