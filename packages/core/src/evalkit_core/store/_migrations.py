"""Versioned schema migrations, one history for both dialects. On SQLite ``PRAGMA user_version`` holds the
version; on PostgreSQL the highest row of ``schema_migrations`` does; each step leaves a row there either way.
A step's ``statements`` are SQLite's; PostgreSQL runs them through ``_postgres.translate_ddl`` (types), or runs
the step's own ``postgres`` statements where the two must differ (SQLite rebuilds a table to change a CHECK
constraint; PostgreSQL alters it in place). Both must leave the same tables, columns (in the same order),
constraints and indexes: ``tests/core/store/test_store_dialects.py`` holds them equal.
Steps are append-only: never edit a released one, add the next."""

from __future__ import annotations

import attrs

__all__ = ["MIGRATIONS", "Migration"]


@attrs.frozen
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]
    postgres: tuple[str, ...] = ()  # PostgreSQL's statements when translating SQLite's is not enough


_V1 = (
    """CREATE TABLE schema_migrations (
        version INTEGER PRIMARY KEY,
        name TEXT NOT NULL,
        applied_at TEXT NOT NULL
    )""",
    # The merged registry content under its digest, so a recorded cost can be recomputed later.
    """CREATE TABLE registries (
        digest TEXT PRIMARY KEY,
        content TEXT NOT NULL,
        first_seen TEXT NOT NULL
    )""",
    # One row per model call, inserted as 'pending' before the first request and finished in the same
    # transaction that settles its last attempt. Costs are decimal strings (exact), never REAL.
    """CREATE TABLE model_calls (
        call_id TEXT PRIMARY KEY,
        started_at TEXT NOT NULL,
        finished_at TEXT,
        model_id TEXT NOT NULL,
        provider TEXT NOT NULL,
        api_model TEXT NOT NULL,
        reported_model TEXT,
        simulated INTEGER NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('pending', 'ok', 'error', 'refused')),
        error TEXT,
        attempts INTEGER NOT NULL,
        request_digest TEXT NOT NULL,
        response_digest TEXT,
        registry_digest TEXT NOT NULL REFERENCES registries(digest),
        input_tokens INTEGER,
        output_tokens INTEGER,
        cache_read_tokens INTEGER,
        cache_write_tokens INTEGER,
        cost TEXT,
        charged TEXT NOT NULL,
        stop_reason TEXT
    )""",
    "CREATE INDEX model_calls_started_at ON model_calls(started_at)",
    """CREATE TABLE call_attempts (
        call_id TEXT NOT NULL REFERENCES model_calls(call_id),
        attempt INTEGER NOT NULL,
        started_at TEXT NOT NULL,
        elapsed_ms REAL NOT NULL,
        status_code INTEGER,
        outcome TEXT NOT NULL CHECK (outcome IN ('ok', 'retry', 'error')),
        error TEXT,
        charged TEXT NOT NULL,
        PRIMARY KEY (call_id, attempt)
    )""",
    # The budget: one row of running totals, changed only together with a ledger row in one transaction.
    """CREATE TABLE budget (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        cap TEXT,
        spent TEXT NOT NULL,
        reserved TEXT NOT NULL,
        updated_at TEXT NOT NULL
    )""",
    "INSERT INTO budget (id, cap, spent, reserved, updated_at) VALUES (1, NULL, '0', '0', strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
    """CREATE TABLE budget_reservations (
        reservation_id TEXT PRIMARY KEY,
        call_id TEXT NOT NULL,
        model_id TEXT NOT NULL,
        amount TEXT NOT NULL,
        created_at TEXT NOT NULL,
        pid INTEGER NOT NULL
    )""",
    """CREATE TABLE budget_ledger (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        at TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('reserve', 'settle', 'refuse', 'set_cap', 'release')),
        call_id TEXT,
        model_id TEXT,
        amount TEXT NOT NULL,
        spent_after TEXT NOT NULL,
        reserved_after TEXT NOT NULL,
        cap_after TEXT,
        note TEXT
    )""",
    # Campaigns (evalkit_router): ``campaign_id`` is the campaign's name; ``config_digest`` the digest of its
    # identity (what decides its results); ``config`` canonical JSON {identity, settings, file: {path, digest,
    # text}, registry: {digest, sources}}; ``status`` running | halted | done (a killed run stays running).
    """CREATE TABLE campaigns (
        campaign_id TEXT PRIMARY KEY,
        created_at TEXT NOT NULL,
        name TEXT UNIQUE,
        config_digest TEXT NOT NULL,
        config TEXT NOT NULL,
        status TEXT NOT NULL
    )""",
    # One row per rollout, written the moment its completion arrives (status 'completed', ``completion`` the
    # JSON of the model layer's Completion, ``cost`` its exact Decimal as text) and updated once graded
    # (status 'graded', ``result`` the canonical verdict JSON). ``rollout_key`` = digest of (campaign name,
    # model id, task id, task digest, sample index).
    """CREATE TABLE rollouts (
        rollout_key TEXT PRIMARY KEY,
        campaign_id TEXT NOT NULL REFERENCES campaigns(campaign_id),
        task_id TEXT NOT NULL,
        task_digest TEXT NOT NULL,
        model_id TEXT NOT NULL,
        sample INTEGER NOT NULL,
        call_id TEXT REFERENCES model_calls(call_id),
        status TEXT NOT NULL CHECK (status IN ('completed', 'graded')),
        completion TEXT NOT NULL,
        cost TEXT NOT NULL,
        result TEXT,
        infra_error TEXT,
        created_at TEXT NOT NULL,
        graded_at TEXT,
        UNIQUE (campaign_id, task_id, model_id, sample)
    )""",
    # The adversary's bank (evalkit.grading._adversary): one row per (task, input digest). ``input`` is the JSON
    # {"args": [...], "kwargs": {...}}, ``expected`` the reference's JSON result (never NaN), ``found_by`` the
    # proposer, ``candidate_digest`` the candidate it broke, ``actual`` what that candidate did.
    """CREATE TABLE counterexamples (
        counterexample_id TEXT PRIMARY KEY,
        task_id TEXT NOT NULL,
        task_digest TEXT NOT NULL,
        input TEXT NOT NULL,
        input_digest TEXT NOT NULL,
        expected TEXT NOT NULL,
        category TEXT NOT NULL,
        hint TEXT NOT NULL,
        found_by TEXT NOT NULL,
        candidate_digest TEXT NOT NULL,
        actual TEXT NOT NULL,
        created_at TEXT NOT NULL,
        UNIQUE (task_id, input_digest)
    )""",
)

# Version 2: money that holds under faults. Tables whose CHECK constraints grow are rebuilt (SQLite cannot
# alter a constraint): the store runs migrations with foreign keys off and checks them before committing.
_V2 = (
    # Who holds a reservation or a campaign lease: one row per open store connection of a live process. A
    # process is identified by host, boot id, pid and the pid's start time (``/proc/<pid>/stat`` field 22), so
    # a reused pid is not mistaken for its predecessor; ``heartbeat_at`` is refreshed while the store is open
    # and is what decides for an owner on another host.
    """CREATE TABLE owners (
        owner_id TEXT PRIMARY KEY,
        host TEXT NOT NULL,
        boot_id TEXT NOT NULL,
        pid INTEGER NOT NULL,
        start_ticks INTEGER NOT NULL,
        started_at TEXT NOT NULL,
        heartbeat_at TEXT NOT NULL
    )""",
    "ALTER TABLE budget_reservations ADD COLUMN owner_id TEXT",
    "ALTER TABLE budget_reservations ADD COLUMN attempt INTEGER NOT NULL DEFAULT 1",
    # model_calls: status 'unknown' (the process died while a request was in flight: charged at its worst
    # case); ``label`` (who made the call, e.g. ``campaign:NAME``), ``worst_case`` (the worst case of one
    # attempt, what each reservation held), ``anomaly`` (why a reply was not taken at its word), ``invoiced``
    # (the invoice export an unknown outcome was settled from), ``owner_id`` (the process making it).
    """CREATE TABLE model_calls_v2 (
        call_id TEXT PRIMARY KEY,
        started_at TEXT NOT NULL,
        finished_at TEXT,
        model_id TEXT NOT NULL,
        provider TEXT NOT NULL,
        api_model TEXT NOT NULL,
        reported_model TEXT,
        simulated INTEGER NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('pending', 'ok', 'error', 'refused', 'unknown')),
        error TEXT,
        attempts INTEGER NOT NULL,
        request_digest TEXT NOT NULL,
        response_digest TEXT,
        registry_digest TEXT NOT NULL REFERENCES registries(digest),
        input_tokens INTEGER,
        output_tokens INTEGER,
        cache_read_tokens INTEGER,
        cache_write_tokens INTEGER,
        cost TEXT,
        charged TEXT NOT NULL,
        stop_reason TEXT,
        label TEXT,
        worst_case TEXT,
        anomaly TEXT,
        invoiced TEXT,
        owner_id TEXT
    )""",
    (
        "INSERT INTO model_calls_v2 (call_id, started_at, finished_at, model_id, provider, api_model, reported_model,"
        " simulated, status, error, attempts, request_digest, response_digest, registry_digest, input_tokens,"
        " output_tokens, cache_read_tokens, cache_write_tokens, cost, charged, stop_reason)"
        " SELECT call_id, started_at, finished_at, model_id, provider, api_model, reported_model, simulated, status,"
        " error, attempts, request_digest, response_digest, registry_digest, input_tokens, output_tokens,"
        " cache_read_tokens, cache_write_tokens, cost, charged, stop_reason FROM model_calls"
    ),
    "DROP TABLE model_calls",
    "ALTER TABLE model_calls_v2 RENAME TO model_calls",
    "CREATE INDEX model_calls_started_at ON model_calls(started_at)",
    "CREATE INDEX model_calls_label ON model_calls(label)",
    "CREATE INDEX model_calls_pending ON model_calls(status) WHERE status = 'pending'",
    """CREATE TABLE call_attempts_v2 (
        call_id TEXT NOT NULL REFERENCES model_calls(call_id),
        attempt INTEGER NOT NULL,
        started_at TEXT NOT NULL,
        elapsed_ms REAL NOT NULL,
        status_code INTEGER,
        outcome TEXT NOT NULL CHECK (outcome IN ('ok', 'retry', 'error', 'unknown')),
        error TEXT,
        charged TEXT NOT NULL,
        PRIMARY KEY (call_id, attempt)
    )""",
    "INSERT INTO call_attempts_v2 SELECT * FROM call_attempts",
    "DROP TABLE call_attempts",
    "ALTER TABLE call_attempts_v2 RENAME TO call_attempts",
    # ledger kinds: 'unknown' (a dead owner's reservation charged at its worst case), 'invoice' (an unknown
    # outcome settled from the provider's invoice export: amount is the correction, never positive).
    """CREATE TABLE budget_ledger_v2 (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        at TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('reserve', 'settle', 'refuse', 'set_cap', 'release', 'unknown', 'invoice')),
        call_id TEXT,
        model_id TEXT,
        amount TEXT NOT NULL,
        spent_after TEXT NOT NULL,
        reserved_after TEXT NOT NULL,
        cap_after TEXT,
        note TEXT
    )""",
    "INSERT INTO budget_ledger_v2 SELECT * FROM budget_ledger",
    "DROP TABLE budget_ledger",
    "ALTER TABLE budget_ledger_v2 RENAME TO budget_ledger",
    "CREATE INDEX budget_ledger_call ON budget_ledger(call_id)",
    # One runner per campaign: the lease names its owner (see owners).
    """CREATE TABLE campaign_leases (
        campaign_id TEXT PRIMARY KEY,
        owner_id TEXT NOT NULL,
        acquired_at TEXT NOT NULL
    )""",
    # a rollout whose answer came with unusable or impossible usage keeps the answer, flagged
    "ALTER TABLE rollouts ADD COLUMN anomaly TEXT",
)

# Version 3: what each stored verdict was graded under, so a rewards export can use it without grading again and
# refuse it when it no longer matches: the verifier settings digest, the task bank digest (of the campaign's
# selection) and the sandbox isolation in effect (``Isolation.label``). Rows graded before stay NULL there (an
# export names them and asks for --regrade).
_V3 = (
    "ALTER TABLE rollouts ADD COLUMN settings_digest TEXT",
    "ALTER TABLE rollouts ADD COLUMN bank_digest TEXT",
    "ALTER TABLE rollouts ADD COLUMN isolation TEXT",
)

# Version 2 on PostgreSQL: the same tables and columns, altered in place (new columns go last, as the SQLite
# rebuild puts them; a column CHECK constraint is named <table>_<column>_check by PostgreSQL).
_V2_POSTGRES = (
    _V2[0].replace("INTEGER", "BIGINT"),  # owners
    "ALTER TABLE budget_reservations ADD COLUMN owner_id TEXT",
    "ALTER TABLE budget_reservations ADD COLUMN attempt BIGINT NOT NULL DEFAULT 1",
    "ALTER TABLE model_calls DROP CONSTRAINT model_calls_status_check",
    (
        "ALTER TABLE model_calls ADD CONSTRAINT model_calls_status_check"
        " CHECK (status IN ('pending', 'ok', 'error', 'refused', 'unknown'))"
    ),
    "ALTER TABLE model_calls ADD COLUMN label TEXT",
    "ALTER TABLE model_calls ADD COLUMN worst_case TEXT",
    "ALTER TABLE model_calls ADD COLUMN anomaly TEXT",
    "ALTER TABLE model_calls ADD COLUMN invoiced TEXT",
    "ALTER TABLE model_calls ADD COLUMN owner_id TEXT",
    "CREATE INDEX model_calls_label ON model_calls(label)",
    "CREATE INDEX model_calls_pending ON model_calls(status) WHERE status = 'pending'",
    "ALTER TABLE call_attempts DROP CONSTRAINT call_attempts_outcome_check",
    (
        "ALTER TABLE call_attempts ADD CONSTRAINT call_attempts_outcome_check"
        " CHECK (outcome IN ('ok', 'retry', 'error', 'unknown'))"
    ),
    "ALTER TABLE budget_ledger DROP CONSTRAINT budget_ledger_kind_check",
    (
        "ALTER TABLE budget_ledger ADD CONSTRAINT budget_ledger_kind_check"
        " CHECK (kind IN ('reserve', 'settle', 'refuse', 'set_cap', 'release', 'unknown', 'invoice'))"
    ),
    "CREATE INDEX budget_ledger_call ON budget_ledger(call_id)",
    _V2[-2],  # campaign_leases
    _V2[-1],  # rollouts.anomaly
)

# Version 4: limits shared by every process and machine using the store.
_V4 = (
    # Shared rate limits: one row per request let through in the last minute, per limit key (provider and
    # api model). ``at`` is seconds since the epoch on the store's clock (PostgreSQL's server clock, so machines
    # whose clocks differ still share one window); ``tokens`` the request's token estimate until its answer
    # says how many it used.
    """CREATE TABLE rate_events (
        event_id TEXT PRIMARY KEY,
        limit_key TEXT NOT NULL,
        at REAL NOT NULL,
        tokens REAL NOT NULL,
        call_id TEXT
    )""",
    "CREATE INDEX rate_events_key_at ON rate_events(limit_key, at)",
    # Reservations whose owner was found dead (charged at their worst case as unknown outcomes): kept so that a
    # late answer from an owner that was only slow or cut off can still settle at its exact cost.
    """CREATE TABLE budget_expired (
        reservation_id TEXT PRIMARY KEY,
        call_id TEXT NOT NULL,
        model_id TEXT NOT NULL,
        amount TEXT NOT NULL,
        owner_id TEXT,
        expired_at TEXT NOT NULL,
        settled_at TEXT
    )""",
)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1, "model calls, attempts, budget and ledger, registries; campaign/rollout/counterexample tables", _V1
    ),
    Migration(
        2,
        "owners and leases; unknown outcomes, labels, worst cases and anomalies on calls; campaign leases",
        _V2,
        _V2_POSTGRES,
    ),
    Migration(3, "per-rollout verifier settings digest, bank digest and sandbox isolation", _V3),
    Migration(4, "shared rate-limit windows; expired reservations a late answer can still settle", _V4),
)
