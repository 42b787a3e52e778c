"""``evalkit campaign run|status|report`` on the sim models (offline), and the user errors it maps to exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from evalkit_cli import app
from evalkit_router import verify_campaign_receipt

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "router"))
from campaign_support import SUBSET, write_campaign  # noqa: E402  # pyright: ignore[reportImplicitRelativeImport]

runner = CliRunner()


def evalkit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from evalkit_cli import main; main()", *args],
        capture_output=True,
        text=True,
        check=False,
        env=os.environ.copy(),
    )


def test_run_prints_the_table_writes_outputs_and_status_and_report_agree(tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = write_campaign(tmp_path / "c", k=2)
    result = runner.invoke(app, ["campaign", "run", str(path), "--home", str(home)])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "campaign c (done): 3 tasks x 2 models x K=2" in out
    assert "pass@2" in out
    assert "sim/strong" in out
    assert "sim/weak" in out
    receipt = home / "campaigns" / "c" / "receipt.json"
    assert f"receipt {receipt}" in out
    assert all(c.ok for c in verify_campaign_receipt(receipt, home=home))
    assert "signature" in {c.name for c in verify_campaign_receipt(receipt, home=home)}
    cli_verify = runner.invoke(app, ["campaign", "verify", str(receipt), "--home", str(home)])
    assert cli_verify.exit_code == 0, cli_verify.output
    assert cli_verify.stdout.splitlines()[0].split() == ["ok", "signature"]
    report_file = json.loads((home / "campaigns" / "c" / "report.json").read_text())

    status = runner.invoke(app, ["campaign", "status", "c", "--home", str(home), "--json"])
    assert status.exit_code == 0, status.output
    st = json.loads(status.stdout)
    assert (st["status"], st["planned"], st["graded"], st["missing"]) == ("done", 12, 12, 0)
    assert st["spent_usd"] == report_file["summary"]["cost_usd"]

    rep = runner.invoke(app, ["campaign", "report", "c", "--home", str(home), "--json"])
    assert rep.exit_code == 0, rep.output
    assert json.loads(rep.stdout) == report_file
    text = runner.invoke(app, ["campaign", "report", "c", "--home", str(home)])
    assert text.exit_code == 0
    assert "hid@1" in text.output

    ok = runner.invoke(app, ["campaign", "verify", str(receipt), "--home", str(home)])
    assert ok.exit_code == 0, ok.output
    assert ok.output.count("ok  ") == 8  # signature, body, 4 bindings, summary, ledger (--home)
    results = home / "campaigns" / "c" / "results.jsonl"
    results.write_text(results.read_text().replace('"solved":true', '"solved":false', 1))
    bad = runner.invoke(app, ["campaign", "verify", str(receipt), "--home", str(home)])
    assert bad.exit_code == 1
    assert "FAIL results" in bad.output


def test_changed_file_unknown_campaign_and_bad_file_exit_2_with_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = write_campaign(tmp_path / "c", k=1, ids=SUBSET[:1])
    assert runner.invoke(app, ["campaign", "run", str(path), "--home", str(home)]).exit_code == 0
    path = write_campaign(tmp_path / "c", k=2, ids=SUBSET[:1])
    changed = evalkit("campaign", "run", str(path), "--home", str(home))
    assert changed.returncode == 2
    assert changed.stderr.count("\n") == 1
    assert changed.stderr.startswith("error: ")
    assert "k: 1 -> 2" in changed.stderr
    renamed = runner.invoke(
        app, ["campaign", "run", str(path), "--home", str(home), "--new-name", "c-k2", "--json"]
    )
    assert renamed.exit_code == 0, renamed.output
    payload = json.loads(renamed.stdout)
    assert payload["campaign"] == "c-k2"
    assert payload["run"]["called"] == 4
    missing = evalkit("campaign", "status", "nope", "--home", str(home))
    assert missing.returncode == 2
    assert "no campaign named 'nope'" in missing.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\nmodels = ["sim/weak"]\nk = "five"\n[tasks]\ndir = "."\n')
    res = evalkit("campaign", "run", str(bad), "--home", str(home))
    assert res.returncode == 2
    assert "field 'k'" in res.stderr
