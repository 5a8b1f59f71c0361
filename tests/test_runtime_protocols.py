"""Every protocol's Scorer on the runtime, end to end through `sdscore score`: kill -9 midway and
--resume gives the uninterrupted run's rows; bad rows (a bad label, missing audio, a malformed
field) keep their place with their error (exit code 1); the processes executor equals local."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from sdscore.cli import main
from sdscore.corpus import read_manifest

#: protocol → (corpus manifest, id column, CLI options: fast and offline)
PROTOCOLS = {
    "reward": ("reward_pairs.parquet", "pair_id", []),
    "consistency": ("consistency.parquet", "instance_id", ["--embedder", "ge2e", "--threshold", "0.7"]),
    "judge": ("judge_items.parquet", "item_id", ["--judge", "rule"]),
    "naturalness": ("naturalness.parquet", "item_id", ["--jobs", "1"]),
}
#: Scorer class each protocol's `score` runs (slowed down in the process that gets killed)
SCORERS = {
    "reward": "sdscore.protocols.reward.scoring:RewardPairsScorer",
    "consistency": "sdscore.protocols.consistency.protocol:ConsistencyScorer",
    "judge": "sdscore.protocols.judge.scorer:JudgeScorer",
    "naturalness": "sdscore.protocols.naturalness.scorer:NaturalnessScorer",
}
#: `sdscore score` with each window's scoring slowed by 0.3 s, so a SIGKILL lands between shards
SLOWED_CLI = """
import importlib, sys, time
module, name = sys.argv[1].split(":")
scorer = getattr(importlib.import_module(module), name)
real = scorer.__call__
def slowed(self, rows):
    out = real(self, rows)
    time.sleep(0.3)
    return out
scorer.__call__ = slowed
from sdscore.cli import main
sys.exit(main(sys.argv[2:]))
"""


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
    """Per protocol: a JSONL manifest of the corpus rows with three bad rows in the middle."""
    folder = tmp_path_factory.mktemp("runtime-protocols")
    out = {}
    for protocol in PROTOCOLS:
        rows = _absolute_manifest(tiny_corpus, protocol, folder)
        bad = _bad_rows(protocol, rows[0], folder)
        out[protocol] = _write_jsonl(folder / f"{protocol}.jsonl", rows[:3] + bad + rows[3:])
    return out


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_bad_rows_keep_their_place_with_their_error(protocol, manifests, tmp_path, capsys):
    _, id_column, options = PROTOCOLS[protocol]
    out = tmp_path / "out.parquet"
    assert main(["score", protocol, str(manifests[protocol]), "--out", str(out), *options]) == 1
    results = pl.read_parquet(out)
    manifest_ids = [json.loads(line)[id_column] for line in open(manifests[protocol], encoding="utf-8")]
    assert results[id_column].to_list() == manifest_ids
    errors = dict(zip(results[id_column], results["error"]))
    assert any(bad in errors["bad-label"] for bad in ("sideways", "sorting", "'3'", "'soon'"))
    assert "no-such-clip.wav" in errors["bad-audio"]
    assert errors["bad-field"] is not None
    good = [i for i in manifest_ids if not i.startswith("bad-")]
    assert all(errors[i] is None for i in good), {i: errors[i] for i in good if errors[i]}
    assert "with errors" in capsys.readouterr().err


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_sigkill_midway_then_resume_equals_an_uninterrupted_run(protocol, manifests, tmp_path):
    _, id_column, options = PROTOCOLS[protocol]
    manifest = str(manifests[protocol])
    full, out = tmp_path / "full.parquet", tmp_path / "out.parquet"
    args = ["score", protocol, manifest, "--window-rows", "2", *options]
    assert main([*args, "--out", str(full)]) == 1  # the bad rows fail
    parts = tmp_path / "out.parquet.parts"
    process = subprocess.Popen([sys.executable, "-c", SLOWED_CLI, SCORERS[protocol], *args, "--out", str(out)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    while len(list(parts.glob("part-*.parquet"))) < 2:
        assert process.poll() is None, f"the run ended (rc {process.returncode}) before it could be killed"
        assert time.monotonic() < deadline, "no shard written in 180 s"
        time.sleep(0.02)
    process.kill()  # SIGKILL: no cleanup runs
    process.wait()
    written = len(list(parts.glob("part-*.parquet")))
    assert not out.exists() and 2 <= written < len(open(manifest, encoding="utf-8").readlines()) / 2
    assert main([*args, "--out", str(out), "--resume"]) == 1
    resumed, expected = pl.read_parquet(out), pl.read_parquet(full)
    assert resumed[id_column].n_unique() == resumed.height == expected.height
    assert resumed.equals(expected)
    assert not parts.exists()


@pytest.fixture(scope="module")
def ray_after():
    """Ray, when a test starts it, is stopped after this module."""
    yield
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_processes_and_ray_executors_equal_local(protocol, manifests, tmp_path, ray_after):
    _, _, options = PROTOCOLS[protocol]
    local, processes, ray = tmp_path / "local.parquet", tmp_path / "processes.parquet", tmp_path / "ray.parquet"
    args = ["score", protocol, str(manifests[protocol]), "--window-rows", "3", *options]
    assert main([*args, "--out", str(local)]) == 1
    assert main([*args, "--out", str(processes), "--workers", "2"]) == 1
    # workers run one BLAS thread each, this process two: fp32 sums may round differently
    assert_frame_equal(pl.read_parquet(processes), pl.read_parquet(local), check_exact=False, rel_tol=0, abs_tol=1e-6)
    if importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not installed (pip install sdscore[ray])")
    assert main([*args, "--out", str(ray), "--ray", "--workers", "2"]) == 1
    assert_frame_equal(pl.read_parquet(ray), pl.read_parquet(local), check_exact=False, rel_tol=0, abs_tol=1e-6)


def test_ctrl_c_stops_cleanly_and_says_how_to_resume(manifests, tmp_path, monkeypatch, capsys):
    import sdscore.protocols.reward.scoring as reward_scoring

    def interrupted(self, rows):
        raise KeyboardInterrupt

    monkeypatch.setattr(reward_scoring.RewardPairsScorer, "__call__", interrupted)
    out = tmp_path / "out.parquet"
    assert main(["score", "reward", str(manifests["reward"]), "--out", str(out)]) == 130
    assert "interrupted (finished windows are kept: rerun with --resume to continue)" in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "out.parquet.lock").exists()


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
def test_audio_over_the_cap_fails_its_row_and_the_cap_is_recorded(protocol, tiny_corpus, tmp_path):
    """Every protocol ships a default cap (600 s) on audio file length, set by --max-audio-seconds:
    a longer file fails its own row with a message naming the cap; the other rows are scored."""
    from sdscore.audio.checks import DEFAULT_MAX_AUDIO_SECONDS
    from sdscore.runtime.provenance import read_provenance

    _, id_column, options = PROTOCOLS[protocol]
    rows = _absolute_manifest(tiny_corpus, protocol, tmp_path)[:2]
    long_row = _with_audio(protocol, rows[0], _long_clip(tmp_path / "long.wav", 25.5))
    long_row[id_column] = "long"
    manifest = _write_jsonl(tmp_path / "m.jsonl", [long_row, *rows])
    out = tmp_path / "out.parquet"
    assert main(["score", protocol, str(manifest), "--out", str(out), "--max-audio-seconds", "25", *options]) == 1
    errors = dict(zip(*pl.read_parquet(out).select(id_column, "error")))
    assert "long.wav: 25.5 s exceeds the configured cap of 25 s" in errors["long"]
    assert [errors[r[id_column]] for r in rows] == [None, None]
    assert read_provenance(out)["settings"]["max_audio_seconds"] == 25
    assert main(["score", protocol, str(manifest), "--out", str(tmp_path / "default.parquet"), *options]) == 0
    assert read_provenance(tmp_path / "default.parquet")["settings"]["max_audio_seconds"] == DEFAULT_MAX_AUDIO_SECONDS


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


@pytest.mark.parametrize("protocol", ["consistency", "judge", "naturalness"])
def test_a_cached_result_does_not_bypass_the_audio_cap(protocol, tiny_corpus, tmp_path):
    """Embeddings and blueprints are cached by content: a file scored once without a cap must
    still fail its row when a later run sets one, exactly as if it were decoded again."""
    _, id_column, options = PROTOCOLS[protocol]
    row = _with_audio(protocol, _absolute_manifest(tiny_corpus, protocol, tmp_path)[0],
                      _long_clip(tmp_path / "long.wav", 25.5))
    manifest = _write_jsonl(tmp_path / "m.jsonl", [row])
    cache = ["--cache-dir", str(tmp_path / "cache")]
    first, second = tmp_path / "first.parquet", tmp_path / "second.parquet"
    assert main(["score", protocol, str(manifest), "--out", str(first), *cache, *options]) == 0
    assert main(["score", protocol, str(manifest), "--out", str(second), "--max-audio-seconds", "25",
                 *cache, *options]) == 1
    assert "long.wav: 25.5 s exceeds the configured cap of 25 s" in pl.read_parquet(second)["error"][0]


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
