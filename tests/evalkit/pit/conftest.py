"""Fixtures for the PIT-run tests: one small synthetic release (built once per session), its synthetic prices,
a tiny hand-built release whose returns can be worked out by hand, and helpers to read run outputs.

Nothing here touches the network; the session-wide ``EVALKIT_CACHE_DIR`` comes from ``tests/conftest.py``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalkit_core import Filing, Release, write_release
from evalkit_core._synth import synth_prices_csv, write_synth_release

SYNTH_START = dt.date(2023, 2, 1)
SYNTH_END = dt.date(2023, 3, 31)
SYNTH_ROWS = 1500
SYNTH_SEED = 11
RUN_START = "2023-03-01"
RUN_END = "2023-03-10"

UTC = dt.UTC


@pytest.fixture(scope="session")
def synth_release_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 1,500-row synthetic release over 2023-02-01..2023-03-31, all forms (treat as read-only)."""
    out = tmp_path_factory.mktemp("pit-synth") / "release"
    return write_synth_release(out, rows=SYNTH_ROWS, start=SYNTH_START, end=SYNTH_END, seed=SYNTH_SEED)


@pytest.fixture(scope="session")
def synth_release(synth_release_dir: Path) -> Release:
    return Release.load(synth_release_dir)


@pytest.fixture(scope="session")
def synth_prices_path(synth_release: Release, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Synthetic daily bars for every ticker in the answer key, running past the window so holds can exit."""
    tickers = sorted({t for t in synth_release.answer_key.get_column("ticker").to_list() if t})
    data = synth_prices_csv(tickers, SYNTH_START, dt.date(2023, 5, 31), SYNTH_SEED)
    path = tmp_path_factory.mktemp("pit-prices") / "prices.csv"
    path.write_bytes(data)
    return path


@pytest.fixture(scope="session")
def answer_key(synth_release: Release) -> dict[str, dict[str, Any]]:
    return {r["row_key"]: r for r in synth_release.answer_key.iter_rows(named=True)}


@pytest.fixture
def in_tmp(tmp_path: Path) -> Iterator[Path]:
    """chdir into a fresh temp directory for the test (runs write relative trajectory/receipt paths)."""
    old = Path.cwd()
    os.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.chdir(old)


# --- the hand-built release ------------------------------------------------------------------------------------
#
# NYSE sessions in March 2023: 1 W, 2 Th, 3 F, 6 M, 7 T, 8 W, 9 Th, 10 F, 13 M ...; the opening bell is 14:30Z
# (EST) until the DST switch on 12 March. hold_sessions = 2.
#
# A  AWI  filed 03-02, accepted 03-02 15:00Z (10:00 ET, intraday)
#        leaky: known 03-02 00:00Z -> entry 03-02 (bell 14:30Z < 15:00Z: lookahead)
#        dump:  known 03-02 23:59:59Z -> entry 03-03;   pit: known 15:00Z -> entry 03-03
# B  BBB  filed 03-03, accepted 03-03 12:00Z (07:00 ET, pre-market)
#        leaky: entry 03-03 (no lookahead); dump: entry 03-06; pit: entry 03-03
# C  none filed 03-06, no acceptance stamp (pit falls back to the dump rule)
#        leaky: entry 03-06 (lookahead unknown); dump & pit: entry 03-07 -> unpriced (no ticker)
# D  DDD  filed 03-07, accepted 03-07 22:00Z (17:00 ET), disseminated 03-08 11:00Z; no prices for DDD
#        leaky: entry 03-07 (14:30Z < 22:00Z: lookahead); dump: entry 03-08; pit: known 11:00Z -> entry 03-08
# E  none filed 03-09, stamp flagged (served as null), real acceptance 03-09 15:00Z
#        leaky: entry 03-09 (14:30Z < 15:00Z: lookahead, checked against the answer key's real stamp)
#        dump & pit (fallback): entry 03-10
#
# Opens:  AWI 03-02 100, 03-03 110, 03-06 120, 03-07 90, 03-08 130
#         BBB 03-03 50,  03-06 55,  03-07 60,  03-08 40, 03-09 45
# Returns (exit at the open two sessions after entry):
#   A leaky 03-02 -> 03-06: 120/100-1 = +0.2     A dump/pit 03-03 -> 03-07: 90/110-1 = -2/11
#   B leaky/pit 03-03 -> 03-07: 60/50-1 = +0.2   B dump 03-06 -> 03-08: 40/55-1 = -3/11

HAND_ISSUERS = {
    "A": ("ALPHA WIDGETS INC", "0000111111", "AWI"),
    "B": ("BRAVO BANCORP CORP", "0000222222", "BBB"),
    "C": ("CHARLIE HOLDINGS LTD", "0000333333", None),
    "D": ("DELTA DYNAMICS PLC", "0000444444", "DDD"),
    "E": ("ECHO ENERGY CO", "0000555555", None),
}
HAND_ACCESSIONS = {k: f"0000999999-23-00000{i}" for i, k in enumerate("ABCDE", start=1)}


def _t(day: int, hour: int, minute: int = 0) -> dt.datetime:
    return dt.datetime(2023, 3, day, hour, minute, tzinfo=UTC)


def hand_filings() -> list[Filing]:
    spec: dict[str, dict[str, Any]] = {
        "A": {"day": 2, "accepted": _t(2, 15)},
        "B": {"day": 3, "accepted": _t(3, 12)},
        "C": {"day": 6},
        "D": {"day": 7, "accepted": _t(7, 22), "disseminated": _t(8, 11)},
        "E": {"day": 9, "real": _t(9, 15), "flags": ("acceptance_flagged",)},
    }
    out: list[Filing] = []
    for k, s in spec.items():
        issuer, cik, ticker = HAND_ISSUERS[k]
        d = dt.date(2023, 3, s["day"])
        out.append(
            Filing(
                accession=HAND_ACCESSIONS[k],
                cik=cik,
                issuer=issuer,
                form="8-K",
                partition_date=d,
                published_at=d,
                acceptance_at=s.get("accepted"),
                acceptance_real=s.get("real", s.get("accepted")),
                disseminated_at=s.get("disseminated"),
                ticker=ticker,
                url=f"https://www.sec.gov/Archives/edgar/data/{cik}/{HAND_ACCESSIONS[k]}-index.htm",
                flags=s.get("flags", ()),
            )
        )
    return out


HAND_PRICES = """ticker,date,open,close
AWI,2023-03-01,95,96
AWI,2023-03-02,100,101
AWI,2023-03-03,110,111
AWI,2023-03-06,120,121
AWI,2023-03-07,90,91
AWI,2023-03-08,130,131
AWI,2023-03-09,131,132
AWI,2023-03-10,132,133
BBB,2023-03-01,49,49
BBB,2023-03-02,49,49
BBB,2023-03-03,50,51
BBB,2023-03-06,55,56
BBB,2023-03-07,60,61
BBB,2023-03-08,40,41
BBB,2023-03-09,45,46
BBB,2023-03-10,46,47
"""


@pytest.fixture(scope="session")
def hand_release_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pit-hand") / "release"
    return write_release(
        out,
        name="hand-built",
        start=dt.date(2023, 3, 1),
        end=dt.date(2023, 3, 10),
        filings=hand_filings(),
        provenance={"kind": "synthetic", "statement": "hand-built test release"},
    )


@pytest.fixture(scope="session")
def hand_filing_list() -> list[Filing]:
    """The hand-built filings, for tests that build a variant of the release."""
    return hand_filings()


@pytest.fixture(scope="session")
def hand_prices_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("pit-hand-prices") / "prices.csv"
    p.write_text(HAND_PRICES)
    return p


@pytest.fixture(scope="session")
def hand_keys(hand_release_dir: Path) -> dict[str, str]:
    """Letter -> row_key: the keyed hash of the letter's accession number under the hand release's key."""
    masks = Release.load(hand_release_dir).masks
    return {k: masks.row_key(a) for k, a in HAND_ACCESSIONS.items()}


# --- reading outputs -------------------------------------------------------------------------------------------


def read_events(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


@pytest.fixture
def events_of():
    return read_events


@pytest.fixture
def cli(capsys, monkeypatch):
    """Run the real ``evalkit`` entry point in-process: returns (exit code, stdout, stderr)."""
    import sys

    from evalkit_cli._app import main

    def invoke(*args: str) -> tuple[int, str, str]:
        import signal

        capsys.readouterr()
        monkeypatch.setattr(sys, "argv", ["evalkit", *map(str, args)])
        sigint = signal.getsignal(signal.SIGINT)  # the CLI installs its own Ctrl-C handler
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        else:  # main() may return after a successful command
            code = 0
        finally:
            signal.signal(signal.SIGINT, sigint)
        out, err = capsys.readouterr()
        return code, out, err

    return invoke
