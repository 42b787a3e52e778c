"""The sandbox: runs candidate code in forked children of a clean template interpreter.

Layers (each is recorded in :class:`Isolation`, so a report says what was really in effect):

- a template ``python -s -S -P`` started with a stripped environment (only ``PYTHONHASHSEED=0``, ``PATH`` and
  ``LANG``; ``-E`` is not used because it would also drop the fixed hash seed, and set iteration order must not
  change verdicts), in its own session; it never runs candidate code;
- when ``unshare`` works (root): a fresh network namespace (no route out) and a mount namespace; when the
  interpreter lives under a directory an unprivileged user cannot enter (``/root/.pyenv``), its prefix is
  bind-mounted into the sandbox's base directory inside that namespace only;
- per job a forked child in a new session, in a fresh directory of its own, running (when the harness is root) as
  an unprivileged uid reserved for that worker slot, with rlimits (CPU, address space, file size, open files,
  processes = 1, no core) set before the candidate loads, an audit hook refusing processes, signals, sockets,
  ctypes, frame and gc introspection and writes outside its directory;
- results return on a dedicated pipe as JSON lines carrying a nonce made after the fork; return values must be
  plain JSON (no NaN, no custom classes) and are compared outside, by the verifier;
- the template enforces a wall-clock deadline per test and kills the child's process group; after a crash or a
  hang it forks a fresh child for the remaining tests, so one bad test does not take the others with it.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import select
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from importlib import resources
from pathlib import Path
from types import TracebackType
from typing import Literal, Self, cast

import attrs

from evalkit._tasks import JSON

__all__ = [
    "Isolation",
    "Sandbox",
    "SandboxJob",
    "SandboxLimits",
    "SandboxRun",
    "TestRun",
]

RunStatus = Literal["value", "done", "raised", "timeout", "crash", "bad_return", "not_run"]
LoadStatus = Literal["ok", "raised", "timeout", "crash", "missing", "infra"]
_STATUSES = ("value", "done", "raised", "timeout", "crash", "bad_return")

_UID_FLOOR = 200_000  # far above any uid in /etc/passwd; these uids own nothing that outlives a job
_instances = iter(range(1 << 30))


def _default_uid_base() -> int:
    """A uid block of 8 per Sandbox, distinct across live processes (pid) and instances in one process, so
    that one sandbox's RLIMIT_NPROC and process sweeps never touch another's children."""
    return _UID_FLOOR + ((os.getpid() % 100_000) * 16 + next(_instances) % 16) * 8


@attrs.frozen
class SandboxLimits:
    """Per-test CPU seconds, the wall-clock allowance, and the rlimits of every sandboxed child."""

    cpu_seconds: float = 3.0
    wall_seconds: float | None = (
        None  # default: 3 x cpu + 2 (generous: CPU time is the fair measure under load)
    )
    memory_bytes: int = 1 << 30
    file_bytes: int = 16 << 20
    open_files: int = 64
    processes: int = 1
    output_bytes: int = 4096
    # all of a job's files together, where a private tmpfs holds them (see Isolation.filesystem)
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


@attrs.frozen
class Isolation:
    """What isolation was in effect (it depends on the machine: root or not, whether ``unshare`` works)."""

    user: str
    network: str
    filesystem: str
    interpreter: str

    def to_json(self) -> dict[str, JSON]:
        return {
            "user": self.user,
            "network": self.network,
            "filesystem": self.filesystem,
            "interpreter": self.interpreter,
        }


@attrs.frozen
class SandboxJob:
    """One candidate and the inputs of its tests: ``{"args": [...], "kwargs": {...}}`` or ``{"check": src}``.

    Expected values never enter the sandbox for call-based tests.
    """

    source: str
    entry_point: str
    tests: tuple[Mapping[str, JSON], ...]


@attrs.frozen
class TestRun:
    """The raw outcome of one test inside the sandbox (before any comparison)."""

    status: RunStatus
    value: JSON = None
    error_type: str = ""
    error: str = ""


@attrs.frozen
class SandboxRun:
    tests: tuple[TestRun, ...]
    load_status: LoadStatus
    load_error: str = ""
    output: str = ""
    output_truncated: bool = False
    infra_error: str | None = None


class _Plan:
    """How templates are launched on this machine (probed once per process)."""

    def __init__(
        self, *, drop_user: bool, netns: bool, tmpfs: bool, bind_prefix: str | None, python: str
    ) -> None:
        self.drop_user = drop_user
        self.netns = netns
        self.tmpfs = tmpfs  # job directories on a private tmpfs, mounted in the template's mount namespace
        self.bind_prefix = bind_prefix
        self.python = python


def _world_reachable(path: str) -> bool:
    p = Path(path)
    for parent in [*reversed(p.parents), p]:
        try:
            mode = parent.stat().st_mode
        except OSError:
            return False
        if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
            return False
    return bool(p.stat().st_mode & stat.S_IROTH) if p.exists() else False


@cache
def _probe() -> _Plan:
    python = os.path.realpath(sys.executable)
    is_root = os.geteuid() == 0
    unshare = shutil.which("unshare")
    netns = tmpfs = False
    if unshare and is_root:
        with tempfile.TemporaryDirectory(prefix="evalkit-probe-") as mountpoint:
            mount = _tmpfs_command(1)
            tmpfs = _succeeds(
                [unshare, "--mount", "--net", "--", "/bin/sh", "-c", mount, "sh", "size=1m", mountpoint]
            )
        netns = tmpfs or _succeeds([unshare, "--mount", "--net", "--", "true"])
    bind_prefix: str | None = None
    drop_user = is_root
    if is_root:
        stdlib = sysconfig.get_paths()["stdlib"]
        if not (_world_reachable(python) and _world_reachable(stdlib)):
            prefix = os.path.realpath(sys.base_prefix)
            if (
                netns
                and python.startswith(prefix + "/")
                and os.path.realpath(stdlib).startswith(prefix + "/")
            ):
                bind_prefix = prefix
            else:
                drop_user = False
    return _Plan(drop_user=drop_user, netns=netns, tmpfs=tmpfs, bind_prefix=bind_prefix, python=python)


def _tmpfs_command(k: int) -> str:
    """The shell command, run inside ``unshare --mount``, that mounts a tmpfs for job directories at positional
    parameter ``k + 1`` with the size option in parameter ``k``. The mount is private to the namespace
    (util-linux unshare makes a new namespace's mounts private): the host never sees it, and it is gone when the
    template exits, with whatever a candidate left in it."""
    return f'mount -t tmpfs -o "mode=0711,nosuid,nodev,noexec,nr_inodes=16384,${{{k}}}" evalkit-jobs "${{{k + 1}}}"'


def _succeeds(cmd: list[str]) -> bool:
    try:
        return subprocess.run(cmd, check=False, timeout=10, capture_output=True).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@cache
def _child_source() -> str:
    return resources.files("evalkit").joinpath("_sandbox_child.py").read_text(encoding="utf-8")


class _Template:
    """One running template process, bound to one worker slot (and, as root, one unprivileged uid)."""

    def __init__(self, plan: _Plan, base: Path, slot: int, limits: SandboxLimits, uid_base: int) -> None:
        self.slot = slot
        self.uid = uid_base + slot if plan.drop_user else None
        # where job directories are made: a private tmpfs mounted over base/jobs-<slot>, or base itself
        self.jobs = str(base / f"jobs-{slot}") if plan.tmpfs else str(base)
        settings: dict[str, JSON] = {
            "jobs": self.jobs,
            "slot": slot,
            "uid": self.uid,
            "gid": self.uid,
            "cpu_seconds": limits.cpu_seconds,
            "wall_seconds": limits.wall,
            "memory_bytes": limits.memory_bytes,
            "file_bytes": limits.file_bytes,
            "open_files": limits.open_files,
            "processes": limits.processes,
            "output_bytes": limits.output_bytes,
            "cpu_total": 0,
        }
        self._settings = settings
        self._plan = plan
        self._base = base
        self._limits = limits
        self.proc: subprocess.Popen[bytes] | None = None
        self._buf = b""

    def start(self) -> None:
        plan = self._plan
        args = [json.dumps(self._settings)]
        code = _child_source()
        python = plan.python
        mounts: list[str] = []  # shell commands run inside the new mount namespace, before the interpreter
        params: list[str] = []
        if plan.bind_prefix is not None:
            mnt = self._base / "py"
            mnt.mkdir(exist_ok=True)
            python = str(mnt / Path(plan.python).relative_to(plan.bind_prefix))
            mounts.append(f'mount --bind "${{{len(params) + 1}}}" "${{{len(params) + 2}}}"')
            params += [plan.bind_prefix, str(mnt)]
        if plan.tmpfs:
            Path(self.jobs).mkdir(exist_ok=True)
            mounts.append(_tmpfs_command(len(params) + 1))
            params += [f"size={self._limits.disk_bytes}", self.jobs]
        interpreter = [python, "-s", "-S", "-P", "-c", code, *args]
        if mounts:
            script = " && ".join([*mounts, f'shift {len(params)} && exec "$@"'])
            cmd = ["unshare", "--mount", "--net", "--", "/bin/sh", "-c", script, "sh", *params, *interpreter]
        elif plan.netns:
            cmd = ["unshare", "--net", "--", *interpreter]
        else:
            cmd = interpreter
        log = (self._base / f"template-{self.slot}.log").open("ab")
        try:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env={"PYTHONHASHSEED": "0", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"},
                cwd=self._base,
                start_new_session=True,
                close_fds=True,
            )
        finally:
            log.close()
        self._buf = b""
        line = self._read_line(30.0)
        if line is None or json.loads(line).get("t") != "template-ready":
            self.stop()
            raise OSError(f"the sandbox template did not start (see {self._base}/template-{self.slot}.log)")

    def _read_line(self, timeout: float) -> bytes | None:
        assert self.proc is not None
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        end = _monotonic() + timeout
        while b"\n" not in self._buf:
            remaining = end - _monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def run(self, job: SandboxJob, job_id: int) -> SandboxRun:
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        assert self.proc is not None
        assert self.proc.stdin is not None
        n = len(job.tests)
        cpu_total = int(self._limits.cpu_seconds * (n + 1)) + 2
        msg = {"id": job_id, "source": job.source, "entry_point": job.entry_point, "tests": list(job.tests)}
        self._settings["cpu_total"] = cpu_total
        try:
            self.proc.stdin.write((json.dumps({**msg, "cpu_total": cpu_total}) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            self.stop()
            return _infra(n, f"cannot reach the sandbox template: {exc}")
        budget = (n + 1) * (self._limits.wall + 1.0) + 10.0
        line = self._read_line(budget)
        if line is None:
            self.stop()
            return _infra(n, "the sandbox template did not answer in time")
        try:
            reply = json.loads(line, parse_constant=_no_constant)
        except ValueError as exc:
            self.stop()
            return _infra(n, f"the sandbox template answered malformed JSON ({exc})")
        return _parse_reply(reply, n)

    def stop(self) -> None:
        proc = self.proc
        self.proc = None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        if self.uid is not None:
            kill_user_processes(self.uid)

    def close(self) -> None:
        proc = self.proc
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.stop()


def _monotonic() -> float:
    import time

    return time.monotonic()


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not allowed in sandbox results")


def _infra(n: int, reason: str) -> SandboxRun:
    return SandboxRun(
        tests=tuple(TestRun("not_run") for _ in range(n)),
        load_status="infra",
        load_error=reason,
        infra_error=reason,
    )


def _parse_reply(reply: object, n: int) -> SandboxRun:
    if not isinstance(reply, dict):
        return _infra(n, "the sandbox template answered something that is not an object")
    r = cast("dict[str, JSON]", reply)
    infra = r.get("infra")
    if isinstance(infra, str):
        return _infra(n, infra)
    load = r.get("load")
    results = r.get("results")
    if not isinstance(load, dict) or not isinstance(results, list) or len(results) != n:
        return _infra(n, "the sandbox template answered an incomplete reply")
    load_status = load.get("status")
    if load_status not in ("ok", "raised", "timeout", "crash", "missing"):
        return _infra(n, f"unknown load status {load_status!r}")
    runs: list[TestRun] = []
    for item in results:
        if not isinstance(item, dict):
            runs.append(TestRun("not_run"))
            continue
        status = item.get("status")
        if status not in _STATUSES:
            runs.append(TestRun("crash", error=f"unknown status {status!r}"))
            continue
        runs.append(
            TestRun(
                cast("RunStatus", status),
                value=item.get("value"),
                error_type=str(item.get("error_type") or ""),
                error=str(item.get("error") or ""),
            )
        )
    load_error = load.get("error")
    if load_status == "raised":
        load_error = f"{load.get('error_type')}: {load_error}"
    return SandboxRun(
        tests=tuple(runs),
        load_status=cast("LoadStatus", load_status),
        load_error=str(load_error or ""),
        output=str(r.get("output") or ""),
        output_truncated=bool(r.get("output_truncated")),
    )


def kill_user_processes(uid: int) -> int:
    """Kill every process owned by ``uid`` (a sandbox slot's uid); returns how many were signalled."""
    if uid < 1000:  # never sweep system users  # pragma: no cover
        return 0
    killed = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            os.kill(int(entry.name), signal.SIGKILL)
            killed += 1
        except (OSError, ValueError):
            continue
    return killed


def user_processes(uid: int) -> list[int]:
    """Pids of the processes owned by ``uid`` (for tests that check nothing is left behind)."""
    out: list[int] = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    out.append(int(entry.name))
    return out


class Sandbox:
    """A pool of template processes, one per worker slot. Use as a context manager; it is thread-safe.

    ``run`` grades one candidate (all its tests in one child, re-forking only after a crash or hang);
    ``run_many`` spreads candidates over the slots.
    """

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        *,
        workers: int | None = None,
        uid_base: int | None = None,
    ) -> None:
        self.limits = limits or SandboxLimits()
        # one per CPU by default: measured on HumanEval (164 checks), 2 workers on 2 CPUs beat 4 and 6
        self.workers = max(1, min(8, workers or (os.cpu_count() or 1)))
        uid_base = uid_base if uid_base is not None else _default_uid_base()
        self._plan = _probe()
        self._base = Path(tempfile.mkdtemp(prefix="evalkit-sandbox-"))
        self._base.chmod(0o711)
        self._templates = [
            _Template(self._plan, self._base, slot, self.limits, uid_base) for slot in range(self.workers)
        ]
        self._free: queue.Queue[_Template] = queue.Queue()
        for t in self._templates:
            self._free.put(t)
        self._counter = 0
        self._lock = threading.Lock()
        self._closed = False
        self._starters: list[threading.Thread] = []

    def prestart(self) -> None:
        """Start every worker's template now, in the background, so that their start-up overlaps whatever the
        caller does before its first job (otherwise each starts on first use). A template that fails to start
        here is started again, and the failure reported, by the job that needs it."""
        if self._closed or self._starters:
            return
        for _ in self._templates:
            thread = threading.Thread(target=self._start_one, name="evalkit-sandbox-start", daemon=True)
            thread.start()
            self._starters.append(thread)

    def _start_one(self) -> None:
        template = self._free.get()
        try:
            if template.proc is None and not self._closed:
                template.start()
        except (OSError, ValueError):
            pass  # the first job on this template starts it again and reports what went wrong
        finally:
            self._free.put(template)

    @property
    def isolation(self) -> Isolation:
        plan = self._plan
        if plan.drop_user:
            user = "unprivileged uid per worker slot"
        elif os.geteuid() == 0:
            user = "unchanged (root): the interpreter is not reachable by an unprivileged user"
        else:
            user = "unchanged (not root)"
        return Isolation(
            user=user,
            network="network namespace without routes"
            if plan.netns
            else "audit hook only (unshare unavailable)",
            filesystem=(
                f"own directory on a private tmpfs ({self.limits.disk_bytes} bytes, this worker's mount namespace"
                " only); writes elsewhere refused by the audit hook and file permissions"
                if plan.tmpfs
                else "own directory; writes elsewhere refused by the audit hook and file permissions"
            ),
            interpreter=plan.python,
        )

    @property
    def base_dir(self) -> Path:
        return self._base

    def job_dirs(self) -> list[Path]:
        """The job directories that exist right now, by a path the host can open: on a private tmpfs they are
        reached through the template's ``/proc/<pid>/root``. Empty between jobs, whatever the jobs did."""
        found: list[Path] = []
        for t in self._templates:
            root = Path(t.jobs)
            if self._plan.tmpfs:
                proc = t.proc
                if proc is None or proc.poll() is not None:
                    continue  # the namespace, and the tmpfs with it, ended with the template
                root = Path(f"/proc/{proc.pid}/root") / t.jobs.lstrip("/")
            with contextlib.suppress(FileNotFoundError):
                found += [p for p in root.iterdir() if p.name.startswith(f"job-{t.slot}-")]
        return sorted(found)

    @property
    def uids(self) -> tuple[int, ...]:
        return tuple(t.uid for t in self._templates if t.uid is not None)

    def run(self, job: SandboxJob) -> SandboxRun:
        if self._closed:
            raise RuntimeError("the sandbox is closed")
        template = self._free.get()
        try:
            with self._lock:
                self._counter += 1
                job_id = self._counter
            try:
                return template.run(job, job_id)
            except OSError as exc:
                template.stop()
                return _infra(len(job.tests), f"sandbox infrastructure error: {exc}")
        finally:
            self._free.put(template)

    def run_many(
        self, jobs: Sequence[SandboxJob], *, on_done: Callable[[], None] | None = None
    ) -> list[SandboxRun]:
        """Run ``jobs`` over the workers; results in order. ``on_done`` is called (from a worker thread) as
        each job finishes, in whatever order they finish."""

        def one(job: SandboxJob) -> SandboxRun:
            run = self.run(job)
            if on_done is not None:
                on_done()
            return run

        if len(jobs) <= 1 or self.workers == 1:
            return [one(j) for j in jobs]
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            return list(pool.map(one, jobs))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for thread in self._starters:
            thread.join()
        for t in self._templates:
            t.close()
        shutil.rmtree(self._base, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


@contextlib.contextmanager
def open_sandbox(limits: SandboxLimits | None = None, *, workers: int | None = None) -> Iterator[Sandbox]:
    box = Sandbox(limits, workers=workers)
    try:
        yield box
    finally:
        box.close()
