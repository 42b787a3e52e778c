"""Exit codes in one place: user errors print one line and exit 2, Ctrl-C exits 130, bugs show a traceback."""

from __future__ import annotations

import sys
from collections.abc import Callable

import click
import typer

from evalkit_core import EvalkitError

__all__ = ["EXIT_INTERRUPTED", "EXIT_USER_ERROR", "run_app"]

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130


def run_app(app: typer.Typer, prog_name: str) -> None:
    """Run ``app`` with evalkit's error mapping. Never returns."""
    command: Callable[..., object] = typer.main.get_command(app)
    try:
        rv = command.main(prog_name=prog_name, standalone_mode=False)  # pyright: ignore[reportAttributeAccessIssue, reportUnknownVariableType]
    except EvalkitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
    except click.exceptions.Abort:
        print("interrupted", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(EXIT_USER_ERROR)
    sys.exit(rv if isinstance(rv, int) else 0)
