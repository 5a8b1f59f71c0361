"""The output-path policy (output_paths.py) driven through every command that writes.

Every output option of every writing command is pointed at the inputs and at what it must never
touch: the manifest, the manifest's folder, ".", "", an existing folder and file sdscore did not
write, a symlink and a hard link to the input, and another output of the same run. Each must be
refused with a one-line message naming the path (rc 2), before any work, leaving every file of
the tree as it was (hashed before and after). The defects of issue 28 (scp output deleting the
current folder or the manifest's folder, --format jsonl overwriting a pairs.jsonl manifest,
--format-out replacing the manifest or the results, --format-out checked only after scoring)
each have a test here that fails on the code before the policy.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import soundfile as sf

import sdscore.cli.score as cli_score
from sdscore.cli import main
from sdscore.corpus import write_manifest
from sdscore.corpus.schemas import REWARD_PAIRS
from sdscore.output_paths import (
    MARKER,
    OutputPathError,
    OutputPlan,
    claim_folder,
    read_marker,
    staged_folder,
)
from sdscore.runtime.run import RunSummary

from tree_state import tree_state

SR = 16000


def _pairs(folder: Path, n: int = 3) -> list[dict]:
    rows = []
    for i in range(n):
        sides = {}
        for side, freq in (("chosen", 220.0), ("rejected", 330.0)):
            name = f"audio/{i}-{side}.wav"
            t = np.arange(int(0.3 * SR)) / SR
            sf.write(folder / name, (0.2 * np.sin(2 * np.pi * (freq + i) * t)).astype(np.float32), SR)
            sides[side] = [{"role": "user", "text": f"question {i}", "audio_path": name},
                           {"role": "assistant", "text": f"answer {i} {side}", "audio_path": name}]
        rows.append({"pair_id": f"p{i}", "criterion": "modality", "subset": "wild", "category": "c",
                     "source": "s", "margin": None, **sides})
    return rows


@pytest.fixture
def world(tmp_path, monkeypatch):
    """A work folder (the current folder) with inputs in data/, foreign files, and links to the inputs."""
    root = tmp_path / "work"
    data = root / "data"
    (data / "audio").mkdir(parents=True)
    write_manifest(pl.DataFrame(_pairs(data), schema=REWARD_PAIRS), data / "pairs.jsonl")
    pl.DataFrame({"pair_id": ["p0", "p1"], "reward_chosen": [1.0, 0.5], "reward_rejected": [0.0, 0.7],
                  "error": pl.Series([None, None], dtype=pl.String)}).write_parquet(data / "results.parquet")
    (data / "metrics.json").write_text("{}\n")
    (data / "segments.csv").write_text("conversation_id,speaker,start,end,text,audio_path\n")
    (data / "model").mkdir()
    (data / "model" / "config.json").write_text("{}\n")
    (root / "foreign").mkdir()
    (root / "foreign" / "keep.txt").write_text("not sdscore's\n")
    (root / "foreign.txt").write_text("not sdscore's either\n")
    for name, target in (("pairs.jsonl", "data/pairs.jsonl"), ("results.parquet", "data/results.parquet"),
                         ("segments.csv", "data/segments.csv"), ("metrics.json", "data/metrics.json")):
        (root / f"link-{name}").symlink_to(target)
        os.link(root / target, root / f"hard-{name}")
    (root / "link-model").symlink_to("data/model", target_is_directory=True)
    monkeypatch.chdir(root)
    return root


def _run(argv: list[str], capsys) -> tuple[int, str]:
    capsys.readouterr()
    code = main(argv)
    return code, capsys.readouterr().err


class FakeScore:
    """Stands in for the scoring run (hours in real use): records that it ran, writes results."""

    def __init__(self):
        self.calls = 0

    def __call__(self, name, manifest, out, **_):
        self.calls += 1
        pl.DataFrame({"pair_id": ["p0", "p1"], "reward_chosen": [1.0, 0.5],
                      "error": pl.Series([None, None], dtype=pl.String)}).write_parquet(out)
        return RunSummary(Path(out), 2, 0, 1, 0, 0.0)


@pytest.fixture
def fake_score(monkeypatch):
    fake = FakeScore()
    monkeypatch.setattr(cli_score, "score", fake)
    return fake


# --- every command's every output option ------------------------------------------------------------
# command → (argv with {option} fields, each option's default (a new path), option flag and kind,
#            the command's main input and its links, whether it takes --overwrite)
COMMANDS = {
    "score-jsonl": (["score", "reward", "data/pairs.jsonl", "--out", "{out}", "--format", "jsonl",
                     "--format-out", "{fmt}"],
                    {"out": ("new/r.parquet", "--out", "file"), "fmt": ("new/r.jsonl", "--format-out", "file")},
                    "pairs.jsonl", True),
    "score-scp": (["score", "reward", "data/pairs.jsonl", "--out", "{out}", "--format", "scp", "--format-out", "{fmt}"],
                  {"out": ("new/r.parquet", "--out", "file"), "fmt": ("new/r_scp", "--format-out", "folder")},
                  "pairs.jsonl", True),
    "eval-reward": (["eval", "reward", "data/results.parquet", "--out", "{out}", "--plot", "{plot}",
                     "--report", "{report}"],
                    {"out": ("new/m.json", "--out", "file"), "plot": ("new/p.png", "--plot", "file"),
                     "report": ("new/r.html", "--report", "file")}, "results.parquet", True),
    "eval-judge": (["eval", "judge", "data/results.parquet", "--out", "{out}", "--plot", "{plot}"],
                   {"out": ("new/m.json", "--out", "file"), "plot": ("new/plots", "--plot", "folder")},
                   "results.parquet", True),
    "report": (["report", "--protocol", "reward", "data/results.parquet", "--metrics", "data/metrics.json",
                "--out", "{out}"], {"out": ("new/r.html", "--out", "file")}, "metrics.json", True),
    "stratify": (["corpus", "stratify", "data/pairs.jsonl", "--out", "{out}", "--remaining", "{rem}"],
                 {"out": ("new/bench.jsonl", "--out", "file"), "rem": ("new/rest.jsonl", "--remaining", "file")},
                 "pairs.jsonl", True),
    "sample-check": (["corpus", "sample-check", "data/results.parquet", "--out", "{out}"],
                     {"out": ("new/sample.jsonl", "--out", "file")}, "results.parquet", True),
    "filter-sdiareward": (["corpus", "filter-sdiareward", "data/pairs.jsonl", "--out", "{out}"],
                          {"out": ("new/kept.jsonl", "--out", "file")}, "pairs.jsonl", True),
    "select-dialogues": (["corpus", "select-dialogues", "data/segments.csv", "--out", "{out}"],
                         {"out": ("new/selection", "--out", "folder")}, "segments.csv", True),
    "export": (["export", "data/model", "--out", "{out}"], {"out": ("new/export", "--out", "folder")}, "model", True),
    "train": (["train", "reward", "data/pairs.jsonl", "--out", "{out}", "--init", "data/model"],
              {"out": ("new/model", "--out", "folder")}, "pairs.jsonl", True),
    "synth": (["synth", "--out", "{out}"], {"out": ("new/corpus", "--out", "folder")}, None, False),
    "demo": (["demo", "--out", "{out}"], {"out": ("new/demo", "--out", "folder")}, None, False),
}

HOSTILE = ["manifest", "parent", "dot", "empty", "foreign-folder", "foreign-file", "symlink", "hardlink",
           "other-output"]


def _hostile_value(case: str, command: str, option: str) -> str | None:
    """The path `case` names for `option` of `command` (None: the case does not apply to it)."""
    _, options, main_input, _ = COMMANDS[command]
    if case in ("manifest", "parent", "symlink", "hardlink") and main_input is None:
        return None
    if case == "manifest":
        return f"data/{main_input}"
    if case == "parent":
        return "data"
    if case == "symlink":
        return f"link-{main_input}"
    if case == "hardlink":
        return None if main_input == "model" else f"hard-{main_input}"
    if case == "other-output":
        others = [default for name, (default, _, _) in options.items() if name != option]
        return others[0] if others else None
    return {"dot": ".", "empty": "", "foreign-folder": "foreign", "foreign-file": "foreign.txt"}[case]


def _argv(command: str, values: dict[str, str]) -> list[str]:
    template, options, _, _ = COMMANDS[command]
    fields = {name: values.get(name, default) for name, (default, _, _) in options.items()}
    return [part.format(**fields) for part in template]


CASES = [(command, option, case, overwrite)
         for command, (_, options, _, takes_overwrite) in COMMANDS.items()
         for option in options for case in HOSTILE for overwrite in ((False, True) if takes_overwrite else (False,))
         if _hostile_value(case, command, option) is not None
         # --overwrite may replace an existing file sdscore did not write (never a folder)
         and not (overwrite and case == "foreign-file" and options[option][2] == "file")]


@pytest.mark.parametrize(("command", "option", "case", "overwrite"), CASES,
                         ids=[f"{c}-{o}-{k}{'-overwrite' if w else ''}" for c, o, k, w in CASES])
def test_every_output_option_refuses_hostile_paths(world, fake_score, capsys, command, option, case, overwrite):
    value = _hostile_value(case, command, option)
    argv = _argv(command, {option: value}) + (["--overwrite"] if overwrite else [])
    before = tree_state(world.parent)
    code, err = _run(argv, capsys)
    assert code == 2, err
    assert tree_state(world.parent) == before  # nothing deleted, changed or created
    assert fake_score.calls == 0  # refused before any work
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    flag = COMMANDS[command][1][option][1]
    assert (flag if value == "" else value) in lines[0], err


def test_the_cases_cover_every_output_option_of_every_writing_command():
    """A writing command or output option added to the CLI without a row in COMMANDS fails here."""
    from sdscore.cli import build_parser

    seen = set()
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    output_flags = {"--out", "--format-out", "--plot", "--report", "--remaining"}

    def walk(p, path):
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    walk(child, [*path, name])
            elif any(f in output_flags for f in action.option_strings):
                seen.add((path[0], action.option_strings[-1]))

    for name, child in sub.choices.items():
        walk(child, [name])
    covered = {(_argv(c, {})[0], flag) for c, (_, options, _, _) in COMMANDS.items()
               for _, flag, _ in options.values()}
    assert seen == covered


# --- the reproduced defects (issue 28) ----------------------------------------------------------------
def test_scp_format_out_empty_deletes_nothing(world, fake_score, capsys):
    before = tree_state(world.parent)
    code, err = _run(["score", "reward", "data/pairs.jsonl", "--out", "r.parquet", "--format", "scp",
                      "--format-out", ""], capsys)
    assert code == 2 and "--format-out: empty path" in err
    assert tree_state(world.parent) == before and fake_score.calls == 0


def test_scp_format_out_on_the_manifests_folder_deletes_nothing(world, fake_score, capsys):
    before = tree_state(world.parent)
    code, err = _run(["score", "reward", "data/pairs.jsonl", "--out", "r.parquet", "--format", "scp",
                      "--format-out", "data"], capsys)
    assert code == 2 and "data: --format-out is a folder that holds the input data/pairs.jsonl" in err
    assert tree_state(world.parent) == before and fake_score.calls == 0


def test_scp_format_out_on_a_foreign_folder_deletes_nothing_even_with_overwrite(world, fake_score, capsys):
    before = tree_state(world.parent)
    code, err = _run(["score", "reward", "data/pairs.jsonl", "--out", "r.parquet", "--format", "scp",
                      "--format-out", "foreign", "--overwrite"], capsys)
    assert code == 2 and "foreign: --format-out is a folder that sdscore did not write" in err
    assert tree_state(world.parent) == before and fake_score.calls == 0


def test_default_jsonl_destination_never_overwrites_a_pairs_jsonl_manifest(world, fake_score, capsys):
    before = tree_state(world.parent)
    code, err = _run(["score", "reward", "data/pairs.jsonl", "--out", "data/pairs.parquet", "--format", "jsonl"],
                     capsys)
    assert code == 2 and "data/pairs.jsonl: --format-out is the input data/pairs.jsonl" in err
    assert tree_state(world.parent) == before and fake_score.calls == 0


@pytest.mark.parametrize(("target", "message"), [
    ("data/pairs.jsonl", "data/pairs.jsonl: --format-out is the input"),
    ("r.parquet", "r.parquet: --format-out is the same path as --out"),
    ("r.parquet.parts", "r.parquet.parts: --format-out is the same path as --out's shard folder"),
])
def test_format_out_on_the_manifest_or_the_results_is_refused(world, fake_score, capsys, target, message):
    before = tree_state(world.parent)
    code, err = _run(["score", "reward", "data/pairs.jsonl", "--out", "r.parquet", "--format", "jsonl",
                      "--format-out", target], capsys)
    assert code == 2 and message in err
    assert tree_state(world.parent) == before and fake_score.calls == 0


def test_format_out_is_checked_before_scoring(world, fake_score, capsys):
    (world / "taken.jsonl").write_text("mine\n")
    code, err = _run(["score", "reward", "data/pairs.jsonl", "--out", "r.parquet", "--format", "jsonl",
                      "--format-out", "taken.jsonl"], capsys)
    assert code == 2 and "taken.jsonl: --format-out exists; pass --overwrite" in err
    assert fake_score.calls == 0 and not (world / "r.parquet").exists()
    assert (world / "taken.jsonl").read_text() == "mine\n"


def test_an_existing_results_file_needs_overwrite(world, fake_score, capsys):
    (world / "r.parquet").write_bytes(b"earlier results")
    code, err = _run(["score", "reward", "data/pairs.jsonl", "--out", "r.parquet"], capsys)
    assert code == 2 and "r.parquet: --out exists; pass --overwrite" in err and fake_score.calls == 0
    assert main(["score", "reward", "data/pairs.jsonl", "--out", "r.parquet", "--overwrite"]) == 0
    assert pl.read_parquet(world / "r.parquet").height == 2


def test_resume_of_a_finished_run_says_so_and_keeps_the_results(world, fake_score, capsys):
    assert main(["score", "reward", "data/pairs.jsonl", "--out", "r.parquet"]) == 0
    before = (world / "r.parquet").read_bytes()
    code, err = _run(["score", "reward", "data/pairs.jsonl", "--out", "r.parquet", "--resume"], capsys)
    assert code == 2 and "r.parquet: this run has already finished (no shards left to resume)" in err
    assert (world / "r.parquet").read_bytes() == before and fake_score.calls == 1


# --- real scoring: the outputs written, replaced only when sdscore wrote them --------------------------
def test_scp_folder_written_replaced_with_overwrite_and_never_over_foreign_files(world, capsys):
    argv = ["score", "reward", "data/pairs.jsonl", "--out", "out/r.parquet", "--format", "scp"]
    code, err = _run(argv, capsys)
    assert code == 0, err
    scp = world / "out" / "r_scp"
    assert read_marker(scp)["files"] == sorted(p.name for p in scp.glob("*.scp")) and (scp / "chosen_reward.scp").exists()
    before = tree_state(world.parent)
    code, err = _run(argv, capsys)  # a second run: --out exists
    assert code == 2 and "out/r.parquet: --out exists; pass --overwrite" in err and tree_state(world.parent) == before
    (world / "out" / "r.parquet").unlink()
    code, err = _run(argv, capsys)  # the scp folder from the earlier run, checked before scoring
    assert code == 2 and "out/r_scp: --format-out exists (an earlier sdscore output); pass --overwrite" in err
    assert not (world / "out" / "r.parquet").exists()
    (scp / "notes.txt").write_text("the user's\n")
    before = tree_state(world.parent)
    code, err = _run(argv + ["--overwrite"], capsys)
    assert code == 2 and "holds 1 file(s) sdscore did not write there (e.g. notes.txt)" in err
    assert tree_state(world.parent) == before
    (scp / "notes.txt").unlink()
    code, err = _run(argv + ["--overwrite"], capsys)
    assert code == 0, err
    assert (world / "out" / "r.parquet").exists() and (scp / "chosen_reward.scp").exists()
    assert not list(world.glob("out/.*sdscore-*"))  # no staging or old folder left behind


def test_real_scoring_refuses_the_manifests_folder_for_scp_before_scoring(world, capsys):
    before = tree_state(world.parent)
    code, err = _run(["score", "reward", "data/pairs.jsonl", "--out", "data/r.parquet", "--format", "scp",
                      "--format-out", "data"], capsys)
    assert code == 2 and "holds the input" in err
    assert tree_state(world.parent) == before


# --- the policy itself ----------------------------------------------------------------------------------
def test_plan_refuses_nested_outputs_and_inputs_under_another_name(tmp_path):
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("{}\n")
    plan = OutputPlan([manifest])
    plan.folder(tmp_path / "out", "--format-out")
    with pytest.raises(OutputPathError, match=r"--out and --format-out nest \(--out would be inside --format-out\)"):
        plan.file(tmp_path / "out" / "r.parquet", "--out")
    with pytest.raises(OutputPathError, match="is the input"):
        plan.file(tmp_path / "." / "sub" / ".." / "m.jsonl", "--out")
    with pytest.raises(OutputPathError, match="is the current folder, one above it or the home folder"):
        OutputPlan().folder(Path.cwd().parent, "--out")
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro").chmod(0o500)
    try:
        if not os.access(tmp_path / "ro", os.W_OK):  # root writes anywhere
            with pytest.raises(OutputPathError, match="is not a writable folder"):
                OutputPlan().file(tmp_path / "ro" / "x.json", "--out")
    finally:
        (tmp_path / "ro").chmod(0o700)


def test_a_symlinked_output_is_never_replaced_even_with_overwrite(tmp_path):
    """Found by the CLI fuzz: `eval reward ... --report link.jsonl --overwrite` swapped a user's symlink
    (pointing at a file that is not an input of that command) for a plain file."""
    target = tmp_path / "pairs.jsonl"
    target.write_text("{}\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    for overwrite in (False, True):
        with pytest.raises(OutputPathError, match=r"link\.jsonl: --report is a symbolic link; it is never replaced"):
            OutputPlan(overwrite=overwrite).file(link, "--report")
    assert link.is_symlink() and target.read_text() == "{}\n"


def test_staged_folder_leaves_the_old_output_when_the_work_fails(tmp_path):
    target = tmp_path / "out"
    with staged_folder(target, command="test") as stage:
        (stage / "a.txt").write_text("1")
    assert read_marker(target) == {"written_by": "sdscore", "command": "test", "files": ["a.txt"]}
    with pytest.raises(RuntimeError, match="boom"):
        with staged_folder(target, overwrite=True, command="test") as stage:
            (stage / "b.txt").write_text("2")
            raise RuntimeError("boom")
    assert sorted(p.name for p in target.iterdir()) == [MARKER, "a.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_claimed_folders_are_reused_only_by_their_command(tmp_path):
    claim_folder(tmp_path / "corpus", "sdscore synth")
    claim_folder(tmp_path / "corpus", "sdscore synth")  # its own render cache: reused
    with pytest.raises(OutputPathError, match="was written by `sdscore synth`, not `sdscore demo`"):
        claim_folder(tmp_path / "corpus", "sdscore demo")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "x").write_text("x")
    with pytest.raises(OutputPathError, match="a folder that sdscore did not write"):
        claim_folder(tmp_path / "mine", "sdscore synth")
    assert json.loads((tmp_path / "corpus" / MARKER).read_text())["command"] == "sdscore synth"
