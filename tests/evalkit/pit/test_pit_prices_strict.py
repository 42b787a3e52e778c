"""Prices are read strictly: an ``open`` (or any other price column) of ``n/a`` or any text that is not a number is
refused with one line naming the file, the line and the column, from Python and through the CLI (exit 2), like a
zero or negative open; never counted as an unpriced trade. Only an empty field is a missing bar."""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl
import pytest

from evalkit.pit import PricesError, load_prices
from evalkit_cli._app import main

HEADER = "ticker,date,open,high,low,close\n"
GOOD = "AAA,2023-03-01,10,11,9,10.5\nAAA,2023-03-02,11,12,10,11.5\n"

MARKERS = ["n/a", "N/A", "NA", "na", "null", "NULL", "None", "NaN", "nan", "-", "--", "#N/A", "?", "abc",
           "12,5", "1e", "inf", "-inf", "Infinity", "0x10", "$12", "12 USD", "\uff11\uff12"]  # full-width digits


@pytest.mark.parametrize("marker", MARKERS)
def test_an_open_that_is_not_a_number_is_refused_naming_file_line_and_column(marker: str, tmp_path: Path) -> None:
    p = tmp_path / "prices.csv"
    quoted = f'"{marker}"' if "," in marker else marker
    p.write_text(HEADER + GOOD + f"BBB,2023-03-01,{quoted},1,1,1\n")
    with pytest.raises(PricesError) as info:
        load_prices(p, source="x")
    msg = str(info.value)
    assert msg.startswith(f"{p}: line 4: field 'open' expected "), msg
    assert repr(marker) in msg or "positive price" in msg, msg
    assert "\n" not in msg


@pytest.mark.parametrize("column", ["high", "low", "close"])
@pytest.mark.parametrize("marker", ["n/a", "NaN", "abc"])
def test_a_marker_in_a_column_the_loader_does_not_read_refuses_nothing(column: str, marker: str, tmp_path: Path) -> None:
    """Only ``open`` is read: real vendor files hold ``null`` highs, and such a file must still load (its opens are
    what the run uses, checked strictly above)."""
    values = {"high": "1", "low": "1", "close": "1", column: marker}
    p = tmp_path / "prices.csv"
    p.write_text(HEADER + GOOD + f"BBB,2023-03-01,5,{values['high']},{values['low']},{values['close']}\n")
    prices = load_prices(p, source="x")
    assert prices.frame.height == 3
    assert prices.missing_bars == 0


def test_parquet_text_open_names_row_and_column(tmp_path: Path) -> None:
    pq = tmp_path / "p.parquet"
    pl.DataFrame({"ticker": ["A", "B"], "date": ["2023-03-01", "2023-03-01"], "open": ["1.5", "n/a"]}).write_parquet(pq)
    with pytest.raises(PricesError, match=rf"^{pq}: row 2: field 'open' expected a number, got 'n/a'$"):
        load_prices(pq, source="x")
    pl.DataFrame({"ticker": ["A", "B"], "date": ["2023-03-01", "2023-03-01"], "open": [1.5, None]}).write_parquet(pq)
    assert load_prices(pq, source="x").missing_bars == 1  # a null is an empty field, not text


def test_empty_fields_are_missing_bars_not_errors(tmp_path: Path) -> None:
    p = tmp_path / "prices.csv"
    p.write_text(HEADER + GOOD + "BBB,2023-03-01,,,,\nBBB,2023-03-02,7,,,\n")
    prices = load_prices(p, source="x")
    assert prices.missing_bars == 1
    assert prices.frame.height == 3


@pytest.mark.parametrize(("body", "needle"), [
    ("BBB,2023-03-01,n/a,1,1,1\n", "line 4: field 'open' expected a number, got 'n/a'"),
    ("BBB,2023-03-01,NaN,1,1,1\n", "line 4: field 'open' expected a number, got 'NaN'"),
    ("BBB,2023-03-01,-5,1,1,1\n", "line 4: field 'open' expected a positive price, got '-5'"),
    ("BBB,2023-03-01,0,1,1,1\n", "line 4: field 'open' expected a positive price, got '0'"),
])
def test_the_cli_refuses_in_one_line_exit_2_nothing_written(
    body: str, needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    p = tmp_path / "prices.csv"
    p.write_text(HEADER + GOOD + body)
    out = tmp_path / "out"
    argv = ["evalkit", "run", "--agent", "stub", "--prices", str(p), "--price-source", "test",
            "--trajectory", str(out / "t.jsonl"), "--receipt", str(out / "r.json")]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exc:
        main()
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert f"{p}: {needle}" in err, err
    assert "Traceback" not in err
    assert not out.exists()


def test_a_vendor_null_row_is_a_missing_bar_and_a_null_open_beside_numbers_is_refused(tmp_path: Path) -> None:
    """Real exports write a day with no bar as a row of ``null``: that is a missing bar. ``null`` in the open of a
    row with numbers elsewhere is text where a price should be, and refused."""
    p = tmp_path / "prices.csv"
    p.write_text(HEADER + GOOD + "BBB,2023-03-01,null,null,null,null\nBBB,2023-03-02,,null,,\n")
    assert load_prices(p, source="x").missing_bars == 2
    p.write_text(HEADER + GOOD + "BBB,2023-03-01,null,5,4,5\n")
    with pytest.raises(PricesError, match=rf"^{p}: line 4: field 'open' expected a number, got 'null'$"):
        load_prices(p, source="x")
    p.write_text(HEADER + GOOD + "BBB,2023-03-01,n/a,n/a,n/a,n/a\n")  # only the literal null marks a null row
    with pytest.raises(PricesError, match="field 'open' expected a number, got 'n/a'"):
        load_prices(p, source="x")
