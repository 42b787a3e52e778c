"""The wall's policy: what a jailed process may see and do, which uids it runs as, and what this machine gives.

:class:`WallPolicy` is the declarative jail (read-only host paths, rlimits, ``/job``'s size, the seccomp deny list,
the socket and process rules, the hostname); :func:`uid_block` hands out uids no other running job shares;
:func:`refused_layers` and the bubblewrap and libseccomp look-ups say which layers this machine can give (a layer
it cannot give is recorded in :class:`WallReport`, never assumed). :mod:`evalkit.wall._zygote` turns a policy into
running processes.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import sysconfig
import threading
from functools import cache
from pathlib import Path

import attrs

__all__ = [
    "DEFAULT_DENY",
    "Spawned",
    "WallError",
    "WallPolicy",
    "WallReport",
    "describe_status",
    "refused_layers",
    "release_uid_block",
    "uid_block",
]

# Syscalls no grader, candidate or agent needs; each is answered EPERM (``kill`` of a negative pid, ``clone`` with
# a namespace flag and ``clone3`` are handled by the zygote's own rules). Names unknown on an architecture are
# skipped and reported.
DEFAULT_DENY: tuple[str, ...] = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "process_madvise",
    "pidfd_open",
    "pidfd_send_signal",
    "pidfd_getfd",
    "kcmp",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "unshare",
    "setns",
    "bpf",
    "keyctl",
    "add_key",
    "request_key",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "iopl",
    "ioperm",
    "open_by_handle_at",
    "name_to_handle_at",
    "quotactl",
    "syslog",
    "vhangup",
    "lookup_dcookie",
    "fanotify_init",
    "socket",
    "socketpair",
    "mknod",
    "mknodat",
)

_UID_FLOOR = 200_000  # far above any uid in /etc/passwd; these uids own nothing outside a job
_UID_BLOCK = 1024
_UID_SLOTS = 8  # blocks a process may hold at once
_instances = iter(range(1 << 30))
_live_slots: set[int] = set()
_slots_lock = threading.Lock()


def uid_block() -> int:
    """The first of a block of 1024 uids for one wall user in this process, distinct across live processes (by
    pid) and across the users alive in this process (a block is held until :func:`release_uid_block`), so that no
    two running jobs anywhere on the machine share a uid. Past eight users alive at once in one process, blocks
    are shared again (each user still rotates through 1016 uids)."""
    with _slots_lock:
        free = [s for s in range(_UID_SLOTS) if s not in _live_slots]
        slot = free[0] if free else next(_instances) % _UID_SLOTS
        _live_slots.add(slot)
    return _UID_FLOOR + ((os.getpid() % 100_000) * _UID_SLOTS + slot) * _UID_BLOCK


def release_uid_block(base: int) -> None:
    """Give back a block :func:`uid_block` handed out, once nothing of its user runs any more."""
    slot = (base - _UID_FLOOR) // _UID_BLOCK - (os.getpid() % 100_000) * _UID_SLOTS
    with _slots_lock:
        _live_slots.discard(slot)


@attrs.frozen
class WallPolicy:
    """What a jailed process may see and do. ``ro_paths`` are host paths bound read-only at the same place (the
    interpreter's prefix and the system libraries are always added); ``python_flags`` start the zygote's
    interpreter (``-S -P``: no site-packages, nothing from the working directory).

    ``kill_network_sockets``: ``socket()`` of any family but ``AF_UNIX`` kills the process (SIGSYS, seen by the
    host in its exit status) instead of failing with EPERM, so an attempt that got past every recorder inside
    the process still ends it where the host can see it; ``AF_UNIX`` stays refused with EPERM (the C library's
    own name-service lookups try it).

    ``unix_sockets``: ``socket()`` and ``socketpair()`` of ``AF_UNIX`` are allowed (an event loop's wake-up pair;
    with only read-only paths and a private ``/job``, there is nothing of the host's to connect to), and each job
    gets a network namespace of its own (abstract names live there, and may outlive their process: no channel from
    one job to the next); without bubblewrap or namespaces only ``socketpair()`` is. Every other family stays
    refused as above. ``single_process``: threads may start but
    processes may not (``fork``, ``vfork`` and a ``clone`` without ``CLONE_THREAD`` are refused), so the rlimit
    on processes can count threads.

    ``hostname``: what ``uname`` and ``/proc/sys/kernel/hostname`` say inside the jail (a UTS namespace of its
    own), the same for every jail on every machine, so that no job learns which host grades it."""

    ro_paths: tuple[str, ...] = ()
    deny: tuple[str, ...] = DEFAULT_DENY
    python_flags: tuple[str, ...] = ("-S", "-P")
    pythonpath: tuple[str, ...] = ()
    kill_network_sockets: bool = False
    unix_sockets: bool = False
    single_process: bool = False
    hostname: str = "evalkit-jail"


@attrs.frozen
class WallReport:
    """The layers in effect, measured at start. Each field is a sentence for people; ``full`` is True only when
    every layer the design asks for is in place."""

    filesystem: str
    namespaces: str
    user: str
    seccomp: str
    network: str
    full: bool
    weaker: tuple[str, ...] = ()


@attrs.frozen
class Spawned:
    """A job the zygote was asked to start (its pidfd, failure and exit status are kept by the zygote)."""

    job_id: int


def system_lib_dirs() -> list[str]:
    dirs = ["/usr/lib", "/usr/lib64", "/lib", "/lib64"]
    return [d for d in dirs if Path(d).exists()]


@cache
def seccomp_library() -> str | None:
    arch = sysconfig.get_config_var("MULTIARCH") or ""
    dirs = (f"/usr/lib/{arch}", f"/lib/{arch}", "/usr/lib64", "/usr/lib", "/lib64", "/lib")
    # libseccomp 2's soname, looked for where the loader looks first: find_library runs ``ldconfig -p`` (a
    # process) and imports ctypes, on the way to starting a grading command's zygotes
    for d in dirs:
        p = Path(d) / "libseccomp.so.2"
        if p.exists():
            return str(p.resolve())
    import ctypes.util

    name = ctypes.util.find_library("seccomp")
    if name is None:
        return None
    if Path(name).is_absolute():
        return name
    for d in dirs:
        p = Path(d) / name
        if p.exists():
            return str(p.resolve())
    return None


def refused_layers() -> frozenset[str]:
    """The layers ``EVALKIT_WALL_WITHOUT`` (comma-separated: ``bwrap``, ``namespaces``, ``seccomp``) tells every wall of
    this process and its children not to use, as if the machine lacked them: the tests' bare leg runs so. The
    weaker wall is then measured, recorded and said like any other; other names are ignored."""
    named = {w.strip() for w in os.environ.get("EVALKIT_WALL_WITHOUT", "").split(",")}
    return frozenset(named & {"bwrap", "namespaces", "seccomp"})


def bwrap_path() -> str | None:
    """Where bubblewrap is, resolved from the caller's ``PATH`` to an absolute path once per zygote (the jail is then
    started by that path: the environment it starts under has a ``PATH`` of its own), or None when it is not there."""
    found = shutil.which("bwrap")
    return str(Path(found).absolute()) if found is not None else None


def interpreter_path() -> str:
    return os.path.realpath(sys.executable)


class WallError(OSError):
    """The wall itself failed (never a candidate's doing)."""


def describe_status(status: int | None) -> str:
    if status is None:
        return "the process vanished"
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        if sig == signal.SIGXFSZ:
            return "killed by SIGXFSZ: file size limit exceeded"
        if sig == signal.SIGXCPU:
            return "killed by SIGXCPU: CPU time limit exceeded"
        return f"killed by signal {name}"
    if os.WIFEXITED(status):
        return f"the process exited with code {os.WEXITSTATUS(status)}"
    return f"the process ended with status {status}"


