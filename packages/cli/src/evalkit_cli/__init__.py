"""The ``evalkit`` command line and its ``pit-harness`` alias.

``main`` starts the sandbox's zygotes first when the command is one that grades (``eval``, ``tasks validate``),
so that they import, compile their syscall filter and warm up on another CPU while this process imports the
command line itself; the sandbox the command makes adopts them. Everything else loads on first use.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from evalkit_cli._app import app, pit_app

__all__ = ["app", "main", "pit_app", "pit_main"]

_GRADING = (("eval",), ("tasks", "validate"))


def _early_workers(argv: list[str]) -> int | None:
    """How many zygotes a grading command will want (its ``--workers``, else the sandbox's default); None when the
    command does not grade, asks for help, or the wall is switched off for this process."""
    if any(a in ("--help", "-h") for a in argv) or not any(tuple(argv[: len(c)]) == c for c in _GRADING):
        return None
    from evalkit.wall import default_workers

    workers = default_workers()
    for i, a in enumerate(argv):
        value = (
            a.split("=", 1)[1]
            if a.startswith("--workers=")
            else (argv[i + 1] if a == "--workers" and i + 1 < len(argv) else None)
        )
        if value is not None:
            try:
                workers = int(value)
            except ValueError:
                return None  # the command itself reports the bad value
    return workers if workers >= 1 else None


def main() -> None:
    workers = _early_workers(sys.argv[1:])
    if workers is not None:
        # A grading command allocates much and frees little on its way to the first job (imports, the bank): at
        # Python's default threshold of 700 the cycle collector ran 58 times for `evalkit eval` on HumanEval, some
        # 11-20 ms on the host's critical path, and found 1,595 objects in all. Collections still come, every
        # 50,000 allocations, so a long run's cyclic garbage stays bounded.
        gc.set_threshold(50_000, 10, 10)
        try:
            from evalkit.wall import launch_early

            launch_early(workers)
        except Exception:  # noqa: S110 - an early start is an optimisation; the sandbox starts its own
            pass
    from evalkit_cli._app import main as app_main

    if workers is None:
        app_main()
    else:
        _then_exit(app_main)


def _then_exit(run: Callable[[], None]) -> None:
    """Run a grading command, then end the process at once: the exit handlers run and the standard streams are
    flushed as at any exit, but the interpreter's teardown of every module it imported is skipped (some 20 ms, of
    the 0.8 s ``evalkit eval`` takes on the 164 HumanEval problems). An exception other than SystemExit, an exit
    status outside 0-255 or a thread still running takes the usual way out instead. A grading command writes every
    file it makes whole (written, flushed and renamed into place) before it returns, so no buffer is left behind."""
    import atexit
    import threading

    try:
        run()
        code: object = 0
    except SystemExit as exc:
        code = 0 if exc.code is None else exc.code
    others = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if type(code) is not int or not 0 <= code <= 255 or others:
        raise SystemExit(code)
    atexit._run_exitfuncs()  # pyright: ignore[reportPrivateUsage] - what Python's own exit runs, in its order
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        raise SystemExit(code) from None
    os._exit(code)


def pit_main() -> None:
    from evalkit_cli._app import pit_main as app_pit_main

    app_pit_main()


def __getattr__(name: str) -> Any:
    if name in ("app", "pit_app"):
        value = getattr(importlib.import_module("evalkit_cli._app"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'evalkit_cli' has no attribute {name!r}")
