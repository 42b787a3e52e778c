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
import os
import threading
import time
from functools import cache
from importlib import resources
from pathlib import Path

from evalkit.pit._jail_netscope import network_of
from evalkit.pit._jail_process import AgentProcess
from evalkit.pit._jail_types import AgentError, AgentJailError, AgentLimits, AgentWall, EgressStop
from evalkit.pit._recipe import Recipe, jail_roots, site_dirs
from evalkit.wall import (
    DEFAULT_DENY,
    WallError,
    WallPolicy,
    Zygote,
    refused_layers,
    release_uid_block,
    uid_block,
)

__all__ = ["AgentError", "AgentJail", "AgentJailError", "AgentLimits", "AgentProcess", "AgentWall", "EgressStop"]


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
            unix_sockets=True,  # an event loop's wake-up pair; nothing of the host's to reach (see docs)
            single_process=True,  # threads, never processes
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
        netns, interfaces, routes = network_of(zygote.pid, inside_bwrap=bwrap)
        filesystem = (
            "read-only root of the interpreter, its site-packages, evalkit and the agent's own code only; "
            f"private /job tmpfs ({self.limits.disk_bytes} bytes) per process"
            if bwrap and namespaces
            else "NOT isolated: the host's filesystem is visible to the agent (bubblewrap or namespaces unavailable)"
        )
        processes = (
            "own pid, mount and IPC namespaces and /proc; a fresh process per cell and for the probe "
            f"(threads up to {self.limits.threads}, ending with it; no process of its own)"
            if namespaces
            else "NOT isolated: no pid namespace of its own (a fresh process per cell all the same)"
        )
        user = (
            "own uid per process (no other running job shares it)"
            if root
            else "NOT separated: the harness's own uid (not root)"
        )
        seccomp_text = (
            f"libseccomp filter: {len(zygote.denied)} syscalls refused, socket() of network families kills the process "
            + ("(AF_UNIX allowed, in a network namespace per process)" if bwrap and namespaces else "(AF_UNIX: socket pairs only)")
            if seccomp
            else "NOT in effect: " + ("refused by EVALKIT_WALL_WITHOUT" if "seccomp" in refused_layers() else "libseccomp not found")
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
