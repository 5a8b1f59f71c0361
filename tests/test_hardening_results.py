"""Issue 28 (hardening, round two): wrong results and tracebacks found by a hostile new user.

Each test fails on the code before its fix: resume over an edited manifest of the same size and
mtime, eval over duplicate ids, options of another mode, empty CSVs, late write failures, reports
of another protocol's metrics, arena judges whose ratings diverge, and the CLI's help and version.
"""

from __future__ import annotations

import os

import polars as pl
import pytest
from runtime_toy_scorer import ToyScorer, write_arena_manifest

from sdscore.errors import SdscoreError
from sdscore.protocols.arena.spec import SPEC as ARENA
from sdscore.runtime.provenance import manifest_fingerprint
from sdscore.runtime.run import score_manifest
from sdscore.runtime.scorer import ScoringJob


def _interrupted_run(manifest, out, monkeypatch, window_rows: int = 10) -> None:
    """Score `manifest` into `out` until the third window, which is interrupted (shards stay)."""
    calls = []
    real = ToyScorer.__call__

    def dies_on_third(self, rows):
        calls.append(rows.height)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(self, rows)

    monkeypatch.setattr(ToyScorer, "__call__", dies_on_third)
    with pytest.raises(KeyboardInterrupt):
        score_manifest(ScoringJob(ARENA, ToyScorer), manifest, out, window_rows=window_rows)
    monkeypatch.setattr(ToyScorer, "__call__", real)


def _csv_manifest(path) -> str:
    pl.read_parquet(write_arena_manifest(path.with_suffix(".parquet"), n_rows=50)).write_csv(path)
    return os.fspath(path)


# --- resume: the manifest's fingerprint is its content ------------------------------------------


def test_resume_refuses_a_manifest_edited_in_place_with_its_size_and_mtime_kept(tmp_path, monkeypatch):
    manifest = _csv_manifest(tmp_path / "battles.csv")
    out = tmp_path / "out.parquet"
    _interrupted_run(manifest, out, monkeypatch)
    before = os.stat(manifest)
    text = open(manifest, encoding="utf-8").read()
    edited = text.replace("model-1,", "model-8,")  # same length: the rows' models change
    assert edited != text and len(edited) == len(text)
    with open(manifest, "w", encoding="utf-8") as handle:
        handle.write(edited)
    os.utime(manifest, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(manifest).st_size == before.st_size
    with pytest.raises(SdscoreError, match=r"different settings.*manifest\.content"):
        score_manifest(ScoringJob(ARENA, ToyScorer), manifest, out, resume=True)


def test_resume_accepts_a_touched_manifest_with_the_same_bytes(tmp_path, monkeypatch):
    manifest = _csv_manifest(tmp_path / "battles.csv")
    out = tmp_path / "out.parquet"
    _interrupted_run(manifest, out, monkeypatch)
    os.utime(manifest, ns=(1, 1))  # only the modification time changes
    summary = score_manifest(ScoringJob(ARENA, ToyScorer), manifest, out, resume=True)
    assert (summary.resumed_shards, summary.scored_shards) == (2, 3)


def _kaldi_dir(folder):
    folder.mkdir()
    (folder / "wav.scp").write_text("r1 /audio/r1.wav\nr2 /audio/r2.wav\n")
    (folder / "text").write_text("r1 hello there\nr2 good night\n")
    return folder


def test_the_fingerprint_of_a_kaldi_folder_hashes_its_tables_and_nothing_else(tmp_path):
    folder = _kaldi_dir(tmp_path / "data")
    first = manifest_fingerprint(folder, "keys", 2)
    (folder / "notes.txt").write_text("not part of the rows")
    (folder / "split4").mkdir()
    assert manifest_fingerprint(folder, "keys", 2) == first
    (folder / "text").write_text("r1 hello where\nr2 good night\n")  # same size, other words
    assert manifest_fingerprint(folder, "keys", 2)["content"] != first["content"]
    # a wav.scp given alone stands for its folder's tables
    assert manifest_fingerprint(folder / "wav.scp", "keys", 2)["content"] == \
        manifest_fingerprint(folder, "keys", 2)["content"]


def test_the_fingerprint_of_a_dataset_folder_hashes_its_split_files(tmp_path):
    folder = tmp_path / "dataset"
    (folder / "data").mkdir(parents=True)
    pl.DataFrame({"battle_id": ["b1"], "winner": ["model_a"]}).write_parquet(folder / "data" / "train-0.parquet")
    first = manifest_fingerprint(folder, "keys", 1)["content"]
    (folder / "README.md").write_text("a dataset card")
    assert manifest_fingerprint(folder, "keys", 1)["content"] == first
    pl.DataFrame({"battle_id": ["b1"], "winner": ["model_b"]}).write_parquet(folder / "data" / "train-0.parquet")
    assert manifest_fingerprint(folder, "keys", 1)["content"] != first


# --- blank CSV/TSV manifests: one line, rc 2 (polars raised NoDataError) --------------------------


@pytest.mark.parametrize("content", [b"", b"\n\n", b"\xef\xbb\xbf", b"\xef\xbb\xbf\r\n \t\n"])
@pytest.mark.parametrize("suffix", [".csv", ".tsv"])
def test_a_blank_csv_manifest_is_one_clear_error(tmp_path, capsys, content, suffix):
    from sdscore.cli import main
    from sdscore.errors import ManifestError
    from sdscore.manifests import read_manifest

    manifest = tmp_path / f"blank{suffix}"
    manifest.write_bytes(content)
    with pytest.raises(ManifestError, match=r"blank\.(csv|tsv): the file is empty \(no header line and no rows\)"):
        read_manifest(manifest, "arena")
    assert main(["score", "judge", str(manifest), "--out", str(tmp_path / "out.parquet")]) == 2
    err = capsys.readouterr().err
    assert "the file is empty" in err and "Traceback" not in err


# --- eval refuses repeated ids, as score does --------------------------------------------------

_REPEATED = {  # kind: (rows with one id twice, the message naming it and its rows)
    "reward": ({"pair_id": ["p1", "p2", "p1"], "chosen_reward": [1.0, 2.0, 1.0], "rejected_reward": [0.0, 0.0, 0.0]},
               r"pair_id 'p1' \(rows 1, 3\)"),
    "judge": ({"item_id": ["a", "b", "b"], "overall_pred": ["1", "2", "2"]}, r"item_id 'b' \(rows 2, 3\)"),
    "consistency": ({"dataset": ["x", "x", "y"], "instance_id": ["i1", "i1", "i1"], "task": ["detection"] * 3},
                    r"dataset 'x', instance_id 'i1' \(rows 1, 2\)"),
    # a naturalness file may hold several systems' rows: an item repeats only within one system
    "naturalness": ({"item_id": ["u1", "u1", "u1"], "system": ["s", "t", "s"]}, r"system 's', item_id 'u1' \(rows 1, 3\)"),
    "arena": ({"battle_id": ["b1", "b1"], "model_a": ["m1", "m1"], "model_b": ["m2", "m2"],
               "winner": ["model_a", "model_b"]}, r"'b1' repeats row 1"),
}


@pytest.mark.parametrize("kind", list(_REPEATED))
def test_eval_refuses_repeated_ids_like_score(tmp_path, capsys, kind):
    from sdscore.cli import main

    rows, message = _REPEATED[kind]
    results = tmp_path / f"{kind}.parquet"
    pl.DataFrame(rows).write_parquet(results)
    assert main(["eval", kind, str(results), "--out", str(tmp_path / "metrics.json")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "Traceback" not in err
    assert __import__("re").search(message, err), err
    assert not (tmp_path / "metrics.json").exists()


def test_eval_reward_counts_each_pair_once_when_ids_are_unique(tmp_path):
    from sdscore.protocols.reward.evaluate import run_eval

    results = tmp_path / "reward.parquet"
    pl.DataFrame(_REPEATED["reward"][0]).with_columns(pl.Series("pair_id", ["p1", "p2", "p3"])).write_parquet(results)
    assert run_eval(results, tmp_path / "m.json")["n"] == 3


# --- WAV headers that lie are an AudioError on every backend --------------------------------------


def _wav_bytes(declared: int | None, frames: int = 800, rate: int = 16000) -> bytes:
    import struct

    import numpy as np

    data = (np.sin(np.arange(frames) / 7.0) * 8000).astype("<i2").tobytes()
    fmt = b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16)
    body = b"WAVE" + fmt + b"data" + struct.pack("<I", len(data) if declared is None else declared) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


@pytest.mark.parametrize("backend", ["native", "soundfile"])
def test_wav_headers_that_lie_are_an_audio_error(tmp_path, backend):
    from sdscore import audio
    from sdscore.errors import AudioError

    truncated = tmp_path / "truncated.wav"
    truncated.write_bytes(_wav_bytes(None)[:-600])  # a copy cut short: the header promises 1600 bytes
    lying = tmp_path / "lying.wav"
    lying.write_bytes(_wav_bytes(1 << 30))
    zero = tmp_path / "zero.wav"
    zero.write_bytes(_wav_bytes(0))
    for path, problem in ((truncated, "declares 1600 bytes but the file holds 1000"),
                          (lying, "declares 1073741824 bytes but the file holds 1600"),
                          (zero, "declares 0 bytes but 1600 bytes follow it")):
        with pytest.raises(AudioError, match=f"^{path}: .*{problem}"):
            audio.load(path, backend=backend)
        batch = audio.load_many([path], backend=backend)
        assert problem in batch.errors[0]
    streamed = tmp_path / "streamed.wav"  # 0xFFFFFFFF: a streaming writer's "size unknown"
    streamed.write_bytes(_wav_bytes(0xFFFFFFFF))
    assert len(audio.load(streamed, backend=backend)) == 800


# --- options of another mode are refused, not ignored ------------------------------------------

_OTHER_MODE = [  # (command after `score`, the message)
    (["judge", "--base-url", "http://127.0.0.1:9", "--model", "m"],
     "--model, --base-url are for --judge openai; with --judge rule they would be ignored"),
    (["judge", "--mode", "audio"], "--mode is for --judge openai; with --judge rule it would be ignored"),
    (["reward", "--judge", "openai", "--model", "m", "--device", "cuda"],
     "--device is for --judge reward-model; with --judge openai it would be ignored"),
    (["reward", "--orders", "shown"], "--orders is for --judge openai; with --judge reward-model"),
    (["reward", "--judge", "openai", "--model", "m", "--seed", "3"],
     "--seed is for --orders shown; with --orders both it would be ignored"),
    (["consistency", "--model", "m"], "--model is for --judge openai; with --judge embedding"),
    (["consistency", "--judge", "openai", "--model", "m", "--embedder", "wavlm"],
     "--embedder is for --judge embedding; with --judge openai"),
    (["consistency", "--judge", "openai", "--model", "m", "--permutations", "all", "--seed", "2"],
     "--seed is for --permutations one; with --permutations all"),
    (["arena", "--judge", "openai", "--model", "m", "--seed", "4"],
     "--seed is for --orders random; with --orders both it would be ignored"),
]


@pytest.mark.parametrize("command,message", _OTHER_MODE, ids=[" ".join(c[:1] + c[-2:]) for c, _ in _OTHER_MODE])
def test_options_of_another_mode_are_refused_before_any_work(tmp_path, capsys, command, message):
    from sdscore.cli import main

    manifest = write_arena_manifest(tmp_path / "m.parquet", n_rows=3)  # never read: refused first
    out = tmp_path / "out.parquet"
    assert main(["score", command[0], manifest, "--out", str(out), *command[1:]]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert message in err and "Traceback" not in err
    assert not out.exists()


# --- a write that fails late (disk full, an immutable output) is one message; the shards stay ---


def test_a_full_disk_while_writing_a_shard_keeps_the_finished_shards(tmp_path, monkeypatch):
    from sdscore.runtime import sharded_output

    manifest = write_arena_manifest(tmp_path / "battles.parquet", n_rows=50)
    out = tmp_path / "out.parquet"
    real, written = sharded_output.write_manifest, []

    def full_after_two(frame, path):
        if len(written) == 2:
            raise pl.exceptions.ComputeError("failed to write: No space left on device (os error 28)")
        written.append(path)
        return real(frame, path)

    monkeypatch.setattr(sharded_output, "write_manifest", full_after_two)
    with pytest.raises(SdscoreError, match=r"part-000002\.parquet: could not write the shard of rows 21\.\.30 "
                                           r"\(failed to write: No space left on device.*the finished shards in "
                                           r".*out\.parquet\.parts are intact.*rerun with --resume"):
        score_manifest(ScoringJob(ARENA, ToyScorer), manifest, out, window_rows=10)
    monkeypatch.setattr(sharded_output, "write_manifest", real)
    summary = score_manifest(ScoringJob(ARENA, ToyScorer), manifest, out, window_rows=10, resume=True)
    assert (summary.resumed_shards, summary.scored_shards, summary.rows) == (2, 3, 50)


def test_an_output_that_cannot_be_replaced_is_one_message_after_scoring(tmp_path, monkeypatch, capsys):
    import errno

    from sdscore import atomic_write

    manifest = write_arena_manifest(tmp_path / "battles.parquet", n_rows=20)
    out = tmp_path / "out.parquet"
    real = os.replace

    def immutable(src, dst):  # what chattr +i on OUT does to the final rename
        if os.fspath(dst) == os.fspath(out):
            raise PermissionError(errno.EPERM, "Operation not permitted", os.fspath(dst))
        return real(src, dst)

    monkeypatch.setattr(atomic_write.os, "replace", immutable)
    with pytest.raises(SdscoreError, match=r"out\.parquet: could not write the merged results \(Operation not "
                                           r"permitted: .*out\.parquet\); the finished shards .* intact"):
        score_manifest(ScoringJob(ARENA, ToyScorer), manifest, out, window_rows=10)
    assert sorted(p.name for p in (tmp_path / "out.parquet.parts").iterdir())[:2] == [
        "part-000000.parquet", "part-000001.parquet"]
    monkeypatch.setattr(atomic_write.os, "replace", real)
    summary = score_manifest(ScoringJob(ARENA, ToyScorer), manifest, out, window_rows=10, resume=True)
    assert (summary.resumed_shards, summary.scored_shards, summary.rows) == (2, 0, 20)


# --- the command line: Ctrl-C while starting, --version, each eval kind's own help -----------------

_INTERRUPT_ON_IMPORT = """
import builtins, os, signal, sys
sys.argv = ["sdscore", "score", "arena", {manifest!r}, "--out", {out!r}, "--judge", "openai", "--model", "m"]
real_import, fired = builtins.__import__, []
def interrupting_import(name, *args, **kwargs):
    if name == {module!r} and not fired:
        fired.append(name)
        os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C sends, while the CLI's modules load
    return real_import(name, *args, **kwargs)
builtins.__import__ = interrupting_import
from sdscore.cli import main
sys.exit(main())
"""


@pytest.mark.parametrize("module", ["polars", "sdscore.runtime.settings"])
def test_ctrl_c_while_starting_exits_130_without_a_traceback(tmp_path, module):
    """polars loads when the command starts to run (after parsing); the settings module while the parser is built."""
    import subprocess
    import sys

    manifest = write_arena_manifest(tmp_path / "m.parquet", n_rows=3)
    code = _INTERRUPT_ON_IMPORT.format(manifest=manifest, out=str(tmp_path / "o.parquet"), module=module)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 130, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "interrupted" in done.stderr


def test_version(capsys):
    from sdscore import __version__
    from sdscore.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0 and capsys.readouterr().out.strip() == f"sdscore {__version__}"


def _battles(path, judges: dict[str, str]) -> str:
    """Battles of three models, every pair both ways, per judge: "cycle" gives each model wins and
    losses (finite ratings); "m1" always prefers model m1 (it never loses: its rating diverges)."""
    rows = []
    pairs = [("m1", "m2"), ("m2", "m3"), ("m3", "m1"), ("m2", "m1"), ("m3", "m2"), ("m1", "m3")]
    for judge, kind in judges.items():
        for i, (a, b) in enumerate(pairs * 30):
            if kind == "m1":
                winner = "model_a" if a == "m1" else "model_b" if b == "m1" else "tie"
            else:
                winner = ("model_a", "model_b", "tie")[i % 3]
            rows.append({"battle_id": f"{judge}-{i}", "model_a": a, "model_b": b, "winner": winner, "judge": judge,
                         "prompt_id": f"p{i % 6}"})
    pl.DataFrame(rows).write_parquet(path)
    return os.fspath(path)


def test_eval_arena_reports_a_diverging_judge_as_unavailable_and_goes_on(tmp_path, capsys, arena_few_bootstraps):
    import json

    from sdscore.cli import main

    battles = _battles(tmp_path / "battles.parquet", {"human": "cycle", "always-m1": "m1"})
    out = tmp_path / "m.json"
    assert main(["eval", "arena", battles, "--out", str(out)]) == 0, capsys.readouterr().err
    metrics = json.loads(out.read_text())
    assert metrics["judge"] == "human" and set(metrics["bradley_terry"]) == {"m1", "m2", "m3"}
    unavailable = metrics["by_judge"]["always-m1"]["ratings_unavailable"]
    assert "Bradley–Terry MLE does not exist" in unavailable and "--l2" in unavailable
    assert metrics["ratings_unavailable"] == {"always-m1": unavailable}
    assert "bradley_terry" in metrics["by_judge"]["human"]
    # the diverging judge as the headline: one line naming the option, and --l2 gives finite ratings
    assert main(["eval", "arena", battles, "--out", str(tmp_path / "j.json"), "--judge", "always-m1"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "judge 'always-m1' (the headline ratings): Bradley–Terry MLE does not exist" in err
    assert "`sdscore eval arena --l2 0.01`" in err and "pass l2 > 0" not in err
    assert main(["eval", "arena", battles, "--out", str(tmp_path / "j.json"), "--judge", "always-m1",
                 "--l2", "0.01"]) == 0
    ratings = json.loads((tmp_path / "j.json").read_text())["bradley_terry"]
    assert next(iter(ratings)) == "m1" and all(abs(v["rating"]) < 1e4 for v in ratings.values())


def test_each_eval_kind_has_its_own_help(capsys):
    from sdscore.cli import main
    from sdscore.protocols.registry import PROTOCOLS

    helps = {}
    for kind in PROTOCOLS:
        with pytest.raises(SystemExit):
            main(["eval", kind, "--help"])
        helps[kind] = " ".join(capsys.readouterr().out.split())
    assert len(set(helps.values())) == len(helps)
    assert "`sdscore score reward`" in helps["reward"] and "one file per judge" in helps["judge"]
    assert "battles manifest" in helps["arena"] and "--l2" in helps["arena"] and "--pool-judges" in helps["arena"]
    assert all("--l2" not in text and "--judge NAME" not in text for kind, text in helps.items() if kind != "arena")
    assert "--plot" not in helps["arena"] and "--seed" not in helps["reward"] and "--seed" in helps["judge"]
