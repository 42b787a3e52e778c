"""The sandbox's values: the limits of a test, what a job carries, and what its tests came to (before any
comparison). Data only; the worker (:mod:`evalkit.wall._worker`) and the pool (:mod:`evalkit.wall._sandbox`) use them."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal, TypeAlias

import attrs

__all__ = [
    "JSON",
    "MAX_JOB",
    "MAX_MESSAGE",
    "Isolation",
    "LoadStatus",
    "RunStatus",
    "SandboxJob",
    "SandboxLimits",
    "SandboxRun",
    "TestRun",
]

# What a job's tests carry and a call test returns: JSON data (the tagged codec carries more, see _codec).
JSON: TypeAlias = "bool | int | float | str | list[JSON] | dict[str, JSON] | None"

RunStatus = Literal["value", "done", "raised", "timeout", "crash", "bad_return", "not_run"]
LoadStatus = Literal["ok", "raised", "timeout", "crash", "missing", "infra"]

MAX_MESSAGE = 1 << 20
MAX_JOB = 4 << 20


@attrs.frozen
class SandboxLimits:
    """Per-test CPU seconds, the wall-clock allowance, and the rlimits of every sandboxed process."""

    cpu_seconds: float = 3.0
    wall_seconds: float | None = (
        None  # default: 3 x cpu + 2 (generous: CPU time is the fair measure under load)
    )
    memory_bytes: int = 1 << 30
    file_bytes: int = 16 << 20
    open_files: int = 64
    processes: int = 1
    output_bytes: int = 4096
    # all of a test's files together: its private tmpfs /job
    disk_bytes: int = 128 << 20

    @property
    def wall(self) -> float:
        return self.wall_seconds if self.wall_seconds is not None else 3 * self.cpu_seconds + 2

    def to_json(self) -> dict[str, JSON]:
        return {
            "cpu_seconds": self.cpu_seconds,
            "wall_seconds": self.wall,
            "memory_bytes": self.memory_bytes,
            "file_bytes": self.file_bytes,
            "open_files": self.open_files,
            "processes": self.processes,
            "output_bytes": self.output_bytes,
            "disk_bytes": self.disk_bytes,
        }

    def rlimits(self) -> dict[str, int]:
        # CPU: loading and the test each get cpu_seconds; the kernel's limit is the backstop (SIGXCPU)
        return {
            "core": 0,
            "cpu": math.ceil(2 * self.cpu_seconds) + 1,
            "as": self.memory_bytes,
            "fsize": self.file_bytes,
            "nofile": self.open_files,
            "nproc": self.processes,
        }


@attrs.frozen
class Isolation:
    """What isolation was in effect, measured when the sandbox started (see :class:`evalkit.wall._zygote.WallReport`)."""

    user: str
    network: str
    filesystem: str
    interpreter: str
    processes: str = ""
    seccomp: str = ""
    full: bool = False

    def to_json(self) -> dict[str, JSON]:
        return {
            "user": self.user,
            "network": self.network,
            "filesystem": self.filesystem,
            "processes": self.processes,
            "seccomp": self.seccomp,
            "interpreter": self.interpreter,
            "full": self.full,
        }

    @property
    def weaker(self) -> list[str]:
        """The layers missing from the full wall, for a one-line warning."""
        return [s for s in (self.user, self.network, self.filesystem, self.processes, self.seccomp) if "NOT" in s]

    @property
    def missing(self) -> tuple[str, ...]:
        """The names of the layers missing from the full wall (``user``, ``network``, ``filesystem``,
        ``processes``, ``seccomp``), sorted."""
        layers = {
            "user": self.user,
            "network": self.network,
            "filesystem": self.filesystem,
            "processes": self.processes,
            "seccomp": self.seccomp,
        }
        return tuple(sorted(name for name, text in layers.items() if "NOT" in text))

    @property
    def label(self) -> str:
        """The isolation in a short, comparable form: ``full``, or ``weaker: <missing layers>`` (what a campaign
        records with each verdict; compare two with ``evalkit_training.weaker_isolation``)."""
        return "full" if not self.missing else "weaker: " + ", ".join(self.missing)


@attrs.frozen
class SandboxJob:
    """One candidate and the inputs of its tests: ``{"args": [...], "kwargs": {...}}`` for a call, or
    ``{"check": src, "context": src}`` for an assert-style check (``context`` is task code the check may use,
    such as HumanEval's prompt helpers; it runs with the check, outside the candidate).

    Expected values never enter the sandbox. Consecutive call tests share one jailed process (a fresh one after
    any crash or timeout); with ``fresh`` (the default) the candidate's module is loaded again before each test,
    so no test sees globals, functions or default arguments another test left; ``fresh=False`` keeps one module
    (the adversary's reference runs, where only speed matters). Each check runs with a process of its own.

    ``seed`` seeds the candidate's ``random`` module before its code loads (in each of its processes): the same job
    draws the same numbers every time it runs. The adversary runs the reference under two seeds to see whether it
    depends on them.
    """

    source: str
    entry_point: str
    tests: tuple[Mapping[str, JSON], ...]
    fresh: bool = True
    seed: int = 0


@attrs.frozen
class TestRun:
    """The raw outcome of one test inside the sandbox (before any comparison)."""

    status: RunStatus
    value: JSON = None
    error_type: str = ""
    error: str = ""
    # what the harness saw it attempt: codes of evalkit.wall._evidence, never the candidate's text
    evidence: tuple[str, ...] = ()


@attrs.frozen
class SandboxRun:
    tests: tuple[TestRun, ...]
    load_status: LoadStatus
    load_error: str = ""
    output: str = ""
    output_truncated: bool = False
    infra_error: str | None = None
    # the evidence codes of loading (see TestRun.evidence)
    load_evidence: tuple[str, ...] = ()
    # an exception of the host's own while it handled this job's replies: the job's failure, recorded (the type and
    # where it was raised; never the candidate's text)
    host_error: str | None = None
