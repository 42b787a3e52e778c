"""Synthetic releases with the shape of real EDGAR metadata, and the built-in demo release.

Same seed, same arguments → byte-identical release and identical content digest (no wall clock, no global
random state). The arms and the answer key are written by :func:`evalkit_core.write_release`, the code the
EDGAR builder uses.

Shape:
- a few hundred issuers (by default one per ~12 rows, 50..3,000) with names, CIKs and, for most, tickers;
- a form mix like EDGAR's: Form 4 the most common, then 8-K, 424B2, 10-Q, SC 13G, ... 10-K;
- acceptance times spread over pre-market, intraday, after the close and late evening New York time;
- filing dates that follow EDGAR's after-17:30 rule over SEC business days, and ``disseminated_at`` on
  after-hours rows;
- only a minority of rows (about a third) carrying ``acceptance_at``, as real index-built releases do.
"""

from __future__ import annotations

import bisect
import csv
import datetime as dt
import io
import math
import random
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

from evalkit_core._calendar import nyse, sec_business_days
from evalkit_core._canonical import digest_bytes
from evalkit_core._edgar_rules import NEW_YORK, disseminated_at_for, filing_date_for
from evalkit_core._errors import ConfigError
from evalkit_core._receipt import atomic_write_bytes
from evalkit_core._release import Filing, write_release

__all__ = [
    "DEMO",
    "FORM_MIX",
    "PRICE_SOURCE",
    "DemoSpec",
    "SynthIssuer",
    "demo_release_path",
    "synth_filings",
    "synth_issuers",
    "synth_prices_csv",
    "write_demo_release",
    "write_synth_release",
]

GENERATOR = "evalkit.synth/2"

# Approximate shares of EDGAR's daily index (2022-2023), most common first.
FORM_MIX: tuple[tuple[str, float], ...] = (
    ("4", 0.34),
    ("8-K", 0.075),
    ("424B2", 0.07),
    ("10-Q", 0.045),
    ("SC 13G/A", 0.045),
    ("SC 13G", 0.03),
    ("D", 0.035),
    ("FWP", 0.04),
    ("497", 0.03),
    ("3", 0.025),
    ("13F-HR", 0.025),
    ("6-K", 0.02),
    ("S-8", 0.01),
    ("DEF 14A", 0.01),
    ("8-K/A", 0.008),
    ("144", 0.03),
    ("10-K", 0.012),
    ("S-1", 0.004),
    ("SC 13D", 0.006),
    ("497K", 0.02),
)

_ADJ = (
    "ACME", "ALPINE", "ATLAS", "AURORA", "BLUE", "BRIGHT", "CASCADE", "CEDAR", "CENTRAL", "COASTAL", "CRESCENT",
    "CROWN", "DELTA", "EAGLE", "EASTERN", "ECHO", "EMPIRE", "EVERGREEN", "FIRST", "FRONTIER", "GLOBAL", "GOLDEN",
    "GRANITE", "HARBOR", "HERITAGE", "HORIZON", "IRON", "LIBERTY", "LUMEN", "MAPLE", "MERIDIAN", "NORTHERN",
    "NOVA", "OAK", "ORION", "PACIFIC", "PEAK", "PINNACLE", "PIONEER", "PRAIRIE", "QUANTUM", "RED", "RIVER",
    "SILVER", "SOLAR", "SOUTHERN", "STELLAR", "SUMMIT", "TRITON", "UNITED", "VALLEY", "VANGUARD", "VERTEX",
    "WESTERN", "ZENITH",
)
_NOUN = (
    "ANALYTICS", "BANCORP", "BIOSCIENCES", "BRANDS", "CAPITAL", "CHEMICALS", "COMMUNICATIONS", "DEVICES",
    "DYNAMICS", "ENERGY", "ENTERTAINMENT", "FINANCIAL", "FOODS", "GENOMICS", "HEALTH", "HOLDINGS", "INDUSTRIES",
    "INSTRUMENTS", "LOGISTICS", "MATERIALS", "MEDICAL", "METALS", "MINING", "NETWORKS", "PHARMACEUTICALS",
    "PROPERTIES", "RESOURCES", "RETAIL", "SEMICONDUCTOR", "SOFTWARE", "SYSTEMS", "TECHNOLOGIES", "THERAPEUTICS",
    "TRANSPORT", "UTILITIES", "WIRELESS",
)
_SUFFIX = ("INC", "CORP", "CO", "LTD", "PLC", "GROUP INC", "HOLDINGS INC", "TRUST", "LP", "N.V.")

# (share, earliest minute, latest minute) of acceptance times, New York local minutes since midnight.
_TIME_BANDS: tuple[tuple[float, int, int], ...] = (
    (0.15, 6 * 60, 9 * 60 + 29),  # pre-market
    (0.45, 9 * 60 + 30, 15 * 60 + 59),  # intraday
    (0.25, 16 * 60, 17 * 60 + 30),  # after the close, before EDGAR's cut-off
    (0.15, 17 * 60 + 31, 21 * 60 + 59),  # late evening: next business day's filing date
)
_ACCEPTANCE_SHARE = 0.35
_TICKER_SHARE = 0.85


@attrs.frozen
class SynthIssuer:
    cik: str
    name: str
    ticker: str | None


def _rng(seed: int, stream: str) -> random.Random:
    # Reproducible synthetic data, not secrets: a seeded PRNG is what we want.
    return random.Random(f"{GENERATOR}:{seed}:{stream}")  # noqa: S311


def synth_issuers(n: int, seed: int) -> list[SynthIssuer]:
    """``n`` distinct issuers with names, CIKs and (for most) tickers; deterministic in ``seed``."""
    rng = _rng(seed, "issuers")
    names: set[str] = set()
    tickers: set[str] = set()
    ciks: set[int] = set()
    out: list[SynthIssuer] = []
    while len(out) < n:
        name = f"{rng.choice(_ADJ)} {rng.choice(_NOUN)} {rng.choice(_SUFFIX)}"
        if name in names:
            continue
        names.add(name)
        cik = rng.randrange(1_000_000, 1_999_999)
        while cik in ciks:
            cik = rng.randrange(1_000_000, 1_999_999)
        ciks.add(cik)
        ticker: str | None = None
        if rng.random() < _TICKER_SHARE:
            letters = [w[0] for w in name.split()] + list(name.split()[1][:3])
            for _ in range(20):
                k = rng.choice((3, 4))
                cand = "".join(rng.choice(letters) for _ in range(k))
                if cand not in tickers:
                    ticker = cand
                    tickers.add(cand)
                    break
        out.append(SynthIssuer(str(cik), name, ticker))
    return out


def _cumulative(weights: Sequence[float]) -> list[float]:
    total = sum(weights)
    acc = 0.0
    out: list[float] = []
    for w in weights:
        acc += w / total
        out.append(acc)
    return out


def synth_filings(
    rows: int,
    start: dt.date,
    end: dt.date,
    seed: int,
    issuers: Sequence[SynthIssuer] | None = None,
) -> list[Filing]:
    """Exactly ``rows`` synthetic filings with filing dates in [start, end]."""
    if rows < 1:
        raise ConfigError(f"--rows: expected a positive number of rows, got {rows}")
    if start > end:
        raise ConfigError(f"--start {start} is after --end {end}")
    days = sec_business_days(start - dt.timedelta(days=7), end)
    in_window = [d for d in days if start <= d <= end]
    if not in_window:
        raise ConfigError(f"window {start}..{end} holds no SEC business day")
    issuers = list(issuers) if issuers is not None else synth_issuers(max(50, min(3000, rows // 12)), seed)
    rng = _rng(seed, "filings")
    form_cum = _cumulative([w for _, w in FORM_MIX])
    band_cum = _cumulative([w for w, _, _ in _TIME_BANDS])
    # Issuer activity is skewed: a few file often (Zipf-like weights).
    issuer_cum = _cumulative([1.0 / math.sqrt(i + 1) for i in range(len(issuers))])
    out: list[Filing] = []
    seq = 0
    while len(out) < rows:
        seq += 1
        # Acceptance day: any SEC business day from a week before the window (late-evening filings roll over).
        day = days[rng.randrange(len(days))]
        lo_min, hi_min = _band(rng.random(), band_cum)
        minute = rng.randint(lo_min, hi_min)
        second = rng.randrange(60)
        local = dt.datetime.combine(day, dt.time(minute // 60, minute % 60, second), tzinfo=NEW_YORK)
        accepted = local.astimezone(dt.UTC)
        filed = filing_date_for(accepted)
        if not (start <= filed <= end):
            continue
        form = FORM_MIX[bisect.bisect_left(form_cum, rng.random())][0]
        issuer = issuers[min(bisect.bisect_left(issuer_cum, rng.random()), len(issuers) - 1)]
        agent = 1_000_000 + rng.randrange(9_000)
        accession = f"{agent:010d}-{filed.year % 100:02d}-{seq:06d}"
        stamped = rng.random() < _ACCEPTANCE_SHARE
        out.append(
            Filing(
                accession=accession,
                cik=issuer.cik,
                issuer=issuer.name,
                form=form,
                partition_date=filed,
                published_at=filed,
                acceptance_at=accepted if stamped else None,
                acceptance_real=accepted,  # the truth, for the answer key; arms serve it only when stamped
                disseminated_at=disseminated_at_for(accepted) if stamped else None,
                ticker=issuer.ticker,
                url=f"https://www.sec.gov/Archives/edgar/data/{issuer.cik}/{accession.replace('-', '')}/{accession}-index.htm",
            )
        )
    return out


def _band(u: float, band_cum: Sequence[float]) -> tuple[int, int]:
    _, lo, hi = _TIME_BANDS[min(bisect.bisect_left(band_cum, u), len(_TIME_BANDS) - 1)]
    return lo, hi


def write_synth_release(
    out: str | Path,
    *,
    rows: int,
    start: dt.date,
    end: dt.date,
    seed: int,
    name: str | None = None,
    overwrite: bool = False,
    key_seed: str = "",
    release_format: str | None = None,
) -> Path:
    """Generate and write a synthetic release. Same arguments, same bytes: the row-key key and the mask secret
    follow from the filings (so from ``seed``) and ``key_seed``. ``release_format`` (default: the current one)
    can ask for ``evalkit-release/2``, the public ten-year shift, to reproduce and test an old release."""
    filings = synth_filings(rows, start, end, seed)
    provenance = {
        "kind": "synthetic",
        "generator": GENERATOR,
        "seed": seed,
        "rows_requested": rows,
        "statement": "Synthetic filings generated by evalkit; not EDGAR data. Issuers, tickers and CIKs are invented.",
        "dissemination_rule": "after 17:30 New York -> next SEC business day 06:00 New York",
    }
    return write_release(
        out,
        name=name or f"synthetic-{seed}-{rows}",
        start=start,
        end=end,
        filings=filings,
        provenance=provenance,
        overwrite=overwrite,
        key_seed=key_seed,
        **({"release_format": release_format} if release_format else {}),
    )


# --- synthetic prices --------------------------------------------------------------------------------------


def synth_prices_csv(
    tickers: Sequence[str],
    start: dt.date,
    end: dt.date,
    seed: int,
    gaps: Mapping[tuple[str, dt.date], float] | None = None,
) -> bytes:
    """Daily bars (ticker,date,open,high,low,close,adj_close,volume) as random walks over NYSE sessions.

    Clearly synthetic: geometric random walks with a small drift, one per ticker, deterministic in ``seed``.
    ``gaps`` multiplies a ticker's opening price on a date (an overnight reaction to news).
    """
    gaps = gaps or {}
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["ticker", "date", "open", "high", "low", "close", "adj_close", "volume"])
    days = [s.date for s in nyse().between(start, end)]
    for t in sorted(tickers):
        rng = _rng(seed, f"prices:{t}")
        price = rng.uniform(8.0, 300.0)
        for d in days:
            o = price * math.exp(rng.gauss(0.0, 0.01)) * gaps.get((t, d), 1.0)
            c = o * math.exp(rng.gauss(0.0003, 0.018))
            hi = max(o, c) * (1 + abs(rng.gauss(0, 0.006)))
            lo = min(o, c) * (1 - abs(rng.gauss(0, 0.006)))
            vol = int(rng.lognormvariate(13.0, 1.0))
            w.writerow([t, d.isoformat(), f"{o:.4f}", f"{hi:.4f}", f"{lo:.4f}", f"{c:.4f}", f"{c:.4f}", vol])
            price = c
    return buf.getvalue().encode()


# --- the built-in demo --------------------------------------------------------------------------------------


@attrs.frozen
class DemoSpec:
    name: str
    rows: int
    start: dt.date
    end: dt.date
    seed: int
    issuers: int
    prices_file: str
    prices_end: dt.date  # prices run past the window so holds that start near its end can exit


DEMO = DemoSpec(
    name="evalkit-demo",
    rows=2400,
    start=dt.date(2023, 1, 3),
    end=dt.date(2023, 3, 31),
    seed=20230103,
    issuers=200,
    prices_file="prices.synthetic.csv",
    prices_end=dt.date(2023, 4, 28),
)
PRICE_SOURCE = "SYNTHETIC random-walk prices generated by evalkit bundle demo (not market data)"


# Material filings move the price at the first opening bell after EDGAR accepted them. The mean reaction is
# positive, so a clock that enters before acceptance (leaky) books a return no one could have earned.
_REACTION = {"8-K": (0.02, 0.03), "10-Q": (0.015, 0.03), "10-K": (0.015, 0.03), "8-K/A": (0.01, 0.02)}


def _news_gaps(filings: Sequence[Filing], seed: int) -> dict[tuple[str, dt.date], float]:
    calendar = nyse()
    gaps: dict[tuple[str, dt.date], float] = {}
    for f in filings:
        reaction = _REACTION.get(f.form)
        accepted = f.acceptance_real
        if reaction is None or f.ticker is None or accepted is None:
            continue
        rng = _rng(seed, f"news:{f.accession}")
        day = calendar.next_session_after(accepted).date
        gaps[(f.ticker, day)] = gaps.get((f.ticker, day), 1.0) * math.exp(rng.gauss(*reaction))
    return gaps


def write_demo_release(out: str | Path, *, overwrite: bool = False, release_format: str | None = None) -> Path:
    """Write the built-in demo release to ``out`` plus its synthetic daily prices as a companion file.
    ``release_format`` (default: the current one) can ask for ``evalkit-release/2`` (the public ten-year shift) to
    reproduce the demo as it was; its mask secret follows from the spec, so the demo stays byte-reproducible.

    The prices sit inside the release directory as ``prices.synthetic.csv``; their sha256 is recorded in the
    manifest's provenance, so the release's content digest binds them.
    """
    spec = DEMO
    issuers = synth_issuers(spec.issuers, spec.seed)
    filings = synth_filings(spec.rows, spec.start, spec.end, spec.seed, issuers)
    prices = synth_prices_csv(
        [i.ticker for i in issuers if i.ticker], spec.start, spec.prices_end, spec.seed, _news_gaps(filings, spec.seed)
    )
    provenance = {
        "kind": "synthetic",
        "generator": GENERATOR,
        "seed": spec.seed,
        "rows_requested": spec.rows,
        "statement": "The built-in evalkit demo: synthetic filings, not EDGAR data. Issuers, tickers and CIKs are invented.",
        "dissemination_rule": "after 17:30 New York -> next SEC business day 06:00 New York",
        "companion_files": {spec.prices_file: {"sha256": digest_bytes(prices), "source": PRICE_SOURCE}},
    }
    target = write_release(
        out,
        name=spec.name,
        start=spec.start,
        end=spec.end,
        filings=filings,
        provenance=provenance,
        overwrite=overwrite,
        **({"release_format": release_format} if release_format else {}),
    )
    atomic_write_bytes(target / spec.prices_file, prices)
    return target


def demo_release_path() -> Path:
    """The built-in demo release, generated on first use into the cache directory and reused after that."""
    from evalkit_core._cache import cache_dir
    from evalkit_core._release import RELEASE_FORMAT

    spec_key = digest_bytes(f"{GENERATOR}:{RELEASE_FORMAT}:{DEMO!r}".encode())[7:23]
    target = cache_dir() / "demo" / f"{DEMO.name}-{spec_key}"
    if (target / "release.json").is_file() and (target / DEMO.prices_file).is_file():
        return target
    try:
        write_demo_release(target, overwrite=True)
    except OSError:
        # Another process may have written it at the same moment; use theirs if it is complete.
        if not (target / DEMO.prices_file).is_file():
            raise
    return target
