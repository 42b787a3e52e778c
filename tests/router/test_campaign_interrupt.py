"""Ctrl-C during ``campaign run``: once or twice, the process exits 130 with one line, no traceback, and every
call it had in flight settled (none left 'pending'). The provider is the loopback fake of tests/fake_provider.py."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from campaign_support import SUBSET, write_campaign  # pyright: ignore[reportImplicitRelativeImport]

from fake_provider import FakeProvider, registry_toml  # pyright: ignore[reportImportCycles]

CANARY = "CANARY-interrupt-0f2e4d6c8b0a1f3e5d7c9b"


@pytest.fixture(scope="module")
def provider() -> Iterator[FakeProvider]:
    with FakeProvider() as fake:
        yield fake


def _pending(home: Path) -> int:
    db = home / "evalkit.sqlite3"
    if not db.exists():
        return 0
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        return con.execute("SELECT count(*) FROM model_calls WHERE status = 'pending'").fetchone()[0]
    except sqlite3.OperationalError:
        return 0
    finally:
        con.close()


@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_exits_cleanly_and_settles_every_call_in_flight(tmp_path, provider, presses):
    home = tmp_path / "home"
    reg = registry_toml(provider.base, ["slow:30"], provider="openai")
    path = write_campaign(tmp_path / "c", models=("fake-openai/slow:30",), registry=reg, k=2, ids=SUBSET[:3])
    env = {**os.environ, "EVALKIT_HOME": str(home), "FAKE_KEY": CANARY}
    proc = subprocess.Popen(
        [sys.executable, "-c", "from evalkit_cli import main; main()", "campaign", "run", str(path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while _pending(home) == 0:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no call went out"
            time.sleep(0.05)
        for _ in range(presses):
            proc.send_signal(signal.SIGINT)
            time.sleep(0.05)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith("interrupted"), err
    assert _pending(home) == 0
