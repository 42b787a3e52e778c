"""The wall: the one trust boundary of evalkit, shared by the verifier stack and the PIT harness.

A :class:`WallPolicy` says, declaratively, what a jailed process may see and do: the host paths it may read (bound
read-only at the same place; nothing else of the host's filesystem exists for it), its rlimits, the size of its
private writable ``/job``, and the seccomp deny list. :class:`Zygote` turns the policy into running processes:

- the zygote starts inside **bubblewrap** (Debian's ``bubblewrap``): a root that holds only the policy's paths,
  read-only, and fresh network (no route out), IPC, UTS and pid namespaces, ending with the host process
  (the zygote ends at end of file on its control socket). bubblewrap was chosen over nsjail because it is a small, widely audited setuid-free
  tool packaged by Debian (``apt-get install bubblewrap``) whose command line *is* the mount policy, and over
  hand-made ``unshare`` + ``pivot_root`` because building a root correctly has many sharp edges it already
  handles (mount propagation, ``/dev``, ``/proc`` masking);
- per job the zygote clones a child into new pid, mount and IPC namespaces, mounts its own ``/proc`` and
  ``/job``, switches to a uid no other running job has, sets rlimits and ``no_new_privs`` and loads a
  **libseccomp** filter (see :mod:`evalkit.wall._zygote_child`), then runs the payload;
- the host talks to a jailed process only through pipes it made for that job, and kills it through a pidfd;
  killing pid 1 of a pid namespace ends every process in it.

What the machine cannot give is recorded, never assumed: :class:`WallReport` says which layers are in effect,
measured by a canary job at start (a zygote whose jobs cannot start is restarted without the layer that failed).
"""

from __future__ import annotations

import contextlib
import json
import marshal
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import zlib
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import cast

import attrs

__all__ = ["Spawned", "WallPolicy", "WallReport", "Zygote", "uid_block"]

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
    own name-service lookups try it)."""

    ro_paths: tuple[str, ...] = ()
    deny: tuple[str, ...] = DEFAULT_DENY
    python_flags: tuple[str, ...] = ("-S", "-P")
    pythonpath: tuple[str, ...] = ()
    kill_network_sockets: bool = False


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


def _system_lib_dirs() -> list[str]:
    dirs = ["/usr/lib", "/usr/lib64", "/lib", "/lib64"]
    return [d for d in dirs if Path(d).exists()]


@cache
def _seccomp_library() -> str | None:
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


def _own_source(name: str) -> str:
    """The source of a module of this package, read as text for a zygote's command line (beside this file: a
    zipped install could not run the wall's ``python -c`` anyway, and ``importlib.resources`` alone costs a
    grading command's start tens of milliseconds)."""
    return Path(__file__).with_name(name).read_text(encoding="utf-8")


@cache
def _zygote_source() -> str:
    return _own_source("_zygote_child.py")


@cache
def _codec_source() -> str:
    return _own_source("_codec.py")


@cache
def _interpreter_reachable() -> bool:
    """Whether a uid of no privilege can read this interpreter's standard library on the host's filesystem (under
    bubblewrap the jail makes it so; without it, an interpreter under ``/root`` is not)."""
    path = Path(sysconfig.get_paths()["stdlib"])
    for d in [*reversed(path.parents), path]:
        try:
            if not d.stat().st_mode & 0o001:
                return False
        except OSError:
            return False
    return True


@cache
def _zygote_program(payload: str, optimize: int) -> bytes:
    """The zygote's whole program (its own source, the codec's, then the payload's), compiled and marshalled. A
    zygote handed this starts some 15 ms of CPU sooner than one given the 50 kB of source to compile, and there is
    one zygote per worker."""
    appended = [_strip_future(src) for src in (_codec_source(), payload)]
    return _compiled("\n".join([_zygote_source(), *appended, "_zygote_main()"]), optimize)


def _compiled(source: str, optimize: int, cache_dir: Path | None = None) -> bytes:
    """``source`` compiled and marshalled, kept in ``cache_dir`` (default: this module's own ``__pycache__``, where
    Python keeps its bytecode, with the same trust) under a name from its checksum, with the whole source in front:
    a file is used only when the source it holds is this one, byte for byte, and an interpreter of this exact
    version wrote it. Where the directory cannot be written (or bytecode writing is off) the source is compiled on
    each start."""
    text = source.encode()
    head = f"evalkit wall program\n{sys.version}\n{optimize}\n{len(text)}\n".encode()
    name = f"wall-zygote.{sys.implementation.cache_tag}.{zlib.crc32(text):08x}.bin"
    path = (cache_dir or Path(__file__).with_name("__pycache__")) / name
    with contextlib.suppress(OSError):
        data = path.read_bytes()
        if data[: len(head)] == head and data[len(head) : len(head) + len(text)] == text:
            return data[len(head) + len(text) :]
    program = marshal.dumps(compile(source, "<string>", "exec", dont_inherit=True, optimize=optimize))
    if not sys.dont_write_bytecode:
        tmp = path.with_name(f"{name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            path.parent.mkdir(exist_ok=True)
            tmp.write_bytes(head + text + program)
            tmp.replace(path)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink()
    return program


def _strip_future(source: str) -> str:
    """A module's source made fit to follow another one (a ``from __future__`` import must come first)."""
    return "\n".join("" if ln.startswith("from __future__ import") else ln for ln in source.splitlines())


def _python() -> str:
    return os.path.realpath(sys.executable)


class WallError(OSError):
    """The wall itself failed (never a candidate's doing)."""


class Zygote:
    """One zygote process and the jobs it made. Used by one thread at a time."""

    def __init__(
        self,
        policy: WallPolicy,
        payload_source: str,
        *,
        label: str,
        bwrap: bool = True,
        namespaces: bool = True,
        seccomp: bool = True,
    ) -> None:
        self.policy = policy
        self._payload = payload_source
        self._label = label
        self._use_bwrap = bwrap and shutil.which("bwrap") is not None
        self._namespaces = namespaces and (os.geteuid() == 0 or self._use_bwrap)
        self._seccomp = _seccomp_library() if seccomp else None
        self._proc: subprocess.Popen[bytes] | None = None
        self._ctl: socket.socket | None = None
        self._launched: bool | None = None  # launched and not yet confirmed ready
        self._exits: dict[int, int] = {}
        self._pidfds: dict[int, int | None] = {}
        self._failed: dict[int, str] = {}
        self._released: list[Spawned] = []
        self._next_id = 0
        self._job_uids: dict[int, int] = {}  # job id -> its uid, until the zygote reports the job gone
        self.on_uid_free: Callable[[int], None] | None = None  # told each uid whose job is gone
        self._lock = threading.Lock()
        self.denied: list[str] = []
        self._log = Path(tempfile.gettempdir()) / f"evalkit-wall-{os.getpid()}-{label}.log"
        self._workdir: Path | None = None

    # ----------------------------------------------------------------------------------------- start and stop

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The host pid of the process started for the zygote (bubblewrap's, when it is in use)."""
        return self._proc.pid if self._proc is not None else None

    @property
    def payload_source(self) -> str:
        return self._payload

    @property
    def uses_bwrap(self) -> bool:
        return self._use_bwrap

    @property
    def namespaces(self) -> bool:
        return self._namespaces

    @property
    def separate_uids(self) -> bool:
        """Whether jobs run under uids of their own: as root, where the job's uid can reach the interpreter."""
        return os.geteuid() == 0 and (self._use_bwrap or _interpreter_reachable())

    @property
    def seccomp_library(self) -> str | None:
        return self._seccomp

    def _command(self, settings: Mapping[str, object], program: tuple[int, int]) -> list[str]:
        """The zygote's command line; ``program`` is the descriptor and size of its compiled program."""
        python = _python()
        prefix = os.path.realpath(sys.base_prefix)
        boot = f"import marshal,os;exec(marshal.loads(os.pread({program[0]},{program[1]},0)))"
        inner = [python, *self.policy.python_flags, "-c", boot, json.dumps(settings)]
        if not self._use_bwrap:
            return inner
        args = ["bwrap"]
        if os.geteuid() == 0:
            args += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
            for cap in ("CAP_SYS_ADMIN", "CAP_SETUID", "CAP_SETGID", "CAP_KILL"):
                args += ["--cap-add", cap]
        else:
            args += ["--unshare-all", "--uid", "0", "--gid", "0"]
        # No --die-with-parent: it ties the jail to the *thread* that started it (PR_SET_PDEATHSIG), and zygotes
        # are started from short-lived threads. The zygote ends itself at end of file on its control socket,
        # which every way this process can end (exit, crash, SIGKILL) delivers; bubblewrap's pid 1 then ends,
        # and the kernel takes every job in the jail's pid namespace with it.
        args += ["--new-session"]
        made: set[str] = set()

        def traversable(p: str) -> None:
            # the directories above a bound path exist in the jail only as empty, traversable ones (bubblewrap
            # would make them 0700: a job's uid could then reach neither a prefix under /root, nor /usr/lib and
            # /etc/ld.so.cache to load a library the zygote had not loaded, such as sqlite3's or lzma's)
            for parent in reversed(Path(p).parents[:-1] if len(Path(p).parents) > 1 else []):
                if str(parent) not in made:
                    made.add(str(parent))
                    args.extend(["--perms", "0755", "--dir", str(parent)])

        for d in _system_lib_dirs():
            real = os.path.realpath(d)
            if real != d:
                args += ["--symlink", os.path.relpath(real, "/"), d]
            else:
                traversable(d)
                args += ["--ro-bind", d, d]
        if Path("/etc/ld.so.cache").exists():
            traversable("/etc/ld.so.cache")
            args += ["--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
        paths = [prefix, *self.policy.ro_paths]
        if self._seccomp:
            paths.append(self._seccomp)
        for p in dict.fromkeys(paths):
            if Path(p).exists() and not any(p.startswith(d + "/") for d in _system_lib_dirs()):
                traversable(p)
                args += ["--ro-bind", p, p]
        args += ["--proc", "/proc", "--dev", "/dev", "--dir", "/job", "--remount-ro", "/", "--remount-ro", "/dev"]
        args += ["--chdir", "/", "--clearenv", "--setenv", "PYTHONHASHSEED", "0", "--setenv", "LANG", "C.UTF-8"]
        if self.policy.pythonpath:
            args += ["--setenv", "PYTHONPATH", ":".join(self.policy.pythonpath)]
        return [*args, "--", *inner]

    def start(self) -> list[str]:
        """Start the zygote (or finish starting one :meth:`launch` began); returns the syscall names of the policy
        the kernel does not know (skipped)."""
        if self._proc is None or self._launched is None:
            self.launch()
        self._launched = None
        msg = self._recv(timeout=30.0)
        if msg is None or msg[0].get("op") != "ready":
            self.stop()
            raise WallError(f"the wall's zygote did not start (see {self._log})")
        self.denied = [str(x) for x in cast("list[object]", msg[0].get("denied") or [])]
        return [str(x) for x in cast("list[object]", msg[0].get("unknown") or [])]

    def launch(self) -> None:
        """Start the zygote's process and return at once: it imports, compiles its filter and warms up while the
        caller does other work; :meth:`start` then waits for it to be ready."""
        self.stop()
        host, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        if not self._use_bwrap:  # no jail root: job directories are made on the host (a tmpfs over each, when it can)
            self._workdir = Path(tempfile.mkdtemp(prefix="evalkit-wall-"))
            self._workdir.chmod(0o711)
        settings: dict[str, object] = {
            "namespaces": self._namespaces,
            "jail_root": self._use_bwrap,
            "seccomp_library": self._seccomp,
            "seccomp": {"deny": list(self.policy.deny), "kill_network_sockets": self.policy.kill_network_sockets},
        }
        env = {"PYTHONHASHSEED": "0", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
        if self.policy.pythonpath and not self._use_bwrap:
            env["PYTHONPATH"] = ":".join(self.policy.pythonpath)
        fd = child.fileno()
        flags = self.policy.python_flags
        program = _zygote_program(self._payload, 2 if "-OO" in flags else 1 if "-O" in flags else 0)
        # the program reaches the zygote in a memory file (memfd) it reads once at start and then closes (_serve)
        code_fd = os.memfd_create("evalkit-wall-program", os.MFD_CLOEXEC)
        settings["ctl_fd"], settings["program_fd"] = fd, code_fd
        try:
            view = memoryview(program)
            while view:
                view = view[os.write(code_fd, view) :]
            with self._log.open("ab") as log:
                self._proc = subprocess.Popen(
                    self._command(settings, (code_fd, len(program))),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    env=env,
                    cwd="/",
                    start_new_session=True,
                    pass_fds=(fd, code_fd),
                    close_fds=True,
                )
        finally:
            child.close()
            os.close(code_fd)
        self._ctl = host
        self._launched = True

    def hang_up(self) -> None:
        """Close the control socket: the zygote kills its jobs and ends. :meth:`stop` waits for it."""
        ctl, self._ctl = self._ctl, None
        if ctl is not None:
            ctl.close()

    def stop(self) -> None:
        proc, ctl = self._proc, self._ctl
        self._proc, self._ctl, self._launched = None, None, None
        if ctl is not None:
            ctl.close()  # end of file: the zygote kills its jobs and exits
        if proc is not None:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        for pidfd in list(self._pidfds.values()):  # a copy: a job thread may still be settling one
            if pidfd is not None:
                with contextlib.suppress(OSError):
                    os.close(pidfd)
        for job_id in list(self._job_uids):  # the zygote and every job of its own are gone
            self._uid_free(job_id)
        self._pidfds.clear()
        self._failed.clear()
        self._released.clear()
        self._exits.clear()
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
        with contextlib.suppress(OSError):  # the zygote's log is kept only when it says something
            if self._log.stat().st_size == 0:
                self._log.unlink()

    # ----------------------------------------------------------------------------------------- jobs

    def _recv(self, timeout: float) -> tuple[dict[str, object], list[int]] | None:
        ctl = self._ctl
        if ctl is None:
            return None
        ready, _, _ = select.select([ctl], [], [], timeout)
        if not ready:
            return None
        try:
            data, fds, _, _ = socket.recv_fds(ctl, 1 << 16, 4)
        except OSError:
            return None
        if not data:
            return None
        return json.loads(data), list(fds)

    def _dispatch(self, msg: dict[str, object], fds: list[int]) -> None:
        """File a message of the zygote's: a spawn's pidfd or failure, or a job's exit status."""
        op, job_id = msg.get("op"), msg.get("id")
        if not isinstance(job_id, int):
            for fd in fds:
                os.close(fd)
            return
        if op == "spawned":
            self._pidfds[job_id] = fds[0] if fds else None
            for fd in fds[1:]:
                os.close(fd)
            return
        for fd in fds:
            os.close(fd)
        if op == "failed":
            self._failed[job_id] = str(msg.get("error"))
            self._uid_free(job_id)
        elif op == "exit" and isinstance(msg.get("status"), int):
            self._exits[job_id] = cast("int", msg["status"])
            self._uid_free(job_id)

    def _uid_free(self, job_id: int) -> None:
        uid = self._job_uids.pop(job_id, None)
        if uid is not None and self.on_uid_free is not None:
            self.on_uid_free(uid)

    def _await(self, ready: Callable[[], bool], timeout: float) -> bool:
        end = _monotonic() + timeout
        while not ready():
            remaining = end - _monotonic()
            if remaining <= 0:
                return False
            got = self._recv(timeout=remaining)
            if got is None:
                if not self.running:
                    return ready()
                continue
            self._dispatch(*got)
        return True

    def spawn(
        self,
        payload: str,
        fds: Sequence[int],
        *,
        uid: int | None,
        limits: Mapping[str, int],
        disk_bytes: int,
        args: Mapping[str, object] | None = None,
        namespaces: bool = True,
    ) -> Spawned:
        """Ask for one jailed process running ``payload`` with ``fds`` as its fds 1 (and 2), 3, 4, ... . Returns
        at once (the caller may write to the job's pipes while the zygote clones); :meth:`confirm` waits for the
        zygote's answer. With ``namespaces=False`` the process shares the zygote's pid and mount namespaces (no
        /proc or /job of its own) but keeps its own uid, rlimits and seccomp: for trusted code that must only be
        kept apart from a candidate (the checker), which cannot see it from inside its own pid namespace."""
        if not self.running:
            self.start()
        assert self._ctl is not None
        self._next_id += 1
        job_id = self._next_id
        if uid is not None and self.separate_uids:
            self._job_uids[job_id] = uid
        req: dict[str, object] = {
            "id": job_id,
            "payload": payload,
            "uid": uid if self.separate_uids else None,
            "limits": dict(limits),
            "disk_bytes": disk_bytes,
            "args": dict(args or {}),
            "namespaces": namespaces,
        }
        if self._workdir is not None:
            work = self._workdir / f"job-{job_id}"
            work.mkdir(mode=0o700)
            if req["uid"] is not None:
                os.chown(work, uid or 0, uid or 0)
            req["workdir"] = str(work)
        try:
            socket.send_fds(self._ctl, [marshal.dumps(req)], list(fds))
        except OSError as exc:
            self.stop()
            raise WallError(f"cannot reach the wall's zygote: {exc}") from exc
        return Spawned(job_id)

    def confirm(self, spawned: Spawned, timeout: float = 30.0) -> None:
        """Wait until the zygote has started the job; WallError if it could not (never the candidate's doing)."""
        job_id = spawned.job_id
        if not self._await(lambda: job_id in self._pidfds or job_id in self._failed, timeout):
            self.stop()
            raise WallError("the wall's zygote did not answer a spawn request")
        if job_id in self._failed:
            raise WallError(f"the wall could not start a job: {self._failed.pop(job_id)}")

    def kill(self, spawned: Spawned) -> None:
        """SIGKILL the job's pid 1 (and so its whole pid namespace)."""
        with contextlib.suppress(WallError):
            self.confirm(spawned)
        pidfd = self._pidfds.get(spawned.job_id)
        if pidfd is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)

    def release(self, spawned: Spawned) -> None:
        """Kill the job and collect its exit later (its pid namespace is torn down meanwhile); at most a few
        jobs stay uncollected, so the kernel's teardown overlaps the next job instead of delaying this one."""
        self.kill(spawned)
        self._released.append(spawned)
        while len(self._released) > 8:
            self.reap(self._released.pop(0))

    def settle(self, timeout: float = 10.0) -> None:
        """Collect every released job: when this returns, no process of any job of this zygote exists."""
        while self._released:
            self.reap(self._released.pop(0), timeout)

    def exit_status(self, spawned: Spawned, timeout: float = 10.0) -> int | None:
        """The job's wait status once it has ended (kill it first to bound the wait), then forget it."""
        if spawned in self._released:
            self._released.remove(spawned)
        return self.reap(spawned, timeout)

    def reap(self, spawned: Spawned, timeout: float = 10.0) -> int | None:
        """Wait for the zygote's report that the job ended; its wait status, or None if it never started or the
        zygote is gone."""
        job_id = spawned.job_id
        self._await(lambda: job_id in self._exits or job_id in self._failed, timeout)
        status = self._exits.pop(job_id, None)
        self._failed.pop(job_id, None)
        pidfd = self._pidfds.pop(job_id, None)
        if pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(pidfd)
        if self._workdir is not None:
            shutil.rmtree(self._workdir / f"job-{job_id}", ignore_errors=True)
        return status


def _monotonic() -> float:
    import time

    return time.monotonic()


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


# ----------------------------------------------------------------------------------------- early start

_EARLY: list[Zygote] = []
_EARLY_LOCK = threading.Lock()


def sandbox_payload_source() -> str:
    return _own_source("_sandbox_child.py")


def launch_early(count: int) -> None:
    """Launch ``count`` zygotes of the default sandbox (every layer, the default policy) now, before the caller
    has imported the rest of what it needs: a command that will grade calls this first, and the sandbox it makes
    later adopts them (:func:`adopt_early`), already warm. A zygote nobody adopts ends with this process (end of
    file on its control socket)."""
    with _EARLY_LOCK:
        for _ in range(max(0, min(8, count) - len(_EARLY))):
            zygote = Zygote(WallPolicy(), sandbox_payload_source(), label=f"early-{len(_EARLY)}")
            try:
                zygote.launch()
            except OSError:
                return
            _EARLY.append(zygote)


def adopt_early(payload_source: str) -> Zygote | None:
    """A zygote :func:`launch_early` started for the default sandbox with this payload, if one is left."""
    with _EARLY_LOCK:
        for i, zygote in enumerate(_EARLY):
            if zygote.payload_source == payload_source and zygote.pid is not None:
                return _EARLY.pop(i)
    return None
