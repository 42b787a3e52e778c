"""Benchmark: canonicalise + write a 100,000-event trajectory (~1 KB/event), then digest the file.

    uv run python tools/bench/canonical_hash.py [--events N]

Prints figures only; it asserts nothing about time. The trajectory is written to a temp directory.
"""

from __future__ import annotations

import argparse
import random
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

import rfc8785

from evalkit_core import canonical_bytes, file_digest

FORMS = ["4", "8-K", "10-Q", "SC 13G", "424B2", "10-K"]
TOOLS = ["pit_list", "pit_search", "pit_read", "pit_coverage"]


def event(i: int, rng: random.Random) -> dict[str, Any]:
    """One trajectory event shaped like a PIT tool call with its whole result (~1 KB canonical)."""
    day = f"2023-{1 + i % 3:02d}-{1 + i % 28:02d}"
    rows = [
        {
            "row_key": f"r{rng.getrandbits(80):020x}",
            "form": rng.choice(FORMS),
            "title": f"[ISSUER] {rng.choice(FORMS)}",
            "partition_date": day,
            "acceptance_at": f"{day}T{rng.randrange(24):02d}:{rng.randrange(60):02d}:00Z"
            if rng.random() < 0.4
            else None,
            "score": round(rng.random(), 6),
        }
        for _ in range(4)
    ]
    return {
        "seq": i,
        "kind": "tool_call",
        "cell": {
            "arm": rng.choice(["main", "redacted", "shifted"]),
            "clock": rng.choice(["leaky", "dump", "pit"]),
        },
        "session_date": day,
        "tool": rng.choice(TOOLS),
        "args": {"query": "guidance raised", "forms": ["8-K", "10-Q"], "limit": 4},
        "result": {
            "known_at": f"{day}T13:30:00Z",
            "clock": "pit",
            "arm": "main",
            "session_date": day,
            "rows": rows,
            "coverage": {"rows_visible": rng.randrange(100000), "fallback_share": round(rng.random(), 6)},
        },
    }


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=100_000)
    n = ap.parse_args().events
    rng = random.Random(20221101)
    t = time.perf_counter()
    events = [event(i, rng) for i in range(n)]
    print(f"built {n:,} events in {time.perf_counter() - t:.2f} s")

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "trajectory.jsonl"
        t = time.perf_counter()
        with path.open("wb") as f:
            for e in events:
                f.write(canonical_bytes(e) + b"\n")
        t_write = time.perf_counter() - t
        size = path.stat().st_size

        t = time.perf_counter()
        dg = file_digest(path)
        t_digest = time.perf_counter() - t

        t = time.perf_counter()
        for e in events:
            rfc8785.dumps(e)
        t_rfc = time.perf_counter() - t

    print(f"file: {size / 1e6:.1f} MB, {size / n:.0f} bytes/event, {dg}")
    print(f"canonical_bytes + write JSONL : {t_write:.3f} s ({n / t_write:,.0f} events/s)")
    print(f"file_digest of the JSONL      : {t_digest:.3f} s")
    print(f"total (canonicalise+write+hash): {t_write + t_digest:.3f} s")
    print(f"rfc8785.dumps alone (no write): {t_rfc:.3f} s ({t_rfc / t_write:.1f}x the evalkit path)")
    print(f"peak RSS: {peak_mib():.0f} MiB")


if __name__ == "__main__":
    main()
