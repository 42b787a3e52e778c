"""Every PIT user error is one line naming the file and the field, exit 2, and nothing half-written.

Hostile price files (duplicates, bad opens, malformed dates), configs that are wrong against the release or the
machine, output paths under a file, and a release cache with the wrong columns.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest

from evalkit.pit import PricesError, RunConfig, load_prices, run, stub_agent
from evalkit_core import Release

RUN_START, RUN_END = "2023-03-01", "2023-03-10"
HEADER = "ticker,date,open,high,low,close\n"
GOOD = "AAA,2023-03-01,10,11,9,10.5\nAAA,2023-03-02,11,12,10,11.5\n"


def _one_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


# --- prices ----------------------------------------------------------------------------------------------------

BAD_PRICES = {
    "duplicate bar, same values": (GOOD + "AAA,2023-03-01,10,11,9,10.5\n", 4, ("ticker", "date", "line 2")),
    "duplicate bar, other open": (
        GOOD + "BBB,2023-03-01,5,5,5,5\nAAA,2023-03-02,99,99,99,99\n",
        5,
        ("line 3",),
    ),
    "duplicate after whitespace": (GOOD + " AAA ,2023-03-02,11,12,10,11.5\n", 4, ("ticker",)),
    "zero open": (GOOD + "BBB,2023-03-01,0,1,0,1\n", 4, ("open",)),
    "negative open": ("BBB,2023-03-01,-3.5,1,0,1\n", 2, ("open",)),
    "unparseable open": (GOOD + "BBB,2023-03-01,12.5.1,1,0,1\n", 4, ("open",)),
    "decimal comma": (GOOD + 'BBB,2023-03-01,"12,5",1,0,1\n', 4, ("open",)),
    "infinite open": ("BBB,2023-03-01,inf,1,0,1\n", 2, ("open",)),
    "overflowing open": ("BBB,2023-03-01,1e400,1,0,1\n", 2, ("open",)),
    "trailing text after a date": (GOOD + "BBB,2023-03-01junk,5,5,5,5\n", 4, ("date",)),
    "date and a time of day": (GOOD + "BBB,2023-03-01 09:30:00,5,5,5,5\n", 4, ("date",)),
    "US date": ("BBB,03/01/2023,5,5,5,5\n", 2, ("date",)),
    "impossible date": ("BBB,2023-02-30,5,5,5,5\n", 2, ("date",)),
    "empty ticker": (GOOD + ",2023-03-01,5,5,5,5\n", 4, ("ticker",)),
    "no data rows": ("", None, ("open", "no usable row")),
    "only missing opens": (
        "AAA,2023-03-01,,1,1,1\nAAA,2023-03-02,,1,1,1\n",
        None,
        ("open", "no usable row"),
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_PRICES))
def test_bad_price_files_are_one_error_naming_file_line_and_field(name, tmp_path):
    body, line, needles = BAD_PRICES[name]
    p = tmp_path / "prices.csv"
    p.write_text(HEADER + body)
    with pytest.raises(PricesError) as info:
        load_prices(p, source="hostile")
    msg = str(info.value)
    assert msg.startswith(f"{p}: "), msg
    if line is not None:
        assert f": line {line}: " in msg, msg
    for needle in needles:
        assert needle in msg, (needle, msg)


def test_duplicates_are_refused_whatever_their_order(tmp_path):
    """Row order used to decide which bar won (the issue measured -2.54% against +2.22%)."""
    a, b = "AAA,2023-03-01,10,1,1,1\n", "AAA,2023-03-01,20,1,1,1\n"
    for i, body in enumerate((a + b, b + a)):
        p = tmp_path / f"p{i}.csv"
        p.write_text(HEADER + body)
        with pytest.raises(
            PricesError, match=r"line 3: fields 'ticker','date' repeat \(AAA, 2023-03-01\) of line 2"
        ):
            load_prices(p, source="x")


def test_missing_opens_are_no_bar_and_counted(tmp_path):
    """Only an empty open is no bar; a marker (null, NaN, n/a) is refused (test_pit_prices_strict.py)."""
    p = tmp_path / "p.csv"
    p.write_text(HEADER + GOOD + "AAA,2023-03-03,,1,1,1\nAAA,2023-03-06, ,1,1,1\nAAA,2023-03-07,,,,\n")
    prices = load_prices(p, source="x")
    assert prices.missing_bars == 3
    assert prices.frame.height == 2


def test_gzip_and_parquet_name_line_and_row(tmp_path):
    import gzip

    gz = tmp_path / "p.csv.gz"
    gz.write_bytes(gzip.compress((HEADER + GOOD + "AAA,2023-03-03,abc,1,1,1\n").encode()))
    with pytest.raises(PricesError, match=rf"^{re.escape(str(gz))}: line 4: field 'open'"):
        load_prices(gz, source="x")
    pq = tmp_path / "p.parquet"
    pl.DataFrame(
        {"ticker": ["A", "A"], "date": ["2023-03-01", "2023-03-01"], "open": [1.0, 2.0]}
    ).write_parquet(pq)
    with pytest.raises(PricesError, match=rf"^{re.escape(str(pq))}: row 2: fields 'ticker','date' repeat"):
        load_prices(pq, source="x")
    pl.DataFrame({"ticker": ["A"], "date": ["2023-03-01"], "open": [float("inf")]}).write_parquet(pq)
    with pytest.raises(PricesError, match="row 1: field 'open'"):
        load_prices(pq, source="x")


def _config(tmp_path: Path, release_dir: Path, **kw) -> Path:
    data = {
        "bundle_path": str(release_dir),
        "forms": ["8-K"],
        "start": RUN_START,
        "end": RUN_END,
        "trajectory_path": str(tmp_path / "out" / "t.jsonl"),
        "receipt_path": str(tmp_path / "out" / "r.json"),
        **kw,
    }
    p = tmp_path / "run.json"
    p.write_text(json.dumps(data))
    return p


def test_cli_refuses_a_bad_price_file_and_writes_nothing(cli, synth_release_dir, tmp_path):
    bad = tmp_path / "prices.csv"
    bad.write_text(HEADER + GOOD + "AAA,2023-03-01,12,1,1,1\n")
    cfg = _config(tmp_path, synth_release_dir, prices_path=str(bad), price_source="hostile")
    code, _, err = cli("run", "--config", cfg)
    assert code == 2
    line = _one_line(err)
    assert str(cfg) in line and "prices_path" in line and f"{bad}: line 4" in line, line
    assert not (tmp_path / "out").exists()
    code, _, err = cli("run", "--config", cfg, "--prices", bad, "--price-source", "flag")
    assert code == 2
    assert _one_line(err).startswith(f"error: {bad}: line 4: fields 'ticker','date'")


# --- configs ---------------------------------------------------------------------------------------------------

CONFIG_ERRORS = {
    "start after end": ({"start": "2023-03-10", "end": "2023-03-01"}, "start"),
    "window outside the release": ({"start": "2022-01-03"}, "start"),
    "end outside the release": ({"end": "2024-01-03"}, "end"),
    "form not in the release": ({"forms": ["NOPE"]}, "forms"),
    "no session in the window": ({"start": "2023-03-04", "end": "2023-03-05"}, "start"),
    "agent module missing": ({"agent": "no_such_module_here:agent"}, "agent"),
    "agent spec malformed": ({"agent": "nocolon"}, "agent"),
    "release missing": ({"bundle_path": "no-such-release"}, "bundle_path"),
    "price file missing": ({"prices_path": "no-such.csv", "price_source": "x"}, "prices_path"),
    "bundle_path not a string": ({"bundle_path": 5}, "bundle_path"),
    "forms not strings": ({"forms": [1]}, "forms"),
    "trajectory under a file": ({"trajectory_path": "FILE/t.jsonl"}, "trajectory_path"),
    "receipt under a file": ({"receipt_path": "FILE/deeper/r.json"}, "receipt_path"),
    "receipt is a directory": ({"receipt_path": "."}, "receipt_path"),
    "receipt and trajectory one file": (
        {"trajectory_path": "same.json", "receipt_path": "same.json"},
        "receipt_path",
    ),
}


@pytest.mark.parametrize("name", sorted(CONFIG_ERRORS))
def test_config_errors_name_the_config_file_and_field(name, cli, synth_release_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "FILE").write_text("a file, not a directory\n")
    fields, field = CONFIG_ERRORS[name]
    cfg = _config(tmp_path, synth_release_dir, **fields)
    before = sorted(p.name for p in tmp_path.iterdir())
    code, _, err = cli("run", "--config", cfg)
    assert code == 2, err
    line = _one_line(err)
    assert str(cfg) in line, line
    assert f"'{field}'" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written, not even a temp file


def test_bundle_path_resolves_against_the_config_files_directory(
    cli, synth_release_dir, tmp_path, monkeypatch
):
    home = tmp_path / "project"
    (home / "releases").mkdir(parents=True)
    (home / "releases" / "r").symlink_to(synth_release_dir, target_is_directory=True)
    cfg = home / "run.json"
    cfg.write_text(
        json.dumps(
            {
                "bundle_path": "releases/r",
                "forms": ["8-K"],
                "start": RUN_START,
                "end": RUN_END,
                "probe_items": 0,
            }
        )
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, out, err = cli("run", "--config", cfg, "--trajectory", "t.jsonl", "--receipt", "r.json")
    assert code == 0, err
    assert (elsewhere / "r.json").is_file()  # outputs stay relative to where the run starts
    assert "valid=True" in out


def test_python_api_names_the_output_field_before_any_work(synth_release_dir, tmp_path):
    (tmp_path / "FILE").write_text("x")
    cfg = RunConfig(
        bundle_path=str(synth_release_dir),
        forms=("8-K",),
        start=RUN_START,
        end=RUN_END,
        trajectory_path=str(tmp_path / "FILE" / "t.jsonl"),
        receipt_path=str(tmp_path / "r.json"),
    )
    from evalkit_core import ConfigError

    with pytest.raises(ConfigError, match=r"config field 'trajectory_path': .*parent .*FILE is a file"):
        run(stub_agent, cfg)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["FILE"]


# --- caches ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["wrong columns", "wrong types", "not parquet"])
def test_a_release_cache_with_the_wrong_schema_is_rebuilt_not_a_traceback(damage, tmp_path, monkeypatch, cli):
    from evalkit_core._synth import write_synth_release

    monkeypatch.setenv("EVALKIT_CACHE_DIR", str(tmp_path / "cache"))
    import datetime as dt

    rel = write_synth_release(
        tmp_path / "rel", rows=300, start=dt.date(2023, 3, 1), end=dt.date(2023, 3, 10), seed=3
    )
    first = Release.load(rel)
    cached = next((tmp_path / "cache" / "releases").iterdir())
    target = cached / "main.parquet"
    if damage == "wrong columns":
        pl.DataFrame({"x": [1, 2]}).write_parquet(target)
    elif damage == "wrong types":
        first.arm("main").with_columns(pl.col("partition_date").cast(pl.String)).write_parquet(target)
    else:
        target.write_bytes(b"not a parquet file")
    again = Release.load(rel)
    assert again.arm("main").equals(first.arm("main"))
    cfg = _config(tmp_path, rel, forms=[], probe_items=0)
    code, out, err = cli("run", "--config", cfg)
    assert code == 0, err
    assert "valid=True" in out
