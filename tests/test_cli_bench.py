"""`sdscore bench`: runs the bench scripts it finds, says each one's outcome and time, and returns the
worst exit status; an unknown name is a clear error."""

from __future__ import annotations

import argparse

import pytest

from sdscore.cli import bench
from sdscore.errors import SdscoreError


@pytest.fixture
def folder(tmp_path, monkeypatch):
    (tmp_path / "common.py").write_text("# shared plumbing\n")
    (tmp_path / "fine.py").write_text("if __name__ == '__main__':\n    print('fine table')\n")
    (tmp_path / "broken.py").write_text("import sys\nif __name__ == '__main__':\n    sys.exit(3)\n")
    (tmp_path / "train_demo_model.py").write_text("if __name__ == '__main__':\n    pass\n")
    monkeypatch.setattr(bench, "bench_folder", lambda: tmp_path)
    return tmp_path


def _args(*names):
    return argparse.Namespace(names=list(names), quick=False, json=False)


def test_runs_every_bench_and_reports_each_outcome(folder, capfd):
    assert bench.bench_names(folder) == ["broken", "fine"]
    assert bench._cmd_bench(_args()) == 3
    out = capfd.readouterr().out
    assert "fine table" in out
    assert "[sdscore bench] fine: ok, " in out
    assert "[sdscore bench] broken: exit status 3, " in out


def test_unknown_bench_name_is_a_clear_error(folder):
    with pytest.raises(SdscoreError, match="no benchmark named nope; expected one of broken, fine"):
        bench._cmd_bench(_args("nope"))
