"""Speech-emotion embeddings from the dimensional-emotion model folder (``--emotion-dir``).

SPEARBench's emotional naturalness feeds its predictor the Vox-Profile emotion model's embedding of
the question and of the answer beside their arousal / valence / dominance; the same folder gives
both, one clip at a time (no padding can reach a clip's embedding, so a batch equals its items
scored one by one):

- ONNX (``model.onnx`` + ``labels.json``): the graph's first output is the scores, as for every
  classifier folder, and a second output named ``embedding`` holds the embedding, ``[1, D]``, or
  ``[1, T, D]`` frames averaged over T.
- Hugging Face audio classification: the mean over frames of the last hidden state
  (``output_hidden_states``), beside the regression outputs.
"""

from __future__ import annotations

import numpy as np

from sdscore.audio import AudioBatch
from sdscore.errors import ModelError
from sdscore.features.extract import resample

EMBEDDING_OUTPUT = "embedding"


def _pooled(value: np.ndarray, where: str) -> np.ndarray:
    value = np.asarray(value, dtype=np.float64)
    if value.ndim == 3 and value.shape[0] == 1 and value.shape[1] > 0:
        return value[0].mean(axis=0)
    if value.ndim == 2 and value.shape[0] == 1:
        return value[0]
    raise ModelError(f"{where}: the emotion embedding has shape {list(value.shape)}; expected [1, D] or [1, T, D]")


class EmotionEmbedder:
    """``outputs(batch)`` → per item (scores [K], embedding [D]) or None for a failed or empty item."""

    def __init__(self, classifier, model_dir):
        self.classifier, self.model_dir = classifier, model_dir
        session = getattr(classifier, "session", None)
        if session is not None:
            names = [o.name for o in session.get_outputs()]
            if EMBEDDING_OUTPUT not in names[1:]:
                raise ModelError(f"{model_dir}: emotional naturalness needs the emotion model's embedding: its "
                                 f"model.onnx has outputs {names}, none after the scores named "
                                 f"{EMBEDDING_OUTPUT!r}")
            self.embedding_index = names.index(EMBEDDING_OUTPUT)

    def outputs(self, batch: AudioBatch) -> list[tuple[np.ndarray, np.ndarray] | None]:
        batch = resample(batch, self.classifier.sample_rate)
        run = self._onnx if getattr(self.classifier, "session", None) is not None else self._hf
        return [None if batch.errors[i] is not None or len(batch[i]) == 0 else run(np.asarray(batch[i], np.float32))
                for i in range(len(batch))]

    def _onnx(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        c = self.classifier
        values = c.session.run(None, {c.input: x[None, :]})
        scores = np.asarray(values[0], dtype=np.float64).reshape(-1)
        if len(scores) != len(c.labels):
            raise ModelError(f"{self.model_dir}: the emotion model returned {len(scores)} scores for "
                             f"{len(c.labels)} labels")
        return scores, _pooled(values[self.embedding_index], str(self.model_dir))

    def _hf(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        c = self.classifier
        features = c.extractor([x], sampling_rate=c.sample_rate, return_tensors="pt")
        with c.torch.inference_mode():
            out = c.model(**{k: v.to(c.device) for k, v in features.items()}, output_hidden_states=True)
        scores = out.logits.float().cpu().numpy().reshape(-1).astype(np.float64)
        hidden = out.hidden_states[-1].float().cpu().numpy()
        return scores, _pooled(hidden, str(self.model_dir))
