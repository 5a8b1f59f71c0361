"""Console and progress bars shared by the `sdscore` command modules."""

from __future__ import annotations

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
def stage_progress():
    """A rich progress display fed by `callback(stage, done, total)`, one bar per stage, with the
    rate (items/s, from this run's own progress: resumed rows do not count) and the time left."""
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        _RateColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=console,
    ) as progress:
        tasks: dict[str, int] = {}

        def callback(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = progress.add_task(stage, total=total, completed=done)  # resumed work is no speed
            progress.update(tasks[stage], completed=done, total=total)

        yield callback


class _RateColumn(ProgressColumn):
    """Items per second over the task's own window of updates."""

    def render(self, task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("-/s" if speed is None else f"{speed:,.1f}/s", style="progress.data.speed")
