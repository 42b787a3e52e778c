"""The agent's jail: the PIT agent runs behind the wall (:mod:`evalkit.wall._zygote`), a fresh process per cell.

One zygote per run holds a read-only root of only what agent code needs to import: the interpreter's prefix,
this environment's site-packages, evalkit's package directories and the agent's own module file or package
directory (see :mod:`evalkit.pit._recipe`); never the release, the prices, the config, the caches, the store or
the working directory. For each cell (and once for the probe) the zygote clones a jailed process (own pid, mount
and IPC namespaces, a network namespace without routes, a uid of its own, rlimits, seccomp) that builds the agent
from its recipe and then answers one session at a time over a pipe pair. The agent holds a proxy of the tools;
every tool call and model call is a request the harness answers from its own toolbox and gateway and records.

The harness enforces the wall clock of every session (only the agent's own time counts: time the harness
spends answering a request does not); the kernel enforces CPU time per process and memory. An agent that
hangs, dies or garbles the protocol fails with the cause, never a traceback.

What the machine cannot give is measured and reported (:class:`AgentWall`), never assumed: a zygote that cannot
start with every layer is started again without the layer that failed, and the network scope is read from the
kernel (the zygote's network namespace and its routes, seen from the host).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import marshal
import os
import select
import signal
import threading
import time
from collections.abc import Callable
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, cast

import attrs

from evalkit.pit._agents import AgentReply
from evalkit.pit._bounds import SMALL_MESSAGE_BYTES
from evalkit.pit._guard import EgressAttempt
from evalkit.pit._recipe import Recipe, jail_roots, site_dirs
from evalkit.pit._toolbox import Toolbox
from evalkit.wall import (
    DEFAULT_DENY,
    Spawned,
    WallError,
    WallPolicy,
    Zygote,
    describe_status,
    release_uid_block,
    uid_block,
)
from evalkit_core import EvalkitError

__all__ = ["AgentError", "AgentJail", "AgentLimits", "AgentProcess", "AgentWall", "EgressStop"]

_EXIT_EGRESS = 86
_EXIT_TAMPERED = 87
_EXIT_CPU = 88
_SETUP_FAILED = 70


@attrs.frozen
class AgentLimits:
    """Per agent process (one per cell, one for the probe): CPU seconds and memory (rlimits, kernel-enforced),
    the wall clock of one session and of loading the agent (host-enforced; the harness's own time answering
    requests is not counted, so a session also has a cap on its requests), the private ``/job`` tmpfs, open
    files, and how much output is kept."""

    cpu_seconds: int = 600
    session_seconds: float = 300.0
    load_seconds: float = 120.0
    memory_bytes: int = 4 << 30
    disk_bytes: int = 64 << 20
    file_bytes: int = 16 << 20
    open_files: int = 256
    output_bytes: int = 64 << 10
    message_bytes: int = 64 << 20
    session_requests: int = 10_000

    def rlimits(self) -> dict[str, int]:
        # nproc 1: one process, one thread; every process of the job is this one, so its end is the job's end
        return {
            "core": 0,
            "cpu": self.cpu_seconds
            + 1,  # the agent process ends itself at cpu_seconds (SIGXCPU), the kernel 1 s later
            "as": self.memory_bytes,
            "fsize": self.file_bytes,
            "nofile": self.open_files,
            "nproc": 1,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "cpu_seconds_per_process": self.cpu_seconds,
            "session_seconds": self.session_seconds,
            "load_seconds": self.load_seconds,
            "memory_bytes": self.memory_bytes,
            "disk_bytes": self.disk_bytes,
            "file_bytes": self.file_bytes,
            "open_files": self.open_files,
            "processes": 1,
            "session_requests": self.session_requests,
        }


@attrs.frozen
class AgentWall:
    """The layers in effect around the agent, measured when the jail started. Sentences for people; ``full`` is
    True only when every layer the design asks for is in place; ``network`` is what the receipt's
    ``network.scope`` says."""

    filesystem: str
    processes: str
    user: str
    seccomp: str
    network: str
    full: bool
    own_network_namespace: bool
    weaker: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "full": self.full,
            "filesystem": self.filesystem,
            "processes": self.processes,
            "user": self.user,
            "seccomp": self.seccomp,
            "network": self.network,
            "weaker": list(self.weaker),
        }

    def line(self) -> str:
        """One line for the CLI."""
        if self.full:
            return "full: own read-only root, pid/mount/IPC/network namespaces, own uid, seccomp; a fresh process per cell"
        return "WEAKER than designed: " + "; ".join(self.weaker)


class AgentError(Exception):
    """The agent failed a session (raised, returned garbage, hung, died, broke the protocol); the cause is kept."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(f"{error_type}: {message}")
        self.error_type = error_type
        self.message = message


class EgressStop(Exception):  # noqa: N818 - control flow: the run must stop at this attempt
    """A network attempt under policy ``abort``, or one the kernel ended the agent for: the run stops.
    ``attempts`` are the ones still to record (those reported as they happened are recorded already)."""

    def __init__(self, *attempts: EgressAttempt) -> None:
        super().__init__("network egress attempt")
        self.attempts = list(attempts)


@cache
def _payload_source() -> str:
    return resources.files("evalkit.pit").joinpath("_agent_child.py").read_text(encoding="utf-8")


def _monotonic() -> float:
    return time.monotonic()


class AgentJail:
    """One zygote for one run; :meth:`process` makes a fresh jailed agent process. Used by one thread."""

    def __init__(self, recipe: Recipe, *, network_policy: str, limits: AgentLimits | None = None) -> None:
        self.recipe = recipe
        self.network_policy = network_policy
        self.limits = limits or AgentLimits()
        self._uid_base = uid_block()
        self._block_released = False
        self._uid_next = 0
        self._zygote: Zygote | None = None
        self._wall: AgentWall | None = None
        self._error: BaseException | None = None
        self._starter: threading.Thread | None = None
        self._first: AgentProcess | None = None
        self._first_error: AgentError | EgressStop | None = None
        self.agent_seconds = 0.0
        self.start_seconds = 0.0
        self.spawn_seconds = 0.0
        self.processes = 0

    # -- start ---------------------------------------------------------------------------------------------------

    def _policy(self) -> WallPolicy:
        roots = jail_roots()
        import evalkit_core

        # the directories holding evalkit's packages (an editable install's src/), so they import without .pth
        parents = [str(Path(__file__).resolve().parents[2]), str(Path(evalkit_core.__file__ or "").resolve().parent.parent)]
        # -S: this environment's site directories (and their .pth files) are added by the payload, not the
        # interpreter's own site-packages
        return WallPolicy(
            ro_paths=(*roots, *self.recipe.binds),
            deny=DEFAULT_DENY,
            python_flags=("-S", "-P"),
            pythonpath=tuple(dict.fromkeys((*site_dirs(), *parents))),
            kill_network_sockets=True,
        )

    def _source(self) -> str:
        # the modules every agent process gets from the zygote's memory instead of importing them again
        return _payload_source() + f"\n_AGENT_WARM = {tuple(self.recipe.warm)!r}\n"

    def start(self) -> None:
        """Start the zygote and prove it with a canary (the stub, loaded); without a layer the machine cannot
        give, try again and record what is missing."""
        t0 = _monotonic()
        # each layer dropped is measured and reported by _measure, not assumed
        attempts: list[dict[str, bool]] = [{}, {"namespaces": False}, {"bwrap": False, "namespaces": False}]
        last: BaseException | None = None
        for kwargs in attempts:
            zygote = Zygote(self._policy(), self._source(), label="agent", **kwargs)
            try:
                zygote.start()
                self._zygote = zygote
                self._canary()
            except (WallError, AgentError, OSError) as exc:
                last = exc
                zygote.stop()
                self._zygote = None
                continue
            self._wall = self._measure(zygote)
            self.start_seconds = _monotonic() - t0
            try:  # the first cell's process, loaded while the harness still prepares the run
                self._first = AgentProcess(self, self.recipe)
            except (AgentError, EgressStop) as exc:
                self._first_error = exc
            except WallError:  # tried again, and reported, when the run asks for it
                self._first = None
            return
        raise AgentJailError(f"the agent's wall could not start on this machine: {last}")

    def start_background(self) -> None:
        """Start the zygote on a thread of its own, so that its start overlaps the harness's own loading."""

        def go() -> None:
            try:
                self.start()
            except BaseException as exc:  # handed to the thread that waits in ready()
                self._error = exc

        self._starter = threading.Thread(target=go, name="evalkit-agent-jail", daemon=True)
        self._starter.start()

    def ready(self) -> None:
        if self._starter is not None:
            self._starter.join()
            self._starter = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        if self._zygote is None:
            self.start()

    def _canary(self) -> None:
        canary = AgentProcess(self, Recipe(spec={"kind": "stub", "name": "stub"}))
        canary.close()

    @property
    def wall(self) -> AgentWall:
        self.ready()
        assert self._wall is not None
        return self._wall

    def _measure(self, zygote: Zygote) -> AgentWall:
        root = os.geteuid() == 0
        bwrap = zygote.uses_bwrap
        namespaces = zygote.namespaces
        seccomp = zygote.seccomp_library is not None
        netns, interfaces, routes = _network_of(zygote.pid, inside_bwrap=bwrap)
        filesystem = (
            "read-only root of the interpreter, its site-packages, evalkit and the agent's own code only; "
            f"private /job tmpfs ({self.limits.disk_bytes} bytes) per process"
            if bwrap and namespaces
            else "NOT isolated: the host's filesystem is visible to the agent (bubblewrap or namespaces unavailable)"
        )
        processes = (
            "own pid, mount and IPC namespaces and /proc; a fresh process per cell and for the probe"
            if namespaces
            else "NOT isolated: no pid namespace of its own (a fresh process per cell all the same)"
        )
        user = (
            "own uid per process (no other running job shares it)"
            if root
            else "NOT separated: the harness's own uid (not root)"
        )
        seccomp_text = (
            f"libseccomp filter: {len(zygote.denied)} syscalls refused, socket() of network families kills the process"
            if seccomp
            else "NOT in effect: libseccomp not found"
        )
        if netns and routes == 0:
            network = f"network namespace without routes (interfaces: {', '.join(interfaces) or 'none'}; measured from the host)"
        elif netns:
            network = f"own network namespace with {routes} route(s) (interfaces: {', '.join(interfaces)}; measured from the host)"
        else:
            network = (
                "NOT isolated: the agent shares the harness's network namespace (measured from the host)"
            )
        weaker = [s for s in (filesystem, processes, user, seccomp_text, network) if "NOT" in s]
        if netns and routes:
            weaker.append(network)
        full = not weaker
        return AgentWall(
            filesystem=filesystem,
            processes=processes,
            user=user,
            seccomp=seccomp_text,
            network=network,
            full=full,
            own_network_namespace=netns,
            weaker=tuple(weaker),
        )

    # -- processes -----------------------------------------------------------------------------------------------

    def next_uid(self) -> int:
        uid = self._uid_base + self._uid_next % 1024
        self._uid_next += 1
        return uid

    @property
    def zygote(self) -> Zygote:
        """The running zygote (call :meth:`ready` first)."""
        if self._zygote is None:
            raise AgentJailError("the agent's jail is not running")
        return self._zygote

    def process(self) -> AgentProcess:
        """A fresh jailed process with the agent built in it; AgentError if it could not be built."""
        self.ready()
        first, self._first = self._first, None
        if first is not None:
            return first
        if self._first_error is not None:
            error, self._first_error = self._first_error, None
            raise error
        try:
            return AgentProcess(self, self.recipe)
        except WallError as exc:  # the wall itself, never the agent's doing
            raise AgentJailError(f"the agent's wall failed during the run: {exc}") from None

    def close(self) -> None:
        with contextlib.suppress(AgentJailError, WallError, OSError):
            self.ready()
        if self._first is not None:
            self._first.close()
            self._first = None
        if self._zygote is not None:
            with contextlib.suppress(OSError):
                self._zygote.settle(timeout=5.0)
            self._zygote.stop()
            self._zygote = None
        if not self._block_released:  # nothing of this jail runs any more: its uids may serve another
            self._block_released = True
            release_uid_block(self._uid_base)


class AgentJailError(EvalkitError):
    """The wall around the agent could not be started at all."""


class AgentProcess:
    """One jailed agent process: loads the agent, then answers sessions until it is closed."""

    def __init__(self, jail: AgentJail, recipe: Recipe) -> None:
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
            raise AgentError(_text(msg[1], 100) or "Error", _text(msg[2], 2000))
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
                self._send(["result", toolbox.call(msg[1], cast("dict[str, Any]", msg[2]))])
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
                raise AgentError(_text(msg[1], 100) or "Error", _text(msg[2], 2000))
            else:
                raise self._protocol(f"a message the protocol does not know ({_text(kind, 40)!r})")

    def _complete(self, toolbox: Toolbox, model_id: str, raw: dict[str, Any]) -> list[Any]:
        from evalkit_core.models import completion_to_json, request_from_json

        try:
            request = request_from_json(raw)
        except Exception as exc:  # any request the agent sends (ConfigError, AttributeError, RecursionError...)
            return ["raised", "GatewayError", f"malformed model request: {type(exc).__name__}: {str(exc)[:2000]}"]
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


def _attempt(msg: list[Any]) -> EgressAttempt:
    return EgressAttempt(_text(msg[1], 100) or "?", _opt_text(msg[2]), _opt_text(msg[3]))


def _text(value: object, cap: int) -> str:
    return value[:cap] if isinstance(value, str) else ""


def _opt_text(value: object) -> str | None:
    return value[:1000] if isinstance(value, str) else None


def _network_of(pid: int | None, *, inside_bwrap: bool) -> tuple[bool, list[str], int]:
    """(own network namespace?, its interfaces, its routes not on loopback) of the zygote started as ``pid``,
    read from the host's /proc and compared with this process's own namespace. Inside bubblewrap the zygote is a
    descendant of ``pid`` (bubblewrap's outer process stays in the host's namespaces)."""
    if pid is None:
        return False, [], 0
    mine = _netns("self")
    candidates = _descendants(pid) if inside_bwrap else [pid]
    target, theirs = pid, None
    for c in candidates:
        theirs = _netns(str(c))
        if theirs is not None:
            target = c
            break
    if theirs is None or theirs == mine:
        return False, [], 0
    interfaces: list[str] = []
    routes = 0
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{target}/net/dev").read_text().splitlines()[2:]:
            interfaces.append(line.split(":", 1)[0].strip())
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{target}/net/route").read_text().splitlines()[1:]:
            if line.split() and line.split()[0] != "lo":
                routes += 1
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{target}/net/ipv6_route").read_text().splitlines():
            if line.split() and line.split()[-1] != "lo":
                routes += 1
    return True, sorted(interfaces), routes


def _netns(pid: str) -> str | None:
    try:
        return str(Path(f"/proc/{pid}/ns/net").readlink())
    except OSError:
        return None


def _descendants(pid: int) -> list[int]:
    """Every descendant of ``pid``, parents before children (from /proc/*/stat)."""
    parent_of: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1:
            parent_of[int(entry.name)] = int(fields[1])
    out: list[int] = []
    frontier = [pid]
    while frontier:
        nxt = [c for c, p in parent_of.items() if p in frontier]
        out += nxt
        frontier = nxt
    return out
