"""Speaker embeddings: GE2E (resemblyzer weights, batched), ECAPA-TDNN (SpeechBrain folder), WavLM (HF folder)."""

from sdscore.features.speaker.embedder import EMBEDDERS, SpeakerEmbedder

__all__ = ["EMBEDDERS", "SpeakerEmbedder"]
