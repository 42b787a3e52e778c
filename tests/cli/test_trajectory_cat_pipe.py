"""`evalkit trajectory cat FILE | head` stops as cat does when its reader goes away: no traceback, SIGPIPE's
status (141), whatever the size of the stream."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_a_reader_that_stops_early_ends_cat_quietly(tmp_path: Path) -> None:
    traj = tmp_path / "trajectory.jsonl"
    line = b'{"seq":0,"type":"note","text":"' + b"x" * 1000 + b'"}\n'
    traj.write_bytes(line * 4000)  # 4 MB: far past any pipe's buffer
    with subprocess.Popen(
        [sys.executable, "-m", "evalkit_cli", "trajectory", "cat", str(traj)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        head = proc.stdout.read(100)
        proc.stdout.close()  # the reader goes away, as head does
        err = proc.stderr.read()
        assert proc.wait(timeout=60) == 141
    assert head == line[:100]
    assert err == b""
