"""The seed bank and campaign that ship inside evalkit-harness: `evalkit tasks demo` and `evalkit campaign demo`
write the checkout's bytes (one copy: the repository's tasks/ and campaigns/ are links to the package's), keep a
seed bank already in place, and refuse to write over anything else, over a link, or into the package itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.grading._seed import seed_bank, seed_campaign
from evalkit_cli import app
from evalkit_core import ConfigError

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}  # fmt: skip


def test_the_checkout_and_the_package_hold_one_copy() -> None:
    assert (ROOT / "tasks").is_symlink() and (ROOT / "campaigns").is_symlink()
    assert (ROOT / "tasks").resolve() == seed_bank()
    assert (ROOT / "campaigns" / "sim-seed.toml").resolve() == seed_campaign()


def test_tasks_demo_and_campaign_demo_write_the_checkouts_bytes(tmp_path: Path) -> None:
    result = runner.invoke(app, ["tasks", "demo", "--out", str(tmp_path / "bank"), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["tasks"] == 70
    assert _files(tmp_path / "bank") == _files(ROOT / "tasks")
    result = runner.invoke(app, ["campaign", "demo", "--out", str(tmp_path / "c"), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["tasks_written"] is True
    assert _files(tmp_path / "c" / "tasks") == _files(ROOT / "tasks")
    assert _files(tmp_path / "c" / "campaigns") == _files(ROOT / "campaigns")


def test_campaign_demo_keeps_a_seed_bank_in_place_and_refuses_another(tmp_path: Path) -> None:
    assert runner.invoke(app, ["tasks", "demo", "--out", str(tmp_path / "tasks")]).exit_code == 0
    result = runner.invoke(app, ["campaign", "demo", "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["tasks_written"] is False
    other = tmp_path / "other"
    assert runner.invoke(app, ["tasks", "demo", "--out", str(other / "tasks")]).exit_code == 0
    edited = other / "tasks" / "code" / "add-days" / "001" / "reference.py"
    edited.write_text(edited.read_text() + "# mine\n")
    before = _files(other)
    result = runner.invoke(app, ["campaign", "demo", "--out", str(other)])
    assert isinstance(result.exception, ConfigError)  # one line, exit 2, from the CLI's error mapping
    assert "already holds files" in str(result.exception)
    assert _files(other) == before  # nothing written, nothing replaced


@pytest.mark.parametrize("force", [False, True])
def test_the_package_itself_and_links_are_never_written(tmp_path: Path, force: bool) -> None:
    before = _files(seed_bank())
    link = tmp_path / "link"
    link.symlink_to(seed_bank())
    for out in (ROOT / "tasks", link, seed_bank(), seed_bank() / "code"):
        result = runner.invoke(app, ["tasks", "demo", "--out", str(out), *(["--force"] if force else [])])
        assert isinstance(result.exception, ConfigError), (out, result.output)
    assert _files(seed_bank()) == before
