"""One progress bar for long commands: on stderr, only when stderr is a terminal, gone when the work ends."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

__all__ = ["Update", "progress_bar"]


class Update(Protocol):
    def __call__(self, done: int, total: int, now: str | None = None) -> None: ...


@contextmanager
def progress_bar(label: str, *, enabled: bool = True) -> Iterator[Update | None]:
    """Yield ``update(done, total[, label])``, or None when no bar is shown (piped stderr, ``--json``, disabled)."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    task = bar.add_task(label, total=None)

    def update(done: int, total: int, now: str | None = None) -> None:
        bar.update(task, completed=done, total=total, description=now or label)

    with bar:
        yield update
