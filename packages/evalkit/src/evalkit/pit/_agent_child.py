"""The PIT agent's payload: what runs inside the wall for one cell (or the probe). Imports the standard library;
evalkit's agent adapters come from the zygote's warm-up (code only: the harness's data never enters the zygote).

This file is not imported by evalkit: :mod:`evalkit.pit._jail` appends its source to the wall's zygote (after the
tagged-JSON codec), which calls ``PAYLOADS["agent"](settings, args)`` in a freshly jailed process (see
:mod:`evalkit.wall._zygote_child`). fds: 1 and 2 the output pipe (captured by the harness, capped), 3 from the
harness, 4 to the harness. Messages:

harness to agent (length-prefixed ``marshal``: the harness is trusted, and it is faster than JSON)
    ``["load", recipe, options]`` once (how to build the agent, see :mod:`evalkit.pit._recipe`; the network
    policy); then per session ``["session", prompt, context]``; and the answers to the agent's requests:
    ``["result", value]`` (or ``["result", value, field, text]``: the answer's ``field``, its rows, as canonical
    JSON text), ``["completion", json]``, ``["raised", type, message]``.
agent to harness (one JSON message a line: the harness reads it as untrusted input, with caps)
    ``["ready"]`` or ``["load_error", type, message]``; during a session ``["tool", name, args]``,
    ``["complete", model_id, request]``, ``["egress", kind, target, call_site]``; and to end it
    ``["reply", picks, text]`` or ``["error", type, message]``.

Before any agent code runs the payload installs two recorders of network attempts: evalkit's socket guard
(patched entry points) and an audit hook (which Python cannot remove, and which sees the C functions however
they are reached). Each attempt is written to the harness at once; under policy ``abort`` the process then ends
(exit code 86), so no ``except`` can swallow it. Neither recorder is the boundary: the kernel is. ``socket()``
of any family but ``AF_UNIX`` kills the process (seccomp; the harness sees SIGSYS and records it), and the process
is in a network namespace with no route. ``AF_UNIX`` sockets and socket pairs work (an event loop's wake-up pair)
and are not attempts: in the jail's own network namespace, with a read-only root and a private ``/job``, they
reach nothing of the host's.

Threads may run (the kernel refuses a process of their own): one lock serialises the pipe to the harness, so a
request and its answer are never split by another thread's message, and a session's tools refuse every call once
the agent has replied (a thread left running cannot speak in a later session's name, and every thread ends with
the process at the cell's end). The model gateway is also offered as an OpenAI-compatible endpoint (see
:mod:`evalkit.pit._endpoint`), answered over the same pipe.
"""

# ruff: noqa: S110
# pyright: basic

from __future__ import annotations

import base64
import builtins
import contextlib
import importlib
import json
import marshal
import os
import sys
import threading
import types
from typing import Any

_AGENT_IN, _AGENT_OUT = 3, 4
_AGENT_EXIT_EGRESS = 86  # the recorder ended the process after an attempt (policy abort)
_AGENT_EXIT_TAMPERED = 87  # the recorder's channel to the harness was replaced: ended without a word
_AGENT_EXIT_CPU = 88  # the soft CPU limit was reached (SIGXCPU)
_AGENT_MAX_ERROR = 2000
# Numeric libraries read these when first imported: one process, one thread (RLIMIT_NPROC is 1).
_AGENT_THREAD_ENV = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
    "POLARS_MAX_THREADS": "1",
    "RAYON_NUM_THREADS": "1",
}
_AGENT_WARM: tuple[str, ...] = ("evalkit.pit._agents",)  # set by the harness (see _recipe): "module[:name]"
_AGENT_PIPE = threading.RLock()  # every message to the harness, and each request with its answer, under it


class _AgentFrames:
    """The harness's messages: an 8-byte length, then the message in ``marshal`` form (the harness is trusted and
    runs the same interpreter; marshal is about three times faster than JSON both ways)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = bytearray()
        self.read = os.read

    def _fill(self, n: int) -> bool:
        while len(self.buf) < n:
            chunk = self.read(self.fd, max(1 << 20, n - len(self.buf)))
            if not chunk:
                return False
            self.buf += chunk
        return True

    def next(self) -> Any:
        """The next message, or None at end of file."""
        if not self._fill(8):
            return None
        size = int.from_bytes(self.buf[:8], "little")
        if not self._fill(8 + size):
            return None
        msg = marshal.loads(bytes(self.buf[8 : 8 + size]))  # noqa: S302 - written by the harness
        del self.buf[: 8 + size]
        return msg


def _agent_write(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


def _agent_send(msg: list[object]) -> None:
    text = json.dumps(msg, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    try:
        line = text.encode() + b"\n"
    except UnicodeEncodeError:
        # a lone surrogate (in what the agent raised, say): sent escaped, for the harness to judge
        line = json.dumps(msg, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode() + b"\n"
    with _AGENT_PIPE:
        _agent_write(_AGENT_OUT, line)


def _agent_error_text(exc: BaseException) -> tuple[str, str]:
    try:
        name = type(exc).__name__
        name = name if type(name) is str else "?"
    except BaseException:
        name = "?"
    try:
        msg = str(exc)
        msg = msg[:_AGENT_MAX_ERROR] if type(msg) is str else ""
    except BaseException:
        msg = "<unprintable>"
    return name, msg


# --- the recorders ----------------------------------------------------------------------------------------------

_AGENT_AUDITED = {
    "socket.__new__": "socket",
    "socket.connect": "connect",
    "socket.bind": "bind",
    "socket.sendto": "sendto",
    "socket.sendmsg": "sendto",
    "socket.getaddrinfo": "getaddrinfo",
    "socket.getnameinfo": "getnameinfo",
    "socket.gethostbyname": "gethostbyname",
    "socket.gethostbyaddr": "gethostbyaddr",
    "socket.sethostname": "sethostname",
}
# The C library's network entry points, looked up through ctypes (``ctypes.dlsym``): an attempt to go around both
# Python-level recorders, recorded as such.
_AGENT_NET_SYMBOLS = frozenset(
    {
        "socket",
        "socketpair",
        "connect",
        "bind",
        "listen",
        "accept",
        "accept4",
        "sendto",
        "sendmsg",
        "sendmmsg",
        "getaddrinfo",
        "getnameinfo",
        "gethostbyname",
        "gethostbyname2",
        "gethostbyname_r",
        "gethostbyname2_r",
        "gethostbyaddr",
        "gethostbyaddr_r",
        "res_query",
        "res_search",
        "res_nquery",
        "res_nsearch",
        "__res_query",
    }
)


def _agent_install_recorders(policy: str) -> None:
    """The socket guard and an audit hook, both reporting to the harness the moment an attempt is made."""
    import socket

    from evalkit.pit import _guard

    st = os.fstat(_AGENT_OUT)
    ident = (st.st_dev, st.st_ino)
    fstat, write, exit_now, dumps = os.fstat, os.write, os._exit, json.dumps
    abort = policy == "abort"
    pipe = _AGENT_PIPE

    def report(kind: str, target: str | None, call_site: str | None) -> None:
        try:
            now = fstat(_AGENT_OUT)
            intact = (now.st_dev, now.st_ino) == ident
        except BaseException:
            intact = False
        if not intact:
            exit_now(_AGENT_EXIT_TAMPERED)
        try:  # ASCII with escapes: total over any text (a lone surrogate in a target must not leave it unsent)
            line = dumps(["egress", kind, target, call_site], ensure_ascii=True).encode() + b"\n"
        except BaseException:
            # json patched by the agent: the attempt is reported all the same, without details
            line = b'["egress","socket",null,null]\n'
        try:
            with pipe:
                while line:
                    line = line[write(_AGENT_OUT, line) :]
        except BaseException:
            exit_now(_AGENT_EXIT_EGRESS)
        if abort:
            exit_now(_AGENT_EXIT_EGRESS)

    def on_attempt(attempt: object) -> None:
        report(attempt.kind, attempt.target, attempt.call_site)  # type: ignore[attr-defined]

    guard = _guard.NetworkGuard(policy, on_attempt=on_attempt)
    guard.install()
    blocked = _guard.NetworkBlockedError
    call_site, target_of = _guard._call_site, _guard._target
    audited = _AGENT_AUDITED
    family_name = socket.AddressFamily

    net_symbols = _AGENT_NET_SYMBOLS
    unix = socket.AF_UNIX
    raw_family = socket.socket.__mro__[1].family  # _socket.socket's own getter: no Python property to override
    on_socket = ("socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg")

    def local(event: str, args: list[object]) -> bool:
        """An AF_UNIX socket's creation, connect, bind or send: not an attempt (nothing to reach)."""
        if event == "socket.__new__":
            return len(args) > 1 and args[1] == unix
        if event in on_socket and args:
            try:
                return raw_family.__get__(args[0]) == unix
            except BaseException:
                return False
        return False

    def site() -> str | None:
        try:
            return call_site()
        except BaseException:
            # a detail the agent can spoil (its code's file name, harness globals it patched)
            return None

    def hook(event: str, raw: tuple[object, ...]) -> None:
        args: list[object] = list(raw)
        if event == "ctypes.dlsym" and len(args) > 1 and args[1] in net_symbols:
            report("ctypes_dlsym", str(args[1]), site())
            raise blocked(f"network access blocked inside the evalkit agent jail (ctypes {args[1]})")
        kind = audited.get(event) if event[:7] == "socket." else None
        if kind is None or local(event, args):
            return
        try:  # details only: whatever spoils them, the attempt is reported
            if event == "socket.__new__":
                family = args[1]
                try:
                    target = "family=" + family_name(family).name  # type: ignore[arg-type]
                except BaseException:
                    target = f"family={family}"
            elif event == "socket.getaddrinfo":
                target = f"{args[0]}:{args[1]}"
            elif event in ("socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg"):
                target = target_of(args[1] if len(args) > 1 else None)
            else:
                target = target_of(args[0] if args else None)
        except BaseException:
            target = None
        report(kind, target, site())
        raise blocked(
            f"network access blocked inside the evalkit agent jail ({kind} {target or ''})".rstrip()
        )

    sys.addaudithook(hook)


# --- building the agent from its recipe --------------------------------------------------------------------------


def _agent_import(module: str, qualname: str) -> object:
    obj: object = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _agent_rebuild(recipe: dict[str, object]) -> object:
    """The object a recipe describes: a module, an imported name, data, or a function rebuilt from its code."""
    functions: list[dict[str, Any]] = recipe["functions"]  # type: ignore[assignment]
    tables: list[dict[str, Any]] = recipe["globals"]  # type: ignore[assignment]
    spaces = [{"__name__": str(t["module"]), "__builtins__": builtins} for t in tables]
    made: list[types.FunctionType] = []
    cells: list[list[types.CellType] | None] = []
    for f in functions:
        code = marshal.loads(base64.b64decode(str(f["code"])))  # noqa: S302 - the harness's own copy of the agent's code
        closure = f.get("closure")
        cell_list = [types.CellType() for _ in closure] if isinstance(closure, list) else None  # type: ignore[attr-defined]
        fn = types.FunctionType(
            code, spaces[int(f["globals"])], str(f["name"]), None, tuple(cell_list) if cell_list else None
        )  # type: ignore[arg-type]
        fn.__qualname__ = str(f["qualname"])
        fn.__module__ = str(f["module"])
        made.append(fn)
        cells.append(cell_list)

    def value(ref: list[object]) -> object:
        kind = ref[0]
        if kind == "data":
            return tagged_decode(str(ref[1]), max_bytes=1 << 30)  # type: ignore[name-defined]  # noqa: F821
        if kind == "module":
            return importlib.import_module(str(ref[1]))
        if kind == "import":
            return _agent_import(str(ref[1]), str(ref[2]))
        if kind == "function":
            return made[int(ref[1])]  # type: ignore[arg-type]
        if kind == "dict":
            return {value(k): value(v) for k, v in ref[1]}  # type: ignore[union-attr]
        if kind in ("list", "tuple", "set", "frozenset"):
            items = [value(v) for v in ref[1]]  # type: ignore[union-attr]
            return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[kind](items)  # type: ignore[index]
        raise ValueError(f"unknown recipe reference {kind!r}")

    for table, space in zip(tables, spaces, strict=True):
        for name, ref in table["names"].items():  # type: ignore[union-attr]
            space[name] = value(ref)
    for f, fn, cell_list in zip(functions, made, cells, strict=True):
        if f.get("defaults") is not None:
            fn.__defaults__ = value(f["defaults"])  # type: ignore[arg-type]
        if f.get("kwdefaults") is not None:
            fn.__kwdefaults__ = value(f["kwdefaults"])  # type: ignore[arg-type]
        for cell, ref in zip(cell_list or (), f.get("closure") or (), strict=True):  # type: ignore[arg-type]
            if ref is not None:
                cell.cell_contents = value(ref)  # type: ignore[arg-type]
    return value(recipe["root"])  # type: ignore[arg-type]


def _agent_build(spec: dict[str, object]) -> object:
    """The agent a spec names, built here, inside the jail, with evalkit's own adapters."""
    from evalkit.pit import _agent_base, _agents

    kind = spec["kind"]
    name = str(spec.get("name") or "")
    if kind == "stub":
        return _agents.stub_agent
    if kind == "model":
        from evalkit.pit._model_agent import from_model

        opts: dict[str, object] = spec["options"]  # type: ignore[assignment]
        return from_model(str(spec["model_id"]), **opts)  # type: ignore[arg-type]
    if kind == "inspect":
        from evalkit.pit._inspect import build_inspect_agent

        return build_inspect_agent(str(spec["solver"]), spec["options"])  # type: ignore[arg-type]
    target = _agent_rebuild(spec["target"])  # type: ignore[arg-type]
    if kind == "tool_loop":
        opts = spec["options"]  # type: ignore[assignment]
        return _agents.from_tool_loop(target, name=name, **opts)  # type: ignore[arg-type]
    if isinstance(target, _agent_base._FunctionAgent):
        return target
    if not callable(target):
        raise TypeError(f"{spec.get('where') or 'the agent'} is not callable (a {type(target).__name__})")
    return _agents.from_callable(target, name=name)  # type: ignore[arg-type]


# --- the tools, as the agent sees them ---------------------------------------------------------------------------


class _AgentGone(BaseException):
    """The harness closed the channel (it ends this process next)."""


class AgentTools:
    """The agent's tools inside the jail. Every call is a request to the harness, which answers it from its own
    toolbox and records it; nothing here holds a row the harness has not sent."""

    def __init__(self, context: dict[str, object], reader: _AgentFrames) -> None:
        self.arm = str(context["arm"])
        self.clock = str(context["clock"])
        self.session_date = str(context["session_date"])
        self.known_at = str(context["known_at"])
        self._reader = reader
        self._open = True  # until the agent replies: a call after that is refused, never sent

    def __repr__(self) -> str:
        return f"AgentTools(arm={self.arm!r}, clock={self.clock!r}, session_date={self.session_date!r})"

    def _ask(self, msg: list[object]) -> list[object]:
        try:
            line = json.dumps(msg, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode() + b"\n"
        except (TypeError, ValueError, RecursionError) as exc:
            raise TypeError(f"a tool call's arguments must be JSON values: {exc}") from None
        with _AGENT_PIPE:  # one request, then its answer: no other thread's message between them
            if not self._open:
                raise RuntimeError(
                    f"the session of {self.session_date} has ended: its tools answer no more calls"
                )
            _agent_write(_AGENT_OUT, line)
            reply = self._reader.next()
        if reply is None:
            raise _AgentGone
        return reply

    def _close(self) -> None:
        with _AGENT_PIPE:
            self._open = False

    def _complete_raw(self, model_id: str, request_json: dict[str, object]) -> list[object]:
        """A model call as the endpoint makes it: the harness's answer as it came."""
        return self._ask(["complete", str(model_id), request_json])

    def _tool(self, name: str, args: dict[str, object]) -> dict[str, object]:
        reply = self._ask(["tool", name, args])
        result: dict[str, object] = reply[1]  # type: ignore[assignment]
        if len(reply) == 4:  # the rows as the canonical JSON the trajectory records: the same rows, decoded here
            result[str(reply[2])] = json.loads(str(reply[3]))
        return result

    def pit_list(self, limit: int = 20, offset: int = 0, form: str | None = None) -> dict[str, object]:
        return self._tool("pit_list", {"limit": limit, "offset": offset, "form": form})

    def pit_search(self, query: str, limit: int = 20) -> dict[str, object]:
        return self._tool("pit_search", {"query": query, "limit": limit})

    def pit_read(self, row_key: str) -> dict[str, object]:
        return self._tool("pit_read", {"row_key": row_key})

    def pit_coverage(self) -> dict[str, object]:
        return self._tool("pit_coverage", {})

    def call(self, name: str, arguments: dict[str, object]) -> dict[str, object]:
        if not isinstance(name, str):
            raise TypeError("a tool's name must be a string")
        return self._tool(name, dict(arguments))

    def complete(self, model_id: str, request: object) -> object:
        """Call a model through the harness's gateway (outside this jail); the harness records the call."""
        from evalkit.pit._gateway import GatewayError
        from evalkit_core.models import completion_from_json, request_to_json

        reply = self._ask(["complete", str(model_id), request_to_json(request)])  # type: ignore[arg-type]
        if reply[0] == "completion":
            return completion_from_json(reply[1])  # type: ignore[arg-type]
        raise GatewayError(str(reply[2]) if len(reply) > 2 else "the model call failed")


# --- the payload ----------------------------------------------------------------------------------------------------


def _agent_main(_settings: dict[str, object], _args: dict[str, object]) -> None:
    import resource
    import signal

    exit_now = os._exit
    # pid 1 of a pid namespace ignores signals it has no handler for (SIGXCPU too): end with a code the harness
    # reads as the CPU limit, a second before the hard limit's SIGKILL
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY and hard > 1:
        signal.signal(signal.SIGXCPU, lambda *_: exit_now(_AGENT_EXIT_CPU))
        resource.setrlimit(resource.RLIMIT_CPU, (hard - 1, hard))
    os.environ.update(_AGENT_THREAD_ENV)
    reader = _AgentFrames(_AGENT_IN)
    first = reader.next()
    if first is None:
        exit_now(0)
    _, spec, options = first
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    for path in reversed(options.get("paths") or []):
        sys.path.insert(0, str(path))
    _agent_install_recorders(str(options["network_policy"]))
    from evalkit.pit import _sdk_transport
    from evalkit.pit._agents import AgentReply
    from evalkit.pit._endpoint import ENDPOINT_ENV

    os.environ.update(ENDPOINT_ENV)  # placeholders: the SDKs reach the endpoint, the gateway holds the keys
    _sdk_transport.install()

    try:
        agent = _agent_build(spec)
    except BaseException as exc:
        _agent_send(["load_error", *_agent_error_text(exc)])
        exit_now(0)
    _agent_send(["ready"])
    del first, spec
    while True:
        msg = reader.next()
        if msg is None:
            exit_now(0)
        if msg[0] != "session":
            exit_now(0)
        tools = AgentTools(msg[2], reader)
        _sdk_transport.set_session(tools._complete_raw)
        out: list[object]
        try:
            out = _agent_reply(agent(msg[1], tools), AgentReply)  # type: ignore[operator]
        except _AgentGone:
            exit_now(0)
        except BaseException as exc:  # everything the agent raises is its error, reported with its type
            out = ["error", *_agent_error_text(exc)]
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
        with _AGENT_PIPE:  # no request of another thread is in flight; none is sent in this session's name after
            tools._close()
            _sdk_transport.set_session(None)
            _agent_send(out)


def _agent_reply(reply: object, reply_type: type) -> list[object]:
    """The reply message for what the agent returned (built by evalkit's adapters: an AgentReply)."""
    if not isinstance(reply, reply_type):
        raise TypeError(f"the agent returned {type(reply).__name__}, not an AgentReply")
    picks = list(reply.picks)  # type: ignore[attr-defined]
    try:  # row_keys; anything else that is data goes to the harness, which refuses it as an unknown key
        json.dumps(picks, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise TypeError(f"picks must be row_keys (strings): {exc}") from None
    text = reply.text  # type: ignore[attr-defined]
    if text is not None and type(text) is not str:
        raise TypeError(f"the reply's text must be a string or None, not {type(text).__name__}")
    return ["reply", picks, text]


def _agent_warm_up() -> None:
    """Run once in the zygote: the site directories' .pth files, then the modules every agent process needs."""
    import site

    for path in list(sys.path):
        if path.endswith("site-packages"):
            site.addsitedir(path)
    os.environ.update(_AGENT_THREAD_ENV)
    for item in _AGENT_WARM:
        module, _, name = item.partition(":")
        try:
            loaded = importlib.import_module(module)
            if name:
                getattr(loaded, name, None)
        except Exception:
            pass


PAYLOADS = {"agent": _agent_main, "__warm__": (_agent_warm_up,)}
