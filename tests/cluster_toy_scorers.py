"""Toy Scorers for the multi-node Ray tests (tests/test_ray_cluster.py), importable by Ray workers.

Each gives ToyScorer's values (runtime_toy_scorer.py) plus what the test checks: `WhereScorer` the RMS
of each row's `audio_a_path` file (a slice the runtime cut), the folder that file lies in and the Ray
node that scored the row; `GateScorer` marks each window it starts in a folder and waits there until
a file `open` appears (so a test can kill a node while windows are in flight); `WideScorer` a wide
float32 state per row (as `--store-pooled` writes), to see that those never pass through the driver.
"""

from __future__ import annotations

import os
import time

import numpy as np
import polars as pl
import soundfile as sf
from runtime_toy_scorer import ToyScorer


def node_id() -> str:
    """The Ray node this process runs on ('driver' outside Ray)."""
    import ray

    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else "driver"


class WhereScorer(ToyScorer):
    def __init__(self, scale: float = 1.0, barrier: str = ""):
        super().__init__(scale)
        self.barrier, self.waited = barrier, False

    def _meet(self) -> None:
        """In its first window, wait (up to 120 s) until an actor on another node has started one too, so
        that neither actor takes every window while the other is still starting."""
        self.waited = True
        with open(os.path.join(self.barrier, node_id()), "w"):
            pass
        deadline = time.monotonic() + 120
        while len(os.listdir(self.barrier)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)

    def __call__(self, rows: pl.DataFrame) -> pl.DataFrame:
        if self.barrier and not self.waited:
            self._meet()
        results = super().__call__(rows)
        good = [error is None for error in rows["error"].to_list()]
        paths = [path if ok else None for path, ok in zip(rows["audio_a_path"].to_list(), good)]
        rms = [None if path is None else float(np.sqrt(np.mean(np.square(sf.read(path, dtype="float64")[0]))))
               for path in paths]
        return results.with_columns(
            pl.Series("slice_rms", rms, pl.Float64),
            pl.Series("slice_folder", [None if p is None else os.path.dirname(p) for p in paths], pl.String),
            pl.lit(node_id()).alias("node"),
        )


class GateScorer(ToyScorer):
    def __init__(self, scale: float = 1.0, gate: str = ""):
        super().__init__(scale)
        self.gate = gate

    def __call__(self, rows: pl.DataFrame) -> pl.DataFrame:
        first = rows["battle_id"][0] if rows.height else "none"
        with open(os.path.join(self.gate, f"at-{node_id()}-{os.getpid()}-{first}"), "w"):
            pass
        while not os.path.exists(os.path.join(self.gate, "open")):
            time.sleep(0.05)
        return super().__call__(rows)


class WideScorer(ToyScorer):
    def __init__(self, scale: float = 1.0, width: int = 1024):
        super().__init__(scale)
        self.width = int(width)

    def __call__(self, rows: pl.DataFrame) -> pl.DataFrame:
        results = super().__call__(rows)
        numbers = rows["battle_id"].str.slice(1).cast(pl.Float32).to_numpy()
        state = numbers[:, None] + np.arange(self.width, dtype=np.float32)[None, :]
        return results.with_columns(pl.Series("state", state, pl.Array(pl.Float32, self.width)))


class CursedScorer(ToyScorer):
    """ToyScorer that fails the window holding battle b0021."""

    def __call__(self, rows: pl.DataFrame) -> pl.DataFrame:
        if "b0021" in rows["battle_id"].to_list():
            raise ValueError("battle b0021 is cursed")
        return super().__call__(rows)
