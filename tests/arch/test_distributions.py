"""The packages are real distributions: `uv build --all-packages` makes wheels and sdists whose metadata names
version ranges of their siblings, and pip installs the CLI from those wheels into a clean venv, offline.

Offline means no index at all: pip runs with ``--no-index --find-links DIST`` and may take only the five built
wheels from there. The third-party dependencies are put into the venv first by uv from the lockfile with
``--offline`` (its cache), so pip's resolver still checks every declared range against what is installed; the
evalkit distributions themselves come from the built files and nothing else.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UV = shutil.which("uv")
DISTS = ("evalkit-core", "evalkit-harness", "evalkit-router", "evalkit-training", "evalkit-cli")
SIBLING_RANGE = re.compile(r"^(evalkit-[a-z]+)(<0\.2,>=0\.1\.0|>=0\.1\.0,<0\.2)$")
FIXTURE_TASKS = ROOT / "tests" / "evalkit" / "fixtures" / "tasks"


@pytest.fixture(scope="module")
def dist_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if UV is None:
        pytest.skip("uv is not on PATH")
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([UV, "build", "--all-packages", "--offline", "-q", "-o", str(out)],
                          cwd=ROOT, capture_output=True, text=True, check=False, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return out


def _metadata(wheel: Path) -> dict[str, list[str]]:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        msg = Parser().parsestr(zf.read(name).decode())
    return {"Name": msg.get_all("Name") or [], "Requires-Dist": msg.get_all("Requires-Dist") or []}


@pytest.mark.slow
@pytest.mark.integration  # builds the wheels
def test_every_package_builds_a_wheel_and_sdist_with_ranged_sibling_requirements(dist_dir: Path) -> None:
    wheels = {p.name.split("-")[0]: p for p in dist_dir.glob("*.whl")}
    sdists = {p.name.rsplit("-", 1)[0] for p in dist_dir.glob("*.tar.gz")}
    want = {d.replace("-", "_") for d in DISTS}
    assert set(wheels) == want, sorted(wheels)
    assert sdists == want, sorted(sdists)
    for key, wheel in wheels.items():
        meta = _metadata(wheel)
        assert meta["Name"] == [key.replace("_", "-")]
        for req in meta["Requires-Dist"]:
            if req.startswith("evalkit"):
                m = SIBLING_RANGE.match(req)
                assert m is not None and m[1] in DISTS, f"{wheel.name}: {req!r} is not a bounded sibling range"
    # The harness's wheel carries its data files (schemas, the sandbox's child programs) and both import names.
    with zipfile.ZipFile(wheels["evalkit_harness"]) as zf:
        names = set(zf.namelist())
    assert "evalkit/schemas/task.schema.json" in names
    assert "evalkit/wall/_zygote_child.py" in names
    assert "pit_harness/__init__.py" in names
    # ... and the seed bank and campaign, whole (built from the sdist, as `uv build` does: the sdist carries them)
    seeded = {n for n in names if n.startswith("evalkit/seed/tasks/")}
    ours = {f"evalkit/seed/tasks/{f.relative_to(ROOT / 'tasks').as_posix()}" for f in (ROOT / "tasks").rglob("*")
            if f.is_file() and "__pycache__" not in f.parts}  # fmt: skip
    assert seeded == ours and len(ours) > 100
    assert "evalkit/seed/campaigns/sim-seed.toml" in names
    # An sdist is a buildable source: its pyproject names the same distribution.
    with tarfile.open(next(dist_dir.glob("evalkit_harness-*.tar.gz"))) as tf:
        pyproject = next(m for m in tf.getmembers() if m.name.endswith("/pyproject.toml"))
        extracted = tf.extractfile(pyproject)
        assert extracted is not None
        assert 'name = "evalkit-harness"' in extracted.read().decode()


@pytest.mark.slow
@pytest.mark.integration  # builds the wheels
def test_pip_installs_the_cli_from_the_built_wheels_offline_and_it_runs(dist_dir: Path, tmp_path: Path) -> None:
    assert UV is not None
    venv = tmp_path / "venv"
    # The venv gets its pip from the interpreter's own bundled wheel (ensurepip): no index involved.
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300, capture_output=True)
    py = venv / "bin" / "python"
    # The third-party closure of evalkit-cli, pinned by the lockfile, from uv's cache (--inexact keeps pip).
    proc = subprocess.run(
        [UV, "sync", "--frozen", "--offline", "--inexact", "--no-install-workspace", "--no-default-groups",
         "--package", "evalkit-cli", "-q"],
        cwd=ROOT, env={**os.environ, "UV_PROJECT_ENVIRONMENT": str(venv)}, capture_output=True, text=True,
        check=False, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    listed = subprocess.run([str(py), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True,
                            check=True).stdout
    assert "evalkit" not in listed, listed  # nothing of ours yet: the wheels below are the only source
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "VIRTUAL_ENV", "UV_"))}
    env |= {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    pip = subprocess.run(
        [str(py), "-m", "pip", "install", "--no-index", "--find-links", str(dist_dir), "--no-cache-dir", "evalkit-cli"],
        capture_output=True, text=True, check=False, timeout=600, cwd=tmp_path, env=env,
    )
    assert pip.returncode == 0, pip.stdout + pip.stderr
    for dist in DISTS:
        assert f"{dist.replace('-', '_')}-0.1.0" in pip.stdout or dist in pip.stdout, (dist, pip.stdout)

    work = tmp_path / "work"
    work.mkdir()
    env |= {"EVALKIT_HOME": str(tmp_path / "home"), "EVALKIT_CACHE_DIR": str(tmp_path / "cache"),
            "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"}
    where = subprocess.run([str(py), "-c", ("import evalkit, evalkit_cli, importlib.metadata as m;"
                            "print(evalkit.__file__); print(evalkit_cli.__file__); print(m.version('evalkit-harness'))")],
                           capture_output=True, text=True, check=True, cwd=work, env=env)
    files = where.stdout.splitlines()
    assert all(f.startswith(str(venv)) for f in files[:2]), files
    assert files[2] == "0.1.0"

    evalkit = str(venv / "bin" / "evalkit")
    run = subprocess.run([evalkit, "run", "--json"], capture_output=True, text=True, check=False, cwd=work, env=env,
                         timeout=600)
    assert run.returncode == 0, run.stderr
    receipt = json.loads((work / "out" / "pit" / "receipt.json").read_text())
    assert receipt["body"]["harness"]["version"] == "0.1.0"
    assert receipt["body"]["environment"]["libraries"]["evalkit-harness"] == "0.1.0"

    tasks = work / "tasks"
    shutil.copytree(FIXTURE_TASKS, tasks)
    ev = subprocess.run([evalkit, "eval", "--tasks", str(tasks), "--solver", "reference", "--out", "results.jsonl"],
                        capture_output=True, text=True, check=False, cwd=work, env=env, timeout=600)
    assert ev.returncode == 0, ev.stderr
    rows = [json.loads(line) for line in (work / "results.jsonl").read_text().splitlines() if line.strip()]
    assert rows, "no result rows"
    assert len(rows) >= 4
    for r in rows:  # every reference passes every public and hidden test, graded by the installed verifier
        assert r["infra_error"] is None, r
        assert r["public"]["passed"] == r["public"]["total"] > 0, r["public"]
        assert r["hidden"]["passed"] == r["hidden"]["total"] > 0, r["hidden"]
