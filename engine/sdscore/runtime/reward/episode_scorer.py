"""RewardScorer: batched reward scoring of spoken episodes, in process (RL loops) or over corpora.

The input is cut into windows of `window` episodes. For each window every audio path is loaded
with one threaded `load_many` call, the model prepares all episodes at once (`prepare_many`: the
compact model runs one batched log-mel over the window's distinct clips, so a pair's shared
context is computed once) and the episodes are grouped by length into batches
(runtime/batching.py). On CUDA a background thread prepares the next window while the GPU runs
this one (the one chunking/read-ahead loop, features/batched_extraction.py). (Several processes or machines are the runtime's executors, which run whole protocol
Scorers: runtime/executors.) Results come back in input order. A bad
episode (unreadable audio, no usable turn) gets NaN and its error text; the other episodes of its
batch are scored as usual. Audio longer than `max_audio_seconds` (files and in-memory waveforms
alike, the CLI's --max-audio-seconds) and empty or non-finite waveforms are refused per episode;
a clip longer than the model's window (`RewardModel.max_clip_seconds`) is cut to its start, and
the episode's warning says so (`score`, `score_pairs` and `pooled` raise it as a ClipCutWarning:
the CLI writes it to the results' warning column).

In-memory waveforms may be numpy arrays, torch tensors on any device or any DLPack array
(sdscore.audio.dlpack_waveforms): tensors are read without a copy, brought to the scorer's device
only when they are elsewhere, and resampled there when their turn gives another `sample_rate`.
"""

from __future__ import annotations

import math
import os
import warnings as pywarnings
from collections.abc import Iterator, Sequence
from contextlib import closing, nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import torch

from sdscore.audio import load_many
from sdscore.audio.checks import DEFAULT_MAX_AUDIO_SECONDS
from sdscore.audio.dlpack_waveforms import checked_waveform
from sdscore.checkpoint_files import resolve_device, resolve_dtype
from sdscore.errors import SdscoreError
from sdscore.features.batched_extraction import plan_chunks, read_ahead
from sdscore.models.base import Prepared, RewardModel, batch_pinned, batch_to
from sdscore.models.episodes import Episode, episodes_from_pairs
from sdscore.progress import Progress
from sdscore.runtime.batching import default_token_budget, plan_batches, plan_token_batches
from sdscore.runtime.reward.prefix_groups import group_by_prefix, plan_group_batches

#: the exported file each non-torch backend runs, under MODEL_DIR/export/
EXPORT_FILES = {"onnxruntime": "model.onnx", "tensorrt": "model.trt.engine"}


@dataclass
class ScoredWindow:
    """Scores of one window of episodes; `indices` are positions in the scorer's input."""

    indices: np.ndarray  # int64 [n]
    rewards: torch.Tensor  # float32 [n] on the CPU, NaN where errors[i] is set
    pooled: torch.Tensor | None  # float32 [n, H] on the CPU when asked for, NaN rows on error
    errors: list[str | None]
    warnings: list[str | None]  # e.g. clips cut to the model's window


@dataclass
class _PreparedWindow:
    indices: np.ndarray
    batches: list[tuple[list[int], dict[str, torch.Tensor]]]  # positions within the window
    errors: list[str | None]
    warnings: list[str | None]


class ClipCutWarning(UserWarning):
    """Some clips were longer than the model's window and were scored on their start only."""


def _cut_clips_warning(waves: Sequence[np.ndarray | None], cap_seconds: float, sample_rate: int) -> str | None:
    """The warning of an episode whose clips the model cuts to its window, or None."""
    cut = [f"turn {t} ({len(w) / sample_rate:.1f} s)" for t, w in enumerate(waves)
           if w is not None and len(w) > round(cap_seconds * sample_rate)]
    if not cut:
        return None
    return f"{', '.join(cut)} cut to the model's first {cap_seconds:g} s"


class RewardScorer:
    """Scores episodes with a reward model: `score`, `score_pairs`, `pooled`, or `stream` windows."""

    def __init__(
        self,
        model: RewardModel,
        *,
        device: str | torch.device = "auto",
        dtype: str | torch.dtype = "auto",
        max_batch: int = 16,
        max_tokens: int | None = None,
        window: int | None = None,
        num_threads: int | None = None,
        prefetch: bool | None = None,
        session: Any = None,
        max_audio_seconds: float | None = DEFAULT_MAX_AUDIO_SECONDS,
        share_prefixes: bool = True,
    ):
        """model: a loaded RewardModel; max_tokens caps the positions per batch (B × Lmax padded, their
        sum for a model that packs, whose default then comes from device memory); window (default
        16 × max_batch) is how many episodes are loaded, featurised and bucketed together;
        session: an exported-model session (runtime.reward.onnx_backend) that replaces the torch forward;
        prefetch (default: on for CUDA) prepares the next window on a thread while this one runs —
        on a CPU-only machine the two compete for the same cores and it measured slower;
        max_audio_seconds: audio files longer than this are refused per episode (0 or None: no cap);
        share_prefixes: episodes of a window that share a prefix (a pair's context, a rollout's
        prompt) run it once when the model supports it (runtime/reward/prefix_groups.py)."""
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.model = model
        self.device = resolve_device(device or "auto")
        self.dtype = resolve_dtype(dtype, self.device)
        self.max_batch = int(max_batch)
        self.max_tokens = max_tokens
        self.window = int(window or 16 * self.max_batch)
        if self.window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.num_threads = num_threads
        self.max_audio_seconds = float(max_audio_seconds or 0.0)
        self.prefetch = self.device.type == "cuda" if prefetch is None else bool(prefetch)
        self.session = session
        self.share_prefixes = bool(share_prefixes) and session is None and model.supports_prefix_sharing
        if session is None:
            self.model.to(device=self.device, dtype=self.dtype)
        self.model.eval()
        # autocast only where a weight is not in the target dtype: over a model already cast to it,
        # it would only add casts (an exported session runs its own precision)
        self._autocast_needed = session is None and self.dtype != torch.float32 and any(
            p.dtype != self.dtype for p in self.model.parameters() if p.is_floating_point())
        self._default_budget: int | None = None

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike,
        backend: str = "auto",
        device: str | torch.device = "auto",
        dtype: str | torch.dtype = "auto",
        *,
        export_path: str | os.PathLike | None = None,
        model_options: dict | None = None,
        **scorer_options: Any,
    ) -> RewardScorer:
        """Load a local reward-model directory (any layout models/loading.py knows).

        backend "auto"/"torch" runs the model in torch; "onnxruntime" and "tensorrt" run an export
        made by `sdscore export PATH --format onnx|tensorrt` (default files PATH/export/model.onnx
        and PATH/export/model.trt.engine; `export_path` overrides) for everything after
        `prepare`/`collate`. model_options (base=, system_prompt=, pooling=, ...) go to the adapter.
        """
        from sdscore.models.loading import load_reward_model

        model = load_reward_model(path, **(model_options or {}))
        if backend in ("auto", "torch"):
            return cls(model, device=device, dtype=dtype, **scorer_options)
        if backend not in EXPORT_FILES:
            raise ValueError(f"unknown backend {backend!r}; expected auto, torch, onnxruntime or tensorrt")
        exported = os.fspath(export_path or os.path.join(os.fspath(path), "export", EXPORT_FILES[backend]))
        if not os.path.isfile(exported):
            fmt = "onnx" if backend == "onnxruntime" else "tensorrt"
            raise SdscoreError(f"{exported}: no {backend} export (run `sdscore export {path} --format {fmt}`)")
        if backend == "onnxruntime":
            from sdscore.runtime.reward.onnx_backend import OnnxRewardSession

            return cls(model, device="cpu", dtype="float32", session=OnnxRewardSession(exported), **scorer_options)
        from sdscore.runtime.reward.tensorrt_backend import TensorRTRewardSession

        return cls(model, device="cuda", dtype="float32", session=TensorRTRewardSession(exported), **scorer_options)

    # ---- public API -------------------------------------------------------------------------

    def score(self, episodes: Sequence[Episode], on_error: str = "raise", progress: Progress | None = None) -> torch.Tensor:
        """float32 [n] rewards in input order, on the scorer's device.

        on_error "raise": an SdscoreError listing every bad episode (after all were tried);
        "nan": bad episodes score NaN.
        """
        episodes = list(episodes)
        rewards, _, errors, warnings = self.score_detailed(episodes, with_pooled=False, progress=progress)
        self._check(errors, on_error)
        _warn_cut_clips(episodes, warnings)
        return rewards.to(self.device)

    def score_pairs(
        self, pairs: pl.DataFrame | Sequence[tuple[Episode, Episode]], on_error: str = "raise",
        progress: Progress | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(chosen, rejected) float32 [n] each; pairs are (chosen, rejected) episodes or a REWARD_PAIRS frame."""
        chosen, rejected = self._split_pairs(pairs)
        rewards, _, errors, warnings = self.score_pairs_detailed(chosen, rejected, with_pooled=False,
                                                                 progress=progress)
        self._check(errors, on_error)
        _warn_cut_clips(chosen + rejected, warnings)
        rewards = rewards.to(self.device)
        return rewards[: len(chosen)], rewards[len(chosen):]

    def score_pairs_detailed(
        self, chosen: Sequence[Episode], rejected: Sequence[Episode], with_pooled: bool = False,
        progress: Progress | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None, list[str | None], list[str | None]]:
        """score_detailed of chosen + rejected (that layout: all chosen, then all rejected).

        The two episodes of a pair are scored next to each other, so they share a window: their
        common context clips are read and featurised once, on any corpus size."""
        if len(chosen) != len(rejected):
            raise ValueError(f"{len(chosen)} chosen but {len(rejected)} rejected episodes")
        n = len(chosen)
        interleaved = [e for pair in zip(chosen, rejected) for e in pair]
        rewards, pooled, errors, warnings = self.score_detailed(interleaved, with_pooled, progress)
        order = torch.cat([torch.arange(0, 2 * n, 2), torch.arange(1, 2 * n, 2)]).tolist()
        return (rewards[order], None if pooled is None else pooled[order], [errors[i] for i in order],
                [warnings[i] for i in order])

    def pooled(self, episodes: Sequence[Episode], on_error: str = "raise", progress: Progress | None = None) -> torch.Tensor:
        """float32 [n, H] pooled last-layer states (the input of the head), on the CPU."""
        if self.session is not None:
            raise SdscoreError("pooled states need the torch backend (an exported model outputs rewards only)")
        episodes = list(episodes)
        _, pooled, errors, warnings = self.score_detailed(episodes, with_pooled=True, progress=progress)
        self._check(errors, on_error)
        _warn_cut_clips(episodes, warnings)
        return pooled

    def stream(
        self, episodes: Sequence[Episode], with_pooled: bool = False, progress: Progress | None = None
    ) -> Iterator[ScoredWindow]:
        """Yield one ScoredWindow per window of the input, in input order (for sharded outputs)."""
        episodes = list(episodes)
        size = self.window + self.window % 2  # even: score_pairs' interleaved pairs never straddle windows
        done = 0
        if progress:
            progress("reward: score", 0, len(episodes))

        def prepare(_, positions: range) -> _PreparedWindow:
            return self._prepare_window(episodes, np.arange(positions.start, positions.stop))

        windows = read_ahead(episodes, plan_chunks(len(episodes), size), prepare, ahead=self.prefetch,
                             describe=lambda i, e: e.id or f"episode {i}")
        with closing(windows):
            for window in windows:
                scored = self._run_window(window.loaded, with_pooled)
                done += len(window.positions)
                if progress:
                    progress("reward: score", done, len(episodes))
                yield scored

    # ---- internals -------------------------------------------------------------------------

    @staticmethod
    def _split_pairs(pairs) -> tuple[list[Episode], list[Episode]]:
        if isinstance(pairs, pl.DataFrame):
            return episodes_from_pairs(pairs)
        pairs = list(pairs)
        for n, pair in enumerate(pairs):
            if not (isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(e, Episode) for e in pair)):
                raise TypeError(f"pair {n}: expected a (chosen, rejected) tuple of Episode, got {type(pair).__name__}")
        return [c for c, _ in pairs], [r for _, r in pairs]

    @staticmethod
    def _check(errors: list[str | None], on_error: str) -> None:
        if on_error not in ("raise", "nan"):
            raise ValueError(f"on_error must be 'raise' or 'nan', got {on_error!r}")
        bad = [e for e in errors if e is not None]
        if bad and on_error == "raise":
            shown = "\n  ".join(bad[:10]) + (f"\n  ... and {len(bad) - 10} more" if len(bad) > 10 else "")
            raise SdscoreError(f"{len(bad)} of {len(errors)} episodes could not be scored:\n  {shown}")

    def score_detailed(
        self, episodes: Sequence[Episode], with_pooled: bool = False, progress: Progress | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None, list[str | None], list[str | None]]:
        """(rewards float32 [n] on the CPU, pooled [n, H] or None, error text or None per episode,
        warning text or None per episode)."""
        episodes = list(episodes)
        for n, e in enumerate(episodes):
            if not isinstance(e, Episode):
                raise TypeError(f"episode {n}: expected sdscore.models.Episode, got {type(e).__name__}")
        rewards = torch.full((len(episodes),), math.nan, dtype=torch.float32)
        pooled = torch.full((len(episodes), self.model.hidden_size), math.nan) if with_pooled else None
        errors: list[str | None] = [None] * len(episodes)
        warnings: list[str | None] = [None] * len(episodes)
        for window in self.stream(episodes, with_pooled, progress):
            idx = torch.from_numpy(window.indices)
            rewards[idx] = window.rewards
            if pooled is not None:
                pooled[idx] = window.pooled
            for i, error, warning in zip(window.indices.tolist(), window.errors, window.warnings):
                errors[i], warnings[i] = error, warning
        return rewards, pooled, errors, warnings

    def _prepare_window(self, episodes: list[Episode], indices: np.ndarray) -> _PreparedWindow:
        """Load the window's audio in one threaded call, prepare each episode, bucket by length."""
        window = [episodes[i] for i in indices]
        paths: dict[str, int] = {}
        for e in window if self.model.needs_audio else ():
            for p in e.audio_paths():
                paths.setdefault(p, len(paths))
        audio = load_many(list(paths), self.model.sample_rate, num_threads=self.num_threads,
                          max_seconds=self.max_audio_seconds) if paths else None
        errors: list[str | None] = [None] * len(window)
        warnings: list[str | None] = [None] * len(window)
        clip_cap = self.model.max_clip_seconds
        prepared: list[Prepared | None] = [None] * len(window)
        loaded, loaded_waves = [], []
        for pos, e in enumerate(window):
            try:
                waves: list[np.ndarray | None] = []
                for t, turn in enumerate(e.turns):
                    if turn.audio is None or not self.model.needs_audio:
                        waves.append(None)
                    elif isinstance(turn.audio, (str, os.PathLike)):
                        slot = paths[os.fspath(turn.audio)]
                        if audio.errors[slot] is not None:
                            raise SdscoreError(f"turn {t}: {audio.errors[slot]}")
                        waves.append(audio[slot])
                    else:
                        waves.append(self._in_memory_waveform(turn, t, e, int(indices[pos])))
                loaded.append(pos)
                loaded_waves.append(waves)
                if clip_cap is not None:
                    warnings[pos] = _cut_clips_warning(waves, clip_cap, self.model.sample_rate)
            except (SdscoreError, ValueError) as exc:
                errors[pos] = f"{e.id or f'episode {int(indices[pos])}'}: {exc}"
        # the torch forward may take inputs prepared for inference (the compact model then projects
        # each distinct clip once here); an exported graph takes the plain ones
        prepared_items = self.model.prepare_many([window[p] for p in loaded], loaded_waves, inference=self.session is None)
        for pos, item in zip(loaded, prepared_items):
            if isinstance(item, Exception):
                errors[pos] = f"{window[pos].id or f'episode {int(indices[pos])}'}: {item}"
            else:
                prepared[pos] = item
        good = [pos for pos in range(len(window)) if prepared[pos] is not None]
        pin = self.device.type == "cuda" and self.session is None
        batches = []

        def add(members: list[int], batch: dict[str, torch.Tensor]) -> None:
            batches.append((members, batch_pinned(batch) if pin else batch))

        if self.share_prefixes:
            items = [prepared[pos] for pos in good]
            groups, single = group_by_prefix(items, self.model.shared_prefix, max_group=self.max_batch)
            for chosen in plan_group_batches(groups, [it.length for it in items], self.max_batch, self.max_tokens):
                add([good[m] for i in chosen for m in groups[i].members],
                    self.model.collate_groups([([items[m] for m in groups[i].members], groups[i].prefix)
                                               for i in chosen]))
            good = [good[p] for p in single]
        # an exported graph takes fixed-rank [B, L, ...] inputs; the torch forward may take packed ones
        collate = self.model.collate_for_inference if self.session is None else self.model.collate_dense
        lengths = [prepared[pos].length for pos in good]
        if self.session is None and self.model.packs_inference:  # no padding: a batch costs its summed length
            plan = plan_token_batches(lengths, self._token_budget(), self.max_batch)
        else:
            plan = plan_batches(lengths, self.max_batch, self.max_tokens)
        for group in plan:
            members = [good[g] for g in group]
            add(members, collate([prepared[pos] for pos in members]))
        return _PreparedWindow(indices, batches, errors, warnings)

    def _run_window(self, prepared: _PreparedWindow, with_pooled: bool) -> ScoredWindow:
        n = len(prepared.indices)
        rewards = torch.full((n,), math.nan, dtype=torch.float32)
        pooled = torch.full((n, self.model.hidden_size), math.nan) if with_pooled else None
        for members, batch in prepared.batches:
            at = torch.tensor(members, dtype=torch.long)
            with torch.inference_mode(), self._autocast():
                moved = batch_to(batch, self.device, self.dtype)
                if self.session is not None:
                    rewards[at] = self.session.run(moved).float().cpu()
                    continue
                states = self.model.inference_pooled(moved)
                rewards[at] = self.model.head(states).float().cpu()
                if pooled is not None:
                    pooled[at] = states.float().cpu()
        return ScoredWindow(prepared.indices, rewards, pooled, prepared.errors, prepared.warnings)

    def _in_memory_waveform(self, turn, t: int, episode: Episode, index: int) -> Any:
        """A turn's in-memory waveform checked and at the model's rate: a float32 tensor on the
        scorer's device for a model that takes device waveforms, else float32 numpy (a CPU tensor
        is viewed, not copied)."""
        on_device = self.session is None and self.model.takes_device_waveforms
        wave = checked_waveform(turn.audio, f"turn {t}" + (f" (episode {index})" if episode.id else ""),
                                model_rate=self.model.sample_rate, rate=turn.sample_rate,
                                device=self.device if on_device else "cpu", max_seconds=self.max_audio_seconds)
        return wave.numpy() if isinstance(wave, torch.Tensor) and not on_device else wave

    def _token_budget(self) -> int:
        """Tokens per packed batch: max_tokens, else runtime.batching.default_token_budget, read once
        (the first window's: later the caching allocator holds what earlier batches freed, and free
        device memory would read lower and lower)."""
        if self.max_tokens:
            return int(self.max_tokens)
        if self._default_budget is None:
            config = getattr(getattr(self.model, "backbone", None), "config", None)
            text = getattr(config, "text_config", config)
            itemsize = torch.empty((), dtype=self.dtype).element_size()
            self._default_budget = default_token_budget(self.device, self.model.hidden_size, itemsize,
                                                        getattr(text, "intermediate_size", None))
        return self._default_budget

    def _autocast(self):
        return torch.autocast(self.device.type, dtype=self.dtype) if self._autocast_needed else nullcontext()


def _warn_cut_clips(episodes: Sequence[Episode], warnings: Sequence[str | None]) -> None:
    """One ClipCutWarning listing the episodes whose clips the model cut (nothing when none was)."""
    cut = [f"{e.id or f'episode {i}'}: {w}" for i, (e, w) in enumerate(zip(episodes, warnings)) if w is not None]
    if not cut:
        return
    shown = "; ".join(cut[:10]) + (f"; ... and {len(cut) - 10} more" if len(cut) > 10 else "")
    pywarnings.warn(f"{len(cut)} of {len(warnings)} episodes have clips longer than the model's window "
                    f"(RewardModel.max_clip_seconds), scored on their start only as `sdscore score` does "
                    f"(its warning column): {shown}", ClipCutWarning, stacklevel=3)
