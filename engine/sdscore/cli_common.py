"""Console, progress bars and row reports shared by the `sdscore` command modules."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

console = Console(stderr=True)


@contextmanager
def stage_progress():
    """A rich progress display fed by `callback(stage, done, total)`, one bar per stage."""
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        tasks: dict[str, int] = {}

        def callback(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = progress.add_task(stage, total=total)
            progress.update(tasks[stage], completed=done, total=total)

        yield callback


def failed_rows(frame) -> int:
    return 0 if "error" not in frame.columns else frame.height - frame["error"].null_count()


def report_rows(frame, out: Path) -> int:
    """Print the outcome of a score command; exit code 1 when any row failed."""
    failed = failed_rows(frame)
    console.print(f"{frame.height} rows scored, {failed} with errors → [bold]{out}[/bold]")
    return 1 if failed else 0
