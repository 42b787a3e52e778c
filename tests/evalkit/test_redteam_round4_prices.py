"""Round four of attacks on the strict price reader (issue 29, item 4).

Odd price files are refused with one line naming the file and the field, or read to the plain decimal they hold;
never a traceback, never a silent choice. Found in this round (each failed before the fix): a Parquet column of a
type with no text form (a list, a duration) ended ``evalkit run`` with polars' ``InvalidOperationError``, even in a
column the loader does not read; a repeated ``open`` (or ``ticker``) header silently used the first of two
columns; a subnormal open (``5e-324``) was a positive price whose return overflows to infinity.
"""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

import polars as pl
import pytest

from evalkit.pit import PricesError, load_prices
from evalkit_cli._app import main

HEADER = "ticker,date,open\n"


def refused(p: Path) -> str:
    with pytest.raises(PricesError) as info:
        load_prices(p, source="x")
    msg = str(info.value)
    assert msg.startswith(f"{p}: "), msg
    assert "\n" not in msg
    return msg


def accepted(p: Path) -> list[tuple[str, dt.date, float]]:
    return load_prices(p, source="x").frame.rows()


GOOD_ROW = [("AAA", dt.date(2020, 1, 2), 12.5)]


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("bom", "\ufeff" + HEADER + "AAA,2020-01-02,12.5\n"),
        ("crlf", HEADER.replace("\n", "\r\n") + "AAA,2020-01-02,12.5\r\n"),
        ("quoted", HEADER + 'AAA,2020-01-02,"12.5"\n'),
        ("spaces", HEADER + "AAA,2020-01-02, 12.5 \n"),
        ("leading-zeros", HEADER + "AAA,2020-01-02,0012.50\n"),
    ],
)
def test_plain_decimals_in_odd_wrappings_read_to_their_value(name: str, text: str, tmp_path: Path) -> None:
    p = tmp_path / f"{name}.csv"
    p.write_text(text, encoding="utf-8", newline="")
    assert accepted(p) == GOOD_ROW


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ('"1,000.5"', "expected a number, got '1,000.5'"),
        ("0x1p3", "expected a number, got '0x1p3'"),
        ("1_000", "expected a number, got '1_000'"),
        ("\uff11\uff12.5", "expected a number"),
        ("\u0661\u0662", "expected a number"),
        ("12.5\x00", "expected a number"),
        ("1e400", "expected a positive price, got '1e400'"),
        ("1e-400", "expected a positive price, got '1e-400'"),
        ("-0.0", "expected a positive price, got '-0.0'"),
        ("1" * 400, "expected a positive price"),
        ("5e-324", "expected a price from 1e-06 to 1e+09, got '5e-324'"),
        ("2.2250738585072014e-308", "expected a price from 1e-06 to 1e+09"),
        ("0.0000000001", "expected a price from 1e-06 to 1e+09"),
        ("4611686018427387904", "expected a price from 1e-06 to 1e+09"),
    ],
)
def test_odd_opens_are_refused_in_one_line(value: str, needle: str, tmp_path: Path) -> None:
    p = tmp_path / "prices.csv"
    p.write_text(HEADER + "AAA,2020-01-02,12.5\n" + f"AAA,2020-01-03,{value}\n", encoding="utf-8")
    msg = refused(p)
    assert msg.startswith(f"{p}: line 3: field 'open' "), msg
    assert needle in msg, msg


@pytest.mark.parametrize(
    "header", ["ticker,date,open,open", "ticker,ticker,date,open", "ticker,date,date,open"]
)
@pytest.mark.parametrize("first_good", [True, False])
def test_a_repeated_column_is_refused_not_resolved_by_order(
    header: str, first_good: bool, tmp_path: Path
) -> None:
    p = tmp_path / "prices.csv"
    values = {"ticker": ["AAA", "BBB"], "date": ["2020-01-02", "2020-01-03"], "open": ["12.5", "99"]}
    seen: dict[str, int] = {}
    row: list[str] = []
    for column in header.split(","):
        k = seen[column] = seen.get(column, -1) + 1
        row.append(values[column][k if first_good else 1 - k] if k < 2 else "")
    p.write_text(header + "\n" + ",".join(row) + "\n")
    msg = refused(p)
    twice = next(c for c in header.split(",") if header.count(c) == 2)
    assert msg == f"{p}: line 1: column(s) {twice!r} repeat; expected each of ticker, date, open once", msg


def frame(**columns: object) -> pl.DataFrame:
    base: dict[str, object] = {"ticker": ["AAA"], "date": [dt.date(2020, 1, 2)], "open": [12.5]}
    return pl.DataFrame({**base, **columns})


@pytest.mark.parametrize(
    ("name", "df", "field"),
    [
        ("list-open", frame(open=[[12.5]]), "open"),
        ("struct-open", frame(open=[{"a": 12.5}]), "open"),
        ("duration-date", frame(date=[dt.timedelta(days=1)]), "date"),
        ("list-ticker", frame(ticker=[["AAA"]]), "ticker"),
        ("binary-ticker", frame(ticker=[b"\xff\xfe"]), "ticker"),
    ],
)
def test_parquet_columns_with_no_text_form_are_refused_in_one_line(
    name: str, df: pl.DataFrame, field: str, tmp_path: Path
) -> None:
    p = tmp_path / f"{name}.parquet"
    df.write_parquet(p)
    msg = refused(p)
    assert f"field {field!r} expected text, numbers or dates, got a " in msg, msg


@pytest.mark.parametrize(
    "extra",
    [{"volume": [[1, 2]]}, {"meta": [{"a": 1}]}, {"lag": [dt.timedelta(1)]}, {"raw": [b"\xff"]}],
    ids=["list", "struct", "duration", "binary"],
)
def test_a_column_the_loader_does_not_read_refuses_nothing_whatever_its_type(
    extra: dict[str, object], tmp_path: Path
) -> None:
    p = tmp_path / "prices.parquet"
    frame(**extra).write_parquet(p)
    assert accepted(p) == GOOD_ROW


def test_the_cli_refuses_a_list_column_in_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    p = tmp_path / "prices.parquet"
    frame(open=[[12.5]]).write_parquet(p)
    out = tmp_path / "out"
    argv = ["evalkit", "run", "--agent", "stub", "--prices", str(p), "--price-source", "test",
            "--trajectory", str(out / "t.jsonl"), "--receipt", str(out / "r.json")]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exc:
        main()
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
    assert "field 'open' expected text, numbers or dates" in err
    assert not out.exists()
