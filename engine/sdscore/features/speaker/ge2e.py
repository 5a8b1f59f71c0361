"""GE2E speaker encoder with resemblyzer's bundled weights, batched across files.

The math is resemblyzer's ``VoiceEncoder().embed_utterance(preprocess_wav(wav))``: volume
normalisation to -30 dBFS (increase only), webrtcvad trimming of long silences, 40-channel mel
power frames (25 ms window, 10 ms hop), 160-frame partial windows at 1.3 per second with 0.75
minimum coverage, LSTM(3×256) → ReLU(linear) → L2 per partial, mean, L2. The difference is the
batching: the partial windows of many files go through the LSTM together, which is where the
time goes. On CPU the LSTM is the compiled core's (csrc/rnn/: one input-projection GEMM per
layer, then a step kernel with the gate nonlinearities fused), which also gives each partial
the same bits whichever partials share its call.
"""

from __future__ import annotations

import importlib.util
import os
import warnings
from collections.abc import Sequence
from contextlib import contextmanager
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import torch
from scipy.ndimage import binary_dilation

from sdscore.checkpoint_files import check_finite, check_floats, load_torch_pickle
from sdscore.errors import MissingDependencyError, ModelError
from sdscore.features.cache import hash_file
from sdscore._native import core
from sdscore.features.speaker.forward_pool import ForwardPool
from sdscore.models.log_mel import mel_filterbank
from sdscore.runtime.compute_budget import cores

SAMPLE_RATE = 16000
MEL_WINDOW = 400  # 25 ms
MEL_HOP = 160  # 10 ms
MEL_CHANNELS = 40
PARTIAL_FRAMES = 160  # 1.6 s
PARTIAL_RATE = 1.3
MIN_COVERAGE = 0.75
VAD_WINDOW = 480  # 30 ms
VAD_AVERAGE_WIDTH = 8
VAD_MAX_SILENCE = 6
TARGET_DBFS = -30
INT16_MAX = 2**15 - 1
HIDDEN = 256
LAYERS = 3
#: Bumped whenever the pipeline's math changes, so cached embeddings are not reused across it.
PIPELINE_VERSION = "ge2e-2"  # 2: the compiled core's LSTM on CPU
INSTALL_HINT = "pip install resemblyzer 'setuptools<81'"


def bundled_weights() -> Path:
    """Path of resemblyzer's ``pretrained.pt`` (found without importing resemblyzer)."""
    spec = importlib.util.find_spec("resemblyzer")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError(f"the GE2E embedder needs resemblyzer's weights: {INSTALL_HINT}")
    return Path(next(iter(spec.submodule_search_locations))) / "pretrained.pt"


def _webrtcvad():
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # webrtcvad imports the deprecated pkg_resources
            import webrtcvad
    except ImportError as error:
        raise MissingDependencyError(f"GE2E silence trimming needs webrtcvad: {INSTALL_HINT}") from error
    return webrtcvad


def normalize_volume(wav: np.ndarray) -> np.ndarray:
    """Scale wav [T] up to -30 dBFS RMS (never down), as resemblyzer.audio.normalize_volume."""
    rms = np.sqrt(np.mean((wav * INT16_MAX) ** 2))
    wave_dbfs = 20 * np.log10(rms / INT16_MAX)
    change = TARGET_DBFS - wave_dbfs
    if change < 0:
        return wav
    return wav * (10 ** (change / 20))


def trim_long_silences(wav: np.ndarray, webrtcvad) -> np.ndarray:
    """Drop silences longer than 6 VAD windows from wav [T], as resemblyzer.audio.trim_long_silences.

    A fresh detector per file: webrtcvad adapts its noise estimate, so a shared one would make a
    file's result depend on the files before it.
    """
    vad = webrtcvad.Vad(mode=3)
    wav = wav[: len(wav) - len(wav) % VAD_WINDOW]
    pcm = np.round(wav * INT16_MAX).astype(np.int16).tobytes()
    step = VAD_WINDOW * 2
    flags = np.array(
        [vad.is_speech(pcm[start : start + step], sample_rate=SAMPLE_RATE) for start in range(0, len(pcm), step)],
        dtype=np.float64,
    )
    width = VAD_AVERAGE_WIDTH
    padded = np.concatenate((np.zeros((width - 1) // 2), flags, np.zeros(width // 2)))
    running = np.cumsum(padded, dtype=float)
    running[width:] = running[width:] - running[:-width]
    mask = np.round(running[width - 1 :] / width).astype(bool)
    mask = binary_dilation(mask, np.ones(VAD_MAX_SILENCE + 1))
    return wav[np.repeat(mask, VAD_WINDOW)]


def partial_starts(n_samples: int, rate: float = PARTIAL_RATE, min_coverage: float = MIN_COVERAGE) -> np.ndarray:
    """First mel frame of each 160-frame partial window, as VoiceEncoder.compute_partial_slices."""
    n_frames = int(np.ceil((n_samples + 1) / MEL_HOP))
    frame_step = int(np.round((SAMPLE_RATE / rate) / MEL_HOP))
    if not 0 < frame_step <= PARTIAL_FRAMES:
        raise ValueError(f"rate {rate} gives a frame step of {frame_step}; it must be in 1..{PARTIAL_FRAMES}")
    if not 0 < min_coverage <= 1:
        raise ValueError(f"min_coverage must be in (0, 1], got {min_coverage}")
    starts = np.arange(0, max(1, n_frames - PARTIAL_FRAMES + frame_step + 1), frame_step, dtype=np.int64)
    coverage = (n_samples - starts[-1] * MEL_HOP) / (PARTIAL_FRAMES * MEL_HOP)
    if coverage < min_coverage and len(starts) > 1:
        starts = starts[:-1]
    return starts


@contextmanager
def _one_intra_op_thread():
    """The calling thread's torch ops on one thread inside: a file's STFT and mel frames are too
    small to split, the forward workers already keep the cores busy, and on a shared machine a
    split op waits for its descheduled team threads."""
    threads = torch.get_num_threads()
    if threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class _Ge2eNetwork(torch.nn.Module):
    """LSTM(40→256, 3 layers) → ReLU(Linear 256→256) → L2: mels [B, 160, 40] → embeddings [B, 256]."""

    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(MEL_CHANNELS, HIDDEN, LAYERS, batch_first=True)
        self.linear = torch.nn.Linear(HIDDEN, HIDDEN)

    def forward(self, mels: torch.Tensor) -> torch.Tensor:
        _, (hidden, _) = self.lstm(mels)
        raw = torch.relu(self.linear(hidden[-1]))
        return raw / torch.norm(raw, dim=1, keepdim=True)


class Ge2eEncoder:
    """GE2E embeddings [N, 256] of 16 kHz waveforms; partial windows of many files share LSTM batches.

    On CPU the batches run on `workers` threads (default: the compute budget's cores()) of one intra-op
    thread each (see forward_pool).
    """

    name = "ge2e"
    sample_rate = SAMPLE_RATE
    dim = HIDDEN

    def __init__(
        self,
        weights: str | os.PathLike | None = None,
        device: str = "cpu",
        partials_per_batch: int = 64,
        workers: int | None = None,
    ):
        if partials_per_batch < 1:
            raise ValueError(f"partials_per_batch must be >= 1, got {partials_per_batch}")
        self.workers = cores() if workers is None else int(workers)  # default: the compute budget
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self._pool: ForwardPool | None = None
        path = Path(weights) if weights is not None else bundled_weights()
        if path.is_dir():
            path = path / "pretrained.pt"
        if not path.is_file():
            raise ModelError(f"{path}: GE2E weights not found (expected resemblyzer's pretrained.pt)")
        checkpoint = load_torch_pickle(path)
        try:
            state = checkpoint.get("model_state", checkpoint)
            state = {k: v for k, v in state.items() if k.split(".")[0] in ("lstm", "linear")}
            self.network = _Ge2eNetwork()
            own = self.network.state_dict()
            check_floats(((k, v) for k, v in state.items() if k in own and own[k].is_floating_point()), path)
            check_finite(state.items(), path)
            self.network.load_state_dict(state)
        except (RuntimeError, KeyError, TypeError, AttributeError) as error:
            raise ModelError(f"{path}: not a GE2E checkpoint: {error}") from error
        self.device = torch.device(device)
        self.network.to(self.device).eval()
        # torch.nn.LSTM's weights per layer, for the compiled core's LSTM on CPU
        self._lstm_layers = [
            tuple(np.ascontiguousarray(getattr(self.network.lstm, f"{name}_l{layer}").detach().cpu().numpy())
                  for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))
            for layer in range(LAYERS)
        ]
        self.partials_per_batch = int(partials_per_batch)
        self.version = f"{PIPELINE_VERSION}-{hash_file(path)[:16]}"
        self._webrtcvad = _webrtcvad()
        self._window = torch.hann_window(MEL_WINDOW, periodic=True)
        self._mel_basis = None

    def _mel(self, wav: np.ndarray) -> torch.Tensor:
        """Mel power frames [T, 40] of wav [S], as resemblyzer.audio.wav_to_mel_spectrogram."""
        if self._mel_basis is None:
            # librosa.filters.mel's Slaney filters (resemblyzer's), without importing librosa -> numba ->
            # scipy.stats into every `score consistency` (equal within 1e-6: test_mel_filterbank_matches_librosa)
            basis = mel_filterbank(SAMPLE_RATE, MEL_WINDOW, MEL_CHANNELS)
            self._mel_basis = torch.from_numpy(np.array(basis, dtype=np.float32))
        spec = torch.stft(
            torch.from_numpy(wav), MEL_WINDOW, MEL_HOP, window=self._window,
            center=True, pad_mode="constant", return_complex=True,
        )
        return (self._mel_basis @ spec.abs().square()).T

    def _partials(self, wav: np.ndarray) -> torch.Tensor:
        """Preprocessed wav [S] → its partial windows [P, 160, 40] (raises ValueError without speech)."""
        if len(wav) == 0:
            raise ValueError("audio is empty")
        if not np.isfinite(wav).all():
            raise ValueError("audio holds NaN or Inf samples")
        if not wav.any():
            raise ValueError("audio is silent (all samples zero): nothing to embed")
        wav = trim_long_silences(normalize_volume(wav), self._webrtcvad)
        if len(wav) == 0:
            raise ValueError("no speech found by voice activity detection")
        starts = partial_starts(len(wav))
        stop = int(starts[-1] + PARTIAL_FRAMES) * MEL_HOP
        if stop >= len(wav):
            wav = np.pad(wav, (0, stop - len(wav)))
        mel = self._mel(np.ascontiguousarray(wav, dtype=np.float32))
        return mel[torch.from_numpy(starts)[:, None] + torch.arange(PARTIAL_FRAMES)]

    def embed_waveforms(self, waves: Sequence[np.ndarray]) -> tuple[np.ndarray, list[str | None]]:
        """Embeddings [N, 256] (float32, L2-normed; NaN rows where errors[i] is set) of 16 kHz waves.

        The main thread prepares partial windows while the workers run LSTM batches of up to
        partials_per_batch of them. A file's embedding is the same bits whichever files share its
        call (a resumed run equals a whole one): the core's LSTM computes each row alone, and the
        output layer (a torch matmul, whose rounding depends on its row count, not on a row's
        place) always gets exactly partials_per_batch rows, padded with zeros; off CPU the whole
        forward gets them.
        """
        out = np.full((len(waves), HIDDEN), np.nan, dtype=np.float32)
        errors: list[str | None] = [None] * len(waves)
        owners: list[tuple[int, int]] = []  # (file index, number of partials), in partial order
        buffer: list[torch.Tensor] = []
        buffered = 0
        results = []
        for i, wav in enumerate(waves):
            try:
                with _one_intra_op_thread():
                    partials = self._partials(np.asarray(wav, dtype=np.float32))
            except ValueError as error:
                errors[i] = str(error)
                continue
            owners.append((i, len(partials)))
            buffer.append(partials)
            buffered += len(partials)
            if buffered >= self.partials_per_batch:
                mels = torch.cat(buffer)
                full = buffered - buffered % self.partials_per_batch
                results += [self._run(chunk) for chunk in mels[:full].split(self.partials_per_batch)]
                buffer, buffered = [mels[full:]], buffered - full
        kept = [self.partials_per_batch] * len(results)
        if buffered:
            results.append(self._run(torch.cat(buffer)))
            kept.append(buffered)
        if not owners:
            return out, errors
        partial = np.concatenate([r.result()[:n] for r, n in zip(results, kept)])
        bounds = np.cumsum([0] + [n for _, n in owners])
        for (i, _), start, stop in zip(owners, bounds[:-1], bounds[1:]):
            raw = np.mean(partial[start:stop], axis=0)
            embedding = raw / np.linalg.norm(raw, 2)
            if np.isfinite(embedding).all():
                out[i] = embedding
            else:
                errors[i] = "GE2E gave a zero embedding (no voiced partial window)"
        return out, errors

    def _run(self, mels: torch.Tensor) -> Future:
        """Future of the partial embeddings [P, 256] (P = partials_per_batch, rows past B zero
        padding) of mels [B, 160, 40], B <= P (already done off CPU)."""
        if self.device.type != "cpu":
            done: Future = Future()
            done.set_result(self._forward(self._padded(mels)))
            return done
        if self._pool is None:
            self._pool = ForwardPool(self.workers)
        return self._pool.submit(self._forward_cpu, mels)

    def _padded(self, rows: torch.Tensor) -> torch.Tensor:
        """rows [B, ...] with zero rows appended up to partials_per_batch."""
        return torch.cat([rows, rows.new_zeros((self.partials_per_batch - len(rows), *rows.shape[1:]))])

    @torch.no_grad()
    def _forward_cpu(self, mels: torch.Tensor) -> np.ndarray:
        """The compiled core's LSTM on the B real rows, the output layer on partials_per_batch rows."""
        hidden = torch.from_numpy(core.lstm_final_hidden(mels.numpy(), self._lstm_layers)[-1])
        raw = torch.relu(self.network.linear(self._padded(hidden)))
        return (raw / torch.norm(raw, dim=1, keepdim=True)).numpy()

    @torch.no_grad()
    def _forward(self, mels: torch.Tensor) -> np.ndarray:
        return self.network(mels.to(self.device)).cpu().numpy()
