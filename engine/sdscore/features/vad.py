"""Silero VAD over many files at once: the bundled ONNX model stepped in lockstep across files.

The model is stateful per stream (LSTM state [2, B, 128] and the last 64 samples as context),
so files are batched *across* the batch axis: step t feeds window t of every file that still has
one. The post-processing is a port of silero's ``get_speech_timestamps_from_probs`` (hysteresis,
minimum speech/silence, max-speech splitting, padding) and gives the same segments.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import polars as pl

from sdscore.audio import AudioBatch
from sdscore.errors import MissingDependencyError
from sdscore.features.extract import resample
from sdscore.runtime.compute_budget import cores

SAMPLE_RATE = 16000
WINDOW = 512
CONTEXT = 64
INSTALL_HINT = "pip install --no-deps silero-vad onnxruntime"


@dataclass(frozen=True)
class VadSettings:
    """silero's ``get_speech_timestamps`` parameters (its defaults)."""

    threshold: float = 0.5
    min_speech_duration_ms: float = 250
    max_speech_duration_s: float = float("inf")
    min_silence_duration_ms: float = 100
    speech_pad_ms: float = 30
    neg_threshold: float | None = None
    min_silence_at_max_speech: float = 98
    use_max_poss_sil_at_max_speech: bool = True


def bundled_model() -> Path:
    """Path of silero-vad's ``silero_vad.onnx`` (found without importing silero_vad, which needs torch)."""
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError(
            f"the VAD needs silero-vad's bundled model: {INSTALL_HINT}"
        )
    return (
        Path(next(iter(spec.submodule_search_locations))) / "data" / "silero_vad.onnx"
    )


def _session(path: Path):
    try:
        import onnxruntime as ort
    except ImportError as error:
        raise MissingDependencyError(
            f"the VAD runs on onnxruntime: {INSTALL_HINT}"
        ) from error
    opts = ort.SessionOptions()
    # steps are tiny; parallelism comes from splitting the batch across threads
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(
        str(path), sess_options=opts, providers=["CPUExecutionProvider"]
    )


class SileroVad:
    """Extractor ``vad`` → ``vad_segments``: speech segments [[start, end], ...] in seconds."""

    name = "vad"
    requires: tuple[str, ...] = ()
    schema: ClassVar[dict[str, pl.DataType]] = {
        "vad_segments": pl.List(pl.List(pl.Float64))
    }

    def __init__(self, num_threads: int | None = None, model_path: str | None = None, **settings):
        if num_threads is not None and num_threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {num_threads}")
        self.settings = VadSettings(**settings)
        self.num_threads = cores() if num_threads is None else int(num_threads)  # default: the compute budget
        self.session = _session(Path(model_path) if model_path else bundled_model())

    def run(
        self, batch: AudioBatch, inputs: Mapping[str, list] | None = None
    ) -> dict[str, list]:
        batch = resample(batch, SAMPLE_RATE)
        probs = self.speech_probs(batch)
        segments = []
        for i, p in enumerate(probs):
            spans = speech_timestamps(p, int(batch.lengths[i]), self.settings)
            segments.append([[s / SAMPLE_RATE, e / SAMPLE_RATE] for s, e in spans])
        return {"vad_segments": segments}

    def speech_probs(self, batch: AudioBatch) -> list[np.ndarray]:
        """Speech probability per 512-sample window (last one zero-padded) for each item [W_i]."""
        lengths = batch.lengths
        windows = (lengths + WINDOW - 1) // WINDOW
        order = np.argsort(-windows, kind="stable")
        k = min(self.num_threads, max(1, len(order)))
        groups = [
            order[j::k] for j in range(k) if len(order[j::k])
        ]  # balanced, still sorted
        out: list[np.ndarray] = [np.zeros(0, np.float32)] * len(batch)
        if self.num_threads > 1 and len(groups) > 1:
            with ThreadPoolExecutor(len(groups)) as pool:
                results = list(
                    pool.map(lambda g: self._lockstep(batch, g, windows[g]), groups)
                )
        else:
            results = [self._lockstep(batch, g, windows[g]) for g in groups]
        for group, probs in zip(groups, results):
            for i, p in zip(group, probs):
                out[i] = p
        return out

    def _lockstep(
        self, batch: AudioBatch, items: np.ndarray, windows: np.ndarray
    ) -> list[np.ndarray]:
        """Run items (sorted by window count, descending) step by step with per-item state."""
        n = len(items)
        steps = int(windows[0]) if n else 0
        probs = np.zeros((n, steps), np.float32)
        state = np.zeros((2, n, 128), np.float32)
        context = np.zeros((n, CONTEXT), np.float32)
        starts = batch.offsets[items]
        ends = batch.offsets[items + 1]
        ramp = np.arange(WINDOW)
        sr = np.array(SAMPLE_RATE, dtype=np.int64)
        for t in range(steps):
            # the items with more than t windows
            active = int(np.searchsorted(-windows, -t, side="left"))
            idx = starts[:active, None] + t * WINDOW + ramp
            chunk = np.where(
                idx < ends[:active, None],
                batch.data[np.minimum(idx, len(batch.data) - 1)],
                0,
            )
            x = np.concatenate([context[:active], chunk.astype(np.float32)], axis=1)
            out, new_state = self.session.run(
                None,
                {
                    "input": x,
                    "state": np.ascontiguousarray(state[:, :active]),
                    "sr": sr,
                },
            )
            probs[:active, t] = out[:, 0]
            state[:, :active] = new_state
            context[:active] = x[:, -CONTEXT:]
        return [probs[j, : int(windows[j])] for j in range(n)]


def speech_timestamps(
    probs: np.ndarray, audio_length_samples: int, settings: VadSettings = VadSettings()
) -> list[tuple[int, int]]:
    """Speech segments (start, end) in samples at 16 kHz from window probabilities.

    A port of silero-vad 6.2's ``get_speech_timestamps_from_probs``; statement for statement so
    the segments are identical.
    """
    s = settings
    rate, window = SAMPLE_RATE, WINDOW
    min_speech = rate * s.min_speech_duration_ms / 1000
    pad = rate * s.speech_pad_ms / 1000
    max_speech = rate * s.max_speech_duration_s - window - 2 * pad
    min_silence = rate * s.min_silence_duration_ms / 1000
    min_silence_at_max = rate * s.min_silence_at_max_speech / 1000
    neg_threshold = (
        max(s.threshold - 0.15, 0.01) if s.neg_threshold is None else s.neg_threshold
    )

    triggered = False
    speeches: list[dict] = []
    current: dict = {}
    temp_end = prev_end = next_start = 0
    possible_ends: list[tuple[int, int]] = []
    for i, prob in enumerate(probs.tolist()):
        cur = window * i
        if prob >= s.threshold and temp_end:
            sil_dur = cur - temp_end
            if sil_dur > min_silence_at_max:
                possible_ends.append((temp_end, sil_dur))
            temp_end = 0
            if next_start < prev_end:
                next_start = cur
        if prob >= s.threshold and not triggered:
            triggered = True
            current["start"] = cur
            continue
        if triggered and cur - current["start"] > max_speech:
            if s.use_max_poss_sil_at_max_speech and possible_ends:
                prev_end, dur = max(possible_ends, key=lambda x: x[1])
                current["end"] = prev_end
                speeches.append(current)
                current = {}
                next_start = prev_end + dur
                if next_start < prev_end + cur:
                    current["start"] = next_start
                else:
                    triggered = False
                prev_end = next_start = temp_end = 0
                possible_ends = []
            elif prev_end:
                current["end"] = prev_end
                speeches.append(current)
                current = {}
                if next_start < prev_end:
                    triggered = False
                else:
                    current["start"] = next_start
                prev_end = next_start = temp_end = 0
                possible_ends = []
            else:
                current["end"] = cur
                speeches.append(current)
                current = {}
                prev_end = next_start = temp_end = 0
                triggered = False
                possible_ends = []
                continue
        if prob < neg_threshold and triggered:
            if not temp_end:
                temp_end = cur
            sil_now = cur - temp_end
            if not s.use_max_poss_sil_at_max_speech and sil_now > min_silence_at_max:
                prev_end = temp_end
            if sil_now < min_silence:
                continue
            current["end"] = temp_end
            if current["end"] - current["start"] > min_speech:
                speeches.append(current)
            current = {}
            prev_end = next_start = temp_end = 0
            triggered = False
            possible_ends = []
            continue
    if current and audio_length_samples - current["start"] > min_speech:
        current["end"] = audio_length_samples
        speeches.append(current)
    _pad(speeches, pad, audio_length_samples)
    return [(int(sp["start"]), int(sp["end"])) for sp in speeches]


def _pad(speeches: list[dict], pad: float, length: int) -> None:
    """Widen segments by pad samples each side, splitting short gaps between neighbours in half."""
    for i, speech in enumerate(speeches):
        if i == 0:
            speech["start"] = int(max(0, speech["start"] - pad))
        if i != len(speeches) - 1:
            gap = speeches[i + 1]["start"] - speech["end"]
            if gap < 2 * pad:
                speech["end"] += int(gap // 2)
                speeches[i + 1]["start"] = int(
                    max(0, speeches[i + 1]["start"] - gap // 2)
                )
            else:
                speech["end"] = int(min(length, speech["end"] + pad))
                speeches[i + 1]["start"] = int(max(0, speeches[i + 1]["start"] - pad))
        else:
            speech["end"] = int(min(length, speech["end"] + pad))
