"""The zygote: the process inside the wall that makes one jailed process per job. Standard library only.

This file is not imported by evalkit. :mod:`evalkit.wall._zygote` reads its source, appends the source of the payloads
(what a jailed process runs: a candidate, a checker, an agent) and starts ``python -c <that> <settings-json>``
inside bubblewrap (a minimal read-only root, fresh network, IPC, UTS and pid namespaces), with a control socket
on fd 3. The zygote never reads anything a job is given: a job's inputs travel on the job's own pipes, straight
from the host to the jailed process, so the zygote's memory (which every later job inherits by ``clone``) holds
no candidate's code, no check and no answer.

For each ``spawn`` request (pipe ends arrive with it by SCM_RIGHTS) the zygote clones a child into new pid,
mount and IPC namespaces. The child is pid 1 of its namespace, so when it ends every process it made ends with
it (the kernel tears the namespace down). Before the payload runs, the child:

1. mounts a fresh ``/proc`` (its own pid namespace only), a private size-capped tmpfs at ``/job`` owned by the
   job's uid (its only writable directory), and makes ``/dev`` read-only;
2. moves the pipe ends to fds 0..n and closes every other descriptor;
3. starts a new session, drops every group and switches to the job's own uid and gid (when the wall runs as
   root), which clears every capability;
4. sets the rlimits, ``PR_SET_NO_NEW_PRIVS`` and loads the seccomp filter (libseccomp, built once here from the
   policy the host sent: a deny list answered with EPERM, ``kill`` of a negative pid refused, ``clone`` with
   namespace flags refused, ``clone3`` answered ENOSYS so the C library falls back to ``clone``);
5. then calls the payload, which ends with ``os._exit``.

The zygote answers each spawn with a pidfd of the child (the host kills with it) and reports each child's exit
status when it reaps it. End of file on the control socket ends the zygote and every job.
"""

# pyright: basic

from __future__ import annotations

import _signal  # pyright: ignore[reportMissingImports]  # no stub; see _child_signal
import _socket  # not socket.py: see _recv_fds
import ctypes
import gc
import json
import marshal
import os
import resource
import select
import signal
import sys

_CLONE_NEWNS = 0x00020000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_CLONE_NEWUTS = 0x04000000
_CLONE_NEWCGROUP = 0x02000000
_CLONE_NEWTIME = 0x00000080
_NS_FLAGS = (
    _CLONE_NEWNS
    | _CLONE_NEWIPC
    | _CLONE_NEWPID
    | _CLONE_NEWUSER
    | _CLONE_NEWNET
    | _CLONE_NEWUTS
    | _CLONE_NEWCGROUP
    | _CLONE_NEWTIME
)
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
# Files of a job's own /proc that say which machine and which boot it runs on (the kernel's command line, its build
# banner, the boot's id); the interpreter reads none of them. Each is /dev/null in the job.
_PROC_MASKED = (b"/proc/cmdline", b"/proc/version", b"/proc/sys/kernel/random/boot_id")
_PR_SET_NO_NEW_PRIVS, _PR_SET_DUMPABLE = 38, 4
_SYS_CLONE = {"x86_64": 56, "aarch64": 220}

_libc = ctypes.CDLL(None, use_errno=True)
_pylibc = ctypes.PyDLL(None, use_errno=True)  # a PyDLL keeps the GIL held across the call, as clone needs
_pylibc.syscall.restype = ctypes.c_long
_before_fork = ctypes.pythonapi.PyOS_BeforeFork
# Resolved here, with their argument types, rather than on first use: a child that looked up ``_libc.mount`` made the
# function object (and grew the library's attribute dict) in pages it shares with the zygote, each then copied
_mount_call = _libc.mount
_mount_call.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_mount_call.restype = ctypes.c_int
_prctl_call = _libc.prctl
_prctl_call.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_prctl_call.restype = ctypes.c_int
_after_fork_child = ctypes.pythonapi.PyOS_AfterFork_Child
_after_fork_parent = ctypes.pythonapi.PyOS_AfterFork_Parent


def _errno_error(what: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{what}: {os.strerror(err)}")


_CLONE_ARGS: dict[int, tuple[ctypes.c_long, ctypes.c_ulong]] = {}


def _clone(flags: int) -> int:
    """``fork`` into new namespaces in one step (the child is pid 1 of a new pid namespace). The raw syscall with
    no stack behaves like fork; the interpreter's own before/after-fork hooks run around it as ``os.fork`` does."""
    args = _CLONE_ARGS.get(flags)
    if args is None:  # made once per set of flags, not in every clone (a new object is a page the job shares)
        nr = _SYS_CLONE[os.uname().machine]
        args = _CLONE_ARGS[flags] = (ctypes.c_long(nr), ctypes.c_ulong(flags | signal.SIGCHLD))
    _before_fork()
    pid = _pylibc.syscall(args[0], args[1], None, None, None, None)
    if pid == 0:
        _after_fork_child()
    else:
        _after_fork_parent()
    if pid < 0:
        raise _errno_error("clone")
    return pid


def _mount(source: bytes, target: bytes, fstype: bytes | None, flags: int, data: bytes | None) -> None:
    if _mount_call(source, target, fstype, flags, data) != 0:
        raise _errno_error(f"mount {target.decode()}")


class _Seccomp:
    """The seccomp filter, built once from the host's policy with libseccomp and loaded in each child."""

    def __init__(self, library: str, policy: dict[str, object]) -> None:
        lib = ctypes.CDLL(library, use_errno=True)
        lib.seccomp_init.restype = ctypes.c_void_p
        lib.seccomp_init.argtypes = [ctypes.c_uint32]
        lib.seccomp_syscall_resolve_name.restype = ctypes.c_int
        lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
        lib.seccomp_load.argtypes = [ctypes.c_void_p]
        self._lib = lib
        allow = 0x7FFF0000
        ctx = lib.seccomp_init(allow)
        if not ctx:
            raise OSError("seccomp_init failed")
        self._ctx = ctypes.c_void_p(ctx)
        # a binary tree of syscall numbers instead of a linear list: the kernel emulates the filter for every
        # syscall when it is attached (to cache constant answers), so its length is paid in every child
        lib.seccomp_attr_set(self._ctx, ctypes.c_int(8), ctypes.c_uint32(2))  # SCMP_FLTATR_CTL_OPTIMIZE: 2
        eperm = 0x00050000 | 1
        enosys = 0x00050000 | 38

        class Cmp(ctypes.Structure):
            _fields_ = (("arg", ctypes.c_uint), ("op", ctypes.c_int), ("a", ctypes.c_uint64), ("b", ctypes.c_uint64))

        self.denied: list[str] = []
        self.unknown: list[str] = []

        def rule(action: int, name: str, *cmps: tuple[int, int, int, int]) -> None:
            nr = lib.seccomp_syscall_resolve_name(name.encode())
            if nr < 0:  # not a syscall on this architecture
                self.unknown.append(name)
                return
            arr = (Cmp * max(1, len(cmps)))(*[Cmp(*c) for c in cmps])
            rc = lib.seccomp_rule_add_array(
                self._ctx, ctypes.c_uint32(action), ctypes.c_int(nr), ctypes.c_uint(len(cmps)), arr
            )
            if rc != 0:
                raise OSError(-rc, f"seccomp_rule_add {name}")

        masked_eq = 7  # SCMP_CMP_MASKED_EQ
        kill_sockets = bool(policy.get("kill_network_sockets"))  # type: ignore[union-attr]
        unix = bool(policy.get("unix_sockets"))  # type: ignore[union-attr]
        kill_process, cmp_ne, cmp_eq = 0x80000000, 1, 4  # SCMP_ACT_KILL_PROCESS, SCMP_CMP_NE, SCMP_CMP_EQ
        for name in policy["deny"]:  # type: ignore[union-attr]
            if (kill_sockets or unix) and name in ("socket", "socketpair"):
                continue
            rule(eperm, str(name))
            self.denied.append(str(name))
        if kill_sockets or unix:
            # socket() of a network family ends the process (SIGSYS) or is refused; AF_UNIX (1) is refused
            # unless the policy allows it; socketpair() exists only for AF_UNIX and is refused likewise
            rule(kill_process if kill_sockets else eperm, "socket", (0, cmp_ne, 1, 0))
            rule(eperm, "socketpair", (0, cmp_ne, 1, 0))
            if not policy.get("unix_named"):  # type: ignore[union-attr]
                rule(eperm, "socket", (0, cmp_eq, 1, 0))
            if not unix:
                rule(eperm, "socketpair", (0, cmp_eq, 1, 0))
            self.denied += ["socket", "socketpair"]
        if policy.get("single_process"):  # type: ignore[union-attr]
            # threads, never processes: fork, vfork and clone without CLONE_THREAD (0x10000) are refused
            for name in ("fork", "vfork"):
                rule(eperm, name)
            rule(eperm, "clone", (0, masked_eq, 0x00010000, 0))
            self.denied += ["fork", "vfork", "clone without CLONE_THREAD"]
        # kill(pid, sig) with a negative pid (another process group, or every process): refused
        rule(eperm, "kill", (0, masked_eq, 0x80000000, 0x80000000))
        # clone with any namespace flag: refused; clone3 hides its flags in memory, so it is answered ENOSYS and
        # the C library falls back to clone
        for flag in (
            _CLONE_NEWNS,
            _CLONE_NEWIPC,
            _CLONE_NEWPID,
            _CLONE_NEWUSER,
            _CLONE_NEWNET,
            _CLONE_NEWUTS,
            _CLONE_NEWCGROUP,
            _CLONE_NEWTIME,
        ):
            rule(eperm, "clone", (0, masked_eq, flag, flag))
        rule(enosys, "clone3")

        # Compile once: libseccomp's own load would generate the program again in every child. The raw program
        # (a struct sock_fprog) is loaded with prctl, which the kernel copies and checks in microseconds.
        r, w = os.pipe()
        rc = lib.seccomp_export_bpf(self._ctx, w)
        os.close(w)
        program = b""
        while True:
            chunk = os.read(r, 1 << 16)
            if not chunk:
                break
            program += chunk
        os.close(r)
        if rc != 0 or not program or len(program) % 8:
            raise OSError(-rc, "seccomp_export_bpf")

        class Fprog(ctypes.Structure):
            _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))

        self._program = ctypes.create_string_buffer(program, len(program))
        self._fprog = Fprog(len(program) // 8, ctypes.cast(self._program, ctypes.c_void_p))
        self._fprog_address = ctypes.addressof(self._fprog)  # an int: no ctypes object is made in the child

    def load(self) -> None:
        if _prctl_call(22, 2, self._fprog_address, 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
            raise _errno_error("prctl(PR_SET_SECCOMP)")


# rlimit names as the host sends them (``cpu``, ``nofile``, ...), resolved once here rather than in every child
_RLIMITS = {n.removeprefix("RLIMIT_").lower(): getattr(resource, n) for n in dir(resource) if n.startswith("RLIMIT_")}


def _set_limits(limits: dict[str, int]) -> None:
    for name, value in limits.items():
        resource.setrlimit(_RLIMITS[name], (value, value))


# The directory os.environ was last made for: the zygote makes a namespaced job's (its /job) before it clones
# anyone, as setting os.environ in a child costs it some 60 page faults and half a millisecond.
_ENV_WORKDIR: list[str | None] = [None]


def _set_job_environment(workdir: str) -> None:
    """A job's whole environment: PATH, LANG, and HOME and TMPDIR at its own directory (the zygote cleared its
    own when it started: os.environ.clear() is a loop in Python, dear in a child too)."""
    os.environ.update({"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": workdir, "TMPDIR": workdir})
    _ENV_WORKDIR[0] = workdir


def _child_signal(signum: int, handler: object) -> None:
    """``signal.signal`` for a freshly cloned child, without its Python wrapper: the wrapper turns the handler it
    is given and the one it replaces into enum members (and fails to, through a ValueError, for a function),
    which in a child touches some sixty of the zygote's pages, each then copied (a page fault and 4 KiB)."""
    _signal.signal(signum, handler)


def _child_setup(req: dict[str, object], fds: list[int], settings: dict[str, object], seccomp: _Seccomp | None) -> None:
    """Everything between clone and the payload, in the child. Any failure ends the child with code 70."""
    namespaces = bool(settings["namespaces"]) and bool(req.get("namespaces", True))
    uid = req.get("uid")
    if namespaces:
        workdir = "/job" if settings.get("jail_root") else str(req["workdir"])
        if not settings.get("jail_root"):
            # no bubblewrap root: this mount namespace is a copy of the host's, so first stop every mount made
            # here from propagating back to the host
            _mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None)
        _mount(b"proc", b"/proc", b"proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None)
        for masked in _PROC_MASKED:  # what names the host or its boot, which no job needs: empty
            _mount(b"/dev/null", masked, None, _MS_BIND, None)
            _mount(b"none", masked, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY, None)
        owner = f",uid={uid},gid={uid}" if isinstance(uid, int) else ""
        size = int(req.get("disk_bytes") or 16 << 20)  # type: ignore[arg-type]
        data = f"size={size},nr_inodes=4096,mode=0700{owner}".encode()
        _mount(b"evalkit-job", workdir.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, data)
    else:
        workdir = str(req.get("workdir") or "/")
    # fds: 0 = /dev/null, 1 and 2 = the output pipe, 3.. = the job's protocol pipes, in the order sent
    null = os.open("/dev/null", os.O_RDONLY)
    out, rest = fds[0], fds[1:]
    high = 100
    moved = []
    for i, fd in enumerate([null, out, *rest]):
        os.dup2(fd, high + i, inheritable=True)
        moved.append(high + i)
    os.dup2(moved[0], 0)
    os.dup2(moved[1], 1)
    os.dup2(moved[1], 2)
    for i, fd in enumerate(moved[2:]):
        os.dup2(fd, 3 + i)
    os.closerange(3 + len(rest), 65536)
    os.setsid()
    if isinstance(uid, int):
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    os.chdir(workdir)
    os.umask(0o077)
    _set_limits(req["limits"])  # type: ignore[arg-type]
    if _prctl_call(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _errno_error("prctl(NO_NEW_PRIVS)")
    if seccomp is not None:
        seccomp.load()
    if _ENV_WORKDIR[0] != workdir:
        _set_job_environment(workdir)


class _HostGone(Exception):  # noqa: N818
    pass


def _send(ctl: _socket.socket, msg: dict[str, object], fds: list[int] | None = None) -> None:
    data = json.dumps(msg).encode()
    try:
        if fds:
            ctl.sendmsg([data], [(_SOL_SOCKET, _SCM_RIGHTS, b"".join(fd.to_bytes(4, sys.byteorder) for fd in fds))])
        else:
            ctl.send(data)
    except OSError as exc:  # the host closed its end or ended: so does the zygote, with its jobs
        raise _HostGone from exc


def _send_job_event(ctl: _socket.socket, data: bytes, fd: int | None = None) -> None:
    """A job's ``spawned`` (with its pidfd) or ``exit`` message, written without json.dumps: between two clones the
    zygote shares its pages with a running job, and every page it writes then is a page fault and a copy
    (json.dumps builds an encoder each call; this path wrote some 80 pages a job)."""
    try:
        if fd is None:
            ctl.send(data)
        else:
            ctl.sendmsg([data], [(_SOL_SOCKET, _SCM_RIGHTS, fd.to_bytes(4, sys.byteorder))])
    except OSError as exc:  # the host closed its end or ended: so does the zygote, with its jobs
        raise _HostGone from exc


def _recv_fds(sock: _socket.socket, size: int, most: int) -> tuple[bytes, list[int]]:
    """``socket.recv_fds`` without socket.py: a message and the descriptors that came with it. The zygote talks
    to the host through the C module alone; socket.py (its enums, and the array module it reads descriptors
    with) was some 5 ms of every zygote's start and 0.3 MB of the heap each job's clone copies."""
    data, ancillary, _flags, _addr = sock.recvmsg(size, _socket.CMSG_LEN(most * 4))
    fds: list[int] = []
    for level, kind, raw in ancillary:
        if level == _SOL_SOCKET and kind == _SCM_RIGHTS:
            fds += [int.from_bytes(raw[i : i + 4], sys.byteorder, signed=True) for i in range(0, len(raw) - 3, 4)]
    return data, fds


_SOL_SOCKET, _SCM_RIGHTS = _socket.SOL_SOCKET, _socket.SCM_RIGHTS
_JOBS: dict[int, object] = {}  # pid -> job id, of every job not yet reaped


def _zygote_main() -> None:
    try:
        _serve()
    except _HostGone:
        pass
    finally:  # however the zygote ends, no job outlives it: each is killed, then waited for until it is gone (a
        # job's end takes every process of its pid namespace with it), so that the host, which waits for the
        # zygote's jail to end, finds nothing of any job left when it does
        for pid in _JOBS:
            try:  # noqa: SIM105
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for pid in _JOBS:
            try:  # noqa: SIM105
                os.waitpid(pid, 0)
            except OSError:
                pass
    # the host closed the control socket: end now, without the interpreter's shutdown (it tears down every module
    # of a heap no one will use again, and the host waits for this process to be gone). An error in _serve does
    # not get here: its traceback goes to the log as usual.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _serve() -> None:
    settings = json.loads(sys.argv[1])
    payloads = globals()["PAYLOADS"]  # name -> function(settings, args); defined by the appended payload sources
    ctl = _socket.socket(fileno=int(settings["ctl_fd"]))
    if settings.get("program_fd") is not None:
        os.close(int(settings["program_fd"]))  # the compiled program this process was started from, read at start
    seccomp = None
    if settings.get("seccomp_library"):
        seccomp = _Seccomp(str(settings["seccomp_library"]), settings["seccomp"])
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    os.environ.clear()  # a job's environment is only what _set_job_environment gives it
    if settings["namespaces"] and settings.get("jail_root"):
        _set_job_environment("/job")  # every namespaced job's directory, inside bubblewrap's root
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    for warm in payloads.get("__warm__", ()):
        warm()
    # no gc.collect() first: it freed some 200 objects of the warm-up (2.3 ms of every zygote's start); left
    # unfreed they are frozen with the rest, a few kB that no job's collector ever visits
    gc.enable()  # off since the boot line (evalkit.wall._zygote): every job runs with it on
    gc.freeze()  # children then write to (and so copy) few of the zygote's pages
    flags = _CLONE_NEWPID | _CLONE_NEWNS | _CLONE_NEWIPC if settings["namespaces"] else 0
    if flags and settings["seccomp"].get("unix_named"):
        # AF_UNIX allowed: each job gets a network namespace of its own, so that an abstract socket name (which
        # lives in the network namespace, and can outlive its process) is no channel from one job to the next
        flags |= _CLONE_NEWNET
    jobs = _JOBS
    _send(ctl, {"op": "ready", "denied": seccomp.denied if seccomp else None, "unknown": seccomp.unknown if seccomp else None})
    while True:
        ready, _, _ = select.select([ctl, wake_r], [], [])
        if wake_r in ready:
            # one read empties it (a byte a signal; if more are left, select wakes again), not a loop that ends on a
            # BlockingIOError raised and caught every time, each a few pages written
            try:  # noqa: SIM105 - no contextlib: the zygote imports only what it must
                os.read(wake_r, 4096)
            except BlockingIOError:
                pass
        while jobs:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            job_id = jobs.pop(pid, None)
            if type(job_id) is int:
                _send_job_event(ctl, b'{"op":"exit","id":%d,"status":%d}' % (job_id, status))
            else:
                _send(ctl, {"op": "exit", "id": job_id, "status": status})
        if ctl not in ready:
            continue
        try:
            data, fds = _recv_fds(ctl, 1 << 16, 16)
        except OSError:
            data, fds = b"", []
        if not data:
            return
        # the host's request (it is trusted and runs the same interpreter); json.loads cost some 20 page faults a job
        req = marshal.loads(data)  # noqa: S302
        payload = payloads[req["payload"]]
        try:
            pid = _clone(flags) if flags and req.get("namespaces", True) else os.fork()
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            _send(ctl, {"op": "failed", "id": req["id"], "error": str(exc)})
            continue
        if pid == 0:  # pragma: no cover - the jailed child
            code = 70
            try:
                _signal.set_wakeup_fd(-1)
                _child_signal(_signal.SIGCHLD, _signal.SIG_DFL)
                # the control socket and the wake-up pipe are not closed here: _child_setup's closerange closes
                # every descriptor the job was not given (closing the socket object in Python cost some 30 page
                # faults a job), and nothing in between reads or writes them
                _child_setup(req, fds, settings, seccomp)
                code = 0
                payload(settings, req.get("args") or {})
            except BaseException as exc:  # setup failed: say why on stderr (the job's output pipe) and end
                try:  # noqa: SIM105 - no contextlib: the zygote imports only what it must
                    os.write(2, f"evalkit wall: job setup failed: {type(exc).__name__}: {exc}\n".encode())
                except OSError:
                    pass
            finally:
                os._exit(code)
        for fd in fds:
            os.close(fd)
        jobs[pid] = req["id"]
        pidfd = os.pidfd_open(pid)  # the host kills the job with it; the zygote reaps it and reports its status
        _send_job_event(ctl, b'{"op":"spawned","id":%d}' % int(req["id"]), pidfd)
        os.close(pidfd)
