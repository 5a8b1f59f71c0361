"""AudioBatch: a ragged batch of mono float32 waveforms at one sample rate."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from sdscore.ragged import check_offsets


@dataclass(frozen=True)
class AudioBatch:
    """Waveforms of n items as one flat float32 buffer; item i is ``data[offsets[i]:offsets[i+1]]``.

    ``errors[i]`` is None for a loaded item, else the error text naming its file (the item is empty).
    """

    data: np.ndarray
    offsets: np.ndarray
    errors: list[str | None]
    sample_rate: int

    def __post_init__(self) -> None:
        if self.data.dtype != np.float32 or self.data.ndim != 1:
            raise ValueError(f"data must be 1-D float32, got {self.data.dtype} {self.data.shape}")
        check_offsets(self.offsets, len(self.data))
        if len(self.errors) != len(self.offsets) - 1:
            raise ValueError(
                f"{len(self.errors)} error slots for {len(self.offsets) - 1} items (offsets)"
            )

    def __len__(self) -> int:
        return len(self.errors)

    def __getitem__(self, i: int) -> np.ndarray:
        """Item i's waveform (a view into ``data``)."""
        return self.data[self.offsets[i] : self.offsets[i + 1]]

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self[i] for i in range(len(self)))

    @property
    def lengths(self) -> np.ndarray:
        """Samples per item (int64)."""
        return np.diff(self.offsets)

    @property
    def durations(self) -> np.ndarray:
        """Seconds per item (float64)."""
        return self.lengths / float(self.sample_rate)

    @property
    def ok(self) -> np.ndarray:
        """Boolean mask of items that loaded."""
        return np.array([e is None for e in self.errors], dtype=bool)
