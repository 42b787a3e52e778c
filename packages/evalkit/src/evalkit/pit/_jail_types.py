"""The agent jail's values: its limits, the wall it measured, and how an agent process fails (kept apart from
:mod:`evalkit.pit._jail` and :mod:`evalkit.pit._jail_process`, which both use them)."""

from __future__ import annotations

from typing import Any

import attrs

from evalkit.pit._guard import EgressAttempt
from evalkit_core import EvalkitError

__all__ = ["AgentError", "AgentJailError", "AgentLimits", "AgentWall", "EgressStop"]

_EXIT_EGRESS = 86
_EXIT_TAMPERED = 87
_EXIT_CPU = 88
_SETUP_FAILED = 70


@attrs.frozen
class AgentLimits:
    """Per agent process (one per cell, one for the probe): CPU seconds, memory and threads (rlimits, kernel-enforced),
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
    threads: int = 64

    def rlimits(self) -> dict[str, int]:
        # nproc counts the threads of the job's own uid: one process (seccomp refuses fork, vfork and a clone
        # that is not a thread) with at most ``threads`` threads, which all end with it (the job's end)
        return {
            "core": 0,
            "cpu": self.cpu_seconds
            + 1,  # the agent process ends itself at cpu_seconds (SIGXCPU), the kernel 1 s later
            "as": self.memory_bytes,
            "fsize": self.file_bytes,
            "nofile": self.open_files,
            "nproc": self.threads,
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

    def __init__(self, error_type: str, message: str, *, raised_by: str = "harness") -> None:
        super().__init__(f"{error_type}: {message}")
        self.error_type = error_type
        self.message = message
        # "agent" when error_type is the name of an exception class the agent raised (its choice, so it may read
        # like a cause of the harness's); "harness" when the harness named the cause itself
        self.raised_by = raised_by


class EgressStop(Exception):  # noqa: N818 - control flow: the run must stop at this attempt
    """A network attempt under policy ``abort``, or one the kernel ended the agent for: the run stops.
    ``attempts`` are the ones still to record (those reported as they happened are recorded already)."""

    def __init__(self, *attempts: EgressAttempt) -> None:
        super().__init__("network egress attempt")
        self.attempts = list(attempts)


class AgentJailError(EvalkitError):
    """The wall around the agent could not be started at all."""
