"""How the harness records an exception of its own raised while it handled one candidate's output: the exception's
type and where it was raised (file and line of the innermost frame), never its message, which may quote the
candidate's values. Used by the one place per stage that turns such an exception into that candidate's failing
verdict (the sandbox's per-job containment, the verifier's per-verdict one), so that a harness bug still shows."""

from __future__ import annotations

import traceback
from pathlib import Path

__all__ = ["host_error"]


def host_error(exc: BaseException) -> str:
    """``"<Type> at <file>:<line>"`` for ``exc``."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    return f"{type(exc).__name__}{where}"
