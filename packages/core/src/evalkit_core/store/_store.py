"""The store: one SQLite file (stdlib ``sqlite3``, WAL) under ``$EVALKIT_HOME`` (default ``.evalkit/`` in the
working directory), with versioned migrations.

Every write happens in ``with store.transaction() as db:``, which takes SQLite's write lock up front
(``BEGIN IMMEDIATE``), so a read-check-write inside it is atomic across threads *and* processes sharing the
file.
A transaction commits whole or not at all; a crash mid-write loses nothing already committed (WAL with
``synchronous=NORMAL`` survives a process crash; pass ``durable=True`` for ``FULL``, which also survives power
loss at the price of an fsync per commit).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import sqlite3
import threading
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import Self

from evalkit_core._errors import EvalkitError
from evalkit_core.store._migrations import MIGRATIONS

__all__ = ["HOME_ENV", "SCHEMA_VERSION", "STORE_FILE", "Store", "StoreError", "evalkit_home", "utc_now"]

HOME_ENV = "EVALKIT_HOME"
STORE_FILE = "evalkit.sqlite3"
SCHEMA_VERSION = MIGRATIONS[-1].version


class StoreError(EvalkitError):
    """The store file cannot be opened, is not an evalkit store, or was written by a newer evalkit."""


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
            self._db = sqlite3.connect(
                self.path, timeout=timeout, isolation_level=None, check_same_thread=False
            )
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"{self.path}: cannot open the store ({exc})") from None
        self._lock = threading.RLock()
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise StoreError(f"{self.path}: not an evalkit store or damaged ({exc})") from None
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
            for m in MIGRATIONS:
                if m.version <= current:
                    continue
                for statement in m.statements:
                    db.execute(statement)
                db.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                    (m.version, m.name, utc_now()),
                )
                db.execute(f"PRAGMA user_version = {m.version}")

    @property
    def schema_version(self) -> int:
        with self._lock:
            return int(self._db.execute("PRAGMA user_version").fetchone()[0])

    @contextlib.contextmanager
    def transaction(self) -> Generator[sqlite3.Connection]:
        """A write transaction holding SQLite's write lock from the start; commits on success, rolls back on
        error."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    @contextlib.contextmanager
    def snapshot(self) -> Generator[sqlite3.Connection]:
        """A read transaction: every query inside sees one consistent state."""
        with self._lock:
            self._db.execute("BEGIN DEFERRED")
            try:
                yield self._db
            finally:
                self._db.execute("ROLLBACK")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
