"""The content-hash cache: digests, JSON and array entries, memory-only mode, damaged entries, concurrent writers."""

import multiprocessing
import os

import numpy as np
import pytest

from sdscore.features.cache import (
    ContentCache,
    cache_key,
    combine_digests,
    hash_file,
    hash_samples,
    hash_settings,
)

WRITERS = 4
ROUNDS = 60
SHARED_KEYS = 8


def test_digests_depend_on_content_and_settings_only(tmp_path):
    a, b, c = tmp_path / "a.bin", tmp_path / "b.bin", tmp_path / "c.bin"
    a.write_bytes(b"x" * (3 << 20) + b"tail")  # several 1 MiB chunks
    b.write_bytes(a.read_bytes())
    c.write_bytes(b"x" * (3 << 20) + b"tall")
    assert hash_file(a) == hash_file(b) != hash_file(c)
    assert len(hash_file(a)) == 32 and int(hash_file(a), 16) >= 0
    with pytest.raises(OSError):
        hash_file(tmp_path / "missing.bin")
    wave = np.linspace(-1, 1, 100, dtype=np.float32)
    assert hash_samples(wave, 16000) == hash_samples(wave.astype(np.float64), 16000)
    assert hash_samples(wave, 16000) != hash_samples(wave, 8000) and hash_samples(wave, 16000).startswith("s")
    assert hash_settings({"a": 1, "b": [1, 2]}) == hash_settings({"b": [1, 2], "a": 1}) != hash_settings({"a": 2})
    assert hash_settings({"path": tmp_path}) == hash_settings({"path": str(tmp_path)})
    assert cache_key("c1", "s1") != cache_key("c1", "s2") and cache_key("c1", "s1") == cache_key("c1", "s1")
    assert combine_digests(["a", "b"]) != combine_digests(["b", "a"]) and len(combine_digests(["a"])) == 16


def test_json_and_array_entries_round_trip(tmp_path):
    cache = ContentCache(tmp_path, "ns-v1")
    key = cache_key(hash_settings("content"), hash_settings({"opt": 1}))
    row = {"text": "héllo", "values": [1.5, None], "nested": {"n": 3}}
    cache.put_json(key, row)
    cache.put_array("ab12", np.arange(4, dtype=np.float64))
    assert (tmp_path / "ns-v1" / key[:2] / f"{key}.json").is_file()
    assert (tmp_path / "ns-v1" / "ab" / "ab12.npy").is_file()
    assert len(cache) == 2
    for reader in (cache, ContentCache(tmp_path, "ns-v1"), ContentCache(tmp_path, "ns-v1", memory=False)):
        assert reader.get_json(key) == row
        value = reader.get_array("ab12")
        assert value.dtype == np.float32
        np.testing.assert_array_equal(value, np.arange(4))
        assert reader.get_json("ab12") is None and reader.get_array(key) is None  # kinds are apart
    found = ContentCache(tmp_path, "ns-v1").get_arrays(["ab12", "cd34"])
    assert list(found) == ["ab12"]
    assert ContentCache(tmp_path, "other").get_json(key) is None  # namespaces are apart
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]


def test_memory_only_cache_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cache = ContentCache(None, "mem")
    assert cache.folder is None and cache.get_json("k1") is None
    source = np.ones(3, dtype=np.float32)
    cache.put_arrays({"k1": source, "k2": np.zeros(2)})
    cache.put_json("k1", {"a": 1})
    source[0] = 5  # the cache holds its own copy
    np.testing.assert_array_equal(cache.get_array("k1"), np.ones(3))
    assert cache.get_json("k1") == {"a": 1} and len(cache) == 3
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="without a root folder must keep entries in memory"):
        ContentCache(None, "mem", memory=False)


def test_corrupt_entries_are_misses_and_get_overwritten(tmp_path):
    cache = ContentCache(tmp_path, "ns", memory=False)
    cache.put_json("aa11", {"v": 1})
    cache.put_array("bb22", np.arange(3))
    json_path, npy_path = cache.path("aa11", "json"), cache.path("bb22", "npy")
    for damage in (b"{truncated", b"[1, 2]", b"\xff\xfe"):
        json_path.write_bytes(damage)
        assert ContentCache(tmp_path, "ns").get_json("aa11") is None
    for damage in (b"not numpy", npy_path.read_bytes()[:-4], b""):
        npy_path.write_bytes(damage)
        assert ContentCache(tmp_path, "ns").get_array("bb22") is None
    with open(npy_path, "wb") as out:
        np.save(out, np.arange(3, dtype=np.int64))  # not float32: not ours
    assert cache.get_array("bb22") is None
    cache.put_json("aa11", {"v": 2})
    cache.put_array("bb22", np.arange(3))
    assert ContentCache(tmp_path, "ns").get_json("aa11") == {"v": 2}
    np.testing.assert_array_equal(ContentCache(tmp_path, "ns").get_array("bb22"), np.arange(3))


@pytest.mark.parametrize("namespace", ["", "a/b", "a\\b", "/", None])
def test_bad_namespace_is_refused(tmp_path, namespace):
    with pytest.raises(ValueError, match=r"namespace must be a non-empty name without slashes, got "):
        ContentCache(tmp_path, namespace)


def test_bad_key_is_refused(tmp_path):
    cache = ContentCache(tmp_path, "ns")
    for key in ("", "../x", "a/b", ".hidden", 12):
        with pytest.raises(ValueError, match="cache key must be letters, digits"):
            cache.put_json(key, {})
        with pytest.raises(ValueError, match="cache key must be letters, digits"):
            cache.get_array(key)


def _expected(key: str) -> tuple[dict, np.ndarray]:
    """The one value every writer stores under key (large enough that a torn write would show)."""
    seed = int(hash_settings(key)[:8], 16)
    array = np.random.default_rng(seed).standard_normal(50_000).astype(np.float32)
    return {"key": key, "payload": [seed] * 2000}, array


def _writer(root: str, worker: int, start) -> None:
    """Write shared keys (every worker) and own keys (this worker) many times, reading back meanwhile."""
    start.wait()
    cache = ContentCache(root, "race", memory=False)
    for n in range(ROUNDS):
        for key in (f"shared{n % SHARED_KEYS}", f"own{worker}x{n % 5}"):
            row, array = _expected(key)
            cache.put_json(key, row)
            cache.put_array(key, array)
            seen_row, seen_array = cache.get_json(key), cache.get_array(key)
            assert seen_row == row, f"torn json entry {key}"
            np.testing.assert_array_equal(seen_array, array)


def test_concurrent_processes_never_tear_entries(tmp_path):
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(WRITERS)
    workers = [context.Process(target=_writer, args=(str(tmp_path), w, start)) for w in range(WRITERS)]
    for process in workers:
        process.start()
    for process in workers:
        process.join(timeout=300)
    assert [p.exitcode for p in workers] == [0] * WRITERS
    keys = [f"shared{i}" for i in range(SHARED_KEYS)] + [f"own{w}x{i}" for w in range(WRITERS) for i in range(5)]
    cache = ContentCache(tmp_path, "race")
    for key in keys:
        row, array = _expected(key)
        assert cache.get_json(key) == row
        np.testing.assert_array_equal(cache.get_array(key), array)
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) == 2 * len(keys)
    assert all(p.suffix in (".json", ".npy") and not p.name.startswith(".") for p in files)
    assert all(os.stat(p).st_size > 0 for p in files)


@pytest.mark.parametrize("special", ["fifo", "/dev/zero", "folder"])
def test_hash_file_refuses_special_files_at_once(tmp_path, special):
    """A FIFO with no writer or /dev/zero would never end a read: refused before any reading."""
    if special == "fifo":
        path = tmp_path / "clip.wav"
        os.mkfifo(path)
    elif special == "folder":
        path = tmp_path
    else:
        path = special
    with pytest.raises(OSError) as raised:
        hash_file(path)
    assert raised.value.strerror in ("not a regular file", "Is a directory")
