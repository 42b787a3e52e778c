"""A throwaway PostgreSQL cluster for tests and benchmarks: ``initdb`` in a fresh temp directory, a server that
listens on a Unix socket in that directory only (``listen_addresses=''``: no TCP port at all), stopped with
``pg_ctl stop`` by whoever started it.

PostgreSQL refuses to run as root; when the tests run as root the cluster's files belong to ``nobody`` and
``initdb``/``pg_ctl`` run under ``setpriv`` as that user. The binaries come from Debian's packages
(``apt-get install postgresql``: ``/usr/lib/postgresql/<version>/bin``) or ``$PATH``; :func:`find_bin` returns
None where they are absent and the tests that need them skip with that reason.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path
from typing import Self

SKIP_REASON = "PostgreSQL binaries (initdb, pg_ctl) not found: apt-get install postgresql"


def find_bin() -> Path | None:
    """The directory holding initdb and pg_ctl, or None."""
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0, reverse=True)
    for d in candidates:
        if (d / "initdb").exists() and (d / "pg_ctl").exists():
            return d
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    return None


def _as_user() -> tuple[list[str], int | None, int | None]:
    """The command prefix that drops root (``setpriv`` as nobody), with that uid and gid; nothing otherwise."""
    if os.geteuid() != 0:
        return [], None, None
    user = pwd.getpwnam("nobody")
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise RuntimeError("running as root and setpriv (util-linux) is missing: cannot start PostgreSQL")
    return [setpriv, f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups"], user.pw_uid, user.pw_gid


class Cluster:
    """One running throwaway cluster (``start()`` / ``stop()``, or a context manager)."""

    def __init__(self, bindir: Path, *, fsync: bool = False) -> None:
        self.bindir = bindir
        self.fsync = fsync
        self.dir = Path(tempfile.mkdtemp(prefix="evalkit-pg-", dir="/tmp"))
        self.data = self.dir / "data"
        self.user = "evalkit"
        self._prefix, self._uid, self._gid = _as_user()
        self._started = False

    def _run(self, *args: str) -> None:
        cmd = [*self._prefix, *args]
        got = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120)
        if got.returncode != 0:
            raise RuntimeError(f"{' '.join(args[:2])} failed ({got.returncode}): {got.stderr.strip()[-800:]}")

    def start(self) -> Self:
        if self._uid is not None:
            os.chown(self.dir, self._uid, self._gid or 0)
        self.dir.chmod(0o755)
        self._run(
            str(self.bindir / "initdb"), "-D", str(self.data), "-U", self.user, "--auth=trust",
            "--no-sync", "--encoding=UTF8", "--locale=C",
        )  # fmt: skip
        opts = (
            f"-c listen_addresses='' -c unix_socket_directories='{self.dir}' -c max_connections=40"
            " -c shared_buffers=16MB"
            + ("" if self.fsync else " -c fsync=off -c synchronous_commit=off -c full_page_writes=off")
        )
        self._run(
            str(self.bindir / "pg_ctl"), "-D", str(self.data), "-o", opts, "-l", str(self.dir / "server.log"),
            "-w", "-t", "60", "start",
        )  # fmt: skip
        self._started = True
        return self

    @property
    def pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql:///{dbname}?host={self.dir}&user={self.user}"

    def create_database(self) -> str:
        """A fresh, empty database; returns its URL."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:16]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")  # pyright: ignore[reportArgumentType]
        return self.url(name)

    def create_schema(self) -> str:
        """A fresh, empty schema in the cluster's one database (much cheaper than a database: no files are
        copied); returns a URL whose search_path is that schema."""
        import psycopg

        name = "s_" + uuid.uuid4().hex[:16]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}")  # pyright: ignore[reportArgumentType]
        return self.url() + f"&options=-csearch_path%3D{name}"

    def drop_schema(self, url: str) -> None:
        import psycopg

        name = url.rsplit("%3D", 1)[1]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")  # pyright: ignore[reportArgumentType]

    def drop_database(self, url: str) -> None:
        import psycopg

        name = url.split("?", 1)[0].rsplit("/", 1)[1]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")  # pyright: ignore[reportArgumentType]

    def stop(self) -> None:
        if self._started:
            self._started = False
            try:
                self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
            except (RuntimeError, subprocess.TimeoutExpired):
                pid = self.pid  # our own postmaster, by its pid
                if pid is not None:
                    with_suppress_kill(pid)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def with_suppress_kill(pid: int) -> None:
    import signal

    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGQUIT)
