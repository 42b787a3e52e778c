"""``evalkit bundle build`` end to end: output, --json, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from evalkit_cli import main
from evalkit_cli._progress import progress_bar

DATA = (Path(__file__).resolve().parents[2] / ".." / "shared" / "data").resolve()

FORM_HEADER = "Form Type   Company Name                                                  CIK         Date Filed  File Name"


def write_inputs(root: Path) -> dict[str, Path]:
    index = root / "index"
    index.mkdir(parents=True)
    lines = [
        f"{'8-K':<12}{'ACME CORP':<62}{'1001':<12}{'20230203':<12}edgar/data/1001/0000001001-23-000001.txt",
        f"{'10-Q':<12}{'BETA INC':<62}{'1002':<12}{'20230203':<12}edgar/data/1002/0000001002-23-000001.txt",
    ]
    (index / "form.20230203.idx").write_text(
        "Description: Daily Index by Form Type\n\n"
        + FORM_HEADER
        + "\n"
        + "-" * 140
        + "\n"
        + "\n".join(lines)
        + "\n"
    )
    subs = root / "subs"
    subs.mkdir()
    doc = {
        "cik": "0000001001",
        "name": "ACME CORP",
        "formerNames": [],
        "filings": {
            "recent": {
                "accessionNumber": ["0000001001-23-000001"],
                "filingDate": ["2023-02-03"],
                "form": ["8-K"],
                "acceptanceDateTime": ["2023-02-03T14:00:00.000Z"],
            }
        },
    }
    (subs / "CIK0000001001.json").write_text(json.dumps(doc))
    return {"index": index, "subs": subs}


def run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["evalkit", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    out, err = capsys.readouterr()
    code = exc.value.code
    return (code if isinstance(code, int) else 1), out, err


def base_args(paths: dict[str, Path], out: Path) -> list[str]:
    return [
        "bundle",
        "build",
        "--index",
        str(paths["index"]),
        "--submissions",
        str(paths["subs"]),
        "--start",
        "2023-02-01",
        "--end",
        "2023-02-28",
        "--name",
        "cli-test",
        "--out",
        str(out),
    ]


def test_build_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    paths = write_inputs(tmp_path)
    code, out, err = run(monkeypatch, capsys, *base_args(paths, tmp_path / "rel"), "--json")
    assert (code, err) == (0, "")  # quiet when stderr is not a terminal
    data: dict[str, Any] = json.loads(out)
    assert data["rows"] == 2
    assert data["forms"] == {"10-Q": 1, "8-K": 1}
    assert data["acceptance_coverage"] == {"rows_with_acceptance_at": 1, "share": 0.5}
    manifest = json.loads((tmp_path / "rel" / "release.json").read_text())
    assert data["content_digest"] == manifest["content_digest"]
    assert manifest["provenance"]["kind"] == "edgar"


def test_build_text_and_forms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    paths = write_inputs(tmp_path)
    code, out, _ = run(monkeypatch, capsys, *base_args(paths, tmp_path / "rel"), "--forms", "8-K")
    assert code == 0
    assert out.startswith(f"wrote {tmp_path / 'rel'}  rows 1  sha256:")
    assert "flagged   none" in out


@pytest.mark.parametrize(
    ("breakage", "expected"),
    [
        ("truncated-json", "CIK0000001001.json: not valid JSON"),
        ("html-index", "form.20230203.idx: an HTML page"),
        ("headerless-index", "form.20230203.idx: no index header found"),
        ("empty-window", "no filings with a filing date in 2023-02-01..2023-02-28"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_no_release(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    breakage: str,
    expected: str,
):
    paths = write_inputs(tmp_path)
    idx = paths["index"] / "form.20230203.idx"
    if breakage == "truncated-json":
        p = paths["subs"] / "CIK0000001001.json"
        p.write_bytes(p.read_bytes()[:120])
    elif breakage == "html-index":
        idx.write_text(
            "<!DOCTYPE html><html><head><title>SEC.gov | Request Rate Threshold Exceeded</title></head></html>"
        )
    elif breakage == "headerless-index":
        idx.write_text("\n".join(idx.read_text().splitlines()[4:]) + "\n")
    else:
        idx.unlink()
        (paths["subs"] / "CIK0000001001.json").unlink()
        (paths["subs"] / "CIK0000002002.json").write_text(
            json.dumps(
                {"name": "Z", "filings": {"recent": {"accessionNumber": [], "filingDate": [], "form": []}}}
            )
        )
        idx.write_text("Description: x\n\n" + FORM_HEADER + "\n" + "-" * 140 + "\n")
    code, out, err = run(monkeypatch, capsys, *base_args(paths, tmp_path / "rel"))
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("error: ")
    assert expected in err
    assert not (tmp_path / "rel").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".rel")]


def test_bad_options_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    code, _, err = run(
        monkeypatch,
        capsys,
        "bundle",
        "build",
        "--start",
        "2023-02-01",
        "--end",
        "2023-02-28",
        "--name",
        "x",
        "--out",
        str(tmp_path / "o"),
    )
    assert code == 2
    assert "at least one of --submissions DIR and --index DIR" in err
    paths = write_inputs(tmp_path)
    code, _, err = run(
        monkeypatch,
        capsys,
        *base_args(paths, tmp_path / "rel")[:-6],
        "--start",
        "2023-02-30",
        "--end",
        "2023-02-28",
        "--name",
        "x",
        "--out",
        str(tmp_path / "o"),
    )
    assert code == 2
    assert "--start: expected a date YYYY-MM-DD, got '2023-02-30'" in err


def test_progress_shows_each_stage_with_its_own_count_and_clock(capsys):
    with progress_bar("building", force=True, stages=True) as show:
        assert show is not None
        show(0, 3, "reading index files")
        show(3, 3, "reading index files")
        show(1, 1, "writing release")
    lines = capsys.readouterr().err.splitlines()
    assert [line.split("  ")[0] for line in lines] == [
        "reading index files 0/3",
        "reading index files 3/3",
        "writing release 1/1",
    ]
    assert lines[-1].endswith("ETA 0:00") and "elapsed 0s" in lines[-1]


@pytest.mark.realdata
@pytest.mark.skipif(
    not (DATA / "edgar-submissions-sample").is_dir(), reason=f"real EDGAR sample not present at {DATA}"
)
def test_real_sample_8k_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    code, out, _ = run(
        monkeypatch,
        capsys,
        "bundle",
        "build",
        "--submissions",
        str(DATA / "edgar-submissions-sample"),
        "--tickers",
        str(DATA / "company_tickers.json"),
        "--start",
        "2022-11-01",
        "--end",
        "2023-03-31",
        "--forms",
        "8-K,8-K/A",
        "--name",
        "real-8k",
        "--out",
        str(tmp_path / "rel"),
        "--json",
    )
    assert code == 0
    data = json.loads(out)
    assert data["rows"] == 149
    assert data["forms"] == {"8-K": 142, "8-K/A": 7}
    assert data["flags_by_reason"] == {"stamp_reads_as_new_york": 1}  # Nikola's 8-K of 2023-03-28


def test_end_latest_is_the_newest_filing_and_the_build_date_is_outside_the_digests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    """A window may end at the newest filing in the inputs ('latest'); the build date goes to build.json and
    two builds of the same inputs on different days are the same release, byte for byte."""
    paths = write_inputs(tmp_path)
    args = [a if a != "2023-02-28" else "latest" for a in base_args(paths, tmp_path / "a")]
    args += ["--key-seed", "one seed for both builds"]  # without one, each build draws its own mask secret
    code, out, err = run(monkeypatch, capsys, *args, "--built-on", "2026-12-01", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["window"]["end"] == "2023-02-03"  # the newest filing date of the inputs
    assert data["built_on"] == "2026-12-01"
    manifest = json.loads((tmp_path / "a" / "release.json").read_text())
    assert manifest["window"]["end"] == "2023-02-03"
    assert manifest["provenance"]["window"]["end_requested"].startswith("latest")
    build = json.loads((tmp_path / "a" / "build.json").read_text())
    assert build == {"built_on": "2026-12-01", "newest_filing": "2023-02-03", "window_end": "2023-02-03",
                     "content_digest": manifest["content_digest"]}
    args_b = [a if a != str(tmp_path / "a") else str(tmp_path / "b") for a in args]
    assert run(monkeypatch, capsys, *args_b, "--built-on", "2027-01-15")[0] == 0
    for f in ("release.json", "arms/main.jsonl", "answer_key.jsonl"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()
    assert json.loads((tmp_path / "b" / "build.json").read_text())["built_on"] == "2027-01-15"
    code, out, err = run(monkeypatch, capsys, "bundle", "check", str(tmp_path / "b"))
    assert code == 0, out + err


def test_bad_built_on_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    paths = write_inputs(tmp_path)
    code, out, err = run(monkeypatch, capsys, *base_args(paths, tmp_path / "rel"), "--built-on", "yesterday")
    assert (code, out) == (2, "")
    assert "--built-on" in err
    assert not (tmp_path / "rel").exists()
