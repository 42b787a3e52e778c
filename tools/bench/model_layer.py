"""Benchmark the model layer against a loopback fake provider (no network).

1. Harness overhead per call: N sequential calls through ``ModelClient.complete`` (registry lookup, key check,
   request digest, rate-limit buckets, budget reservation and settlement in SQLite, attempt and call rows, reply
   parsing, exact cost) minus N sequential bare POSTs (the model layer's own transport, ``HttpPool``) of the same
   body to the same server. Server time
   and HTTP transport time are in both, so the difference is what the harness adds.
2. Sustained concurrency: M calls with 200 in flight at all times, against a server that holds each reply 50 ms.

The fake server runs in a separate process (this script re-invoked with ``--serve``) so it does not share the
GIL with the client. Run: ``uv run python tools/bench/model_layer.py [--calls 1000] [--concurrent-total 2000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

REPLY = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "model": "bench-reported",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 40, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 8}},
    }
).encode()
RESPONSE = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
    len(REPLY),
    REPLY,
)


# ------------------------------------------------------------------------------------------------ server


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, stats: dict[str, int]) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            body = await reader.readexactly(length)
            stats["inflight"] += 1
            stats["max_inflight"] = max(stats["max_inflight"], stats["inflight"])
            if b'"model":"slow50"' in body:
                await asyncio.sleep(0.05)
            stats["inflight"] -= 1
            writer.write(RESPONSE)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def _serve() -> None:
    stats = {"inflight": 0, "max_inflight": 0}
    server = await asyncio.start_server(lambda r, w: _handle(r, w, stats), "127.0.0.1", 0, backlog=1024)
    port = server.sockets[0].getsockname()[1]
    print(port, flush=True)
    loop = asyncio.get_running_loop()
    # stdin closing (the parent exiting) stops the server; a line "stats" prints the max concurrency seen
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        if line.strip() == b"stats":
            print(json.dumps(stats), flush=True)
            stats["max_inflight"] = 0
    server.close()


# ------------------------------------------------------------------------------------------------ client


def _registry(base: str, path: Path) -> Path:
    entries = []
    for name in ("fast", "slow50"):
        entries.append(
            f'[models."bench/{name}"]\nprovider = "openai-compatible"\napi_model = "{name}"\n'
            f'base_url = "{base}/v1"\napi_key_env = "BENCH_KEY"\ncontext_window = 100000\nmax_output = 1000\n'
            'prices = { input = "0.15", output = "0.60", cache_read = "0.075", cache_write = "0.15" }\n'
        )
    path.write_text("\n".join(entries))
    return path


async def _bench(
    port: int, calls: int, total: int, concurrency: int, server: subprocess.Popen[bytes]
) -> None:
    from evalkit_core.models import ModelClient, Request, load_registry, set_budget_cap
    from evalkit_core.models._client import _wire_bytes
    from evalkit_core.models._http import HttpPool
    from evalkit_core.store import Store

    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as tmp:
        reg = load_registry([_registry(base, Path(tmp) / "bench.toml")], env={})
        store = Store.open(Path(tmp) / "home")
        set_budget_cap(store, Decimal(1000))  # exercise the budget path, never binding
        request = Request.of("Say ok.", max_tokens=16)
        body = _wire_bytes(reg.get("bench/fast"), request)
        headers = {"content-type": "application/json", "authorization": "Bearer bench-key"}

        http = HttpPool(max_connections=256)
        try:
            for _ in range(50):  # warm up
                json.loads(
                    (
                        await http.post(f"{base}/v1/chat/completions", body, headers, connect_timeout=10)
                    ).content
                )
            bare: list[float] = []
            for _ in range(calls):
                t0 = time.perf_counter()
                resp = await http.post(f"{base}/v1/chat/completions", body, headers, connect_timeout=10)
                json.loads(resp.content)
                bare.append(time.perf_counter() - t0)

            # the same concurrency with the bare transport, for comparison
            slow_body = _wire_bytes(reg.get("bench/slow50"), request)
            sem0 = asyncio.Semaphore(concurrency)

            async def bare_one() -> None:
                async with sem0:
                    r = await http.post(f"{base}/v1/chat/completions", slow_body, headers, connect_timeout=10)
                    json.loads(r.content)

            t0 = time.perf_counter()
            await asyncio.gather(*(bare_one() for _ in range(total)))
            bare_wall = time.perf_counter() - t0
        finally:
            await http.aclose()
        assert server.stdin is not None
        assert server.stdout is not None
        server.stdin.write(b"stats\n")
        server.stdin.flush()
        bare_seen = json.loads(server.stdout.readline())

        async with ModelClient(registry=reg, store=store, env={"BENCH_KEY": "bench-key"}) as client:
            for _ in range(50):
                await client.complete("bench/fast", request)
            harness: list[float] = []
            for _ in range(calls):
                t0 = time.perf_counter()
                await client.complete("bench/fast", request)
                harness.append(time.perf_counter() - t0)

            # sustained concurrency: `concurrency` calls in flight until `total` are done
            sem = asyncio.Semaphore(concurrency)
            errors = 0

            async def one(i: int) -> None:
                nonlocal errors
                async with sem:
                    try:
                        await client.complete("bench/slow50", Request.of(f"call {i}", max_tokens=16))
                    except Exception:
                        errors += 1

            t0 = time.perf_counter()
            await asyncio.gather(*(one(i) for i in range(total)))
            wall = time.perf_counter() - t0
        assert server.stdin is not None
        assert server.stdout is not None
        server.stdin.write(b"stats\n")
        server.stdin.flush()
        seen = json.loads(server.stdout.readline())
        recorded = store._db.execute(
            "SELECT count(*), sum(attempts) FROM model_calls WHERE status = 'ok'"
        ).fetchone()
        store.close()

    ms = 1000.0
    med_b, med_h = statistics.median(bare) * ms, statistics.median(harness) * ms
    mean_b, mean_h = statistics.fmean(bare) * ms, statistics.fmean(harness) * ms
    p99 = lambda xs: sorted(xs)[int(len(xs) * 0.99)] * ms  # noqa: E731
    print(f"sequential calls: {calls} each (after 50 warm-up)")
    print(
        f"  bare transport POST + json:    median {med_b:.3f} ms  mean {mean_b:.3f} ms  p99 {p99(bare):.3f} ms"
    )
    print(
        f"  ModelClient.complete:      median {med_h:.3f} ms  mean {mean_h:.3f} ms  p99 {p99(harness):.3f} ms"
    )
    print(
        f"  harness overhead per call: median {med_h - med_b:.3f} ms  mean {mean_h - mean_b:.3f} ms  (target < 2 ms)"
    )
    print(f"sustained concurrency: {total} calls, {concurrency} in flight, server holds each reply 50 ms")
    print(f"  wall {wall:.2f} s  throughput {total / wall:.0f} calls/s  errors {errors}")
    print(f"  max concurrent requests seen by the server: {seen['max_inflight']}")
    print(
        f"  bare transport, same load: wall {bare_wall:.2f} s  throughput {total / bare_wall:.0f} calls/s  "
        f"max concurrent {bare_seen['max_inflight']}"
    )
    print(f"  ideal wall at {concurrency} in flight: {total / concurrency * 0.05:.2f} s")
    print(f"  store: {recorded[0]} ok calls recorded, {recorded[1]} attempts")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument(
        "--calls", type=int, default=1000, help="sequential calls per side for the overhead figure"
    )
    ap.add_argument(
        "--concurrent-total", type=int, default=2000, help="calls in the sustained-concurrency run"
    )
    ap.add_argument("--concurrency", type=int, default=200)
    args = ap.parse_args()
    if args.serve:
        asyncio.run(_serve())
        return
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        asyncio.run(_bench(port, args.calls, args.concurrent_total, args.concurrency, server))
    finally:
        if server.stdin is not None:
            server.stdin.close()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
