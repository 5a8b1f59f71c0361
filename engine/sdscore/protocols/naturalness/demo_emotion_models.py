"""RANDOM-WEIGHT emotion models for `sdscore demo`: no emotion model or emotional-naturalness predictor
ships in a package, so the demo writes tiny random ones in the real layouts and runs the real code on
them — a Hugging Face audio regression model with arousal / valence / dominance outputs (a 1-layer,
16-wide wav2vec 2.0: its mean last hidden state is the emotion embedding) and a predictor folder
(emotional_naturalness.write_random_predictor) marked random_weights, knowing the synthetic items'
made-up relationships (synth.naturalness_items.RELATIONSHIPS). Every value they give means nothing;
Table III, the report and the demo's headline say so.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from sdscore.protocols.naturalness.emotional_naturalness import write_random_predictor
from sdscore.protocols.naturalness.results import AVD
from sdscore.synth.naturalness_items import RELATIONSHIPS

EMOTION_FOLDER = "emotion-RANDOM-WEIGHTS"
PREDICTOR_FOLDER = "emotional-naturalness-RANDOM-WEIGHTS"
PREDICTOR_NAME = "RANDOM WEIGHTS (sdscore demo: random emotion model and predictor)"
HIDDEN = 16
SEED = 0
#: the predictor's weight scale: the tiny model's embeddings are small, so unit-scale weights give
#: logits of a few thousandths, which Table III's two decimals would show as 0.00
PREDICTOR_SCALE = 10.0


def random_emotion_models(folder: Path) -> tuple[Path, Path] | str:
    """(emotion_dir, predictor_dir) written under `folder` (reused when already there), or why not
    (transformers, torch or safetensors missing)."""
    missing = [m for m in ("transformers", "torch", "safetensors") if importlib.util.find_spec(m) is None]
    if missing:
        return f"the demo's random emotion models need {', '.join(missing)} (pip install 'sdscore[hf]')"
    emotion, predictor = folder / EMOTION_FOLDER, folder / PREDICTOR_FOLDER
    if not (emotion / "config.json").is_file():
        _write_emotion_model(emotion)
    if not (predictor / "config.json").is_file():
        write_random_predictor(predictor, emotion_dim=HIDDEN, relationships=RELATIONSHIPS, hidden=(8,), seed=SEED,
                               name=PREDICTOR_NAME, scale=PREDICTOR_SCALE)
    return emotion, predictor


def _write_emotion_model(folder: Path) -> None:
    import torch
    import transformers

    config = transformers.Wav2Vec2Config(
        hidden_size=HIDDEN, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, conv_dim=(16, 16),
        conv_stride=(5, 4), conv_kernel=(10, 8), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2,
        feat_extract_norm="layer", do_stable_layer_norm=True, classifier_proj_size=8, num_labels=len(AVD),
        id2label=dict(enumerate(AVD)), label2id={name: i for i, name in enumerate(AVD)}, problem_type="regression")
    torch.manual_seed(SEED)
    transformers.Wav2Vec2ForSequenceClassification(config).eval().save_pretrained(folder)
    transformers.Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0, do_normalize=True,
                                          return_attention_mask=True).save_pretrained(folder)
