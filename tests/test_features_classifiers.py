"""Pluggable emotion/accent classifiers from local directories: ONNX + labels.json, or HF checkpoints."""

from __future__ import annotations

import json

import numpy as np
import pytest
from features_audio import RATE, batch_of, harmonic
from sdscore.errors import ModelError
from sdscore.features import extract, make_extractor

onnx = pytest.importorskip("onnx")
W = np.array([[1.0, -2.0, 0.5], [3.0, 1.0, -1.0]], np.float32)
B = np.array([0.1, 0.0, -0.1], np.float32)
LABELS = ["angry", "happy", "neutral"]


def build_onnx(folder, labels=LABELS):
    """scores [1, 3] = [mean(x), max|x|] @ W + B for a waveform x [1, T]."""
    h = onnx.helper
    nodes = [
        h.make_node("ReduceMean", ["wave"], ["mean"], axes=[1], keepdims=1),
        h.make_node("Abs", ["wave"], ["abs"]),
        h.make_node("ReduceMax", ["abs"], ["peak"], axes=[1], keepdims=1),
        h.make_node("Concat", ["mean", "peak"], ["features"], axis=1),
        h.make_node("MatMul", ["features", "W"], ["logits"]),
        h.make_node("Add", ["logits", "B"], ["scores"]),
    ]
    graph = h.make_graph(
        nodes,
        "toy",
        [h.make_tensor_value_info("wave", onnx.TensorProto.FLOAT, [1, "T"])],
        [h.make_tensor_value_info("scores", onnx.TensorProto.FLOAT, [1, 3])],
        [onnx.numpy_helper.from_array(W, "W"), onnx.numpy_helper.from_array(B, "B")],
    )
    folder.mkdir(parents=True, exist_ok=True)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, folder / "model.onnx")
    (folder / "labels.json").write_text(json.dumps(labels))
    return folder


def expected(x: np.ndarray) -> np.ndarray:
    logits = np.array([x.mean(), np.abs(x).max()]) @ W + B
    e = np.exp(logits - logits.max())
    return e / e.sum()


def test_onnx_classifier_scores_with_label_names(tmp_path):
    folder = build_onnx(tmp_path / "emotion")
    items = [
        harmonic(120, 0.5),
        np.zeros(0, np.float32),
        harmonic(200, 0.3, level=0.6) + 0.1,
    ]
    frame = extract(["emotion"], batch_of(items), emotion={"model_dir": str(folder)})
    assert frame["emotion_labels"][0].to_list() == LABELS
    np.testing.assert_allclose(
        frame["emotion_scores"][0].to_list(), expected(items[0]), atol=1e-6
    )
    np.testing.assert_allclose(
        frame["emotion_scores"][2].to_list(), expected(items[2]), atol=1e-6
    )
    assert frame["emotion_scores"][1] is None and frame["error"][1] is None


def test_onnx_activation_and_rate_come_from_labels_json(tmp_path):
    folder = build_onnx(tmp_path / "accent")
    (folder / "labels.json").write_text(
        json.dumps(
            {"labels": ["us", "uk", "in"], "activation": "none", "sample_rate": 8000}
        )
    )
    x = harmonic(150, 0.5)
    out = make_extractor("accent", model_dir=str(folder)).run(batch_of([x]), {})
    import soxr

    x8 = soxr.resample(x, RATE, 8000)
    np.testing.assert_allclose(
        out["accent_scores"][0],
        np.array([x8.mean(), np.abs(x8).max()]) @ W + B,
        atol=1e-5,
    )
    assert out["accent_labels"][0] == ["us", "uk", "in"]


def build_hf(folder):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    config = transformers.Wav2Vec2Config(
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        conv_dim=(16, 16),
        conv_stride=(5, 4),
        conv_kernel=(10, 8),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=2,
        feat_extract_norm="layer",
        do_stable_layer_norm=True,
        classifier_proj_size=8,
        num_labels=4,
        id2label={i: n for i, n in enumerate(["a", "b", "c", "d"])},
        label2id={n: i for i, n in enumerate(["a", "b", "c", "d"])},
    )
    torch.manual_seed(0)
    transformers.Wav2Vec2ForSequenceClassification(config).eval().save_pretrained(
        folder
    )
    transformers.Wav2Vec2FeatureExtractor(
        feature_size=1,
        sampling_rate=RATE,
        padding_value=0.0,
        do_normalize=True,
        return_attention_mask=True,
    ).save_pretrained(folder)
    return folder


def test_hf_classifier_batched_equals_one_at_a_time(tmp_path):
    folder = build_hf(tmp_path / "hf")
    items = [
        harmonic(120, 0.4),
        harmonic(180, 1.1, level=0.5),
        harmonic(90, 0.7, vibrato=10),
    ]
    ex = make_extractor("emotion", model_dir=str(folder), batch_size=3)
    together = ex.run(batch_of(items), {})
    assert together["emotion_labels"][0] == ["a", "b", "c", "d"]
    for i, x in enumerate(items):
        alone = ex.run(batch_of([x]), {})["emotion_scores"][0]
        np.testing.assert_allclose(together["emotion_scores"][i], alone, atol=1e-5)
        assert sum(alone) == pytest.approx(1.0)


def test_no_classifier_is_bundled():
    with pytest.raises(
        ValueError,
        match="emotion: no classifier is bundled; pass emotion=\\{'model_dir': DIR\\}",
    ):
        make_extractor("emotion")


def test_bad_classifier_directories_are_refused(tmp_path):
    with pytest.raises(ModelError, match="classifier directory not found"):
        make_extractor("accent", model_dir=str(tmp_path / "nowhere"))
    with pytest.raises(
        ModelError,
        match="neither model.onnx \\+ labels.json nor a Hugging Face config.json",
    ):
        make_extractor("accent", model_dir=str(tmp_path))
    folder = build_onnx(tmp_path / "m")
    (folder / "labels.json").unlink()
    with pytest.raises(ModelError, match="model.onnx needs a labels.json beside it"):
        make_extractor("accent", model_dir=str(folder))
    (folder / "labels.json").write_text(json.dumps({"labels": "abc"}))
    with pytest.raises(ModelError, match="expected a list of label names"):
        make_extractor("accent", model_dir=str(folder))
    (folder / "labels.json").write_text(
        json.dumps({"labels": LABELS, "activation": "relu"})
    )
    with pytest.raises(ModelError, match="activation must be one of"):
        make_extractor("accent", model_dir=str(folder))
    (folder / "labels.json").write_text(json.dumps(LABELS))
    (folder / "model.onnx").write_bytes(b"not a model")
    with pytest.raises(ModelError, match="model.onnx: onnxruntime cannot load it"):
        make_extractor("accent", model_dir=str(folder))


def test_label_count_mismatch_becomes_the_rows_error(tmp_path):
    folder = build_onnx(tmp_path / "m", labels=["x", "y"])
    frame = extract(
        ["accent"], batch_of([harmonic(100, 0.3)]), accent={"model_dir": str(folder)}
    )
    assert frame["error"][0] == "accent: classifier returned 3 scores for 2 labels"
