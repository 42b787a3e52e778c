"""Campaigns on Ray against the local executor, and store round-trips per rollout on SQLite and PostgreSQL.

    uv run python tools/bench/campaign_ray.py [--k 2] [--concurrency 16] [--latencies 0,0.2] [--skip-postgres]

1. **Throughput**: the seed bank (68 tasks) x K over an OpenAI-compatible loopback server in its own process that
   answers with each task's reference after the given latency; real sandboxed grading. Runs: the local executor
   (this process, ``--workers`` sandbox slots), then ``--executor ray`` on a single-machine Ray started here
   (127.0.0.1, no dashboard) with 1 and 2 sandbox-worker actors (plus one caller actor). Printed: graded
   rollouts/s over the whole run (Ray's start excluded: it is paid once per cluster, not per campaign) and the
   time to the first answer stored.
2. **Harness overhead per rollout on Ray**: (Ray wall - local wall) / rollouts at 0 ms latency with the same
   number of sandbox slots: what shipping each call and each grading to an actor adds.
3. **Store round-trips per rollout**: statements sent to the store (BEGIN and COMMIT included) by a local
   campaign, per rollout, on SQLite and on a throwaway PostgreSQL cluster (tests/pg_cluster.py, Debian's
   binaries). A Ray caller adds one read transaction per call (its "stored already?" lookup: 3 statements).

Every figure is printed with the load average: the machine is shared and wall-clock numbers are noisy.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from campaign import _campaign_file, _serve  # pyright: ignore[reportPrivateUsage]

from evalkit import CodeTask, RayCluster, load_tasks, render_prompt
from evalkit_core.store import Store
from evalkit_router import run_campaign

ROOT = Path(__file__).resolve().parents[2]
BANK = ROOT / "tasks"


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def _answers() -> dict[str, str]:
    out = {}
    for t in load_tasks(BANK):
        out[render_prompt(t)] = (
            f"```python\n{t.reference}```" if isinstance(t, CodeTask) else f"```json\n{t.reference}\n```"
        )
    return out


def _server(latency: float) -> tuple[Any, int]:
    queue: Any = multiprocessing.get_context("fork").Queue()
    proc = multiprocessing.get_context("fork").Process(
        target=_serve, args=(queue, latency, _answers()), daemon=True
    )
    proc.start()
    return proc, int(queue.get(timeout=10))


def _registry(port: int) -> str:
    return (
        '[models."bench/slow"]\nprovider = "openai-compatible"\napi_model = "slow"\n'
        f'base_url = "http://127.0.0.1:{port}/v1"\napi_key_env = ""\ncontext_window = 32000\nmax_output = 4096\n'
        'prices = { input = "1", output = "2", cache_read = "0.1", cache_write = "1" }\n'
    )


def _run(port: int, k: int, concurrency: int, **kw: Any) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        path = _campaign_file(d, models=["bench/slow"], k=k, concurrency=concurrency, registry=_registry(port))
        t0 = time.perf_counter()
        outcome = run_campaign(path, home=d / "home", **kw)
        wall = time.perf_counter() - t0
        assert outcome.status == "done", outcome
        return wall, outcome.planned


def throughput(k: int, concurrency: int, latencies: list[float]) -> None:
    print(f"throughput: seed bank x K={k}, concurrency {concurrency}, real sandboxed grading ({_load()})")
    local_at_zero: dict[int, float] = {}
    rows: list[tuple[str, float, float, int]] = []
    for latency in latencies:
        proc, port = _server(latency)
        try:
            for workers in (1, 2):
                wall, n = _run(port, k, concurrency, workers=workers)
                rows.append((f"local, {workers} sandbox slot(s)", latency, wall, n))
                if latency == 0:
                    local_at_zero[workers] = wall
                print(f"  {rows[-1][0]:<40} {latency * 1000:>4.0f} ms  {n / wall:6.1f} rollouts/s  ({_load()})")
        finally:
            proc.terminate()
            proc.join(timeout=5)
    t0 = time.perf_counter()
    with RayCluster(None, num_cpus=2):
        print(f"  (Ray started in {time.perf_counter() - t0:.1f} s: once per cluster)")
        for latency in latencies:
            proc, port = _server(latency)
            try:
                for workers in (1, 2):
                    wall, n = _run(port, k, concurrency, workers=workers, executor="ray")
                    label = f"ray, {workers} sandbox-worker actor(s)"
                    print(f"  {label:<40} {latency * 1000:>4.0f} ms  {n / wall:6.1f} rollouts/s  ({_load()})")
                    if latency == 0 and workers in local_at_zero:
                        extra = (wall - local_at_zero[workers]) / n * 1000
                        print(f"    harness overhead on Ray vs local (same slots, 0 ms): {extra:+.1f} ms/rollout")
            finally:
                proc.terminate()
                proc.join(timeout=5)


def _count_round_trips(location: str | None, port: int, k: int) -> float:
    counted = [0]
    real_begin: Callable[..., Any] = Store._begin  # pyright: ignore[reportPrivateUsage]

    class Counting:
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def execute(self, *args: Any) -> Any:
            counted[0] += 1
            return self._inner.execute(*args)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._inner, name)

    def begin(self: Store, sql: str) -> Any:
        counted[0] += 2  # BEGIN (with the advisory lock on PostgreSQL) and COMMIT / ROLLBACK
        return Counting(real_begin(self, sql))

    old = os.environ.get("EVALKIT_STORE")
    if location is not None:
        os.environ["EVALKIT_STORE"] = location
    Store._begin = begin  # type: ignore[method-assign]  # pyright: ignore[reportPrivateUsage]
    try:
        _, n = _run(port, k, 8, workers=2)
    finally:
        Store._begin = real_begin  # type: ignore[method-assign]  # pyright: ignore[reportPrivateUsage]
        if old is None:
            os.environ.pop("EVALKIT_STORE", None)
        else:
            os.environ["EVALKIT_STORE"] = old
    return counted[0] / n


def _write_rate(location: str, n: int = 300) -> float:
    """Write transactions per second one process gets through the store's write lock (a budget-sized write:
    one UPDATE of the budget row under the lock), the serial ceiling every worker shares."""
    with Store(location if location.startswith("postgresql://") else Path(location)) as store:
        t0 = time.perf_counter()
        for _ in range(n):
            with store.transaction() as db:
                db.execute("UPDATE budget SET reserved = reserved WHERE id = 1")
        return n / (time.perf_counter() - t0)


def round_trips(k: int, postgres: bool) -> None:
    proc, port = _server(0.0)
    try:
        print(f"store round-trips per rollout (local executor, K={k}; {_load()}):")
        print(f"  SQLite:     {_count_round_trips(None, port, k):.1f} statements/rollout")
        with tempfile.TemporaryDirectory() as tmp:
            rate = _write_rate(str(Path(tmp) / "s.sqlite3"))
            print(f"  SQLite:     {rate:.0f} write transactions/s through the write lock ({_load()})")
        if postgres:
            from pg_cluster import Cluster, find_bin  # pyright: ignore[reportMissingImports]

            bindir = find_bin()
            if bindir is None:
                print("  PostgreSQL: skipped (no PostgreSQL binaries on this machine)")
                return
            cluster = Cluster(bindir).start()
            try:
                url = cluster.create_schema()
                t0 = time.perf_counter()
                per = _count_round_trips(url, port, k)
                print(f"  PostgreSQL: {per:.1f} statements/rollout (run took {time.perf_counter() - t0:.1f} s)")
                rate = _write_rate(cluster.create_schema())
                print(f"  PostgreSQL: {rate:.0f} write transactions/s through the advisory lock ({_load()})")
            finally:
                cluster.stop()
    finally:
        proc.terminate()
        proc.join(timeout=5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--k", type=int, default=2, help="samples per task (68 tasks)")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--latencies", default="0,0.2", help="provider latencies in seconds, comma-separated")
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--only", choices=["throughput", "round-trips"], default=None)
    args = parser.parse_args()
    if args.only in (None, "round-trips"):
        round_trips(args.k, not args.skip_postgres)
    if args.only in (None, "throughput"):
        throughput(args.k, args.concurrency, [float(x) for x in args.latencies.split(",")])
    return 0


if __name__ == "__main__":
    sys.exit(main())
