"""Word and character error rates (jiwer's definitions) and the two text normalisations of SPEARBench.

WER = (S + D + I) / N over whitespace-separated words; CER the same over characters, spaces
included (jiwer's ``cer``: the ends stripped, inner runs of spaces kept as they are). The edit
distance is a numba Levenshtein over integer token ids, so a corpus of transcripts costs one
compiled loop per pair, not a Python one per cell.

- ``authors_normalise``: the released SPEARBench code — the text split at speaker tags ("P0123:",
  "P0123A:") with a capturing pattern, so the tags stay, rejoined with spaces, then '.', '?' and
  ' ' stripped at both ends; nothing else (case, tags and inner punctuation stay, and a tag in the
  reference counts as a word).
- ``clean_normalise``: lower-case, speaker tags and punctuation deleted (as jiwer's
  RemovePunctuation: "that's" -> "thats"), whitespace collapsed.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

import numba
import numpy as np

_SPEAKER_TAG = re.compile(r"(P\d{4}A?:\s*)")
_SPACES = re.compile(r"\s+")


def authors_normalise(text: str) -> str:
    """The SPEARBench code's normalisation (tags kept, pieces space-joined, '.? ' stripped at the ends)."""
    return " ".join(_SPEAKER_TAG.split(text)).strip(".? ")


def clean_normalise(text: str) -> str:
    """Lower-case, no speaker tags, no punctuation (Unicode category P*), single spaces."""
    text = _SPEAKER_TAG.sub(" ", text).lower()
    text = "".join(c for c in text if not unicodedata.category(c).startswith("P"))  # "that's" -> "thats"
    return _SPACES.sub(" ", text).strip()


NORMALISERS = {"authors": authors_normalise, "clean": clean_normalise}


@numba.njit(cache=True)
def _levenshtein(a: np.ndarray, b: np.ndarray) -> int:  # pragma: no cover - compiled
    n, m = len(a), len(b)
    prev = np.arange(m + 1)
    cur = np.empty(m + 1, dtype=prev.dtype)
    for i in range(1, n + 1):
        cur[0] = i
        ai = a[i - 1]
        for j in range(1, m + 1):
            cost = 0 if ai == b[j - 1] else 1
            cur[j] = min(prev[j - 1] + cost, prev[j] + 1, cur[j - 1] + 1)
        prev, cur = cur, prev
    return prev[m]


def _ids(tokens: Sequence[str], vocab: dict[str, int]) -> np.ndarray:
    return np.array([vocab.setdefault(t, len(vocab)) for t in tokens], dtype=np.int64)


def _rate(ref: Sequence[str], hyp: Sequence[str]) -> float | None:
    if not ref:
        return None
    vocab: dict[str, int] = {}
    return _levenshtein(_ids(ref, vocab), _ids(hyp, vocab)) / len(ref)


def words(text: str) -> list[str]:
    """jiwer's word split: runs of whitespace separate words; the ends are stripped."""
    return text.split()


def chars(text: str) -> list[str]:
    """jiwer's character list: ends stripped, every inner character (spaces too) kept."""
    return list(text.strip())


def word_error_rate(reference: str, hypothesis: str) -> float | None:
    """(S + D + I) / N over words; None for an empty reference (jiwer refuses one)."""
    return _rate(words(reference), words(hypothesis))


def char_error_rate(reference: str, hypothesis: str) -> float | None:
    """(S + D + I) / N over characters, spaces included; None for an empty reference."""
    return _rate(chars(reference), chars(hypothesis))


def error_rates(reference: str, hypothesis: str, normalise: str = "authors") -> tuple[float | None, float | None]:
    """(WER, CER) after one of NORMALISERS applied to both texts."""
    if normalise not in NORMALISERS:
        raise ValueError(f"unknown normalisation {normalise!r}; expected one of {', '.join(NORMALISERS)}")
    fn = NORMALISERS[normalise]
    ref, hyp = fn(reference), fn(hypothesis)
    return word_error_rate(ref, hyp), char_error_rate(ref, hyp)
