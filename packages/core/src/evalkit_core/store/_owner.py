"""Who holds a reservation or a lease: the identity of a live process, and how to tell when it is gone.

A process is named by its host, the kernel's boot id, its pid and the pid's start time (field 22 of
``/proc/<pid>/stat``, in clock ticks since boot). On the same host and boot that is exact: a pid that was
reused by another program has another start time, and a process that is gone has no ``/proc`` entry. An owner
on another host (a store on a shared disk) cannot be looked up; it is alive while its heartbeat is younger
than :data:`LEASE_SECONDS`. Where ``/proc`` is missing, the pid is probed with signal 0 and the heartbeat
decides the rest.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
from functools import cache
from pathlib import Path

import attrs

__all__ = ["HEARTBEAT_SECONDS", "LEASE_SECONDS", "Process", "is_alive", "this_process"]

HEARTBEAT_SECONDS = 10.0  # how often an open store refreshes its owner row
LEASE_SECONDS = 60.0  # an owner on another host whose heartbeat is older than this is taken for dead


@attrs.frozen
class Process:
    host: str
    boot_id: str
    pid: int
    start_ticks: int  # 0 when unknown (no /proc)


@cache
def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    except OSError:
        return ""


def _start_ticks(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot, or None when there is no such process (or no
    /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may itself hold spaces or parentheses
    fields = stat[stat.rfind(")") + 2 :].split()
    try:
        return int(fields[19])  # field 22 overall; fields[0] is field 3
    except (IndexError, ValueError):
        return None


def this_process() -> Process:
    """The identity of the calling process (computed per call: a forked child is someone else)."""
    pid = os.getpid()
    return Process(socket.gethostname(), _boot_id(), pid, _start_ticks(pid) or 0)


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, it is just not ours
        return True
    return True


def _parse(instant: str) -> dt.datetime:
    return dt.datetime.fromisoformat(instant.replace("Z", "+00:00"))


def is_alive(
    owner: Process, heartbeat_at: str, *, now: dt.datetime | None = None, lease: float = LEASE_SECONDS
) -> bool:
    """Whether the process ``owner`` (last heartbeat ``heartbeat_at``, store timestamp text) still runs."""
    me = this_process()
    if owner.host == me.host and owner.boot_id == me.boot_id and me.boot_id:
        if owner.start_ticks:
            return _start_ticks(owner.pid) == owner.start_ticks
        return _pid_exists(owner.pid)
    if owner.host == me.host and me.boot_id and owner.boot_id and owner.boot_id != me.boot_id:
        return False  # this machine rebooted since: every process of that boot is gone
    if owner.host == me.host and not me.boot_id and not _pid_exists(owner.pid):
        return False
    age = ((now or dt.datetime.now(dt.UTC)) - _parse(heartbeat_at)).total_seconds()
    return age <= lease
