"""sdscore — a batch scoring engine for spoken-dialogue and speech-to-speech evaluation."""

from sdscore.errors import AudioError, JudgeError, ManifestError, ModelError, SdscoreError

__version__ = "0.1.0"

__all__ = ["AudioError", "JudgeError", "ManifestError", "ModelError", "SdscoreError", "__version__"]
