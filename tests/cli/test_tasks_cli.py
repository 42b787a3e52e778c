"""``evalkit tasks validate`` and ``evalkit tasks import humaneval``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

import machine  # pyright: ignore[reportImplicitRelativeImport]
from evalkit_cli import app

BANK = Path(__file__).parents[1] / "evalkit" / "fixtures" / "tasks"
runner = CliRunner()


def evalkit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from evalkit_cli import main; main()", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_validate_fixture_bank():
    result = runner.invoke(app, ["tasks", "validate", str(BANK)])
    assert result.exit_code == 0, result.output
    assert "ok: 4 tasks validated" in result.output


def test_validate_names_task_and_test(tmp_path):
    bank = tmp_path / "bank"
    shutil.copytree(BANK, bank)
    # a reference that fails one hidden test
    (bank / "code" / "double" / "001" / "reference.py").write_text(
        "def double(n):\n    return 2 * n if n >= 0 else 0\n"
    )
    # public and hidden overlap
    mean = bank / "code" / "mean" / "001" / "task.json"
    data = json.loads(mean.read_text())
    data["hidden_tests"].append(dict(data["public_tests"][0]))
    mean.write_text(json.dumps(data))
    # a file that breaks the schema
    person = bank / "structured" / "person" / "001" / "task.json"
    data = json.loads(person.read_text())
    data["public_assertions"][0]["op"] = "path_is_nice"
    person.write_text(json.dumps(data))
    result = runner.invoke(app, ["tasks", "validate", str(bank), "--json"])
    assert result.exit_code == 1
    payload = json.loads(result.stdout)
    found = {(p["task_id"], p["test"]) for p in payload["problems"]}
    assert ("code/double/001", "hidden/0") in found
    assert ("code/mean/001", "hidden/3") in found
    assert any(t == "structured/person/001" for t, _ in found)
    assert ("code/run-length-encode/001", "public/0") not in found
    text = runner.invoke(app, ["tasks", "validate", str(bank)])
    assert text.exit_code == 1
    assert "FAIL code/double/001 hidden/0: reference fails its own test: wrong_answer" in text.output
    assert "overlap" in text.output
    assert "breaks the task schema" in text.output


def test_validate_missing_dir_is_a_user_error(tmp_path):
    proc = evalkit("tasks", "validate", str(tmp_path / "nope"))
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "not found" in proc.stderr


def test_import_humaneval_all_validate(tmp_path):
    machine.need("humaneval")
    out = tmp_path / "he"
    result = runner.invoke(app, ["tasks", "import", "humaneval", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "wrote 164 tasks" in result.output
    assert len(list(out.glob("code/humaneval/*/task.json"))) == 164
    task = json.loads((out / "code" / "humaneval" / "000" / "task.json").read_text())
    assert task["entry_point"] == "has_close_elements"
    assert task["arg_types"] == ["list[float]", "float"]
    assert task["return_type"] == "bool"
    result = runner.invoke(app, ["tasks", "validate", str(out)])
    assert result.exit_code == 0, result.output
    assert "ok: 164 tasks validated" in result.output


def test_import_unknown_source():
    proc = evalkit("tasks", "import", "mbpp", "--out", "/nonexistent")
    assert proc.returncode == 2
    assert "unknown source" in proc.stderr
