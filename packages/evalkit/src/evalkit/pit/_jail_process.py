"""One jailed agent process, seen from the harness: the pipes to it, the protocol it speaks (untrusted input,
read with caps on size and time), its sessions and its end. See :mod:`evalkit.pit._jail` for the jail that makes it
and :mod:`evalkit.pit._agent_child` for the other side of the pipes."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import marshal
import os
import select
import signal
import time
from collections.abc import Callable
from typing import Any, Protocol, cast

from evalkit.pit._agent_base import AgentReply
from evalkit.pit._bounds import SMALL_MESSAGE_BYTES
from evalkit.pit._guard import EgressAttempt
from evalkit.pit._jail_types import (
    _EXIT_CPU,  # pyright: ignore[reportPrivateUsage]
    _EXIT_EGRESS,  # pyright: ignore[reportPrivateUsage]
    _EXIT_TAMPERED,  # pyright: ignore[reportPrivateUsage]
    AgentError,
    AgentLimits,
    EgressStop,
)
from evalkit.pit._recipe import Recipe
from evalkit.pit._toolbox import Toolbox
from evalkit.wall import Spawned, WallError, Zygote, describe_status
from evalkit_core import EvalkitError

__all__ = ["AgentProcess", "JailHost"]


def _monotonic() -> float:
    return time.monotonic()


class JailHost(Protocol):
    """What an agent process needs of the jail that made it (:class:`evalkit.pit._jail.AgentJail`)."""

    limits: AgentLimits
    network_policy: str
    agent_seconds: float
    spawn_seconds: float
    processes: int

    @property
    def zygote(self) -> Zygote: ...

    def next_uid(self) -> int: ...


class AgentProcess:
    """One jailed agent process: loads the agent, then answers sessions until it is closed."""

    def __init__(self, jail: JailHost, recipe: Recipe) -> None:
        self.jail = jail
        limits = jail.limits
        self.limits = limits
        self._fds: list[int] = []
        t0 = _monotonic()
        out_r, out_w = self._pipe()
        in_r, in_w = self._pipe()
        rep_r, rep_w = self._pipe()
        zygote = jail.zygote
        self._spawned: Spawned | None = zygote.spawn(
            "agent",
            [out_w, in_r, rep_w],
            uid=jail.next_uid(),
            limits=limits.rlimits(),
            disk_bytes=limits.disk_bytes,
        )
        jail.processes += 1
        for fd in (out_w, in_r, rep_w):
            self._close(fd)
        self._to, self._from, self._out = in_w, rep_r, out_r
        for fd in (in_w, rep_r, out_r):
            os.set_blocking(fd, False)
        self._pending = bytearray()
        self._inbox = bytearray()
        self._lines: list[bytes] = []
        self._eof = False
        self._overflow = False
        self.output = bytearray()
        self._status: int | None = None
        self._ended = False
        self.reported = False  # whether an attempt of this process reached the harness as it happened
        self.load_egress: list[EgressAttempt] = []  # attempts made while the agent's module was imported
        options = {"network_policy": jail.network_policy, "paths": list(recipe.paths)}
        self._send(["load", dict(recipe.spec), options])
        try:
            zygote.confirm(self._spawned)
        except WallError:
            self.close()
            raise
        jail.spawn_seconds += _monotonic() - t0
        budget = limits.load_seconds
        while True:
            t1 = jail.agent_seconds
            try:
                msg = self._next(budget, "while loading the agent")
            except EgressStop as stop:
                self.close()
                raise EgressStop(*self.load_egress, *stop.attempts) from None
            except AgentError:
                self.close()
                raise
            budget = max(0.0, budget - (jail.agent_seconds - t1))
            if msg[0] == "egress" and len(msg) == 4:  # recorded when the run takes this process
                self.load_egress.append(_attempt(msg))
                self.reported = True
                continue
            break
        if msg[0] == "ready":
            return
        self.close()
        if msg[0] == "load_error" and len(msg) == 3:
            raise AgentError(_text(msg[1], 100) or "Error", _text(msg[2], 2000), raised_by="agent")
        raise AgentError("AgentProtocolError", "the agent process answered its load with something else")

    # -- pipes ---------------------------------------------------------------------------------------------------

    def _pipe(self) -> tuple[int, int]:
        r, w = os.pipe()
        self._fds += [r, w]
        with contextlib.suppress(OSError):  # a larger pipe: a page of rows crosses in one write
            fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 1 << 20)
        return r, w

    def _close(self, fd: int) -> None:
        if fd in self._fds:
            self._fds.remove(fd)
            with contextlib.suppress(OSError):
                os.close(fd)

    def _send(self, msg: list[Any]) -> None:
        data = marshal.dumps(msg)  # to the agent: trusted data, read by the same interpreter
        self._pending += len(data).to_bytes(8, "little") + data

    def _write_some(self) -> bool:
        """Write what the pipe to the agent takes now (it never blocks); True when nothing is left to write."""
        while self._pending:
            try:
                n = os.write(self._to, self._pending[: 1 << 20])
            except BlockingIOError:
                return False
            except OSError as exc:  # the agent is gone; its end is read by the pump
                if exc.errno != errno.EPIPE:
                    raise
                self._pending.clear()
                break
            del self._pending[:n]
        return True

    def _pump(self, deadline: float) -> bool:
        """Move bytes until a whole message has arrived (or end of file, or too long a line); False at the
        deadline."""
        limit = self.limits.message_bytes
        while not self._lines and not self._eof and not self._overflow:
            remaining = deadline - _monotonic()
            if remaining <= 0:
                return False
            wfds = [self._to] if self._pending else []
            ready_r, ready_w, _ = select.select([self._from, self._out], wfds, [], remaining)
            if ready_w:
                self._write_some()
            if self._out in ready_r:
                self._read_output()
            if self._from in ready_r:
                try:
                    chunk = os.read(self._from, 1 << 20)
                except BlockingIOError:
                    continue
                if not chunk:
                    self._eof = True
                    break
                start = len(self._inbox)
                self._inbox += chunk
                cut = self._inbox.find(b"\n", start)
                while cut >= 0:
                    self._lines.append(bytes(self._inbox[:cut]))
                    del self._inbox[: cut + 1]
                    cut = self._inbox.find(b"\n")
                if len(self._inbox) > limit:
                    self._overflow = True
        return True

    def _read_output(self) -> None:
        try:
            chunk = os.read(self._out, 1 << 16)
        except (BlockingIOError, OSError):
            return
        if chunk:
            room = self.limits.output_bytes - len(self.output)
            if room < len(chunk):
                del self.output[: min(len(self.output), len(chunk) - max(room, 0))]
            self.output += chunk[-self.limits.output_bytes :]

    def _next(self, budget: float, when: str) -> list[Any]:
        """The agent's next message within ``budget`` seconds of its own time; AgentError (or EgressStop)
        when it hung, ended or broke the protocol."""
        t0 = _monotonic()
        arrived = self._pump(t0 + budget)
        self.jail.agent_seconds += _monotonic() - t0
        if self._lines:
            line = self._lines.pop(0)
            if len(line) > self.limits.message_bytes:
                raise self._protocol("a message longer than the limit")
            if len(line) > SMALL_MESSAGE_BYTES and not line.startswith(b'["complete",'):  # never parsed: bounds what it holds
                raise self._protocol(f"a message longer than {SMALL_MESSAGE_BYTES} bytes (only a model request may be)")
            try:
                msg = json.loads(line)
            except (ValueError, RecursionError):
                raise self._protocol("a message that is not JSON") from None
            if not isinstance(msg, list) or not msg or not isinstance(msg[0], str):
                raise self._protocol("a message the protocol does not know")
            return cast("list[Any]", msg)
        if self._overflow:
            raise self._protocol(f"a message longer than {self.limits.message_bytes} bytes")
        if not arrived:
            self.kill()
            raise AgentError(
                "AgentTimeout",
                f"the agent took more than {self.limits_text(budget)} of wall clock {when} (killed)",
            )
        status = self._end()
        if os.WIFEXITED(status or 0) and status is not None and os.WEXITSTATUS(status) == _EXIT_EGRESS:
            raise (
                EgressStop(EgressAttempt("recorder_exit", None, None)) if not self.reported else EgressStop()
            )
        if status is not None and os.WIFEXITED(status) and os.WEXITSTATUS(status) == _EXIT_TAMPERED:
            raise EgressStop(EgressAttempt("recorder_channel_replaced", None, None))
        if status is not None and os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGSYS:
            raise EgressStop(EgressAttempt("seccomp_kill", "socket() of a network family", None))
        if status is not None and os.WIFEXITED(status) and os.WEXITSTATUS(status) == _EXIT_CPU:
            raise AgentError(
                "AgentCPULimit",
                f"the agent used more than {self.limits.cpu_seconds} s of CPU time in its process (ended)",
            )
        cause = describe_status(status)
        if status is not None and os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
            cause += f" (the CPU limit of {self.limits.cpu_seconds} s, the kernel's memory killer, or the agent itself)"
        raise AgentError("AgentCrashed", f"the agent process ended {when}: {cause}{self._tail()}")

    @staticmethod
    def limits_text(budget: float) -> str:
        return f"{budget:g} s"

    def _protocol(self, what: str) -> AgentError:
        self.kill()
        return AgentError("AgentProtocolError", f"the agent process sent {what}")

    def _tail(self) -> str:
        while self._out in select.select([self._out], [], [], 0)[0]:
            before = len(self.output)
            self._read_output()
            if len(self.output) == before:
                break
        text = bytes(self.output[-500:]).decode("utf-8", "replace").strip()
        text = "".join(ch if ch.isprintable() or ch == "\n" else "?" for ch in text)
        return f"; its output ended with: {text}" if text else ""

    # -- sessions ------------------------------------------------------------------------------------------------

    def session(
        self,
        prompt: str,
        toolbox: Toolbox,
        on_egress: Callable[[EgressAttempt], None],
        after_answer: Callable[[], None] | None = None,
    ) -> AgentReply:
        """One session: the prompt goes in, requests are answered from ``toolbox`` until the agent replies.

        ``after_answer`` is called after each tool answer has gone into the pipe, before the agent's next message
        is read: the harness's own work on that call (recording it) then runs while the agent reads the answer."""
        context = {
            "arm": toolbox.arm,
            "clock": toolbox.clock,
            "session_date": toolbox.session_date,
            "known_at": toolbox.known_at,
        }
        self._send(["session", prompt, context])
        budget = self.limits.session_seconds
        abort = self.jail.network_policy == "abort"
        loaded, self.load_egress = self.load_egress, []
        for attempt in loaded:  # made while its module was imported (policy continue: it went on)
            on_egress(attempt)
        requests = 0
        while True:
            t0 = self.jail.agent_seconds
            msg = self._next(budget, "in one session")
            budget = max(0.0, budget - (self.jail.agent_seconds - t0))
            kind = msg[0]
            requests += 1
            if requests > self.limits.session_requests:
                self.kill()
                raise AgentError(
                    "AgentLimit",
                    f"the agent made more than {self.limits.session_requests} requests in one session (killed)",
                )
            if kind == "tool" and len(msg) == 3 and isinstance(msg[1], str) and isinstance(msg[2], dict):
                self._send(_result_message(toolbox, toolbox.call(msg[1], cast("dict[str, Any]", msg[2]))))
                if after_answer is not None:
                    self._write_some()
                    after_answer()
            elif (
                kind == "complete" and len(msg) == 3 and isinstance(msg[1], str) and isinstance(msg[2], dict)
            ):
                self._send(self._complete(toolbox, msg[1], cast("dict[str, Any]", msg[2])))
            elif kind == "egress" and len(msg) == 4:
                self.reported = True
                on_egress(_attempt(msg))
                if abort:
                    self.kill()
                    raise EgressStop
            elif kind == "reply" and len(msg) == 3 and isinstance(msg[1], list):
                text = msg[2]
                if not (text is None or isinstance(text, str)):
                    raise self._protocol("a reply whose text is not a string")
                # picks that are not row_keys (strings) are the runner's to refuse, as unknown keys
                return AgentReply(picks=tuple(cast("list[str]", msg[1])), text=text)
            elif kind == "error" and len(msg) == 3:
                raise AgentError(_text(msg[1], 100) or "Error", _text(msg[2], 2000), raised_by="agent")
            else:
                raise self._protocol(f"a message the protocol does not know ({_text(kind, 40)!r})")

    def _complete(self, toolbox: Toolbox, model_id: str, raw: dict[str, Any]) -> list[Any]:
        from evalkit_core.models import completion_to_json, request_from_json

        try:
            request = request_from_json(raw)
        except Exception as exc:  # untrusted input: any failure to read it is the agent's
            return ["raised", "GatewayError", f"malformed model request: {type(exc).__name__}: {str(exc)[:500]}"]
        try:
            completion = toolbox.complete(model_id, request)
        except EvalkitError as exc:
            return ["raised", type(exc).__name__, str(exc)]
        return ["completion", completion_to_json(completion)]

    # -- end -----------------------------------------------------------------------------------------------------

    def kill(self) -> None:
        if self._spawned is not None:
            self.jail.zygote.kill(self._spawned)

    def _end(self) -> int | None:
        """Kill the process (if it still runs) and wait for its exit status."""
        if self._spawned is not None and not self._ended:
            zygote = self.jail.zygote
            zygote.kill(self._spawned)
            self._status = zygote.exit_status(self._spawned)
            self._spawned = None
            self._ended = True
        return self._status

    def close(self) -> None:
        """End the process; its pid namespace is torn down in the background."""
        if self._spawned is not None:
            self.jail.zygote.release(self._spawned)
            self._spawned = None
        for fd in list(self._fds):
            self._close(fd)


def _result_message(toolbox: Toolbox, result: dict[str, Any]) -> list[Any]:
    """A tool answer for the agent: ``["result", value]``, or, when the toolbox left its rows as text
    (:attr:`Toolbox.unrendered`), ``["result", value less those rows, field, their canonical JSON]``: the agent's
    process decodes the rows from the very text the trajectory records."""
    field = toolbox.unrendered
    if field is None or toolbox.rows_json is None:
        return ["result", result]
    return ["result", {k: v for k, v in result.items() if k != field}, field, toolbox.rows_json]


def _attempt(msg: list[Any]) -> EgressAttempt:
    return EgressAttempt(_text(msg[1], 100) or "?", _opt_text(msg[2]), _opt_text(msg[3]))


def _text(value: object, cap: int) -> str:
    return value[:cap] if isinstance(value, str) else ""


def _opt_text(value: object) -> str | None:
    return value[:1000] if isinstance(value, str) else None
