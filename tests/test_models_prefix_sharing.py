"""Pair-prefix sharing: a group's common prefix runs once, scores equal scoring each episode alone.

Checked at three levels: the pooler's prefix + continuation merge against the pooler over the
concatenated sequences (random states, ragged, groups of 1–8); the grouping and batch planning
of runtime/reward/prefix_groups.py; and the SDiaReward (Qwen2.5-Omni) adapter end to end, where
RewardScorer with sharing must give the scores of sharing off and of one episode at a time, for
mean, attention and last-token pooling, pairs and rollout-style groups, in float32 and bfloat16.
"""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf
import torch
from sdscore.models.base import Prepared
from sdscore.models.episodes import Episode, Turn
from sdscore.models.heads import Pooler
from sdscore.runtime.reward.prefix_groups import MIN_PREFIX, PrefixGroup, group_by_prefix, plan_group_batches

# ---- the pooler's merge ------------------------------------------------------------------------


def _ragged(rng, group_sizes, hidden=16, max_prefix=9, max_cont=7):
    """Prefix states (left padded), continuation states (right padded) and their concatenation per member."""
    g = len(group_sizes)
    prefix_len = rng.integers(1, max_prefix + 1, g)
    width_p = int(prefix_len.max())
    prefix = torch.randn(g, width_p, hidden)
    prefix_mask = torch.zeros(g, width_p, dtype=torch.long)
    for i, n in enumerate(prefix_len):
        prefix_mask[i, width_p - n:] = 1
    group = torch.tensor([i for i, k in enumerate(group_sizes) for _ in range(k)])
    cont_len = rng.integers(1, max_cont + 1, len(group))
    width_c = int(cont_len.max())
    cont = torch.randn(len(group), width_c, hidden)
    cont_mask = torch.zeros(len(group), width_c, dtype=torch.long)
    for i, n in enumerate(cont_len):
        cont_mask[i, :n] = 1
    whole = [torch.cat([prefix[gi, width_p - prefix_len[gi]:], cont[n, : cont_len[n]]]) for n, gi in enumerate(group.tolist())]
    return prefix, prefix_mask, cont, cont_mask, group, whole


@pytest.mark.parametrize("kind", ["mean", "attn", "last"])
@pytest.mark.parametrize("sizes", [[1], [2, 2, 2], [8], [1, 3, 5, 8]])
def test_pool_prefixed_equals_pooling_the_concatenation(kind, sizes):
    rng = np.random.default_rng(len(sizes) * 7 + sum(sizes))
    torch.manual_seed(0)
    pooler = Pooler(kind, 16, impl="torch")
    if kind == "attn":
        torch.nn.init.normal_(pooler.attn.weight, std=2.0)  # peaked softmax: the log-sum-exp merge matters
    prefix, prefix_mask, cont, cont_mask, group, whole = _ragged(rng, sizes)
    got = pooler.pool_prefixed(prefix, prefix_mask, cont, cont_mask, group)
    width = max(len(w) for w in whole)
    padded = torch.zeros(len(whole), width, 16)
    mask = torch.zeros(len(whole), width, dtype=torch.long)
    for n, w in enumerate(whole):  # left padding, as the adapter collates
        padded[n, width - len(w):] = w
        mask[n, width - len(w):] = 1
    want = pooler(padded, mask)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_pool_prefixed_last_refuses_an_empty_continuation():
    pooler = Pooler("last", 4, impl="torch")
    with pytest.raises(ValueError, match="non-empty continuation"):
        pooler.pool_prefixed(torch.randn(1, 3, 4), torch.ones(1, 3, dtype=torch.long), torch.randn(1, 2, 4),
                             torch.zeros(1, 2, dtype=torch.long), torch.zeros(1, dtype=torch.long))


# ---- grouping and batch plans ------------------------------------------------------------------


def _item(tokens):
    ids = torch.tensor(tokens, dtype=torch.long)
    return Prepared(length=len(tokens), inputs={"input_ids": ids})


def _lcp(a: Prepared, b: Prepared) -> int:
    x, y = a.inputs["input_ids"].numpy(), b.inputs["input_ids"].numpy()
    n = min(len(x), len(y)) - 1
    differ = np.flatnonzero(x[:n] != y[:n])
    return int(differ[0]) if len(differ) else max(n, 0)


SYSTEM = list(range(1000, 1000 + 40))  # a system prompt every episode starts with


def test_pairs_group_by_their_context_not_by_the_system_prompt():
    items = []
    for pair in range(4):
        context = SYSTEM + [pair] * (30 + pair)
        items += [_item(context + [7, 7, 7]), _item(context + [8, 8])]
    groups, single = group_by_prefix(items, _lcp, max_group=8)
    assert [g.members for g in groups] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert [g.prefix for g in groups] == [len(SYSTEM) + 30 + p for p in range(4)]
    assert single == []


def test_a_rollout_group_shares_its_prompt_even_when_two_samples_share_more():
    prompt = SYSTEM + [5] * 20
    samples = [prompt + [1, 2, 3, 4], prompt + [1, 2, 3, 9], prompt + [6, 6], prompt + [7], prompt + [8, 8, 8]]
    groups, single = group_by_prefix([_item(s) for s in samples], _lcp, max_group=8)
    assert len(groups) == 1 and groups[0].members == [0, 1, 2, 3, 4] and groups[0].prefix == len(prompt)
    assert single == []


def test_grouping_limits_short_prefixes_and_group_size():
    short = [_item([1] * (MIN_PREFIX - 1) + [2]), _item([1] * (MIN_PREFIX - 1) + [3])]
    groups, single = group_by_prefix(short, _lcp, max_group=8)
    assert groups == [] and single == [0, 1]
    same = [_item(SYSTEM + [k]) for k in range(7)]
    groups, single = group_by_prefix(same, _lcp, max_group=3)
    assert [len(g.members) for g in groups] == [3, 3] and single == [6]
    with pytest.raises(ValueError, match="max_group"):
        group_by_prefix(same, _lcp, max_group=0)


def test_group_batches_respect_limits_and_cover_every_group():
    rng = np.random.default_rng(3)
    groups, lengths = [], []
    for g in range(20):
        size, prefix = int(rng.integers(2, 6)), int(rng.integers(20, 200))
        members = list(range(len(lengths), len(lengths) + size))
        lengths += [prefix + int(rng.integers(1, 50)) for _ in range(size)]
        groups.append(PrefixGroup(members, prefix))
    batches = plan_group_batches(groups, lengths, max_batch=8, max_tokens=1500)
    assert sorted(i for b in batches for i in b) == list(range(20))
    for b in batches:
        episodes = sum(len(groups[i].members) for i in b)
        width_p = max(groups[i].prefix for i in b)
        width_c = max(lengths[m] - groups[i].prefix for i in b for m in groups[i].members)
        if len(b) > 1:
            assert episodes <= 8 and len(b) * width_p + episodes * width_c <= 1500
    huge = [PrefixGroup([0, 1, 2], 5000)]
    assert plan_group_batches(huge, [5001, 5002, 5003], max_batch=2, max_tokens=100) == [[0]]


# ---- the SDiaReward adapter end to end -----------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory):
    pytest.importorskip("transformers")
    from tiny_reward_models import build_tiny_sdiareward

    root = tmp_path_factory.mktemp("prefix-sharing")
    return {p: build_tiny_sdiareward(root / f"ckpt-{p}", root / f"base-{p}", pooling=p) for p in ("mean", "attn")}


def _load(dirs, pooling):
    from sdscore.models.loading import load_reward_model

    ckpt, base = dirs["attn" if pooling == "attn" else "mean"]
    return load_reward_model(ckpt, base=base, pooling=pooling)


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    folder = tmp_path_factory.mktemp("prefix-clips")
    rng = np.random.default_rng(11)

    def clip(name: str, seconds: float) -> str:
        path = folder / f"{name}.wav"
        sf.write(path, (0.1 * rng.standard_normal(int(16000 * seconds))).astype(np.float32), 16000)
        return str(path)

    return clip


def _pairs(clip, n=5):
    pairs = []
    for i in range(n):
        context = tuple(Turn("user" if t % 2 == 0 else "assistant", f"context {i} turn {t}", clip(f"c{i}-{t}", 0.4 + 0.3 * t))
                        for t in range(1 + 2 * (i % 2)))
        chosen = Episode(context + (Turn("assistant", "a chosen reply " * (1 + i % 3), clip(f"a{i}", 0.9)),), "modality", f"{i}/c")
        rejected = Episode(context + (Turn("assistant", "no", clip(f"b{i}", 0.2 + 0.25 * i)),), "modality", f"{i}/r")
        pairs.append((chosen, rejected))
    return pairs


@pytest.mark.parametrize("pooling", ["mean", "attn", "last"])
def test_scorer_with_sharing_equals_without_and_one_by_one(tiny_dirs, clips, pooling):
    from sdscore.runtime.reward.episode_scorer import RewardScorer

    model = _load(tiny_dirs, pooling)
    pairs = _pairs(clips)
    shared = RewardScorer(model, share_prefixes=True, max_batch=4)
    assert shared.share_prefixes
    batches = shared._prepare_window([e for p in pairs for e in p], np.arange(2 * len(pairs))).batches
    assert sum("group_index" in b for _, b in batches) >= 2  # pairs were grouped, several groups per batch
    with_sharing = torch.stack(shared.score_pairs(pairs))
    plain = RewardScorer(model, share_prefixes=False, max_batch=4)
    without = torch.stack(plain.score_pairs(pairs))
    alone = torch.tensor([[float(plain.score([e])[0]) for e in pair] for pair in pairs]).T
    torch.testing.assert_close(with_sharing, without, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(with_sharing, alone, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("group_size", [1, 2, 5, 8])
def test_rollout_groups_of_responses_equal_scoring_each_alone(tiny_dirs, clips, group_size):
    from sdscore.runtime.reward.episode_scorer import RewardScorer

    model = _load(tiny_dirs, "mean")
    prompt = (Turn("user", "tell me about the weather", clips("prompt", 1.1)),)
    episodes = []
    for k in range(group_size):
        reply = Turn("assistant", "it is sunny " * (k + 1), clips(f"reply{k}", 0.3 + 0.2 * k))
        episodes.append(Episode(prompt + (reply,), "modality", f"r{k}"))
    other = Episode((Turn("user", "a different prompt", clips("other", 0.5)), Turn("assistant", "ok", None)),
                    "modality", "other")
    episodes.append(other)
    shared = RewardScorer(model, share_prefixes=True, max_batch=8)
    got = shared.score(episodes)
    alone = torch.tensor([float(RewardScorer(model, share_prefixes=False).score([e])[0]) for e in episodes])
    torch.testing.assert_close(got, alone, rtol=1e-5, atol=1e-5)


def test_same_tokens_but_different_audio_is_not_shared(tiny_dirs, clips):
    """Two contexts whose clips have the same length tokenise identically: the prefix must stop at the clip."""
    model = _load(tiny_dirs, "mean")
    first, second = clips("same-len-1", 0.8), clips("same-len-2", 0.8)
    a = Episode((Turn("user", "hello", first), Turn("assistant", "answer one", None)), "modality", "a")
    b = Episode((Turn("user", "hello", second), Turn("assistant", "answer two", None)), "modality", "b")
    from sdscore.audio import load

    items = model.prepare_many([a, b], [[load(first, 16000), None], [load(second, 16000), None]])
    start = int(items[0].inputs["clip_spans"][0, 0])
    ids_a, ids_b = items[0].inputs["input_ids"], items[1].inputs["input_ids"]
    assert torch.equal(ids_a[: start + 10], ids_b[: start + 10])  # tokens alone would share past the clip
    assert model.shared_prefix(items[0], items[1]) == start
    same = model.prepare_many([a, a], [[load(first, 16000), None]] * 2)
    assert model.shared_prefix(same[0], same[1]) == same[0].length - 1


def test_a_shared_clip_is_featurised_once(tiny_dirs, clips):
    from sdscore.audio import load

    model = _load(tiny_dirs, "mean")
    wave = load(clips("ctx-once", 0.7), 16000)
    a = Episode((Turn("user", "hi", "x"), Turn("assistant", "one", None)), "modality", "a")
    b = Episode((Turn("user", "hi", "x"), Turn("assistant", "two", None)), "modality", "b")
    items = model.prepare_many([a, b], [[wave, None], [wave, None]])
    assert items[0].inputs["features"][0] is items[1].inputs["features"][0]


def test_bfloat16_sharing_stays_within_bf16_tolerance(tiny_dirs, clips):
    from sdscore.runtime.reward.episode_scorer import RewardScorer

    model = _load(tiny_dirs, "mean")
    pairs = _pairs(clips, n=3)
    shared = torch.stack(RewardScorer(model, dtype="bfloat16", share_prefixes=True).score_pairs(pairs))
    plain = torch.stack(RewardScorer(model, dtype="bfloat16", share_prefixes=False).score_pairs(pairs))
    reference = torch.stack(RewardScorer(model, dtype="float32", share_prefixes=False).score_pairs(pairs))
    # bf16 keeps 8 bits of mantissa: both bf16 runs sit within the same distance of float32
    assert (shared - reference).abs().max() <= 0.05 * reference.abs().max() + 0.05
    assert (shared - plain).abs().max() <= 0.05 * reference.abs().max() + 0.05


@pytest.mark.parametrize("pooling", ["mean", "attn", "last"])
def test_packed_and_grouped_scoring_equal_the_padded_forward(tiny_dirs, clips, pooling):
    """The scorer's two inference layouts (packed rows, shared prefixes) against hidden() on collate()."""
    from sdscore.audio import load
    from sdscore.runtime.reward.episode_scorer import RewardScorer

    model = _load(tiny_dirs, pooling)
    episodes = [e for pair in _pairs(clips, n=4) for e in pair]
    waves = [[None if t.audio is None else load(t.audio, 16000) for t in e.turns] for e in episodes]
    with torch.inference_mode():
        padded = model(model.collate([model.prepare(e, w) for e, w in zip(episodes, waves)]))
    for share in (False, True):
        got = RewardScorer(model, share_prefixes=share, max_batch=8).score(episodes)
        torch.testing.assert_close(got, padded, rtol=1e-5, atol=1e-5)


def test_token_positions_equal_get_rope_index(tiny_dirs, clips):
    from sdscore.audio import load
    from sdscore.models.sdiareward_qwen import token_positions

    model = _load(tiny_dirs, "mean")
    episodes = [e for pair in _pairs(clips, n=3) for e in pair]
    items = [model.prepare(e, [None if t.audio is None else load(t.audio, 16000) for t in e.turns]) for e in episodes]
    batch = model.collate(items)
    lengths = torch.tensor([f.shape[1] for item in items for f in item.inputs["features"]])
    rope, _ = model.backbone.get_rope_index(batch["input_ids"], None, None, batch["attention_mask"], False, lengths, None)
    keep = batch["attention_mask"].bool().expand(3, -1, -1)
    assert torch.equal(token_positions(batch["attention_mask"])[keep], rope[keep])


def test_cli_option_turns_sharing_off_without_changing_the_resume_settings(tiny_dirs):
    from sdscore.cli import build_parser
    from sdscore.protocols.reward.options import score_settings
    from sdscore.protocols.reward.scorer import scoring_job

    ckpt, base = tiny_dirs["mean"]
    parser = build_parser()
    on = parser.parse_args(["score", "reward", "m.parquet", "--out", "o.parquet", "--model", str(ckpt), "--base", str(base)])
    off = parser.parse_args(["score", "reward", "m.parquet", "--out", "o.parquet", "--model", str(ckpt), "--base", str(base),
                             "--no-prefix-sharing"])
    job_on, job_off = scoring_job(**score_settings(on)), scoring_job(**score_settings(off))
    assert job_on.settings["share_prefixes"] is True and job_off.settings["share_prefixes"] is False
    assert job_on.score_settings() == job_off.score_settings()  # a resumed run may switch it
    assert job_off.create().scorer.share_prefixes is False
