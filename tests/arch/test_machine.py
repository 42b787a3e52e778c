"""The tests' own machinery for what a machine lacks (tests/machine.py, tests/conftest.py), run on a small suite of
its own in a subprocess: a missing component skips with the one reason that names what to install;
EVALKIT_TEST_BARE=1 hides the system components from the tests and from evalkit's wall; EVALKIT_REQUIRE_WALL=1
fails a test of the wall that would skip, however it skips; the integration marker is deselected by default."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SUITE = """
import pytest

import machine


@pytest.mark.needs("bwrap")
def test_marked():
    pass


def test_imperative():
    machine.need("bwrap", "seccomp")


def test_other_skip_naming_the_wall():
    pytest.skip("this machine's sandbox is not the full wall")


def test_unrelated_skip():
    pytest.skip("root ignores file permissions")


@pytest.mark.needs("chromium")
def test_browser():
    pass


def test_wall_refused_for_evalkit():
    from evalkit.wall._policy import refused_layers

    assert refused_layers() == frozenset({"bwrap", "seccomp"})
    assert machine.which("bwrap") is None and machine.which("chromium") is None


@pytest.mark.integration
def test_integration():
    pass
"""


def _suite(tmp_path: Path) -> Path:
    tests = tmp_path / "tests"
    tests.mkdir()
    for name in ("conftest.py", "machine.py", "pg_cluster.py"):
        shutil.copy(ROOT / "tests" / name, tests / name)
    (tests / "test_suite.py").write_text(SUITE)
    config = (ROOT / "pyproject.toml").read_text()
    pytest_part = config[config.index("[tool.pytest.ini_options]") :]
    (tmp_path / "pyproject.toml").write_text(pytest_part[: pytest_part.index("\n[tool.ruff]")] + "\n")
    return tmp_path


def _run(where: Path, *args: str, **env: str) -> tuple[int, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("EVALKIT_TEST_", "EVALKIT_REQUIRE", "EVALKIT_WALL"))}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-rA", "-p", "no:randomly", "-n", "0", *args], cwd=where,
                          env=clean | env, capture_output=True, text=True, check=False, timeout=300)  # fmt: skip
    return proc.returncode, proc.stdout + proc.stderr


def _outcomes(out: str) -> dict[str, str]:
    found = re.findall(r"^(PASSED|FAILED|SKIPPED|ERROR) (?:\[\d+\] )?(?:tests/test_suite\.py::)?(\S+)", out, re.MULTILINE)
    return {name: what for what, name in found}


def test_bare_hides_and_skips_with_one_reason(tmp_path: Path) -> None:
    code, out = _run(_suite(tmp_path), EVALKIT_TEST_BARE="1")
    assert code == 0, out
    reasons = sorted(set(re.findall(r"^SKIPPED \[\d+\] \S+: (.*)$", out, re.MULTILINE)))
    assert reasons == [
        "needs Chromium (hidden by EVALKIT_TEST_BARE=1): apt-get install chromium",
        "needs bubblewrap (hidden by EVALKIT_TEST_BARE=1): apt-get install bubblewrap",
        "needs bubblewrap and libseccomp (hidden by EVALKIT_TEST_BARE=1): apt-get install bubblewrap; apt-get install libseccomp2",
        "root ignores file permissions",
        "this machine's sandbox is not the full wall",
    ], out
    assert "PASSED tests/test_suite.py::test_wall_refused_for_evalkit" in out
    assert "1 deselected" in out  # the integration test, by the README's command


def test_require_wall_fails_every_skip_of_the_wall_and_no_other(tmp_path: Path) -> None:
    code, out = _run(_suite(tmp_path), "-m", "", EVALKIT_TEST_BARE="1", EVALKIT_REQUIRE_WALL="1")
    assert code == 1, out
    got = _outcomes(out)
    assert got["test_marked"] == "ERROR"  # failed in its setup, before any fixture
    assert got["test_imperative"] == "FAILED"
    assert got["test_other_skip_naming_the_wall"] == "FAILED"
    assert got["test_integration"] == "PASSED"  # -m "" selects it
    assert "root ignores file permissions" in out  # an unrelated skip stays a skip
    assert "chromium" in out.lower()  # not required here: skipped
    assert "EVALKIT_REQUIRE_WALL=1" in out


def test_require_names_other_components(tmp_path: Path) -> None:
    code, out = _run(_suite(tmp_path), "-k", "browser", EVALKIT_TEST_BARE="1", EVALKIT_REQUIRE="chromium")
    assert code == 1, out
    assert "required here (EVALKIT_REQUIRE_WALL / EVALKIT_REQUIRE): needs Chromium" in out
