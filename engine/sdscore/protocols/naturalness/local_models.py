"""The naturalness models that do not ship, loaded from local folders: dialect, dimensional emotion, MOS.

None of SPEARBench's own models is in any package (Voxlect-English, Vox-Profile's arousal /
valence / dominance model, UTMOS), so each is an optional folder in a layout we load:

- dialect: an audio classifier folder (sdscore.features.classifiers: Hugging Face
  audio-classification or ONNX + labels.json) whose labels are Voxlect-English's 16 class names;
  its class probabilities are merged into SPEARBench's 11 groups (the British Isles classes
  summed, "Others" dropped) and given as natural-log probabilities.
- emotion dimensions: a classifier folder with outputs named arousal, valence and dominance (any
  order, any case) and raw outputs (Hugging Face ``problem_type: "regression"``, or ONNX
  ``"activation": "none"``).
- MOS: ``model.onnx`` taking a 16 kHz waveform [1, T] float32 and returning one score (UTMOS
  exported to ONNX, or any MOS predictor in that shape); clips run one at a time.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from sdscore.audio import AudioBatch
from sdscore.errors import ModelError
from sdscore.features.classifiers import load_classifier
from sdscore.features.extract import resample, select
from sdscore.protocols.naturalness.results import AVD, DIALECT_GROUPS, DIALECT_MERGE

LOG_FLOOR = 1e-12
MOS_RATE = 16000


def _scores(classifier, batch: AudioBatch) -> list[np.ndarray | None]:
    """Per item scores; None for failed or empty items."""
    keep = [i for i in range(len(batch)) if batch.errors[i] is None and len(batch[i])]
    out: list[np.ndarray | None] = [None] * len(batch)
    for i, s in zip(keep, classifier.scores(select(batch, keep)) if keep else []):
        out[i] = np.asarray(s, dtype=np.float64)
    return out


class DialectProfile:
    """Voxlect-style 16-class dialect classifier → 11 merged log-probabilities per item."""

    def __init__(self, model_dir: str | Path):
        self.classifier = load_classifier(model_dir)
        labels = self.classifier.labels
        unknown = [label for label in labels if label not in DIALECT_MERGE]
        if unknown or len(set(labels)) != len(labels):
            raise ModelError(
                f"{model_dir}: dialect labels must be Voxlect-English's classes ({', '.join(DIALECT_MERGE)}); "
                f"got unknown or repeated labels {unknown or labels}"
            )
        group = {g: k for k, g in enumerate(DIALECT_GROUPS)}
        self.merge = np.zeros((len(labels), len(DIALECT_GROUPS)))
        for k, label in enumerate(labels):
            if DIALECT_MERGE[label] is not None:
                self.merge[k, group[DIALECT_MERGE[label]]] = 1.0

    def profiles(self, batch: AudioBatch) -> list[list[float] | None]:
        out = []
        for p in _scores(self.classifier, batch):
            if p is None:
                out.append(None)
                continue
            merged = p @ self.merge
            out.append([math.log(max(float(v), LOG_FLOOR)) for v in merged])
        return out


def label_of(profile: list[float] | None) -> str | None:
    """The dialect group with the highest log-probability."""
    return None if profile is None else DIALECT_GROUPS[int(np.argmax(profile))]


class EmotionDimensions:
    """A regression model with arousal / valence / dominance outputs → one dict per item."""

    def __init__(self, model_dir: str | Path, embeddings: bool = False):
        """embeddings: each item's dict also holds "embedding", the model's speech-emotion embedding
        (emotion_embeddings.py: items one at a time; ModelError when the folder gives none)."""
        self.classifier = load_classifier(model_dir)
        names = [label.lower() for label in self.classifier.labels]
        missing = [d for d in AVD if d not in names]
        if missing:
            raise ModelError(f"{model_dir}: the emotion-dimension model has no output named {', '.join(missing)} "
                             f"(its outputs: {', '.join(self.classifier.labels)})")
        if getattr(self.classifier, "activation", "none") != "none":
            raise ModelError(f"{model_dir}: emotion dimensions need raw outputs (a regression model), "
                             f"but its outputs go through {self.classifier.activation}")
        self.index = {d: names.index(d) for d in AVD}
        self.embedder = None
        if embeddings:
            from sdscore.protocols.naturalness.emotion_embeddings import EmotionEmbedder

            self.embedder = EmotionEmbedder(self.classifier, model_dir)

    def dimensions(self, batch: AudioBatch) -> list[dict | None]:
        if self.embedder is not None:
            return [None if o is None else {**{d: float(o[0][k]) for d, k in self.index.items()},
                                            "embedding": [float(v) for v in o[1]]}
                    for o in self.embedder.outputs(batch)]
        return [None if s is None else {d: float(s[k]) for d, k in self.index.items()}
                for s in _scores(self.classifier, batch)]


class OnnxMos:
    """``model.onnx``: waveform [1, T] at 16 kHz → one MOS value (see the module doc)."""

    def __init__(self, model_dir: str | Path):
        path = Path(model_dir) / "model.onnx"
        if not path.is_file():
            raise ModelError(f"{model_dir}: a MOS model folder needs model.onnx")
        import onnxruntime as ort

        try:
            self.session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        except Exception as error:  # noqa: BLE001 - onnxruntime raises its own types for bad files
            raise ModelError(f"{path}: cannot load the MOS model: {error}") from None
        self.input = self.session.get_inputs()[0].name

    def scores(self, batch: AudioBatch) -> list[float | None]:
        batch = resample(batch, MOS_RATE)
        out: list[float | None] = []
        for i in range(len(batch)):
            x = batch[i]
            if batch.errors[i] is not None or len(x) == 0:
                out.append(None)
                continue
            value = np.asarray(self.session.run(None, {self.input: np.asarray(x, np.float32)[None, :]})[0])
            if value.size != 1:
                raise ModelError(f"the MOS model returned {value.size} values for one clip, expected 1")
            out.append(float(value.reshape(-1)[0]))
        return out
