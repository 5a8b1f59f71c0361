"""`score naturalness`: every per-answer column against an independent reference.

WER/CER against jiwer; the authors' normalisation against their three lines re-typed here; F0
statistics end to end (our loader + Praat at 16 kHz) against parselmouth reading the original
recording at its own rate; pocketsphinx + Praat on worker processes equal in-process; language
rules; latency and interruption against the synthetic corpus's known gaps; local model folders
(dialect, emotion dimensions, MOS) as tiny random-weight models in the real layouts.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from sdscore.audio import load, load_many
from sdscore.cli import main
from sdscore.manifests import read_manifest
from sdscore.metrics.text_errors import (
    authors_normalise,
    char_error_rate,
    clean_normalise,
    error_rates,
    word_error_rate,
)
from sdscore.protocols.naturalness import timing
from sdscore.protocols.naturalness.results import (
    DIALECT_GROUPS,
    DIALECT_MERGE,
    F0_FEATURES,
    RESULTS,
)

REAL = Path(__file__).parent / "data" / "real"
VAD_FRAME_S = 512 / 16000
VAD_PAD_S = 0.030


# ---- WER / CER -------------------------------------------------------------------------------

def test_wer_and_cer_equal_jiwer_on_random_texts():
    jiwer = pytest.importorskip("jiwer")
    rng = np.random.default_rng(7)
    vocab = ["the", "cat", "sat", "on", "a", "mat", "well", "I", "think", "so", "yes", "no"]
    for _ in range(2000):
        ref = " ".join(rng.choice(vocab, rng.integers(1, 15)))
        hyp = "  ".join(rng.choice(vocab, rng.integers(0, 15)))
        assert word_error_rate(ref, hyp) == pytest.approx(jiwer.wer(ref, hyp), abs=1e-12)
        assert char_error_rate(ref, hyp) == pytest.approx(jiwer.cer(ref, hyp), abs=1e-12)
    assert word_error_rate("", "anything") is None  # jiwer refuses an empty reference


def _authors(text: str) -> str:
    """The released code's clean_reference + strip, re-typed: split on a capturing tag pattern, join."""
    return " ".join(re.split(r"(P\d{4}A?:\s*)", text)).strip(".? ")


@pytest.mark.parametrize("ref, hyp", [
    ("P0123: Well, I think so. P0456A: Yes?", "well i think so yes"),
    ("Sure. That's fine.", "sure that's fine"),
    ("?What? ", "what"),
])
def test_both_normalisations(ref, hyp):
    jiwer = pytest.importorskip("jiwer")
    assert authors_normalise(ref) == _authors(ref)
    wer, cer = error_rates(ref, hyp, "authors")
    assert wer == pytest.approx(jiwer.wer(_authors(ref), _authors(hyp)))
    assert cer == pytest.approx(jiwer.cer(_authors(ref), _authors(hyp)))
    clean = jiwer.Compose([jiwer.SubstituteRegexes({r"P\d{4}A?:": " "}), jiwer.ToLowerCase(),
                           jiwer.RemovePunctuation(), jiwer.RemoveMultipleSpaces(), jiwer.Strip()])
    assert clean_normalise(ref) == clean(ref)
    wer, _ = error_rates(ref, hyp, "clean")
    assert wer == pytest.approx(jiwer.wer(clean(ref), clean(hyp)))


# ---- F0 statistics ---------------------------------------------------------------------------

def _praat_reference(path: Path) -> dict:
    """The authors' run_f0_extraction on the original file: parselmouth reads it at its own rate."""
    parselmouth = pytest.importorskip("parselmouth")
    sound = parselmouth.Sound(str(path))
    if sound.n_channels > 1:
        sound = sound.convert_to_mono()
    f0 = sound.to_pitch_ac(pitch_floor=75, pitch_ceiling=500).selected_array["frequency"]
    v = f0[f0 > 0]
    p = dict(zip(("f0_p10", "f0_p25", "f0_median", "f0_p75", "f0_p90"), np.percentile(v, [10, 25, 50, 75, 90])))
    return {"f0_min": v.min(), "f0_max": v.max(), "f0_mean": v.mean(), "f0_std": v.std(), **p,
            "voiced_ratio": len(v) / len(f0)}


@pytest.mark.parametrize("path", sorted(p for p in REAL.glob("*.wav")), ids=lambda p: p.name)
def test_f0_statistics_end_to_end_against_parselmouth_on_the_original_file(path):
    """At 16 kHz our loader hands Praat the file's own samples: identical. At 8/44.1 kHz Praat sees
    our 16 kHz resampling instead of the original rate: every F0 statistic within 2 %, the voiced
    ratio within 3 points (measured worst: 1.8 % and 2.3 points)."""
    from sdscore.features.praat_pitch import f0_statistics

    ref = _praat_reference(path)
    ours = f0_statistics(load(path, 16000), 16000)
    native = "_16k" in path.name
    for name in F0_FEATURES:
        assert ours[name] == pytest.approx(ref[name], rel=1e-9 if native else 0.02), name
    assert ours["voiced_ratio"] == pytest.approx(ref["voiced_ratio"], abs=1e-12 if native else 0.03)


def test_f0_statistics_of_silence_and_a_too_short_clip_are_null():
    from sdscore.features.praat_pitch import f0_statistics

    silent = f0_statistics(np.zeros(16000, np.float32), 16000)
    assert silent["f0_mean"] is None and silent["voiced_ratio"] == 0.0 and silent["duration_s"] == 1.0
    short = f0_statistics(np.ones(200, np.float32) * 0.1, 16000)
    assert short["f0_mean"] is None and short["duration_s"] == pytest.approx(200 / 16000)
    assert f0_statistics(np.zeros(0, np.float32), 16000)["voiced_ratio"] is None


def test_pocketsphinx_and_praat_on_worker_processes_equal_in_process():
    from sdscore.features.process_extractor import ProcessExtractor, balanced_parts

    # three of the shortest read clips (9 s, not the first six's 30 s): two workers, one gets two clips
    paths = [REAL / f"read_en_m_{name}_16k.wav" for name in ("goforward", "librivox_0880", "librivox_0930")]
    batch = load_many(paths, 16000)
    local = ProcessExtractor(["asr", "praat_pitch"], jobs=1).run(batch)
    assert all(text.strip() for text in local["transcript"]), local["transcript"]  # real speech, real words
    pool = ProcessExtractor(["asr", "praat_pitch"], jobs=2)
    try:
        assert pool.run(batch) == local
    finally:
        pool.close()
    parts = balanced_parts([10, 1, 1, 7, 3], 2)
    assert sorted(i for p in parts for i in p) == [0, 1, 2, 3, 4] and len(parts) == 2


# ---- language --------------------------------------------------------------------------------

def test_language_rules_follow_the_authors():
    from sdscore.features.language import (
        LOW_CONFIDENCE,
        NO_WORDS,
        TOO_SHORT,
        LanguageId,
        text_identifier,
    )

    ex = LanguageId()
    batch = load_many([REAL / "read_en_m_forever_16k.wav"] * 4, 16000)
    short = load_many([REAL / "read_en_m_forever_16k.wav"], 16000)
    texts = ["well I think we should go to the market tomorrow morning", "", "uh", "the"]
    out = ex.run(batch, {"transcript": texts})
    reference = text_identifier().classify(texts[0])
    assert out["language"][0] == reference[0] == "en"
    assert out["language_prob"][0] == pytest.approx(reference[1])
    assert out["language"][1] == NO_WORDS
    assert out["language"][2] == LOW_CONFIDENCE and out["language_prob"][2] < 0.5
    from sdscore.features.extract import select

    cut = select(short, [0])
    cut = type(cut)(cut.data[:8000].copy(), np.array([0, 8000]), [None], 16000)
    assert ex.run(cut, {"transcript": [texts[0]]})["language"] == [TOO_SHORT]


def test_the_bundled_text_model_is_read_once_per_process():
    from sdscore.features.language import LanguageId, text_identifier

    assert LanguageId().identifier is LanguageId().identifier is text_identifier()


# ---- latency and interruption ------------------------------------------------------------------

def test_timing_formulas():
    assert timing.onset_latency_ms([[0.5, 1.0], [2.0, 3.0]]) == 500.0
    assert timing.onset_latency_ms([]) == 0.0
    assert timing.trailing_silence([[0.1, 2.5]], 3.0) == pytest.approx(0.5)
    assert timing.released_latency_ms(0.2, 0.3, 0.4) == pytest.approx(900.0)
    assert timing.paper_latency_ms(0.2, 0.3, 0.4) == pytest.approx(900.0)
    # an interrupted answer: the authors' newest counts from the question's end, the paper leaves it out
    assert timing.released_latency_ms(0.1, 0.2, -0.5) == pytest.approx(300.0)
    assert timing.paper_latency_ms(0.1, 0.2, -0.5) is None
    assert timing.released_latency_ms(None, 0.2, 0.1) is None and timing.paper_latency_ms(0.1, None, 0.1) is None
    assert timing.released_latency_ms(0.1, 0.2, float("nan")) is None
    assert timing.interruption(-0.25) == (True, 250.0)
    assert timing.interruption(0.0) == (False, 0.0)
    assert timing.interruption(None) == (None, None)


@pytest.fixture(scope="module")
def scored(tiny_corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("naturalness") / "results.parquet"
    assert main(["score", "naturalness", str(tiny_corpus / "naturalness.parquet"), "--out", str(out),
                 "--jobs", "2"]) == 0
    return pl.read_parquet(out)


def test_latency_and_interruptions_match_the_known_gaps(tiny_corpus, scored):
    truth = json.loads((tiny_corpus / "corpus.json").read_text())["truth"]["naturalness"]
    manifest = read_manifest(tiny_corpus / "naturalness.parquet")
    assert scored.schema == RESULTS and scored["error"].null_count() == scored.height
    starts = dict(zip(manifest["item_id"], manifest["answer_start_time"]))
    tolerance = VAD_FRAME_S + VAD_PAD_S + 0.01  # one VAD window, its pad, the synth's 10 ms speech frames
    for row in scored.iter_rows(named=True):
        item = row["item_id"]
        assert row["interrupted"] == (starts[item] < 0)
        assert row["interrupted_ms"] == pytest.approx(max(0.0, -1000 * starts[item]))
        # the question file ends where its speech ends: the latencies are the answer's leading silence plus
        # max(answer_start_time, 0) (the authors' newest), or the speech gap, unless interrupted (the paper's)
        latency = truth["answer_latency_s"][item]
        assert row["latency_ms"] / 1000 == pytest.approx(latency + max(starts[item], 0.0), abs=tolerance)
        if starts[item] < 0:
            assert row["latency_paper_ms"] is None and "latency_paper_ms: an interrupted answer" in row["unavailable"]
        else:
            assert row["latency_paper_ms"] / 1000 == pytest.approx(truth["speech_gap_s"][item], abs=tolerance)
        assert row["latency_onset_ms"] / 1000 == pytest.approx(truth["answer_latency_s"][item], abs=tolerance)
        assert row["system"] in ("human", "halfduplex-robot")
        assert row["language"] == "en" and row["f0_mean"] is not None
        assert 0 < row["voiced_ratio"] < 1 and row["wer_pocketsphinx"] is not None
        assert "dialect: no dialect classifier given" in row["unavailable"]
    assert scored["question_key"].n_unique() == scored.height // 2  # each question answered twice


def test_batched_rows_equal_one_by_one(tiny_corpus, scored, tmp_path):
    from sdscore.protocols.naturalness.scorer import NaturalnessScorer

    manifest = read_manifest(tiny_corpus / "naturalness.parquet").with_columns(pl.lit(None, pl.String).alias("error"))
    scorer = NaturalnessScorer(jobs=1)
    one_by_one = pl.concat([scorer(manifest.slice(i, 1)) for i in range(manifest.height)])
    from polars.testing import assert_frame_equal

    assert_frame_equal(one_by_one, scored)


# ---- local model folders ------------------------------------------------------------------------

def _hf_classifier(folder: Path, labels: list[str], regression: bool = False) -> Path:
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    config = transformers.Wav2Vec2Config(
        hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, conv_dim=(16, 16),
        conv_stride=(5, 4), conv_kernel=(10, 8), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2,
        feat_extract_norm="layer", do_stable_layer_norm=True, classifier_proj_size=8, num_labels=len(labels),
        id2label=dict(enumerate(labels)), label2id={n: i for i, n in enumerate(labels)},
        problem_type="regression" if regression else "single_label_classification",
    )
    torch.manual_seed(len(labels))
    transformers.Wav2Vec2ForSequenceClassification(config).eval().save_pretrained(folder)
    transformers.Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0, do_normalize=True,
                                          return_attention_mask=True).save_pretrained(folder)
    return folder


def _onnx_mos(folder: Path) -> Path:
    """model.onnx: 1 + 4 × mean(|x|), a MOS-shaped [1, T] → [1] graph."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Abs", ["wav"], ["a"]), helper.make_node("ReduceMean", ["a"], ["m"], keepdims=0),
         helper.make_node("Mul", ["m", "four"], ["s"]), helper.make_node("Add", ["s", "one"], ["mos"])],
        "mos", [helper.make_tensor_value_info("wav", TensorProto.FLOAT, [1, None])],
        [helper.make_tensor_value_info("mos", TensorProto.FLOAT, [])],
        [helper.make_tensor("four", TensorProto.FLOAT, [], [4.0]), helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])],
    )
    folder.mkdir(parents=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), folder / "model.onnx")
    return folder


def test_local_dialect_emotion_and_mos_folders(tiny_corpus, tmp_path):
    import torch
    import transformers
    from sdscore.protocols.naturalness.scorer import NaturalnessScorer

    dialect = _hf_classifier(tmp_path / "voxlect", list(DIALECT_MERGE))
    emotion = _hf_classifier(tmp_path / "avd", ["valence", "Arousal", "dominance"], regression=True)
    mos = _onnx_mos(tmp_path / "mos")
    manifest = read_manifest(tiny_corpus / "naturalness.parquet").head(2).with_columns(
        pl.lit(None, pl.String).alias("error"))
    out = NaturalnessScorer(dialect_dir=str(dialect), emotion_dir=str(emotion), mos_dir=str(mos), jobs=1)(manifest)
    assert out["error"].null_count() == 2

    row, source = out.row(0, named=True), manifest.row(0, named=True)
    answer = load(source["answer_audio_path"], 16000)
    question_turn = load(source["audio_path"], 16000, offset=source["context_end_time"])  # the question turn only
    model = transformers.AutoModelForAudioClassification.from_pretrained(dialect)
    fe = transformers.AutoFeatureExtractor.from_pretrained(dialect)
    with torch.inference_mode():
        probs = model(**fe([answer], sampling_rate=16000, return_tensors="pt")).logits.softmax(-1)[0].double().numpy()
    merged = {g: 0.0 for g in DIALECT_GROUPS}
    for label, p in zip(DIALECT_MERGE, probs):
        if DIALECT_MERGE[label] is not None:
            merged[DIALECT_MERGE[label]] += p
    np.testing.assert_allclose(row["dialect_answer"], np.log([merged[g] for g in DIALECT_GROUPS]), atol=1e-5)
    assert row["dialect_answer_label"] == max(merged, key=merged.get)
    assert len(row["dialect_question"]) == 11

    model = transformers.AutoModelForAudioClassification.from_pretrained(emotion)
    with torch.inference_mode():
        raw = model(**fe([question_turn], sampling_rate=16000, return_tensors="pt")).logits[0].double().numpy()
    assert row["valence_question"] == pytest.approx(raw[0], abs=1e-5)
    assert row["arousal_question"] == pytest.approx(raw[1], abs=1e-5)
    assert row["dominance_question"] == pytest.approx(raw[2], abs=1e-5)
    assert row["mos_local"] == pytest.approx(1 + 4 * np.abs(answer).mean(), rel=1e-5)
    assert "dialect" not in (row["unavailable"] or "") and "mos_local" not in (row["unavailable"] or "")


def test_a_dialect_folder_with_other_labels_is_refused(tmp_path):
    from sdscore.errors import ModelError
    from sdscore.protocols.naturalness.local_models import DialectProfile

    folder = _hf_classifier(tmp_path / "other", ["us", "uk"])
    with pytest.raises(ModelError, match="Voxlect-English's classes"):
        DialectProfile(folder)


def test_a_killed_worker_costs_one_batch_its_pool_not_the_run():
    """A worker killed mid-batch (OOM killer, kill -9): that batch's items are redone one by one
    in-process by extract(), and the next batch gets a fresh pool."""
    import os
    import signal
    import time

    from sdscore.features.extract import extract
    from sdscore.features.process_extractor import ProcessExtractor

    batch = load_many(sorted(REAL.glob("*.wav"))[:4], 16000)
    ex = ProcessExtractor(["praat_pitch"], jobs=2)
    try:
        expected = extract([ex], batch)
        for pid in list(ex._pool._processes):
            os.kill(pid, signal.SIGKILL)
        for _ in range(600):  # until the pool has seen its workers die: then its submit raises too
            if ex._pool._broken:
                break
            time.sleep(0.05)
        from polars.testing import assert_frame_equal

        assert_frame_equal(extract([ex], batch), expected)  # redone in-process, item by item
        assert ex._pool is None
        assert_frame_equal(extract([ex], batch), expected)  # a new pool
        assert ex._pool is not None
    finally:
        ex.close()


def test_pools_that_cannot_start_fall_back_to_this_process(monkeypatch):
    """Spawned workers that die at start (a __main__ read from stdin cannot be re-imported):
    every batch is still extracted, and after two broken pools the rest runs in-process."""
    from sdscore.features import process_extractor as pe
    from sdscore.features.extract import extract

    batch = load_many(sorted(REAL.glob("*.wav"))[:3], 16000)
    expected = extract([pe.ProcessExtractor(["praat_pitch"], jobs=1)], batch)
    monkeypatch.setattr(pe, "_init_worker", _exit_at_start)
    ex = pe.ProcessExtractor(["praat_pitch"], jobs=2)
    from polars.testing import assert_frame_equal

    try:
        assert_frame_equal(extract([ex], batch), expected)
        with pytest.warns(RuntimeWarning, match="keep dying"):
            assert_frame_equal(extract([ex], batch), expected)
        assert ex.jobs == 1
        assert_frame_equal(extract([ex], batch), expected)
    finally:
        ex.close()


def _exit_at_start(names, options):
    import os

    os._exit(3)
