"""Every protocol's Scorer on the runtime, end to end through `sdscore score`, once per protocol: bad
rows (a bad label, missing audio, a malformed field, a clip over the cap) keep their place with their
error (exit code 1); Ctrl-C midway and --resume gives the uninterrupted run's rows; the processes and
Ray executors equal local. The runtime's own mechanics (windows, shards, kill -9 and resume, locks,
executors) are tested on a toy Scorer in test_runtime.py, test_runtime_ray.py and test_hardening_results.py."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from sdscore.cli import main
from sdscore.manifests import read_manifest

#: protocol → (corpus manifest, id column, CLI options: fast and offline)
PROTOCOLS = {
    "reward": ("reward_pairs.parquet", "pair_id", []),
    "consistency": ("consistency.parquet", "instance_id", ["--embedder", "ge2e", "--threshold", "0.7"]),
    "judge": ("judge_items.parquet", "item_id", ["--judge", "rule"]),
    "naturalness": ("naturalness.parquet", "item_id", ["--jobs", "1"]),
}
#: Scorer class each protocol's `score` runs (interrupted midway by the end-to-end test)
SCORERS = {
    "reward": "sdscore.protocols.reward.scorer:RewardPairsScorer",
    "consistency": "sdscore.protocols.consistency.scorer:ConsistencyScorer",
    "judge": "sdscore.protocols.judge.scorer:JudgeScorer",
    "naturalness": "sdscore.protocols.naturalness.scorer:NaturalnessScorer",
}
def _absolute_manifest(corpus, protocol, folder):
    """The corpus manifest with absolute audio paths, as JSONL rows (so bad rows can be appended)."""
    name, _, _ = PROTOCOLS[protocol]
    frame = read_manifest(corpus / name, protocol)
    return [json.loads(line) for line in frame.write_ndjson().splitlines()]


def _write_jsonl(path, rows, raw_lines=()):
    with open(path, "w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row) + "\n")
        for line in raw_lines:
            out.write(line + "\n")
    return path


def _bad_rows(protocol, good, folder):
    """Three bad rows from a good one: an unknown label, a missing audio file, a malformed field."""
    missing = str(folder / "no-such-clip.wav")
    bad_label, no_audio, malformed = (json.loads(json.dumps(good)) for _ in range(3))
    _, id_column, _ = PROTOCOLS[protocol]
    for suffix, row in (("label", bad_label), ("audio", no_audio), ("field", malformed)):
        row[id_column] = f"bad-{suffix}"
    if protocol == "reward":
        bad_label["criterion"] = "sideways"
        no_audio["chosen"][-1]["audio_path"] = missing
        malformed["chosen"] = "[{not json"
    elif protocol == "consistency":
        bad_label["task"] = "sorting"
        no_audio["turn_paths"][0] = missing
        malformed["turn_paths"] = "[oops"
    elif protocol == "judge":
        bad_label["overall"] = "3"
        no_audio["audio1_path"] = missing
        malformed["content"] = {"not": "a label"}
    else:  # naturalness has no labels: a number that is not one stands in
        bad_label["answer_start_time"] = "soon"
        no_audio["answer_audio_path"] = missing
        malformed["answer_duration"] = [1.5, {"not": "a number"}]
    return [bad_label, no_audio, malformed]


@pytest.fixture(scope="module")
def manifests(tiny_corpus, tmp_path_factory):
    """Per protocol: a JSONL manifest of four corpus rows with three bad rows and a 25.5-s clip (row "long")
    between the third and the fourth: in windows of 2 rows, two windows mix good and bad rows."""
    folder = tmp_path_factory.mktemp("runtime-protocols")
    long_clip = _long_clip(folder / "long.wav", 25.5)
    out = {}
    for protocol in PROTOCOLS:
        rows = _absolute_manifest(tiny_corpus, protocol, folder)
        bad = _bad_rows(protocol, rows[0], folder)
        long_row = _with_audio(protocol, rows[1], long_clip)
        long_row[PROTOCOLS[protocol][1]] = "long"
        out[protocol] = _write_jsonl(folder / f"{protocol}.jsonl", rows[:3] + bad + [long_row] + rows[3:4])
    return out


@pytest.fixture(scope="module")
def ray_after():
    """Ray, when a test starts it, is stopped after this module."""
    yield
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()


def _interrupt_after(monkeypatch, protocol, windows):
    """The protocol's Scorer raises KeyboardInterrupt (Ctrl-C) when asked for window windows + 1."""
    module, name = SCORERS[protocol].split(":")
    scorer = getattr(importlib.import_module(module), name)
    real, calls = scorer.__call__, []

    def interrupted(self, rows):
        calls.append(rows.height)
        if len(calls) > windows:
            raise KeyboardInterrupt
        return real(self, rows)

    monkeypatch.setattr(scorer, "__call__", interrupted)
    return calls


@pytest.mark.xdist_group("ray")  # starts Ray: with the other Ray tests on one pytest-xdist worker
@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_end_to_end_bad_rows_cap_interrupt_resume_and_executors(protocol, manifests, tmp_path, monkeypatch, capsys,
                                                                ray_after):
    """The real Scorer, one manifest, windows of 2 rows and an audio cap of 25 s:
    - bad rows (a bad label, missing audio, a malformed field) keep their place with their error (exit
      code 1), and the 25.5-s clip fails its own row with a message naming the cap, which is recorded;
    - Ctrl-C in the third window exits 130 with how to resume, keeping the finished windows' shards and
      no lock; --resume then gives the uninterrupted run's rows (kill -9 midway is runtime_toy_scorer's,
      tests/test_runtime.py);
    - the processes and Ray executors give the local run's rows.
    The runs share one content cache (reward caches nothing): the first computes every clip's features,
    the later ones read them, so each protocol's features are computed once; the runtime's mechanics
    with features computed in each worker are the toy Scorer's (test_runtime.py, test_runtime_ray.py)."""
    from sdscore.runtime.provenance import read_provenance

    _, id_column, options = PROTOCOLS[protocol]
    manifest = str(manifests[protocol])
    full, out = tmp_path / "full.parquet", tmp_path / "out.parquet"
    cache = [] if protocol == "reward" else ["--cache-dir", str(tmp_path / "cache")]
    args = ["score", protocol, manifest, "--window-rows", "2", "--max-audio-seconds", "25", *options, *cache]
    capsys.readouterr()
    assert main([*args, "--out", str(full)]) == 1  # the bad rows fail
    assert "with errors" in capsys.readouterr().err
    results = pl.read_parquet(full)
    manifest_ids = [json.loads(line)[id_column] for line in open(manifest, encoding="utf-8")]
    assert results[id_column].to_list() == manifest_ids
    errors = dict(zip(results[id_column], results["error"]))
    assert any(bad in errors["bad-label"] for bad in ("sideways", "sorting", "'3'", "'soon'"))
    assert "no-such-clip.wav" in errors["bad-audio"]
    assert errors["bad-field"] is not None
    assert "long.wav: 25.5 s exceeds the configured cap of 25 s" in errors["long"]
    good = [i for i in manifest_ids if not i.startswith("bad-") and i != "long"]
    assert all(errors[i] is None for i in good), {i: errors[i] for i in good if errors[i]}
    assert read_provenance(full)["settings"]["max_audio_seconds"] == 25

    # Ctrl-C midway, then --resume
    parts = tmp_path / "out.parquet.parts"
    with monkeypatch.context() as patch:
        calls = _interrupt_after(patch, protocol, windows=2)
        assert main([*args, "--out", str(out)]) == 130
    assert len(calls) == 3
    assert "interrupted (finished windows are kept: rerun with --resume to continue)" in capsys.readouterr().err
    written = len(list(parts.glob("part-*.parquet")))
    assert not out.exists() and not (tmp_path / "out.parquet.lock").exists()
    assert 2 <= written < len(manifest_ids) / 2
    assert main([*args, "--out", str(out), "--resume"]) == 1
    resumed = pl.read_parquet(out)
    assert resumed[id_column].n_unique() == resumed.height == results.height
    assert resumed.equals(results)
    assert not parts.exists()

    # the processes and Ray executors equal local
    processes, ray = tmp_path / "processes.parquet", tmp_path / "ray.parquet"
    assert main([*args, "--out", str(processes), "--workers", "2"]) == 1
    # workers run one BLAS thread each, this process two: fp32 sums may round differently
    assert_frame_equal(pl.read_parquet(processes), results, check_exact=False, rel_tol=0, abs_tol=1e-6)
    if importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not installed (pip install sdscore[ray])")
    assert main([*args, "--out", str(ray), "--ray", "--workers", "2"]) == 1
    assert_frame_equal(pl.read_parquet(ray), results, check_exact=False, rel_tol=0, abs_tol=1e-6)


@pytest.mark.parametrize("protocol", ["consistency", "judge", "naturalness"])
def test_a_fifo_or_device_as_audio_is_a_row_error_not_a_hang(protocol, tiny_corpus, tmp_path):
    """The content-hash caches hash audio files before decoding them: a FIFO or /dev/zero must be
    refused, not read forever (a subprocess with a deadline, so a regression fails, not hangs)."""
    import os

    _, id_column, options = PROTOCOLS[protocol]
    fifo = tmp_path / "clip.wav"
    os.mkfifo(fifo)
    good = _absolute_manifest(tiny_corpus, protocol, tmp_path)[0]
    rows = [good]
    for name, path in (("fifo", str(fifo)), ("zero", "/dev/zero")):
        row = json.loads(json.dumps(good))
        row[id_column] = name
        if protocol == "consistency":
            row["turn_paths"][0] = path
        elif protocol == "naturalness":
            row["answer_audio_path"] = path
        else:
            row["audio1_path"] = path
        rows.append(row)
    manifest = _write_jsonl(tmp_path / "m.jsonl", rows)
    out = tmp_path / "out.parquet"
    done = subprocess.run([sys.executable, "-m", "sdscore.cli", "score", protocol, str(manifest), "--out", str(out),
                           "--cache-dir", str(tmp_path / "cache"), *options], capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 1, done.stderr
    errors = dict(zip(*pl.read_parquet(out).select(id_column, "error").to_dict(as_series=False).values()))
    assert errors[good[id_column]] is None
    assert "not a regular file" in errors["fifo"] and "not a regular file" in errors["zero"]


def _long_clip(path, seconds, rate=16000):
    """A WAV of `seconds` of low noise (written in blocks: a long file costs little memory)."""
    import numpy as np
    import soundfile as sf

    rng = np.random.default_rng(0)
    with sf.SoundFile(path, "w", rate, 1, subtype="PCM_16") as out:
        for start in range(0, int(seconds * rate), rate * 10):
            out.write((0.05 * rng.standard_normal(min(rate * 10, int(seconds * rate) - start))).astype("float32"))
    return str(path)


def _with_audio(protocol, row, path):
    row = json.loads(json.dumps(row))
    if protocol == "reward":
        row["chosen"][-1]["audio_path"] = path
    elif protocol == "consistency":
        row["turn_paths"][0] = path
    elif protocol == "naturalness":
        row["answer_audio_path"] = path
    else:
        row["audio1_path"] = path
    return row


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_the_default_cap_is_recorded_and_a_cached_result_does_not_bypass_a_cap(protocol, tiny_corpus, tmp_path):
    """Every protocol ships a default cap (600 s) on audio file length, set by --max-audio-seconds (the
    end-to-end test above fails a 25.5-s clip at 25 s): under the default the clip is scored. Embeddings
    and blueprints are cached by content: a file scored once without a cap must still fail its row when
    a later run sets one, exactly as if it were decoded again (reward caches nothing)."""
    from sdscore.audio.checks import DEFAULT_MAX_AUDIO_SECONDS
    from sdscore.runtime.provenance import read_provenance

    _, id_column, options = PROTOCOLS[protocol]
    rows = _absolute_manifest(tiny_corpus, protocol, tmp_path)[:2]
    # the cap: a whole second above the rows' own clips; the long clip half a second over it (scoring
    # it under the default costs its length, so it is no longer than that)
    cap = math.ceil(_longest_clip_seconds(rows)) + 1
    long_row = _with_audio(protocol, rows[0], _long_clip(tmp_path / "long.wav", cap + 0.5))
    long_row[id_column] = "long"
    manifest = _write_jsonl(tmp_path / "m.jsonl", [long_row, *rows])
    cache = [] if protocol == "reward" else ["--cache-dir", str(tmp_path / "cache")]
    default, capped = tmp_path / "default.parquet", tmp_path / "capped.parquet"
    assert main(["score", protocol, str(manifest), "--out", str(default), *cache, *options]) == 0
    assert read_provenance(default)["settings"]["max_audio_seconds"] == DEFAULT_MAX_AUDIO_SECONDS
    assert main(["score", protocol, str(manifest), "--out", str(capped), "--max-audio-seconds", str(cap),
                 *cache, *options]) == 1
    errors = dict(zip(*pl.read_parquet(capped).select(id_column, "error")))
    assert f"long.wav: {cap}.5 s exceeds the configured cap of {cap} s" in errors["long"]
    assert [errors[r[id_column]] for r in rows] == [None, None]
    assert read_provenance(capped)["settings"]["max_audio_seconds"] == cap


def _longest_clip_seconds(rows) -> float:
    """The longest audio file the rows name (string values ending in .wav, in nested lists and dicts too)."""
    import soundfile as sf

    def paths(value):
        if isinstance(value, str) and value.endswith(".wav"):
            yield value
        elif isinstance(value, dict):
            yield from (p for v in value.values() for p in paths(v))
        elif isinstance(value, list):
            yield from (p for v in value for p in paths(v))

    found = [sf.info(p).duration for p in paths(rows)]
    assert found, "the rows name no audio file"
    return max(found)


def test_reward_clips_cut_to_the_model_window_are_scored_with_a_warning(tiny_corpus, tmp_path):
    """The compact model hears each clip's first 30 s: a longer clip is scored, never silently —
    the pair's warning names the turn, its length and the window."""
    rows = _absolute_manifest(tiny_corpus, "reward", tmp_path)[:2]
    long_row = _with_audio("reward", rows[0], _long_clip(tmp_path / "long.wav", 31.0))
    manifest = _write_jsonl(tmp_path / "m.jsonl", [long_row, rows[1]])
    out = tmp_path / "out.parquet"
    assert main(["score", "reward", str(manifest), "--out", str(out)]) == 0
    results = pl.read_parquet(out)
    turn = len(long_row["chosen"]) - 1
    assert results["warning"].to_list() == [f"chosen: turn {turn} (31.0 s) cut to the model's first 30 s", None]
    assert results["error"].null_count() == 2 and results["chosen_reward"].null_count() == 0


def test_a_corrupt_data_page_under_a_good_footer_is_a_message_not_a_traceback(tiny_corpus, tmp_path, capsys):
    """The footer (schema, row count) reads, a data page does not decompress: found by the CLI
    fuzz test as a raw polars ComputeError midway through a run."""
    import pyarrow.parquet as pq

    frame = read_manifest(tiny_corpus / "reward_pairs.parquet", "reward")
    path = tmp_path / "m.parquet"
    frame.write_parquet(path, compression="zstd", row_group_size=4)
    data = bytearray(path.read_bytes())
    meta = pq.ParquetFile(path).metadata
    group = meta.row_group(1)  # rows 5-8; its largest column that is not a key (keys are read up front)
    column = max((group.column(i) for i in range(group.num_columns) if group.column(i).path_in_schema != "pair_id"),
                 key=lambda c: c.total_compressed_size)
    start, end = column.data_page_offset + column.total_compressed_size // 3, column.data_page_offset + \
        column.total_compressed_size
    data[start:end] = b"\xab" * (end - start)  # junk inside the compressed page, its header intact
    path.write_bytes(bytes(data))
    assert pq.ParquetFile(path).metadata.num_rows == frame.height  # the footer still reads
    out = tmp_path / "out.parquet"
    assert main(["score", "reward", str(path), "--out", str(out), "--window-rows", "4"]) == 2
    err = capsys.readouterr().err
    assert "could not read rows 5-8 of the manifest" in " ".join(err.split()) and "Traceback" not in err
