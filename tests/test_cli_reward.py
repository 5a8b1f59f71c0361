"""`sdscore score/eval reward` end to end: tiny SDiaReward- and TRL-layout checkpoints through the CLI
give the scores of a direct forward pass; resume after an interruption; eval with the plot."""

from __future__ import annotations

import functools
import json

import numpy as np
import polars as pl
import pytest
import soundfile as sf
import torch
import transformers
from test_models_sdiareward import _AudioTextProcessor, _authors_inputs, _authors_scores
from test_models_trl import _hf_scores
from tiny_reward_models import build_tiny_sdiareward, build_tiny_trl

import sdscore.protocols.reward.scorer as reward_scoring
from sdscore.cli import main
from sdscore.protocols import registry
from sdscore.corpus import write_manifest
from sdscore.corpus.schemas import REWARD_PAIRS
from sdscore.errors import SdscoreError
from sdscore.models.episodes import Episode, Turn
from sdscore.models.loading import load_reward_model

SR = 16000
N_PAIRS = 5


def _clip(path, seconds: float, freq: float) -> str:
    t = np.arange(int(seconds * SR)) / SR
    sf.write(path, (0.2 * np.sin(2 * np.pi * freq * t)).astype(np.float32), SR, subtype="FLOAT")
    return path.name


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    """N_PAIRS pairs of 2-3 turn episodes, every turn with text and a clip (relative paths)."""
    folder = tmp_path_factory.mktemp("pairs")
    rng = np.random.default_rng(3)
    rows = []
    for i in range(N_PAIRS):
        sides = {}
        for side in ("chosen", "rejected"):
            turns = []
            for t in range(int(rng.integers(2, 4))):
                name = _clip(folder / f"{i}-{side}-{t}.wav", float(rng.uniform(0.2, 1.2)), float(rng.uniform(150, 400)))
                turns.append({"role": ("user", "assistant")[t % 2], "text": f"turn {t} of {side} {i}", "audio_path": name})
            sides[side] = turns
        rows.append({"pair_id": f"p{i}", "criterion": "modality", "subset": "wild", "category": "c",
                     "source": "s", "margin": None, **sides})
    path = folder / "pairs.parquet"
    write_manifest(pl.DataFrame(rows, schema=REWARD_PAIRS), path)
    return path


def _episodes(manifest_path) -> list[Episode]:
    """Chosen then rejected episodes of the manifest, audio paths resolved."""
    frame = pl.read_parquet(manifest_path)
    out = []
    for side in ("chosen", "rejected"):
        for row in frame[side].to_list():
            out.append(Episode(tuple(Turn(t["role"], t["text"], str(manifest_path.parent / t["audio_path"])) for t in row)))
    return out


def _cli_scores(out) -> torch.Tensor:
    results = pl.read_parquet(out)
    assert results["error"].null_count() == N_PAIRS
    return torch.tensor(results["chosen_reward"].to_list() + results["rejected_reward"].to_list())


def test_sdiareward_checkpoint_through_cli_equals_direct_forward(manifest, tmp_path):
    ckpt, base = build_tiny_sdiareward(tmp_path / "ckpt", tmp_path / "base", pooling="mean", seed=4)
    out = tmp_path / "res.parquet"
    code = main(["score", "reward", str(manifest), "--model", str(ckpt), "--base", str(base), "--out", str(out),
                 "--max-batch", "3"])
    assert code == 0
    template = json.loads((base / "chat_template.json").read_text())["chat_template"]
    processor = _AudioTextProcessor(
        image_processor=None, video_processor=None, chat_template=template,
        feature_extractor=transformers.WhisperFeatureExtractor.from_pretrained(base),
        tokenizer=transformers.AutoTokenizer.from_pretrained(base),
    )
    episodes = _episodes(manifest)
    inputs = [_authors_inputs(processor, e, [sf.read(t.audio, dtype="float32")[0] for t in e.turns]) for e in episodes]
    expected = _authors_scores(ckpt, base, inputs, "mean").float()
    torch.testing.assert_close(_cli_scores(out).float(), expected, atol=1e-5, rtol=0)


def test_trl_checkpoint_through_cli_equals_direct_forward(manifest, tmp_path):
    folder = build_tiny_trl(tmp_path / "trl", seed=2)
    out = tmp_path / "res.parquet"
    assert main(["score", "reward", str(manifest), "--model", str(folder), "--out", str(out)]) == 0
    expected = _hf_scores(folder, _episodes(manifest))
    torch.testing.assert_close(_cli_scores(out).float(), expected.float(), atol=1e-5, rtol=0)


def test_interrupted_run_resumes_to_the_same_results(manifest, tmp_path, monkeypatch):
    folder = build_tiny_trl(tmp_path / "trl", seed=2)
    score = functools.partial(registry.score, "reward", manifest, model=folder, window_rows=2)
    score(tmp_path / "full.parquet")
    full = pl.read_parquet(tmp_path / "full.parquet")
    out = tmp_path / "res.parquet"
    real, calls = reward_scoring.score_pairs_frame, []

    def dies_on_second_shard(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(reward_scoring, "score_pairs_frame", dies_on_second_shard)
    with pytest.raises(KeyboardInterrupt):
        score(out)
    monkeypatch.setattr(reward_scoring, "score_pairs_frame", real)
    assert not out.exists() and sorted(p.name for p in (tmp_path / "res.parquet.parts").iterdir()) == [
        "part-000000.parquet", "run.json"]
    with pytest.raises(SdscoreError, match="pass --resume"):
        score(out)
    with pytest.raises(SdscoreError, match=r"shard_rows \(2 then, 3 now\)"):
        registry.score("reward", manifest, out, model=folder, window_rows=3, resume=True)
    with pytest.raises(SdscoreError, match=r"settings.max_batch \(16 then, 4 now\)"):
        score(out, max_batch=4, resume=True)
    summary = registry.score("reward", manifest, out, model=folder, resume=True)  # window from the run record
    assert (summary.rows, summary.resumed_shards, summary.scored_shards) == (N_PAIRS, 1, 2)
    assert pl.read_parquet(out).equals(full)
    assert not (tmp_path / "res.parquet.parts").exists()


def test_eval_reward_writes_metrics_and_plot(manifest, tmp_path):
    folder = build_tiny_trl(tmp_path / "trl", seed=2)
    out = tmp_path / "res.parquet"
    assert main(["score", "reward", str(manifest), "--model", str(folder), "--out", str(out), "--store-pooled"]) == 0
    results = pl.read_parquet(out)
    width = load_reward_model(folder).hidden_size
    assert results.schema["chosen_pooled"] == pl.Array(pl.Float32, width)
    assert np.isfinite(np.stack(results["rejected_pooled"].to_numpy())).all()
    metrics_path, png = tmp_path / "m.json", tmp_path / "r.png"
    assert main(["eval", "reward", str(out), "--out", str(metrics_path), "--plot", str(png)]) == 0
    metrics = json.loads(metrics_path.read_text())
    assert metrics["subsets"]["wild"]["n"] == N_PAIRS
    assert metrics["modality_micro"] == pytest.approx(float((results["chosen_reward"] > results["rejected_reward"]).mean()))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_score_reward_errors_are_reported(manifest, tmp_path, capsys):
    assert main(["score", "reward", str(manifest), "--model", str(tmp_path), "--out", str(tmp_path / "o.parquet")]) == 2
    assert "no reward model layout recognised" in " ".join(capsys.readouterr().err.split())  # wrapped to the terminal width


def test_head_only_training_from_stored_or_computed_states(manifest, tmp_path):
    from safetensors.torch import load_file

    base = build_tiny_trl(tmp_path / "trl", seed=2)
    results = tmp_path / "res.parquet"
    assert main(["score", "reward", str(manifest), "--model", str(base), "--out", str(results), "--store-pooled"]) == 0
    common = ["train", "reward", str(manifest), "--head-only", "--init", str(base), "--epochs", "30", "--eval-fraction", "0"]
    assert main([*common, "--out", str(tmp_path / "computed")]) == 0
    assert main([*common, "--out", str(tmp_path / "stored"), "--pooled", str(results)]) == 0
    computed = load_file(tmp_path / "computed" / "head.safetensors")
    stored = load_file(tmp_path / "stored" / "head.safetensors")
    torch.testing.assert_close(computed["score_head.weight"], stored["score_head.weight"], atol=1e-6, rtol=0)
    model = load_reward_model(tmp_path / "stored")
    assert model.kind == "trl-seqcls"
    torch.testing.assert_close(model.score_head.weight.detach(), stored["score_head.weight"])
    # a linear probe on 5 pairs of 32-d states fits them all (a random head gets about half)
    scored = tmp_path / "rescored.parquet"
    assert main(["score", "reward", str(manifest), "--model", str(tmp_path / "stored"), "--out", str(scored)]) == 0
    assert pl.read_parquet(scored)["correct"].all()


def test_head_only_needs_init_and_pooled_columns(manifest, tmp_path, capsys):
    assert main(["train", "reward", str(manifest), "--head-only", "--out", str(tmp_path / "h")]) == 2
    assert "--head-only needs --init" in capsys.readouterr().err
    base = build_tiny_trl(tmp_path / "trl", seed=2)
    plain = tmp_path / "plain.parquet"
    assert main(["score", "reward", str(manifest), "--model", str(base), "--out", str(plain)]) == 0
    assert main(["train", "reward", str(manifest), "--head-only", "--init", str(base), "--pooled", str(plain),
                 "--out", str(tmp_path / "h")]) == 2
    assert "--store-pooled" in capsys.readouterr().err


def test_compact_model_exported_to_onnx_scores_like_torch(manifest, tmp_path):
    import shutil

    from sdscore.models.pretrained import default_model_dir

    model = tmp_path / "compact"
    shutil.copytree(default_model_dir(), model)
    torch_out, ort_out = tmp_path / "torch.parquet", tmp_path / "ort.parquet"
    assert main(["score", "reward", str(manifest), "--model", str(model), "--out", str(torch_out), "--backend", "onnxruntime"]) == 2
    assert main(["export", str(model), "--format", "onnx"]) == 0
    assert (model / "export" / "model.onnx").is_file()
    assert main(["score", "reward", str(manifest), "--model", str(model), "--out", str(torch_out), "--max-batch", "3"]) == 0
    assert main(["score", "reward", str(manifest), "--model", str(model), "--out", str(ort_out), "--backend", "onnxruntime"]) == 0
    torch.testing.assert_close(_cli_scores(ort_out), _cli_scores(torch_out), atol=1e-4, rtol=0)


def test_default_model_is_the_shipped_compact_model(manifest, tmp_path):
    out = tmp_path / "res.parquet"
    assert main(["score", "reward", str(manifest), "--out", str(out)]) == 0
    assert pl.read_parquet(out)["chosen_reward"].null_count() == 0


def test_worker_processes_through_cli_give_the_same_results(manifest, tmp_path, capsys):
    one, two = tmp_path / "one.parquet", tmp_path / "two.parquet"
    assert main(["score", "reward", str(manifest), "--out", str(one), "--max-batch", "2"]) == 0
    assert main(["score", "reward", str(manifest), "--out", str(two), "--max-batch", "2", "--workers", "2"]) == 0
    columns = ["chosen_reward", "rejected_reward"]
    np.testing.assert_allclose(pl.read_parquet(two)[columns].to_numpy(), pl.read_parquet(one)[columns].to_numpy(),
                               atol=1e-6, rtol=0)
    with pytest.raises(SystemExit):
        main(["score", "reward", str(manifest), "--out", str(two), "--workers", "0"])
    assert "expected an integer >= 1, got '0'" in capsys.readouterr().err


def test_train_reward_cli_writes_a_loadable_compact_model(manifest, tmp_path):
    out = tmp_path / "trained"
    assert main(["train", "reward", str(manifest), "--out", str(out), "--max-steps", "3", "--batch-size", "2",
                 "--eval", str(manifest), "--eval-every", "1"]) == 0
    model = load_reward_model(out)
    assert model.kind == "compact"
    scored = tmp_path / "res.parquet"
    assert main(["score", "reward", str(manifest), "--model", str(out), "--out", str(scored)]) == 0
    assert pl.read_parquet(scored)["error"].null_count() == N_PAIRS


@pytest.mark.parametrize("device, message", [
    ("tpu", "unknown device 'tpu'; expected auto, cpu, cuda or cuda:N"),
    ("cuda", "device 'cuda': no CUDA device is visible here"),
    ("mps", "device 'mps': sdscore runs models on cpu or cuda only"),  # torch's names, not ours: a traceback
    ("meta", "device 'meta': sdscore runs models on cpu or cuda only"),
])
def test_a_device_that_is_not_there_is_a_usage_error(manifest, tmp_path, capsys, device, message):
    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("a CUDA device is visible")
    out = tmp_path / "o.parquet"
    assert main(["score", "reward", str(manifest), "--out", str(out), "--device", device]) == 2
    assert message in " ".join(capsys.readouterr().err.split())
    assert not out.exists() and not (tmp_path / "o.parquet.parts").exists()
