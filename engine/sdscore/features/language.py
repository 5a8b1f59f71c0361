"""Extractor ``language``: the spoken language of each item, with SPEARBench's "unknown" rules.

Two sources. With ``model_dir``: a local audio language-ID classifier (e.g. MMS-LID's Hugging
Face folder, labels as it names them, "eng"), softmax over its logits. Without: the item's ASR
transcript (the ``asr`` extractor's column) classified by py3langid's bundled text model (ISO
639-1 codes, "en"), probabilities normalised over its 97 languages. Then the authors' rules: an
item shorter than 1.0 s is "unknown - too short"; a best probability under 0.5 is "unknown - low
confidence" (its probability is still given); an empty transcript is "unknown - no words".
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Mapping
from typing import ClassVar

import numpy as np
import polars as pl

from sdscore.audio import AudioBatch
from sdscore.errors import MissingDependencyError
from sdscore.features.extract import select

MIN_SECONDS = 1.0
MIN_PROBABILITY = 0.5
TOO_SHORT = "unknown - too short"
LOW_CONFIDENCE = "unknown - low confidence"
NO_WORDS = "unknown - no words"


def text_identifier():
    """py3langid's bundled model with normalised probabilities: one per process, read once (its
    LZMA-packed model takes ~0.5 s of CPU to unpack, which every Scorer built in a process paid
    again) and shared — ``classify`` only reads it."""
    if importlib.util.find_spec("py3langid") is None:
        raise MissingDependencyError("text language ID needs py3langid: pip install py3langid")
    return _bundled_text_identifier()


@functools.cache
def _bundled_text_identifier():
    from py3langid.langid import MODEL_DIR, MODEL_FILE, LanguageIdentifier

    return LanguageIdentifier.from_modelpath(MODEL_DIR / MODEL_FILE, norm_probs=True)


def decide(label: str, probability: float, seconds: float) -> str:
    """The language label after the authors' too-short and low-confidence rules."""
    if seconds < MIN_SECONDS:
        return TOO_SHORT
    if probability < MIN_PROBABILITY:
        return LOW_CONFIDENCE
    return label


class LanguageId:
    """Extractor ``language`` → ``language``, ``language_prob``, ``language_source`` (module doc)."""

    name = "language"
    schema: ClassVar[dict[str, pl.DataType]] = {"language": pl.Utf8, "language_prob": pl.Float64, "language_source": pl.Utf8}

    def __init__(self, model_dir: str | None = None, **options):
        if model_dir is None:
            self.requires: tuple[str, ...] = ("asr",)
            self.identifier = text_identifier()
            self.classifier = None
            self.source = "py3langid on the ASR transcript"
        else:
            from sdscore.features.classifiers import load_classifier

            self.requires = ()
            self.classifier = load_classifier(model_dir, **options)
            self.source = f"audio classifier {model_dir}"

    def run(self, batch: AudioBatch, inputs: Mapping[str, list] | None = None) -> dict[str, list]:
        seconds = [int(n) / batch.sample_rate for n in batch.lengths]
        out: dict[str, list] = {"language": [], "language_prob": [], "language_source": [self.source] * len(batch)}
        if self.classifier is not None:
            keep = [i for i in range(len(batch)) if len(batch[i])]
            scores = dict(zip(keep, self.classifier.scores(select(batch, keep)) if keep else []))
            for i in range(len(batch)):
                if i not in scores:
                    out["language"].append(TOO_SHORT)
                    out["language_prob"].append(None)
                    continue
                k = int(np.argmax(scores[i]))
                p = float(scores[i][k])
                out["language"].append(decide(self.classifier.labels[k], p, seconds[i]))
                out["language_prob"].append(p)
            return out
        for text, s in zip((inputs or {})["transcript"], seconds):
            if s >= MIN_SECONDS and not (text or "").strip():
                out["language"].append(NO_WORDS)
                out["language_prob"].append(None)
                continue
            label, p = self.identifier.classify(text or "")
            out["language"].append(decide(label, float(p), s))
            out["language_prob"].append(float(p))
        return out
