"""Round five: an agent cannot silence the recorder of its network attempts, nor the report of its own errors.

The jailed agent's network recorder names the call site of each attempt from the code object's file name, which
the agent chooses (``compile(src, name, "exec")``, ``code.replace(co_filename=name)``). A lone surrogate or a NUL in that name made resolving the path
or encoding the ``egress`` message raise inside the audit hook: the connection was refused (the hook raised), but
with a UnicodeEncodeError or ValueError the agent could catch, and nothing reached the harness. The receipt then
said ``valid=True`` with ``egress_attempts=0`` for an agent that tried to connect, where the same code under a plain
file name invalidates the run (``agent blocked: create_connection to 10.0.0.1:80``).

Neither can it by setting to None the harness's own globals the recorder uses to name the call site, or json's
encoder: the attempt is then reported without the details it spoiled (the recorders remain Python in the agent's
process, and docs/pit-harness.md's threat model says so; these no longer need ctypes).

The same encoding made an agent that raised an exception holding a lone surrogate crash the harness's own loop in
its process (recorded as ``AgentCrashed ... exited with code 0`` instead of what it raised), and a reply text
holding one the same (instead of the harness's ``AgentProtocolError``: not Unicode text).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from evalkit.pit import RunConfig, from_callable, run, verify_pit_receipt
from evalkit_core import Release

pytestmark = [pytest.mark.slow, pytest.mark.needs("root", "bwrap", "seccomp")]  # the agent's jail, whole

NETWORK = """
import socket
for f in (lambda: socket.create_connection(("10.0.0.1", 80), timeout=0.2),
          lambda: socket.getaddrinfo("example.com", 443)):
    try:
        f()
    except BaseException as e:
        R.append(type(e).__name__)
"""


def _network_under(filename: str) -> Callable[[str, Any], Any]:
    def agent(prompt: str, tools: Any) -> Any:
        caught: list[str] = []
        code = compile(NETWORK, "placeholder.py", "exec")
        code = code.replace(
            co_filename=filename,
            co_consts=tuple(  # the lambdas' code objects too
                c.replace(co_filename=filename) if hasattr(c, "co_filename") else c for c in code.co_consts
            ),
        )
        exec(code, {"R": caught})
        return "caught " + " ".join(caught)

    return agent


def _network_after_patching(what: str) -> Callable[[str, Any], Any]:
    def agent(prompt: str, tools: Any) -> Any:
        import importlib
        import json

        if what == "guard":
            guard = importlib.import_module("evalkit.pit._guard")
            for name in ("_resolved", "_display_path", "Path"):
                if hasattr(guard, name):
                    setattr(guard, name, None)
        else:
            json._default_encoder = None  # type: ignore[attr-defined]
        caught: list[str] = []
        exec(compile(NETWORK, "agent_net.py", "exec"), {"R": caught})
        return "caught " + " ".join(caught)

    return agent


def _raising(message: str) -> Callable[[str, Any], Any]:
    def agent(prompt: str, tools: Any) -> Any:
        raise ValueError(message)

    return agent


def _replying(text: str) -> Callable[[str, Any], Any]:
    def agent(prompt: str, tools: Any) -> Any:
        from evalkit.pit import AgentReply

        return AgentReply(picks=(), text=text)

    return agent


@pytest.fixture(scope="module")
def release_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from evalkit_core._synth import write_synth_release

    out = tmp_path_factory.mktemp("rt5-egress") / "release"
    return write_synth_release(out, rows=300, start=dt.date(2023, 3, 1), end=dt.date(2023, 3, 10), seed=5)


def _run(release_dir: Path, tmp_path: Path, agent: Callable[[str, Any], Any]) -> dict[str, Any]:
    cfg = RunConfig(
        bundle_path=str(release_dir), forms=("8-K",), start="2023-03-01", end="2023-03-03", arms=("main",),
        clocks=("pit",), probe_items=0, trajectory_path=str(tmp_path / "t.jsonl"), receipt_path=str(tmp_path / "r.json"),
    )  # fmt: skip
    result = run(from_callable(agent), cfg, Release.load(release_dir), None)
    checks = verify_pit_receipt(result.receipt_path, trajectory=result.trajectory_path, bundle=release_dir)
    assert [(c.name, c.detail) for c in checks if c.status == "MISMATCH"] == []
    return result.body


@pytest.mark.parametrize(
    "filename", ["agent_net.py", "\ud800agent_net.py", "agent\x00net.py", "\udcff/\ud83d.py"],
    ids=["plain", "lone-surrogate", "nul", "surrogates-in-a-path"],
)  # fmt: skip
def test_a_network_attempt_is_recorded_whatever_the_code_s_file_name(
    release_dir: Path, tmp_path: Path, filename: str
) -> None:
    body = _run(release_dir, tmp_path, _network_under(filename))
    assert body["network"]["egress_attempts"] >= 1, body["network"]
    assert body["valid"] is False
    assert "network_egress_attempt" in body["invalidated_by"]
    (attempt, *_) = body["network"]["attempts"]
    assert attempt["kind"] in {"create_connection", "getaddrinfo", "connect", "socket"}
    assert attempt["call_site"] is not None and attempt["call_site"].endswith(":3")


@pytest.mark.parametrize("what", ["guard", "json"])
def test_a_network_attempt_is_recorded_after_the_agent_patched_what_the_recorder_uses(
    release_dir: Path, tmp_path: Path, what: str
) -> None:
    """The harness's module globals the call site is made with, or json's encoder, set to None by the agent: the
    attempt is still reported (without the details it spoiled)."""
    body = _run(release_dir, tmp_path, _network_after_patching(what))
    assert body["network"]["egress_attempts"] >= 1, body["network"]
    assert body["valid"] is False


def test_an_exception_holding_a_lone_surrogate_is_recorded_as_what_the_agent_raised(
    release_dir: Path, tmp_path: Path
) -> None:
    body = _run(release_dir, tmp_path, _raising("boom \ud800 " + "m" * 50))
    (err,) = body["agent_errors"]
    assert err["error_type"] == "ValueError", err
    assert err["message"].startswith("boom \ufffd m"), err


def test_a_reply_text_holding_a_lone_surrogate_is_the_harness_s_protocol_refusal(
    release_dir: Path, tmp_path: Path
) -> None:
    body = _run(release_dir, tmp_path, _replying("answer \ud800"))
    (err,) = body["agent_errors"]
    assert err["error_type"] == "AgentProtocolError", err
    assert "lone surrogate" in err["message"]
