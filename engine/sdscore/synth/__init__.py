"""Synthetic spoken-dialogue corpus for every protocol, rendered with local TTS voices."""

from sdscore.synth.build import SIZES, build_corpus

__all__ = ["SIZES", "build_corpus"]
