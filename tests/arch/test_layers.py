"""The layer contract is a real check: it passes on the tree, and an upward import makes it fail."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# import-linter's own entry point, run by this interpreter (not a script on PATH), in a process of its own: its
# import graph must come from the copied tree, not from the modules this test process has imported already
LINT_IMPORTS = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
pytestmark = pytest.mark.needs("lint")


def _lint(cwd: Path, pythonpath: list[Path]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in pythonpath)}
    return subprocess.run(
        [sys.executable, "-c", LINT_IMPORTS, "--config", str(cwd / "pyproject.toml"), "--no-cache"],
        cwd=cwd, env=env, capture_output=True, text=True, check=False,
    )


@pytest.fixture
def tree_copy(tmp_path: Path) -> tuple[Path, list[Path]]:
    srcs: list[Path] = []
    for pkg in sorted((ROOT / "packages").iterdir()):
        if (pkg / "src").is_dir():
            dst = tmp_path / "packages" / pkg.name / "src"
            shutil.copytree(pkg / "src", dst, ignore=shutil.ignore_patterns("__pycache__"))
            srcs.append(dst)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path, srcs


def test_contract_kept_on_the_tree(tree_copy: tuple[Path, list[Path]]) -> None:
    root, srcs = tree_copy
    proc = _lint(root, srcs)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "KEPT" in proc.stdout


@pytest.mark.parametrize(
    ("where", "imports"),
    [
        ("core/src/evalkit_core/_upward.py", "import evalkit"),
        ("evalkit/src/evalkit/_upward.py", "import evalkit_router"),
        ("router/src/evalkit_router/_sideways.py", "import evalkit_training"),
        ("training/src/evalkit_training/_upward.py", "import evalkit_cli"),
    ],
)
def test_upward_or_sideways_import_breaks_the_contract(tree_copy: tuple[Path, list[Path]], where: str, imports: str) -> None:
    root, srcs = tree_copy
    (root / "packages" / where).write_text(imports + "\n")
    proc = _lint(root, srcs)
    assert proc.returncode != 0, proc.stdout
    assert "BROKEN" in proc.stdout
