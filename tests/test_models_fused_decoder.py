"""The fused decoder forward (models/fused_decoder.py) against Hugging Face's unfused layers.

A Qwen2.5-Omni thinker language model with odd sizes (hidden 36, 3 query / 1 key-value heads of
12, MLP 77) runs padded, packed and cached forwards fused and unfused; the whole SDiaReward
model scores the same episodes both ways. float32 agrees to GEMM blocking (the fused q/k/v and
gate/up GEMMs sum in another order), bfloat16 / float16 to a few units of their last place. The
Triton kernels are forced on (TRITON_INTERPRET=1 on the CPU) for one pass, so their path through
the layer is checked too, not only the torch references.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from sdscore.kernels import decoder as decoder_ops  # noqa: E402
from sdscore.kernels import dispatch  # noqa: E402
from sdscore.models.fused_decoder import decoder_is_fused, fuse_decoder, unfuse_decoder  # noqa: E402
from sdscore.models.packed_attention import packed_inputs, packed_language_model  # noqa: E402

TOL = {torch.float32: 2e-5, torch.bfloat16: 3e-2, torch.float16: 4e-3}


def odd_text_model(dtype=torch.float32, seed=0):
    from transformers.models.qwen2_5_omni.configuration_qwen2_5_omni import Qwen2_5OmniTextConfig
    from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import Qwen2_5OmniThinkerTextModel

    config = Qwen2_5OmniTextConfig(
        vocab_size=97, hidden_size=36, intermediate_size=77, num_hidden_layers=2, num_attention_heads=3,
        num_key_value_heads=1, head_dim=12, max_position_embeddings=4096, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 2, 2]},
    )
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    model = Qwen2_5OmniThinkerTextModel(config).eval()
    with torch.no_grad():
        for layer in model.layers:  # random norm weights and biases, so a mix-up would show
            for norm in (layer.input_layernorm, layer.post_attention_layernorm):
                norm.weight.normal_(1.0, 0.3)
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0, 0.5)
    return model.to(dtype)


def _pair(dtype):
    plain = odd_text_model(dtype)
    fused = copy.deepcopy(plain)
    assert fuse_decoder(fused) == 2 * 4 + 1 and decoder_is_fused(fused) and not decoder_is_fused(plain)
    return plain, fused


def _close(got, want, dtype):
    tol = TOL[dtype]
    torch.testing.assert_close(got.float(), want.float(), rtol=tol, atol=tol)


def _padded_batch(lengths, seed=1):
    g = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.randint(0, 97, (len(lengths), width), generator=g)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, n in enumerate(lengths):
        mask[row, width - n:] = 1  # left padding, as the adapter collates
    positions = (mask.cumsum(1) - 1).clamp(min=0).expand(3, -1, -1)
    return ids, mask, positions


@pytest.fixture
def force_triton(monkeypatch):
    """Run the fused layers' ops through the Triton kernels (CPU interpreter without CUDA)."""
    if not dispatch.triton_available() or not (torch.cuda.is_available() or dispatch.interpreting()):
        pytest.skip("triton (or TRITON_INTERPRET=1) not available")
    monkeypatch.setattr(decoder_ops, "use_triton", lambda impl, x, why=None: why is None and impl != "torch")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("lengths", [[1], [7, 3, 1], [19, 19]])
def test_padded_forward_equals_the_unfused_layers(dtype, lengths):
    plain, fused = _pair(dtype)
    ids, mask, positions = _padded_batch(lengths)
    with torch.inference_mode():
        want = plain(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False).last_hidden_state
        got = fused(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False).last_hidden_state
    keep = mask.bool()
    _close(got[keep], want[keep], dtype)
    assert all("_sdscore_qkv" in layer.self_attn.__dict__ for layer in fused.layers)  # the fused path ran


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_packed_and_cached_forwards_equal_the_unfused_layers(dtype, force_triton):
    """Packed (varlen attention) and a prefix cache + continuation, with the Triton kernels in the layer."""
    plain, fused = _pair(dtype)
    g = torch.Generator().manual_seed(5)
    episodes = [torch.randint(0, 97, (n,), generator=g) for n in (1, 7, 13)]
    packed = packed_inputs(episodes)
    outs = []
    for model in (plain, fused):
        with torch.inference_mode():
            embeds = model.embed_tokens(packed["input_ids"])
            outs.append(packed_language_model(model, embeds, packed["position_ids"], packed["cu_seqlens"],
                                              packed["max_seqlen"], packed["bounds"]))
    _close(outs[1], outs[0], dtype)
    ids = torch.randint(0, 97, (1, 12), generator=g)
    outs = []
    for model in (plain, fused):
        with torch.inference_mode():
            first = model(input_ids=ids[:, :8], use_cache=True)
            rest = model(input_ids=ids[:, 8:], past_key_values=first.past_key_values, use_cache=False,
                         position_ids=torch.arange(8, 12).view(1, 1, -1).expand(3, 1, -1))
        outs.append(torch.cat([first.last_hidden_state, rest.last_hidden_state], 1))
    _close(outs[1], outs[0], dtype)


def test_weights_stay_in_the_checkpoint_layout_and_are_held_once():
    plain, fused = _pair(torch.float32)
    ids, mask, positions = _padded_batch([5, 2])
    with torch.inference_mode():
        fused(input_ids=ids, attention_mask=mask, position_ids=positions)
    assert list(fused.state_dict()) == list(plain.state_dict())
    for key, value in plain.state_dict().items():
        assert torch.equal(fused.state_dict()[key], value), key
    attn, mlp = fused.layers[0].self_attn, fused.layers[0].mlp
    qkv, _ = attn.__dict__["_sdscore_qkv"]
    assert attn.k_proj.weight.data_ptr() == qkv[attn.q_proj.weight.shape[0]:].data_ptr()  # a view, not a copy
    assert mlp.up_proj.weight.data_ptr() == mlp.__dict__["_sdscore_gate_up"][0][77:].data_ptr()
    assert not attn.q_proj.weight.is_inference()  # fused inside inference_mode, still a normal parameter
    fused.to(torch.bfloat16)  # a conversion drops the fused tensors; the next call fuses again
    assert "_sdscore_qkv" not in attn.__dict__
    with torch.inference_mode():
        got = fused(input_ids=ids, attention_mask=mask, position_ids=positions).last_hidden_state
        want = plain.to(torch.bfloat16)(input_ids=ids, attention_mask=mask, position_ids=positions).last_hidden_state
    _close(got[mask.bool()], want[mask.bool()], torch.bfloat16)
    unfuse_decoder(fused)
    assert not decoder_is_fused(fused) and type(fused.layers[0].self_attn) is type(plain.layers[0].self_attn)


def test_autocast_runs_the_original_forward():
    plain, fused = _pair(torch.float32)
    ids, mask, positions = _padded_batch([3, 5])
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        want = plain(input_ids=ids, attention_mask=mask, position_ids=positions).last_hidden_state
        got = fused(input_ids=ids, attention_mask=mask, position_ids=positions).last_hidden_state
    assert "_sdscore_qkv" not in fused.layers[0].self_attn.__dict__  # stepped aside
    assert torch.equal(got, want)


def test_training_and_autograd_run_the_original_forward():
    """With gradients the fused path steps aside, so gradients reach every projection."""
    _, fused = _pair(torch.float32)
    fused.train()
    ids, mask, positions = _padded_batch([4, 6])
    fused(input_ids=ids, attention_mask=mask, position_ids=positions).last_hidden_state.sum().backward()
    assert all(p.grad is not None for n, p in fused.named_parameters() if "layers.0" in n)


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory):
    from tiny_reward_models import build_tiny_sdiareward

    root = tmp_path_factory.mktemp("fused-decoder")
    return build_tiny_sdiareward(root / "ckpt", root / "base")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_reward_scores_equal_the_unfused_model(tiny_dirs, dtype):
    from sdscore.models.episodes import Episode, Turn
    from sdscore.models.loading import load_reward_model
    from sdscore.runtime.reward.episode_scorer import RewardScorer

    model = load_reward_model(tiny_dirs[0], base=tiny_dirs[1])
    assert decoder_is_fused(model.backbone.language_model)  # the adapter fuses at load time
    rng = np.random.default_rng(2)
    wave = lambda s: (0.1 * rng.standard_normal(int(s * 16000))).astype(np.float32)  # noqa: E731
    pairs = []
    for i in range(3):
        context = (Turn("user", f"question {i} " * (i + 1), wave(0.5 + 0.4 * i)),)
        pairs.append((Episode(context + (Turn("assistant", "yes " * (i + 2), wave(0.7)),), "modality", f"{i}/c"),
                      Episode(context + (Turn("assistant", "no", wave(0.3 + 0.2 * i)),), "modality", f"{i}/r")))
    fused = torch.stack(RewardScorer(model, dtype=dtype, max_batch=4).score_pairs(pairs))
    assert "_sdscore_gate_up" in model.backbone.language_model.layers[1].mlp.__dict__  # the fused path ran
    unfuse_decoder(model.backbone.language_model)
    plain = torch.stack(RewardScorer(model, dtype=dtype, max_batch=4).score_pairs(pairs))
    if dtype == "float32":
        torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-5)
    else:  # bf16 rounding of different GEMM blockings: a few bf16 ulps of the score scale
        assert (fused - plain).abs().max() <= 0.02 * plain.abs().max() + 0.02
