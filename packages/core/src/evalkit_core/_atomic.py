"""Atomic file writes: a temp file beside the target, fsynced, renamed over it; and the check, before any work,
that an output path can be written as a file. Receipts, releases, keys and exports all write through here."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from evalkit_core._errors import ConfigError

__all__ = ["atomic_open", "atomic_write_bytes", "atomic_write_text", "check_output_path"]


def check_output_path(path: str | Path, what: str = "output") -> Path:
    """Refuse, before any work, a path that cannot be written as a file: a directory, or one under a file.

    ``what`` names the option or field in the one-line error (``--out``, ``receipt``)."""
    target = Path(path)
    if target.is_dir():
        raise ConfigError(f"{what} {target}: is a directory; expected a file path")
    for parent in target.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"{what} {target}: {parent} is a file, not a directory")
            break
    return target


@contextlib.contextmanager
def atomic_open(path: str | Path) -> Iterator[BinaryIO]:
    """Open a temp file beside ``path`` for binary writing; rename it over ``path`` only if the block succeeds.

    On any error the temp file is removed and ``path`` is left as it was, and so are its directories: those made
    here (a run refused before its first cell, say) are removed again when nothing else was put in them.
    """
    target = check_output_path(path)
    made = [d for d in target.parents if not d.exists()]  # deepest first
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.fchmod(fd, 0o644)  # mkstemp makes 0600; receipts and releases are meant to be read by others
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        Path(tmp).replace(target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            Path(tmp).unlink()
        for d in made:
            with contextlib.suppress(OSError):  # not empty (another writer's file): kept
                d.rmdir()
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temp file and a rename: readers see the old file or the new one."""
    with atomic_open(path) as f:
        f.write(data)


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))
