"""Round five, NOT FIXED: an agent can forge the cause the harness records for its cell's failure.

A cell's failure is one ``agent_error`` event (and the receipt's ``agent_errors`` entry): ``error_type`` and
``message``. The harness writes its own causes there (``TrajectoryLimit``, ``AgentTimeout``, ``AgentLimit``,
``AgentCrashed``, ``HarnessError: the harness failed on this agent's input: ...``), and it writes what the agent
raised there too, under the name of the agent's exception class, which the agent chooses. An agent that raises
``type("TrajectoryLimit", (Exception,), {})(<the harness's own message>)`` gets an entry identical, field for
field, to the one the harness writes when it really stops a cell at its trajectory bound; with ``HarnessError`` it
can make its own failure read as a harness bug. Nothing in the trajectory, the receipt or ``evalkit run``'s FAILED
line tells the two apart. (issue 29, item 2: evidence comes from records only the harness writes.)

Suggested fix: record who raised it. The harness's causes and the agent's exceptions are already two code paths
(``_RunState.contain``/``AgentProcess`` raising ``AgentError`` with a harness name, versus the agent process's
``["error", type, message]``/``["load_error", ...]`` messages): give the event a field only the harness sets
(e.g. ``"raised_by": "agent" | "harness"``, or put the agent's class name in ``agent_exception`` and keep
``error_type`` to a closed set of harness causes such as ``AgentRaised``), carry it through the scorer's replay
and the receipt schema, and print it on the FAILED line.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from evalkit.pit import RunBounds, RunConfig, from_callable, run
from evalkit_core import Release

pytestmark = [pytest.mark.slow, pytest.mark.needs("root", "bwrap", "seccomp")]

BOUND = 300_000


@pytest.fixture(scope="module")
def release_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from evalkit_core._synth import write_synth_release

    out = tmp_path_factory.mktemp("rt5-cause") / "release"
    return write_synth_release(out, rows=300, start=dt.date(2023, 3, 1), end=dt.date(2023, 3, 10), seed=5)


def _error(release_dir: Path, out: Path, agent: Callable[[str, Any], Any]) -> dict[str, Any]:
    out.mkdir()
    cfg = RunConfig(
        bundle_path=str(release_dir), forms=("8-K",), start="2023-03-01", end="2023-03-03", arms=("main",),
        clocks=("pit",), probe_items=0, trajectory_path=str(out / "t.jsonl"), receipt_path=str(out / "r.json"),
    )  # fmt: skip
    body = run(
        from_callable(agent),
        cfg,
        Release.load(release_dir),
        None,
        bounds=RunBounds(trajectory_cell_bytes=BOUND),
    ).body
    assert body["valid"] is False
    (err,) = body["agent_errors"]
    return {k: v for k, v in err.items() if k not in ("arm", "clock", "session_date")}


def _flood(prompt: str, tools: Any) -> Any:
    for _ in range(10_000):
        tools.pit_list(limit=200)
    return []


def _forging(error_type: str, message: str) -> Callable[[str, Any], Any]:
    def agent(prompt: str, tools: Any) -> Any:
        raise type(error_type, (Exception,), {})(message)

    return agent


def test_an_agent_cannot_forge_the_harness_s_own_cause(release_dir: Path, tmp_path: Path) -> None:
    real = _error(release_dir, tmp_path / "real", _flood)
    assert real["error_type"] == "TrajectoryLimit"
    forged = _error(release_dir, tmp_path / "forged", _forging(real["error_type"], real["message"]))
    assert forged != real, "the agent's own exception is recorded exactly as the harness's trajectory bound"
