"""The Dockerfile: its shape is checked everywhere; the image is built and run where a container engine answers.

Building pulls a base image, Debian packages and uv from the network, which tests may not reach on their own, so
the build test also needs ``EVALKIT_TEST_DOCKER=1``: it skips with the precise reason otherwise.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import uuid
from fnmatch import fnmatch
from pathlib import Path

import pytest

import machine  # pyright: ignore[reportImplicitRelativeImport]

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def _instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out: list[tuple[str, str]] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            word, _, rest = stripped.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile_is_multi_stage_slim_non_root_and_runtime_only() -> None:
    ins = _instructions()
    froms = [rest for word, rest in ins if word == "FROM"]
    assert len(froms) >= 2, froms
    args = dict(rest.split("=", 1) for word, rest in ins if word == "ARG" and "=" in rest)
    assert "slim" in args.get("PYTHON_IMAGE", ""), args
    final = ins[max(i for i, (w, _) in enumerate(ins) if w == "FROM"):]
    users = [rest for word, rest in final if word == "USER"]
    assert users, "the runtime stage sets no USER"
    assert users[-1] not in {"root", "0"}, users
    runs = " ".join(rest for word, rest in final if word == "RUN")
    assert "bubblewrap" in runs and "libseccomp2" in runs  # the sandbox's wall
    sync = " ".join(rest for word, rest in ins if word == "RUN" and "uv sync" in rest)
    for flag in ("--frozen", "--no-default-groups", "--package evalkit-cli", "--no-editable"):
        assert flag in sync, (flag, sync)
    assert any(w == "COPY" and "--from=build" in r for w, r in final)
    entry = next(rest for word, rest in final if word == "ENTRYPOINT")
    assert json.loads(entry) == ["evalkit"]


def test_dockerfile_copies_only_what_exists_and_is_not_ignored() -> None:
    ignored = [ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines()
               if ln.strip() and not ln.startswith("#")]
    for word, rest in _instructions():
        if word != "COPY" or rest.startswith("--from"):
            continue
        *sources, _dest = rest.split()
        for src in sources:
            assert (ROOT / src).exists(), f"COPY {src}: not in the repository"
            assert not any(fnmatch(src, pat) for pat in ignored), f"COPY {src} is excluded by .dockerignore"


def _engine() -> str:
    """The container CLI that answers, or a skip naming exactly why none does."""
    machine.need("container")
    reasons: list[str] = []
    for name in ("docker", "podman"):
        exe = shutil.which(name)
        if exe is None:
            reasons.append(f"{name}: not on PATH")
            continue
        info = subprocess.run([exe, "info", "--format", "{{json .}}"], capture_output=True, text=True, check=False,
                              timeout=60)
        if info.returncode == 0:
            return exe
        first = (info.stderr.strip().splitlines() or ["(no message)"])[-1]
        reasons.append(f"{exe} info failed: {first}")
    pytest.skip("no working container engine: " + "; ".join(reasons))


@pytest.mark.slow
@pytest.mark.integration  # builds the image
def test_image_builds_and_runs_the_cli() -> None:
    engine = _engine()
    if os.environ.get("EVALKIT_TEST_DOCKER") != "1":
        pytest.skip(f"{engine} answers, but building the image reaches the network (base image, apt, PyPI); "
                    "set EVALKIT_TEST_DOCKER=1 to run it")
    tag = f"evalkit-test:{uuid.uuid4().hex[:12]}"
    try:
        build = subprocess.run([engine, "build", "-t", tag, str(ROOT)], capture_output=True, text=True, check=False,
                               timeout=1800)
        assert build.returncode == 0, build.stderr[-4000:]
        version = subprocess.run([engine, "run", "--rm", "--network", "none", tag, "--version"], capture_output=True,
                                 text=True, check=False, timeout=120)
        assert version.returncode == 0, version.stderr
        assert version.stdout.startswith("evalkit "), version.stdout
        whoami = subprocess.run([engine, "run", "--rm", "--network", "none", "--entrypoint", "id", tag, "-u"],
                                capture_output=True, text=True, check=True, timeout=120)
        assert whoami.stdout.strip() != "0"
        dev_tools = subprocess.run(
            [engine, "run", "--rm", "--network", "none", "--entrypoint", "python", tag, "-c",
             ("import importlib.util as u; print([m for m in ('ruff', 'basedpyright', 'nox', 'importlinter', 'pytest')"
             " if u.find_spec(m)])")],
            capture_output=True, text=True, check=True, timeout=120)
        assert dev_tools.stdout.strip() == "[]", dev_tools.stdout
        ev = subprocess.run(
            [engine, "run", "--rm", "--network", "none", "--security-opt", "seccomp=unconfined",
             "--security-opt", "apparmor=unconfined", "--workdir", "/tmp", "-e", "EVALKIT_HOME=/tmp/home", tag,
             "eval", "--tasks", "/opt/evalkit/share/tasks", "--solver", "reference"],
            capture_output=True, text=True, check=False, timeout=1800)
        assert ev.returncode == 0, ev.stderr
        assert re.search(r"public pass rate 100\.0% \[[^]]*\]  hidden pass rate 100\.0% ", ev.stdout), ev.stdout
        # README: a mounted directory, run as its owner (any uid): everything lands in the mount
        mounted = Path(tempfile.mkdtemp(prefix="evalkit-docker-"))
        try:
            run = subprocess.run(
                [engine, "run", "--rm", "--network", "none", "--security-opt", "seccomp=unconfined",
                 "--security-opt", "apparmor=unconfined", "--user", f"{os.getuid()}:{os.getgid()}",
                 "-v", f"{mounted}:/work", tag, "run"],
                capture_output=True, text=True, check=False, timeout=1800)  # fmt: skip
            assert run.returncode == 0, run.stderr
            assert (mounted / "out" / "pit" / "receipt.json").is_file() and (mounted / ".evalkit").is_dir()
        finally:
            shutil.rmtree(mounted, ignore_errors=True)
    finally:
        subprocess.run([engine, "rmi", "-f", tag], capture_output=True, check=False, timeout=120)
