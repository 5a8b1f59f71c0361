"""Console and progress bars shared by the `sdscore` command modules."""

from __future__ import annotations

import threading
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

console = Console(stderr=True)


@contextmanager
def stage_progress(every: float | None = None):
    """A progress display fed by `callback(stage, done, total, failed=None)`: on a terminal a rich bar per
    stage (redrawn at most 10 times a second), with the rate (items/s, from this run's own progress:
    resumed rows do not count) and the time left; otherwise a plain-text line per stage every `every`
    seconds (default: $SDSCORE_PROGRESS_EVERY, else 30; 0: none) and a summary line (cli/progress_lines.py)."""
    if not console.is_terminal:
        with _progress_lines(every) as callback:
            yield callback
        return
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        _RateColumn(),
        _FailedColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=console,
    ) as progress:
        tasks: dict[str, int] = {}

        def callback(stage: str, done: int, total: int, failed: int | None = None) -> None:
            if stage not in tasks:
                tasks[stage] = progress.add_task(stage, total=total, completed=done, failed=None)  # resumed: no speed
            progress.update(tasks[stage], completed=done, total=total, failed=failed)

        yield callback


@contextmanager
def _progress_lines(every: float | None):
    """ProgressLines on stderr, with a thread that writes the lines that fall due while nothing moves."""
    from sdscore.cli.progress_lines import ProgressLines, progress_every

    lines = ProgressLines(console.file, progress_every(every))
    stop = threading.Event()

    def ticks() -> None:
        while not stop.wait(1.0):
            lines.tick()

    ticker = threading.Thread(target=ticks, name="sdscore-progress", daemon=True)
    if lines.every > 0:
        ticker.start()
    try:
        yield lines
    finally:
        stop.set()
        if ticker.is_alive():
            ticker.join()
        lines.close()


class _RateColumn(ProgressColumn):
    """Items per second over the task's own window of updates."""

    def render(self, task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("-/s" if speed is None else f"{speed:,.1f}/s", style="progress.data.speed")


class _FailedColumn(ProgressColumn):
    """Rows with an error so far, when the stage counts them and there are any."""

    def render(self, task) -> Text:
        failed = task.fields.get("failed")
        return Text(f"{failed:,} failed" if failed else "", style="red")
