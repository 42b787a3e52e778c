"""Exit codes in one place: user errors print one line and exit 2, Ctrl-C exits 130, bugs show a traceback.

Usage errors (an unknown option, a missing argument) are typer's own and also exit 2 with its usage message.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType

import typer

from evalkit_core import EvalkitError

__all__ = ["EXIT_INTERRUPTED", "EXIT_USER_ERROR", "run_app"]

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130


def _interrupted(_signum: int, _frame: FrameType | None) -> None:
    print("\ninterrupted", file=sys.stderr)
    sys.exit(EXIT_INTERRUPTED)


def run_app(app: typer.Typer, prog_name: str) -> None:
    """Run ``app`` with evalkit's error mapping."""
    signal.signal(signal.SIGINT, _interrupted)
    try:
        app(prog_name=prog_name)
    except EvalkitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
