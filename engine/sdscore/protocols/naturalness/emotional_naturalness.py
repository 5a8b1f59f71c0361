"""Emotional naturalness (SPEARBench Section III-C5, Fig. 2 bottom): a predictor of whether an answer is
emotionally human-like, given the question, from a local folder (``--emotional-naturalness-dir``).

The input, as the paper builds it (TRACE, Ugandhar et al.), one vector per answer, in this order:

1. the speech-emotion embedding of the question turn (D values) and 2. of the answer (D) — from the
   ``--emotion-dir`` model (emotion_embeddings.py), the question turn cut as for its arousal /
   valence / dominance;
3. arousal, valence, dominance of the question turn, then 4. of the answer (3 + 3);
5. the all-MiniLM-L6-v2 sentence embedding of the conversation prompt (manifest column
   ``conversation_prompt``; C = 384 values, unit norm); zeros when the row has no prompt;
6. the one-hot relationship (manifest column ``relationship``, matched case-insensitively to the
   predictor's list); zeros when the row has none; a relationship the predictor does not know
   leaves the row's score null with the reason.

The folder (PREDICTOR_FORMAT):

- ``config.json``: ``{"format": "sdscore-emotional-naturalness", "version": 1, "name": "...",
  "random_weights": false, "emotion_dim": D, "context_dim": 384, "relationships": [...],
  "hidden": [h1, ...], "labels": ["not human-like", "human-like"]}``;
- ``model.safetensors``: the state_dict of ``torch.nn.Sequential(Linear(in, h1), ReLU(), ...,
  Linear(h_last, 2))`` (keys ``"0.weight"``, ``"0.bias"``, ``"2.weight"``, ...; in = 2 D + 6 + C +
  R), e.g. ``safetensors.torch.save_file(model.state_dict(), "model.safetensors")``.

The score is the classifier's logit of "human-like": z[1] − z[0]. It runs in float64 numpy, one
matrix product per layer for the whole batch (a row's score does not depend on the others'). The
released code ships no weights (its TRACE checkpoint is not public): without a folder the column is
null with the reason; `write_random_predictor` writes tiny random weights in this layout for the
demo and the tests, marked ``random_weights`` so every table says so.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from sdscore.errors import MissingDependencyError, ModelError
from sdscore.protocols.naturalness.results import AVD

PREDICTOR_FORMAT = "sdscore-emotional-naturalness"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
LABELS = ("not human-like", "human-like")
MINILM_DIM = 384
_REQUIRED = {"emotion_dim": int, "context_dim": int, "relationships": list, "hidden": list}


def _key(relationship: str) -> str:
    return " ".join(relationship.strip().lower().split())


class Predictor:
    """The folder's MLP: ``logits(inputs [n, in])`` → float64 ``[n]`` (see the module docstring)."""

    def __init__(self, model_dir: str | Path):
        folder = Path(model_dir)
        if not folder.is_dir():
            raise ModelError(f"emotional-naturalness predictor folder not found: {folder}")
        self.config = _read_config(folder / CONFIG_FILE)
        self.name = str(self.config.get("name") or folder.name)
        self.random_weights = bool(self.config.get("random_weights", False))
        if self.random_weights and "random weights" not in self.name.lower():
            self.name = f"RANDOM WEIGHTS: {self.name}"  # what eval's tables look for to label the scores
        self.emotion_dim = self.config["emotion_dim"]
        self.context_dim = self.config["context_dim"]
        self.relationships = [str(r) for r in self.config["relationships"]]
        self.index = {_key(r): i for i, r in enumerate(self.relationships)}
        if len(self.index) != len(self.relationships):
            raise ModelError(f"{folder / CONFIG_FILE}: relationships repeat a name (case-insensitively)")
        self.input_dim = 2 * self.emotion_dim + 2 * len(AVD) + self.context_dim + len(self.relationships)
        self.layers = _read_layers(folder / WEIGHTS_FILE, self.input_dim, [int(h) for h in self.config["hidden"]])

    def one_hot(self, relationship: str | None) -> tuple[np.ndarray | None, str | None]:
        """(vector, None), or (None, why) for a relationship the predictor does not know."""
        vector = np.zeros(len(self.relationships))
        if relationship is None or not relationship.strip():
            return vector, None
        i = self.index.get(_key(relationship))
        if i is None:
            return None, (f"relationship {relationship!r} is not one the predictor knows "
                          f"({', '.join(self.relationships) or 'none'})")
        vector[i] = 1.0
        return vector, None

    def logits(self, inputs: np.ndarray) -> np.ndarray:
        x = np.asarray(inputs, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.input_dim:
            raise ModelError(f"the predictor takes [n, {self.input_dim}] inputs, got {list(x.shape)}")
        for i, (weight, bias) in enumerate(self.layers):
            x = x @ weight.T + bias
            if i < len(self.layers) - 1:
                x = np.maximum(x, 0.0)
        return x[:, 1] - x[:, 0]


def _read_config(path: Path) -> dict:
    if path.exists() and not path.is_file() and not path.is_dir():  # reading a FIFO would wait for a writer
        raise ModelError(f"{path}: not a regular file (a FIFO, socket or device is not read)")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelError(f"{path.parent}: an emotional-naturalness predictor folder needs {CONFIG_FILE}") from None
    except (OSError, ValueError) as error:
        raise ModelError(f"{path}: not readable JSON: {error}") from None
    except RecursionError:
        raise ModelError(f"{path}: not readable JSON: nested too deeply") from None
    if not isinstance(config, dict) or config.get("format") != PREDICTOR_FORMAT:
        raise ModelError(f"{path}: \"format\" must be {PREDICTOR_FORMAT!r}")
    for name, kind in _REQUIRED.items():
        value = config.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ModelError(f"{path}: {name!r} must be {'a whole number' if kind is int else 'a list'}, got {value!r}")
    if config["emotion_dim"] < 1 or config["context_dim"] < 1:
        raise ModelError(f"{path}: emotion_dim and context_dim must be >= 1")
    if not all(isinstance(h, int) and not isinstance(h, bool) and h >= 1 for h in config["hidden"]):
        raise ModelError(f"{path}: hidden must list layer widths >= 1, got {config['hidden']!r}")
    if not all(isinstance(r, str) for r in config["relationships"]):
        raise ModelError(f"{path}: relationships must be names (text), got {config['relationships']!r}")
    labels = config.get("labels", list(LABELS))
    if not isinstance(labels, list) or [str(v).lower() for v in labels] != list(LABELS):
        raise ModelError(f"{path}: labels must be {list(LABELS)} (the score is the human-like logit), got {labels!r}")
    return config


def _read_layers(path: Path, input_dim: int, hidden: list[int]) -> list[tuple[np.ndarray, np.ndarray]]:
    try:
        from safetensors.numpy import load_file
    except ImportError as error:
        raise MissingDependencyError("the emotional-naturalness predictor needs safetensors: "
                                     "pip install 'sdscore[hf]'") from error
    if not path.is_file():
        raise ModelError(f"{path.parent}: an emotional-naturalness predictor folder needs {WEIGHTS_FILE}")
    try:
        tensors = load_file(str(path))
    except Exception as error:  # noqa: BLE001 - safetensors raises its own error types for bad files
        raise ModelError(f"{path}: cannot read the weights: {error}") from None
    widths = [input_dim, *hidden, len(LABELS)]
    layers = []
    for i in range(len(widths) - 1):
        key = 2 * i  # nn.Sequential's index of the i-th Linear (a ReLU between each two)
        weight, bias = tensors.get(f"{key}.weight"), tensors.get(f"{key}.bias")
        if weight is None or bias is None:
            raise ModelError(f"{path}: no tensors {key}.weight / {key}.bias (Linear layer {i + 1} of {len(widths) - 1})")
        if weight.shape != (widths[i + 1], widths[i]) or bias.shape != (widths[i + 1],):
            raise ModelError(f"{path}: {key}.weight is {list(weight.shape)} and {key}.bias {list(bias.shape)}; "
                             f"config.json says [{widths[i + 1]}, {widths[i]}] and [{widths[i + 1]}]")
        if not (np.isfinite(weight).all() and np.isfinite(bias).all()):
            raise ModelError(f"{path}: {key}.weight or {key}.bias holds NaN or infinite values")
        layers.append((weight.astype(np.float64), bias.astype(np.float64)))
    extra = sorted(set(tensors) - {f"{2 * i}.{p}" for i in range(len(layers)) for p in ("weight", "bias")})
    if extra:
        raise ModelError(f"{path}: tensors config.json's layers do not use: {', '.join(extra[:5])}")
    return layers


def write_random_predictor(folder: str | Path, *, emotion_dim: int, relationships: Sequence[str] = (),
                           hidden: Sequence[int] = (16,), context_dim: int = MINILM_DIM, seed: int = 0,
                           name: str = "RANDOM WEIGHTS (not a trained model)", scale: float = 1.0) -> Path:
    """A predictor folder with random weights in the loader's layout (the demo's and the tests'),
    marked random_weights: every table that shows its scores says they mean nothing. Each layer's
    weights and biases are uniform in ±scale/√(its inputs)."""
    from safetensors.numpy import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    widths = [2 * emotion_dim + 2 * len(AVD) + context_dim + len(relationships), *hidden, len(LABELS)]
    tensors = {}
    for i in range(len(widths) - 1):
        bound = scale / np.sqrt(widths[i])
        tensors[f"{2 * i}.weight"] = rng.uniform(-bound, bound, (widths[i + 1], widths[i])).astype(np.float32)
        tensors[f"{2 * i}.bias"] = rng.uniform(-bound, bound, widths[i + 1]).astype(np.float32)
    save_file(tensors, str(folder / WEIGHTS_FILE))
    config = {"format": PREDICTOR_FORMAT, "version": 1, "name": name, "random_weights": True,
              "emotion_dim": emotion_dim, "context_dim": context_dim, "relationships": list(relationships),
              "hidden": list(hidden), "labels": list(LABELS)}
    (folder / CONFIG_FILE).write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    return folder


class EmotionalNaturalness:
    """Scores answers: ``scores(items)`` with each item a dict of question/answer "embedding" and
    arousal/valence/dominance (the emotion model's outputs), "prompt" and "relationship"."""

    def __init__(self, model_dir: str | Path, context_encoder=None):
        self.predictor = Predictor(model_dir)
        if context_encoder is None:
            from sdscore.features.sentence_embedding import SentenceEncoder

            context_encoder = SentenceEncoder()
        self.encoder = context_encoder
        self._contexts: dict[str, np.ndarray] = {}

    def _context(self, prompts: list[str]) -> None:
        todo = sorted({p for p in prompts if p not in self._contexts})
        if not todo:
            return
        vectors = np.asarray(self.encoder.embed(todo), dtype=np.float64)
        if vectors.shape != (len(todo), self.predictor.context_dim):
            raise ModelError(f"the sentence encoder gives {vectors.shape[-1]}-value embeddings; the predictor's "
                             f"context_dim is {self.predictor.context_dim}")
        self._contexts.update(zip(todo, vectors))

    def inputs(self, item: dict) -> tuple[np.ndarray | None, list[str]]:
        """(the predictor's input vector, notes), or (None, [why not]) — see the module docstring."""
        p = self.predictor
        parts = []
        for part in ("question", "answer"):
            emotion = item.get(part) or {}
            embedding = emotion.get("embedding")
            if embedding is None:
                return None, [f"no emotion embedding of the {part}"]
            if len(embedding) != p.emotion_dim:
                return None, [f"the emotion model's embedding has {len(embedding)} values; the predictor's "
                              f"emotion_dim is {p.emotion_dim}"]
            parts.append(np.asarray(embedding, dtype=np.float64))
        for part in ("question", "answer"):
            parts.append(np.array([float(item[part][d]) for d in AVD]))
        notes = []
        prompt = (item.get("prompt") or "").strip()
        if prompt:
            parts.append(self._contexts[prompt])
        else:
            parts.append(np.zeros(p.context_dim))
            notes.append("no conversation_prompt: its context embedding is zeros")
        one_hot, why = p.one_hot(item.get("relationship"))
        if one_hot is None:
            return None, [why]
        if not (item.get("relationship") or "").strip():
            notes.append("no relationship: its one-hot is zeros")
        parts.append(one_hot)
        vector = np.concatenate(parts)
        if not np.isfinite(vector).all():
            return None, ["a non-finite value in the emotion model's outputs"]
        return vector, notes

    def scores(self, items: Sequence[dict]) -> list[tuple[float | None, list[str]]]:
        """Per item (the human-like logit or None, notes: why it is null, or what was zeroed)."""
        self._context([(it.get("prompt") or "").strip() for it in items if (it.get("prompt") or "").strip()])
        built = [self.inputs(it) for it in items]
        ready = [i for i, (vector, _) in enumerate(built) if vector is not None]
        out: list[tuple[float | None, list[str]]] = [(None, notes) for _, notes in built]
        if ready:
            logits = self.predictor.logits(np.stack([built[i][0] for i in ready]))
            for i, value in zip(ready, logits):
                out[i] = (float(value), built[i][1])
        return out
