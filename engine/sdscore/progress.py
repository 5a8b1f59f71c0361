"""The progress callback every long-running step accepts: `progress(stage, done, total)`."""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[str, int, int], None]


def no_progress(stage: str, done: int, total: int) -> None:
    """A Progress that reports nothing."""
    return


def accepts_keyword(fn: Callable, name: str) -> bool:
    """Whether fn can be called with the keyword argument `name` (named, or taken by **kwargs)."""
    import inspect

    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature
        return False
    return any(p.name == name and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) or p.kind == p.VAR_KEYWORD
               for p in parameters)


class RateMeter:
    """Items per second and time left, measured from the first finished batch.

    The first update gives the starting count (resumed work: no speed); the first update that moves
    it starts the clock (what ran before it was start-up: loading models, reading the first window)
    and the items it brought are not counted. `now` comes from the caller (a clock it chooses)."""

    def __init__(self) -> None:
        self.start: tuple[float, int] | None = None  # (time, count) of the first finished batch
        self.done: int | None = None

    def update(self, done: int, now: float) -> None:
        if self.done is not None and self.start is None and done > self.done:
            self.start = (now, done)
        self.done = done

    def rate(self, now: float) -> float | None:
        """Items per second since the first finished batch, None before a second one."""
        if self.start is None or self.done is None:
            return None
        seconds, items = now - self.start[0], self.done - self.start[1]
        return items / seconds if seconds > 0 and items > 0 else None

    def eta(self, total: int, now: float) -> float | None:
        """Seconds left at the current rate, None while there is no rate."""
        rate = self.rate(now)
        return None if rate is None or self.done is None else max(0, total - self.done) / rate


def duration_text(seconds: float) -> str:
    """45s, 29m, 1h05m (rounded, a progress line's precision)."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{round(seconds / 60)}m" if seconds >= 600 else f"{seconds // 60}m{seconds % 60:02d}s"
    hours, minutes = divmod(round(seconds / 60), 60)
    return f"{hours}h{minutes:02d}m"
