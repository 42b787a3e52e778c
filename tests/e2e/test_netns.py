"""`evalkit run --netns`: the whole run inside a fresh network namespace, so subprocesses are cut off too."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


def _netns_works() -> bool:
    unshare = shutil.which("unshare")
    return unshare is not None and subprocess.run([unshare, "-rn", "true"], check=False, capture_output=True).returncode == 0


pytestmark = [pytest.mark.slow, pytest.mark.skipif(not _netns_works(), reason="unshare -rn is not permitted here")]

AGENT = textwrap.dedent(
    """
    import subprocess, sys

    RESULTS = []

    def agent(prompt, tools):
        # A subprocess is outside the in-process guard; only the namespace can stop it. Try once, report always.
        if not RESULTS:
            code = "import socket\\ns = socket.socket()\\ns.settimeout(2)\\nprint(s.connect_ex(('192.0.2.1', 80)))"
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
            RESULTS.append(out.stdout.strip())
        return "subprocess connect_ex returned " + RESULTS[0]
    """
)


def test_run_inside_a_network_namespace(tmp_path: Path) -> None:
    (tmp_path / "netagent.py").write_text(AGENT)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "evalkit_cli", "run", "--netns", "--json", "--agent", "netagent:agent"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    body = json.loads(proc.stdout)
    assert body["network"]["scope"] == "process+netns"
    assert body["valid"] is True
    traj = (tmp_path / "out" / "pit" / "trajectory.jsonl").read_text().splitlines()
    decisions = [json.loads(line) for line in traj if '"type":"decision"' in line]
    # errno 101 (ENETUNREACH): in the namespace there is no route at all, even for the subprocess.
    assert decisions
    assert all(d["text"] == "subprocess connect_ex returned 101" for d in decisions)


def test_without_netns_the_scope_says_process(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "evalkit_cli", "run", "--json"], cwd=tmp_path, capture_output=True, text=True, check=False, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["network"]["scope"] == "process"
