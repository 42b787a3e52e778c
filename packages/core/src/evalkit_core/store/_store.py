"""The store: one SQLite file (stdlib ``sqlite3``, WAL) under ``$EVALKIT_HOME`` (default ``.evalkit/`` in the
working directory), with versioned migrations; or, with ``$EVALKIT_STORE`` (or ``evalkit --store``) set to a
``postgresql://`` URL, a PostgreSQL database shared by many processes and machines (psycopg 3, the optional
extra ``evalkit-core[postgres]``; see ``evalkit_core.store._postgres``). Both run the same migrations and the
same SQL; a transaction yields a :class:`Connection` either way.

Every write happens in ``with store.transaction() as db:``, which takes SQLite's write lock up front
(``BEGIN IMMEDIATE``), so a read-check-write inside it is atomic across threads *and* processes sharing the
file.
A transaction commits whole or not at all; a crash mid-write loses nothing already committed (WAL with
``synchronous=NORMAL`` survives a process crash; pass ``durable=True`` for ``FULL``, which also survives power
loss at the price of an fsync per commit).

On PostgreSQL a write transaction takes a store-wide advisory lock first, the same serialisation.

A failure of the file after it was opened (read-only, disk full, a damaged page, another process holding the
write lock too long; on PostgreSQL an unreachable server, a read-only database or a role that may not write)
is a :class:`StoreError` naming the file (or the URL, without its password) and the cause, never a bare
``sqlite3`` or ``psycopg`` error:
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
import time
import uuid
from collections.abc import Generator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, LiteralString, Protocol, Self, cast

from evalkit_core._errors import EvalkitError
from evalkit_core._home import HOME_ENV, evalkit_home
from evalkit_core.store._migrations import MIGRATIONS
from evalkit_core.store._owner import HEARTBEAT_SECONDS, this_process
from evalkit_core.store._postgres import (
    LOCK_KEY,
    is_postgres_url,
    redact_url,
    sqlstate,
    translate,
    translate_ddl,
)

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "HOME_ENV",
    "SCHEMA_VERSION",
    "STORE_ENV",
    "STORE_FILE",
    "Connection",
    "Cursor",
    "Store",
    "StoreError",
    "evalkit_home",
    "store_location",
    "utc_now",
]

STORE_ENV = "EVALKIT_STORE"  # a postgresql:// URL (or a SQLite file path) overriding $EVALKIT_HOME's store
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


class Cursor(Protocol):
    """What a statement returns (``sqlite3.Cursor`` or psycopg's cursor): rows are tuples."""

    @property
    def rowcount(self) -> int: ...
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...
    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """What a transaction yields: ``execute(sql, params)`` with SQLite's ``?`` placeholders, on either dialect."""

    def execute(self, sql: str, parameters: Sequence[Any] = ..., /) -> Cursor: ...


class _PgConnection:
    """A psycopg connection speaking evalkit's SQL (``?`` placeholders; see ``_postgres.translate``)."""

    def __init__(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        self._conn = conn

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> Cursor:
        return self._conn.execute(cast("LiteralString", translate(sql)), tuple(parameters))


# SQLSTATE classes that are the database's or the server's fault, not the code's: connection (08), insufficient
# resources (53), program limits (54), object state (55: lock timeouts), operator intervention (57: shutdown,
# cancel), system (58), and the two ways of not being allowed to write: a read-only transaction (25006) and a
# missing privilege (42501).
_PG_STATES = ("08", "53", "54", "55", "57", "58", "25006", "42501")


def _pg_store_error(where: str, exc: BaseException) -> StoreError | None:
    """A :class:`StoreError` for a psycopg error that is the database's fault, else None."""
    import psycopg

    state = sqlstate(exc)
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if state == "25006":
        return StoreError(f"{where}: the database is read-only ({text}); point {STORE_ENV} at a writable primary")
    if state == "42501":
        return StoreError(f"{where}: the database role may not write here ({text}); grant it or use another role")
    if state.startswith(_PG_STATES) or (not state and isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)):
        return StoreError(f"{where}: cannot use the PostgreSQL store ({text})")
    return None


def store_location(env: Mapping[str, str] | None = None) -> str | None:
    """``$EVALKIT_STORE`` if set (a ``postgresql://`` URL or a SQLite file), else None (the default store)."""
    environ = os.environ if env is None else env
    value = environ.get(STORE_ENV, "").strip()
    return value or None


def sqlite_store_path(home: str | Path | None = None) -> Path | None:
    """The SQLite file :meth:`Store.open` with this ``home`` would open (``$EVALKIT_STORE`` first), or None when
    the store is PostgreSQL."""
    location = store_location()
    if location is not None:
        return None if is_postgres_url(location) else Path(location)
    return (Path(home) if home is not None else evalkit_home()) / STORE_FILE


def store_exists(home: str | Path | None = None) -> bool:
    """Whether :meth:`Store.open` with this ``home`` would open a store that is already there (a PostgreSQL URL
    always counts). A question asked of a directory that has no store yet should not make one to answer it."""
    path = sqlite_store_path(home)
    return path is None or path.is_file()


def utc_now() -> str:
    """Now, UTC, fixed width (``2025-01-02T03:04:05.123456Z``), so text order is time order."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Store:
    """A connection to the store. Thread-safe (one lock around the connection); share one per process.

    ``path`` is a SQLite file, or a ``postgresql://`` URL for a PostgreSQL store (then ``path`` is the URL without
    its password, and ``home`` the directory for files kept beside the store, default ``$EVALKIT_HOME``)."""

    def __init__(
        self,
        path: str | Path,
        *,
        timeout: float = 30.0,
        durable: bool = False,
        home: str | Path | None = None,
    ) -> None:
        self._lock = threading.RLock()
        self._closed = False
        self._owner_id: str | None = None
        self._owner_pid = 0
        self._me = this_process()
        self._heartbeat_stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        self._pg: psycopg.Connection[tuple[Any, ...]] | None = None
        self._pg_wrap: _PgConnection | None = None
        if isinstance(path, str) and is_postgres_url(path):
            self.dialect: Literal["sqlite", "postgresql"] = "postgresql"
            self.path: Path | str = redact_url(path)
            self.home = Path(home) if home is not None else evalkit_home()
            self._open_postgres(path, timeout)
            return
        self.dialect = "sqlite"
        self.path = file = Path(path)
        self.home = Path(home) if home is not None else file.parent
        try:
            file.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"{file}: cannot create the store directory ({exc.strerror})") from None
        try:
            self._db = sqlite3.connect(file, timeout=timeout, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise store_error(file, exc) from None
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
                raise store_error(file, exc) from None
            raise
        except BaseException:
            self._db.close()
            raise

    def _open_postgres(self, url: str, timeout: float) -> None:
        where = str(self.path)
        try:
            import psycopg
        except ImportError:
            raise StoreError(
                f"{where}: a PostgreSQL store needs psycopg; install the extra: pip install 'evalkit-core[postgres]'"
            ) from None
        try:
            conn = psycopg.connect(
                url,
                autocommit=True,
                connect_timeout=max(1, min(int(timeout), 10)),
                application_name="evalkit",
            )
        except psycopg.Error as exc:
            err = _pg_store_error(where, exc)
            text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise (err or StoreError(f"{where}: cannot connect to the PostgreSQL store ({text})")) from None
        except ValueError as exc:  # a malformed URL or option
            raise StoreError(f"{where}: not a usable PostgreSQL URL ({exc})") from None
        self._pg = conn
        self._pg_wrap = _PgConnection(conn)
        try:
            self._migrate()
        except BaseException:
            conn.close()
            raise

    @classmethod
    def open(cls, home: str | Path | None = None, **kwargs: float | bool) -> Store:
        """The store named by ``$EVALKIT_STORE`` (a ``postgresql://`` URL, or a SQLite file), else the SQLite
        store in ``home`` (default ``$EVALKIT_HOME``, else ``.evalkit/`` in the working directory)."""
        base = Path(home) if home is not None else evalkit_home()
        location = store_location()
        if location is not None and is_postgres_url(location):
            return cls(location, home=base, **kwargs)  # pyright: ignore[reportArgumentType]
        if location is not None:
            return cls(Path(location), home=base, **kwargs)  # pyright: ignore[reportArgumentType]
        return cls(base / STORE_FILE, **kwargs)  # pyright: ignore[reportArgumentType]

    def _current_version(self, db: Connection) -> int:
        if self.dialect == "sqlite":
            return int(db.execute("PRAGMA user_version").fetchone()[0])
        (exists,) = db.execute("SELECT to_regclass('schema_migrations') IS NOT NULL").fetchone()
        if not exists:
            return 0
        return int(db.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()[0])

    def _migrate(self) -> None:
        pg = self.dialect == "postgresql"
        with self.transaction() as db:
            if pg:
                (read_only,) = db.execute("SHOW transaction_read_only").fetchone()
                if read_only == "on":
                    raise StoreError(
                        f"{self.path}: the database is read-only (transaction_read_only is on); point "
                        f"{STORE_ENV} at a writable primary"
                    )
            current = self._current_version(db)
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
                if pg:
                    assert self._pg is not None
                    for statement in m.postgres or tuple(translate_ddl(s) for s in m.statements):
                        self._pg.execute(cast("LiteralString", statement))
                else:
                    for statement in m.statements:
                        db.execute(statement)
                db.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                    (m.version, m.name, utc_now()),
                )
                if not pg:
                    db.execute(f"PRAGMA user_version = {m.version}")
            if pg:
                (writable,) = db.execute(
                    "SELECT has_table_privilege('budget', 'UPDATE') AND has_table_privilege('model_calls', 'INSERT')"
                ).fetchone()
                if not writable:
                    raise StoreError(
                        f"{self.path}: the database role may not write the store's tables; grant it INSERT, "
                        "UPDATE and DELETE on them or use another role"
                    )
                return
            broken = db.execute("PRAGMA foreign_key_check").fetchall() if applied else []
            if broken:
                raise StoreError(
                    f"{self.path}: migration left dangling references ({broken[:3]}); not changed"
                )

    def clock(self, db: Connection) -> float:
        """Now, in seconds since the epoch, on the store's clock: the PostgreSQL server's (one clock for every
        machine sharing the store), or this machine's for SQLite."""
        if self.dialect == "postgresql":
            return float(db.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()[0])
        return time.time()

    @property
    def schema_version(self) -> int:
        with self.snapshot() as db:
            return self._current_version(db)

    def _in_transaction(self) -> bool:
        if self._pg is not None:
            import psycopg

            return self._pg.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
        return self._db.in_transaction

    def _rollback(self) -> None:
        if self._pg is not None:
            try:
                if self._in_transaction():
                    self._pg.execute("ROLLBACK")
            except Exception as exc:
                log.debug("rollback of %s failed: %s", self.path, exc)
            return
        if self._db.in_transaction:  # SQLite rolls back by itself after some errors (disk full, I/O)
            try:
                self._db.execute("ROLLBACK")
            except sqlite3.Error as exc:  # nothing more to undo; the original error is what matters
                log.debug("rollback of %s failed: %s", self.path, exc)

    def _translate_error(self, exc: BaseException) -> StoreError | None:
        """The :class:`StoreError` an error of the database (not of the code) stands for, else None."""
        if isinstance(exc, sqlite3.Error):
            return store_error(Path(self.path), exc) if _is_file_error(exc) else None
        if self._pg is not None and type(exc).__module__.startswith("psycopg"):
            return _pg_store_error(str(self.path), exc)
        return None

    def _begin(self, sql: str) -> Connection:
        try:
            if self._pg is not None:
                assert self._pg_wrap is not None
                self._pg.execute(cast("LiteralString", sql))
                return self._pg_wrap
            self._db.execute(sql)
        except Exception as exc:
            err = self._translate_error(exc)
            if err is not None:
                raise err from None
            raise
        return self._db

    @contextlib.contextmanager
    def transaction(self) -> Generator[Connection]:
        """A write transaction holding the store's write lock from the start (SQLite's ``BEGIN IMMEDIATE``, or
        PostgreSQL's store-wide advisory lock); commits on success, rolls back on error. A failure of the
        database (read-only, disk full, damaged, busy, unreachable) becomes a :class:`StoreError`."""
        with self._lock:
            db = self._begin(
                f"BEGIN; SELECT pg_advisory_xact_lock({LOCK_KEY})" if self._pg is not None else "BEGIN IMMEDIATE"
            )
            try:
                yield db
            except BaseException as exc:
                self._rollback()
                err = self._translate_error(exc)
                if err is not None:
                    raise err from None
                raise
            try:
                if self._pg is not None:
                    self._pg.execute("COMMIT")
                else:
                    self._db.execute("COMMIT")
            except Exception as exc:
                self._rollback()
                err = self._translate_error(exc)
                if err is not None:
                    raise err from None
                raise

    @contextlib.contextmanager
    def snapshot(self) -> Generator[Connection]:
        """A read transaction: every query inside sees one consistent state."""
        with self._lock:
            db = self._begin(
                "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY" if self._pg is not None else "BEGIN DEFERRED"
            )
            try:
                yield db
            except Exception as exc:
                err = self._translate_error(exc)
                if err is not None:
                    raise err from None
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
        if self._in_transaction():
            (self._pg_wrap or self._db).execute(sql, args)
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
            if self._pg is not None:
                self._pg.close()
            else:
                self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
