"""`uv tool install` of the CLI from the checkout gives a working `evalkit` on its own (README, Install), offline.

`uv tool install` resolves the third-party dependencies afresh (it does not read uv.lock), and uv's cache holds the
wheels `uv sync` installed but not the package index's pages for most of them, so offline it cannot resolve from
the index. The test gives it the distributions instead, all as files in its temporary directory:

- the five members, built from the checkout by ``uv build --all-packages --wheel`` (offline: the build backend
  comes from uv's cache, which ``uv sync`` filled);
- the CLI's third-party closure at the locked versions (``uv export --package evalkit-cli``), each repacked into
  a wheel from the synced environment's installed files (its RECORD, WHEEL tags and metadata, as installed);

then ``uv tool install evalkit-cli --no-index --find-links ...`` into a tool directory, a bin directory and a uv
cache that are all under the test's temporary directory, and runs `evalkit eval` with the installed command.
What this proves: the wheels' metadata names every dependency the CLI needs at run time (an undeclared one is not
installed, and the run fails), and the tool environment runs from its own copy, not the checkout.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UV = shutil.which("uv")
MEMBERS = {"evalkit-core", "evalkit-harness", "evalkit-router", "evalkit-training", "evalkit-cli"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _closure() -> dict[str, str]:
    """The CLI's third-party dependencies at the locked versions, for this interpreter (markers applied)."""
    assert UV is not None
    proc = subprocess.run(
        [UV, "export", "--frozen", "--offline", "--no-hashes", "--no-header", "--no-annotate", "--no-default-groups",
         "--package", "evalkit-cli", "--no-emit-workspace", "--python", sys.executable],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    from packaging.markers import Marker  # packaging: in the environment (a dependency of the test tools)

    out: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        req, _, marker = line.partition(";")
        if "==" not in req or (marker.strip() and not Marker(marker.strip()).evaluate()):
            continue
        name, version = req.split("==")
        out[_norm(name)] = version.strip()
    return out


def repack(dist: metadata.Distribution, out: Path) -> Path:
    """A wheel of an installed distribution, from its installed files (console scripts are left to the installer,
    which writes them from entry_points.txt)."""
    files = list(dist.files or [])
    wheel_file = next(f for f in files if f.name == "WHEEL" and f.parent.name.endswith(".dist-info"))
    distinfo = wheel_file.parent.name
    tags = [ln.split(":", 1)[1].strip() for ln in Path(str(dist.locate_file(wheel_file))).read_text().splitlines()
            if ln.startswith("Tag:")]  # fmt: skip
    tag = "-".join(".".join(dict.fromkeys(t.split("-")[i] for t in tags)) for i in range(3))
    name = re.sub(r"[-_.]+", "_", dist.metadata["Name"]).lower()
    whl = out / f"{name}-{dist.version}-{tag}.whl"
    prefix = Path(sys.prefix).resolve()
    record: list[str] = []
    with zipfile.ZipFile(whl, "w", zipfile.ZIP_STORED) as z:
        for f in files:
            if f.suffix == ".pyc" or (f.parent.name == distinfo and f.name in {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}):
                continue
            path = Path(str(dist.locate_file(f)))
            if not path.is_file():
                continue
            arc = str(f)
            if arc.startswith(".."):  # outside site-packages: scripts (skipped) or data files
                rel = os.path.relpath(path.resolve(), prefix)
                if rel.startswith("bin/"):
                    continue
                arc = f"{distinfo[: -len('.dist-info')]}.data/data/{rel}"
            data = path.read_bytes()
            z.writestr(arc, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{arc},sha256={digest},{len(data)}")
        record.append(f"{distinfo}/RECORD,,")
        z.writestr(f"{distinfo}/RECORD", "\n".join(record) + "\n")
    return whl


@pytest.mark.slow
@pytest.mark.integration  # a clean install from the built wheels
def test_uv_tool_install_of_the_cli_offline(tmp_path: Path) -> None:
    if UV is None:
        pytest.skip("uv is not on PATH")
    dist, wheels = tmp_path / "dist", tmp_path / "wheels"
    wheels.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "UV_CACHE_DIR"}} | {"UV_OFFLINE": "1"}
    build = subprocess.run([UV, "build", "--all-packages", "--wheel", "--out-dir", str(dist), "-q"], cwd=ROOT, env=env,
                           capture_output=True, text=True, check=False, timeout=900)  # fmt: skip
    assert build.returncode == 0, build.stderr
    assert {_norm(p.name.split("-")[0]) for p in dist.glob("*.whl")} == MEMBERS

    wanted = _closure()
    assert "typer" in wanted and not MEMBERS & set(wanted)
    installed = {_norm(d.metadata["Name"]): d for d in metadata.distributions()}
    for name, version in wanted.items():
        assert installed[name].version == version, (name, version)  # the synced environment is the lockfile's
        repack(installed[name], wheels)

    tools, bin_dir = tmp_path / "tools", tmp_path / "bin"
    env |= {"UV_TOOL_DIR": str(tools), "UV_TOOL_BIN_DIR": str(bin_dir), "UV_CACHE_DIR": str(tmp_path / "uv-cache")}
    proc = subprocess.run(
        [UV, "tool", "install", "evalkit-cli", "--no-index", "--find-links", str(dist), "--find-links", str(wheels),
         "--python", sys.executable],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert {p.name for p in bin_dir.iterdir()} >= {"evalkit", "pit-harness"}

    work = tmp_path / "work"
    work.mkdir()
    run_env = {k: v for k, v in env.items() if k != "UV_OFFLINE"} | {"EVALKIT_HOME": str(tmp_path / "home")}
    where = subprocess.run([str(tools / "evalkit-cli" / "bin" / "python"), "-c", "import evalkit; print(evalkit.__file__)"],
                           capture_output=True, text=True, check=True, cwd=work)  # fmt: skip
    assert where.stdout.startswith(str(tools)), where.stdout  # installed, not the checkout's sources
    version = subprocess.run([str(bin_dir / "evalkit"), "--version"], capture_output=True, text=True, check=True,
                             cwd=work, env=run_env)  # fmt: skip
    assert version.stdout.startswith("evalkit "), version.stdout
    ev = subprocess.run([str(bin_dir / "evalkit"), "eval", "--tasks", str(ROOT / "tests" / "evalkit" / "fixtures" / "tasks"),
                         "--solver", "reference"], capture_output=True, text=True, check=False, cwd=work, env=run_env,
                        timeout=600)  # fmt: skip
    assert ev.returncode == 0, ev.stderr
    assert re.search(r"public pass rate 100\.0% \[[^]]*\]  hidden pass rate 100\.0% ", ev.stdout), ev.stdout

    # The verifier stack's quick start, away from the checkout: the seed bank and campaign ship with the tool.
    def evalkit(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(bin_dir / "evalkit"), *args], capture_output=True, text=True, check=False, cwd=work,
                              env=run_env, timeout=900)  # fmt: skip

    missing = evalkit("eval", "--tasks", "tasks", "--solver", "reference")
    assert missing.returncode == 2
    assert "`evalkit tasks demo --out tasks` writes the seed bank" in missing.stderr, missing.stderr
    demo = evalkit("tasks", "demo", "--out", "tasks", "--json")
    assert demo.returncode == 0, demo.stderr
    from evalkit import bank_digest, load_tasks

    assert json.loads(demo.stdout) == {"path": "tasks", "tasks": 70, "digest": bank_digest(load_tasks(ROOT / "tasks"))}
    shipped = sorted(p.relative_to(work / "tasks") for p in (work / "tasks").rglob("*") if p.is_file())
    ours = sorted(p.relative_to(ROOT / "tasks") for p in (ROOT / "tasks").rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts)  # fmt: skip
    assert shipped == ours and all((work / "tasks" / r).read_bytes() == (ROOT / "tasks" / r).read_bytes() for r in ours)
    ev = evalkit("eval", "--tasks", "tasks", "--solver", "reference")
    assert ev.returncode == 0, ev.stderr
    assert "public pass rate 100.0% [94.8%, 100.0%]  hidden pass rate 100.0% [94.8%, 100.0%]" in ev.stdout, ev.stdout
    assert "saved results and receipt in out/eval/reference/" in ev.stdout
    verified = evalkit("verify", "out/eval/reference/receipt.json", "--json")
    assert verified.returncode == 0 and json.loads(verified.stdout)["ok"] is True, verified.stdout + verified.stderr

    seeded = evalkit("campaign", "demo", "--out", "seed")
    assert seeded.returncode == 0, seeded.stderr
    assert (work / "seed" / "campaigns" / "sim-seed.toml").read_bytes() == (ROOT / "campaigns" / "sim-seed.toml").read_bytes()
    # the seed campaign names the bank beside it; a cut of it (one model, K=1, the code family) runs from the install
    text = (work / "seed" / "campaigns" / "sim-seed.toml").read_text()
    small = re.sub(r"(?m)^name = .*$", 'name = "seed-cut"', text)
    small = re.sub(r"(?m)^models = .*$", 'models = ["sim/strong"]', small)
    small = re.sub(r"(?m)^k = .*$", "k = 1", small) + 'glob = "code/caesar-*/*"\n'
    (work / "seed" / "campaigns" / "cut.toml").write_text(small)
    ran = evalkit("campaign", "run", "seed/campaigns/cut.toml", "--json")
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["run"]["status"] == "done"
