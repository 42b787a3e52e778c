"""The evalkit store: SQLite (WAL) under ``$EVALKIT_HOME``, versioned migrations, transactional writes.

Tables: ``model_calls`` and ``call_attempts`` (every model call and every request it made), ``budget`` and
``budget_ledger`` and ``budget_reservations`` (the spending cap, see ``evalkit_core.models``), ``registries``
(registry content by digest), and ``campaigns``, ``rollouts``, ``counterexamples`` for later issues.
"""

from evalkit_core.store._migrations import MIGRATIONS, Migration
from evalkit_core.store._store import (
    HOME_ENV,
    SCHEMA_VERSION,
    STORE_FILE,
    Store,
    StoreError,
    evalkit_home,
    utc_now,
)

__all__ = [
    "HOME_ENV",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "STORE_FILE",
    "Migration",
    "Store",
    "StoreError",
    "evalkit_home",
    "utc_now",
]
