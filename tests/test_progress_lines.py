"""Progress when stderr is not a terminal (cli/progress_lines.py) and the rate behind it
(sdscore.progress.RateMeter): a fake clock drives every line, nothing sleeps or times."""

from __future__ import annotations

import io

import pytest

from sdscore.cli.progress_lines import DEFAULT_EVERY, ENV_EVERY, ProgressLines, progress_every
from sdscore.errors import SdscoreError
from sdscore.progress import RateMeter, duration_text


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_rate_and_eta_start_at_the_first_finished_batch_not_at_start_up():
    meter = RateMeter()
    meter.update(100, now=0.0)  # 100 rows kept from an interrupted run
    assert meter.rate(50.0) is None
    meter.update(110, now=60.0)  # the first batch: a minute of loading models is in it
    assert meter.rate(60.0) is None and meter.eta(1000, 60.0) is None
    meter.update(150, now=80.0)
    assert meter.rate(80.0) == pytest.approx(2.0)  # 40 rows in the 20 s since the first batch
    assert meter.eta(1000, 80.0) == pytest.approx(425.0)
    assert meter.rate(100.0) == pytest.approx(1.0)  # a stall lowers it


@pytest.mark.parametrize("seconds, text", [(0.4, "0s"), (45, "45s"), (61, "1m01s"), (599, "9m59s"), (1740, "29m"),
                                           (3600, "1h00m"), (3929, "1h05m")])
def test_durations_are_short(seconds, text):
    assert duration_text(seconds) == text


def test_a_line_every_interval_with_rows_rate_eta_and_failures():
    clock, stream = Clock(), io.StringIO()
    lines = ProgressLines(stream, every=30, clock=clock)
    lines("score reward", 0, 72_000, failed=0)
    clock.now += 26
    lines("score reward", 120, 72_000, failed=0)  # first batch, after loading: no line yet (26 s < 30 s)
    assert stream.getvalue() == ""
    clock.now += 4
    lines("score reward", 243, 72_000, failed=3)
    clock.now += 10
    lines("score reward", 600, 72_000, failed=3)
    clock.now += 20
    lines.tick()  # no call moved it in 20 s, the interval still brings a line
    assert stream.getvalue().splitlines() == [
        "sdscore score reward: 243/72,000 rows (0.3 %), 30.8 rows/s, ETA 39m, 3 failed",
        "sdscore score reward: 600/72,000 rows (0.8 %), 14.1 rows/s, ETA 1h24m, 3 failed",
    ]


def test_a_summary_line_when_the_stage_is_done_and_none_after():
    clock, stream = Clock(), io.StringIO()
    lines = ProgressLines(stream, every=30, clock=clock)
    lines("score toy", 0, 50, failed=0)
    clock.now += 5
    lines("score toy", 10, 50, failed=0)
    clock.now += 10
    lines("score toy", 50, 50, failed=2)
    clock.now += 100
    lines.tick()
    lines.close()
    assert stream.getvalue().splitlines() == ["sdscore score toy: done, 50/50 rows in 15s, 4.0 rows/s, 2 failed"]


def test_a_stage_that_stops_early_is_summed_up_on_close_and_other_stages_count_items():
    clock, stream = Clock(), io.StringIO()
    lines = ProgressLines(stream, every=30, clock=clock)
    lines("synth: render", 0, 8)
    clock.now += 31
    lines("synth: render", 3, 8)
    clock.now += 1
    lines.close()
    assert stream.getvalue().splitlines() == ["sdscore synth: render: 3/8 (37.5 %)",
                                              "sdscore synth: render: stopped, 3/8 in 32s"]


def test_every_zero_writes_nothing():
    clock, stream = Clock(), io.StringIO()
    lines = ProgressLines(stream, every=0, clock=clock)
    lines("score toy", 0, 50, failed=0)
    clock.now += 1000
    lines("score toy", 10, 50, failed=0)
    lines.tick()
    lines("score toy", 50, 50, failed=0)
    lines.close()
    assert stream.getvalue() == ""


def test_the_interval_comes_from_the_option_then_the_environment(monkeypatch):
    monkeypatch.delenv(ENV_EVERY, raising=False)
    assert progress_every() == DEFAULT_EVERY == 30
    monkeypatch.setenv(ENV_EVERY, "5")
    assert progress_every() == 5.0 and progress_every(0) == 0.0


@pytest.mark.parametrize("value", ["soon", "-1", "nan", "inf"])
def test_a_bad_interval_in_the_environment_is_refused(monkeypatch, value):
    monkeypatch.setenv(ENV_EVERY, value)
    with pytest.raises(SdscoreError, match=rf"\$SDSCORE_PROGRESS_EVERY='{value}': expected a number of seconds >= 0"):
        progress_every()


def test_stage_progress_writes_lines_when_stderr_is_not_a_terminal(capsys):
    from sdscore.cli.console import stage_progress

    with stage_progress(every=3600) as progress:  # no line falls due in the test; the summary still comes
        progress("score toy", 0, 4, failed=0)
        progress("score toy", 4, 4, failed=1)
    err = capsys.readouterr().err
    assert err.startswith("sdscore score toy: done, 4/4 rows in ") and err.endswith(", 1 failed\n")
    assert err.count("\n") == 1
    with stage_progress(every=0) as progress:
        progress("score toy", 4, 4, failed=1)
    assert capsys.readouterr().err == ""


def test_the_cli_refuses_a_negative_interval(capsys):
    from sdscore.cli import main

    with pytest.raises(SystemExit):
        main(["score", "arena", "m.parquet", "--out", "o.parquet", "--progress-every", "-5"])
    assert "--progress-every: expected a number of seconds >= 0, got '-5'" in capsys.readouterr().err
