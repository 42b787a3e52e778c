"""``evalkit bundle build`` end to end: output, --json, and one-line errors with exit code 2."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.progress import Progress

from evalkit_cli import main
from evalkit_cli._bundle_build import _Reporter

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


def test_progress_reporter_renders_each_stage():
    buf = io.StringIO()
    with Progress(console=Console(file=buf, force_terminal=True, width=100)) as progress:
        report = _Reporter(progress)
        report("reading index files", 0, 3)
        report("reading index files", 3, 3)
        report("writing release", 1, 1)
        tasks = {t.description: (t.completed, t.total) for t in progress.tasks}
    assert tasks == {"reading index files": (3, 3), "writing release": (1, 1)}
    assert "reading index files" in buf.getvalue()


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
