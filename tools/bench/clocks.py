"""Benchmark: with_entry for each clock on a 300,000-row main arm (plus the one-off calendar build).

    uv run python tools/bench/clocks.py [--rows N] [--release DIR]

Without --release the main arm is built in memory from the synthetic filings of release_load.py, with the
dtypes Release.load gives (Date, Datetime[us, UTC]). Prints figures only; it asserts nothing about time.
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

import polars as pl
from release_load import synth_filings


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main_arm(rows: int) -> pl.DataFrame:
    from release_load import END, START

    from evalkit_core import arm_rows
    from evalkit_core._release import make_masks

    filings = synth_filings(rows)
    masks = make_masks(filings, start=START, end=END)
    main = [arm_rows(f, masks)[0] for f in filings]
    frame = pl.DataFrame(main, infer_schema_length=None)
    return frame.with_columns(
        pl.col("partition_date", "published_at").str.to_date("%Y-%m-%d"),
        pl.col("acceptance_at", "disseminated_at").str.to_datetime(
            "%Y-%m-%dT%H:%M:%SZ", time_unit="us", time_zone="UTC"
        ),
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--release", type=Path)
    args = ap.parse_args()

    t = time.perf_counter()
    from evalkit_core import CLOCKS, nyse, with_entry

    cal = nyse()
    print(
        f"{'import + nyse() calendar build (once)':<40}: {time.perf_counter() - t:7.3f} s ({len(cal):,} sessions)"
    )

    if args.release:
        from evalkit_core import Release

        frame = Release.load(args.release).arm("main")
    else:
        frame = main_arm(args.rows)
    print(f"main arm: {frame.height:,} rows, acceptance_at on {frame['acceptance_at'].is_not_null().sum():,}")
    for clock in CLOCKS:
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            out = with_entry(frame, clock)
            best = min(best, time.perf_counter() - t)
        print(
            f"{'with_entry ' + clock.value + ' (best of 3)':<40}: {best:7.3f} s"
            f"   fallbacks {int(out['known_at_fallback'].sum()):,}"
        )
    print(f"peak RSS: {peak_mib():.0f} MiB")


if __name__ == "__main__":
    main()
