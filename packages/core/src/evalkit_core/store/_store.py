"""The store: one SQLite file (stdlib ``sqlite3``, WAL) under ``$EVALKIT_HOME`` (default ``.evalkit/`` in the
working directory), with versioned migrations.

Every write happens in ``with store.transaction() as db:``, which takes SQLite's write lock up front
(``BEGIN IMMEDIATE``), so a read-check-write inside it is atomic across threads *and* processes sharing the
file.
A transaction commits whole or not at all; a crash mid-write loses nothing already committed (WAL with
``synchronous=NORMAL`` survives a process crash; pass ``durable=True`` for ``FULL``, which also survives power
loss at the price of an fsync per commit).

A failure of the file after it was opened (read-only, disk full, a damaged page, another process holding the
write lock too long) is a :class:`StoreError` naming the file and the cause, never a bare ``sqlite3`` error:
the CLI prints it as one line and exits 2. A transaction that fails is rolled back whole.

Each open store that takes part in the budget or leases a campaign registers an *owner* (see
``evalkit_core.store._owner``): a row naming this process, refreshed by a heartbeat thread while the store is
open, so another process can tell a live reservation from one left by a crash.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import sqlite3
import threading
import uuid
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import Self

from evalkit_core._errors import EvalkitError
from evalkit_core.store._migrations import MIGRATIONS
from evalkit_core.store._owner import HEARTBEAT_SECONDS, this_process

__all__ = ["HOME_ENV", "SCHEMA_VERSION", "STORE_FILE", "Store", "StoreError", "evalkit_home", "utc_now"]

HOME_ENV = "EVALKIT_HOME"
STORE_FILE = "evalkit.sqlite3"
SCHEMA_VERSION = MIGRATIONS[-1].version


log = logging.getLogger("evalkit_core.store")


class StoreError(EvalkitError):
    """The store file cannot be opened or written (read-only, disk full, damaged, busy), is not an evalkit
    store, or was written by a newer evalkit. The message names the file and the cause."""


# Errors that are the file's fault, not the code's (SQLite's primary result codes). Everything else (a SQL
# error such as "no such table", a constraint, a closed connection) is a bug or a constraint doing its job and
# keeps its own type.
_FILE_CODES = (
    "SQLITE_READONLY", "SQLITE_FULL", "SQLITE_CORRUPT", "SQLITE_NOTADB", "SQLITE_IOERR", "SQLITE_BUSY",
    "SQLITE_LOCKED", "SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_NOLFS", "SQLITE_PROTOCOL",
)  # fmt: skip


def _is_file_error(exc: BaseException) -> bool:
    name = getattr(exc, "sqlite_errorname", None)
    if isinstance(name, str):
        return name.startswith(_FILE_CODES)
    # no code (an older sqlite3 module): judge by the message
    text = str(exc).lower()
    return isinstance(exc, sqlite3.DatabaseError) and any(
        w in text for w in ("readonly", "disk", "malformed", "not a database", "locked", "unable to open")
    )


def _cause(path: Path, exc: sqlite3.Error) -> str:
    """The cause of a file-level SQLite error in words a user can act on."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    text = str(exc)
    low = text.lower()
    if name.startswith("SQLITE_READONLY") or "readonly" in low or "read-only" in low:
        return f"the store is read-only ({text}); check the permissions of the file and of {path.parent}"
    if name.startswith("SQLITE_FULL") or "disk is full" in low:
        return f"the disk is full ({text}); free space and run the command again"
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "malformed" in low or "not a database" in low:
        return (
            f"not an evalkit store, or damaged ({text}); restore it from a copy or move it aside to start a "
            "new one"
        )
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in low:
        return f"the store is busy ({text}): another process held its write lock too long"
    if name.startswith("SQLITE_IOERR") or "i/o error" in low:
        return f"the disk failed to read or write ({text}); it may be full or failing"
    if name.startswith("SQLITE_CANTOPEN") or "unable to open" in low:
        writable = os.access(path.parent, os.W_OK)
        why = "" if writable else f"; {path.parent} is not writable (read-only)"
        return f"cannot open the store file ({text}){why}"
    return f"store error ({text})"


def store_error(path: Path, exc: sqlite3.Error) -> StoreError:
    return StoreError(f"{path}: {_cause(path, exc)}")


def utc_now() -> str:
    """Now, UTC, fixed width (``2025-01-02T03:04:05.123456Z``), so text order is time order."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def evalkit_home(env: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if env is None else env
    home = environ.get(HOME_ENV)
    return Path(home) if home else Path.cwd() / ".evalkit"


class Store:
    """A connection to the store. Thread-safe (one lock around the connection); share one per process."""

    def __init__(self, path: str | Path, *, timeout: float = 30.0, durable: bool = False) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"{self.path}: cannot create the store directory ({exc.strerror})") from None
        try:
            self._db = sqlite3.connect(
                self.path, timeout=timeout, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise store_error(self.path, exc) from None
        self._lock = threading.RLock()
        self._closed = False
        self._owner_id: str | None = None
        self._owner_pid = 0
        self._me = this_process()
        self._heartbeat_stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
            self._db.execute("PRAGMA foreign_keys=OFF")  # a migration may rebuild a table; checked below
            self._migrate()
            self._db.execute("PRAGMA foreign_keys=ON")
        except StoreError:
            self._db.close()
            raise
        except sqlite3.Error as exc:
            self._db.close()
            if _is_file_error(exc):
                raise store_error(self.path, exc) from None
            raise
        except BaseException:
            self._db.close()
            raise

    @classmethod
    def open(cls, home: str | Path | None = None, **kwargs: float | bool) -> Store:
        """The store in ``home`` (default ``$EVALKIT_HOME``, else ``.evalkit/`` in the working directory)."""
        base = Path(home) if home is not None else evalkit_home()
        return cls(base / STORE_FILE, **kwargs)  # pyright: ignore[reportArgumentType]

    def _migrate(self) -> None:
        with self.transaction() as db:
            current = int(db.execute("PRAGMA user_version").fetchone()[0])
            if current > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path}: schema version {current} is newer than this evalkit understands "
                    f"({SCHEMA_VERSION}); upgrade evalkit"
                )
            applied = False
            for m in MIGRATIONS:
                if m.version <= current:
                    continue
                applied = True
                for statement in m.statements:
                    db.execute(statement)
                db.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                    (m.version, m.name, utc_now()),
                )
                db.execute(f"PRAGMA user_version = {m.version}")
            broken = db.execute("PRAGMA foreign_key_check").fetchall() if applied else []
            if broken:
                raise StoreError(
                    f"{self.path}: migration left dangling references ({broken[:3]}); not changed"
                )

    @property
    def schema_version(self) -> int:
        with self._lock:
            return int(self._db.execute("PRAGMA user_version").fetchone()[0])

    def _rollback(self) -> None:
        if self._db.in_transaction:  # SQLite rolls back by itself after some errors (disk full, I/O)
            try:
                self._db.execute("ROLLBACK")
            except sqlite3.Error as exc:  # nothing more to undo; the original error is what matters
                log.debug("rollback of %s failed: %s", self.path, exc)

    @contextlib.contextmanager
    def transaction(self) -> Generator[sqlite3.Connection]:
        """A write transaction holding SQLite's write lock from the start; commits on success, rolls back on
        error. A file-level failure (read-only, disk full, damaged, busy) becomes a :class:`StoreError`."""
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                if _is_file_error(exc):
                    raise store_error(self.path, exc) from None
                raise
            try:
                yield self._db
            except sqlite3.Error as exc:
                self._rollback()
                if _is_file_error(exc):
                    raise store_error(self.path, exc) from None
                raise
            except BaseException:
                self._rollback()
                raise
            try:
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback()
                if _is_file_error(exc):
                    raise store_error(self.path, exc) from None
                raise

    @contextlib.contextmanager
    def snapshot(self) -> Generator[sqlite3.Connection]:
        """A read transaction: every query inside sees one consistent state."""
        with self._lock:
            try:
                self._db.execute("BEGIN DEFERRED")
            except sqlite3.Error as exc:
                if _is_file_error(exc):
                    raise store_error(self.path, exc) from None
                raise
            try:
                yield self._db
            except sqlite3.Error as exc:
                if _is_file_error(exc):
                    raise store_error(self.path, exc) from None
                raise
            finally:
                self._rollback()

    # ------------------------------------------------------------------------------------------ owner

    @property
    def owner_id(self) -> str:
        """This process's owner row in the store (registered on first use, kept fresh by a heartbeat thread
        until :meth:`close`). Reservations and campaign leases name it."""
        pid = os.getpid()
        with self._lock:
            if self._owner_id is not None and self._owner_pid == pid:
                return self._owner_id
            self._me = this_process()
            owner_id = uuid.uuid4().hex
            self._write_owner(owner_id, utc_now())
            self._owner_id, self._owner_pid = owner_id, pid
            self._heartbeat_stop.clear()
            self._heartbeat = threading.Thread(
                target=self._beat, args=(owner_id,), name="evalkit-store-heartbeat", daemon=True
            )
            self._heartbeat.start()
            return owner_id

    def _write_owner(self, owner_id: str, now: str) -> None:
        """Insert (or refresh) this store's owner row; inside the caller's transaction if one is open."""
        me = self._me
        sql = (
            "INSERT INTO owners (owner_id, host, boot_id, pid, start_ticks, started_at, heartbeat_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (owner_id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at"
        )
        args = (owner_id, me.host, me.boot_id, me.pid, me.start_ticks, now, now)
        if self._db.in_transaction:
            self._db.execute(sql, args)
            return
        with self.transaction() as db:
            db.execute(sql, args)

    def _beat(self, owner_id: str) -> None:
        while not self._heartbeat_stop.wait(HEARTBEAT_SECONDS):
            try:
                with self._lock:
                    if self._closed:
                        return
                    self._write_owner(owner_id, utc_now())
            except (StoreError, sqlite3.Error) as exc:  # the next beat tries again; the lease is generous
                log.warning("store heartbeat failed: %s", exc)

    def _drop_owner(self) -> None:
        """Drop this store's owner row if nothing names it any more (the heartbeat has stopped)."""
        owner_id, self._owner_id = self._owner_id, None
        if owner_id is None or self._owner_pid != os.getpid():
            return
        try:
            with self.transaction() as db:
                db.execute(
                    "DELETE FROM owners WHERE owner_id = ?"
                    " AND NOT EXISTS (SELECT 1 FROM budget_reservations WHERE owner_id = ?)"
                    " AND NOT EXISTS (SELECT 1 FROM campaign_leases WHERE owner_id = ?)",
                    (owner_id, owner_id, owner_id),
                )
        except (StoreError, sqlite3.Error) as exc:  # a leftover row is harmless: it is reaped once dead
            log.debug("could not drop owner row %s: %s", owner_id, exc)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        if self._closed:
            return
        self._heartbeat_stop.set()  # outside the lock: a beat in progress needs it to finish
        beat = self._heartbeat
        if beat is not None and beat is not threading.current_thread():
            beat.join(timeout=5)
        with self._lock:
            if self._closed:
                return
            self._heartbeat = None
            self._drop_owner()
            self._closed = True
            self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
