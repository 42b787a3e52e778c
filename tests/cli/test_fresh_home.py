"""Bad input before any work, on a fresh home: a command refused for a bad config, bad prices, a window outside
the release, an unknown model, a missing task bank or campaign, exits 2 with one line and leaves the directory
as it was: no ``$EVALKIT_HOME`` (no signing key in ``keys/``, no store), no ``out/``.

``tests/cli/test_user_errors.py`` walks every command with a store already in the home; these are the cases whose
refusal came only after the key or the store had been made (the first run on a new machine is the one that
matters). Runs in-process through the real entry point, as that file does.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from evalkit_cli._app import main

ROOT = Path(__file__).resolve().parents[2]
BANK = ROOT / "tests" / "evalkit" / "fixtures" / "tasks"


def _tree(d: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(d)): None if p.is_dir() else p.read_bytes() for p in sorted(d.rglob("*"))}


@pytest.fixture
def place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory holding the bad inputs, and a home inside it that does not exist yet."""
    from evalkit_core._synth import DEMO, demo_release_path

    work = tmp_path / "work"
    work.mkdir()
    demo = demo_release_path()  # in the session's cache directory, outside ``work``
    good = json.loads((ROOT / "examples" / "run.json").read_text())
    good |= {"bundle_path": str(demo), "prices_path": str(demo / DEMO.prices_file)}
    configs = {
        "window.json": {"start": "2030-01-02", "end": "2030-02-01"},
        "backwards.json": {"start": "2023-03-15", "end": "2023-02-01"},
        "no-forms.json": {"forms": ["ZZ-9"]},
        "bad-prices.json": {"prices_path": "prices.csv"},
        "no-prices.json": {"prices_path": "missing.csv"},
    }
    for name, change in configs.items():
        (work / name).write_text(json.dumps(good | change))
    (work / "bad.json").write_text("{not json")
    (work / "prices.csv").write_text("ticker,date,open,high,low,close,volume\nAAA,2023-02-01,x,1,1,1,1\n")
    (work / "replay.jsonl").write_text('{"task": 1}\n')
    campaign = 'name = "c"\nmodels = [{models}]\nk = 1\nbudget_usd = "1"\n[tasks]\ndir = "{bank}"\n'
    (work / "unknown-model.toml").write_text(campaign.format(models='"sim/no-such"', bank=BANK))
    (work / "no-bank.toml").write_text(campaign.format(models='"sim/weak"', bank=work / "no-bank"))
    monkeypatch.chdir(work)
    monkeypatch.setenv("EVALKIT_HOME", str(work / "home"))
    monkeypatch.delenv("EVALKIT_STORE", raising=False)
    monkeypatch.delenv("EVALKIT_RELEASES", raising=False)
    return work


CASES = [
    # evalkit run: the key was made before the window, the forms and the model were checked
    (["run", "--config", "window.json"], "window 2030-01-02..2030-02-01 is outside the release window"),
    (["run", "--config", "backwards.json"], "2023-03-15 is after end 2023-02-01"),
    (["run", "--config", "no-forms.json"], "field 'forms'"),
    (["run", "--config", "bad-prices.json"], "field 'prices_path'"),
    (["run", "--config", "no-prices.json"], "missing.csv"),
    (["run", "--config", "bad.json"], "bad.json: not valid JSON"),
    (["run", "--prices", "prices.csv", "--price-source", "test"], "prices.csv: line 2"),
    (["run", "--price-source", "test"], "given without --prices"),
    (["run", "--trajectory", "t.jsonl", "--receipt", "t.jsonl"], "expected two files"),
    # evalkit certify: the key was made before the receipt was read
    (["certify", "bad.json", "--out", "cert.json", "--bundle", "."], "bad.json: not valid JSON"),
    # campaign run: the store was made before the models and the bank were checked
    (["campaign", "run", "unknown-model.toml"], "unknown model 'sim/no-such'"),
    (["campaign", "run", "no-bank.toml"], "task directory not found"),
    # adversary mine and eval: the store was made before the solver and the model were checked
    (["adversary", "mine", "--tasks", str(BANK), "--solver", "bogus"], "--solver must be"),
    (["adversary", "mine", "--tasks", str(BANK), "--solver", "model:no-such"], "unknown model 'no-such'"),
    (["adversary", "mine", "--tasks", str(BANK), "--solver", "reference", "--proposer", "model:no-such"],
     "unknown model 'no-such'"),
    (["adversary", "mine", "--tasks", str(BANK), "--solver", "replay:replay.jsonl"], "replay.jsonl:1"),
    (["adversary", "mine", "--tasks", str(BANK), "--solver", "replay:missing.jsonl"], "replay file not found"),
    (["eval", "--tasks", str(BANK), "--solver", "model:no-such"], "unknown model 'no-such'"),
    (["eval", "--tasks", str(BANK), "--solver", "replay:replay.jsonl", "--out", "out/r.jsonl"], "replay.jsonl:1"),
    # campaign lookups where there is no store: none is made to answer
    (["train", "grpo", "--campaign", "nosuch"], "no campaign named 'nosuch'"),
    (["rewards", "export", "nosuch", "--format", "jsonl", "--out", "r.jsonl"], "no campaign named 'nosuch'"),
    (["route", "simulate", "--calibrate-on", "nosuch"], "no campaign named 'nosuch'"),
    (["campaign", "status", "nosuch"], "no campaign named 'nosuch'"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "needle"), CASES, ids=[" ".join(a) for a, _ in CASES])
def test_bad_input_on_a_fresh_home_writes_nothing(argv: list[str], needle: str, place: Path, capsys: Any,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    before = _tree(place)
    monkeypatch.setattr(sys, "argv", ["evalkit", *argv])
    with pytest.raises(SystemExit) as exc:
        main()
    err = capsys.readouterr().err
    assert exc.value.code == 2, (argv, exc.value.code, err)
    assert "Traceback" not in err, err
    assert err.endswith("\n") and err.count("\n") == 1, (argv, err)
    assert needle in err, (argv, needle, err)
    assert not (place / "home").exists(), f"{argv} made {sorted(p.name for p in (place / 'home').rglob('*'))}"
    assert _tree(place) == before, f"{argv} wrote {set(_tree(place)) ^ set(before)}"


def test_a_run_refused_by_the_wall_leaves_no_key_and_no_output_directory(place: Path, capsys: Any,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """``--netns`` where the agent cannot get a network namespace (bubblewrap refused here) is refused once the
    jail has measured it, inside the run: no key is made, and the output directories the run had made are gone."""
    monkeypatch.setenv("EVALKIT_WALL_WITHOUT", "bwrap")
    before = _tree(place)
    monkeypatch.setattr(sys, "argv", ["evalkit", "run", "--netns"])
    with pytest.raises(SystemExit) as exc:
        main()
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    assert err.count("\n") == 1 and err.startswith("error: --netns: this machine cannot give the agent"), err
    assert _tree(place) == before


def test_a_good_run_on_a_fresh_home_makes_the_key_and_says_so_once(place: Path, capsys: Any,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The other side: the key is made when the receipt is signed, announced in one line, and signs it."""
    short = json.loads((place / "window.json").read_text()) | {"start": "2023-02-01", "end": "2023-02-08"}
    (place / "good.json").write_text(json.dumps(short))
    monkeypatch.setattr(sys, "argv", ["evalkit", "run", "--config", "good.json", "--json"])
    with pytest.raises(SystemExit) as exc:
        main()
    captured = capsys.readouterr()
    assert exc.value.code in (0, None), captured.err
    generated = [ln for ln in captured.err.splitlines() if ln.startswith("key         generated ")]
    assert len(generated) == 1, captured.err
    key_id = generated[0].split()[2]
    receipt = json.loads((place / "out" / "receipt.json").read_text())
    assert receipt["signer"]["keyid"] == key_id
    assert (place / "home" / "keys" / "ed25519.pem").is_file()
