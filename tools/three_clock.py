"""The three-clock experiment of docs/benchmarks.md: one agent, one release, the clock as the only variable.

Builds a release from the real EDGAR sample (the 8-K filings of 28 large issuers, 2022-11-01..2023-03-31),
runs the stub agent (buy every 8-K at the first opening auction after it became knowable, hold 5 sessions) on
the main arm under the leaky, dump and pit clocks, scores it with the sample's daily opens, and prints the table.

    uv run python tools/three_clock.py [--data ../shared/data] [--work DIR] [--json]

The data directory holds ``edgar-submissions-sample/``, ``company_tickers.json`` and
``prices/daily_2022-10-03_2023-06-30.csv.gz`` (see docs/benchmarks.md for what they are). Nothing is
downloaded. A missing input is one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

START, END = dt.date(2022, 11, 1), dt.date(2023, 3, 31)
FORMS = ("8-K",)
HOLD = 5
CLOCKS = ("leaky", "dump", "pit")
PRICES = Path("prices") / "daily_2022-10-03_2023-06-30.csv.gz"
PRICE_SOURCE = (
    "daily opens from dieperdev/yfinance-stock-data commit a342efb7 (Unlicense): Yahoo-style, split-adjusted "
    "as of 2024-03, not dividend-adjusted; tickers delisted before 2024-03 are missing"
)
PRICES_PULLED_AT = "2024-03-01"
DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
# What the design's table shows for the same experiment on its own (different) release.
DESIGN = {"leaky": 0.0513, "dump": -0.0202, "pit": 0.0018}


class MissingDataError(Exception):
    """An input of the experiment is not where it should be."""


def inputs(data: Path) -> dict[str, Path]:
    """The three inputs under ``data``; :class:`MissingDataError` names the first one missing."""
    found = {
        "submissions": data / "edgar-submissions-sample",
        "tickers": data / "company_tickers.json",
        "prices": data / PRICES,
    }
    for name, path in found.items():
        if not path.exists():
            raise MissingDataError(f"{path}: not found (the {name} input of the three-clock experiment)")
    return found


def _parse_instant(text: str | None) -> dt.datetime | None:
    if text is None:
        return None
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def recount(release_dir: Path, prices_path: Path) -> dict[str, dict[str, Any]]:
    """An independent recount from the release's files, the price file and the NYSE calendar alone (none of the
    runner's or the scorer's code): per clock, the trades (every 8-K whose entry session falls in the window),
    how many of them carry an acceptance stamp and were bought at an opening auction that had already opened when
    EDGAR accepted them, and the mean five-session open-to-open return with its standard error."""
    import statistics

    import polars as pl

    from evalkit_core import nyse

    calendar = nyse()
    sessions = calendar.between(START, END)
    last = sessions[-1].date
    everything = calendar.all
    bars = pl.read_csv(
        prices_path,
        columns=["ticker", "date", "open"],
        schema_overrides={"ticker": pl.Utf8, "date": pl.Utf8, "open": pl.Float64},
        null_values=["null", ""],
    )
    opens = {(t, d): o for t, d, o in bars.drop_nulls().iter_rows() if o is not None and o > 0}
    key = {
        r["row_key"]: r for r in map(json.loads, (release_dir / "answer_key.jsonl").read_text().splitlines())
    }
    rows = [json.loads(x) for x in (release_dir / "arms" / "main.jsonl").read_text().splitlines()]
    out: dict[str, dict[str, Any]] = {}
    for clock in CLOCKS:
        trades = stamped = early = 0
        returns: list[float] = []
        for row in rows:
            if row["form"] not in FORMS:
                continue
            truth = key[row["row_key"]]
            if clock == "leaky":
                known = dt.datetime.combine(dt.date.fromisoformat(row["partition_date"]), dt.time(), dt.UTC)
            else:
                known = dt.datetime.combine(
                    dt.date.fromisoformat(row["published_at"]), dt.time(23, 59, 59), dt.UTC
                )
                served = [
                    _parse_instant(row.get("acceptance_at")),
                    _parse_instant(row.get("disseminated_at")),
                ]
                stamps = [s for s in served if s is not None]
                if clock == "pit" and stamps:
                    known = max(stamps)
            i = calendar.index_after(known)  # the first opening bell strictly after known_at
            entry = everything[i]
            if entry.date > last:
                continue  # knowable only after the window: never offered
            trades += 1
            accepted = _parse_instant(truth.get("acceptance_at"))
            if accepted is not None:
                stamped += 1
                early += entry.open < accepted
            p_in = opens.get((truth.get("ticker"), entry.date.isoformat()))
            p_out = opens.get((truth.get("ticker"), everything[i + HOLD].date.isoformat()))
            if p_in is not None and p_out is not None:
                returns.append(p_out / p_in - 1.0)
        out[clock] = {
            "trades": trades,
            "stamped": stamped,
            "bought_after_open": early,
            "scored": len(returns),
            "total_return": round(statistics.fmean(returns), 6) if returns else None,
            "standard_error": round(statistics.stdev(returns) / len(returns) ** 0.5, 6)
            if len(returns) > 1
            else None,
        }
    return out


def three_clock(data: Path, work: Path) -> dict[str, Any]:
    """Build the release under ``work``, run the stub on the main arm under the three clocks, and return the
    figures: per clock the return, trades, scored trades, look-ahead trades and stamped filings bought at an
    auction that had already opened (the runner's count and the independent recount)."""
    from evalkit.pit import RunConfig, load_prices, run, stub_agent
    from evalkit_core import Release
    from evalkit_core.edgar import build_edgar_release

    found = inputs(data)
    release_dir = work / "release"
    build_edgar_release(
        release_dir,
        submissions=found["submissions"],
        tickers=found["tickers"],
        start=START,
        end=END,
        name="edgar-sample-8k-2022-11-2023-03",
        overwrite=True,
        key_seed="",  # a published experiment: readers rebuild the same bytes (its masked arms are not used)
    )
    release = Release.load(release_dir, forms=list(FORMS))
    prices = load_prices(found["prices"], source=PRICE_SOURCE, pulled_at=PRICES_PULLED_AT)
    cfg = RunConfig(
        bundle_path=str(release_dir),
        forms=FORMS,
        arms=("main",),
        clocks=CLOCKS,
        hold_sessions=HOLD,
        probe_items=0,
        trajectory_path=str(work / "trajectory.jsonl"),
        receipt_path=str(work / "receipt.json"),
    )
    body = run(stub_agent, cfg, release, prices).body
    recounted = recount(release_dir, found["prices"])
    manifest = release.manifest
    cells: dict[str, dict[str, Any]] = {}
    for cell in body["cells"]:
        clock = cell["clock"]
        cells[clock] = {
            "total_return": cell["total_return"],
            "trades": cell["trades"],
            "scored": cell["scored_trades"],
            "unpriced": cell["unpriced_trades"],
            "lookahead": cell["lookahead_trades"],
            "stamped": cell["lookahead_checked"],
            "recount": recounted[clock],
            "pit_fallback_rows": cell["pit_fallback_rows"],
        }
    return {
        "release": {
            "name": manifest["name"],
            "content_digest": release.content_digest,
            "window": dict(manifest["window"]),
            "rows": release.arm("main").height,
        },
        "valid": body["valid"],
        "run_id": body["run_id"],
        "receipt_body_sha256": json.loads((work / "receipt.json").read_text())["body_sha256"],
        "prices_sha256": body["prices"]["sha256"],
        "window": body["window"],
        "hold_sessions": HOLD,
        "cells": cells,
        "design": DESIGN,
    }


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:+.2f}%"


def table(result: dict[str, Any]) -> str:
    """The printed table (what docs/benchmarks.md quotes)."""
    rel = result["release"]
    lines = [
        (
            f"release  {rel['name']}  {rel['content_digest']}  {rel['rows']} 8-K rows  "
            f"{rel['window']['start']}..{rel['window']['end']}"
        ),
        f"run      {result['run_id']}  valid={result['valid']}",
        (
            f"window   {result['window']['start']}..{result['window']['end']}  ({result['window']['sessions']} sessions), "
            f"hold {result['hold_sessions']} sessions, prices {result['prices_sha256']}"
        ),
        "",
        (
            f"{'clock':<6} {'return':>8} {'design':>8} {'trades':>6} {'scored':>6} {'look-ahead':>10} "
            f"{'bought after the auction opened':>32}"
        ),
    ]
    for clock in CLOCKS:
        c = result["cells"][clock]
        early = f"{c['lookahead']} of {c['stamped']} stamped"
        lines.append(
            f"{clock:<6} {_pct(c['total_return']):>8} {_pct(result['design'][clock]):>8} {c['trades']:>6} "
            f"{c['scored']:>6} {c['lookahead']:>10} {early:>32}"
        )
    lines.append("")
    lines.append("recount (release files, price file and NYSE calendar only, none of the runner's code):")
    for clock in CLOCKS:
        r = result["cells"][clock]["recount"]
        se = "n/a" if r["standard_error"] is None else f"{r['standard_error'] * 100:.2f}%"
        lines.append(
            f"{clock:<6} {_pct(r['total_return']):>8} (standard error {se})  trades {r['trades']}  scored {r['scored']}  "
            f"bought after the auction opened {r['bought_after_open']} of {r['stamped']} stamped"
        )
    lines.append(
        f"pit      {result['cells']['pit']['pit_fallback_rows']} rows without a usable stamp fell back to the dump rule"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data", type=Path, default=DEFAULT_DATA, help="the real-data directory [default: %(default)s]"
    )
    parser.add_argument(
        "--work", type=Path, default=None, help="keep the release, trajectory and receipt here"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    try:
        inputs(args.data)
    except MissingDataError as exc:
        print(f"three_clock: {exc}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="three-clock-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        result = three_clock(args.data, work)
    print(json.dumps(result, indent=2, sort_keys=True) if args.json else table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
