"""Lexical features of one answer's text: SPEARBench's explainable distributional baselines (Hallur et
al., the paper's [15]), as the authors' released bin/distrib_baselines/extract_features.py defines them.

Tokens: ``[\\w']+`` runs of the text, lower-cased, with ``.,!?;:"()[]{}`` stripped at their ends (the
released normalize_word); speaker tags ("P0123:" or "name:" before an utterance, as SPEARBench's
transcripts write them) are removed first — the released code counts them as words.

- lex_total_words, lex_unique_words; lex_ttr = unique / total;
- lex_mattr_small / lex_mattr_large: moving-average type-token ratio over windows of 50 and
  min(500, total) tokens, lex_mattr_ratio = small / large; lex_mtld: the measure of textual lexical
  diversity (TTR threshold 0.72, mean of the forward and backward passes; a partial factor for the
  rest) — these four only for texts of at least 50 words, as the released code, null otherwise;
- lex_hapax_ratio: words seen once / total; lex_entropy_bits: Shannon entropy (log2) of the word
  frequencies;
- lex_backchannel_ratio: share of sentences (split at runs of . ! ?) of at most two words holding one
  of yeah/okay/ok/uh/um; lex_discourse_marker_ratio: share of longer sentences holding "you know",
  "i mean", "kind of" or "sort of" (as whole words; the released code matches substrings).

Left out: lexical density (content words / total) needs a part-of-speech tagger (spaCy's
en_core_web_sm in the released code), which sdscore does not ship; the ASR-confidence features need
word scores the transcripts do not carry. An empty text gives every feature null.
"""

from __future__ import annotations

import math
import re
from collections import Counter

MATTR_SMALL = 50
MATTR_LARGE = 500
MTLD_THRESHOLD = 0.72
#: the fewest words for MATTR and MTLD (the released MIN_WORDS_LD)
MIN_WORDS_DIVERSITY = 50
BACKCHANNEL_WORDS = frozenset({"yeah", "okay", "ok", "uh", "um"})
DISCOURSE_MARKERS = ("you know", "i mean", "kind of", "sort of")
LEXICAL_FEATURES = (
    "lex_total_words", "lex_unique_words", "lex_ttr", "lex_mattr_small", "lex_mattr_large", "lex_mattr_ratio",
    "lex_mtld", "lex_hapax_ratio", "lex_entropy_bits", "lex_backchannel_ratio", "lex_discourse_marker_ratio",
)

_WORD = re.compile(r"\b[\w']+\b")
_SPEAKER_TAG = re.compile(r"(?:^|(?<=\s))[^\s:]+:(?=\s|$)")
_SENTENCE_END = re.compile(r"[.!?]+")
_STRIP = ".,!?;:\"()[]{}"


def tokens(text: str) -> list[str]:
    """The text's normalised words (speaker tags removed)."""
    text = _SPEAKER_TAG.sub(" ", text)
    out = []
    for match in _WORD.findall(text):
        word = match.lower().strip(_STRIP)
        if word:
            out.append(word)
    return out


def mattr(words: list[str], window: int) -> float:
    """Mean type-token ratio over every window of `window` consecutive words (NaN for fewer words)."""
    if window <= 0 or len(words) < window:
        return math.nan
    counts = Counter(words[:window])
    total = len(counts)
    for i in range(window, len(words)):
        gone, new = words[i - window], words[i]
        counts[gone] -= 1
        if counts[gone] == 0:
            del counts[gone]
        counts[new] += 1
        total += len(counts)
    return total / ((len(words) - window + 1) * window)


def _mtld_pass(words: list[str], threshold: float) -> float:
    factors, types, count, ttr = 0.0, set(), 0, 1.0
    for word in words:
        count += 1
        types.add(word)
        ttr = len(types) / count
        if ttr <= threshold:
            factors += 1
            types, count = set(), 0
    if count > 0:
        factors += (1 - ttr) / (1 - threshold)
    return len(words) / factors if factors > 0 else math.nan


def mtld(words: list[str], threshold: float = MTLD_THRESHOLD) -> float:
    """MTLD: the mean of the forward and backward passes' words per factor (NaN under 50 words, or when
    neither pass completes a factor)."""
    if len(words) < MIN_WORDS_DIVERSITY:
        return math.nan
    passes = [v for v in (_mtld_pass(words, threshold), _mtld_pass(words[::-1], threshold)) if not math.isnan(v)]
    return sum(passes) / len(passes) if passes else math.nan


def entropy_bits(words: list[str]) -> float:
    """Shannon entropy (bits) of the word frequency distribution."""
    counts = Counter(words)
    total = sum(counts.values())
    return -sum(c / total * math.log2(c / total) for c in counts.values()) if total else math.nan


def _sentence_ratios(text: str) -> tuple[float, float]:
    sentences = [tokens(s) for s in _SENTENCE_END.split(_SPEAKER_TAG.sub(" ", text))]
    sentences = [s for s in sentences if s]
    if not sentences:
        return 0.0, 0.0
    backchannels = discourse = 0
    for words in sentences:
        if len(words) <= 2:
            backchannels += any(w in BACKCHANNEL_WORDS for w in words)
        else:
            joined = f" {' '.join(words)} "
            discourse += any(f" {marker} " in joined for marker in DISCOURSE_MARKERS)
    return backchannels / len(sentences), discourse / len(sentences)


def lexical_features(text: str | None) -> dict[str, float | None]:
    """LEXICAL_FEATURES of one text (None values for an empty or missing text; NaN never escapes)."""
    words = tokens(text or "")
    if not words:
        return dict.fromkeys(LEXICAL_FEATURES)
    total, unique = len(words), len(set(words))
    out: dict[str, float | None] = {"lex_total_words": float(total), "lex_unique_words": float(unique),
                                    "lex_ttr": unique / total}
    if total >= MIN_WORDS_DIVERSITY:
        small, large = mattr(words, MATTR_SMALL), mattr(words, min(MATTR_LARGE, total))
        out.update(lex_mattr_small=small, lex_mattr_large=large,
                   lex_mattr_ratio=small / large if small and large else None, lex_mtld=mtld(words))
    else:
        out.update(dict.fromkeys(("lex_mattr_small", "lex_mattr_large", "lex_mattr_ratio", "lex_mtld")))
    counts = Counter(words)
    out["lex_hapax_ratio"] = sum(1 for c in counts.values() if c == 1) / total
    out["lex_entropy_bits"] = entropy_bits(words)
    out["lex_backchannel_ratio"], out["lex_discourse_marker_ratio"] = _sentence_ratios(text or "")
    return {k: (None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v))
            for k, v in ((name, out[name]) for name in LEXICAL_FEATURES)}
