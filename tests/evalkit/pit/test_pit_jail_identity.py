"""The PIT agent's jail has the sandbox's identity (issue 29, item 3): an agent asking who it is, as written and
through raw file reads, learns the policy's hostname and nothing of the host's boot or kernel command line."""

from __future__ import annotations

import json
import socket
import textwrap
from pathlib import Path

import pytest

from evalkit.pit import RunConfig, resolve_agent, run

pytestmark = pytest.mark.needs("root", "bwrap")  # the identity is bubblewrap's UTS namespace

AGENT = """
import os, socket


def _read(path):
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            return os.read(fd, 200).decode("utf-8", "replace")
        finally:
            os.close(fd)
    except OSError as exc:
        return type(exc).__name__


def agent(prompt, tools):
    seen = {
        "uname": os.uname().nodename,
        "gethostname": socket.gethostname(),
        "proc": _read("/proc/sys/kernel/hostname"),
        "cmdline": _read("/proc/cmdline"),
        "boot_id": _read("/proc/sys/kernel/random/boot_id"),
        "etc_hostname": _read("/etc/hostname"),
    }
    return "identity=" + json.dumps(seen, sort_keys=True)


import json
"""


@pytest.mark.needs("bwrap")  # the jail's own UTS namespace and hostname come from bubblewrap
def test_the_agent_jail_names_itself_not_the_host(
    synth_release_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_tmp: Path
) -> None:
    where = tmp_path / "agentsrc"
    where.mkdir()
    (where / "identity_agent.py").write_text(textwrap.dedent(AGENT))
    monkeypatch.syspath_prepend(str(where))
    cfg = RunConfig(
        bundle_path=str(synth_release_dir), forms=("8-K",), start="2023-03-01", end="2023-03-02", arms=("main",),
        clocks=("pit",), probe_items=0, agent="identity_agent:agent",
    )
    result = run(resolve_agent("identity_agent:agent"), cfg)
    texts = [
        json.loads(line)["text"]
        for line in result.trajectory_path.read_text().splitlines()
        if json.loads(line)["type"] == "decision"
    ]
    assert texts
    for text in texts:
        assert text.startswith("identity="), text[:300]
        seen = json.loads(text.removeprefix("identity="))
        assert seen["uname"] == seen["gethostname"] == "evalkit-jail"
        assert seen["proc"] in ("evalkit-jail\n", "PermissionError")  # the kernel's answer, or a recorder's refusal
        assert seen["cmdline"] in ("", "PermissionError")
        assert seen["boot_id"] in ("", "PermissionError")
        assert seen["etc_hostname"] == "FileNotFoundError"
        if socket.gethostname() != "evalkit-jail":
            assert seen["gethostname"] != socket.gethostname()
