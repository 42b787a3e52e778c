"""Round five: what an agent raises or names reaches the terminal of ``evalkit run`` only as printable text.

``evalkit run`` prints one ``FAILED`` line per failed cell with what the agent raised (its exception's type name
and message) or the network target it was blocked from, all text the agent chose. Printed raw, an escape sequence
in it moves the cursor and erases the lines above (the run's own ``valid=False`` line) and a carriage return or
backspaces overwrite the line it is on: an agent could make a failed run look valid on the screen that launched it.
Every character that is not printable is shown as ``?``; the receipt keeps the text as recorded. The same holds for
the one error line of an agent that cannot be loaded (what it raised while its module was imported is quoted in it).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from evalkit_cli._pit import failures

FORGED = (
    "\r\x1b[2K\x1b[12A\x1b[2Krun         forged  valid=True  masks=hold\x1b[12B\x08\x08\x07\x00\x9b1A\u202e"
)
CONTROLS = ("\x1b", "\r", "\x08", "\x07", "\x00", "\x9b", "\u202e")

_AGENTS = f"""
import os


def escapes(prompt, tools):
    raise type({FORGED.replace(chr(0), "")!r}, (Exception,), {{}})({FORGED!r})  # a type name holds no NUL


def raw_egress(prompt, tools):
    line = '["egress",' + {json.dumps(json.dumps(FORGED))} + ',' + {json.dumps(json.dumps(FORGED))} + ',"\\\\u001b[2J"]\\n'
    os.write(4, line.encode())
    return []
"""


def _body(**event: object) -> dict[str, object]:
    return {"agent_errors": [event], "network": {"attempts": []}}


@pytest.mark.parametrize(
    "body",
    [
        _body(
            type="agent_error",
            arm="main",
            clock="pit",
            session_date="2023-03-01",
            error_type=FORGED,
            message=FORGED,
        ),
        {
            "agent_errors": [],
            "network": {
                "attempts": [
                    {"arm": "main", "clock": "pit", "kind": FORGED, "target": FORGED, "call_site": FORGED}
                ]
            },
        },
    ],
    ids=["agent-error", "egress"],
)
def test_failure_lines_hold_no_control_character(body: dict[str, object]) -> None:
    (line,) = failures(body)
    assert line.isprintable(), repr(line)
    assert "valid=True" in line  # the text is still shown, as text: "?" where a control character was


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from evalkit_core._synth import write_synth_release

    base = tmp_path_factory.mktemp("rt5-terminal")
    rel = write_synth_release(
        base / "release", rows=300, start=dt.date(2023, 3, 1), end=dt.date(2023, 3, 10), seed=5
    )
    agents = base / "agents"
    agents.mkdir()
    (agents / "rt5_terminal_agents.py").write_text(textwrap.dedent(_AGENTS))
    return {"release": rel, "agents": agents, "cache": base / "cache"}


@pytest.mark.slow
@pytest.mark.parametrize("agent", ["escapes", "raw_egress"])
def test_an_agent_cannot_write_control_sequences_to_the_run_s_terminal(
    small: dict[str, Path], tmp_path: Path, agent: str
) -> None:
    cfg = {
        "bundle_path": str(small["release"]),
        "forms": ["8-K"],
        "start": "2023-03-01",
        "end": "2023-03-03",
        "arms": ["main"],
        "clocks": ["pit"],
        "probe_items": 0,
        "agent": f"rt5_terminal_agents:{agent}",
    }
    (tmp_path / "run.json").write_text(json.dumps(cfg))
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALKIT_")}
    env.update(
        {
            "EVALKIT_CACHE_DIR": str(small["cache"]),
            "EVALKIT_HOME": str(tmp_path / "home"),
            "PYTHONPATH": str(small["agents"]),
        }
    )
    res = subprocess.run(
        [sys.executable, "-m", "evalkit_cli", "run", "--config", "run.json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert res.returncode == 1, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    failed = [line for line in res.stdout.splitlines() if line.startswith("FAILED")]
    assert len(failed) == 1, res.stdout
    for ch in CONTROLS:
        assert ch not in res.stdout, (ch, failed)
    assert "valid=False" in res.stdout.splitlines()[0]
    body = json.loads((tmp_path / "receipt.json").read_text())["body"]
    recorded = body["agent_errors"] or body["network"]["attempts"]
    assert any(
        "\x1b" in str(v) for e in recorded for v in e.values()
    )  # the receipt keeps what the agent sent


@pytest.mark.slow
def test_an_agent_that_fails_to_load_cannot_write_control_sequences_to_the_error_line(
    small: dict[str, Path], tmp_path: Path
) -> None:
    (tmp_path / "rt5_load_agent.py").write_text(
        f"raise RuntimeError({FORGED!r})\ndef f(prompt, tools):\n    return []\n"
    )
    cfg = {"bundle_path": str(small["release"]), "forms": ["8-K"], "start": "2023-03-01", "end": "2023-03-03",
           "arms": ["main"], "clocks": ["pit"], "probe_items": 0, "agent": "rt5_load_agent:f"}  # fmt: skip
    (tmp_path / "run.json").write_text(json.dumps(cfg))
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALKIT_")}
    env.update({"EVALKIT_CACHE_DIR": str(small["cache"]), "EVALKIT_HOME": str(tmp_path / "home"),
                "PYTHONPATH": str(tmp_path)})  # fmt: skip
    res = subprocess.run([sys.executable, "-m", "evalkit_cli", "run", "--config", "run.json"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert res.returncode == 2, res.stdout + res.stderr
    for ch in CONTROLS:
        assert ch not in res.stderr, (ch, res.stderr)
    (line,) = res.stderr.splitlines()
    assert line.startswith("error: agent ") and "cannot be loaded" in line and "valid=True" in line, line
    assert line.isprintable(), repr(line)
