"""AudioBatch: a ragged batch of mono float32 waveforms at one sample rate."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from sdscore.ragged import check_offsets

#: Full scale of float audio: samples in [-1, 1] are what every int16/PCM path can hold.
FULL_SCALE = 1.0


@dataclass(frozen=True)
class AudioBatch:
    """Waveforms of n items as one flat float32 buffer; item i is ``data[offsets[i]:offsets[i+1]]``.

    ``errors[i]`` is None for a loaded item, else the error text naming its file (the item is empty).

    Samples outside [-1, 1] are kept as decoded and resampled (a float WAV may hold them, and
    resampling a full-scale 8 kHz file overshoots): no backend clips. ``peaks`` records each
    item's largest magnitude and ``over_full_scale`` flags the items above ``FULL_SCALE``; an
    extractor whose reference refuses such input refuses the item too (see README, "Samples
    outside [-1, 1]").
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

    @cached_property
    def peaks(self) -> np.ndarray:
        """Largest |sample| per item (float32; 0 for an empty item)."""
        peaks = np.zeros(len(self), np.float32)
        full = np.flatnonzero(self.lengths > 0)
        if len(full):
            peaks[full] = np.maximum.reduceat(np.abs(self.data), self.offsets[full])
        return peaks

    @property
    def over_full_scale(self) -> np.ndarray:
        """Boolean mask of items with a sample outside [-FULL_SCALE, FULL_SCALE]."""
        return self.peaks > FULL_SCALE

    @property
    def ok(self) -> np.ndarray:
        """Boolean mask of items that loaded."""
        return np.array([e is None for e in self.errors], dtype=bool)
