"""Pluggable utterance classifiers (emotion, accent) loaded from a local directory; none is bundled.

Two layouts load. ONNX: ``model.onnx`` (waveform [1, T] float32 in, scores [1, K] out) and
``labels.json`` — a list of K names, or ``{"labels": [...], "sample_rate": 16000, "activation":
"softmax" | "sigmoid" | "none"}``; items run one at a time, so no padding can leak into a score.
Hugging Face: an audio-classification checkpoint (``config.json`` with ``id2label`` and a
feature-extractor config), batched with attention masks, softmax over the logits — or the raw
outputs when ``problem_type`` is "regression" (dimensional emotion: arousal, valence, dominance).
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import polars as pl

from sdscore.audio import AudioBatch
from sdscore.errors import MissingDependencyError, ModelError
from sdscore.features.extract import resample, select
from sdscore.runtime.compute_budget import library_threads

ACTIVATIONS = ("softmax", "sigmoid", "none")


def _activate(scores: np.ndarray, activation: str) -> np.ndarray:
    scores = scores.astype(np.float64)
    if activation == "softmax":
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    if activation == "sigmoid":
        return 1.0 / (1.0 + np.exp(-scores))
    return scores


class OnnxClassifier:
    """``model.onnx`` + ``labels.json`` (see the module docstring)."""

    def __init__(self, path: Path):
        spec = json.loads((path / "labels.json").read_text())
        spec = {"labels": spec} if isinstance(spec, list) else spec
        if (
            not isinstance(spec, dict)
            or not isinstance(spec.get("labels"), list)
            or not spec["labels"]
        ):
            raise ModelError(
                f"{path / 'labels.json'}: expected a list of label names or {{'labels': [...]}}"
            )
        self.labels = [str(x) for x in spec["labels"]]
        self.sample_rate = int(spec.get("sample_rate", 16000))
        self.activation = spec.get("activation", "softmax")
        if self.activation not in ACTIVATIONS:
            raise ModelError(
                f"{path / 'labels.json'}: activation must be one of {ACTIVATIONS}, got {self.activation!r}"
            )
        try:
            import onnxruntime as ort
        except ImportError as error:
            raise MissingDependencyError(
                "ONNX classifiers need onnxruntime: pip install onnxruntime"
            ) from error
        try:
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = library_threads()  # the compute budget's share
            self.session = ort.InferenceSession(
                str(path / "model.onnx"), opts, providers=["CPUExecutionProvider"]
            )
        except Exception as error:  # onnxruntime raises its own Fail/InvalidGraph types
            raise ModelError(
                f"{path / 'model.onnx'}: onnxruntime cannot load it: {error}"
            ) from error
        self.input = self.session.get_inputs()[0].name

    def scores(self, batch: AudioBatch) -> list[np.ndarray]:
        batch = resample(batch, self.sample_rate)
        out = []
        for x in batch:
            raw = np.asarray(
                self.session.run(None, {self.input: x[None].astype(np.float32)})[0]
            ).reshape(-1)
            if len(raw) != len(self.labels):
                raise ModelError(
                    f"classifier returned {len(raw)} scores for {len(self.labels)} labels"
                )
            out.append(_activate(raw, self.activation))
        return out


class HfClassifier:
    """A transformers audio-classification checkpoint; batches of ``batch_size`` with attention masks."""

    def __init__(self, path: Path, batch_size: int = 8, device: str = "cpu"):
        if importlib.util.find_spec("transformers") is None:
            raise MissingDependencyError(
                "HF classifiers need transformers: pip install 'sdscore[hf]'"
            )
        import torch
        from transformers import AutoFeatureExtractor, AutoModelForAudioClassification

        try:
            self.extractor = AutoFeatureExtractor.from_pretrained(
                path, local_files_only=True
            )
            self.model = AutoModelForAudioClassification.from_pretrained(
                path, local_files_only=True
            )
        except (OSError, ValueError) as error:
            raise ModelError(
                f"{path}: cannot load an audio-classification model: {error}"
            ) from error
        self.model.to(device).eval()
        id2label = self.model.config.id2label
        self.labels = [str(id2label[i]) for i in range(len(id2label))]
        regression = getattr(self.model.config, "problem_type", None) == "regression"
        self.activation = "none" if regression else "softmax"
        self.sample_rate = int(self.extractor.sampling_rate)
        self.batch_size, self.device, self.torch = batch_size, device, torch

    def scores(self, batch: AudioBatch) -> list[np.ndarray]:
        batch = resample(batch, self.sample_rate)
        items = list(batch)
        out: list[np.ndarray] = []
        for b in range(0, len(items), self.batch_size):
            feats = self.extractor(
                items[b : b + self.batch_size],
                sampling_rate=self.sample_rate,
                padding=True,
                return_attention_mask=True,
                return_tensors="pt",
            )
            with self.torch.inference_mode():
                logits = self.model(
                    **{k: v.to(self.device) for k, v in feats.items()}
                ).logits
            out.extend(_activate(logits.float().cpu().numpy(), self.activation))
        return out


def load_classifier(model_dir: str | Path, batch_size: int = 8, device: str = "cpu"):
    """An OnnxClassifier or HfClassifier for the directory's layout; ModelError when neither fits."""
    path = Path(model_dir)
    if not path.is_dir():
        raise ModelError(f"classifier directory not found: {path}")
    if (path / "model.onnx").is_file():
        if not (path / "labels.json").is_file():
            raise ModelError(f"{path}: model.onnx needs a labels.json beside it")
        return OnnxClassifier(path)
    if (path / "config.json").is_file():
        return HfClassifier(path, batch_size=batch_size, device=device)
    raise ModelError(
        f"{path}: neither model.onnx + labels.json nor a Hugging Face config.json"
    )


class ClassifierExtractor:
    """Extractor ``emotion`` or ``accent`` → ``<name>_labels`` and ``<name>_scores`` per item."""

    requires: tuple[str, ...] = ()

    def __init__(self, name: str, model_dir: str | Path | None = None, **options):
        if model_dir is None:
            raise ValueError(
                f"{name}: no classifier is bundled; pass {name}={{'model_dir': DIR}} with an ONNX "
                "model.onnx + labels.json or a Hugging Face audio-classification checkpoint"
            )
        self.name = name
        self.classifier = load_classifier(model_dir, **options)
        self.schema = {
            f"{name}_labels": pl.List(pl.Utf8),
            f"{name}_scores": pl.List(pl.Float64),
        }

    def run(
        self, batch: AudioBatch, inputs: Mapping[str, list] | None = None
    ) -> dict[str, list]:
        keep = [i for i in range(len(batch)) if len(batch[i])]
        scores = self.classifier.scores(select(batch, keep)) if keep else []
        labels: list = [None] * len(batch)
        values: list = [None] * len(batch)
        for i, s in zip(keep, scores):
            labels[i], values[i] = list(self.classifier.labels), [float(v) for v in s]
        return {f"{self.name}_labels": labels, f"{self.name}_scores": values}


def emotion_classifier(**options) -> ClassifierExtractor:
    """The ``emotion`` extractor (TRACE used emotion2vec+; any local classifier plugs in)."""
    return ClassifierExtractor("emotion", **options)


def accent_classifier(**options) -> ClassifierExtractor:
    """The ``accent`` extractor (TRACE used CommonAccent ECAPA scores; any local classifier plugs in)."""
    return ClassifierExtractor("accent", **options)
