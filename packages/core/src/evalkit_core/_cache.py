"""Where evalkit caches derived data (never inputs or outputs a user asked for)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir"]


def cache_dir() -> Path:
    """``$EVALKIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/evalkit``, else ``~/.cache/evalkit``."""
    env = os.environ.get("EVALKIT_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "evalkit"
