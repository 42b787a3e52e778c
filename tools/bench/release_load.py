"""Benchmark: write a 300,000-row release with write_release, then time Release.load cold, warm and filtered.

    uv run python tools/bench/release_load.py [--rows N] [--keep DIR]

Uses a local synthetic generator (not evalkit's) and a private EVALKIT_CACHE_DIR in a temp directory.
Prints figures only; it asserts nothing about time.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import resource
import tempfile
import time
from pathlib import Path

UTC = dt.UTC
START, END = dt.date(2022, 11, 1), dt.date(2023, 3, 31)
FORMS = (
    ["4"] * 40
    + ["8-K"] * 15
    + ["10-Q"] * 8
    + ["SC 13G"] * 8
    + ["424B2"] * 12
    + ["10-K"] * 3
    + ["S-8"] * 2
    + ["DEF 14A"] * 2
)


def synth_filings(n: int, seed: int = 7) -> list:
    from evalkit_core import Filing, next_sec_business_day, sec_business_days

    rng = random.Random(seed)
    days = sec_business_days(START, END)
    issuers = [(f"{1_000_000 + i:010d}", f"SYNTHETIC ISSUER {i:03d} INC", f"SY{i:03d}") for i in range(400)]
    out = []
    for i in range(n):
        cik, name, ticker = rng.choice(issuers)
        day = rng.choice(days)
        accepted = None
        partition = day
        if rng.random() < 0.35:  # a minority of rows carry an acceptance stamp
            accepted = dt.datetime.combine(day, dt.time(0), tzinfo=UTC) + dt.timedelta(
                seconds=rng.randrange(11 * 3600, 28 * 3600)
            )
            if accepted.time() > dt.time(22, 30):  # after 17:30 New York: filed the next business day
                partition = next_sec_business_day(day) if next_sec_business_day(day) <= END else day
        acc = f"{cik}-{day.year % 100:02d}-{i:06d}"
        out.append(
            Filing(
                accession=acc,
                cik=cik,
                issuer=name,
                form=rng.choice(FORMS),
                partition_date=partition,
                published_at=partition,
                acceptance_at=accepted,
                disseminated_at=(accepted + dt.timedelta(minutes=rng.randrange(1, 90)))
                if accepted and rng.random() < 0.05
                else None,
                ticker=ticker,
                url=f"https://www.sec.gov/Archives/edgar/data/{int(cik)}/{acc.replace('-', '')}/{acc}-index.htm",
            )
        )
    return out


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(label: str, fn):
    t = time.perf_counter()
    out = fn()
    print(f"{label:<44}: {time.perf_counter() - t:7.3f} s")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument(
        "--keep", type=Path, help="write the release here instead of a temp dir (reuse with clocks.py)"
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        os.environ["EVALKIT_CACHE_DIR"] = str(Path(d) / "cache")
        from evalkit_core import Release, check_release, write_release

        filings = timed(f"generate {args.rows:,} filings", lambda: synth_filings(args.rows))
        out = args.keep or Path(d) / "release"
        root = timed(
            "write_release",
            lambda: write_release(
                out,
                name="bench",
                start=START,
                end=END,
                filings=filings,
                provenance={"sources": ["synthetic bench"]},
                overwrite=True,
            ),
        )
        size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
        print(f"release size: {size / 1e6:.1f} MB")
        r = timed("Release.load, no cache (use_cache=False)", lambda: Release.load(root, use_cache=False))
        print(f"  rows per arm: {r.arm('main').height:,}")
        timed("Release.load, first (verifies + writes cache)", lambda: Release.load(root))
        timed("Release.load, warm (Parquet cache)", lambda: Release.load(root))
        rf = timed(
            "Release.load, warm, forms=8-K,10-Q Jan 2023",
            lambda: Release.load(root, forms=["8-K", "10-Q"], start="2023-01-01", end="2023-01-31"),
        )
        print(f"  filtered rows: {rf.arm('main').height:,}")
        rel = Release.load(root)
        timed(
            "query: 8-K count by partition_date (main)",
            lambda: rel.arm("main").filter(rel.arm("main")["form"] == "8-K").group_by("partition_date").len(),
        )
        timed("check_release (rehash every file)", lambda: check_release(root))
        print(f"peak RSS: {peak_mib():.0f} MiB")


if __name__ == "__main__":
    main()
