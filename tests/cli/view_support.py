"""Start and stop ``evalkit view`` on loopback for a test (a subprocess; ended by its own pid)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def running_view(directory: Path, home: Path) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    with running_view_json(directory, home) as info:
        yield info["url"], info["items"]


@contextmanager
def running_view_json(directory: Path, home: Path) -> Iterator[dict[str, Any]]:
    """The view running, and the JSON line it printed (its address, the directories it read and its catalog)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "from evalkit_cli import main; main()", "view", str(directory), "--port", "0",
         "--home", str(home), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy(),
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"evalkit view did not start: {proc.stderr.read() if proc.stderr else ''}")
        info = json.loads(line)
        assert info["url"].startswith("http://127.0.0.1:")
        yield info
    finally:
        proc.send_signal(signal.SIGINT)  # the view's own pid: Ctrl-C, as a person would stop it
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def fetch(url: str, method: str = "GET") -> tuple[int, str]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=120) as reply:
            return reply.status, reply.read().decode("utf-8")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8")
