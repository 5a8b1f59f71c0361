"""Synthetic corpus: schemas, audio, determinism and the synthetic truths each manifest claims."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import librosa
import numpy as np
import polars as pl
import pytest
import soundfile as sf

from sdscore import audio
from sdscore.errors import MissingDependencyError, SdscoreError
from sdscore.manifests import manifest_spec, validate_manifest
from sdscore.metrics.fusion import fuse
from sdscore.metrics.ratings import bradley_terry
from sdscore.synth import build_corpus, clips, render, similarity
from sdscore.synth.battles import SYSTEMS, build_battles
from sdscore.synth.build import CONSISTENCY_10TURN_TABLE, MANIFESTS
from sdscore.synth.degrade import DEGRADATIONS, degrade
from sdscore.synth.judge_items import JUDGE_SYSTEMS
from sdscore.synth.render import Renderer, Utterance
from sdscore.synth.voices import VOICES_BY_ID, Voice, pick

SEED = 3


@pytest.fixture(scope="module")
def corpus(tiny_corpus_build):
    """The session's tiny corpus (seed 3 = SEED, two workers), read only."""
    out, summary = tiny_corpus_build
    assert SEED == 3
    frames = {name: pl.read_parquet(out / filename) for name, filename in MANIFESTS.items()}
    return out, summary, frames


def _referenced(frames: dict[str, pl.DataFrame], extended: pl.DataFrame | None = None) -> list[str]:
    """Every audio path in the manifests (and the 10-turn consistency set when given), gathered column
    by column (independent of build.py)."""
    paths: set[str] = set()
    if extended is not None:
        for column in ("turn_paths", "candidate_paths"):
            paths.update(extended[column].explode().drop_nulls())
        paths.update(extended["reference_path"])
    for side in ("chosen", "rejected"):
        paths.update(frames["reward"][side].explode().struct.field("audio_path"))
    for column in ("turn_paths", "candidate_paths"):
        paths.update(frames["consistency"][column].explode().drop_nulls())
    paths.update(frames["consistency"]["reference_path"])
    for column in ("instruction_path", "audio1_path", "audio2_path"):
        paths.update(frames["judge"][column])
    for column in ("audio_path", "answer_audio_path", "dialogue_path"):
        paths.update(frames["naturalness"][column])
    return sorted(paths)


def _voice(path: str) -> str:
    """Voice id of a TTS render path audio/tts/<voice>/<hash>.wav."""
    parts = path.split("/")
    assert parts[:2] == ["audio", "tts"], path
    return parts[2]


def _median_f0(path: Path) -> float:
    """Median YIN F0 over the loud frames of a clip."""
    x = audio.load(path, sample_rate=16000)
    f0 = librosa.yin(x, fmin=60, fmax=400, sr=16000, frame_length=1024, hop_length=160)
    rms = librosa.feature.rms(y=x, frame_length=1024, hop_length=160)[0][: len(f0)]
    return float(np.median(f0[: len(rms)][rms > 0.1 * rms.max()]))


def _activity(x: np.ndarray, sr: int) -> tuple[np.ndarray, int]:
    """Indices of 5 ms frames within 35 dB of the loudest, and the frame hop."""
    hop = int(sr * 0.005)
    n = len(x) // hop
    rms = np.sqrt(np.mean(x[: n * hop].reshape(n, hop) ** 2, axis=1))
    return np.flatnonzero(rms >= rms.max() * 10 ** (-35 / 20)), hop


def _hashes(out: Path, frames: dict[str, pl.DataFrame]) -> dict[str, str]:
    files = [*MANIFESTS.values(), CONSISTENCY_10TURN_TABLE, "corpus.json",
             *_referenced(frames, pl.read_parquet(out / CONSISTENCY_10TURN_TABLE))]
    return {f: hashlib.sha256((out / f).read_bytes()).hexdigest() for f in files}


def test_manifests_validate_against_schemas(corpus):
    _, _, frames = corpus
    for protocol, frame in frames.items():
        assert frame.schema == manifest_spec(protocol).schema, protocol
        validate_manifest(frame, protocol, MANIFESTS[protocol])
        assert frame.height > 0


def test_counts_and_summary_match_corpus_json(corpus):
    out, summary, frames = corpus
    extended = pl.read_parquet(out / CONSISTENCY_10TURN_TABLE)
    assert json.loads((out / "corpus.json").read_text()) == summary
    assert summary["counts"] == {**{MANIFESTS[p]: f.height for p, f in frames.items()},
                                 CONSISTENCY_10TURN_TABLE: extended.height}
    assert summary["seed"] == SEED and summary["size"] == "tiny"
    assert set(summary["files"]) >= {*MANIFESTS.values(), CONSISTENCY_10TURN_TABLE}
    assert summary["audio_files"] == len(_referenced(frames, extended))
    assert set(summary["voices_used"]) <= {p.split("/")[2] for p in _referenced(frames, extended)}


def test_every_referenced_audio_file_decodes(corpus):
    out, summary, frames = corpus
    paths = _referenced(frames, pl.read_parquet(out / CONSISTENCY_10TURN_TABLE))
    batch = audio.load_many([out / p for p in paths], sample_rate=16000)
    assert batch.errors == [None] * len(paths)
    lengths = np.diff(batch.offsets)
    assert lengths.min() > 0.5 * 16000
    assert np.isfinite(batch.data).all() and np.abs(batch.data).max() <= 1.0
    seconds = sum(sf.info(str(out / p)).duration for p in paths)
    assert seconds == pytest.approx(summary["total_audio_seconds"], abs=0.01)
    rates = {sf.info(str(out / p)).samplerate for p in paths}
    assert {16000, 22050} <= rates


def test_same_seed_is_byte_identical_and_another_seed_differs(corpus, tmp_path):
    out, _, frames = corpus
    again = build_corpus(tmp_path / "again", seed=SEED, size="tiny", workers=1)
    again_frames = {n: pl.read_parquet(tmp_path / "again" / f) for n, f in MANIFESTS.items()}
    assert _hashes(tmp_path / "again", again_frames) == _hashes(out, frames)
    assert again["total_audio_seconds"] > 0

    # another seed's corpus: its TTS renders are content-keyed files (voice + text), so the session's are
    # copied in and only the texts this seed draws anew are rendered (again's renders above were not)
    shutil.copytree(out / "audio" / "tts", tmp_path / "other" / "audio" / "tts")
    other = build_corpus(tmp_path / "other", seed=SEED + 1, size="tiny")
    other_frames = {n: pl.read_parquet(tmp_path / "other" / f) for n, f in MANIFESTS.items()}
    for name in MANIFESTS:
        assert not other_frames[name].equals(frames[name]), name
    assert set(_referenced(other_frames)) != set(_referenced(frames))
    assert other["seed"] == SEED + 1


def test_modality_pairs_share_text_and_differ_in_audio(corpus):
    _, _, frames = corpus
    modality = frames["reward"].filter(pl.col("criterion") == "modality")
    assert modality.height > 0
    for row in modality.iter_rows(named=True):
        chosen, rejected = row["chosen"], row["rejected"]
        n = len(chosen)
        assert n % 2 == 0 and 2 <= n <= 6
        assert [t["role"] for t in chosen] == ["user", "assistant"] * (n // 2)
        assert [t["text"] for t in chosen] == [t["text"] for t in rejected]
        changed = [i for i in range(n) if chosen[i]["audio_path"] != rejected[i]["audio_path"]]
        kind, scope = row["category"].split("/")
        assert changed == ([n - 1] if scope == "final-turn" else list(range(n)))
        assert all(VOICES_BY_ID[_voice(t["audio_path"])].quality == "natural" for t in chosen)
        if row["subset"] == "synthetic-natural-vs-robotic":
            assert kind == "robotic-voice"
            for i in changed:
                voice, natural = (VOICES_BY_ID[_voice(t[i]["audio_path"])] for t in (rejected, chosen))
                assert voice.quality == "robotic" and voice.gender == natural.gender
        else:
            assert row["subset"] == "synthetic-degraded" and kind in DEGRADATIONS
            assert all(rejected[i]["audio_path"].startswith(f"audio/degraded/{kind}/") for i in changed)


def test_colloquial_pairs_use_one_voice_per_role_and_spoken_text(corpus):
    _, _, frames = corpus
    colloquial = frames["reward"].filter(pl.col("criterion") == "colloquialness")
    assert colloquial.height > 0
    for row in colloquial.iter_rows(named=True):
        chosen, rejected = row["chosen"], row["rejected"]
        assert [_voice(t["audio_path"]) for t in chosen] == [_voice(t["audio_path"]) for t in rejected]
        assert len({_voice(t["audio_path"]) for t in chosen if t["role"] == "assistant"}) == 1
        assert [t["role"] for t in chosen] == [t["role"] for t in rejected]
        assert all(c["text"] != r["text"] for c, r in zip(chosen, rejected))
        spoken = " ".join(t["text"] for t in chosen).lower()
        assert any(marker in spoken for marker in ("um", "uh", "like", "you know", "'"))


def test_s2_turn_is_other_gender_and_s3_the_similar_voice(corpus):
    out, summary, frames = corpus
    detection = frames["consistency"].filter(pl.col("task") == "detection")
    similar = summary["truth"]["consistency"]["similar_voice"]
    by_base = {}
    for row in detection.iter_rows(named=True):
        by_base.setdefault(row["instance_id"].rsplit("-", 1)[0], {})[row["scenario"]] = row
    assert by_base and all(set(r) == {"S1", "S2", "S3"} for r in by_base.values())
    for rows in by_base.values():
        s1 = rows["S1"]
        target = VOICES_BY_ID[s1["speaker_id"]]
        assert len(s1["turn_paths"]) == 5 and s1["true_turns"] == []
        assert len(set(s1["turn_paths"])) == 5 and {_voice(p) for p in s1["turn_paths"]} == {target.id}
        for scenario in ("S2", "S3"):
            row = rows[scenario]
            (k,) = row["true_turns"]
            assert [i for i, (a, b) in enumerate(zip(s1["turn_paths"], row["turn_paths"])) if a != b] == [k]
            voice = VOICES_BY_ID[_voice(row["turn_paths"][k])]
            assert voice.identity != target.identity
            if scenario == "S3":
                assert voice.gender == target.gender and voice.id == similar[target.id]["voice"]
            else:
                assert voice.gender != target.gender
                target_f0 = np.median([_median_f0(out / p) for i, p in enumerate(s1["turn_paths"]) if i != k])
                altered_f0 = _median_f0(out / row["turn_paths"][k])
                assert abs(np.log(altered_f0 / target_f0)) > np.log(1.25), (target.id, voice.id)
        assert sf.info(str(out / s1["reference_path"])).duration >= 3.0


def test_discrimination_rows_offer_the_three_scenario_versions(corpus):
    _, _, frames = corpus
    consistency = frames["consistency"]
    discrimination = consistency.filter(pl.col("task") == "discrimination")
    assert discrimination.height == consistency.height // 4
    for row in discrimination.iter_rows(named=True):
        base = row["instance_id"].removesuffix("-disc")
        versions = {
            r["scenario"]: r["turn_paths"][row["masked_turn"]]
            for r in consistency.filter(pl.col("instance_id").str.starts_with(base + "-S")).iter_rows(named=True)
        }
        assert sorted(row["candidate_scenarios"]) == ["S1", "S2", "S3"]
        assert dict(zip(row["candidate_scenarios"], row["candidate_paths"])) == versions
        assert len(row["turn_paths"]) == 4 and versions["S1"] not in row["turn_paths"]


def test_naturalness_gaps_and_latencies_match_the_audio(corpus):
    out, summary, frames = corpus
    latency = summary["truth"]["naturalness"]["answer_latency_s"]
    speech_gap = summary["truth"]["naturalness"]["speech_gap_s"]
    questions: dict[str, set] = {}
    for row in frames["naturalness"].iter_rows(named=True):
        questions.setdefault(row["audio_path"], set()).add(row["system"])
        gap = speech_gap[row["item_id"]]
        assert -0.9 <= gap <= 3.2
        assert row["answer_start_time"] >= 0.05 or row["system"] == "human"  # the half-duplex model never interrupts
        # SPEARBench's answer_start_time: the answer file's start, its speech `latency` later
        assert row["answer_start_time"] == pytest.approx(gap - latency[row["item_id"]], abs=1.5e-3)
        assert row["transcript_question"].endswith("?")
        dialogue, sr = sf.read(str(out / row["dialogue_path"]))
        assert dialogue.shape[1] == 2 and sr == 16000
        active0, hop = _activity(dialogue[:, 0], sr)
        question_start, question_end = active0[0] * hop, (active0[-1] + 1) * hop
        active1, _ = _activity(dialogue[question_start:, 1], sr)
        answer_onset = question_start + active1[0] * hop
        assert (answer_onset - question_end) / sr == pytest.approx(gap, abs=0.02)
        assert question_end / sr == pytest.approx(row["question_end_time"], abs=0.02)

        answer, answer_sr = sf.read(str(out / row["answer_audio_path"]))
        onset, answer_hop = _activity(answer, answer_sr)
        assert onset[0] * answer_hop / answer_sr == pytest.approx(latency[row["item_id"]], abs=0.02)
        assert len(answer) / answer_sr == pytest.approx(row["answer_duration"], abs=1e-3)

        question = audio.load(out / row["audio_path"], sample_rate=16000)
        assert len(question) / 16000 == pytest.approx(row["question_end_time"], abs=1e-3)
        assert row["context_end_time"] < row["question_end_time"]
    assert all(systems == {"human", "halfduplex-robot"} for systems in questions.values())  # paired


def test_judge_labels_follow_the_construction(corpus):
    _, _, frames = corpus
    systems = {s.name: s for s in JUDGE_SYSTEMS}
    for row in frames["judge"].iter_rows(named=True):
        assert row["model_a"] != row["model_b"]
        assert row["overall"] == fuse(row["content"], row["voice_quality"], row["paralinguistics"])
        for position, model, path in (("1", row["model_a"], row["audio1_path"]), ("2", row["model_b"], row["audio2_path"])):
            robotic = VOICES_BY_ID[systems[model].voice].quality == "robotic"
            degraded = path.startswith("audio/degraded/")
            if robotic or degraded:
                assert row["voice_quality"] not in ("both_good", position)
            styled = "+" in path.split("/")[2] if path.startswith("audio/tts/") else None
            if styled is not None:
                assert (row["paralinguistics"] in ("both_good", position)) == styled


def test_battles_swaps_and_biases(corpus):
    _, summary, frames = corpus
    battles = frames["arena"]
    assert battles["winner"].is_in(["model_a", "model_b", "tie", "tie (bothbad)"]).all()
    swapped = battles.group_by("prompt_id").agg(pl.all()).filter(pl.col("battle_id").list.len() == 2)
    assert swapped.height > 0
    for row in swapped.iter_rows(named=True):
        assert row["model_a"] == row["model_b"][::-1] and row["length_a"] == row["length_b"][::-1]
    assert set(summary["truth"]["arena"]["theta"]) == set(SYSTEMS)

    large, truth = build_battles(np.random.default_rng(0), 20000)
    decisive = large.filter(pl.col("winner").is_in(["model_a", "model_b"]))
    first_wins = (decisive["winner"] == "model_a").mean()
    assert 0.53 < first_wins < 0.62  # the position bias of 0.25 log-odds, diluted by the rest
    longer_wins = ((decisive["length_a"] > decisive["length_b"]) == (decisive["winner"] == "model_a")).mean()
    assert longer_wins > 0.6
    ratings = bradley_terry(large)
    fitted = np.array([ratings[s] for s in SYSTEMS]) * np.log(10) / 400
    expected = np.array([truth["effective_theta"][s] for s in SYSTEMS])
    assert list(ratings) == sorted(SYSTEMS, key=truth["effective_theta"].get, reverse=True)
    assert np.corrcoef(fitted, expected)[0, 1] > 0.99
    # Ties (9 %) count as half wins, which shrinks the fitted spread.
    assert 0.7 < np.ptp(fitted) / np.ptp(expected) < 0.95


def test_monotone_degradation_flattens_pitch(corpus):
    out, _, frames = corpus
    path = out / frames["consistency"]["reference_path"][0]
    x = audio.load(path, sample_rate=16000).astype(np.float64)
    y = degrade(x, 16000, "monotone", np.random.default_rng(0))
    f0x, vx, _ = librosa.pyin(x, fmin=60, fmax=400, sr=16000, frame_length=1024)
    f0y, vy, _ = librosa.pyin(y, fmin=60, fmax=400, sr=16000, frame_length=1024)
    assert np.nanstd(f0y[vy]) < 0.5 * np.nanstd(f0x[vx])
    with pytest.raises(ValueError, match="unknown degradation 'reverb'"):
        degrade(x, 16000, "reverb", np.random.default_rng(0))


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown corpus size 'huge'"):
        build_corpus(tmp_path, size="huge")
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        build_corpus(tmp_path, seed=-1)
    with pytest.raises(ValueError, match="workers must be >= 1"):
        build_corpus(tmp_path, size="tiny", workers=0)


def test_missing_engines_are_named(tmp_path, monkeypatch):
    monkeypatch.setattr(render.shutil, "which", lambda name: None)
    with pytest.raises(MissingDependencyError, match="TTS engines not found on PATH: flite, espeak-ng, festival"):
        Renderer(tmp_path)


def test_engine_failures_name_the_voice(tmp_path):
    renderer = Renderer(tmp_path, workers=1)
    bad = Voice("bad", "espeak", "nosuchvoice", "male", "robotic", "bad")
    with pytest.raises(SdscoreError, match=r"espeak-ng voice 'bad' failed \(exit 1\)"):
        renderer.render([Utterance(bad, "hello")], "test")
    with pytest.raises(SdscoreError, match="silent render for voice 'flite-slt'"):
        renderer.render([Utterance(VOICES_BY_ID["flite-slt"], " ")], "test")
    assert not list(tmp_path.rglob("*.wav"))


def test_voice_and_helper_errors():
    with pytest.raises(ValueError, match="unknown TTS engine 'sapi'"):
        Voice("x", "sapi", "y", "male", "robotic", "x")
    with pytest.raises(ValueError, match="unknown style 'whisper'"):
        VOICES_BY_ID["flite-slt"].styled("whisper")
    with pytest.raises(ValueError, match="voice 'hts-slt' cannot change its pitch"):
        VOICES_BY_ID["hts-slt"].styled("high")
    with pytest.raises(ValueError, match="holds no speech"):
        clips.trim(np.zeros(16000), 16000)
    slt = VOICES_BY_ID["flite-slt"]
    with pytest.raises(ValueError, match="no voice left to pick"):
        pick(np.random.default_rng(0), [slt], not_identity=[slt.identity])
    with pytest.raises(ValueError, match="'flite-slt' has no same-gender voice of another speaker"):
        similarity.most_similar([slt, VOICES_BY_ID["hts-slt"]], np.eye(2))
