"""sdscore — a batch scoring engine for spoken-dialogue and speech-to-speech evaluation."""

import os as _os

from sdscore.errors import (
    AudioError,
    JudgeError,
    ManifestError,
    ModelError,
    SdscoreError,
)

#: OpenMP threads that wait for work sleep instead of spinning: torch's team (and the compiled
#: core's parallel loops, which run on it) keeps its speed when other processes share the cores
#: (spinning waiters hold a core a co-tenant needs and lose it when the next op starts: 10x and
#: more slower on a busy machine). Read when torch loads libgomp, so set here, before any sdscore
#: module can import torch; worker processes inherit it. A value the user set (ACTIVE, to spin on a
#: dedicated machine) is kept. See sdscore.runtime.compute_budget.
_OPENMP_WAIT_POLICY = ("OMP_WAIT_POLICY", "PASSIVE")
_os.environ.setdefault(*_OPENMP_WAIT_POLICY)

__version__ = "0.1.0"

#: public names imported on first use, so `import sdscore` stays light (no torch at import)
_LAZY = {
    "RewardScorer": "sdscore.runtime.reward.episode_scorer",
    "Episode": "sdscore.models.episodes",
    "Turn": "sdscore.models.episodes",
    # manifests by a registered protocol's name (sdscore.corpus takes ManifestSpec values only)
    **{name: "sdscore.manifests" for name in ("audio_paths", "infer_protocol", "manifest_spec", "manifest_specs",
                                               "read_manifest", "resolve_audio_paths", "validate_manifest")},
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'sdscore' has no attribute {name!r}")


__all__ = [
    "AudioError",
    "Episode",
    "JudgeError",
    "ManifestError",
    "ModelError",
    "RewardScorer",
    "SdscoreError",
    "Turn",
    "__version__",
    "audio_paths",
    "infer_protocol",
    "manifest_spec",
    "manifest_specs",
    "read_manifest",
    "resolve_audio_paths",
    "validate_manifest",
]
