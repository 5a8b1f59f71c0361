"""RewardScorer: batched == one-by-one, bad episodes isolated, pairs, pooled states, resumable output."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
import soundfile as sf
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sdscore.errors import SdscoreError
from sdscore.models.base import Prepared, RewardModel
from sdscore.models.episodes import Episode, Turn
from sdscore.models.heads import Pooler
from sdscore.protocols.reward import POOLED_COLUMNS, score_pairs_frame
from sdscore.runtime.batching import padded_fraction, plan_batches
from sdscore.runtime.reward.episode_scorer import RewardScorer
from torch import nn

SR = 16000


class ToyModel(RewardModel):
    """Bytes of text + one token per 10 ms of audio (its RMS) → a 1-layer transformer → mean pool."""

    kind = "toy"

    def __init__(self, padding_side: str = "right", pooling: str = "mean", seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.padding_side = padding_side
        self.embed = nn.Embedding(260, 16)
        self.audio_proj = nn.Linear(1, 16)
        self.encoder = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        self.pooler = Pooler(pooling, 16)
        self.score_head = nn.Linear(16, 1, bias=False)

    def prepare(self, episode, audio):
        ids, frames = [], []
        for turn, wave in zip(episode.turns, audio):
            text = (turn.text or "").encode()[:50]
            ids += [256 + (turn.role == "assistant")] + list(text)
            frames += [0.0] * (len(text) + 1)
            if wave is not None:
                hop = SR // 100
                rms = [float(np.sqrt(np.mean(wave[i : i + hop] ** 2))) for i in range(0, len(wave) - hop + 1, hop)]
                ids += [258] * len(rms)
                frames += rms
        return Prepared(len(ids), {"ids": ids, "frames": frames})

    def collate(self, items):
        width = max(it.length for it in items)
        ids = torch.zeros(len(items), width, dtype=torch.long)
        frames = torch.zeros(len(items), width)
        mask = torch.zeros(len(items), width, dtype=torch.long)
        for b, it in enumerate(items):
            sl = slice(width - it.length, width) if self.padding_side == "left" else slice(0, it.length)
            ids[b, sl] = torch.tensor(it.inputs["ids"])
            frames[b, sl] = torch.tensor(it.inputs["frames"])
            mask[b, sl] = 1
        return {"ids": ids, "frames": frames, "mask": mask}

    def hidden(self, batch):
        x = self.embed(batch["ids"]) + self.audio_proj(batch["frames"].unsqueeze(-1))
        return self.encoder(x, src_key_padding_mask=batch["mask"] == 0), batch["mask"]

    @classmethod
    def claims(cls, path):
        return False

    @classmethod
    def from_dir(cls, path, **options):
        raise NotImplementedError


def _wav(path, seconds, freq, amp=0.3):
    t = np.arange(int(seconds * SR)) / SR
    sf.write(path, (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32), SR, subtype="FLOAT")
    return str(path)


@pytest.fixture(scope="module")
def episodes(tmp_path_factory):
    d = tmp_path_factory.mktemp("audio")
    rng = np.random.default_rng(0)
    out = []
    for i in range(23):
        turns = []
        for t in range(int(rng.integers(1, 5))):
            role = "user" if t % 2 == 0 else "assistant"
            kind = rng.integers(0, 3)
            text = None if kind == 2 else "hello there " * int(rng.integers(0, 4))
            audio = _wav(d / f"{i}-{t}.wav", float(rng.uniform(0.01, 0.6)), 200 + 50 * t) if kind else None
            turns.append(Turn(role, text if text is not None or audio else "x", audio))
        out.append(Episode(tuple(turns), "modality", f"ep{i}"))
    return out


def _one_by_one(model: RewardModel, episodes):
    scorer = RewardScorer(model, device="cpu", max_batch=1, prefetch=False)
    return torch.cat([scorer.score([e]) for e in episodes])


@pytest.mark.parametrize("padding_side", ["left", "right"])
@pytest.mark.parametrize("pooling", ["mean", "attn", "last"])
def test_batched_equals_one_by_one(episodes, padding_side, pooling):
    model = ToyModel(padding_side, pooling)
    expected = _one_by_one(model, episodes)
    for max_batch, window, prefetch in [(4, 5, True), (16, None, False), (7, 100, True)]:
        got = RewardScorer(model, device="cpu", max_batch=max_batch, window=window, prefetch=prefetch).score(episodes)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_max_tokens_and_input_order(episodes):
    model = ToyModel()
    expected = _one_by_one(model, episodes)
    got = RewardScorer(model, device="cpu", max_batch=8, max_tokens=64).score(list(reversed(episodes)))
    torch.testing.assert_close(got, expected.flip(0), atol=1e-5, rtol=0)


def test_waveforms_in_memory_equal_files(episodes):
    model = ToyModel()
    import soundfile

    in_memory = [
        Episode(tuple(Turn(t.role, t.text, None if t.audio is None else
                           (torch.from_numpy(soundfile.read(t.audio, dtype="float32")[0]) if n % 2
                            else soundfile.read(t.audio, dtype="float32")[0]))
                      for t in e.turns), e.criterion, e.id)
        for n, e in enumerate(episodes)
    ]
    scorer = RewardScorer(model, device="cpu", max_batch=8)
    torch.testing.assert_close(scorer.score(in_memory), scorer.score(episodes), atol=1e-6, rtol=0)


def test_bad_episode_is_isolated(episodes, tmp_path):
    model = ToyModel()
    broken = tmp_path / "broken.wav"
    broken.write_bytes(b"RIFF not really a wav")
    bad = Episode((Turn("user", "hi"), Turn("assistant", None, str(broken))), "modality", "bad-one")
    mixed = episodes[:5] + [bad] + episodes[5:9]
    scorer = RewardScorer(model, device="cpu", max_batch=4)
    with pytest.raises(SdscoreError, match=r"(?s)1 of 10 episodes.*bad-one: turn 1: .*broken\.wav"):
        scorer.score(mixed)
    got = scorer.score(mixed, on_error="nan")
    assert math.isnan(got[5])
    torch.testing.assert_close(torch.cat([got[:5], got[6:]]), scorer.score(episodes[:9]), atol=1e-6, rtol=0)
    _, _, errors, _ = scorer.score_detailed(mixed)
    assert [i for i, e in enumerate(errors) if e] == [5]


def test_bad_waveform_named(episodes):
    scorer = RewardScorer(ToyModel(), device="cpu")
    stereo = Episode((Turn("assistant", "a", np.zeros((2, 100), np.float32)),), None, "stereo")
    nan = Episode((Turn("assistant", "a", np.full(100, np.nan, np.float32)),), None, "nan")
    pcm = Episode((Turn("assistant", "a", np.full(100, 1000, np.int16)),), None, "pcm")
    pcm_tensor = Episode((Turn("assistant", "a", torch.full((100,), 1000, dtype=torch.int16)),), None, "pcm-t")
    _, _, errors, _ = scorer.score_detailed([stereo, episodes[0], nan, pcm, pcm_tensor])
    assert "stereo: " in errors[0] and "1-D mono" in errors[0]
    assert errors[1] is None
    assert "nan: " in errors[2] and "NaN" in errors[2]
    assert "pcm: turn 0 (episode 3): waveform is int16; pass float samples in [-1, 1]" in errors[3]
    assert "pcm-t: turn 0 (episode 4): waveform is torch.int16; pass float samples" in errors[4]
    with pytest.raises(ValueError, match="on_error"):
        scorer.score(episodes[:1], on_error="ignore")
    with pytest.raises(TypeError, match="episode 0: expected sdscore.models.Episode"):
        scorer.score(["not an episode"])


def test_score_pairs_and_pooled(episodes):
    model = ToyModel()
    scorer = RewardScorer(model, device="cpu", max_batch=3)
    pairs = list(zip(episodes[:10], episodes[10:20]))
    chosen, rejected = scorer.score_pairs(pairs)
    all_scores = scorer.score(episodes[:20])
    torch.testing.assert_close(chosen, all_scores[:10])
    torch.testing.assert_close(rejected, all_scores[10:])
    pooled = scorer.pooled(episodes[:20])
    assert pooled.shape == (20, 16)
    torch.testing.assert_close(model.head(pooled), all_scores, atol=1e-6, rtol=0)
    with pytest.raises(TypeError, match="pair 0"):
        scorer.score_pairs([episodes[0]])


def test_pair_episodes_share_a_window(episodes, monkeypatch):
    """Chosen and rejected of a pair are prepared in one call, so their shared context clips are
    read and featurised once, whatever the corpus size (the window here holds 4 episodes)."""
    model = ToyModel()
    calls = []
    original = model.prepare_many
    monkeypatch.setattr(model, "prepare_many", lambda eps, audio, **kw: calls.append([e.id for e in eps]) or original(eps, audio, **kw))
    pairs = list(zip(episodes[:10], episodes[10:20]))
    chosen, rejected = RewardScorer(model, device="cpu", max_batch=2, window=4).score_pairs(pairs)
    for c, r in pairs:
        assert any(c.id in ids and r.id in ids for ids in calls), (c.id, r.id, calls)
    assert max(len(ids) for ids in calls) <= 4
    expected = _one_by_one(model, episodes[:20])
    torch.testing.assert_close(torch.cat([chosen, rejected]), expected, atol=1e-5, rtol=0)


def test_stream_reads_ahead_on_one_thread_that_ends_with_it(episodes, monkeypatch):
    """With prefetch the next window is prepared on the read-ahead thread; breaking out of the
    stream ends it, and a window whose preparation raises is re-raised naming its episodes."""
    import threading

    from sdscore.features.batched_extraction import THREAD_NAME

    def threads():
        return [t for t in threading.enumerate() if t.name.startswith(THREAD_NAME)]

    model = ToyModel()
    scorer = RewardScorer(model, device="cpu", max_batch=2, window=4, prefetch=True)
    expected = scorer.score(episodes)
    stream = scorer.stream(episodes)
    first = next(stream)
    assert len(threads()) == 1
    torch.testing.assert_close(first.rewards, expected[:4])
    stream.close()
    assert threads() == []
    original = model.prepare_many

    def failing(eps, audio, **kw):
        if any(e.id == "ep9" for e in eps):
            raise RuntimeError("prepare broke")
        return original(eps, audio, **kw)

    monkeypatch.setattr(model, "prepare_many", failing)
    seen = []
    with pytest.raises(RuntimeError, match=r"while loading a chunk of 4 item\(s\): ep8, ep9, ep10, ep11"):
        for window in scorer.stream(episodes):
            seen.append(window.indices.tolist())
    assert seen == [[0, 1, 2, 3], [4, 5, 6, 7]] and threads() == []


def _pairs_frame(episodes, broken_path=None):
    def structs(e):
        return [{"role": t.role, "text": t.text, "audio_path": t.audio if isinstance(t.audio, str) else None}
                for t in e.turns]

    rows = []
    for i in range(10):
        rows.append({"pair_id": f"p{i}", "criterion": "modality" if i < 6 else "colloquialness",
                     "subset": None if i == 0 else ("wild" if i < 6 else "colloquial"), "category": None,
                     "source": None, "chosen": structs(episodes[i]), "rejected": structs(episodes[i + 10]),
                     "margin": None, "error": "row 3: bad margin" if i == 3 else None})
    if broken_path:
        rows[7]["rejected"] = [{"role": "assistant", "text": None, "audio_path": broken_path}]
    return pl.DataFrame(rows)


def test_score_pairs_frame_rows(episodes, tmp_path):
    broken = tmp_path / "gone.wav"
    frame = _pairs_frame(episodes, str(broken))
    scorer = RewardScorer(ToyModel(), device="cpu", max_batch=4)
    results = score_pairs_frame(frame, scorer, store_pooled=True)
    assert results["pair_id"].to_list() == [f"p{i}" for i in range(10)]
    assert results["subset"][0] == "modality"  # a missing subset is named after its criterion
    assert results["error"][3] == "row 3: bad margin"
    assert results["error"][7].startswith("rejected: p7/rejected: turn 0:") and "gone.wav" in results["error"][7]
    ok = results.filter(pl.col("error").is_null())
    assert ok.height == 8 and ok["chosen_reward"].null_count() == 0
    assert results.filter(pl.col("error").is_not_null())["chosen_reward"].null_count() == 2
    assert results.filter(pl.col("error").is_not_null())["correct"].null_count() == 2
    np.testing.assert_allclose(ok["margin"], ok["chosen_reward"] - ok["rejected_reward"])
    assert (ok["correct"] == (ok["chosen_reward"] > ok["rejected_reward"])).all()
    chosen, _ = scorer.score_pairs(list(zip(episodes[:10], episodes[10:20])))
    np.testing.assert_allclose(results["chosen_reward"][0], float(chosen[0]), atol=1e-6)
    assert results.schema[POOLED_COLUMNS[0]] == pl.Array(pl.Float32, 16)
    pooled = np.stack(ok[POOLED_COLUMNS[0]].to_numpy())
    assert pooled.shape == (8, 16) and np.isfinite(pooled).all()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 300), max_size=60), st.integers(1, 9), st.one_of(st.none(), st.integers(1, 900)))
def test_plan_batches_properties(lengths, max_batch, max_tokens):
    batches = plan_batches(lengths, max_batch, max_tokens)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert 1 <= len(b) <= max_batch
        if max_tokens is not None and len(b) > 1:
            assert max(max(1, lengths[i]) for i in b) * len(b) <= max_tokens
    assert 0.0 <= padded_fraction(lengths, batches) <= 1.0


def test_plan_batches_groups_similar_lengths():
    lengths = [10, 500, 12, 480, 11, 490]
    assert plan_batches(lengths, 3) == [[1, 5, 3], [2, 4, 0]]
    assert padded_fraction(lengths, plan_batches(lengths, 3)) < 0.05
    with pytest.raises(ValueError, match="max_batch"):
        plan_batches(lengths, 0)
