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
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from evalkit.wall._policy import (
    Spawned,
    WallError,
    WallPolicy,
    bwrap_path,
    interpreter_path,
    refused_layers,
    seccomp_library,
    system_lib_dirs,
)
from evalkit.wall._program import interpreter_reachable, sandbox_payload_source, zygote_program

__all__ = ["Zygote", "adopt_early", "default_workers", "launch_early"]


def _popen(command: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """Start the zygote's process; a program that cannot be started (bubblewrap removed or not executable since it
    was found) is one line, as a :class:`WallError`."""
    try:
        return cast("subprocess.Popen[bytes]", subprocess.Popen(command, **kwargs))
    except OSError as exc:
        raise WallError(f"cannot start the wall's jail: {command[0]}: {exc.strerror or exc}") from None


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
        refused = refused_layers()
        # absolute: the jail starts under an environment of its own
        self._bwrap = bwrap_path() if bwrap and "bwrap" not in refused else None
        self._use_bwrap = self._bwrap is not None
        self._namespaces = namespaces and "namespaces" not in refused and (os.geteuid() == 0 or self._use_bwrap)
        self._seccomp = seccomp_library() if seccomp and "seccomp" not in refused else None
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
        return os.geteuid() == 0 and (self._use_bwrap or interpreter_reachable())

    @property
    def seccomp_library(self) -> str | None:
        return self._seccomp

    def _command(self, settings: Mapping[str, object], program: tuple[int, int]) -> list[str]:
        """The zygote's command line; ``program`` is the descriptor and size of its compiled program."""
        python = interpreter_path()
        prefix = os.path.realpath(sys.base_prefix)
        # the cycle collector is off while the zygote imports and warms up (it ran some 30 times there, for about
        # 1.5 ms of each zygote's start, and found nothing to free); the zygote turns it on again before it freezes
        # its heap, so every job runs with it on, as before
        boot = f"import gc,marshal,os;gc.disable();exec(marshal.loads(os.pread({program[0]},{program[1]},0)))"
        inner = [python, *self.policy.python_flags, "-c", boot, json.dumps(settings)]
        if self._bwrap is None:
            return inner
        args = [self._bwrap]
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
        # a UTS namespace of its own (--unshare-uts above; --unshare-all includes it) named by the policy, not the host
        args += ["--new-session", "--hostname", self.policy.hostname]
        made: set[str] = set()

        def traversable(p: str) -> None:
            # the directories above a bound path exist in the jail only as empty, traversable ones (bubblewrap
            # would make them 0700: a job's uid could then reach neither a prefix under /root, nor /usr/lib and
            # /etc/ld.so.cache to load a library the zygote had not loaded, such as sqlite3's or lzma's)
            for parent in reversed(Path(p).parents[:-1] if len(Path(p).parents) > 1 else []):
                if str(parent) not in made:
                    made.add(str(parent))
                    args.extend(["--perms", "0755", "--dir", str(parent)])

        for d in system_lib_dirs():
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
            if Path(p).exists() and not any(p.startswith(d + "/") for d in system_lib_dirs()):
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
            "seccomp": {
                "deny": list(self.policy.deny),
                "kill_network_sockets": self.policy.kill_network_sockets,
                "unix_sockets": self.policy.unix_sockets,
                # a named AF_UNIX socket only where a job has a root and a network namespace of its own: without
                # them a path or an abstract name could reach a socket of the host (socket pairs stay allowed)
                "unix_named": self.policy.unix_sockets and self._use_bwrap and self._namespaces,
                "single_process": self.policy.single_process,
            },
        }
        env = {"PYTHONHASHSEED": "0", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
        if self.policy.pythonpath and not self._use_bwrap:
            env["PYTHONPATH"] = ":".join(self.policy.pythonpath)
        fd = child.fileno()
        flags = self.policy.python_flags
        program = zygote_program(self._payload, 2 if "-OO" in flags else 1 if "-O" in flags else 0)
        # the program reaches the zygote in a memory file (memfd) it reads once at start and then closes (_serve)
        code_fd = os.memfd_create("evalkit-wall-program", os.MFD_CLOEXEC)
        settings["ctl_fd"], settings["program_fd"] = fd, code_fd
        try:
            view = memoryview(program)
            while view:
                view = view[os.write(code_fd, view) :]
            with self._log.open("ab") as log:
                self._proc = _popen(
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
        except BaseException:
            host.close()
            raise
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


# ----------------------------------------------------------------------------------------- early start


def default_workers() -> int:
    """How many workers (zygotes) a sandbox has unless told: one per CPU and one more, at most 8. A job is a chain
    of hand-offs between processes (host, checker, candidate, zygote), each waiting on the one before, so one worker
    per CPU left CPUs idle between them: HumanEval's 164 checks on 2 CPUs used 1.2 of them with 2 workers. With 3,
    in alternating runs under load (load average 4.5-7), the median wall time fell from 1.27 to 1.08 s and from
    1.18 to 0.99 s, for 3-5% more CPU time; 4 workers were no faster than 3 and cost more CPU."""
    return max(1, min(8, (os.cpu_count() or 1) + 1))


_EARLY: list[Zygote] = []
_EARLY_LOCK = threading.Lock()


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
