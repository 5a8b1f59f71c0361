"""features/batched_extraction: one chunking rule, one read-ahead thread, cache look-ups before
extraction. Batched results equal one-by-one results on ragged input (empty and failing items
included), input order is kept, a failing item fails alone, and the read-ahead thread never
outlives its generator (finished, closed, broken out of, or raising on either side)."""

from __future__ import annotations

import gc
import threading
from contextlib import closing

import numpy as np
import pytest
from sdscore.features.batched_extraction import (
    THREAD_NAME,
    CacheEntries,
    ItemFailed,
    extract_cached,
    plan_chunks,
    read_ahead,
)
from sdscore.features.cache import ContentCache, hash_samples
from sdscore.ragged import pack
from sdscore.runtime.compute_budget import budget


def read_ahead_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(THREAD_NAME)]


@pytest.fixture(autouse=True)
def no_thread_left():
    assert read_ahead_threads() == []
    yield
    if read_ahead_threads():  # a full collection costs ~0.5 s in a suite's big heap: only when one is left
        gc.collect()  # a generator dropped by a test is finalised (closed) here at the latest
    assert read_ahead_threads() == []


def ragged_items(seed: int = 0, n: int = 23) -> list[np.ndarray]:
    """Arrays of 0-40 samples; every fifth has a NaN (extract refuses it), two are empty."""
    rng = np.random.default_rng(seed)
    items = [rng.standard_normal(int(rng.integers(1, 41))).astype(np.float32) for _ in range(n)]
    items[3] = np.zeros(0, np.float32)
    items[11] = np.zeros(0, np.float32)
    for i in range(0, n, 5):
        items[i] = items[i].copy()
        items[i][len(items[i]) // 2] = np.nan
    return items


def load_packed(items: list[np.ndarray]):
    """The 'audio' of a chunk: one flat buffer + offsets, as load_many returns it."""
    return pack(items)


def padded_rms(items: list[np.ndarray], packed) -> list[tuple[np.ndarray | None, str | None]]:
    """A batched extractor: RMS and length of each item over one zero-padded matrix; per-item errors."""
    data, offsets = packed
    lengths = np.diff(offsets)
    width = max(1, int(lengths.max())) if len(lengths) else 1
    matrix = np.zeros((len(items), width), np.float32)
    for row, (a, b) in enumerate(zip(offsets[:-1], offsets[1:])):
        matrix[row, : b - a] = data[a:b]
    with np.errstate(invalid="ignore", divide="ignore"):
        rms = np.sqrt((matrix.astype(np.float64) ** 2).sum(1) / lengths)
    out = []
    for row, length in enumerate(lengths):
        if length == 0:
            out.append((None, "empty item"))
        elif not np.isfinite(rms[row]):
            out.append((None, "not finite"))
        else:
            out.append((np.array([rms[row], length], np.float32), None))
    return out


def one_by_one(items):
    return [padded_rms([item], load_packed([item]))[0] for item in items]


def same(got, expected):
    assert len(got) == len(expected)
    for (value, error), (want, want_error) in zip(got, expected):
        assert error == want_error
        if want is None:
            assert value is None
        else:
            np.testing.assert_allclose(value, want, rtol=1e-6)


# ---------------------------------------------------------------- the chunking rule


def test_chunks_follow_max_items_and_max_total_and_keep_order():
    assert plan_chunks(0, 4) == []
    assert plan_chunks(7, 3) == [range(0, 3), range(3, 6), range(6, 7)]
    sizes = [3, 3, 9, 1, 1, 0, 5]
    chunks = plan_chunks(len(sizes), 3, sizes=sizes, max_total=5)
    assert chunks == [range(0, 1), range(1, 2), range(2, 3), range(3, 6), range(6, 7)]  # 9 > 5: alone
    assert [p for c in chunks for p in c] == list(range(len(sizes)))
    for c in chunks:
        assert len(c) <= 3 and (len(c) == 1 or sum(sizes[p] for p in c) <= 5)


def test_bad_chunking_is_refused():
    with pytest.raises(ValueError, match="max_items must be a whole number >= 1, got 0"):
        plan_chunks(3, 0)
    with pytest.raises(ValueError, match="max_total needs the items' sizes"):
        plan_chunks(3, 2, max_total=10)
    with pytest.raises(ValueError, match="max_total must be a whole number >= 1, got 0"):
        plan_chunks(3, 2, sizes=[1, 1, 1], max_total=0)
    with pytest.raises(ValueError, match="2 sizes for 3 items"):
        plan_chunks(3, 2, sizes=[1, 1], max_total=4)
    with pytest.raises(ValueError, match="item 1: size must be >= 0, got -2"):
        plan_chunks(3, 2, sizes=[1, -2, 1], max_total=4)
    with pytest.raises(ValueError, match="a cache needs a key function"):
        list(extract_cached([1], lambda items, _: [], max_items=1, cache=CacheEntries(ContentCache(None, "t"), "json")))
    with pytest.raises(ValueError, match="kind must be 'json' or 'array', got 'npz'"):
        CacheEntries(ContentCache(None, "t"), "npz")


# ---------------------------------------------------------------- results


@pytest.mark.parametrize("ahead", [False, True])
@pytest.mark.parametrize("max_items", [1, 2, 5, 64])
def test_batched_equals_one_by_one_in_input_order(max_items, ahead):
    items = ragged_items()
    expected = one_by_one(items)
    assert [e for _, e in expected].count("empty item") == 2 and [e for _, e in expected].count("not finite") == 5
    got = list(extract_cached(items, padded_rms, max_items=max_items, load=load_packed, ahead=ahead))
    same(got, expected)
    reversed_got = list(extract_cached(items[::-1], padded_rms, max_items=max_items, load=load_packed, ahead=ahead))
    same(reversed_got, expected[::-1])


def test_empty_input_and_all_failing_input():
    assert list(extract_cached([], padded_rms, max_items=4, load=load_packed, ahead=True)) == []
    empties = [np.zeros(0, np.float32)] * 3
    assert list(extract_cached(empties, padded_rms, max_items=2, load=load_packed)) == [(None, "empty item")] * 3


def test_a_failing_item_fails_alone():
    items = ragged_items()
    clean = list(extract_cached(items, padded_rms, max_items=4, load=load_packed))
    broken = list(items)
    broken[7] = np.array([np.inf], np.float32)

    def key(item):
        if item.size == 2 and item[0] == 42:
            raise ItemFailed("unreadable")
        return hash_samples(item, 1)

    broken[9] = np.array([42, 0], np.float32)
    got = list(extract_cached(broken, padded_rms, max_items=4, load=load_packed, key=key))
    assert got[7] == (None, "not finite") and got[9] == (None, "unreadable")
    same([g for i, g in enumerate(got) if i not in (7, 9)], [c for i, c in enumerate(clean) if i not in (7, 9)])


def test_cache_is_read_before_extraction_and_holds_only_successes():
    items = ragged_items(seed=1, n=12)
    items.append(items[2].copy())  # the same content twice (and two empty items): extracted once each
    cache = CacheEntries(ContentCache(None, "rms"), "array")
    seen: list[int] = []

    def counting(chunk, packed):
        seen.append(len(chunk))
        return padded_rms(chunk, packed)

    def key(item):
        return hash_samples(item, 1)

    first = list(extract_cached(items, counting, max_items=5, load=load_packed, key=key, cache=cache))
    same(first, one_by_one(items))
    distinct = {key(item): error is None for item, (_, error) in zip(items, first)}
    assert len(distinct) == 11 and sum(seen) == 11
    ok = sum(distinct.values())
    assert 0 < ok < 11 and len(cache.cache) == ok  # failures are not cached
    seen.clear()
    again = list(extract_cached(items, counting, max_items=5, load=load_packed, key=key, cache=cache))
    same(again, first)
    assert sum(seen) == 11 - ok  # only the failures are extracted again
    refused = list(extract_cached(items, counting, max_items=5, load=load_packed, key=key, cache=cache,
                                  check_hit=lambda item, value: "too long" if value[1] > 30 else None))
    for (value, error), (want, want_error) in zip(refused, first):
        if want is not None and want[1] > 30:
            assert (value, error) == (None, "too long")
        else:
            assert error == want_error


def test_json_entries_and_progress():
    cache = CacheEntries(ContentCache(None, "words"), "json")
    calls = []
    words = ["a", "bb", "", "a", "ccc"]

    def lengths(chunk, loaded):
        return [({"n": len(w)}, None) if w else (None, "empty word") for w in loaded]

    got = list(extract_cached(words, lengths, max_items=2, key=lambda w: w or "empty", cache=cache,
                              progress=lambda done, total: calls.append((done, total))))
    assert got == [({"n": 1}, None), ({"n": 2}, None), (None, "empty word"), ({"n": 1}, None), ({"n": 3}, None)]
    assert calls == [(0, 4), (2, 4), (4, 4)]  # 4 distinct words to extract, in chunks of 2
    assert cache.get("bb") == {"n": 2} and cache.get("empty") is None
    chunks = []

    def recording(chunk, loaded):
        chunks.append(list(chunk))
        return lengths(chunk, loaded)

    by_size = list(extract_cached(["aaa", "b", "cc", "dddd", "e", "f"], recording, max_items=3, size=len, max_total=3))
    assert chunks == [["aaa"], ["b", "cc"], ["dddd"], ["e", "f"]]  # summed length <= 3, an item over it alone
    assert [value["n"] for value, _ in by_size] == [3, 1, 2, 4, 1, 1]


# ---------------------------------------------------------------- exceptions name their items


@pytest.mark.parametrize("ahead", [False, True])
def test_a_load_that_raises_is_reraised_naming_its_items(ahead):
    names = [f"clip{i}.wav" for i in range(7)]

    def load(chunk):
        if "clip4.wav" in chunk:
            raise RuntimeError("decoder crashed")
        return chunk

    results = []
    with budget(2), pytest.raises(RuntimeError, match=r"while loading a chunk of 3 item\(s\): clip3.wav, clip4.wav, clip5.wav"):
        for outcome in extract_cached(names, lambda chunk, loaded: [(c, None) for c in loaded], max_items=3,
                                      load=load, ahead=ahead, describe=lambda _, name: name):
            results.append(outcome)
    assert results == [(n, None) for n in names[:3]]


def test_an_extract_that_raises_is_reraised_naming_its_items():
    def extract(chunk, loaded):
        raise KeyError("no such feature")

    items = [f"f{i}" for i in range(12)]
    with pytest.raises(KeyError, match=r"while extracting a chunk of 8 item\(s\): f0, f1, f2, f3, f4 \.\.\. and 3 more"):
        list(extract_cached(items, extract, max_items=8, ahead=True, describe=lambda _, name: name))
    with pytest.raises(ValueError, match="extract returned 1 results for 2 items"):
        list(extract_cached(["a", "b"], lambda chunk, loaded: [("x", None)], max_items=2))


# ---------------------------------------------------------------- the read-ahead thread's life


def slow_chunks(n_chunks: int, loads: list[int]):
    def load(chunk, positions):
        loads.append(positions.start)
        return list(chunk)

    return read_ahead(list(range(3 * n_chunks)), plan_chunks(3 * n_chunks, 3), load, ahead=True)


def test_the_thread_reads_ahead_and_ends_with_the_generator():
    loads: list[int] = []
    chunks = slow_chunks(4, loads)
    first = next(chunks)
    assert first.number == 0 and first.items == [0, 1, 2]
    assert len(read_ahead_threads()) == 1  # exists: the checks below can fail
    assert [c.positions for c in chunks] == [range(3, 6), range(6, 9), range(9, 12)]
    assert read_ahead_threads() == [] and loads == [0, 3, 6, 9]


def test_close_and_early_break_stop_the_thread():
    loads: list[int] = []
    chunks = slow_chunks(5, loads)
    next(chunks)
    assert len(read_ahead_threads()) == 1
    chunks.close()
    assert read_ahead_threads() == []
    for chunk in slow_chunks(5, loads):
        if chunk.number == 1:
            break
    assert read_ahead_threads() == []  # the loop's generator was dropped, hence closed
    loads.clear()
    with closing(extract_cached(list(range(20)), lambda c, x: [(v, None) for v in x], max_items=3, ahead=True)) as gen:
        assert next(gen) == (0, None)
        assert len(read_ahead_threads()) == 1
    assert read_ahead_threads() == []


def test_budget_decides_when_read_ahead_is_not_asked_for():
    def run(n):
        with budget(n):
            gen = read_ahead(list(range(6)), plan_chunks(6, 2), lambda c, p: c)
            next(gen)
            threads = len(read_ahead_threads())
            gen.close()
            return threads

    assert run(1) == 0 and run(2) == 1
    gen = read_ahead(list(range(2)), plan_chunks(2, 2), lambda c, p: c, ahead=True)
    next(gen)
    assert read_ahead_threads() == []  # one chunk: nothing to read ahead
    gen.close()


def test_no_deadlock_and_no_thread_left_when_the_consumer_raises():
    """The consumer raises while the next chunk loads on the thread (it waits until the consumer
    has its chunk): closing waits for that load and returns; no thread is left."""
    outcome: dict[str, object] = {}
    in_flight = threading.Event()

    def load(chunk):
        if chunk[0] >= 3:
            in_flight.set()
        return chunk

    def consume():
        try:
            with closing(extract_cached(list(range(12)), lambda c, x: [(v, None) for v in x], max_items=3,
                                        load=load, ahead=True)) as gen:
                for value, _ in gen:
                    in_flight.wait(timeout=120)
                    raise OSError(f"consumer broke at {value}")
        except OSError as error:
            outcome["error"] = str(error)
        outcome["threads"] = len(read_ahead_threads())

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    consumer.join(timeout=120)  # a guard against a hang, not a measurement
    assert not consumer.is_alive()
    assert outcome == {"error": "consumer broke at 0", "threads": 0}


def test_a_dropped_generator_whose_consumer_raised_stops_its_thread():
    def consume():
        for chunk in slow_chunks(6, []):
            raise LookupError(f"at chunk {chunk.number}")

    with pytest.raises(LookupError, match="at chunk 0") as caught:
        consume()
    del caught  # the traceback held the consumer's frame, and with it the generator
    gc.collect()
    assert read_ahead_threads() == []
