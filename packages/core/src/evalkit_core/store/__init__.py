"""The evalkit store: SQLite (WAL) under ``$EVALKIT_HOME``, or PostgreSQL when ``$EVALKIT_STORE`` is a
``postgresql://`` URL (the optional extra ``evalkit-core[postgres]``); one migration history, transactional writes.

Tables: ``model_calls`` and ``call_attempts`` (every model call and every request it made), ``budget`` and
``budget_ledger`` and ``budget_reservations`` (the spending cap, see ``evalkit_core.models``), ``registries``
(registry content by digest), ``owners`` (the live processes holding reservations and leases) and
``campaign_leases``, and ``campaigns``, ``rollouts``, ``counterexamples``.
"""

from evalkit_core.store._migrations import MIGRATIONS, Migration
from evalkit_core.store._owner import LEASE_SECONDS, Process, is_alive, this_process
from evalkit_core.store._store import (
    HOME_ENV,
    SCHEMA_VERSION,
    STORE_ENV,
    STORE_FILE,
    Connection,
    Cursor,
    Store,
    StoreError,
    evalkit_home,
    sqlite_store_path,
    store_exists,
    store_location,
    utc_now,
)

__all__ = [
    "HOME_ENV",
    "LEASE_SECONDS",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "STORE_ENV",
    "STORE_FILE",
    "Connection",
    "Cursor",
    "Migration",
    "Process",
    "Store",
    "StoreError",
    "evalkit_home",
    "is_alive",
    "sqlite_store_path",
    "store_exists",
    "store_location",
    "this_process",
    "utc_now",
]
