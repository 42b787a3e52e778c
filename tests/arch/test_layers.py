"""The import contracts are real checks: each passes on the tree, and a planted import breaks exactly the contract
it violates (the others stay kept).

The contracts (root pyproject.toml, ``[tool.importlinter]``): the layers between packages; the rooms inside
evalkit (gates over pit and grading, which never import each other, over the wall, which imports none of them);
and the wall's private inside (no module above it imports ``evalkit.wall._anything``).

import-linter lives in the ``lint`` dependency group: without it (a bare ``uv sync``) these tests skip and say
how to get it.
"""

from __future__ import annotations

import os
import re
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

LAYERS = "Layers: cli > router | training | pit_harness > evalkit > core"
ROOMS = "Rooms: gates > pit | grading > wall"
PRIVATE = "The wall's inside is private"
CONTRACTS = (LAYERS, ROOMS, PRIVATE)


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


def _verdicts(stdout: str) -> dict[str, str]:
    """Contract name -> KEPT or BROKEN, from lint-imports' summary lines."""
    found = dict(re.findall(r"^(.+?) (KEPT|BROKEN)$", stdout, re.MULTILINE))
    assert set(found) == set(CONTRACTS), (sorted(found), stdout)
    return found


def test_contract_kept_on_the_tree(tree_copy: tuple[Path, list[Path]]) -> None:
    root, srcs = tree_copy
    proc = _lint(root, srcs)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _verdicts(proc.stdout) == dict.fromkeys(CONTRACTS, "KEPT")


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


@pytest.mark.parametrize(
    ("where", "imports", "broken"),
    [
        # the wall imports nothing above it
        ("evalkit/src/evalkit/wall/_planted.py", "import evalkit.grading", ROOMS),
        ("evalkit/src/evalkit/wall/_planted.py", "from evalkit.grading._tasks import Task", ROOMS),
        ("evalkit/src/evalkit/wall/_planted.py", "import evalkit.pit", ROOMS),
        ("evalkit/src/evalkit/wall/_codec.py", "def _late() -> None:\n    from evalkit.pit import run", ROOMS),
        ("evalkit/src/evalkit/wall/_planted.py", "import evalkit.gates", ROOMS),
        # pit and grading never import each other
        ("evalkit/src/evalkit/pit/_planted.py", "import evalkit.grading", ROOMS),
        ("evalkit/src/evalkit/pit/_planted.py", "from evalkit.grading._verifiers import grade", ROOMS),
        ("evalkit/src/evalkit/grading/_planted.py", "import evalkit.pit", ROOMS),
        ("evalkit/src/evalkit/grading/_planted.py", "from evalkit.pit._jail import x", ROOMS),
        # gates sit on top: neither product imports them
        ("evalkit/src/evalkit/grading/_planted.py", "import evalkit.gates", ROOMS),
        ("evalkit/src/evalkit/pit/_planted.py", "from evalkit.gates import x", ROOMS),
        # above the wall, only its public names
        ("cli/src/evalkit_cli/_planted.py", "import evalkit.wall._sandbox", PRIVATE),
        ("evalkit/src/evalkit/grading/_planted.py", "from evalkit.wall._zygote import x", PRIVATE),
        ("evalkit/src/evalkit/pit/_planted.py", "from evalkit.wall._codec import x", PRIVATE),
        ("evalkit/src/evalkit/gates/_planted.py", "import evalkit.wall._sandbox_child", PRIVATE),
        ("evalkit/src/pit_harness/_planted.py", "from evalkit.wall import _zygote_child", PRIVATE),
        ("router/src/evalkit_router/_planted.py", "from evalkit.wall._sandbox import Sandbox", PRIVATE),
        ("training/src/evalkit_training/_planted.py", "import evalkit.wall._zygote", PRIVATE),
        # and the package layers
        ("core/src/evalkit_core/_planted.py", "import evalkit.wall", LAYERS),
        ("evalkit/src/evalkit/wall/_planted.py", "import evalkit_cli", LAYERS),
    ],
)
def test_a_planted_import_breaks_exactly_its_contract(
    tree_copy: tuple[Path, list[Path]], where: str, imports: str, broken: str
) -> None:
    root, srcs = tree_copy
    path = root / "packages" / where
    before = path.read_text() if path.exists() else ""
    path.write_text(before + "\n" + imports + "\n")
    proc = _lint(root, srcs)
    assert proc.returncode != 0, proc.stdout
    verdicts = _verdicts(proc.stdout)
    assert verdicts == {name: "BROKEN" if name == broken else "KEPT" for name in CONTRACTS}, verdicts


def test_the_walls_public_names_are_allowed_above_it(tree_copy: tuple[Path, list[Path]]) -> None:
    """Honest code keeps working: grading, pit, gates and the CLI may import evalkit.wall's public names."""
    root, srcs = tree_copy
    for where in ("evalkit/src/evalkit/grading", "evalkit/src/evalkit/pit", "evalkit/src/evalkit/gates",
                  "cli/src/evalkit_cli"):
        (root / "packages" / where / "_planted.py").write_text("from evalkit.wall import Sandbox, SandboxLimits\n")
    proc = _lint(root, srcs)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _verdicts(proc.stdout) == dict.fromkeys(CONTRACTS, "KEPT")
