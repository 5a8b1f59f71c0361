"""Packed (varlen) continuations over cached prefixes against the padded path they replace.

Three levels: prefix_attention on random q/k/v against a float64 dense reference (each member's
queries over [its group's prefix keys ++ its own keys], causal, bottom-right aligned), on ragged
lengths with a zero-length continuation, one group, many groups and groups of one, with GQA;
the Qwen2.5-Omni thinker's grouped forward in both layouts (states at every attended position);
and RewardScorer scores with each layout. float32 agrees to 1e-5; bfloat16 to its rounding.
On CUDA the flash / torch varlen kernels are checked against the per-segment SDPA loop too.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sdscore.errors import ModelError
from sdscore.models.prefix_attention import (
    PrefixKeys,
    continuation_layout,
    gather_keys,
    lower_right_causal,
    prefix_attention,
)

CASES = {
    "one group, one member": ([5], [[3]]),
    "one group with an empty continuation": ([6], [[4, 0, 1]]),
    "many groups, ragged": ([3, 9, 1, 7], [[2, 5], [1], [4, 4, 4], [6, 1, 3, 2]]),
    "groups of one": ([2, 4, 8], [[1], [7], [3]]),
}


def _random_case(prefix_lengths, cont_lengths, heads_q=4, heads_kv=2, dim=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    tp, tc = sum(prefix_lengths), sum(n for members in cont_lengths for n in members)
    pk, pv = torch.randn(tp, heads_kv, dim, generator=g), torch.randn(tp, heads_kv, dim, generator=g)
    q = torch.randn(tc, heads_q, dim, generator=g)
    ck, cv = torch.randn(tc, heads_kv, dim, generator=g), torch.randn(tc, heads_kv, dim, generator=g)
    bounds = np.concatenate([[0], np.cumsum(prefix_lengths)]).tolist()
    group = [gi for gi, members in enumerate(cont_lengths) for _ in members]
    lengths = [n for members in cont_lengths for n in members]
    return pk, pv, q, ck, cv, continuation_layout(bounds, lengths, group), bounds, group, lengths


def _dense_reference(pk, pv, q, ck, cv, bounds, group, lengths, scale):
    """float64, one member at a time: its queries over cat(prefix of its group, its own keys), causal."""
    out, start = [], 0
    rep = q.shape[1] // pk.shape[1]
    for g, n in zip(group, lengths):
        keys = torch.cat([pk[bounds[g]:bounds[g + 1]], ck[start:start + n]]).double().repeat_interleave(rep, 1)
        values = torch.cat([pv[bounds[g]:bounds[g + 1]], cv[start:start + n]]).double().repeat_interleave(rep, 1)
        queries = q[start:start + n].double()
        scores = torch.einsum("qhd,khd->hqk", queries, keys) * scale
        prefix = bounds[g + 1] - bounds[g]
        allowed = torch.arange(keys.shape[0])[None, :] <= prefix + torch.arange(n)[:, None]
        scores = scores.masked_fill(~allowed, float("-inf"))
        out.append(torch.einsum("hqk,khd->qhd", scores.softmax(-1), values))
        start += n
    return torch.cat(out)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_prefix_attention_equals_a_dense_causal_reference(case, dtype):
    pk, pv, q, ck, cv, layout, bounds, group, lengths = _random_case(*CASES[case], seed=len(case))
    keys, values = gather_keys(pk, ck, layout.key_index), gather_keys(pv, cv, layout.key_index)
    got = prefix_attention(q.to(dtype), keys.to(dtype), values.to(dtype), layout, scaling=8 ** -0.5,
                           backend="sdpa_loop")
    want = _dense_reference(pk, pv, q, ck, cv, bounds, group, lengths, 8 ** -0.5)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)
    assert layout.bounds_q[-1] == q.shape[0] and layout.max_k == max(
        bounds[g + 1] - bounds[g] + n for g, n in zip(group, lengths))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the flash/torch varlen kernels need CUDA")
@pytest.mark.parametrize("case", list(CASES))
def test_cuda_varlen_kernels_equal_the_sdpa_loop(case):
    from sdscore.models.packed_attention import _flash_attn_varlen, _torch_varlen

    pk, pv, q, ck, cv, layout, *_ = _random_case(*CASES[case], heads_q=16, heads_kv=2, dim=128)
    args = [t.cuda().bfloat16() for t in (q, gather_keys(pk, ck, layout.key_index), gather_keys(pv, cv, layout.key_index))]
    layout = layout.to("cuda")
    want = prefix_attention(*[a.float() for a in args], layout, scaling=128 ** -0.5, backend="sdpa_loop")
    backends = [b for b, f in (("flash_attn", _flash_attn_varlen), ("torch_varlen", _torch_varlen)) if f() is not None]
    for backend in backends:
        got = prefix_attention(*args, layout, scaling=128 ** -0.5, backend=backend)
        torch.testing.assert_close(got.float(), want, rtol=2e-2, atol=2e-2, msg=f"{backend}: {case}")


def test_layout_and_attention_errors():
    with pytest.raises(ValueError, match="3 continuation lengths for 2 group indices"):
        continuation_layout([0, 4], [1, 2, 3], [0, 0])
    with pytest.raises(ValueError, match="continuation 1: group 2 is not one of the 1 prefixes"):
        continuation_layout([0, 4], [1, 2], [0, 2])
    with pytest.raises(ValueError, match="continuation 0: negative length -1"):
        continuation_layout([0, 4], [-1], [0])
    pk, pv, q, ck, cv, layout, *_ = _random_case([3], [[2]])
    keys = gather_keys(pk, ck, layout.key_index)
    with pytest.raises(ValueError, match="the layout holds 2 queries and 5 keys, got 1 and 5"):
        prefix_attention(q[:1], keys, keys, layout)
    with pytest.raises(ValueError, match="unknown attention backend 'cudnn'"):
        prefix_attention(q, keys, keys, layout, backend="cudnn")
    with pytest.raises(ValueError, match="4 query heads are not a multiple of 3"):
        prefix_attention(q, keys.repeat(1, 2, 1)[:, :3], keys[:, :1].expand(-1, 3, -1), layout)
    with pytest.raises(ModelError, match="needs transformers' DynamicCache"):
        PrefixKeys.from_cache(object(), layout)
    assert lower_right_causal(2, 4).tolist() == [[True, True, True, False], [True, True, True, True]]


# ---- the Qwen2.5-Omni thinker in both layouts ------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    pytest.importorskip("transformers")
    from sdscore.models.loading import load_reward_model
    from tiny_reward_models import build_tiny_sdiareward

    root = tmp_path_factory.mktemp("prefix-continuation")
    ckpt, base = build_tiny_sdiareward(root / "ckpt", root / "base")
    return load_reward_model(ckpt, base=base)


def _episodes(n_groups, sizes, seed=0):
    from sdscore.models.episodes import Episode, Turn

    rng = np.random.default_rng(seed)
    wave = lambda s: (0.1 * rng.standard_normal(int(s * 16000))).astype(np.float32)  # noqa: E731
    episodes, audio = [], []
    for g in range(n_groups):
        context_wave = wave(0.4 + 0.3 * g)
        context = (Turn("user", f"context {g} " * (1 + g), "ctx"),)
        for k in range(sizes[g % len(sizes)]):
            reply = "ok" if k % 2 else "a much longer reply " * (1 + k)  # answers of very different lengths
            episodes.append(Episode(context + (Turn("assistant", reply, "r" if k % 3 else None),), "modality", f"{g}/{k}"))
            audio.append([context_wave, wave(0.2 + 0.15 * k) if k % 3 else None])
    return episodes, audio


@pytest.mark.parametrize("n_groups, sizes", [(1, [1]), (1, [5]), (4, [2, 1, 3]), (3, [1])])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grouped_states_equal_in_both_layouts(tiny_model, n_groups, sizes, dtype):
    model = tiny_model.to(dtype)
    try:
        episodes, audio = _episodes(n_groups, sizes)
        items = model.prepare_many(episodes, audio)
        groups, start = [], 0
        for g in range(n_groups):
            members = items[start:start + sizes[g % len(sizes)]]
            start += len(members)
            prefix = min((model.shared_prefix(members[0], m) for m in members[1:]), default=members[0].length - 1)
            groups.append((members, prefix))
        batch = model.collate_groups(groups)
        from sdscore.models.base import batch_to

        batch = batch_to(batch, "cpu", dtype)
        outs = {}
        for layout in ("padded", "varlen"):
            model.continuation_layout = layout
            with torch.inference_mode():
                outs[layout] = model.hidden_grouped(batch)
        tol = 1e-5 if dtype == torch.float32 else 3e-2
        (p1, pm, c1, cm, _), (p2, _, c2, _, _) = outs["padded"], outs["varlen"]
        torch.testing.assert_close(p2[pm.bool()].float(), p1[pm.bool()].float(), rtol=tol, atol=tol)
        torch.testing.assert_close(c2[cm.bool()].float(), c1[cm.bool()].float(), rtol=tol, atol=tol)
        assert not c2[~cm.bool()].any()  # the varlen layout leaves zeros in the padding
    finally:
        model.continuation_layout = "varlen"
        model.to(torch.float32)


def test_scores_equal_with_either_continuation_layout(tiny_model):
    from sdscore.runtime.reward.episode_scorer import RewardScorer

    episodes, audio = _episodes(5, [2, 3, 1])
    episodes = [e.__class__(tuple(t.__class__(t.role, t.text, w) for t, w in zip(e.turns, a)), e.criterion, e.id)
                for e, a in zip(episodes, audio)]
    scores = {}
    for layout in ("padded", "varlen"):
        tiny_model.continuation_layout = layout
        scores[layout] = RewardScorer(tiny_model, share_prefixes=True, max_batch=6).score(episodes)
    tiny_model.continuation_layout = "varlen"
    alone = RewardScorer(tiny_model, share_prefixes=False).score(episodes)
    torch.testing.assert_close(scores["varlen"], scores["padded"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(scores["varlen"], alone, rtol=1e-5, atol=1e-5)


def test_continuation_calls_refuse_what_they_cannot_run(tiny_model):
    from sdscore.models.packed_attention import packed_attention_forward
    from sdscore.models.prefix_continuation import grouped_states

    pk, pv, q, ck, cv, layout, *_ = _random_case([3], [[2]])
    prefix = PrefixKeys([pk.transpose(0, 1).unsqueeze(0)], [pv.transpose(0, 1).unsqueeze(0)], layout)
    module = type("Layer", (), {"layer_idx": 0})()
    query, key = q.transpose(0, 1).unsqueeze(0), ck.transpose(0, 1).unsqueeze(0)
    with pytest.raises(ValueError, match="a packed continuation call takes no attention_mask"):
        packed_attention_forward(module, query, key, key, torch.ones(1, 1, 2, 5, dtype=torch.bool), sdscore_prefix=prefix)
    with pytest.raises(ValueError, match="a packed continuation call has batch 1"):
        prefix.attend(0, query.expand(2, -1, -1, -1), key, key, None)
    out, _ = packed_attention_forward(module, query, key, cv.transpose(0, 1).unsqueeze(0), None, sdscore_prefix=prefix)
    assert out.shape == (1, 2, 4, 8)
    with pytest.raises(ValueError, match="continuation layout must be one of"):
        grouped_states(tiny_model.backbone.language_model, {}, None, None, layout="ragged")


def test_collate_groups_refuses_empty_groups_and_members_without_a_continuation(tiny_model):
    with pytest.raises(ValueError, match="needs at least one group, each with at least one member"):
        tiny_model.collate_groups([])
    episodes, audio = _episodes(1, [1])
    items = tiny_model.prepare_many(episodes, audio)
    with pytest.raises(ValueError, match=f"group member 0 has no tokens after its group's {items[0].length}-token"):
        tiny_model.collate_groups([(items, items[0].length)])
