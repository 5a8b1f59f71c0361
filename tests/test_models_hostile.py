"""Hostile and broken model folders (issue #14 item 7): each gets one ModelError naming the file and
the problem, from the Python API and from `sdscore score reward` (exit code 2, no traceback).

Tiny random-weight models in the real on-disk layouts (compact, TRL sequence classification,
SDiaReward, head-only, SpeechBrain ECAPA, WavLM), then broken one way each:
a) a pickle checkpoint that weights_only loading refuses (it would run code: it must not run);
b) head-only folders whose base_model names each other (a cycle) or stack too deep;
c) a config whose sizes the weights do not have (huge ones must be refused, not allocated);
d) config JSON that does not parse, is not an object, or has fields of the wrong type;
e) NaN / Inf weights; f) integer weights where floats belong.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import soundfile as sf
import torch
from safetensors.torch import load_file, save_file
from sdscore.cli import main
from sdscore.corpus import write_manifest
from sdscore.corpus.schemas import REWARD_PAIRS
from sdscore.errors import ModelError
from sdscore.features.speaker.ecapa import EcapaEncoder
from sdscore.models.compact import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    CompactConfig,
    CompactRewardModel,
)
from sdscore.models.head_only import save_head_only
from sdscore.models.loading import load_reward_model
from test_speaker_embedders import ECAPA_YAML, _random_ecapa
from tiny_reward_models import build_tiny_sdiareward, build_tiny_trl

SMALL = CompactConfig(n_mels=32, frames_per_token=4, d_model=32, n_layers=2, n_heads=2, ff_size=64)


# ---------------------------------------------------------------- builders


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """Good tiny models, built once; each test copies the one it breaks."""
    root = tmp_path_factory.mktemp("good")
    compact = CompactRewardModel.from_config(SMALL, seed=1).save_pretrained(root / "compact")
    trl = build_tiny_trl(root / "trl")
    ckpt, base = build_tiny_sdiareward(root / "sdia", root / "sdia-base")
    return {"compact": compact, "trl": trl, "sdia": ckpt, "sdia-base": base}


@pytest.fixture(scope="module")
def manifest(tmp_path_factory) -> Path:
    """One reward pair of one-turn episodes with text and a short clip."""
    folder = tmp_path_factory.mktemp("pairs")
    t = np.arange(8000) / 16000
    sf.write(folder / "a.wav", (0.2 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 16000, subtype="FLOAT")
    turns = [{"role": "user", "text": "hi", "audio_path": "a.wav"}, {"role": "assistant", "text": "hello", "audio_path": "a.wav"}]
    rows = [{"pair_id": "p0", "criterion": "modality", "subset": "wild", "category": "c", "source": "s", "margin": None,
             "chosen": turns, "rejected": [turns[0], {**turns[1], "text": "go away"}]}]
    path = folder / "pairs.parquet"
    write_manifest(pl.DataFrame(rows, schema=REWARD_PAIRS), path)
    return path


def copy(models, kind: str, tmp_path: Path, name: str | None = None) -> Path:
    return Path(shutil.copytree(models[kind], tmp_path / (name or kind)))


def edit_json(file: Path, change) -> None:
    data = json.loads(file.read_text())
    change(data)
    file.write_text(json.dumps(data, indent=2))


def edit_tensors(file: Path, change) -> None:
    state = load_file(str(file))
    change(state)
    save_file(state, str(file), metadata={"format": "pt"})


class RunsCode:
    """Pickles as a call of Path.touch(marker): loading it unsafely would create the marker."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return Path.touch, (self.marker,)


def refused(folder: Path, *needles: str, **options) -> str:
    """load_reward_model raises a one-line ModelError that holds every needle; returns it."""
    with pytest.raises(ModelError) as info:
        load_reward_model(folder, **options)
    message = str(info.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"
    return message


def cli_refuses(manifest: Path, folder: Path, capsys, *needles: str) -> str:
    """`sdscore score reward` exits 2 with a short error holding every needle, and no traceback."""
    code = main(["score", "reward", str(manifest), "--model", str(folder), "--out", str(folder.parent / "out.parquet")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and "error:" in err
    joined = "".join(err.split())  # rich wraps to the terminal width, inside words too
    for needle in needles:
        assert "".join(needle.split()) in joined, f"{needle!r} not in {err!r}"
    return err


# ---------------------------------------------------------------- a) pickles that would run code


def test_pickle_that_would_run_code_is_refused_and_never_run(models, manifest, tmp_path, capsys):
    folder = copy(models, "trl", tmp_path)
    (folder / "model.safetensors").unlink()
    marker = tmp_path / "ran"
    torch.save({"score.weight": RunsCode(marker)}, folder / "pytorch_model.bin")
    message = refused(folder, "pytorch_model.bin", "pickle", "cannot be loaded safely", "safetensors")
    assert "weights_only" not in message
    err = cli_refuses(manifest, folder, capsys, "pytorch_model.bin", "safetensors")
    assert "weights_only" not in err
    assert not marker.exists()


def test_a_pickle_of_plain_tensors_still_loads(models, tmp_path):
    folder = copy(models, "trl", tmp_path)
    state = load_file(str(folder / "model.safetensors"))
    (folder / "model.safetensors").unlink()
    torch.save(state, folder / "pytorch_model.bin")  # what save_pretrained(safe_serialization=False) writes
    model = load_reward_model(folder)
    assert torch.equal(model.score_head.weight, state["score.weight"])


def test_compact_and_sdiareward_folders_with_only_a_pickle(models, tmp_path):
    compact = copy(models, "compact", tmp_path)
    (compact / WEIGHTS_FILE).unlink()
    torch.save({}, compact / "model.pt")
    refused(compact, "model.safetensors is missing", "model.pt is a pickle", "safetensors")
    sdia = copy(models, "sdia", tmp_path)
    (sdia / "model.safetensors").unlink()
    torch.save({}, sdia / "pytorch_model.bin")
    refused(sdia, "pytorch_model.bin is a pickle", base=models["sdia-base"])


def test_ecapa_pickle_that_would_run_code(tmp_path):
    (tmp_path / "hyperparams.yaml").write_text(ECAPA_YAML)
    marker = tmp_path / "ran"
    torch.save({"fc.conv.weight": RunsCode(marker)}, tmp_path / "embedding_model.ckpt")
    with pytest.raises(ModelError, match=r"embedding_model\.ckpt: a pickle that cannot be loaded safely") as info:
        EcapaEncoder(tmp_path)
    assert "weights_only" not in str(info.value) and not marker.exists()


# ---------------------------------------------------------------- b) head-only folders that loop


def test_head_only_folders_that_name_each_other(models, manifest, tmp_path, capsys):
    head = {"score_head.weight": torch.zeros(1, SMALL.d_model)}
    save_head_only(tmp_path / "one", tmp_path / "two", "compact", "mean", head)
    save_head_only(tmp_path / "two", tmp_path / "one", "compact", "mean", head)
    refused(tmp_path / "one", "cycle", f"{tmp_path / 'one'} -> {tmp_path / 'two'} -> {tmp_path / 'one'}")
    cli_refuses(manifest, tmp_path / "one", capsys, "sdscore_head.json", "cycle")


def test_head_only_chain_too_deep_and_a_short_chain_loads(models, tmp_path):
    head = {"score_head.weight": torch.ones(1, SMALL.d_model)}
    base = models["compact"]
    for n in range(10):
        save_head_only(tmp_path / f"h{n}", base, "compact", "mean", head)
        base = tmp_path / f"h{n}"
    refused(tmp_path / "h9", "more than 8 head-only folders in a row", f"({tmp_path / 'h9'} -> {tmp_path / 'h8'} -> ")
    model = load_reward_model(tmp_path / "h1")  # two heads over the base: fine
    assert torch.equal(model.score_head.weight, head["score_head.weight"])


# ---------------------------------------------------------------- c) config sizes the weights lack


def test_compact_config_with_huge_sizes_is_refused_before_allocating(models, manifest, tmp_path, capsys):
    folder = copy(models, "compact", tmp_path)
    edit_json(folder / CONFIG_FILE, lambda m: m["config"].update(d_model=2**30, n_heads=1))
    refused(folder, f"{folder / CONFIG_FILE}: d_model = 1073741824", "tensor norm.weight", "shape [32]")
    cli_refuses(manifest, folder, capsys, "d_model = 1073741824", "norm.weight")
    edit_json(folder / CONFIG_FILE, lambda m: m["config"].update(d_model=32, n_heads=2, ff_size=4096))
    refused(folder, "ff_size = 4096", "tensor blocks.0.ff1.weight", "shape [64, 32]")


def test_trl_config_with_huge_sizes_is_refused_before_allocating(models, manifest, tmp_path, capsys):
    folder = copy(models, "trl", tmp_path)
    edit_json(folder / "config.json", lambda c: c.update(hidden_size=2**28, intermediate_size=2**30))
    refused(folder, f"{folder / 'config.json'}: hidden_size = 268435456", "model.embed_tokens.weight", "shape [259, 32]")
    cli_refuses(manifest, folder, capsys, "hidden_size = 268435456", "model.embed_tokens.weight")
    edit_json(folder / "config.json", lambda c: c.update(hidden_size=32, intermediate_size=64, num_hidden_layers=4000))
    refused(folder, "num_hidden_layers = 4000", "holds 2")


def test_sdiareward_base_config_with_huge_sizes(models, tmp_path):
    base = copy(models, "sdia-base", tmp_path)
    edit_json(base / "config.json", lambda c: c["thinker_config"]["text_config"].update(hidden_size=2**26))
    refused(models["sdia"], f"{base / 'config.json'}: text_config.hidden_size = 67108864", "model.embed_tokens.weight",
            base=base)
    edit_json(base / "config.json", lambda c: c["thinker_config"]["text_config"].update(hidden_size=32))
    edit_json(base / "config.json", lambda c: c["thinker_config"]["audio_config"].update(encoder_layers=64))
    refused(models["sdia"], "audio_config.encoder_layers = 64", "holds 1", base=base)


def test_ecapa_hyperparams_with_huge_sizes(tmp_path):
    (tmp_path / "hyperparams.yaml").write_text(ECAPA_YAML.replace("lin_neurons: !ref <emb_dim>", "lin_neurons: 100000000"))
    torch.save(_random_ecapa().state_dict(), tmp_path / "embedding_model.ckpt")
    with pytest.raises(ModelError, match=r"embedding_model.lin_neurons = 100000000 does not match the weights: "
                                         r"tensor fc.conv.weight .* has shape \[16, 192, 1\]"):
        EcapaEncoder(tmp_path)


# ---------------------------------------------------------------- d) config JSON that is not valid


def test_config_json_that_does_not_parse(models, manifest, tmp_path, capsys):
    folder = copy(models, "trl", tmp_path)
    (folder / "config.json").write_text('{\n  "architectures": ["Qwen2ForSequenceClassification"],\n  "hidden_size": 32,,\n}')
    refused(folder, f"{folder / 'config.json'}:3:21:", "Expecting property name")
    cli_refuses(manifest, folder, capsys, "config.json:3:21:")
    compact = copy(models, "compact", tmp_path)
    (compact / CONFIG_FILE).write_text('{"kind": "compact",\n "version": }')
    refused(compact, f"{compact / CONFIG_FILE}:2:13:", "Expecting value")


@pytest.mark.parametrize(("field", "value", "needle"), [
    (None, [1, 2], "expected a JSON object, got list"),
    ("architectures", "Qwen2ForSequenceClassification", "architectures must be a list of class names"),
    ("hidden_size", "32", "hidden_size must be a positive integer, got '32'"),
    ("num_labels", "1", "num_labels must be an integer, got '1'"),
    ("model_type", 7, "model_type must be a string, got 7"),
])
def test_config_json_with_wrong_types(models, tmp_path, field, value, needle):
    folder = copy(models, "trl", tmp_path)
    if field is None:
        (folder / "config.json").write_text(json.dumps(value))
    else:
        edit_json(folder / "config.json", lambda c: c.update({field: value}))
    refused(folder, f"{folder / 'config.json'}: {needle}")


def test_head_only_config_with_wrong_types(models, tmp_path):
    save_head_only(tmp_path / "head", models["compact"], "compact", "mean", {"score_head.weight": torch.zeros(1, 32)})
    edit_json(tmp_path / "head" / "sdscore_head.json", lambda m: m.update(hidden_size="32"))
    refused(tmp_path / "head", "sdscore_head.json: hidden_size must be a positive integer, got '32'")
    edit_json(tmp_path / "head" / "sdscore_head.json", lambda m: m.update(hidden_size=32, base_model=["x"]))
    refused(tmp_path / "head", "sdscore_head.json: base_model must be a string")


# ---------------------------------------------------------------- e) NaN and Inf weights


def test_nan_weights_are_refused_at_load(models, manifest, tmp_path, capsys):
    trl = copy(models, "trl", tmp_path)
    edit_tensors(trl / "model.safetensors", lambda s: s["model.layers.1.mlp.up_proj.weight"].__setitem__((3, 4), float("nan")))
    refused(trl, f"{trl / 'model.safetensors'}: tensor model.layers.1.mlp.up_proj.weight has 1 NaN and 0 Inf values")
    cli_refuses(manifest, trl, capsys, "model.layers.1.mlp.up_proj.weight has 1 NaN")
    compact = copy(models, "compact", tmp_path)
    edit_tensors(compact / WEIGHTS_FILE, lambda s: s["norm.weight"].__setitem__(0, float("inf")))
    refused(compact, f"{compact / WEIGHTS_FILE}: tensor norm.weight has 0 NaN and 1 Inf values")
    cli_refuses(manifest, compact, capsys, "norm.weight has 0 NaN and 1 Inf")


def test_nan_weights_in_sdiareward_head_only_and_ecapa(models, tmp_path):
    sdia = copy(models, "sdia", tmp_path)
    edit_tensors(sdia / "model.safetensors", lambda s: s["audio_tower.layers.0.fc1.weight"].__setitem__((0, 1), float("-inf")))
    refused(sdia, f"{sdia / 'model.safetensors'}: tensor audio_tower.layers.0.fc1.weight has 0 NaN and 1 Inf",
            base=models["sdia-base"])
    head = torch.zeros(1, 32)
    head[0, 5] = float("nan")
    save_head_only(tmp_path / "head", models["compact"], "compact", "mean", {"score_head.weight": head})
    refused(tmp_path / "head", "head.safetensors: tensor score_head.weight has 1 NaN")
    (tmp_path / "ecapa").mkdir()
    (tmp_path / "ecapa" / "hyperparams.yaml").write_text(ECAPA_YAML)
    state = _random_ecapa().state_dict()
    state["asp_bn.norm.running_var"][2] = float("nan")
    torch.save(state, tmp_path / "ecapa" / "embedding_model.ckpt")
    with pytest.raises(ModelError, match=r"embedding_model\.ckpt: tensor asp_bn\.norm\.running_var has 1 NaN"):
        EcapaEncoder(tmp_path / "ecapa")


# ---------------------------------------------------------------- f) integer weights


def test_integer_weights_are_refused_not_cast(models, manifest, tmp_path, capsys):
    trl = copy(models, "trl", tmp_path)
    edit_tensors(trl / "model.safetensors", lambda s: s.update({"score.weight": (s["score.weight"] * 100).to(torch.int32)}))
    refused(trl, f"{trl / 'model.safetensors'}: tensor score.weight has dtype I32", "floating-point")
    cli_refuses(manifest, trl, capsys, "score.weight has dtype I32")
    compact = copy(models, "compact", tmp_path)
    edit_tensors(compact / WEIGHTS_FILE, lambda s: s.update({"norm.weight": s["norm.weight"].to(torch.int64)}))
    refused(compact, f"{compact / WEIGHTS_FILE}: tensor norm.weight has dtype int64")
    sdia = copy(models, "sdia", tmp_path)
    edit_tensors(sdia / "model.safetensors", lambda s: s.update({"score_head.weight": s["score_head.weight"].to(torch.int8)}))
    refused(sdia, "tensor score_head.weight has dtype I8", base=models["sdia-base"])


def test_integer_weights_in_head_only_and_ecapa(models, tmp_path):
    save_head_only(tmp_path / "head", models["compact"], "compact", "mean", {"score_head.weight": torch.zeros(1, 32)})
    save_file({"score_head.weight": torch.zeros(1, 32, dtype=torch.int32)}, str(tmp_path / "head" / "head.safetensors"))
    refused(tmp_path / "head", "head.safetensors: tensor score_head.weight has dtype int32")
    (tmp_path / "ecapa").mkdir()
    (tmp_path / "ecapa" / "hyperparams.yaml").write_text(ECAPA_YAML)
    state = _random_ecapa().state_dict()
    state["fc.conv.weight"] = state["fc.conv.weight"].to(torch.int16)
    torch.save(state, tmp_path / "ecapa" / "embedding_model.ckpt")
    with pytest.raises(ModelError, match=r"embedding_model\.ckpt: tensor fc\.conv\.weight has dtype int16"):
        EcapaEncoder(tmp_path / "ecapa")


# ---------------------------------------------------------------- WavLM folders


def test_wavlm_broken_folders(tmp_path):
    transformers = pytest.importorskip("transformers")
    from sdscore.features.speaker.wavlm import WavlmEncoder

    config = transformers.WavLMConfig(
        hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32, conv_dim=(16, 16),
        conv_kernel=(10, 3), conv_stride=(5, 2), num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=2,
        tdnn_dim=(16, 16), tdnn_kernel=(3, 1), tdnn_dilation=(1, 1), xvector_output_dim=8, num_buckets=16,
        max_bucket_distance=32,
    )
    good = tmp_path / "good"
    transformers.WavLMForXVector(config).save_pretrained(good)
    WavlmEncoder(good)
    broken = Path(shutil.copytree(good, tmp_path / "nan"))
    edit_tensors(broken / "model.safetensors", lambda s: s["wavlm.encoder.layers.1.feed_forward.output_dense.weight"]
                 .__setitem__((0, 0), float("nan")))
    with pytest.raises(ModelError, match=r"model\.safetensors: tensor wavlm\.encoder\.layers\.1\.feed_forward\.output_dense\.weight has 1 NaN"):
        WavlmEncoder(broken)
    huge = Path(shutil.copytree(good, tmp_path / "huge"))
    edit_json(huge / "config.json", lambda c: c.update(hidden_size=2**24))
    with pytest.raises(ModelError, match=r"config.json: hidden_size = 16777216 does not match the weights"):
        WavlmEncoder(huge)
    (huge / "config.json").write_text("{")
    with pytest.raises(ModelError, match=r"config.json:1:2: corrupt JSON"):
        WavlmEncoder(huge)


# ---------------------------------------------------------------- the real command line


def test_cli_process_exits_2_without_a_traceback(models, manifest, tmp_path):
    folder = copy(models, "trl", tmp_path)
    (folder / "model.safetensors").unlink()
    marker = tmp_path / "ran"
    torch.save({"score.weight": RunsCode(marker)}, folder / "pytorch_model.bin")
    done = subprocess.run(
        [sys.executable, "-m", "sdscore.cli", "score", "reward", str(manifest), "--model", str(folder),
         "--out", str(tmp_path / "out.parquet")],
        capture_output=True, text=True, env={**os.environ, "COLUMNS": "400"}, timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "weights_only" not in done.stderr
    assert "pytorch_model.bin: a pickle that cannot be loaded safely" in done.stderr
    assert len(done.stderr.strip().splitlines()) <= 3 and not marker.exists()


# ---------------------------------------------------------------- good models still load, and fast


def test_finite_check_is_one_cheap_pass(models):
    """A read of the tensor, not a multiple of a load: counted by the profiler, not timed (a wall-clock
    ratio races on a busy machine) — one operator reads the whole tensor and none allocates its size."""
    from torch.profiler import ProfilerActivity, profile

    from sdscore.checkpoint_files import check_finite

    weights = torch.randn(4096, 4096).to(torch.bfloat16)  # 32 MB, one 7B layer's projection
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True) as prof:
        check_finite([("w", weights)], "f")
    ops = [e for e in prof.events() if e.name.startswith("aten::")]
    readers = [e.name for e in ops if list(weights.shape) in e.input_shapes]
    assert len(readers) == 1, readers  # one reduction (aminmax), where isfinite + all reads it in several passes
    assert max(e.cpu_memory_usage for e in ops) < 1024, [(e.name, e.cpu_memory_usage) for e in ops]
    load_reward_model(models["compact"])
    load_reward_model(models["trl"])
