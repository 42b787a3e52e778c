"""Round five: an agent cannot forge the cause the harness records for its cell's failure.

A cell's failure is one ``agent_error`` event (and the receipt's ``agent_errors`` entry): ``error_type`` and
``message``. The harness writes its own causes there (``TrajectoryLimit``, ``AgentTimeout``, ``AgentLimit``,
``AgentCrashed``, ``HarnessError: the harness failed on this agent's input: ...``), and it writes what the agent
raised there too, under the name of the agent's exception class, which the agent chooses. An agent that raised
``type("TrajectoryLimit", (Exception,), {})(<the harness's own message>)`` got an entry identical, field for
field, to the one the harness writes when it really stops a cell at its trajectory bound; with ``HarnessError`` it
could make its own failure read as a harness bug (issue 29, item 2: evidence comes from records only the harness
writes). Each entry now says who named the cause, ``raised_by``: ``harness`` or ``agent``, set by the harness from
the path the failure took (an agent process's ``error``/``load_error`` message, or the harness's own finding), and
``evalkit run`` prints the two differently.
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
    assert (real["raised_by"], forged["raised_by"]) == ("harness", "agent")
    # imported here: the agents above are imported from this module inside their jail, where the CLI is not
    from evalkit_cli._pit import failures

    (shown_real,) = failures({"agent_errors": [real], "network": {"attempts": []}})
    (shown_forged,) = failures({"agent_errors": [forged], "network": {"attempts": []}})
    assert ": stopped by the harness, TrajectoryLimit: " in shown_real
    assert ": agent raised TrajectoryLimit: " in shown_forged
