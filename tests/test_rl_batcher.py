"""RewardBatcher: concurrent one-by-one submissions give the batched scores; errors stay with their
request; a full queue refuses; close drains (or fails what is queued); batches respect the limits."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from sdscore.errors import SdscoreError
from sdscore.models.episodes import Episode, Turn
from sdscore.rl.batcher import (
    BatcherClosedError,
    EpisodeScoreError,
    QueueFullError,
    RewardBatcher,
    estimate_tokens,
)

from rl_episodes import SR, compact_scorer, episodes, wav_bytes


@pytest.fixture(scope="module")
def scorer():
    return compact_scorer()


@pytest.fixture(scope="module")
def eps():
    return episodes(48)


@pytest.fixture(scope="module")
def reference(scorer, eps):
    return scorer.score(eps).numpy()


class SlowScorer:
    """Wraps a scorer: records each batch's size and sleeps, so tests can fill the queue."""

    def __init__(self, scorer, delay: float = 0.0, gate: threading.Event | None = None):
        self.inner, self.model, self.delay, self.gate = scorer, scorer.model, delay, gate
        self.batches: list[int] = []

    def score_detailed(self, episodes):
        self.batches.append(len(episodes))
        if self.gate is not None:
            self.gate.wait(10)
        time.sleep(self.delay)
        return self.inner.score_detailed(episodes)


def _wait_until(condition, what: str) -> None:
    """Poll `condition` until it holds; the deadline is a hang guard (it fails a broken batcher instead
    of hanging the suite), never what a passing run waits for."""
    deadline = time.monotonic() + 120
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not after 120 s"
        time.sleep(0.005)


def test_concurrent_threads_equal_batched_scores(scorer, eps, reference):
    gate = threading.Event()
    spy = SlowScorer(scorer, gate=gate)
    with RewardBatcher(spy, max_batch=16, max_wait_ms=20) as batcher:
        order = list(range(len(eps)))
        random.Random(1).shuffle(order)

        def one(i):
            time.sleep(random.Random(i).uniform(0, 0.01))  # random arrival
            return i, batcher.score(eps[i], timeout=60)

        with ThreadPoolExecutor(12) as pool:
            results = pool.map(one, order)
            # the first batch waits until each thread's request is in: those queued behind it are grouped
            # whatever the machine's speed (with no gate, a slow machine could score them one by one)
            _wait_until(lambda: batcher.queue_depth + batcher.in_flight == 12, "twelve requests in")
            gate.set()
            got = dict(results)
    assert np.abs(np.array([got[i] for i in range(len(eps))]) - reference).max() <= 1e-5
    assert max(spy.batches) <= 16 and len(spy.batches) < len(eps)  # grouped, never over the cap
    assert batcher.stats.episodes == len(eps)


def test_asyncio_tasks_equal_batched_scores(scorer, eps, reference):
    async def main():
        with RewardBatcher(scorer, max_batch=64, max_wait_ms=10) as batcher:
            async def one(i):
                await asyncio.sleep(random.Random(i).uniform(0, 0.005))
                return await batcher.ascore(eps[i])

            return await asyncio.gather(*(one(i) for i in range(len(eps)))), batcher

    scores, batcher = asyncio.run(main())
    assert np.abs(np.array(scores) - reference).max() <= 1e-5
    assert batcher.stats.batches < len(eps)


def test_multi_episode_requests_keep_their_order(scorer, eps, reference):
    with RewardBatcher(scorer, max_batch=8, max_wait_ms=5) as batcher:
        futures = [batcher.submit(eps[k:k + 5]) for k in range(0, len(eps), 5)]
        got = [s for f in futures for s in f.result(60)]
    assert np.abs(np.array(got) - reference).max() <= 1e-5


def test_bad_episode_fails_only_its_own_future(scorer, eps, reference, tmp_path):
    bad_file = tmp_path / "broken.wav"
    bad_file.write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunk")
    bad = Episode((Turn("user", "hi", str(bad_file)), Turn("assistant", "hello", str(tmp_path / "missing.wav"))),
                  id="bad-one")
    with RewardBatcher(scorer, max_batch=64, max_wait_ms=50) as batcher:
        futures = [batcher.submit(e) for e in eps[:10]]
        bad_future = batcher.submit(bad)
        detailed = batcher.submit_detailed([eps[10], bad, eps[11]])
        good = [f.result(60) for f in futures]
        with pytest.raises(EpisodeScoreError, match="bad-one"):
            bad_future.result(60)
        (s0, e0), (s1, e1), (s2, e2) = detailed.result(60)
    assert np.abs(np.array(good) - reference[:10]).max() <= 1e-5
    assert e0 is None and e2 is None and s1 is None and ("broken.wav" in e1 or "missing.wav" in e1)
    assert abs(s0 - reference[10]) <= 1e-5 and abs(s2 - reference[11]) <= 1e-5


def test_a_request_that_breaks_the_batch_is_found_and_failed_alone(scorer, eps, reference):
    class Picky:
        model = scorer.model

        def score_detailed(self, episodes):
            if any(e.id == "poison" for e in episodes):
                raise RuntimeError("model crashed on poison")
            return scorer.score_detailed(episodes)

    poison = Episode((Turn("user", "x"), Turn("assistant", "y")), id="poison")
    with RewardBatcher(Picky(), max_batch=64, max_wait_ms=50) as batcher:
        futures = [batcher.submit(e) for e in eps[:6]]
        bad = batcher.submit(poison)
        assert np.abs(np.array([f.result(60) for f in futures]) - reference[:6]).max() <= 1e-5
        with pytest.raises(SdscoreError, match="poison"):
            bad.result(60)


def test_full_queue_refuses_with_clear_error(scorer, eps):
    gate = threading.Event()
    batcher = RewardBatcher(SlowScorer(scorer, gate=gate), max_batch=2, max_wait_ms=0, max_queue=4)
    try:
        first = batcher.submit(eps[:2])  # taken by the worker, which then waits on the gate
        _wait_until(lambda: batcher.in_flight > 0, "the first batch taken")
        queued = [batcher.submit(eps[2:4]), batcher.submit(eps[4:6])]
        with pytest.raises(QueueFullError, match="queue is full .*4 episodes waiting, limit 4"):
            batcher.submit(eps[6])
        assert batcher.stats.rejected_requests == 1
        gate.set()
        assert len(first.result(60)) == 2 and all(len(f.result(60)) == 2 for f in queued)
    finally:
        gate.set()
        batcher.close()


def test_close_drains_queued_requests(scorer, eps, reference):
    batcher = RewardBatcher(SlowScorer(scorer, delay=0.05), max_batch=4, max_wait_ms=0)
    futures = [batcher.submit(e) for e in eps[:12]]
    batcher.close(drain=True)
    assert np.abs(np.array([f.result(0) for f in futures]) - reference[:12]).max() <= 1e-5
    with pytest.raises(BatcherClosedError):
        batcher.submit(eps[0])


def test_close_without_drain_fails_the_queued(scorer, eps):
    gate = threading.Event()
    batcher = RewardBatcher(SlowScorer(scorer, gate=gate), max_batch=1, max_wait_ms=0)
    running = batcher.submit(eps[0])
    _wait_until(lambda: batcher.in_flight > 0, "the first batch taken")
    queued = [batcher.submit(e) for e in eps[1:5]]
    closer = threading.Thread(target=batcher.close, kwargs={"drain": False})
    closer.start()
    # the gate opens once close() has dropped the queue (a fixed sleep let a slow closer lose the race:
    # the worker then took a queued request)
    _wait_until(lambda: batcher.closed and batcher.queue_depth == 0, "the queue dropped")
    gate.set()
    closer.join(120)
    assert isinstance(running.result(120), float)  # the batch already running finishes
    for f in queued:
        with pytest.raises(BatcherClosedError):
            f.result(1)


def test_withdrawn_request_is_skipped(scorer, eps):
    gate = threading.Event()
    spy = SlowScorer(scorer, gate=gate)
    with RewardBatcher(spy, max_batch=1, max_wait_ms=0) as batcher:
        batcher.submit(eps[0])
        _wait_until(lambda: batcher.in_flight > 0, "the first batch taken")
        withdrawn = batcher.submit_detailed(eps[1])
        kept = batcher.submit(eps[2])
        assert withdrawn.cancel()
        gate.set()
        assert isinstance(kept.result(30), float)
    assert spy.batches == [1, 1]  # the withdrawn one never reached the model


def test_token_budget_closes_batches(scorer, eps):
    class Recorder(SlowScorer):
        def score_detailed(self, episodes):
            self.batches.append(sum(estimate_tokens(e) for e in episodes))
            return self.inner.score_detailed(episodes)

    spy = Recorder(scorer)
    budget = 3 * max(estimate_tokens(e) for e in eps[:12])
    with RewardBatcher(spy, max_batch=64, max_tokens=budget, max_wait_ms=30) as batcher:
        futures = [batcher.submit(e) for e in eps[:12]]
        [f.result(60) for f in futures]
    assert max(spy.batches) <= budget and len(spy.batches) >= 4
    assert sum(spy.batches) == sum(estimate_tokens(e) for e in eps[:12])


def test_estimate_tokens_counts_audio_and_text(tmp_path):
    path = tmp_path / "two_seconds.wav"
    path.write_bytes(wav_bytes(np.zeros(2 * SR, np.float32)))
    episode = Episode((Turn("user", "x" * 40, str(path)), Turn("assistant", None, np.zeros(SR, np.float32))))
    assert estimate_tokens(episode) == 10 + 50 + 25


def test_settings_are_checked(scorer):
    for bad in ({"max_batch": 0}, {"max_queue": 0}, {"max_wait_ms": -1}, {"max_tokens": 0}):
        with pytest.raises(ValueError):
            RewardBatcher(scorer, **bad)
    with RewardBatcher(scorer) as batcher, pytest.raises(TypeError, match="episode 0"):
        batcher.submit(["not an episode"])


def test_snapshot_reports_counts_and_latency(scorer, eps):
    with RewardBatcher(scorer, max_batch=8, max_wait_ms=5) as batcher:
        [f.result(60) for f in [batcher.submit(e) for e in eps[:8]]]
        snap = batcher.snapshot()
    assert snap["requests"] == 8 and snap["episodes"] == 8 and snap["queue_depth"] == 0
    assert snap["latency_ms"]["p50"] > 0 and snap["mean_batch_size"] >= 1


def test_waits_only_for_announced_arrivals(scorer, eps):
    spy = SlowScorer(scorer)
    # a lone caller held back for max_wait would wait 600 s: the 120-s timeout below fails it, and no
    # scoring of one episode comes near it (with max_wait 10 s and a 5-s timeout, a busy machine could)
    with RewardBatcher(spy, max_batch=64, max_wait_ms=600_000) as batcher:
        assert isinstance(batcher.submit(eps[0]).result(timeout=120), float)  # a lone caller is not held back
        with batcher.arriving():  # e.g. the server still reading the next request's body
            first = batcher.submit(eps[1])
            time.sleep(0.1)
            second = batcher.submit(eps[2])
        first.result(30), second.result(30)
    assert spy.batches == [1, 2]  # the announced request joined the waiting batch


def test_caller_runs_the_worker_loop(scorer, eps, reference):
    batcher = RewardBatcher(scorer, max_batch=8, worker="caller")
    assert batcher.owns_worker_loop
    results = {}

    def clients():
        with ThreadPoolExecutor(8) as pool:
            results.update(zip(range(16), pool.map(batcher.score, eps[:16])))
        batcher.close(drain=True)  # run() below returns once the queue is drained

    thread = threading.Thread(target=clients)
    thread.start()
    batcher.run()  # this (the main) thread scores
    thread.join(10)
    assert np.abs(np.array([results[i] for i in range(16)]) - reference[:16]).max() <= 1e-5
    with pytest.raises(ValueError, match="worker must be"):
        RewardBatcher(scorer, worker="process")


def test_submit_prepared_keeps_failed_items_in_place(scorer, eps, reference):
    with RewardBatcher(scorer) as batcher:
        results = batcher.submit_prepared(["sample 0: bad audio", eps[0], eps[1], "sample 3: no turns"]).result(30)
    assert results[0] == (None, "sample 0: bad audio") and results[3] == (None, "sample 3: no turns")
    assert abs(results[1][0] - reference[0]) <= 1e-5 and abs(results[2][0] - reference[1]) <= 1e-5
    assert results[1][1] is None and results[2][1] is None
