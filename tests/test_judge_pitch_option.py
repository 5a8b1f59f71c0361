"""`score judge --pitch {yin,aubio}`: the blueprints' pitch tracker is a judge setting. It reaches the
BlueprintBuilder (aubio: the TRACE authors' tracker, extractor ``pitch_aubio``), is recorded in the run
record and the results' provenance (so --resume refuses a change), and a bad value is refused up front."""

from __future__ import annotations

import sys
import types

import pytest
from judge_data import BLUEPRINTS, RULE_ROWS, manifest
from sdscore.cli import main
from sdscore.corpus import write_manifest
from sdscore.errors import SdscoreError
from sdscore.protocols import registry
from sdscore.protocols.judge import results_settings
from sdscore.features.blueprint import PITCH_METHODS
from sdscore.protocols.judge.choices import PITCH_TRACKERS
from sdscore.protocols.judge.scorer import JudgeScorer, scoring_job
from trace_judge_server import blueprint_builder


def _recording_builder(monkeypatch, fail_on_call: int | None = None) -> list[dict]:
    """Installs a BlueprintBuilder stand-in; returns the options of every builder made (and, with
    fail_on_call, interrupts the run at that build call, as Ctrl-C would)."""
    base, made, calls = blueprint_builder(BLUEPRINTS), [], []

    class Recording(base):
        def __init__(self, cache_dir=None, **options):
            made.append(options)

        def build(self, paths):
            calls.append(1)
            if len(calls) == fail_on_call:
                raise KeyboardInterrupt
            return super().build(paths)

    module = types.ModuleType("sdscore.features.blueprint")
    module.BlueprintBuilder = Recording
    monkeypatch.setitem(sys.modules, "sdscore.features.blueprint", module)
    return made


def test_the_scorer_builds_blueprints_with_the_tracker_asked_for():
    assert sorted(PITCH_TRACKERS) == sorted(PITCH_METHODS)
    default, aubio = JudgeScorer(), JudgeScorer(pitch="aubio")
    try:
        assert "pitch" in default.blueprints.names and "pitch_aubio" not in default.blueprints.names
        assert "pitch_aubio" in aubio.blueprints.names and "pitch" not in aubio.blueprints.names
        assert aubio.blueprints.settings_digest != default.blueprints.settings_digest  # separate cache entries
    finally:
        default.close()
        aubio.close()


def test_cli_pitch_reaches_the_builder_and_the_provenance(tmp_path, monkeypatch):
    made = _recording_builder(monkeypatch)
    path = tmp_path / "items.parquet"
    write_manifest(manifest(RULE_ROWS[:2]), path)
    assert main(["score", "judge", str(path), "--out", str(tmp_path / "aubio.parquet"), "--pitch", "aubio"]) == 0
    assert main(["score", "judge", str(path), "--out", str(tmp_path / "yin.parquet")]) == 0
    assert [options["pitch"] for options in made] == ["aubio", "yin"]
    assert results_settings(tmp_path / "aubio.parquet")["pitch"] == "aubio"
    assert results_settings(tmp_path / "yin.parquet")["pitch"] == "yin"


def test_resume_refuses_another_pitch_tracker(tmp_path, monkeypatch):
    path, out = tmp_path / "items.parquet", tmp_path / "out.parquet"
    write_manifest(manifest(RULE_ROWS[:3]), path)
    _recording_builder(monkeypatch, fail_on_call=2)
    with pytest.raises(KeyboardInterrupt):
        registry.score("judge", path, out, window_rows=1, pitch="yin")
    assert (tmp_path / "out.parquet.parts").is_dir() and not out.exists()
    _recording_builder(monkeypatch)
    with pytest.raises(SdscoreError, match=r"settings.pitch \('yin' then, 'aubio' now\)"):
        registry.score("judge", path, out, pitch="aubio", resume=True)
    summary = registry.score("judge", path, out, pitch="yin", resume=True)
    assert (summary.rows, summary.resumed_shards) == (3, 1)


def test_a_bad_pitch_tracker_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    made = _recording_builder(monkeypatch)
    path = tmp_path / "items.parquet"
    write_manifest(manifest(RULE_ROWS[:2]), path)
    with pytest.raises(SystemExit) as exit_info:
        main(["score", "judge", str(path), "--out", str(tmp_path / "o.parquet"), "--pitch", "crepe"])
    assert exit_info.value.code == 2
    assert "argument --pitch: invalid choice: 'crepe'" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"pitch must be one of \['aubio', 'yin'\], got 'crepe' \(a setting of "
                                         r"RuleJudgeSettings\)"):
        scoring_job(pitch="crepe")
    with pytest.raises(ValueError, match="pitch must be one of .*, got 'crepe'"):
        registry.score("judge", path, tmp_path / "o.parquet", pitch="crepe")
    assert made == [] and not (tmp_path / "o.parquet").exists()
