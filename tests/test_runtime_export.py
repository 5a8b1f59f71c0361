"""ONNX export (whole model and head), the onnxruntime backend, and the TensorRT gate and profiles.

Parity is onnxruntime against torch on ragged batches (left and right padding) whose batch size
and length differ from the export example, so the dynamic axes are exercised, not assumed.
"""

from __future__ import annotations

import importlib.util
import json
import sys

import numpy as np
import pytest
import sdscore
import torch
from sdscore.errors import MissingDependencyError, ModelError
from sdscore.models.base import Prepared, RewardModel
from sdscore.models.episodes import Episode, Turn
from sdscore.models.heads import Pooler, PoolingHead
from sdscore.runtime.reward import onnx_export, tensorrt_backend
from sdscore.runtime.reward.onnx_backend import OnnxRewardSession
from sdscore.runtime.reward.onnx_export import (
    example_batch,
    export_head_onnx,
    export_model,
    export_onnx,
    resolve_exporter,
)
from sdscore.runtime.reward.onnx_sidecar import read_sidecar, sidecar_path
from torch import nn
from torch.nn import functional as F

# torch's own TransformerEncoder fast path (the torch side of the parity checks) warns about nested tensors
pytestmark = pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning")

HIDDEN, FRAME, VOCAB, AUDIO_ID = 16, 8, 64, 1
PARITY = 1e-4
HAS_ONNXSCRIPT = importlib.util.find_spec("onnxscript") is not None
HAS_TENSORRT = importlib.util.find_spec("tensorrt") is not None


class TinyDense(RewardModel):
    """Bytes + 8-sample audio frames → nn.TransformerEncoder → Pooler → score head (dense forward)."""

    kind = "tiny-dense"

    def __init__(self, pooling: str = "attn", padding_side: str = "right", seed: int = 0):
        super().__init__()
        self.padding_side = padding_side
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.embed = nn.Embedding(VOCAB, HIDDEN)
            self.frame_proj = nn.Linear(FRAME, HIDDEN)
            layer = nn.TransformerEncoderLayer(HIDDEN, 2, 32, dropout=0.1, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, 2)
            self.pooler = Pooler(pooling, HIDDEN)
            self.score_head = nn.Linear(HIDDEN, 1, bias=False)
            if pooling == "attn":
                nn.init.normal_(self.pooler.attn.weight, std=0.5)

    def prepare(self, episode: Episode, audio) -> Prepared:
        ids, frames = [], []
        for turn, wave in zip(episode.turns, audio):
            text = [2 + b % (VOCAB - 2) for b in (turn.text or "").encode()]
            n = 0 if wave is None else min(len(wave) // FRAME, 6)
            ids += text + [AUDIO_ID] * n
            frames += [np.zeros(FRAME, np.float32)] * len(text)
            frames += list(np.asarray(wave[: n * FRAME], np.float32).reshape(n, FRAME)) if n else []
        return Prepared(len(ids), {"token_ids": np.array(ids, np.int64), "audio_frames": np.array(frames, np.float32)})

    def collate(self, items):
        width = max(it.length for it in items)
        ids = torch.zeros(len(items), width, dtype=torch.int64)
        frames = torch.zeros(len(items), width, FRAME)
        mask = torch.zeros(len(items), width, dtype=torch.int64)
        for b, it in enumerate(items):
            span = slice(width - it.length, width) if self.padding_side == "left" else slice(0, it.length)
            ids[b, span] = torch.from_numpy(it.inputs["token_ids"])
            frames[b, span] = torch.from_numpy(it.inputs["audio_frames"])
            mask[b, span] = 1
        return {"token_ids": ids, "audio_frames": frames, "attention_mask": mask}

    def hidden(self, batch):
        ids, mask = batch["token_ids"], batch["attention_mask"]
        x = torch.where((ids == AUDIO_ID)[..., None], self.frame_proj(batch["audio_frames"]), self.embed(ids))
        return self.encoder(x, src_key_padding_mask=mask == 0), mask

    @classmethod
    def claims(cls, path) -> bool:
        return False

    @classmethod
    def from_dir(cls, path, **options):
        raise ModelError("not on disk")


def episodes(n: int, seed: int = 1, long: bool = False) -> list[Episode]:
    """n episodes of different lengths (text + sine clips)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        words = "word " * int(rng.integers(1, 12 if long else 4))
        wave = np.sin(np.arange(int(rng.integers(8, 48))) * 0.3).astype(np.float32)
        out.append(Episode((Turn("user", f"q{i} {words}"), Turn("assistant", f"a{i}", wave)), id=f"e{i}"))
    return out


def collated(model: RewardModel, eps: list[Episode]) -> dict[str, torch.Tensor]:
    return model.collate_dense([model.prepare(e, [t.audio for t in e.turns]) for e in eps])


def torch_scores(model: RewardModel, batch) -> torch.Tensor:
    was = model.training
    model.eval()
    with torch.no_grad():
        out = model(batch)
    model.train(was)
    return out


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """{(pooling, side): (model, onnx path)} for the whole tiny model, exported with the tracer."""
    folder = tmp_path_factory.mktemp("onnx")
    made = {}
    for pooling in ("mean", "attn", "last"):
        for side in ("left", "right"):
            model = TinyDense(pooling, side)
            path = export_onnx(model, collated(model, episodes(2, seed=7)), folder / f"{pooling}-{side}.onnx",
                               exporter="torchscript")
            made[pooling, side] = (model, path)
    return made


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("pooling", ["mean", "attn", "last"])
def test_onnxruntime_matches_torch_on_ragged_batches_of_new_sizes(exported, pooling, side):
    model, path = exported[pooling, side]
    session = OnnxRewardSession(path, intra_op_threads=1)
    for n, long in ((5, True), (1, False), (3, False)):
        batch = collated(model, episodes(n, seed=n, long=long))
        assert batch["attention_mask"].sum(1).unique().numel() > 1 or n == 1  # ragged
        got, want = session.run(batch), torch_scores(model, batch)
        assert got.dtype == torch.float32 and got.shape == (n,)
        assert (got - want).abs().max().item() <= PARITY


def test_sidecar_records_inputs_output_and_source(exported):
    _, path = exported["attn", "right"]
    meta = json.loads(sidecar_path(path).read_text())
    assert sidecar_path(path) == path.with_suffix(".json") and read_sidecar(path) == meta
    assert meta["inputs"] == [
        {"name": "attention_mask", "dtype": "int64", "rank": 2, "shape": ["batch", "length"]},
        {"name": "audio_frames", "dtype": "float32", "rank": 3, "shape": ["batch", "length", FRAME]},
        {"name": "token_ids", "dtype": "int64", "rank": 2, "shape": ["batch", "length"]},
    ]
    assert meta["output"] == {"name": "reward", "dtype": "float32", "rank": 1, "shape": ["batch"]}
    assert (meta["format"], meta["what"], meta["source_kind"], meta["opset"]) == ("sdscore-onnx", "model", "tiny-dense", 17)
    assert (meta["exporter"], meta["sdscore_version"], meta["pooling"]) == ("torchscript", sdscore.__version__, "attn")
    assert (meta["padding_side"], meta["hidden_size"]) == ("right", HIDDEN)
    assert meta["check"]["max_relative_difference"] <= PARITY


def test_export_restores_model_state(tmp_path):
    model = TinyDense("mean").train()
    model.encoder.eval()  # a mixed state must come back as it was
    model.pooler.impl = "auto"
    export_onnx(model, collated(model, episodes(3)), tmp_path / "m.onnx", exporter="torchscript")
    assert model.training and not model.encoder.training and model.frame_proj.training
    assert model.pooler.impl == "auto"
    assert torch.backends.mha.get_fastpath_enabled()
    assert F.multi_head_attention_forward is onnx_export._STOCK_MHA


def test_export_check_catches_a_baked_in_length(tmp_path, monkeypatch):
    # the stock attention bakes the traced length into a Reshape; the check must refuse the file
    monkeypatch.setattr(onnx_export, "_mha_forward_traceable", onnx_export._STOCK_MHA)
    model = TinyDense("mean")
    with pytest.raises(ModelError, match="export check failed"):
        export_onnx(model, collated(model, episodes(3)), tmp_path / "m.onnx", exporter="torchscript")
    assert list(tmp_path.iterdir()) == []  # nothing half-written


def test_traceable_attention_equals_stock_attention():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(12, 3, batch_first=True).eval()
    x = torch.randn(4, 7, 12)
    pad = torch.zeros(4, 7, dtype=torch.bool)
    pad[1, 5:] = True
    pad[2, :3] = True
    attn = torch.randn(4 * 3, 7, 7)
    for kwargs in ({"key_padding_mask": pad}, {"key_padding_mask": pad.float() * -1e4, "attn_mask": attn},
                   {"attn_mask": torch.randn(7, 7), "average_attn_weights": False}):
        with torch.no_grad():
            want = mha(x, x, x, **kwargs)
            try:
                F.multi_head_attention_forward = onnx_export._mha_forward_traceable
                got = mha(x, x, x, **kwargs)
            finally:
                F.multi_head_attention_forward = onnx_export._STOCK_MHA
        assert torch.allclose(got[0], want[0], atol=1e-5) and torch.allclose(got[1], want[1], atol=1e-5)


@pytest.mark.parametrize("pooling", ["mean", "attn", "last"])
def test_head_export_matches_torch_including_an_empty_row(tmp_path, pooling):
    torch.manual_seed(3)
    head = PoolingHead(HIDDEN, pooling, bias=True)
    path = export_head_onnx(head, HIDDEN, tmp_path / "head.onnx", exporter="torchscript", source_kind="trl-seqcls")
    meta = read_sidecar(path)
    assert [(s["name"], s["dtype"], s["shape"]) for s in meta["inputs"]] == [
        ("attention_mask", "int64", ["batch", "length"]), ("hidden", "float32", ["batch", "length", HIDDEN])]
    assert (meta["what"], meta["source_kind"], meta["pooling"]) == ("head", "trl-seqcls", pooling)
    hidden = torch.randn(6, 9, HIDDEN)
    mask = torch.ones(6, 9, dtype=torch.int64)
    mask[1, 6:] = 0  # right padding
    mask[2, :4] = 0  # left padding
    mask[3] = 0  # empty
    mask[4, 2:5] = 0  # a hole
    hidden[3] = float("nan")  # padding is never read
    session = OnnxRewardSession(path)
    got = session.run({"hidden": hidden, "attention_mask": mask})
    with torch.no_grad():
        want = head(hidden, mask)
    assert torch.isfinite(got).all() and (got - want).abs().max().item() <= 1e-5
    assert got[3].item() == pytest.approx(head.score_head.bias.item())


def test_session_takes_numpy_extra_keys_and_empty_batches(exported):
    model, path = exported["mean", "right"]
    session = OnnxRewardSession(path, providers=["CPUExecutionProvider"])
    batch = collated(model, episodes(3))
    as_numpy = {k: v.numpy() for k, v in batch.items()} | {"lengths": np.array([1, 2, 3])}
    assert torch.allclose(session.run(as_numpy), session(batch))
    empty = {k: v[:0] for k, v in batch.items()}
    assert session.run(empty).shape == (0,)
    assert session.input_names == ["attention_mask", "audio_frames", "token_ids"]


def test_session_errors_name_the_input(exported, tmp_path):
    model, path = exported["mean", "right"]
    session = OnnxRewardSession(path)
    batch = collated(model, episodes(3))
    with pytest.raises(ModelError, match=r"missing input\(s\) \['token_ids'\]"):
        session.run({k: v for k, v in batch.items() if k != "token_ids"})
    with pytest.raises(ModelError, match=r"input 'token_ids' has shape \(3,\) \(rank 1\); the model takes rank 2"):
        session.run(batch | {"token_ids": batch["token_ids"][:, 0]})
    with pytest.raises(ModelError, match="input 'attention_mask' has dtype int32; the model takes int64"):
        session.run(batch | {"attention_mask": batch["attention_mask"].int()})
    with pytest.raises(ModelError, match="input 'audio_frames' has size 7 in dim 2; the model takes 8"):
        session.run(batch | {"audio_frames": batch["audio_frames"][..., :7]})
    with pytest.raises(ModelError, match="inputs disagree on 'length'"):
        session.run(batch | {"token_ids": batch["token_ids"][:, :-1]})
    with pytest.raises(ModelError, match="inputs disagree on 'batch'"):
        session.run(batch | {"token_ids": batch["token_ids"][:-1]})
    with pytest.raises(ModelError, match="input 'token_ids' must be a torch.Tensor or numpy array, got list"):
        session.run(batch | {"token_ids": [[1, 2]]})
    with pytest.raises(ModelError, match="a batch is a dict of tensors"):
        session.run([batch])


def test_session_load_errors(exported, tmp_path):
    _, path = exported["mean", "right"]
    with pytest.raises(ModelError, match="ONNX file not found"):
        OnnxRewardSession(tmp_path / "nope.onnx")
    lone = tmp_path / "lone.onnx"
    lone.write_bytes(path.read_bytes())
    with pytest.raises(ModelError, match="sidecar is missing"):
        OnnxRewardSession(lone)
    sidecar_path(lone).write_text("{not json")
    with pytest.raises(ModelError, match="corrupt sidecar JSON"):
        OnnxRewardSession(lone)
    sidecar_path(lone).write_text(json.dumps({"format": "other"}))
    with pytest.raises(ModelError, match="not an sdscore export sidecar"):
        OnnxRewardSession(lone)
    meta = read_sidecar(path)
    sidecar_path(lone).write_text(json.dumps(meta | {"version": 99}))
    with pytest.raises(ModelError, match="sidecar version 99 is not supported"):
        OnnxRewardSession(lone)
    sidecar_path(lone).write_text(json.dumps(meta | {"inputs": meta["inputs"][:1]}))
    with pytest.raises(ModelError, match="its sidecar lists"):
        OnnxRewardSession(lone)
    with pytest.raises(ModelError, match="no provider"):
        OnnxRewardSession(path, providers=["NoSuchExecutionProvider"])
    with pytest.raises(ValueError, match="intra_op_threads must be a positive int"):
        OnnxRewardSession(path, intra_op_threads=0)
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"not a model")
    sidecar_path(garbage).write_text(json.dumps(meta))
    with pytest.raises(ModelError, match="onnxruntime cannot load it"):
        OnnxRewardSession(garbage)


def test_export_argument_errors(tmp_path):
    model = TinyDense()
    batch = collated(model, episodes(3))
    with pytest.raises(TypeError, match="export_onnx takes a RewardModel"):
        export_onnx(nn.Linear(2, 2), batch, tmp_path / "m.onnx")
    with pytest.raises(ValueError, match="batch >= 2 and length >= 2"):
        export_onnx(model, {k: v[:1] for k, v in batch.items()}, tmp_path / "m.onnx")
    with pytest.raises(ValueError, match="batch >= 2 and length >= 2"):
        export_onnx(model, {k: v[:, :1] for k, v in batch.items()}, tmp_path / "m.onnx")
    with pytest.raises(ValueError, match="disagree on the batch size"):
        export_onnx(model, batch | {"token_ids": torch.cat([batch["token_ids"]] * 2)}, tmp_path / "m.onnx")
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        export_onnx(model, batch | {"token_ids": [1, 2]}, tmp_path / "m.onnx")
    with pytest.raises(TypeError, match="non-empty dict of tensors"):
        export_onnx(model, {}, tmp_path / "m.onnx")
    with pytest.raises(ValueError, match="scalar"):
        export_onnx(model, batch | {"t": torch.tensor(1.0)}, tmp_path / "m.onnx")
    with pytest.raises(ValueError, match="hidden_size is 8 but the head takes 16"):
        export_head_onnx(PoolingHead(HIDDEN), 8, tmp_path / "h.onnx")
    with pytest.raises(TypeError, match="takes a heads.PoolingHead"):
        export_head_onnx(nn.Linear(2, 1), 2, tmp_path / "h.onnx")
    with pytest.raises(ValueError, match="exporter must be one of"):
        resolve_exporter("tflite")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(HAS_ONNXSCRIPT, reason="onnxscript is installed")
def test_dynamo_exporter_needs_onnxscript():
    assert resolve_exporter("auto") == "torchscript"
    with pytest.raises(MissingDependencyError, match="pip install onnxscript"):
        resolve_exporter("dynamo")


@pytest.mark.skipif(not HAS_ONNXSCRIPT, reason="the dynamo exporter needs onnxscript")
def test_dynamo_exporter_parity(tmp_path):
    model = TinyDense("attn", "left")
    path = export_onnx(model, collated(model, episodes(3, seed=7)), tmp_path / "m.onnx", exporter="dynamo")
    assert read_sidecar(path)["exporter"] == "dynamo"
    batch = collated(model, episodes(5, seed=5, long=True))
    assert (OnnxRewardSession(path).run(batch) - torch_scores(model, batch)).abs().max().item() <= PARITY


# --- export_model (what `sdscore export` calls) ----------------------------------------------


@pytest.fixture
def load_tiny(monkeypatch):
    """Point export_model's loader at a TinyDense of a chosen kind."""

    def use(kind: str = "compact", pooling: str = "attn") -> TinyDense:
        model = TinyDense(pooling).eval()
        model.kind = kind
        monkeypatch.setattr(onnx_export, "load_reward_model", lambda path: model)
        return model

    return use


def test_export_model_writes_model_onnx_and_sidecar(tmp_path, load_tiny):
    model = load_tiny("compact")
    files = export_model(tmp_path, out=tmp_path / "out", exporter="torchscript")
    assert files == [tmp_path / "out" / "model.onnx", tmp_path / "out" / "model.json"]
    batch = example_batch(model)
    assert batch["token_ids"].shape[0] == 3
    got = OnnxRewardSession(files[0]).run(batch)
    assert (got - torch_scores(model, batch)).abs().max().item() <= PARITY


def test_export_model_head_only_for_hf_kinds(tmp_path, load_tiny):
    model = load_tiny("trl-seqcls", "last")
    with pytest.raises(ModelError, match="not dense tensor ops .* what='head'"):
        export_model(tmp_path, exporter="torchscript")
    files = export_model(tmp_path, what="head", exporter="torchscript")
    assert [f.name for f in files] == ["head.onnx", "head.json"] and files[0].parent == tmp_path / "export"
    meta = read_sidecar(files[0])
    assert (meta["what"], meta["source_kind"], meta["pooling"]) == ("head", "trl-seqcls", "last")
    hidden, mask = torch.randn(3, 6, HIDDEN), torch.tensor([[1] * 6, [0, 0, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0]])
    with torch.no_grad():
        want = model.head(model.pooler(hidden, mask))
    got = OnnxRewardSession(files[0]).run({"hidden": hidden, "attention_mask": mask})
    assert (got - want).abs().max().item() <= 1e-5


def test_export_model_argument_errors(tmp_path, load_tiny):
    load_tiny()
    with pytest.raises(ValueError, match="format must be one of"):
        export_model(tmp_path, fmt="tflite")
    with pytest.raises(ValueError, match="what must be one of"):
        export_model(tmp_path, what="backbone")


# --- TensorRT: gate and profiles (the engine code itself is unverified here) ------------------


@pytest.mark.skipif(HAS_TENSORRT, reason="tensorrt is installed")
def test_tensorrt_gate_has_an_install_hint(tmp_path, load_tiny):
    load_tiny()
    with pytest.raises(MissingDependencyError, match=r"pip install 'tensorrt>=10'"):
        tensorrt_backend.require_tensorrt()
    with pytest.raises(MissingDependencyError, match="needs the tensorrt package"):
        tensorrt_backend.build_engine(tmp_path / "m.onnx")
    with pytest.raises(MissingDependencyError, match="needs the tensorrt package"):
        tensorrt_backend.TensorRTRewardSession(tmp_path / "m.trt.engine")
    with pytest.raises(MissingDependencyError, match="needs the tensorrt package"):
        export_model(tmp_path, fmt="tensorrt", out=tmp_path / "out")
    assert not (tmp_path / "out").exists()  # failed before any export work
    assert isinstance(MissingDependencyError("x"), ImportError)


SIDECAR = {"inputs": [
    {"name": "attention_mask", "dtype": "int64", "rank": 2, "shape": ["batch", "length"]},
    {"name": "audio_frames", "dtype": "float32", "rank": 3, "shape": ["batch", "length", 384]},
]}


def test_default_profiles_span_batch_and_length():
    profiles = tensorrt_backend.default_profiles(SIDECAR, max_batch=32, max_length=1024, opt_length=256)
    assert profiles == {
        "attention_mask": ((1, 1), (32, 256), (32, 1024)),
        "audio_frames": ((1, 1, 384), (32, 256, 384), (32, 1024, 384)),
    }
    assert tensorrt_backend.check_profiles(SIDECAR, profiles) == profiles
    assert tensorrt_backend.default_profiles(SIDECAR, 4, 8)["attention_mask"] == ((1, 1), (4, 8), (4, 8))
    with pytest.raises(ValueError, match="max batch must be a positive int"):
        tensorrt_backend.default_profiles(SIDECAR, 0, 8)
    with pytest.raises(ValueError, match=r"opt length must be an int in 1..8"):
        tensorrt_backend.default_profiles(SIDECAR, 4, 8, opt_length=9)


def test_check_profiles_errors_name_the_input():
    good = tensorrt_backend.default_profiles(SIDECAR, 4, 8)
    check = tensorrt_backend.check_profiles
    with pytest.raises(ModelError, match=r"profiles cover \['attention_mask'\]"):
        check(SIDECAR, {"attention_mask": good["attention_mask"]})
    with pytest.raises(ModelError, match="profile of 'attention_mask': max shape .* rank 3"):
        check(SIDECAR, good | {"attention_mask": ((1, 1), (2, 2), (4, 8, 1))})
    with pytest.raises(ModelError, match="profile of 'attention_mask' dim 1: need 1 <= min <= opt <= max"):
        check(SIDECAR, good | {"attention_mask": ((1, 9), (2, 2), (4, 8))})
    with pytest.raises(ModelError, match="profile of 'audio_frames' dim 2 is fixed at 384"):
        check(SIDECAR, good | {"audio_frames": ((1, 1, 384), (2, 2, 384), (4, 8, 512))})
    with pytest.raises(ModelError, match="must be \\(min, opt, max\\) shapes"):
        check(SIDECAR, good | {"audio_frames": "big"})


class FakeTensorRT:
    """A stand-in `tensorrt` module recording build_engine's calls (the network's inputs are read
    from the ONNX file), so the build flow runs here; it says nothing about real TensorRT."""

    def __init__(self, version: str = "10.9.0", fp16: bool = True, parse_ok: bool = True):
        import types

        self.calls: list[tuple] = []
        fake = self

        class Network:
            def __init__(self):
                self.inputs: list[str] = []

            num_inputs = property(lambda net: len(net.inputs))

            def get_input(self, i):
                return types.SimpleNamespace(name=self.inputs[i])

        class Parser:
            num_errors = 0 if parse_ok else 1

            def __init__(self, network, logger):
                self.network = network

            def parse_from_file(self, path):
                import onnx

                graph = onnx.load(path).graph
                initializers = {i.name for i in graph.initializer}
                self.network.inputs = [i.name for i in graph.input if i.name not in initializers]
                return parse_ok

            def get_error(self, i):
                return "In node 3 (Where): unsupported"

        class Profile:
            def set_shape(self, name, lo, opt, hi):
                fake.calls.append(("set_shape", name, lo, opt, hi))

        class Config:
            def set_memory_pool_limit(self, pool, size):
                fake.calls.append(("pool", pool, size))

            def set_flag(self, flag):
                fake.calls.append(("flag", flag))

            def add_optimization_profile(self, profile):
                fake.calls.append(("add_profile",))

        class Builder:
            def __init__(self, logger):
                pass

            def create_network(self, flags):
                fake.calls.append(("create_network", flags))
                return Network()

            create_builder_config = staticmethod(Config)
            create_optimization_profile = staticmethod(Profile)

            def build_serialized_network(self, network, config):
                return b"serialized engine"

        class Logger:
            WARNING = 2

            def __init__(self, level):
                pass

        self.module = types.SimpleNamespace(
            __version__=version, Logger=Logger, Builder=Builder, OnnxParser=Parser,
            MemoryPoolType=types.SimpleNamespace(WORKSPACE="workspace"),
            BuilderFlag=types.SimpleNamespace(**({"FP16": "fp16"} if fp16 else {})),
        )


def test_build_engine_flow_against_a_fake_tensorrt(exported, tmp_path, monkeypatch):
    _, onnx_file = exported["mean", "left"]
    fake = FakeTensorRT()
    monkeypatch.setitem(sys.modules, "tensorrt", fake.module)
    engine = tensorrt_backend.build_engine(onnx_file, tmp_path / "m.trt.engine", fp16=True, workspace_gb=0.5,
                                           max_batch=8, max_length=64)
    assert engine.read_bytes() == b"serialized engine"
    meta = read_sidecar(engine)
    assert sidecar_path(engine).name == "m.trt.json" and meta["inputs"] == read_sidecar(onnx_file)["inputs"]
    assert meta["engine"]["profiles"]["audio_frames"] == [[1, 1, FRAME], [8, 64, FRAME], [8, 64, FRAME]]
    assert meta["engine"]["fp16"] is True and meta["engine"]["tensorrt_version"] == "10.9.0"
    assert ("create_network", 0) in fake.calls and ("flag", "fp16") in fake.calls
    assert ("pool", "workspace", 1 << 29) in fake.calls and ("add_profile",) in fake.calls
    assert ("set_shape", "token_ids", (1, 1), (8, 64), (8, 64)) in fake.calls

    with pytest.raises(ModelError, match=r"profile of 'token_ids' dim 1: need 1 <= min <= opt <= max"):
        tensorrt_backend.build_engine(onnx_file, tmp_path / "x.engine",
                                      profiles=tensorrt_backend.default_profiles(meta, 8, 64) | {"token_ids": ((1, 9), (1, 2), (8, 64))})
    monkeypatch.setitem(sys.modules, "tensorrt", FakeTensorRT(parse_ok=False).module)
    with pytest.raises(ModelError, match="TensorRT's ONNX parser refused it: In node 3"):
        tensorrt_backend.build_engine(onnx_file, tmp_path / "x.engine")
    monkeypatch.setitem(sys.modules, "tensorrt", FakeTensorRT("11.4.0", fp16=False).module)
    with pytest.raises(ModelError, match="no fp16 builder flag .* ModelOpt AutoCast"):
        tensorrt_backend.build_engine(onnx_file, tmp_path / "x.engine", fp16=True)
    monkeypatch.setitem(sys.modules, "tensorrt", FakeTensorRT("8.6.1").module)
    with pytest.raises(MissingDependencyError, match="tensorrt 8.6.1 is too old"):
        tensorrt_backend.build_engine(onnx_file, tmp_path / "x.engine")
    assert not (tmp_path / "x.engine").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA error")
def test_tensorrt_session_needs_cuda(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", FakeTensorRT().module)
    with pytest.raises(ModelError, match="TensorRT engine not found"):
        tensorrt_backend.TensorRTRewardSession(tmp_path / "none.trt.engine")
    (tmp_path / "m.trt.engine").write_bytes(b"x")
    with pytest.raises(ModelError, match="needs a CUDA device"):
        tensorrt_backend.TensorRTRewardSession(tmp_path / "m.trt.engine")


# --- the compact model, end to end --------------------------------------------------------------


@pytest.mark.parametrize("side", ["left", "right"])
def test_compact_model_exports_through_export_model(tmp_path, side):
    if importlib.util.find_spec("sdscore.models.compact") is None:
        pytest.skip("sdscore.models.compact is not written yet")
    from sdscore.models.compact import CompactConfig, CompactRewardModel

    config = CompactConfig(d_model=32, n_layers=2, n_heads=2, ff_size=64, pooling="attn", padding_side=side)
    model = CompactRewardModel.from_config(config, seed=0)
    model.save_pretrained(tmp_path / "model")
    files = export_model(tmp_path / "model", exporter="torchscript")
    assert [f.name for f in files] == ["model.onnx", "model.json"]
    meta = read_sidecar(files[0])
    assert (meta["source_kind"], meta["padding_side"]) == ("compact", side)
    rng = np.random.default_rng(0)
    eps = [Episode((Turn("user", "hi " * int(rng.integers(1, 9)), rng.standard_normal(int(rng.integers(800, 9000))).astype(np.float32) * 0.1),
                    Turn("assistant", "ok " * int(rng.integers(1, 15)), rng.standard_normal(int(rng.integers(800, 6000))).astype(np.float32) * 0.1)),
                   "modality", f"c{i}") for i in range(5)]
    batch = collated(model, eps)
    got = OnnxRewardSession(files[0]).run(batch)
    assert (got - torch_scores(model, batch)).abs().max().item() <= PARITY
