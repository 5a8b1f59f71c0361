"""DNSMOS P.835 (standard and personalized) and P.808 MOS from the ONNX files speechmos ships.

Same numbers as ``speechmos.dnsmos.run`` (the Microsoft ``dnsmos_local.py`` algorithm): clips
shorter than 9.01 s are tiled by doubling, 9.01 s windows every 1 s — a window whose float end
index truncates one sample short is skipped, as there — raw scores calibrated by the polyfits,
then averaged. An item with a sample outside [-1, 1] (after resampling to 16 kHz) is refused
with a per-row error (``ROW_ERRORS``), as speechmos raises ValueError on it.

Two things make it fast. The windows of many files run in one onnxruntime batch. And the P.835 network's expensive part, 3×3 "same" convolutions on the log-power spectrogram
(frames of 20 ms every 10 ms, so a 1 s hop is exactly 100 frames), is shift-equivariant: it is
computed once per file over all its frames and sliced into windows, and only the few frames at
each window edge, where a window's zero padding matters, are recomputed on small patches.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import polars as pl
import scipy.fft

from sdscore.audio import AudioBatch
from sdscore.audio.batch import FULL_SCALE
from sdscore.errors import MissingDependencyError, ModelError
from sdscore.features.extract import ROW_ERRORS, resample
from sdscore.runtime.compute_budget import library_threads

SAMPLE_RATE = 16000
INPUT_LENGTH = 9.01
WINDOW_SAMPLES = int(INPUT_LENGTH * SAMPLE_RATE)
FRAME_HOP = 160
FRAME_LENGTH = 320
WINDOW_FRAMES = 900
HOP_FRAMES = SAMPLE_RATE // FRAME_HOP
MEL = {"n_fft": 321, "hop": 160, "n_mels": 120}
INSTALL_HINT = "pip install speechmos onnxruntime onnx librosa"
#: speechmos's calibration polynomials (highest power first) for sig, bak, ovrl.
POLYFIT = {
    "standard": (
        (-0.08397278, 1.22083953, 0.0052439),
        (-0.13166888, 1.60915514, -0.39604546),
        (-0.06766283, 1.11546468, 0.04602535),
    ),
    "personalized": (
        (-0.01019296, 0.02751166, 1.19576786, -0.24348726),
        (-0.04976499, 0.44276479, -0.1644611, 0.96883132),
        (-0.00533021, 0.005101, 1.18058466, -0.11236046),
    ),
}
MODEL_FILES = {
    "standard": "dnsmos_models/sig_bak_ovr.onnx",
    "personalized": "pdnsmos_models/sig_bak_ovr.onnx",
    "p808": "dnsmos_models/model_v8.onnx",
}


def speechmos_dir() -> Path:
    """Folder of the installed speechmos package (found without importing it)."""
    spec = importlib.util.find_spec("speechmos")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError(
            f"DNSMOS needs the ONNX files speechmos ships: {INSTALL_HINT}"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def _onnx():
    try:
        import onnx
        import onnxruntime
    except ImportError as error:
        raise MissingDependencyError(
            f"DNSMOS runs on onnx + onnxruntime: {INSTALL_HINT}"
        ) from error
    return onnx, onnxruntime


def tile(x: np.ndarray) -> np.ndarray:
    """Repeat a clip by doubling until it holds one 9.01 s window (speechmos's padding)."""
    if len(x) == 0:
        raise ValueError("empty audio has no DNSMOS windows")
    while len(x) < WINDOW_SAMPLES:
        x = np.append(x, x)
    return x


def window_indices(n_samples: int) -> list[int]:
    """Indices k of the windows speechmos scores in a (tiled) signal; window k starts at k s."""
    hops = int(np.floor(n_samples / SAMPLE_RATE) - INPUT_LENGTH) + 1
    return [
        k
        for k in range(hops)
        if min(int((k + INPUT_LENGTH) * SAMPLE_RATE), n_samples) - int(k * SAMPLE_RATE)
        >= WINDOW_SAMPLES
    ]


def _runs(ks: list[int], longest: int = 24) -> list[tuple[int, int]]:
    """Runs (first, last) of consecutive sorted window indices, at most `longest` windows each
    (bounds the memory of a run's shared activations: ~20 MB per window)."""
    runs: list[tuple[int, int]] = []
    for k in ks:
        if runs and runs[-1][1] == k - 1 and k - runs[-1][0] < longest:
            runs[-1] = (runs[-1][0], k)
        else:
            runs.append((k, k))
    return runs


def _subgraph(onnx, model, start: str, stop: str, start_shape: list):
    """The nodes of model from tensor `start` to tensor `stop` as a model with a dynamic input."""
    inits = {i.name: i for i in model.graph.initializer}
    avail, nodes = {start}, []
    for node in model.graph.node:
        ins = [i for i in node.input if i and i not in inits]
        if ins and all(i in avail for i in ins):
            nodes.append(node)
            avail.update(node.output)
            if stop in node.output:
                break
    if stop not in avail:
        raise ModelError(f"no path from {start!r} to {stop!r} in the DNSMOS graph")
    used = {i for n in nodes for i in n.input}
    h = onnx.helper
    graph = h.make_graph(
        nodes,
        "part",
        [h.make_tensor_value_info(start, onnx.TensorProto.FLOAT, start_shape)],
        [h.make_tensor_value_info(stop, onnx.TensorProto.FLOAT, None)],
        [inits[k] for k in inits if k in used],
    )
    part = h.make_model(graph, opset_imports=model.opset_import)
    part.ir_version = model.ir_version
    return part, nodes


class SharedTrunkP835:
    """One DNSMOS P.835 network split into trunk (full-resolution convs) and head, see module doc."""

    def __init__(
        self, path: Path, kind: str, batch_windows: int = 8, max_frames: int = 2700
    ):
        onnx, ort = _onnx()
        from onnx import numpy_helper

        model = onnx.load(str(path))
        inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
        convs = [n for n in model.graph.node if n.op_type == "Conv"]
        stft = [inits[n.input[1]] for n in convs if inits[n.input[1]].ndim == 3]
        spatial = [n for n in convs if inits[n.input[1]].ndim == 4]
        pool = next((n for n in model.graph.node if n.op_type == "MaxPool"), None)
        if len(stft) != 2 or not spatial or pool is None:
            raise ModelError(
                f"{path}: not a DNSMOS sig_bak_ovr graph (STFT convs, 2-D convs, pooling)"
            )
        self.stft = np.concatenate([w[:, :, 0].T for w in stft], axis=1)  # [320, 2*161]
        self.bins = stft[0].shape[0]
        trunk, trunk_nodes = _subgraph(
            onnx, model, spatial[0].input[0], pool.input[0], ["N", 1, "T", self.bins]
        )
        head, _ = _subgraph(
            onnx,
            model,
            pool.input[0],
            model.graph.output[0].name,
            ["N", "C", WINDOW_FRAMES, "F"],
        )
        for node in trunk_nodes:
            shape = (
                list(inits[node.input[1]].shape[2:]) if node.op_type == "Conv" else None
            )
            pads = [list(a.ints) for a in node.attribute if a.name == "pads"]
            if node.op_type not in ("Conv", "Relu") or (
                shape is not None and (shape != [3, 3] or pads != [[1, 1, 1, 1]])
            ):
                raise ModelError(
                    f"{path}: DNSMOS trunk has a {node.op_type} node that is not a 3x3 same conv"
                )
        self.halo = sum(
            n.op_type == "Conv" for n in trunk_nodes
        )  # each 3x3 conv widens by 1 frame
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = library_threads()  # the compute budget's share
        providers = ["CPUExecutionProvider"]
        self.trunk = ort.InferenceSession(
            trunk.SerializeToString(), opts, providers=providers
        )
        self.head = ort.InferenceSession(
            head.SerializeToString(), opts, providers=providers
        )
        self.trunk_in, self.head_in = (
            self.trunk.get_inputs()[0].name,
            self.head.get_inputs()[0].name,
        )
        self.poly = [np.poly1d(c) for c in POLYFIT[kind]]
        self.batch_windows = batch_windows
        self.max_frames = (
            max_frames  # trunk frames per run (bounds memory: ~0.1 MB per frame)
        )

    def logpow(self, x: np.ndarray, frames: int) -> np.ndarray:
        """log10 power spectrogram [frames, 161] of x (frame f = x[160f : 160f + 320]), as the graph."""
        framed = np.lib.stride_tricks.sliding_window_view(
            x[: (frames - 1) * FRAME_HOP + FRAME_LENGTH], FRAME_LENGTH
        )
        spec = framed[::FRAME_HOP] @ self.stft
        re, im = spec[:, : self.bins], spec[:, self.bins :]
        power = np.sqrt(re * re + im * im) ** 2
        return (
            np.log(np.maximum(np.float32(1e-12), power)) / np.float32(np.log(10))
        ).astype(np.float32)

    def scores(
        self, signals: list[np.ndarray], windows: list[list[int]]
    ) -> list[np.ndarray]:
        """Calibrated (sig, bak, ovrl) [K_i, 3] float64 per tiled signal for its window indices."""
        heads = _Batcher(self.head, self.head_in, self.batch_windows)
        lone = _Batcher(
            self.trunk, self.trunk_in, max(1, self.batch_windows // 2), then=heads.add
        )
        slot = 0
        for x, ks in zip(signals, windows):
            lp = self.logpow(x, HOP_FRAMES * ks[-1] + WINDOW_FRAMES)
            for a, b in _runs(ks):
                first = HOP_FRAMES * a
                if a == b:  # a lone window runs whole, exactly as in the original graph
                    lone.add(slot, lp[None, first : first + WINDOW_FRAMES])
                    slot += 1
                    continue
                for window, head, tail in self._shared(
                    lp[first : first + HOP_FRAMES * (b - a) + WINDOW_FRAMES], b - a + 1
                ):
                    heads.add(slot, window, head, tail)
                    slot += 1
        lone.flush()
        raw = heads.flush(slot)
        calibrated = np.stack([p(raw[:, d]) for d, p in enumerate(self.poly)], axis=1)
        return np.split(calibrated, np.cumsum([len(ks) for ks in windows])[:-1])

    def _shared(self, lp: np.ndarray, n_windows: int):
        """Trunk outputs of n_windows windows 1 s apart over log-power frames lp [T, F], each as a
        view [32, 900, F] into the shared result plus its recomputed edge frames."""
        h, span = self.halo, len(lp)
        n_chunks = -(-span // self.max_frames)
        size = -(-span // n_chunks)
        padded = np.zeros((span + 2 * h, self.bins), np.float32)
        padded[h : h + span] = lp
        shared = None
        for c in range(n_chunks):
            lo, hi = c * size, min(span, (c + 1) * size)
            out = self.trunk.run(
                None, {self.trunk_in: padded[None, None, lo : hi + 2 * h]}
            )[0][0]
            if shared is None:
                shared = np.empty((out.shape[0], span, out.shape[2]), np.float32)
            shared[:, lo:hi] = out[:, h : h + hi - lo]
        starts = [HOP_FRAMES * k for k in range(n_windows)]
        patches = np.stack(
            [
                lp[s + o : s + o + 2 * h]
                for s in starts
                for o in (0, WINDOW_FRAMES - 2 * h)
            ]
        )[:, None]  # the window edges, with the window's own zero padding
        edges = self.trunk.run(None, {self.trunk_in: patches})[0]
        for j, s in enumerate(
            starts
        ):  # (window view, its first h frames, its last h frames)
            yield (
                shared[:, s : s + WINDOW_FRAMES],
                edges[2 * j, :, :h],
                edges[2 * j + 1, :, h:],
            )


class _Batcher:
    """Runs a session on full batches of equal-shape inputs; each result keeps its slot number.

    An input may come with replacement first/last frames (axis 1), written after batching.
    """

    def __init__(self, session, name: str, size: int, then=None):
        self.session, self.name, self.size, self.then = session, name, size, then
        self.pending: list[tuple] = []
        self.done: dict[int, np.ndarray] = {}

    def add(
        self,
        slot: int,
        x: np.ndarray,
        head: np.ndarray | None = None,
        tail: np.ndarray | None = None,
    ) -> None:
        self.pending.append((slot, x, head, tail))
        if len(self.pending) >= self.size:
            self._run()

    def _run(self) -> None:
        batch = np.stack([x for _, x, _, _ in self.pending])
        for row, (_, _, head, tail) in zip(batch, self.pending):
            if head is not None:
                row[:, : head.shape[1]] = head
                row[:, row.shape[1] - tail.shape[1] :] = tail
        out = self.session.run(None, {self.name: batch})[0]
        for (slot, *_), y in zip(self.pending, out):
            if self.then is None:
                self.done[slot] = y
            else:
                self.then(slot, y)
        self.pending = []

    def flush(self, n: int = 0) -> np.ndarray:
        """Run what is pending; return results of slots 0..n-1 stacked."""
        if self.pending:
            self._run()
        return np.stack([self.done.pop(i) for i in range(n)]) if n else np.zeros(0)


class P808:
    """DNSMOS P.808 MOS on the 120-band mel of each window (librosa's, speechmos's exact inputs)."""

    def __init__(self, path: Path, batch_windows: int = 16):
        _, ort = _onnx()
        try:
            import librosa
        except ImportError as error:
            raise MissingDependencyError(
                f"P.808 uses librosa's mel filterbank: {INSTALL_HINT}"
            ) from error
        n_fft = MEL["n_fft"]
        self.mel = librosa.filters.mel(
            sr=SAMPLE_RATE, n_fft=n_fft, n_mels=MEL["n_mels"]
        ).T  # [161, 120]
        self.window = librosa.filters.get_window("hann", n_fft, fftbins=True).astype(
            np.float32
        )
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = library_threads()  # the compute budget's share
        self.session = ort.InferenceSession(
            str(path), opts, providers=["CPUExecutionProvider"]
        )
        self.input = self.session.get_inputs()[0].name
        self.batch_windows = batch_windows

    def power(self, frames: np.ndarray) -> np.ndarray:
        """Mel power [..., 120] of 321-sample frames [..., 321] (Hann, |rfft|², librosa's filterbank)."""
        spec = scipy.fft.rfft(
            frames * self.window, axis=-1
        )  # float32 in, complex64 out
        return (spec.real**2 + spec.imag**2) @ self.mel

    def window_mels(self, x: np.ndarray, first: int, last: int) -> list[np.ndarray]:
        """Mel power [900, 120] of windows first..last of x, as librosa computes each one alone.

        Window k's frame f is centred on sample 16000k + 160f, so consecutive windows share frames;
        only frame 0 and 899 see the window's own zero padding and are recomputed per window.
        """
        n_fft, half = MEL["n_fft"], MEL["n_fft"] // 2
        rows = HOP_FRAMES * (last - first) + WINDOW_FRAMES
        starts = np.maximum(SAMPLE_RATE * first + FRAME_HOP * np.arange(rows) - half, 0)
        shared = self.power(x[starts[:, None] + np.arange(n_fft)])
        mels = []
        for k in range(first, last + 1):
            seg = x[SAMPLE_RATE * k : SAMPLE_RATE * k + WINDOW_SAMPLES - FRAME_HOP]
            edges = np.zeros((2, n_fft), np.float32)
            edges[0, half:] = seg[: n_fft - half]
            edges[1, : 2 * half] = seg[-2 * half :]
            mel = shared[
                HOP_FRAMES * (k - first) : HOP_FRAMES * (k - first) + WINDOW_FRAMES
            ].copy()
            mel[[0, -1]] = self.power(edges)
            mels.append(mel)
        return mels

    @staticmethod
    def normalize(mel: np.ndarray) -> np.ndarray:
        """(power_to_db(mel, ref=np.max) + 40) / 40 per window, mel [W, 900, 120]."""
        db = 10.0 * np.log10(np.maximum(1e-10, mel))
        db -= 10.0 * np.log10(np.maximum(1e-10, mel.max(axis=(1, 2), keepdims=True)))
        db = np.maximum(db, db.max(axis=(1, 2), keepdims=True) - 80.0)
        return ((db + 40) / 40).astype(np.float32)

    def scores(
        self, signals: list[np.ndarray], windows: list[list[int]]
    ) -> list[np.ndarray]:
        """P.808 MOS [K_i] float32 per tiled signal for its window indices."""
        mels = [
            m
            for x, ks in zip(signals, windows)
            for a, b in _runs(ks)
            for m in self.window_mels(x, a, b)
        ]
        out = np.zeros(len(mels), np.float32)
        for b in range(0, len(mels), self.batch_windows):
            x = self.normalize(np.stack(mels[b : b + self.batch_windows]))
            out[b : b + len(x)] = self.session.run(None, {self.input: x})[0][:, 0]
        return np.split(out, np.cumsum([len(ks) for ks in windows])[:-1])


class Dnsmos:
    """Extractor ``quality`` → dnsmos_{sig,bak,ovrl}, dnsmos_personalized_{sig,bak,ovrl}, p808_mos."""

    name = "quality"
    requires: tuple[str, ...] = ()

    def __init__(
        self,
        standard: bool = True,
        personalized: bool = True,
        p808: bool = True,
        model_dir: str | None = None,
    ):
        if not (standard or personalized or p808):
            raise ValueError(
                "quality: enable at least one of standard, personalized, p808"
            )
        root = Path(model_dir) if model_dir else speechmos_dir()
        self.p835 = {}
        for kind, on in (("standard", standard), ("personalized", personalized)):
            if on:
                self.p835[kind] = SharedTrunkP835(
                    _existing(root / MODEL_FILES[kind]), kind
                )
        self.p808 = P808(_existing(root / MODEL_FILES["p808"])) if p808 else None
        self.schema: dict[str, pl.DataType] = {}
        for kind in self.p835:
            prefix = "dnsmos" if kind == "standard" else "dnsmos_personalized"
            self.schema.update(
                {f"{prefix}_{d}": pl.Float64 for d in ("sig", "bak", "ovrl")}
            )
        if p808:
            self.schema["p808_mos"] = pl.Float64

    def run(
        self, batch: AudioBatch, inputs: Mapping[str, list] | None = None
    ) -> dict[str, list]:
        batch = resample(batch, SAMPLE_RATE)
        refused = [over_full_scale(p) if p > FULL_SCALE else None for p in batch.peaks]
        keep = [i for i in range(len(batch)) if len(batch[i]) and refused[i] is None]
        signals = [tile(batch[i]) for i in keep]
        windows = [window_indices(len(x)) for x in signals]
        cols: dict[str, list] = {c: [None] * len(batch) for c in self.schema}
        if any(refused):
            cols[ROW_ERRORS] = refused
        if not keep:
            return cols
        for kind, model in self.p835.items():
            prefix = "dnsmos" if kind == "standard" else "dnsmos_personalized"
            for i, s in zip(keep, model.scores(signals, windows)):
                for d, dim in enumerate(("sig", "bak", "ovrl")):
                    cols[f"{prefix}_{dim}"][i] = float(np.mean(s[:, d]))
        if self.p808 is not None:
            for i, s in zip(keep, self.p808.scores(signals, windows)):
                cols["p808_mos"][i] = float(np.mean(s))
        return cols


def over_full_scale(peak: float) -> str:
    """Why an item is refused: speechmos.dnsmos.run raises ValueError on such an array."""
    return (
        f"samples outside [-1, 1] at {SAMPLE_RATE} Hz (peak {peak:.4g}); DNSMOS refuses them "
        "as speechmos does: scale or clip the audio to full scale first"
    )


def _existing(path: Path) -> Path:
    if not path.is_file():
        raise ModelError(f"DNSMOS model file not found: {path}")
    return path
