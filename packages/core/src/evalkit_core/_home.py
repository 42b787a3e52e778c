"""Where evalkit keeps its files: ``$EVALKIT_HOME``, else ``.evalkit/`` in the working directory.

Its own module, so that what needs only the place (the signing key, the release directory) does not load the store
(SQLite, PostgreSQL's adapter, the migrations: some 10 ms of every grading command's start).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["HOME_ENV", "evalkit_home"]

HOME_ENV = "EVALKIT_HOME"


def evalkit_home(env: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if env is None else env
    home = environ.get(HOME_ENV)
    return Path(home) if home else Path.cwd() / ".evalkit"
