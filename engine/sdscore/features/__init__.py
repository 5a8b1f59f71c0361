"""Feature extractors that turn loaded audio into per-item columns (speaker embeddings, ...), batched
acoustic extractors behind one call, and TRACE's blueprint (judge protocol).

Names are imported from their modules on first use (lazy_exports): `sdscore.features.cache` alone
does not load the extractors."""

from sdscore.lazy_exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    ".cache": ("ContentCache",),
    ".speaker": ("EMBEDDERS", "SpeakerEmbedder"),
    ".blueprint": ("BlueprintBuilder", "build_blueprints"),
    ".extract": ("REGISTRY", "Extractor", "extract", "make_extractor"),
})
