"""Reading one JSON object from a file with the one-line errors every user-facing reader gives.

Each reader of a user's JSON file (a run config, a release manifest, a receipt, a gate baseline, a task file, a
certificate) reported the same four failures in its own words; this is the one place they are worded: the file is
missing, cannot be read, is not JSON (or holds NaN/Infinity where ``strict``), or is not an object.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

from evalkit_core._errors import ConfigError, EvalkitError

__all__ = ["read_json_object"]


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not allowed")


def read_json_object(
    path: str | Path,
    error: type[EvalkitError] = ConfigError,
    *,
    missing: str = "file not found",
    expected: str = "a JSON object",
    strict: bool = False,
) -> dict[str, Any]:
    """The JSON object in ``path``; anything else raises ``error`` with one line naming the file.

    ``missing`` is what to say when the file does not exist (say what it is and how to make one), ``expected``
    what an object of this kind holds. ``strict`` refuses NaN and Infinity, which Python's json accepts.
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise error(f"{p}: {missing}") from None
    except OSError as exc:
        raise error(f"{p}: cannot be read ({exc.strerror or exc.__class__.__name__})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{p}: not valid JSON (not UTF-8: {exc.reason})") from None
    try:
        data = json.loads(text, parse_constant=_no_constant) if strict else json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise error(f"{p}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise error(f"{p}: expected {expected}")
    return cast("dict[str, Any]", data)
