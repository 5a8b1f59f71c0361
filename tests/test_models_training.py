"""Reward losses, training (best checkpoint by eval loss, reload) and head-only fitting."""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest
import soundfile as sf
import torch

from sdscore.corpus import REWARD_PAIRS
from sdscore.errors import AudioError, ModelError
from sdscore.manifests import validate_manifest
from sdscore.models.compact import CompactConfig, CompactRewardModel
from sdscore.models.head_only import HeadTrainConfig, save_head_only, train_head
from sdscore.models.head_only_files import HEAD_ONLY_CONFIG
from sdscore.models.loading import load_head_only, load_reward_model
from sdscore.models.losses import bradley_terry_loss, pairwise_correct
from sdscore.output_paths import MARKER, OutputPathError
from sdscore.models.training import LOG_FILE, TrainConfig, cosine_schedule, hash_split, prepare_pairs, train_reward

SR = 16000
TINY = CompactConfig(n_mels=16, frames_per_token=8, d_model=32, n_layers=1, n_heads=2, ff_size=64, dropout=0.0)


# --- losses ---------------------------------------------------------------------------------


def _reference_loss(c, r, m, lam):
    d = c - r - np.nan_to_num(m, nan=0.0)
    return np.mean(np.logaddexp(0.0, -d)) + lam * np.mean((c + r) ** 2)


def test_bradley_terry_matches_numpy_reference_with_margins():
    rng = np.random.default_rng(0)
    c, r = rng.normal(size=9), rng.normal(size=9)
    m = rng.uniform(0, 1, size=9)
    m[[1, 4]] = np.nan  # pairs without a margin count as margin 0
    for lam in (0.01, 0.5):
        got = bradley_terry_loss(torch.tensor(c), torch.tensor(r), torch.tensor(m), center_lambda=lam)
        assert float(got) == pytest.approx(_reference_loss(c, r, m, lam), rel=1e-12)
    got = bradley_terry_loss(torch.tensor(c), torch.tensor(r), None, center_lambda=0.0)
    assert float(got) == pytest.approx(np.mean(np.logaddexp(0.0, -(c - r))), rel=1e-12)
    # hand value: one pair with equal rewards → log 2, centering (2·1)^2·λ
    one = bradley_terry_loss(torch.tensor([1.0]), torch.tensor([1.0]), center_lambda=0.25)
    assert float(one) == pytest.approx(math.log(2) + 0.25 * 4.0)


def test_bradley_terry_shape_errors_and_ties():
    with pytest.raises(ValueError, match=r"must both be \[N\], got \(3,\) and \(2,\)"):
        bradley_terry_loss(torch.zeros(3), torch.zeros(2))
    with pytest.raises(ValueError, match=r"margin must be \[N\] = \(3,\), got \(2,\)"):
        bradley_terry_loss(torch.zeros(3), torch.zeros(3), torch.zeros(2))
    assert pairwise_correct(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 0.0])).tolist() == [True, False]


def test_cosine_schedule_warms_up_then_decays_to_zero():
    assert cosine_schedule(0, 100, 10) == pytest.approx(0.1)
    assert cosine_schedule(9, 100, 10) == pytest.approx(1.0)
    assert cosine_schedule(10, 100, 10) == pytest.approx(1.0)
    assert cosine_schedule(55, 100, 10) == pytest.approx(0.5)
    assert cosine_schedule(100, 100, 10) == pytest.approx(0.0)


# --- a tiny separable task: chosen ends with a tone, rejected with noise ----------------------


def _write(path, x):
    sf.write(path, x, SR, subtype="FLOAT")
    return str(path)


def make_pairs(folder, n: int, seed: int, prefix: str = "p") -> pl.DataFrame:
    """n pairs; both episodes share a text user turn; the assistant audio is a tone (chosen) or noise."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        seconds = rng.uniform(0.3, 0.6)
        t = np.arange(int(seconds * SR)) / SR
        good = 0.5 * np.sin(2 * np.pi * rng.uniform(200, 600) * t) + 0.005 * rng.standard_normal(t.size)
        bad = 0.2 * rng.standard_normal(t.size)
        user = {"role": "user", "text": f"question {i}", "audio_path": None}
        rows.append({
            "pair_id": f"{prefix}-{i:03d}", "criterion": "modality", "subset": "tone" if i % 2 else "tone-b",
            "category": None, "source": "test",
            "chosen": [user, {"role": "assistant", "text": "answer", "audio_path": _write(folder / f"{prefix}{i}c.wav", good)}],
            "rejected": [user, {"role": "assistant", "text": "answer", "audio_path": _write(folder / f"{prefix}{i}r.wav", bad)}],
            "margin": 0.5 if i % 3 == 0 else None,
        })
    return validate_manifest(pl.DataFrame(rows, schema=REWARD_PAIRS), "reward")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("pairs")
    return make_pairs(root / "train", 32, 0), make_pairs(root / "eval", 12, 1, "e")


@pytest.fixture(scope="module")
def trained(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "model"
    model = CompactRewardModel.from_config(TINY, seed=0)
    config = TrainConfig(lr=3e-3, batch_size=8, epochs=6, eval_every=4, card={"data": "tone vs noise"})
    calls = []
    summary = train_reward(model, data[0], data[1], out, config, progress=lambda *a: calls.append(a))
    return model, summary, out, calls


def _scores(model, pairs):
    data = prepare_pairs(model, pairs)
    with torch.no_grad():
        return model(model.collate(data.chosen)), model(model.collate(data.rejected))


def test_training_separates_and_loss_decreases(trained):
    model, summary, out, calls = trained
    log = json.loads((out / LOG_FILE).read_text())
    losses = [row["loss"] for row in log["steps"]]
    assert len(losses) == summary["steps"] == 6 * 4
    assert np.mean(losses[-4:]) < np.mean(losses[:4])
    assert summary["best_eval_accuracy"] == 1.0
    assert set(summary["eval_by_subset"]) == {"tone", "tone-b"}
    assert ("train: steps", 24, 24) in calls and any(c[0] == "train: prepare" for c in calls)


def test_best_checkpoint_has_the_lowest_eval_loss(trained):
    model, summary, out, _ = trained
    log = json.loads((out / LOG_FILE).read_text())
    rows = log["eval"]
    assert [r["step"] for r in rows] == [4, 8, 12, 16, 20, 24]
    best = min(rows, key=lambda r: r["loss"])
    assert summary["best_step"] == best["step"] == log["best"]["step"]
    card = json.loads((out / "sdscore_reward.json").read_text())["card"]
    assert card["data"] == "tone vs noise"
    assert card["training"]["step"] == best["step"]
    assert card["training"]["eval_loss"] == pytest.approx(best["loss"])


def test_saved_model_reloads_with_the_same_scores(trained, data):
    model, summary, out, _ = trained
    loaded = load_reward_model(out)
    for ours, theirs in zip(_scores(loaded, data[1]), _scores(model, data[1])):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)
    chosen, rejected = _scores(loaded, data[1])
    assert bool((chosen > rejected).all())
    assert not any(p.name.startswith(".") for p in out.parent.iterdir())  # no temp folders left


def test_eval_fraction_splits_by_pair_id_hash(data, tmp_path):
    train, held = hash_split(data[0], 0.25)
    assert train.height + held.height == data[0].height and held.height > 0
    again_train, again_held = hash_split(data[0].reverse(), 0.25)
    assert sorted(again_held["pair_id"]) == sorted(held["pair_id"])
    model = CompactRewardModel.from_config(TINY)
    summary = train_reward(model, data[0], None, tmp_path / "m", TrainConfig(batch_size=16, max_steps=2, eval_fraction=0.25))
    assert summary["eval_pairs"] == held.height and summary["train_pairs"] == train.height
    no_eval = train_reward(model, data[0], None, tmp_path / "n", TrainConfig(batch_size=16, max_steps=1, eval_fraction=0.0))
    assert no_eval["eval_pairs"] == 0 and no_eval["best_eval_loss"] is None
    assert (tmp_path / "n" / "model.safetensors").is_file()


def test_bad_audio_names_the_pair(data, tmp_path):
    pairs = data[0].head(4)
    broken = tmp_path / "broken.wav"
    broken.write_bytes(b"RIFF....not a wave")
    rows = pairs.to_dicts()
    rows[2]["rejected"][1]["audio_path"] = str(broken)
    with pytest.raises(AudioError, match=r"pair p-002 \(p-002/rejected\): .*broken\.wav"):
        train_reward(CompactRewardModel.from_config(TINY), pl.DataFrame(rows, schema=REWARD_PAIRS), None,
                     tmp_path / "m", TrainConfig(max_steps=1, eval_fraction=0.0))


def test_refuses_to_replace_a_foreign_folder(data, tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(OutputPathError, match="sdscore did not write"):
        train_reward(CompactRewardModel.from_config(TINY), data[0], None, tmp_path, TrainConfig(max_steps=1))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]


def test_replaces_its_own_folder_only_with_overwrite_and_never_a_foreign_file(data, tmp_path):
    out = tmp_path / "m"
    config = TrainConfig(batch_size=16, max_steps=1, eval_fraction=0.0)
    train_reward(CompactRewardModel.from_config(TINY), data[0], None, out, config)
    assert (out / MARKER).is_file()
    with pytest.raises(OutputPathError, match="pass --overwrite"):
        train_reward(CompactRewardModel.from_config(TINY), data[0], None, out, config)
    train_reward(CompactRewardModel.from_config(TINY), data[0], None, out, config, overwrite=True)
    # a model folder that also holds the user's file (an sdscore model file is not enough): kept whole
    (out / "notes.txt").write_text("mine")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(OutputPathError, match="never replaced, even with --overwrite"):
        train_reward(CompactRewardModel.from_config(TINY), data[0], None, out, config, overwrite=True)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        TrainConfig(batch_size=0)


# --- head only ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def base(data, tmp_path_factory):
    """A random-weight base model on disk and its mean-pooled states of the tone/noise pairs."""
    folder = tmp_path_factory.mktemp("base") / "base"
    model = CompactRewardModel.from_config(TINY, seed=3)
    model.save_pretrained(folder)
    states = {}
    for name, pairs in (("train", data[0]), ("eval", data[1])):
        prepared = prepare_pairs(model, pairs)
        with torch.no_grad():
            states[name] = (model.pooled(model.collate(prepared.chosen)).numpy(),
                            model.pooled(model.collate(prepared.rejected)).numpy())
    return folder, model, states


def test_head_only_recovers_a_separable_direction(base, data, tmp_path):
    folder, model, states = base
    history = []
    head = train_head(*states["train"], None, *states["eval"], None, pooling="mean",
                      config=HeadTrainConfig(epochs=60, lr=5e-2), history=history)
    assert set(head) == {"score_head.weight"} and head["score_head.weight"].shape == (1, TINY.d_model)
    assert history[-1]["eval_accuracy"] == 1.0
    out = save_head_only(tmp_path / "head", folder.resolve(), "compact", "mean", head, card={"note": "probe"})
    meta = json.loads((out / HEAD_ONLY_CONFIG).read_text())
    assert meta["hidden_size"] == TINY.d_model and meta["pooling"] == "mean" and meta["kind"] == "compact"
    loaded = load_reward_model(out)
    torch.testing.assert_close(loaded.score_head.weight, head["score_head.weight"])
    with torch.no_grad():
        ec, er = (torch.from_numpy(s) for s in states["eval"])
        expected = (ec @ head["score_head.weight"][0], er @ head["score_head.weight"][0])
    for ours, theirs in zip(_scores(loaded, data[1]), expected):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)


def test_head_only_relative_base_and_pooling_switch(base, tmp_path):
    folder, model, states = base
    head = train_head(*states["train"], config=HeadTrainConfig(epochs=5))
    out = tmp_path / "h"
    save_head_only(out, "../base_link", "compact", "last", head)
    (tmp_path / "base_link").symlink_to(folder, target_is_directory=True)
    loaded = load_head_only(out)
    assert loaded.pooler.kind == "last"  # a parameter-free pooler replaces the base's mean pooler


def test_head_only_errors(base, tmp_path):
    folder, model, states = base
    with pytest.raises(ValueError, match="cannot fit a 'attn'-pooled head from 'mean'-pooled states"):
        train_head(*states["train"], pooling="attn", states_pooling="mean")
    with pytest.raises(ValueError, match=r"pooled_chosen must be pooled states \[N, H\]"):
        train_head(np.zeros(3), np.zeros(3))
    with pytest.raises(ValueError, match="differ in shape"):
        train_head(np.zeros((3, 4)), np.zeros((2, 4)))
    head = {"score_head.weight": torch.zeros(1, TINY.d_model)}
    save_head_only(tmp_path / "attn", folder, "compact", "attn", head)
    with pytest.raises(ModelError, match="no 'attn' pooler weights to use"):
        load_reward_model(tmp_path / "attn")
    save_head_only(tmp_path / "wide", folder, "compact", "mean", {"score_head.weight": torch.zeros(1, 7)})
    with pytest.raises(ModelError, match="head has hidden_size 7, base model .* has 32"):
        load_reward_model(tmp_path / "wide")
    save_head_only(tmp_path / "gone", tmp_path / "missing", "compact", "mean", head)
    with pytest.raises(ModelError, match="base model .* is not a directory"):
        load_reward_model(tmp_path / "gone")
    save_head_only(tmp_path / "bias", folder, "compact", "mean", {**head, "score_head.bias": torch.zeros(1)})
    with pytest.raises(ModelError, match=r"weights \['score_head.bias'\] do not fit a compact head"):
        load_reward_model(tmp_path / "bias")
    (tmp_path / "bias" / "head.safetensors").write_bytes(b"junk")
    with pytest.raises(ModelError, match="corrupt safetensors file"):
        load_reward_model(tmp_path / "bias")
    (tmp_path / "bias" / HEAD_ONLY_CONFIG).write_text("{")
    with pytest.raises(ModelError, match="corrupt JSON"):
        load_reward_model(tmp_path / "bias")


def test_divergence_is_reported(data, tmp_path):
    with pytest.raises(FloatingPointError, match="training diverged at step .*: loss is"):
        train_reward(CompactRewardModel.from_config(TINY), data[0].head(8), None, tmp_path / "m",
                     TrainConfig(lr=1e30, warmup_ratio=0.0, batch_size=4, max_steps=4, eval_fraction=0.0))


# --- the synthetic corpus's dialogue split (held-out accuracy of the demo model) ---------------


def test_reward_dialogue_split_is_disjoint_and_fixed(tmp_path):
    from sdscore.synth import build_corpus
    from sdscore.synth.dialogues import DIALOGUES
    from sdscore.synth.reward_pairs import reward_dialogues

    train, held = reward_dialogues("train"), reward_dialogues("heldout")
    assert reward_dialogues(None) == DIALOGUES
    assert {d.dialogue_id for d in train}.isdisjoint(d.dialogue_id for d in held)
    assert len(train) + len(held) == len(DIALOGUES)
    assert held == DIALOGUES[::5]
    with pytest.raises(ValueError, match="unknown reward dialogue split 'test'"):
        reward_dialogues("test")
    with pytest.raises(ValueError, match="unknown reward dialogue split 'dev'"):
        build_corpus(tmp_path / "c", size="tiny", reward_split="dev")
    assert not (tmp_path / "c").exists()  # refused before anything was written
