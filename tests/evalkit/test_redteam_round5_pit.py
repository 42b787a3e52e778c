"""Round five against PIT runs (issue 29, item 5): hostile agents that held, kept as regression guards.

Each agent runs in its jail like any other and attacks the harness from a side the earlier rounds did not name:
what it returns (a generator, an object whose every dunder raises, a str subclass that equals everything, bytes,
a dict, NaN, a quarter-million non-strings), what it raises (SystemExit of an object, KeyboardInterrupt,
GeneratorExit, a BaseException whose ``__str__`` raises, an exception whose ``__str__`` is not a string, a type
named by a lone surrogate, a cause loop), how it calls its tools (NaN, infinities, bools, negative and 10**30
limits, dicts and huge lists where strings go, unknown keywords, too many positional arguments, calls from a thread
after it answered), and what it does to its process (closes fds 0-2, closes or dup2s over its protocol fds,
writes garbage, half a message, three replies at once or raw error and egress messages holding lone surrogates,
exits mid-session, replaces ``sys.stdout`` with an object that raises SystemExit, starts two thousand threads).

Every run ends with its trajectory and signed receipt, the failure (where there is one) recorded as its cell's with
a named cause, and ``verify`` re-checks it with no mismatch. No run raises.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from evalkit.pit import RunConfig, from_callable, run, verify_pit_receipt
from evalkit_core import Release

pytestmark = [pytest.mark.slow, pytest.mark.needs("root", "bwrap", "seccomp")]  # attacks on the full wall


class _Evil:
    def __iter__(self) -> Any:
        raise RuntimeError("iter")

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("eq")

    def __hash__(self) -> int:
        raise RuntimeError("hash")

    def __len__(self) -> int:
        raise RuntimeError("len")

    def __repr__(self) -> str:
        raise RuntimeError("repr")

    def __str__(self) -> str:
        raise RuntimeError("str")


class _Everything(str):
    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return 0

    def __len__(self) -> int:
        return 10**9


class _Unprintable(BaseException):
    def __str__(self) -> str:
        raise _Unprintable


class _NotTextError(Exception):
    def __str__(self) -> str:
        return 7  # type: ignore[return-value]  # noqa: PLE0307


def _keys(tools: Any) -> list[str]:
    return [r["row_key"] for r in tools.pit_list(limit=2)["rows"]]


def _cause_loop() -> None:
    a, b = ValueError("a"), ValueError("b")
    a.__cause__, b.__cause__, a.__context__, b.__context__ = b, a, b, a
    raise a


def _named(name: str) -> None:
    raise type(name, (Exception,), {})("\ud800\x00" * 5000)


def _tool_args(tools: Any) -> list[str]:
    for kw in ({"limit": float("nan")}, {"limit": -1}, {"limit": 10**30}, {"limit": True}, {"limit": "5"},
               {"form": {"a": 1}}, {"form": ["x"] * 100_000}, {"limit": 1.5}, {"form": "\x00"},
               {"limit": float("inf")}, {"form": None}, {"limit": 1, "zzz": 1}):  # fmt: skip
        with contextlib.suppress(Exception):
            tools.pit_list(**kw)
    for q in ({1: 2}, ["a"], None, 5, "\ud800"):
        with contextlib.suppress(Exception):
            tools.pit_search(q)
    for k in (None, 5, ["a"], {"a": 1}, "\ud800"):
        with contextlib.suppress(Exception):
            tools.pit_read(k)
    return _keys(tools)


def _thread_after(tools: Any) -> list[str]:
    import threading
    import time

    def go() -> None:
        time.sleep(0.05)
        for _ in range(200):
            with contextlib.suppress(BaseException):
                tools.pit_list(limit=1)

    threading.Thread(target=go, daemon=True).start()
    return []


def _raw(data: bytes, then: str) -> Callable[[str, Any], Any]:
    def agent(prompt: str, tools: Any) -> Any:
        import os
        import time

        os.write(4, data)
        if then == "exit":
            os._exit(0)
        if then == "sleep":
            time.sleep(5)
        return []

    return agent


def _process(what: str) -> Callable[[str, Any], Any]:
    def agent(prompt: str, tools: Any) -> Any:
        import os
        import sys
        import threading
        import time

        if what == "close-std":
            for fd in (0, 1, 2):
                os.close(fd)
            return _keys(tools)
        if what == "close-protocol":
            os.close(3)
            os.close(4)
        elif what == "dup-protocol":
            os.dup2(1, 4)
            return _keys(tools)
        elif what == "exit-mid-session":
            tools.pit_list(limit=1)
            os._exit(7)
        elif what == "stdout":

            class W:
                def write(self, x: str) -> None:
                    raise SystemExit(3)

                def flush(self) -> None:
                    raise KeyboardInterrupt

            sys.stdout = sys.stderr = W()  # type: ignore[assignment]
            print("x")
        elif what == "threads":
            for _ in range(2000):
                try:
                    threading.Thread(target=time.sleep, args=(100,), daemon=True).start()
                except BaseException:
                    break
        return []

    return agent


def _raise(kind: str) -> Callable[[str, Any], Any]:
    def agent(prompt: str, tools: Any) -> Any:
        raise _exception(kind)

    return agent


def _exception(kind: str) -> BaseException:
    return {
        "system-exit": lambda: SystemExit(object()),
        "keyboard-interrupt": KeyboardInterrupt,
        "generator-exit": GeneratorExit,
        "unprintable": _Unprintable,
        "not-text": _NotTextError,
    }[kind]()


AGENTS: dict[str, tuple[Callable[[str, Any], Any], str | None]] = {
    # what it returns: refused as the cell's failure (None: the run goes on, odd picks refused as unknown)
    "generator": (lambda p, t: (k for k in _keys(t)), "TypeError"),
    "evil-object": (lambda p, t: _Evil(), "TypeError"),
    "evil-list": (lambda p, t: [_Evil(), _Evil()], "RuntimeError"),
    "str-subclass": (lambda p, t: _Everything("hello"), "TypeError"),
    "str-subclass-picks": (lambda p, t: [_Everything(k) for k in _keys(t)], None),
    "bytes": (lambda p, t: b"\xff\xfe", "TypeError"),
    "dict": (lambda p, t: {"a": 1}, "TypeError"),
    "nan": (lambda p, t: float("nan"), "TypeError"),
    "non-strings": (lambda p, t: [float("nan")] * 250_000 + [2**10000], None),
    # what it raises
    "system-exit-object": (_raise("system-exit"), "SystemExit"),
    "keyboard-interrupt": (_raise("keyboard-interrupt"), "KeyboardInterrupt"),
    "generator-exit": (_raise("generator-exit"), "GeneratorExit"),
    "unprintable-base": (_raise("unprintable"), "_Unprintable"),
    "str-not-text": (_raise("not-text"), "_NotTextError"),
    "long-type-name": (lambda p, t: _named("N" * 100_000), "N" * 100),
    "surrogate-type-name": (lambda p, t: _named("\ud800N"), "UnicodeEncodeError"),  # type() itself refuses it
    "cause-loop": (lambda p, t: _cause_loop(), "ValueError"),
    # how it calls its tools
    "tool-args": (lambda p, t: _tool_args(t), None),
    "thread-after-reply": (lambda p, t: _thread_after(t), None),
    # what it does to its process and its pipes
    "close-std": (_process("close-std"), "OSError"),
    "close-protocol": (_process("close-protocol"), "AgentCrashed"),
    "dup-protocol": (_process("dup-protocol"), "AgentCrashed"),
    "exit-mid-session": (_process("exit-mid-session"), "AgentCrashed"),
    "hostile-stdout": (_process("stdout"), "SystemExit"),
    "threads": (_process("threads"), None),
    "garbage": (_raw(b"\xff\xfe\x00garbage\n", "return"), "AgentProtocolError"),
    "half-message": (_raw(b'["reply",[', "exit"), "AgentCrashed"),
    "three-replies": (_raw(b'["reply",[],null]\n' * 3, "return"), None),
    "raw-error": (
        _raw(b'["error","\\ud800' + b"x" * 50 + b'","\\ud800\\udfff\\u0000"]\n', "sleep"),
        "\ufffd" + "x" * 50,
    ),
    "raw-egress": (_raw(b'["egress","\\ud800",{"a":1},"\\udfff"]\n', "return"), "egress"),
    "raw-tool-surrogate-key": (
        _raw(b'["tool","pit_list",{"limit":1,"\\ud800":2}]\n', "sleep"),
        "AgentCrashed",
    ),
    "raw-complete": (
        _raw(b'["complete","\\ud800",{"messages":[{"role":"user","content":"\\ud800"}]}]\n', "sleep"),
        "AgentCrashed",
    ),
    "raw-private-tool": (_raw(b'["tool","_view",{}]\n', "sleep"), "AgentCrashed"),
}


@pytest.fixture(scope="module")
def release_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from evalkit_core._synth import write_synth_release

    out = tmp_path_factory.mktemp("rt5-pit") / "release"
    return write_synth_release(out, rows=300, start=dt.date(2023, 3, 1), end=dt.date(2023, 3, 10), seed=5)


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_a_hostile_agent_ends_as_its_cell_s_failure_with_a_receipt(
    release_dir: Path, tmp_path: Path, name: str
) -> None:
    agent, failure = AGENTS[name]
    cfg = RunConfig(
        bundle_path=str(release_dir), forms=("8-K",), start="2023-03-01", end="2023-03-03", arms=("main",),
        clocks=("pit",), probe_items=0, trajectory_path=str(tmp_path / "t.jsonl"), receipt_path=str(tmp_path / "r.json"),
    )  # fmt: skip
    result = run(from_callable(agent), cfg, Release.load(release_dir), None)
    assert result.receipt_path.is_file() and result.trajectory_path.is_file()
    checks = verify_pit_receipt(result.receipt_path, trajectory=result.trajectory_path, bundle=release_dir)
    assert [(c.name, c.detail) for c in checks if c.status == "MISMATCH"] == []
    body = result.body
    if failure is None:
        assert body["valid"] is True and body["completed"] is True, body.get("agent_errors")
        return
    assert body["valid"] is False and body["completed"] is False
    if failure == "egress":
        assert body["network"]["egress_attempts"] == 1
        return
    (err,) = body["agent_errors"]
    assert err["error_type"] == failure, err
    assert len(err["message"]) <= 2000
