"""One batching loop for every extractor that loads items in chunks and works on them batched.

The reward scorer's windows (runtime/reward/episode_scorer.py), the speaker embedder's decode
chunks (features/speaker/embedder.py) and the blueprint's feature batches (features/blueprint.py)
all run through here, so they chunk by one rule, read ahead on one kind of thread and stop it the
same way:

- ``plan_chunks`` — consecutive chunks of at most `max_items` items and, when item sizes are given
  (samples, tokens), at most `max_total` summed size; an item larger than `max_total` is a chunk of
  its own. Input order is kept.
- ``read_ahead`` — yields each chunk with what `load` made of it. With read-ahead on, the next
  chunk loads on ONE background thread while the caller works on this one. That thread is one core
  of the compute budget: by default (``ahead=None``) it runs only when ``runtime.compute_budget.cores()``
  is 2 or more; a caller whose work waits on an accelerator (the CPU idles meanwhile) may ask for
  it with ``ahead=True``, or turn it off with ``ahead=False``. It runs only when there are 2+ chunks.
  The thread is stopped and joined when the generator finishes, is closed (``close()``, an early
  ``break``), or raises; a `load` that raises is re-raised in the caller with a note naming the
  chunk's items (``pytest.raises(match=...)`` reads notes too).
- ``extract_cached`` — one result ``(value, error)`` per input item, in input order: items whose
  content key is in the content cache (features/cache.py) are served from it (a hit may still be
  refused per item, e.g. a file over the duration cap), items with the same key are extracted once,
  the rest are loaded and extracted in chunks, and each success is stored in the cache. An item
  whose key cannot be computed (its callback raises ``ItemFailed``) or whose extraction reports an
  error gets that error; the other items of its chunk are unaffected.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sdscore.runtime.compute_budget import cores

T = TypeVar("T")
L = TypeVar("L")
V = TypeVar("V")

#: name prefix of the read-ahead thread (threading.enumerate() shows it while a chunk loads ahead)
THREAD_NAME = "sdscore-read-ahead"
#: items named in the note added to an exception from `load` or `extract`
NAMED_ITEMS = 5


class ItemFailed(Exception):
    """Raised by a key callback for one item: that item's result is an error with this text."""


@dataclass(frozen=True)
class LoadedChunk(Generic[T, L]):
    """One chunk: its positions in the input, its items, and what `load` returned for them."""

    number: int
    positions: range
    items: list[T]
    loaded: L


def plan_chunks(count: int, max_items: int, *, sizes: Sequence[int] | None = None,
                max_total: int | None = None) -> list[range]:
    """Consecutive chunks covering range(count): each at most `max_items` items and, with `sizes`
    (one per item) and `max_total`, at most `max_total` summed size unless it holds a single item."""
    if not isinstance(max_items, int) or max_items < 1:
        raise ValueError(f"max_items must be a whole number >= 1, got {max_items!r}")
    if max_total is not None:
        if not isinstance(max_total, int) or max_total < 1:
            raise ValueError(f"max_total must be a whole number >= 1, got {max_total!r}")
        if sizes is None:
            raise ValueError("max_total needs the items' sizes")
    if sizes is not None and len(sizes) != count:
        raise ValueError(f"{len(sizes)} sizes for {count} items")
    chunks: list[range] = []
    start, total = 0, 0
    for i in range(count):
        size = 0 if sizes is None else int(sizes[i])
        if size < 0:
            raise ValueError(f"item {i}: size must be >= 0, got {size}")
        full = i - start >= max_items or (max_total is not None and i > start and total + size > max_total)
        if full:
            chunks.append(range(start, i))
            start, total = i, 0
        total += size
    if count > start:
        chunks.append(range(start, count))
    return chunks


def _default_name(position: int, item: Any) -> str:
    return f"item {position}"


def _note(doing: str, named: list[tuple[int, Any]], size: int, describe: Callable[[int, Any], str]) -> str:
    """'while loading a chunk of 20 item(s): a.wav, b.wav ... and 18 more' for an exception on it."""
    names = [describe(p, item) for p, item in named[:NAMED_ITEMS]]
    more = size - len(names)
    return f"while {doing} a chunk of {size} item(s): {', '.join(names)}" + (f" ... and {more} more" if more else "")


def read_ahead(
    items: Sequence[T],
    chunks: Sequence[range],
    load: Callable[[list[T], range], L],
    *,
    ahead: bool | None = None,
    describe: Callable[[int, T], str] = _default_name,
) -> Iterator[LoadedChunk[T, L]]:
    """Yield a LoadedChunk per chunk, in order; with read-ahead, chunk k + 1 loads on one background
    thread while the caller works on chunk k (`ahead`: True, False, or None for "when the compute
    budget has 2+ cores"). `describe(position, item)` names an item in the note added to an
    exception from `load`."""
    items = list(items)
    use_thread = (cores() > 1 if ahead is None else bool(ahead)) and len(chunks) > 1
    executor = ThreadPoolExecutor(1, thread_name_prefix=THREAD_NAME) if use_thread else None

    def run(k: int) -> L:
        return load([items[p] for p in chunks[k]], chunks[k])

    pending: Future | None = None
    try:
        for k, positions in enumerate(chunks):
            try:
                if executor is None:
                    loaded = run(k)
                else:
                    loaded = (pending if pending is not None else executor.submit(run, k)).result()
                    pending = executor.submit(run, k + 1) if k + 1 < len(chunks) else None
            except Exception as exc:
                exc.add_note(_note("loading", [(p, items[p]) for p in positions[:NAMED_ITEMS]], len(positions), describe))
                raise
            yield LoadedChunk(k, positions, [items[p] for p in positions], loaded)
    finally:
        if executor is not None:  # a load still running is waited for: the thread never outlives this
            executor.shutdown(wait=True, cancel_futures=True)


class CacheEntries:
    """A ContentCache read and written as one kind of entry: "json" objects or float32 "array"s."""

    def __init__(self, cache, kind: str):
        if kind not in ("json", "array"):
            raise ValueError(f"kind must be 'json' or 'array', got {kind!r}")
        self.cache = cache
        self.get = cache.get_json if kind == "json" else cache.get_array
        self.put = cache.put_json if kind == "json" else cache.put_array


def extract_cached(
    items: Sequence[T],
    extract: Callable[[list[T], L], Sequence[tuple[V | None, str | None]]],
    *,
    max_items: int,
    size: Callable[[T], int] | None = None,
    max_total: int | None = None,
    load: Callable[[list[T]], L] | None = None,
    key: Callable[[T], str] | None = None,
    cache: CacheEntries | None = None,
    check_hit: Callable[[T, V], str | None] | None = None,
    ahead: bool | None = None,
    describe: Callable[[int, T], str] = _default_name,
    progress: Callable[[int, int], None] | None = None,
) -> Iterator[tuple[V | None, str | None]]:
    """Yield (value, error) per item, in input order.

    max_items, size(item) and max_total: the chunks of items to extract, as in plan_chunks;
    key(item): its content key (items with equal keys are extracted once; a key raising ItemFailed
    is that item's error); cache: where keys are looked up before extraction and successes stored;
    check_hit(item, value): an error text refusing a cache hit for this item, or None;
    load(chunk_items): what extract receives (None: the items themselves), read ahead per `ahead`
    (as in read_ahead);
    extract(chunk_items, loaded): one (value, error) per chunk item — an error keeps the value out
    of the cache; progress(done, total): over the items to extract, at 0 and after each chunk."""
    if cache is not None and key is None:
        raise ValueError("a cache needs a key function")
    items = list(items)
    results: list[tuple[V | None, str | None] | None] = [None] * len(items)
    waiting: dict[Any, list[int]] = {}  # key of an item to extract -> the positions sharing it
    hits: dict[str, V] = {}
    todo: list[int] = []  # position of the first item of each distinct key to extract
    for i, item in enumerate(items):
        if key is None:  # no key: every item is its own
            waiting[i] = [i]
            todo.append(i)
            continue
        try:
            k = key(item)
        except ItemFailed as failure:
            results[i] = (None, str(failure))
            continue
        if k in waiting:
            waiting[k].append(i)
            continue
        hit = hits.get(k)
        if hit is None and cache is not None:
            hit = cache.get(k)
        if hit is None:
            waiting[k] = [i]
            todo.append(i)
            continue
        hits[k] = hit
        refused = check_hit(item, hit) if check_hit is not None else None
        results[i] = (None, refused) if refused is not None else (hit, None)
    keys = list(waiting)  # insertion order: keys[p] is the key of todo[p]
    todo_items = [items[i] for i in todo]

    def load_chunk(chunk_items: list[T], positions: range):
        return chunk_items if load is None else load(chunk_items)

    done, shown = 0, 0
    if progress is not None:
        progress(0, len(todo))
    chunks = plan_chunks(len(todo), max_items, max_total=max_total,
                         sizes=None if size is None else [size(item) for item in todo_items])
    with closing(read_ahead(todo_items, chunks, load_chunk, ahead=ahead,
                            describe=lambda p, item: describe(todo[p], item))) as loaded_chunks:
        for chunk in loaded_chunks:
            try:
                outcomes = list(extract(chunk.items, chunk.loaded))
                if len(outcomes) != len(chunk.items):
                    raise ValueError(f"extract returned {len(outcomes)} results for {len(chunk.items)} items")
            except Exception as exc:
                named = [(todo[p], items[todo[p]]) for p in chunk.positions[:NAMED_ITEMS]]
                exc.add_note(_note("extracting", named, len(chunk.positions), describe))
                raise
            for p, (value, error) in zip(chunk.positions, outcomes):
                if cache is not None and error is None:
                    cache.put(keys[p], value)
                for i in waiting[keys[p]]:
                    results[i] = (value, error)
            done += len(chunk.positions)
            if progress is not None:
                progress(done, len(todo))
            while shown < len(items) and results[shown] is not None:
                yield results[shown]
                shown += 1
    while shown < len(items):  # cache hits and failed keys after the last extracted item
        yield results[shown]
        shown += 1
