"""Store benchmarks: round-trips per rollout on SQLite and on PostgreSQL, and the store's write ceiling.

    uv run python tools/bench/store.py [--k 2] [--seconds 3] [--processes 2]

1. **Round-trips per rollout**: a sim campaign (sim/strong over the seed bank, concurrency 1, grading replaced
   by an instant stub so only the store and the harness are timed) on each store; every transaction and
   snapshot the store opens and every statement run inside them is counted, and the time spent inside them.
   Printed per rollout: transactions, statements, store milliseconds; and rollouts/s.
2. **Write ceiling**: ``--processes`` processes each reserve and settle a budget amount in a loop for
   ``--seconds`` (two write transactions per loop, the path every model call takes twice): committed write
   transactions per second across all of them. Also printed: one statement's round trip (``SELECT 1``), the
   unit to scale the figures to another network. Every write takes the store's one write lock (SQLite's
   ``BEGIN IMMEDIATE``, PostgreSQL's advisory lock), so this is the store-wide ceiling, not a per-process one.

PostgreSQL runs as a throwaway cluster on a Unix socket in a temp directory (``tests/pg_cluster.py``, fsync on,
as it would be in production, unless ``--pg-fsync off``: then the difference is the disk's flush latency); the
section is skipped with the reason where its binaries are absent. SQLite runs with ``synchronous=NORMAL`` (its
default here: WAL, no fsync per commit).
"""

# ruff: noqa: I001 - tests/ and tools/bench/ go on sys.path before the two imports that need them
from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import sys
import tempfile
import time
import uuid
from collections.abc import Generator, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import evalkit_router._campaign as campaign_module
from evalkit import Sandbox
from evalkit_core.models import ModelClient, load_registry, set_budget_cap
from evalkit_core.models._budget import settle, try_reserve
from evalkit_core.store import Store, utc_now
from evalkit_router import load_campaign, run_campaign_async

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from campaign import _campaign_file, _instant_grade  # noqa: E402  (tools/bench/campaign.py)
from pg_cluster import SKIP_REASON, Cluster, find_bin  # noqa: E402  (tests/pg_cluster.py)


class _Counting:
    def __init__(self, db: Any, tally: dict[str, float]) -> None:
        self._db = db
        self._tally = tally

    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        self._tally["statements"] += 1
        return self._db.execute(sql, parameters)


@contextlib.contextmanager
def _counted(tally: dict[str, float]) -> Iterator[None]:
    real_tx, real_snap = Store.transaction, Store.snapshot

    def wrap(real: Any, kind: str) -> Any:
        @contextlib.contextmanager
        def inner(self: Store) -> Generator[Any]:
            t0 = time.perf_counter()
            with real(self) as db:
                yield _Counting(db, tally)
            tally[kind] += 1
            tally["seconds"] += time.perf_counter() - t0

        return inner

    Store.transaction = wrap(real_tx, "transactions")  # type: ignore[method-assign]
    Store.snapshot = wrap(real_snap, "snapshots")  # type: ignore[method-assign]
    try:
        yield
    finally:
        Store.transaction = real_tx  # type: ignore[method-assign]
        Store.snapshot = real_snap  # type: ignore[method-assign]


def round_trips(label: str, location: str, k: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        config = load_campaign(_campaign_file(d, models=["sim/strong"], k=k, concurrency=1))
        real_grade = campaign_module._grade_one
        campaign_module._grade_one = _instant_grade  # type: ignore[assignment]
        tally = {"transactions": 0.0, "snapshots": 0.0, "statements": 0.0, "seconds": 0.0}
        try:
            with Store(location) as store:

                async def main() -> tuple[float, int]:
                    async with ModelClient(registry=load_registry(), store=store) as client:
                        with Sandbox(workers=1) as sandbox, _counted(tally):
                            t0 = time.perf_counter()
                            outcome = await run_campaign_async(config, store=store, client=client, sandbox=sandbox)
                            return time.perf_counter() - t0, outcome.called

                wall, n = asyncio.run(main())
        finally:
            campaign_module._grade_one = real_grade
    print(
        f"  {label:10s} {n} rollouts: {tally['transactions'] / n:.2f} write tx + {tally['snapshots'] / n:.2f} reads"
        f" = {tally['statements'] / n:.1f} statements per rollout; {tally['seconds'] / n * 1000:.2f} ms in the"
        f" store per rollout; {n / wall:.0f} rollouts/s (grading stubbed, concurrency 1)"
    )


def round_trip(label: str, location: str, n: int = 300) -> None:
    """One statement's latency (``SELECT 1`` inside one read transaction): the unit the figures above are in."""
    with Store(location) as store, store.snapshot() as db:
        db.execute("SELECT 1").fetchone()
        t0 = time.perf_counter()
        for _ in range(n):
            db.execute("SELECT 1").fetchone()
        per = (time.perf_counter() - t0) / n
    print(f"  {label:10s} one statement round trip: {per * 1000:.3f} ms")


def _writer(location: str, seconds: float, start: Any, out: Any) -> None:
    with Store(location) as store:
        owner = store.owner_id
        start.wait()
        n = 0
        stop = time.perf_counter() + seconds
        while time.perf_counter() < stop:
            with store.transaction() as db:
                rid = try_reserve(
                    db, call_id=uuid.uuid4().hex, model_id="m", amount=Decimal("0.001"), now=utc_now(), owner_id=owner
                )
            assert isinstance(rid, str)
            with store.transaction() as db:
                settle(db, rid, Decimal("0.0005"), now=utc_now())
            n += 2
        out.put(n)


def write_ceiling(label: str, location: str, seconds: float, processes: int) -> None:
    with Store(location) as store:
        set_budget_cap(store, None)
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(location, seconds, start, out)) for _ in range(processes)]
    for p in procs:
        p.start()
    time.sleep(2.0)  # let every process open its store before the clock starts
    start.set()
    total = sum(out.get(timeout=seconds + 120) for _ in procs)
    for p in procs:
        p.join()
    print(f"  {label:10s} {processes} processes: {total / seconds:.0f} committed write transactions/s (reserve+settle)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument(
        "--pg-fsync", choices=("on", "off"), default="on", help="off: what the store costs without the disk's flush"
    )
    args = ap.parse_args()
    bindir = find_bin()
    with tempfile.TemporaryDirectory() as tmp:
        lite = str(Path(tmp) / "evalkit.sqlite3")
        cluster = Cluster(bindir, fsync=args.pg_fsync == "on").start() if bindir is not None else None
        try:
            pg = cluster.create_schema() if cluster is not None else None
            print("store round-trips per rollout (a sim campaign, grading stubbed)")
            round_trips("sqlite", lite, args.k)
            if pg is not None:
                round_trips("postgresql", pg, args.k)
            else:
                print(f"  postgresql skipped: {SKIP_REASON}")
            print("statement latency")
            round_trip("sqlite", lite)
            if pg is not None:
                round_trip("postgresql", pg)
            print(f"store write ceiling ({args.seconds:g} s)")
            write_ceiling("sqlite", lite, args.seconds, args.processes)
            if pg is not None:
                write_ceiling("postgresql", pg, args.seconds, args.processes)
        finally:
            if cluster is not None:
                cluster.stop()


if __name__ == "__main__":
    main()
