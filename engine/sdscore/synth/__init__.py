"""Synthetic spoken-dialogue corpus for every protocol, rendered with local TTS voices.

`build_corpus` (synth/build.py) assembles every registered protocol's corpus: an upper layer. The
other modules render audio and tables below the protocols (a demo stage may use them), so the
package exports lazily: importing `sdscore.synth.conversations` does not load the registry."""

from sdscore.lazy_exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {".build": ("SIZES", "build_corpus")})
