"""One progress display for long commands, on stderr: a bar when stderr is a terminal, plain lines (at most one
a second) when ``--progress`` asks for it elsewhere, nothing otherwise (and never with ``--json`` unless asked).

The ETA is ``elapsed x (total - done) / done``, recomputed at every refresh from the whole run's average, so it
never sticks: while nothing finishes it grows, second by second, instead of showing the last estimate.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from rich.progress import Task
    from rich.text import Text

__all__ = ["Update", "eta_seconds", "format_eta", "progress_bar"]


class Update(Protocol):
    def __call__(self, done: int, total: int, now: str | None = None) -> None: ...


def eta_seconds(done: int, total: int, elapsed: float) -> float | None:
    """Seconds left at the run's average pace so far; None before the first item is done."""
    if total > 0 and done >= total:
        return 0.0
    if done <= 0 or total <= 0 or elapsed <= 0:
        return None
    return max(0.0, elapsed * (total - done) / done)


def format_eta(seconds: float | None) -> str:
    if seconds is None:
        return "ETA --:--"
    s = round(seconds)
    return f"ETA {s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"ETA {s // 60}:{s % 60:02d}"


@contextmanager
def progress_bar(
    label: str, *, enabled: bool = True, force: bool = False, stages: bool = False
) -> Iterator[Update | None]:
    """Yield ``update(done, total[, label])``, or None when nothing is shown. ``force`` (``--progress``) shows
    progress even when stderr is not a terminal (plain lines) and even when ``enabled`` is False. With
    ``stages``, a new label starts a new stage: its count and its clock (so its ETA) start again."""
    if not (enabled or force):
        yield None
        return
    if sys.stderr.isatty():
        with _bar(label, stages) as update:
            yield update
        return
    if not force:
        yield None
        return
    yield _Lines(label, stages)


class _Lines:
    """``label done/total  elapsed  ETA`` on stderr, at most one line a second, and the last one always."""

    def __init__(self, label: str, stages: bool = False) -> None:
        self.label = label
        self.stages = stages
        self.stage: str | None = None
        self.start = time.monotonic()
        self.last = 0.0

    def __call__(self, done: int, total: int, now: str | None = None) -> None:
        t = time.monotonic()
        if self.stages and now != self.stage:
            self.stage, self.start, self.last = now, t, 0.0
        if t - self.last < 1.0 and done < total:
            return
        self.last = t
        elapsed = t - self.start
        print(
            f"{now or self.label} {done}/{total}  elapsed {round(elapsed)}s  {format_eta(eta_seconds(done, total, elapsed))}",
            file=sys.stderr,
            flush=True,
        )


@contextmanager
def _bar(label: str, stages: bool = False) -> Iterator[Update]:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        TextColumn,
        TimeElapsedColumn,
    )
    from rich.text import Text

    class Eta(ProgressColumn):
        max_refresh = 0.5

        def render(self, task: Task) -> Text:
            total = int(task.total or 0)
            return Text(format_eta(eta_seconds(int(task.completed), total, task.elapsed or 0.0)))

    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        Eta(),
        console=Console(stderr=True),
        transient=True,
    )
    task_id = bar.add_task(label, total=None)
    stage: list[str | None] = [None]

    def update(done: int, total: int, now: str | None = None) -> None:
        if stages and now != stage[0]:
            stage[0] = now
            bar.reset(task_id, total=total, completed=done, description=now or label)
            return
        bar.update(task_id, completed=done, total=total, description=now or label)

    with bar:
        yield update
