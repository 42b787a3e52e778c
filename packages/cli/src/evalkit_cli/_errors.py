"""Exit codes in one place: user errors print one line and exit 2, Ctrl-C exits 130, bugs show a traceback.

Usage errors (an unknown option, a missing argument, a value out of its range) also exit 2, in one line that
names the command and the option. Ctrl-C stops cleanly: the first press cancels the work (an event loop's tasks
are cancelled, so model calls in flight are settled in the store; other work gets ``KeyboardInterrupt``), a
second press says the stop is under way and waits for it, a third quits at once (a call still in flight is then
charged at its worst case by the next run, as for any process that died).
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType
from typing import cast

import typer
from typer._click.exceptions import (  # typer vendors click; its exceptions live here
    ClickException,
    NoArgsIsHelpError,
    UsageError,
)

from evalkit_core import EvalkitError

__all__ = ["EXIT_INTERRUPTED", "EXIT_USER_ERROR", "run_app"]

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130


class _Interrupts:
    """The SIGINT handler: cancel once, then wait, then quit."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, _signum: int, _frame: FrameType | None) -> None:
        self.count += 1
        if self.count == 1:
            # asyncio is imported only by the commands that run an event loop (it costs tens of milliseconds
            # of every command's start); where it was never imported, no loop can be running
            asyncio = sys.modules.get("asyncio")
            if asyncio is None:
                raise KeyboardInterrupt
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                raise KeyboardInterrupt from None
            print("\ninterrupted: stopping (calls in flight are being settled)", file=sys.stderr)
            for task in asyncio.all_tasks(loop):
                task.cancel()
            loop.call_soon_threadsafe(lambda: None)  # wake the selector, which would otherwise sleep on
            return
        if self.count == 2:
            print("interrupted again: still stopping; press Ctrl-C once more to quit at once", file=sys.stderr)
            return
        print("interrupted: quit at once", file=sys.stderr)
        os._exit(EXIT_INTERRUPTED)


def _cancelled_error() -> type[BaseException]:
    """asyncio's CancelledError when a command imported asyncio (only an event loop raises it), else
    KeyboardInterrupt again (a harmless repeat in the except clause)."""
    asyncio = sys.modules.get("asyncio")
    return cast("type[BaseException]", asyncio.CancelledError) if asyncio is not None else KeyboardInterrupt


def _printable(text: str) -> str:
    """An error's text as the terminal may print it: each character that is not printable (an escape sequence's
    ESC, a carriage return, a backspace, NUL, a bidi override) a ``?``; line breaks and tabs stay. An error can
    quote text that is not ours (an agent's exception raised while it loaded, a file's bytes): it must not move the
    cursor or rewrite what was printed before it."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch in "\n\t" else "?" for ch in text)


def _usage_line(exc: UsageError) -> str:
    where = exc.ctx.command_path if exc.ctx is not None else "evalkit"
    message = " ".join(exc.format_message().split())
    return f"error: {where}: {message} (see {where} --help)"


def run_app(app: typer.Typer, prog_name: str) -> None:
    """Run ``app`` with evalkit's error mapping."""
    signal.signal(signal.SIGINT, _Interrupts())
    try:
        code = app(prog_name=prog_name, standalone_mode=False)
    except EvalkitError as exc:
        print(f"error: {_printable(str(exc))}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
    except NoArgsIsHelpError:
        sys.exit(EXIT_USER_ERROR)  # a group called bare: typer has printed its help
    except UsageError as exc:
        print(_usage_line(exc), file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
    except ClickException as exc:
        print(f"error: {' '.join(exc.format_message().split())}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except (KeyboardInterrupt, _cancelled_error(), typer.Abort):  # evaluated only when something propagates
        code = EXIT_INTERRUPTED
    if code == EXIT_INTERRUPTED:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the work has stopped: a later press must not kill the exit
        print("interrupted", file=sys.stderr)
    sys.exit(code if isinstance(code, int) else 0)
