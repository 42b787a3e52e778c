"""`uv tool install ./packages/cli` from the checkout gives a working `evalkit` on its own (README, Install).

`uv tool install` resolves the third-party dependencies afresh (it does not read uv.lock), so offline it works
only where uv's cache already holds the index's answers for them; elsewhere the test skips and says so. The
workspace siblings (evalkit-harness, evalkit-core, ...) always come from the checkout.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UV = shutil.which("uv")


@pytest.mark.slow
def test_uv_tool_install_from_the_checkout(tmp_path: Path) -> None:
    if UV is None:
        pytest.skip("uv is not on PATH")
    tools, bin_dir = tmp_path / "tools", tmp_path / "bin"
    env = {**os.environ, "UV_TOOL_DIR": str(tools), "UV_TOOL_BIN_DIR": str(bin_dir), "UV_OFFLINE": "1"}
    env.pop("VIRTUAL_ENV", None)
    proc = subprocess.run([UV, "tool", "install", "./packages/cli"], cwd=ROOT, env=env, capture_output=True,
                          text=True, check=False, timeout=900)
    if proc.returncode != 0 and "network was disabled" in proc.stderr:
        pytest.skip("uv tool install resolves from the package index and uv's cache cannot answer offline here: "
                    + proc.stderr.strip().splitlines()[0])
    assert proc.returncode == 0, proc.stderr
    assert {p.name for p in bin_dir.iterdir()} >= {"evalkit", "pit-harness"}
    work = tmp_path / "work"
    work.mkdir()
    run_env = {k: v for k, v in env.items() if k != "UV_OFFLINE"}
    run_env |= {"EVALKIT_HOME": str(tmp_path / "home")}
    where = subprocess.run([str(tools / "evalkit-cli" / "bin" / "python"), "-c", "import evalkit; print(evalkit.__file__)"],
                           capture_output=True, text=True, check=True, cwd=work)
    assert where.stdout.startswith(str(tools)), where.stdout  # installed, not the checkout's sources
    ev = subprocess.run([str(bin_dir / "evalkit"), "eval", "--tasks", str(ROOT / "tests" / "evalkit" / "fixtures" / "tasks"),
                         "--solver", "reference"], capture_output=True, text=True, check=False, cwd=work, env=run_env,
                        timeout=600)
    assert ev.returncode == 0, ev.stderr
    assert re.search(r"public pass rate 100\.0% \[[^]]*\]  hidden pass rate 100\.0% ", ev.stdout), ev.stdout
