"""The one-attention-call audio tower (sdscore.models.qwen_audio_tower) against transformers' own
Qwen2_5OmniAudioEncoder.forward, on the tiny SDiaReward layout (n_window 100: 200-frame chunks)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from sdscore.models import qwen_audio_tower as qat
from sdscore.models.qwen_audio_tower import (
    AudioTowerPlan,
    attention_backend,
    chunk_features,
    run_audio_tower,
)
from tiny_reward_models import (
    OMNI_NAMED_TOKENS,
    OMNI_SPECIAL_TOKENS,
    TINY_SIZES,
    byte_level_tokenizer,
    tiny_thinker_config,
)

CHUNK = 2 * TINY_SIZES["audio"]["n_window"]

RAGGED = {
    "mixed": [57, 3, 1234, 450, 199],  # incl. a clip shorter than one chunk and a 7-chunk clip
    "multiples": [CHUNK, 2 * CHUNK, 5 * CHUNK],  # lengths exactly a multiple of the chunk
    "single": [777],
    "tiny_tails": [CHUNK + 1, CHUNK + 2, 2 * CHUNK + 3, 1, 2],  # 1- and 2-frame chunks (0 output tokens)
    "many": [int(n) for n in np.random.default_rng(5).integers(3, 3 * CHUNK, size=40)],
}


def _tower(layers: int = 1, seed: int = 0):
    from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import (
        Qwen2_5OmniAudioEncoder,
    )

    config = tiny_thinker_config(byte_level_tokenizer(OMNI_SPECIAL_TOKENS, OMNI_NAMED_TOKENS)).audio_config
    config.encoder_layers = layers
    config._attn_implementation = "sdpa"  # what SDiaRewardQwenOmni loads by default
    torch.manual_seed(seed)
    tower = Qwen2_5OmniAudioEncoder(config).eval()
    with torch.no_grad():  # post_init leaves biases at zero and ln at identity: make every module count
        for p in tower.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return tower


@pytest.fixture(scope="module")
def tower():
    return _tower(layers=2)


def _features(counts, seed=0):
    return torch.randn(128, sum(counts), generator=torch.Generator().manual_seed(seed))


def _reference(tower, features, counts):
    """What SDiaRewardQwenOmni.hidden calls today."""
    lengths = torch.tensor(counts, dtype=torch.long)
    out = tower(features.to(tower.conv1.weight.dtype), feature_lens=lengths, aftercnn_lens=(lengths - 1) // 2 + 1)
    return out.last_hidden_state


def _ours(tower, features, counts, backend=None):
    plan = AudioTowerPlan.build(counts, tower.n_window)
    return run_audio_tower(tower, chunk_features(features, plan), plan, backend=backend)


@pytest.mark.parametrize("case", sorted(RAGGED))
@torch.no_grad()
def test_fp32_equals_the_transformers_forward(tower, case):
    counts = RAGGED[case]
    features = _features(counts)
    reference = _reference(tower, features, counts)
    ours = _ours(tower, features, counts)
    assert ours.shape == reference.shape
    assert ours.dtype == torch.float32
    torch.testing.assert_close(ours, reference, atol=1e-5, rtol=0)


@torch.no_grad()
def test_bf16_equals_the_transformers_forward(monkeypatch):
    """bf16: within 2e-2 x the output's largest magnitude (one bf16 ulp is 2^-8 ~ 4e-3 relative);
    on this CPU both sides round identically and the difference measured is 0."""
    counts = RAGGED["mixed"]
    features = _features(counts, seed=1)
    half = _tower(layers=2).to(torch.bfloat16)
    # oneDNN's AMX bf16 matmul dies with SIGILL on machines that do not grant AMX: keep bf16 off oneDNN
    monkeypatch.setattr(torch.backends.mkldnn, "enabled", False)
    reference = _reference(half, features, counts).float()
    ours = _ours(half, features, counts)
    assert ours.dtype == torch.bfloat16
    bound = 2e-2 * reference.abs().max().item()
    assert (ours.float() - reference).abs().max().item() <= bound


@torch.no_grad()
def test_output_counts_match_the_models_token_count(tower):
    from sdscore.models.sdiareward_qwen import audio_token_count

    counts = RAGGED["mixed"] + RAGGED["tiny_tails"]
    plan = AudioTowerPlan.build(counts, tower.n_window)
    assert plan.token_counts == tuple(max(audio_token_count(n), 0) for n in counts)
    assert _ours(tower, _features(counts), counts).shape[0] == sum(plan.token_counts)


def test_plan_matches_transformers_bookkeeping():
    from transformers.models.qwen2_5_omni import modeling_qwen2_5_omni as hf

    counts = RAGGED["mixed"] + RAGGED["multiples"] + RAGGED["tiny_tails"]
    lengths = torch.tensor(counts)
    plan = AudioTowerPlan.build(counts, TINY_SIZES["audio"]["n_window"])
    features = _features(counts)
    padded, chunk_lengths = hf.chunk_and_pad_features(features, lengths, TINY_SIZES["audio"]["n_window"])
    assert torch.equal(plan.chunk_lengths, chunk_lengths)
    assert torch.equal(chunk_features(features, plan), padded)
    assert torch.equal(plan.valid_indices, hf.get_valid_indices(chunk_lengths))
    assert torch.equal(plan.pool_indices, hf.get_pool_indices(lengths))
    assert torch.equal(plan.cu_seqlens, hf.get_audio_cu_seqlens(chunk_lengths))
    assert plan.cu_seqlens.dtype == torch.int32
    assert plan.max_seqlen == int((plan.cu_seqlens[1:] - plan.cu_seqlens[:-1]).max())
    assert int(plan.key_mask.sum()) == plan.num_tokens == int(plan.cu_seqlens[-1])


def test_plan_stays_on_the_host_until_moved():
    plan = AudioTowerPlan.build(RAGGED["mixed"], 100)
    tensors = [getattr(plan, n) for n in plan._tensors()]
    assert len(tensors) == 8 and all(t.device.type == "cpu" for t in tensors)
    moved = plan.to("meta")
    assert all(getattr(moved, n).device.type == "meta" for n in plan._tensors())
    assert (moved.token_counts, moved.max_seqlen, moved.max_chunk) == (plan.token_counts, plan.max_seqlen, plan.max_chunk)
    assert plan.device.type == "cpu"  # .to returns a copy


@torch.no_grad()
def test_forward_reads_nothing_back_to_the_host():
    """On the meta device any .item() / .tolist() / nonzero() would raise: the whole forward,
    plan moved first, is free of host syncs (the transformers forward is not)."""
    tower = _tower(layers=2).to("meta")
    counts = RAGGED["many"]
    plan = AudioTowerPlan.build(counts, tower.n_window)
    chunks = chunk_features(_features(counts), plan).to("meta")
    out = run_audio_tower(tower, chunks, plan.to("meta"))
    assert out.device.type == "meta" and tuple(out.shape) == (sum(plan.token_counts), tower.proj.out_features)
    with pytest.raises((NotImplementedError, RuntimeError)):
        _reference(tower, _features(counts).to("meta"), counts)


@torch.no_grad()
def test_one_attention_call_per_layer(monkeypatch):
    tower = _tower(layers=3)
    counts = RAGGED["many"]
    features = _features(counts)
    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def counting(*args, **kwargs):
        calls.append(args[0].shape)
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counting)
    reference = _reference(tower, features, counts)
    reference_calls = len(calls)
    calls.clear()
    ours = _ours(tower, features, counts)
    plan = AudioTowerPlan.build(counts, tower.n_window)
    assert len(calls) == 3
    assert all(tuple(shape) == (plan.num_chunks, 2, plan.max_seqlen, 8) for shape in calls)
    assert reference_calls == 3 * plan.num_chunks  # one per chunk per layer
    torch.testing.assert_close(ours, reference, atol=1e-5, rtol=0)


@torch.no_grad()
def test_empty_batch_gives_no_rows(tower):
    plan = AudioTowerPlan.build([], tower.n_window)
    chunks = chunk_features(torch.zeros(128, 0), plan)
    assert chunks.shape == (0, 128, 0)
    out = run_audio_tower(tower, chunks, plan)
    assert out.shape == (0, tower.proj.out_features) and plan.token_counts == ()


def _segment_attention(q, k, v, cu, scale):
    """Per-segment SDPA over packed [T, heads, dim]: what a varlen kernel computes."""
    out = torch.empty_like(q)
    bounds = cu.tolist()
    for start, end in itertools.pairwise(bounds):
        seg = [t[start:end].transpose(0, 1) for t in (q, k, v)]
        out[start:end] = torch.nn.functional.scaled_dot_product_attention(*seg, scale=scale).transpose(0, 1)
    return out


@torch.no_grad()
def test_varlen_backends_get_the_packed_layout(tower, monkeypatch):
    """flash_attn and torch varlen run only on CUDA; stand-ins with their signatures check what
    run_audio_tower hands them (packed q/k/v, int32 cu_seqlens, max_seqlen, scale)."""
    seen = []

    def flash(q, k, v, cu_q, cu_k, max_q, max_k, dropout_p, softmax_scale, causal):
        seen.append(("flash", cu_q.dtype, max_q, max_k, dropout_p, causal))
        assert cu_q is cu_k and q.shape == k.shape == v.shape and q.dim() == 3
        return _segment_attention(q, k, v, cu_q, softmax_scale)

    def varlen(q, k, v, cu_q, cu_k, max_q, max_k, *, scale=None):
        seen.append(("varlen", cu_q.dtype, max_q, max_k))
        return _segment_attention(q, k, v, cu_q, scale)

    monkeypatch.setattr(qat, "_flash_attn_varlen", lambda: flash)
    monkeypatch.setattr(qat, "_torch_varlen", lambda: varlen)
    counts = RAGGED["mixed"]
    features = _features(counts)
    reference = _reference(tower, features, counts)
    plan = AudioTowerPlan.build(counts, tower.n_window)
    for backend in ("flash_attn", "varlen"):
        torch.testing.assert_close(_ours(tower, features, counts, backend=backend), reference, atol=1e-5, rtol=0)
    assert seen[0] == ("flash", torch.int32, plan.max_seqlen, plan.max_seqlen, 0.0, False)
    assert seen[-1] == ("varlen", torch.int32, plan.max_seqlen, plan.max_seqlen)
    assert len(seen) == 2 * len(tower.layers)


def test_backend_choice_order(monkeypatch):
    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    monkeypatch.setattr(qat, "_flash_attn_varlen", lambda: object())
    assert attention_backend(cuda, torch.bfloat16, 64) == "flash_attn"
    assert attention_backend(cuda, torch.float32, 64) == "sdpa_padded"  # flash kernels are half-precision only
    assert attention_backend(cuda, torch.float16, 512) == "sdpa_padded"
    assert attention_backend(cpu, torch.bfloat16, 64) == "sdpa_padded"
    monkeypatch.setattr(qat, "_flash_attn_varlen", lambda: None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert attention_backend(cuda, torch.float16, 64) == "varlen"
    assert attention_backend(cuda, torch.float16, 12) == "sdpa_padded"  # torch's flash wants head_dim % 8 == 0
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    assert attention_backend(cuda, torch.bfloat16, 64) == "sdpa_padded"


def test_bad_inputs_say_what_is_wrong(tower):
    with pytest.raises(ValueError, match="audio clip 1 has 0 log-mel frames"):
        AudioTowerPlan.build([5, 0, 7], 100)
    plan = AudioTowerPlan.build([5, 300], 100)
    with pytest.raises(ValueError, match="304 frames, the plan's clips 305"):
        chunk_features(torch.zeros(128, 304), plan)
    with pytest.raises(ValueError, match=r"chunks must be \[3, n_mels, 200\]"):
        run_audio_tower(tower, torch.zeros(2, 128, 200), plan)
    with pytest.raises(ValueError, match="backend must be one of"):
        run_audio_tower(tower, chunk_features(torch.zeros(128, 305), plan), plan, backend="cudnn")


@torch.no_grad()
def test_loaded_checkpoint_with_device_log_mel_equals_its_hidden_tower_call(tmp_path):
    """The path the scorer will take: a tiny SDiaReward checkpoint, a window's clips through
    whisper_log_mel and the plan, equal to the tower call in SDiaRewardQwenOmni.hidden on collate's batch."""
    from sdscore.models.episodes import Episode, Turn
    from sdscore.models.loading import load_reward_model
    from sdscore.models.whisper_log_mel import whisper_log_mel
    from tiny_reward_models import build_tiny_sdiareward

    ckpt, base = build_tiny_sdiareward(tmp_path / "ckpt", tmp_path / "base")
    model = load_reward_model(ckpt, base=base)
    rng = np.random.default_rng(3)
    clips = [(0.3 * rng.standard_normal(round(s * 16000))).astype(np.float32) for s in (0.05, 2.0, 4.0, 9.1)]
    episode = Episode(tuple(Turn("user" if i % 2 == 0 else "assistant", None, f"{i}.wav") for i in range(4)))
    item = model.prepare(episode, clips)
    batch = model.collate([item])
    prepared = item.inputs["features"]  # clip_features, as transformers' processor computes them
    reference = _reference(model.backbone.audio_tower, torch.cat(prepared, dim=1), [f.shape[1] for f in prepared])
    torch.testing.assert_close(model._audio_states(batch), reference, atol=1e-5, rtol=0)  # what hidden() runs
    features = whisper_log_mel(clips, model.feature_extractor)
    plan = AudioTowerPlan.build([f.shape[1] for f in features], model.backbone.audio_tower.n_window)
    ours = run_audio_tower(model.backbone.audio_tower, chunk_features(torch.cat(features, dim=1), plan), plan)
    assert sum(plan.token_counts) == int((batch["input_ids"] == model.audio_token_id).sum())
    torch.testing.assert_close(ours, reference, atol=1e-5, rtol=0)
