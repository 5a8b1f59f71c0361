"""Packed (padding-free) forward on the tiny SDiaReward layout: equal to the left-padded forward's
valid positions, no dense mask, pooled states equal to the padded Pooler's."""

from __future__ import annotations

import math
from itertools import pairwise

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from sdscore.models import packed_attention as pa
from sdscore.models.episodes import Episode, Turn
from sdscore.models.loading import load_reward_model
from tiny_reward_models import build_tiny_sdiareward

SR = 16000
TOL = 1e-5

#: ragged batches: 1 to 8 episodes, lengths differing a lot, 1-token episodes
RAGGED = [[7], [1], [1, 1], [3, 120], [120, 1, 33], [64, 2, 1, 90, 17], [5, 200, 1, 9, 48, 77, 2, 130]]


def _wave(seconds: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(round(seconds * SR)) / SR
    return (0.3 * np.sin(2 * np.pi * (150 + 40 * seed) * t) + 0.05 * rng.standard_normal(len(t))).astype(np.float32)


def _episodes() -> list[tuple[Episode, list[np.ndarray | None]]]:
    """Audio + text, audio only, text only, own system turn: lengths all differ."""
    a, b, c = _wave(1.0, 1), _wave(0.55, 2), _wave(3.1, 3)
    return [
        (Episode((Turn("user", "hello there", "u.wav"), Turn("assistant", "hi! how can I help?", "a.wav")), id="av"),
         [a, b]),
        (Episode((Turn("user", "text only, please"), Turn("assistant", "ok")), id="text"), [None, None]),
        (Episode((Turn("user", "what's up"), Turn("assistant", None, "a.wav")), id="audio"), [None, c]),
        (Episode((Turn("system", "Be brief."), Turn("user", None, "u.wav"), Turn("assistant", "fine")), id="sys"),
         [None, b, None]),
    ]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("packed")
    mean_ckpt, base = build_tiny_sdiareward(root / "mean", root / "base", pooling="mean", seed=0)
    attn_ckpt, _ = build_tiny_sdiareward(root / "attn", root / "base_attn", pooling="attn", seed=1)
    return {"mean": mean_ckpt, "attn": attn_ckpt, "base": base}


@pytest.fixture(scope="module")
def models(tiny):
    """reference: untouched (sdpa); packed: the same weights, switched to the packed implementation."""
    reference = load_reward_model(tiny["mean"], base=tiny["base"])
    packed = load_reward_model(tiny["mean"], base=tiny["base"])
    pa.use_packed_attention(packed.backbone.language_model)
    assert reference.backbone.language_model.config._attn_implementation == "sdpa"
    return reference, packed


def _padded_states(model, embeds_list: list[torch.Tensor]) -> list[torch.Tensor]:
    """Left-padded LM forward (positions from get_rope_index over the mask, as hidden() does)."""
    width = max(e.shape[0] for e in embeds_list)
    hidden = embeds_list[0].shape[1]
    embeds = torch.zeros(len(embeds_list), width, hidden)
    mask = torch.zeros(len(embeds_list), width, dtype=torch.long)
    for row, e in enumerate(embeds_list):
        embeds[row, width - e.shape[0]:] = e
        mask[row, width - e.shape[0]:] = 1
    ids = torch.zeros(len(embeds_list), width, dtype=torch.long)
    positions, _ = model.backbone.get_rope_index(ids, None, None, mask, False, None, None)
    out = model.backbone.language_model(inputs_embeds=embeds, attention_mask=mask, position_ids=positions,
                                        use_cache=False).last_hidden_state
    return [out[row, width - e.shape[0]:] for row, e in enumerate(embeds_list)]


def _packed_states(model, embeds_list: list[torch.Tensor]) -> tuple[torch.Tensor, dict]:
    inputs = pa.packed_inputs([torch.zeros(e.shape[0], dtype=torch.long) for e in embeds_list])
    states = pa.packed_language_model(
        model.backbone.language_model, torch.cat(embeds_list)[None], inputs["position_ids"], inputs["cu_seqlens"],
        inputs["max_seqlen"], inputs["bounds"],
    )
    return states, inputs


@pytest.mark.parametrize("lengths", RAGGED, ids=lambda x: "-".join(map(str, x)))
def test_packed_lm_equals_padded_valid_positions(models, lengths):
    reference, packed = models
    gen = torch.Generator().manual_seed(len(lengths))
    embeds = [torch.randn(n, reference.hidden_size, generator=gen) for n in lengths]
    with torch.no_grad():
        expected = _padded_states(reference, embeds)
        states, inputs = _packed_states(packed, embeds)
    assert states.shape == (sum(lengths), reference.hidden_size)
    for n, (start, stop) in enumerate(pairwise(inputs["bounds"])):
        torch.testing.assert_close(states[start:stop], expected[n], atol=TOL, rtol=0, msg=f"episode {n}")


def _packed_thinker(model, items) -> tuple[torch.Tensor, dict]:
    """What hidden() does, packed: token embeddings of the concatenated ids, the audio tower over
    every clip (same order: episodes then turns), scattered over the <|AUDIO|> slots."""
    inputs = pa.packed_inputs([item.inputs["input_ids"] for item in items])
    ids = inputs["input_ids"]
    embeds = model.backbone.get_input_embeddings()(ids)
    clips = [f for item in items for f in item.inputs["features"]]
    if clips:
        lengths = torch.tensor([f.shape[1] for f in clips])
        audio = model.backbone.audio_tower(torch.cat(clips, dim=1), feature_lens=lengths,
                                           aftercnn_lens=(lengths - 1) // 2 + 1).last_hidden_state
        embeds = embeds.masked_scatter((ids == model.audio_token_id).unsqueeze(-1), audio.to(embeds.dtype))
    states = pa.packed_language_model(model.backbone.language_model, embeds, inputs["position_ids"],
                                      inputs["cu_seqlens"], inputs["max_seqlen"], inputs["bounds"])
    return states, inputs


def test_packed_thinker_with_audio_equals_padded_hidden(models):
    reference, packed = models
    items = [reference.prepare(e, a) for e, a in _episodes()]
    assert len({item.length for item in items}) == len(items)
    with torch.no_grad():
        hidden, mask = reference.hidden(reference.collate(items))
        states, inputs = _packed_thinker(packed, items)
    for n, (start, stop) in enumerate(pairwise(inputs["bounds"])):
        torch.testing.assert_close(states[start:stop], hidden[n][mask[n].bool()], atol=TOL, rtol=0)


def test_positions_equal_get_rope_index_for_audio_and_text(models):
    reference, _ = models
    items = [reference.prepare(e, a) for e, a in _episodes()]
    inputs = pa.packed_inputs([item.inputs["input_ids"] for item in items])
    for n, item in enumerate(items):
        ids = item.inputs["input_ids"][None]
        frames = [f.shape[1] for f in item.inputs["features"]]
        seqlens = torch.tensor(frames) if frames else None
        rope, _ = reference.backbone.get_rope_index(ids, None, None, torch.ones_like(ids), False, seqlens, None)
        start, stop = inputs["bounds"][n], inputs["bounds"][n + 1]
        assert torch.equal(inputs["position_ids"][:, :, start:stop], rope), f"episode {n}"


@pytest.mark.parametrize("pooling", ["mean", "last", "attn"])
def test_packed_pooling_equals_padded_pooler(tiny, models, pooling):
    ckpt = tiny["attn"] if pooling == "attn" else tiny["mean"]
    reference = load_reward_model(ckpt, base=tiny["base"], pooling=pooling)
    packed = load_reward_model(ckpt, base=tiny["base"], pooling=pooling)
    items = [reference.prepare(e, a) for e, a in _episodes()]
    with torch.no_grad():
        batch = reference.collate(items)
        expected = reference.pooled(batch)
        scores = reference(batch)
        states, inputs = _packed_thinker(packed, items)
        pooled = pa.packed_pooled(packed.pooler, states, inputs["offsets"])
    assert pooled.dtype == torch.float32 and pooled.shape == expected.shape
    torch.testing.assert_close(pooled, expected, atol=TOL, rtol=0)
    torch.testing.assert_close(packed.head(pooled), scores, atol=TOL, rtol=0)


def _naive_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bounds, scale: float) -> torch.Tensor:
    """Independent reference: explicit softmax over each sequence's causal window, float64."""
    groups = q.shape[1] // k.shape[1]
    out = torch.zeros(q.shape, dtype=torch.float64)
    for start, stop in pairwise(bounds):
        for t in range(start, stop):
            for h in range(q.shape[1]):
                scores = (k[start:t + 1, h // groups].double() @ q[t, h].double()) * scale
                out[t, h] = torch.softmax(scores, 0) @ v[start:t + 1, h // groups].double()
    return out


@pytest.mark.parametrize("heads_kv", [4, 2, 1])  # MHA, GQA groups of 2, MQA
def test_varlen_attention_equals_naive_softmax_with_gqa(heads_kv):
    gen = torch.Generator().manual_seed(heads_kv)
    lengths, heads, dim = [1, 9, 3, 1, 14], 4, 8
    total = sum(lengths)
    q = torch.randn(total, heads, dim, generator=gen)
    k, v = torch.randn(total, heads_kv, dim, generator=gen), torch.randn(total, heads_kv, dim, generator=gen)
    bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    cu = torch.tensor(bounds, dtype=torch.int32)
    assert pa.varlen_backend(q) == "sdpa_loop"
    out = pa.varlen_causal_attention(q, k, v, cu, max(lengths), scaling=0.3)
    torch.testing.assert_close(out.double(), _naive_causal(q, k, v, bounds, 0.3), atol=1e-6, rtol=0)
    default = pa.varlen_causal_attention(q, k, v, cu, max(lengths))  # scale 1/sqrt(d), as SDPA's default
    torch.testing.assert_close(default.double(), _naive_causal(q, k, v, bounds, 1 / math.sqrt(dim)), atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="not a multiple"):
        pa.varlen_causal_attention(q, torch.randn(total, 3, dim), torch.randn(total, 3, dim), cu, max(lengths))


def test_no_dense_mask_is_built(models, monkeypatch):
    _, packed = models
    from transformers import masking_utils
    from transformers.models.qwen2_5_omni import modeling_qwen2_5_omni as omni

    sdpa_calls, masks = [], []
    real_sdpa, real_causal = torch.nn.functional.scaled_dot_product_attention, omni.create_causal_mask

    def spy_sdpa(q, k, v, attn_mask=None, *args, **kwargs):
        sdpa_calls.append((tuple(q.shape), attn_mask))
        return real_sdpa(q, k, v, attn_mask, *args, **kwargs)

    def spy_causal(*args, **kwargs):
        masks.append(real_causal(*args, **kwargs))
        return masks[-1]

    def no_dense(*args, **kwargs):
        raise AssertionError("a dense mask was requested")

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy_sdpa)
    monkeypatch.setattr(omni, "create_causal_mask", spy_causal)
    for name in ("sdpa_mask", "eager_mask"):
        monkeypatch.setattr(masking_utils, name, no_dense)
    lengths = [40, 1, 25]
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        _packed_states(packed, [torch.randn(n, packed.hidden_size, generator=gen) for n in lengths])
    layers = packed.backbone.language_model.config.num_hidden_layers
    assert masks == [None]
    assert len(sdpa_calls) == layers * len(lengths)  # one causal call per episode per layer
    assert all(mask is None for _, mask in sdpa_calls)
    assert max(shape[-2] for shape, _ in sdpa_calls) == max(lengths)  # never the packed length T


def test_register_is_idempotent_and_padded_calls_are_unchanged(models):
    reference, packed = models
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    assert pa.register() == pa.register() == pa.ATTENTION_NAME
    assert AttentionInterface._global_mapping[pa.ATTENTION_NAME] is pa.packed_attention_forward
    assert AttentionMaskInterface._global_mapping[pa.ATTENTION_NAME] is pa._packed_mask
    pa.use_packed_attention(packed.backbone.language_model)
    pa.use_packed_attention(packed.backbone.language_model)
    assert packed.backbone.language_model.config._attn_implementation == pa.ATTENTION_NAME
    assert packed.backbone.audio_tower.config._attn_implementation == "sdpa"  # the tower keeps its own
    items = [reference.prepare(e, a) for e, a in _episodes()]
    with torch.no_grad():  # the padded hidden() of the switched model: sdpa's mask and attention
        batch = reference.collate(items)
        torch.testing.assert_close(packed(batch), reference(batch), atol=1e-6, rtol=0)


def test_cached_calls_on_the_switched_model_are_unchanged(models):
    """Prefix sharing runs a continuation on cached keys (q_length < kv_length): those calls must
    still get sdpa's offset causal mask, not the packed path's None."""
    reference, packed = models
    gen = torch.Generator().manual_seed(5)
    prefix, cont = torch.randn(1, 11, packed.hidden_size, generator=gen), torch.randn(1, 4, packed.hidden_size,
                                                                                       generator=gen)
    outs = []
    with torch.no_grad():
        for model in (reference, packed):
            lm = model.backbone.language_model
            first = lm(inputs_embeds=prefix, use_cache=True)
            positions = torch.arange(11, 15).view(1, 1, -1).expand(3, 1, -1)
            outs.append(lm(inputs_embeds=cont, past_key_values=first.past_key_values, position_ids=positions,
                           use_cache=True).last_hidden_state)
        whole = reference.backbone.language_model(inputs_embeds=torch.cat([prefix, cont], 1)).last_hidden_state
    torch.testing.assert_close(outs[1], outs[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(outs[1], whole[:, 11:], atol=TOL, rtol=0)


def test_bad_packed_inputs_raise_naming_the_episode(models):
    _, packed = models
    with pytest.raises(ValueError, match="at least one episode"):
        pa.packed_inputs([])
    with pytest.raises(ValueError, match="episode 1: no tokens"):
        pa.packed_inputs([torch.ones(3, dtype=torch.long), torch.ones(0, dtype=torch.long)])
    with pytest.raises(ValueError, match="episode 0: input ids must be a 1-D integer tensor"):
        pa.packed_inputs([torch.ones(2, 3, dtype=torch.long)])
    with pytest.raises(ValueError, match="episode 1: input ids"):
        pa.packed_inputs([torch.ones(2, dtype=torch.long), torch.ones(2)])
    lm = packed.backbone.language_model
    embeds = torch.zeros(1, 5, packed.hidden_size)
    positions = torch.arange(5).view(1, 1, -1).expand(3, 1, -1)
    with pytest.raises(ValueError, match="cu_seqlens must rise from 0 to T = 5"):
        pa.packed_language_model(lm, embeds, positions, torch.tensor([0, 4], dtype=torch.int32), 4)
    with pytest.raises(ValueError, match=r"\[1, T, H\]"):
        pa.packed_language_model(lm, torch.zeros(2, 5, packed.hidden_size), positions,
                                 torch.tensor([0, 5], dtype=torch.int32), 5)
    q = torch.zeros(1, 4, 5, 8)
    with pytest.raises(ValueError, match="takes no attention_mask"):
        pa.packed_attention_forward(lm.layers[0].self_attn, q, q, q, torch.ones(1, 1, 5, 5, dtype=torch.bool),
                                    cu_seq_lens_q=torch.tensor([0, 5], dtype=torch.int32), max_length_q=5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (flash / varlen kernels)")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cuda_varlen_kernel_equals_the_sdpa_loop(dtype):
    gen = torch.Generator(device="cuda").manual_seed(0)
    lengths, heads, heads_kv, dim = [1, 300, 17, 1024, 5], 16, 2, 128
    total = sum(lengths)
    q = torch.randn(total, heads, dim, generator=gen, device="cuda", dtype=dtype)
    k = torch.randn(total, heads_kv, dim, generator=gen, device="cuda", dtype=dtype)
    v = torch.randn(total, heads_kv, dim, generator=gen, device="cuda", dtype=dtype)
    bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    cu = torch.tensor(bounds, dtype=torch.int32, device="cuda")
    assert pa.varlen_backend(q) in ("flash_attn", "torch_varlen")
    out = pa.varlen_causal_attention(q, k, v, cu, max(lengths))
    loop = pa.varlen_causal_attention(q.float(), k.float(), v.float(), cu, max(lengths), bounds=bounds)
    torch.testing.assert_close(out.float(), loop, atol=2e-2, rtol=2e-2)
