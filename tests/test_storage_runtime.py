"""`sdscore score` with a manifest, audio and output on a local S3 endpoint (moto on 127.0.0.1, IAM on:
tests/s3_server.py): the shipped compact reward model scores the same as with everything on local
disk; bad objects are their rows' errors; `--out s3://...` writes shards, merges, resumes; the
lease lock object refuses a second run and is taken over from a dead one."""

from __future__ import annotations

import io
import json
import os
import re
import socket
import subprocess
import sys
import time

import numpy as np
import polars as pl
import pytest
import soundfile as sf
from s3_server import running_s3, use_s3

import sdscore.protocols.reward.scorer as reward_scoring
from sdscore.cli import main
from sdscore.corpus import write_manifest
from sdscore.corpus.schemas import REWARD_PAIRS
from sdscore.errors import SdscoreError
from sdscore.protocols import registry
from sdscore.runtime.object_lock import ObjectLock
from sdscore.runtime.provenance import read_provenance

SR = 16000
N_PAIRS = 5
SCORES = ["pair_id", "chosen_reward", "rejected_reward", "error"]


@pytest.fixture(scope="module")
def s3():
    yield from running_s3()


@pytest.fixture(autouse=True)
def s3_env(s3, monkeypatch, tmp_path):
    use_s3(s3, monkeypatch)
    monkeypatch.setenv("SDSCORE_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def pairs(s3, tmp_path_factory):
    """(local manifest, its URI) of N_PAIRS reward pairs whose clips (relative paths) lie both in the
    manifest's local folder and under its S3 prefix."""
    folder = tmp_path_factory.mktemp("pairs")
    rng = np.random.default_rng(5)
    rows = []
    for i in range(N_PAIRS):
        sides = {}
        for side in ("chosen", "rejected"):
            turns = []
            for t in range(2):
                name = f"{i}-{side}-{t}.wav"
                samples = 0.2 * np.sin(2 * np.pi * rng.uniform(150, 400) * np.arange(int(rng.uniform(0.3, 0.9) * SR)) / SR)
                sf.write(folder / name, samples.astype(np.float32), SR, subtype="FLOAT")
                s3.put_file(f"pairs/{name}", folder / name)
                turns.append({"role": ("user", "assistant")[t], "text": f"turn {t} of {side} {i}", "audio_path": name})
            sides[side] = turns
        rows.append({"pair_id": f"p{i}", "criterion": "modality", "subset": "wild", "category": "c", "source": "s",
                     "margin": None, **sides})
    local = folder / "pairs.parquet"
    write_manifest(pl.DataFrame(rows, schema=REWARD_PAIRS), local)
    write_manifest(pl.DataFrame(rows, schema=REWARD_PAIRS), folder / "pairs.jsonl")
    s3.put_file("pairs/pairs.jsonl", folder / "pairs.jsonl")
    return local, s3.put_file("pairs/pairs.parquet", local)


@pytest.fixture(scope="module")
def local_scores(pairs, tmp_path_factory):
    out = tmp_path_factory.mktemp("local") / "local.parquet"
    assert main(["score", "reward", str(pairs[0]), "--out", str(out)]) == 0
    return pl.read_parquet(out)


def _read(s3, key: str) -> pl.DataFrame:
    return pl.read_parquet(io.BytesIO(s3.get(key)))


def test_scores_with_manifest_audio_and_output_on_s3_equal_local_disk(s3, pairs, local_scores):
    out = s3.uri("runs/equal.parquet")
    assert main(["score", "reward", pairs[1], "--out", out]) == 0
    remote = _read(s3, "runs/equal.parquet")
    assert remote.select(SCORES).equals(local_scores.select(SCORES))
    assert remote["chosen_reward"].null_count() == 0
    provenance = read_provenance(io.BytesIO(s3.get("runs/equal.parquet")))
    assert provenance["manifest"]["path"] == pairs[1] and provenance["rows"] == N_PAIRS
    assert [k for k in s3.keys("runs/") if k.startswith("runs/equal")] == ["runs/equal.parquet"]  # no shards, no lock


def test_a_jsonl_manifest_on_s3_is_staged_and_scores_the_same(s3, pairs, local_scores, tmp_path):
    out = tmp_path / "from-jsonl.parquet"
    assert main(["score", "reward", s3.uri("pairs/pairs.jsonl"), "--out", str(out)]) == 0
    assert pl.read_parquet(out).select(SCORES).equals(local_scores.select(SCORES))


def test_missing_denied_and_truncated_audio_are_their_rows_errors(s3, pairs, tmp_path):
    frame = pl.read_parquet(pairs[0])
    good = (pairs[0].parent / "0-chosen-0.wav").read_bytes()
    s3.put("denied/clip.wav", good)
    s3.put("bad/short.wav", good[: len(good) // 3])
    for name in ("0-chosen-0.wav", "0-chosen-1.wav", "0-rejected-0.wav", "0-rejected-1.wav"):
        s3.put(f"bad/{name}", (pairs[0].parent / name).read_bytes())
    targets = {1: s3.uri("bad/missing.wav"), 2: s3.uri("denied/clip.wav"), 3: s3.uri("bad/short.wav")}
    rows = frame.to_dicts()
    for row in rows:  # row 0 all on S3, the others on local disk ...
        for side in ("chosen", "rejected"):
            for turn in row[side]:
                turn["audio_path"] = (s3.uri(f"bad/{turn['audio_path']}") if row is rows[0]
                                      else str(pairs[0].parent / turn["audio_path"]))
    for i, target in targets.items():  # ... but for one bad object each in rows 1-3
        rows[i]["chosen"][0]["audio_path"] = target
    manifest = tmp_path / "bad.parquet"
    write_manifest(pl.DataFrame(rows, schema=REWARD_PAIRS), manifest)
    out = s3.uri("runs/bad.parquet")
    assert main(["score", "reward", str(manifest), "--out", out]) == 1  # some rows failed
    result = _read(s3, "runs/bad.parquet")
    assert result["pair_id"].to_list() == frame["pair_id"].to_list()  # every row, in order
    errors = result["error"].to_list()
    assert errors[0] is None and errors[4] is None, errors
    assert s3.uri("bad/missing.wav") in errors[1] and "no such object" in errors[1]
    assert targets[2] in errors[2] and "access denied" in errors[2]
    assert targets[3] in errors[3] and "truncated or lying header" in errors[3]


def test_an_interrupted_run_on_s3_resumes_to_the_same_results(s3, pairs, monkeypatch, capsys, tmp_path):
    registry.score("reward", pairs[0], tmp_path / "full.parquet", window_rows=2)
    full = pl.read_parquet(tmp_path / "full.parquet")
    out = s3.uri("runs/resume.parquet")
    real, calls = reward_scoring.score_pairs_frame, []

    def dies_on_second_window(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(reward_scoring, "score_pairs_frame", dies_on_second_window)
    with pytest.raises(KeyboardInterrupt):
        registry.score("reward", pairs[1], out, window_rows=2)
    monkeypatch.setattr(reward_scoring, "score_pairs_frame", real)
    assert s3.keys("runs/resume") == ["runs/resume.parquet.parts/part-000000.parquet",
                                      "runs/resume.parquet.parts/run.json"]  # the lock went with the run
    with pytest.raises(SdscoreError, match=r"runs/resume\.parquet\.parts: holds shards of an unfinished run; pass --resume"):
        registry.score("reward", pairs[1], out, window_rows=2)
    with pytest.raises(SdscoreError, match=r"shard_rows \(2 then, 3 now\)"):
        registry.score("reward", pairs[1], out, window_rows=3, resume=True)
    summary = registry.score("reward", pairs[1], out, resume=True)  # the window size from the run record
    assert (summary.rows, summary.resumed_shards, summary.scored_shards) == (N_PAIRS, 1, 2)
    assert _read(s3, "runs/resume.parquet").equals(full)
    assert s3.keys("runs/resume") == ["runs/resume.parquet"]
    assert main(["score", "reward", pairs[1], "--out", out, "--resume"]) == 2
    assert "this run has already finished (no shards left to resume)" in capsys.readouterr().err


def _lease(s3, key: str, pid: int, host: str, renewed: float) -> None:
    s3.put(key, json.dumps({"pid": pid, "host": host, "started": "then", "token": "theirs", "renewed": renewed}).encode())


def test_a_live_lease_refuses_a_second_run_and_a_dead_ones_is_taken_over(s3, pairs):
    out = s3.uri("runs/locked.parquet")
    _lease(s3, "runs/locked.parquet.lock", os.getpid(), socket.gethostname(), time.time())
    with pytest.raises(SdscoreError, match=rf"another run is writing this output \(pid {os.getpid()} on "):
        registry.score("reward", pairs[1], out)
    _lease(s3, "runs/locked.parquet.lock", 12345, "another-machine", time.time())
    with pytest.raises(SdscoreError, match=r"pid 12345 on another-machine.*expires 120 s after its last renewal"):
        registry.score("reward", pairs[1], out)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    _lease(s3, "runs/locked.parquet.lock", int(dead.stdout), socket.gethostname(), time.time())  # crashed here
    assert registry.score("reward", pairs[1], out).rows == N_PAIRS
    _lease(s3, "runs/locked.parquet.lock", 12345, "another-machine", time.time() - 121)  # expired elsewhere
    assert registry.score("reward", pairs[1], out).rows == N_PAIRS
    assert s3.keys("runs/locked") == ["runs/locked.parquet"]


def test_a_run_that_loses_its_lease_stops(s3):
    out = s3.uri("runs/lost.parquet")
    with ObjectLock(out, lease=60) as lock:
        lock.check()
        _lease(s3, "runs/lost.parquet.lock", 999, "elsewhere", time.time())
        with pytest.raises(SdscoreError, match=r"this run no longer holds the output's lock .*now pid 999 on elsewhere"):
            lock.check()
    assert s3.keys("runs/lost") == ["runs/lost.parquet.lock"]  # the other holder's lease is left alone


def test_lease_seconds_from_the_environment(s3, monkeypatch):
    monkeypatch.setenv("SDSCORE_LOCK_LEASE_SECONDS", "soon")
    with pytest.raises(SdscoreError, match=r"SDSCORE_LOCK_LEASE_SECONDS='soon': expected a number of seconds"):
        ObjectLock(s3.uri("runs/x.parquet"))
    monkeypatch.setenv("SDSCORE_LOCK_LEASE_SECONDS", "0")
    with pytest.raises(SdscoreError, match=r"expected a positive number of seconds"):
        ObjectLock(s3.uri("runs/x.parquet"))


@pytest.mark.parametrize(("extra", "message"), [
    (["--out", "s3://sdscore-test/runs/out.csv"], r"results are written as Parquet; give --out a \.parquet URI"),
    (["--out", "s3:///out.parquet"], r"no bucket in the URI"),
    (["--out", "s3://sdscore-test/runs/f.parquet", "--format", "jsonl"], r"--format/--format-out need a local --out"),
    (["--out", "https://host/out.parquet"], r"unsupported location scheme 'https://'"),
])
def test_object_outputs_are_checked_before_any_work(s3, pairs, capsys, extra, message):
    assert main(["score", "reward", pairs[1], *extra]) == 2
    assert re.search(message, capsys.readouterr().err)


def test_an_existing_output_object_needs_overwrite_and_the_manifest_is_never_the_output(s3, pairs, capsys):
    s3.put("runs/exists.parquet", b"PAR1")
    assert main(["score", "reward", pairs[1], "--out", s3.uri("runs/exists.parquet")]) == 2
    assert "--out exists; pass --overwrite" in capsys.readouterr().err
    assert main(["score", "reward", pairs[1], "--out", pairs[1]]) == 2
    assert "is the manifest itself" in capsys.readouterr().err


def test_file_uris_are_local_paths_under_the_local_policy(pairs, tmp_path, local_scores, capsys, monkeypatch):
    out = tmp_path / "via-file-uri.parquet"
    assert main(["score", "reward", f"file://{pairs[0]}", "--out", f"file://{out}"]) == 0
    assert pl.read_parquet(out).select(SCORES).equals(local_scores.select(SCORES))
    monkeypatch.chdir(tmp_path)
    assert main(["score", "reward", str(pairs[0]), "--out", f"file://{tmp_path}"]) == 2
    assert "is the current folder, one above it or the home folder" in capsys.readouterr().err
    assert main(["score", "reward", f"file://{pairs[0]}", "--out", f"file://{pairs[0]}"]) == 2
    assert f"{pairs[0]}: --out is the input" in capsys.readouterr().err


def test_an_output_the_credentials_cannot_read_back_fails_before_any_work(s3, pairs):
    out = s3.uri("denied/out.parquet")  # the policy denies GetObject under denied/: the lease cannot be read
    with pytest.raises(SdscoreError, match=re.escape(f"{out}.lock: cannot read the output's lock (access denied")):
        registry.score("reward", pairs[1], out)
    assert not s3.keys("denied/out")


def test_worker_processes_read_and_write_the_store_like_one_process(s3, pairs, tmp_path):
    registry.score("reward", pairs[0], tmp_path / "one.parquet", window_rows=2)
    out = s3.uri("runs/workers.parquet")
    summary = registry.score("reward", pairs[1], out, window_rows=2, workers=2)
    assert summary.rows == N_PAIRS
    columns = ["chosen_reward", "rejected_reward"]
    np.testing.assert_allclose(_read(s3, "runs/workers.parquet")[columns].to_numpy(),
                               pl.read_parquet(tmp_path / "one.parquet")[columns].to_numpy(), atol=1e-6, rtol=0)
