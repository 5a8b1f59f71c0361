"""Feature extractors that turn loaded audio into per-item columns (speaker embeddings, ...)."""

from sdscore.features.cache import ContentCache
from sdscore.features.speaker import EMBEDDERS, SpeakerEmbedder

__all__ = ["EMBEDDERS", "ContentCache", "SpeakerEmbedder"]

# Batched acoustic extractors behind one call, and TRACE's blueprint (judge protocol).
from sdscore.features.blueprint import BlueprintBuilder, build_blueprints  # noqa: E402
from sdscore.features.extract import REGISTRY, Extractor, extract, make_extractor  # noqa: E402

__all__ += ["REGISTRY", "BlueprintBuilder", "Extractor", "build_blueprints", "extract", "make_extractor"]
