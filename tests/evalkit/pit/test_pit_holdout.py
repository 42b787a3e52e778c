"""Post-cutoff holdouts: declared cutoffs in the registry, ``evalkit holdout plan``, and P2 in the receipt.

The hand-built release (conftest.py) has one 8-K filed on each of 03-02 (A), 03-03 (B), 03-06 (C), 03-07 (D) and
03-09 (E), 2023; its window is 03-01..03-10 (sessions 1, 2, 3, 6, 7, 8, 9, 10 March).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from evalkit_core.models import RegistryError, load_registry

REGISTRY = """
[models."sim/weak"]
training_cutoff = "2023-03-03"
training_cutoff_source = "a test's declaration"

[models."sim/strong"]
training_cutoff = "2023-03-06"
training_cutoff_source = "another test's declaration"
"""


@pytest.fixture
def registry(tmp_path, monkeypatch):
    path = tmp_path / "registry.toml"
    path.write_text(REGISTRY)
    monkeypatch.setenv("EVALKIT_REGISTRY", str(path))
    return path


def test_registry_entries_declare_a_cutoff_with_its_source(registry):
    r = load_registry([registry], env={})
    assert str(r.get("sim/weak").training_cutoff) == "2023-03-03"
    assert r.get("sim/strong").training_cutoff_source == "another test's declaration"
    assert r.get("sim/mid").training_cutoff is None


@pytest.mark.parametrize(
    ("table", "needle"),
    [
        ('training_cutoff = "2023-03-03"', "training_cutoff_source' is missing"),
        ('training_cutoff = "March 2023"\ntraining_cutoff_source = "x"', "expected a quoted date"),
        ('training_cutoff = 2023-03-03\ntraining_cutoff_source = "x"', "expected a quoted date"),
        ('training_cutoff_source = "x"', "without 'training_cutoff'"),
    ],
)
def test_a_bad_cutoff_declaration_names_the_field(tmp_path, table, needle):
    path = tmp_path / "r.toml"
    path.write_text(f'[models."sim/weak"]\n{table}\n')
    with pytest.raises(RegistryError, match=needle):
        load_registry([path], env={})


def test_plan_lists_the_sessions_after_every_cutoff(registry, hand_release_dir, cli):
    code, out, err = cli("holdout", "plan", "--model", "sim/weak", "--model", "sim/strong", "--release",
                         hand_release_dir, "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["latest_cutoff"] == "2023-03-06"
    assert plan["holdout"] == {"start": "2023-03-07", "end": "2023-03-10", "sessions": 4, "rows": 2,
                               "by_form": {"8-K": 2}}
    assert plan["sessions"] == [
        {"session": "2023-03-07", "rows": 1, "by_form": {"8-K": 1}},  # D
        {"session": "2023-03-08", "rows": 0, "by_form": {}},
        {"session": "2023-03-09", "rows": 1, "by_form": {"8-K": 1}},  # E
        {"session": "2023-03-10", "rows": 0, "by_form": {}},
    ]
    assert [m["source"] for m in plan["models"]] == ["a test's declaration", "another test's declaration"]
    code, out, _ = cli("holdout", "plan", "--model", "sim/weak", "--release", hand_release_dir)
    assert code == 0
    assert "holdout   2023-03-06 .. 2023-03-10  5 sessions, 3 rows (8-K 3)" in out


def test_plan_with_no_session_after_the_cutoff_says_so(tmp_path, monkeypatch, hand_release_dir, cli):
    path = tmp_path / "r.toml"
    path.write_text('[models."sim/weak"]\ntraining_cutoff = "2023-03-10"\ntraining_cutoff_source = "t"\n')
    monkeypatch.setenv("EVALKIT_REGISTRY", str(path))
    code, out, _ = cli("holdout", "plan", "--model", "sim/weak", "--release", hand_release_dir)
    assert code == 0
    assert "holdout   none: every session of the release is on or before the latest cutoff 2023-03-10" in out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--model", "sim/mid"], "declares no training_cutoff"),
        (["--model", "no/such-model"], "unknown model"),
    ],
)
def test_plan_bad_input_exits_2(registry, hand_release_dir, cli, args, needle):
    code, out, err = cli("holdout", "plan", *args, "--release", hand_release_dir)
    assert (code, out) == (2, "")
    assert needle in err and len(err.strip().splitlines()) == 1


def test_plan_of_a_missing_release_exits_2(registry, tmp_path, cli):
    code, _, err = cli("holdout", "plan", "--model", "sim/weak", "--release", tmp_path / "nope")
    assert code == 2 and "nope" in err


def _run(base: Path, release: Path, cutoff: str | None, name: str):
    from evalkit.pit import RunConfig, run, stub_agent

    cfg = RunConfig(bundle_path=str(release), forms=("8-K",), start="2023-03-01", end="2023-03-10",
                    model_version="stub-1", training_cutoff=cutoff, trajectory_path=f"{name}.jsonl",
                    receipt_path=f"{name}.json", probe_items=2)
    old = Path.cwd()
    os.chdir(base)
    try:
        return run(stub_agent, cfg, None, None)
    finally:
        os.chdir(old)


@pytest.mark.parametrize(
    ("cutoff", "post", "ends_before"),
    [
        ("2023-02-28", True, False),   # the whole window after the cutoff: a holdout
        ("2023-03-01", False, False),  # the cutoff is the window's first day: overlaps, never a holdout
        ("2023-03-06", False, False),  # inside the window
        ("2023-03-31", False, True),   # after the window
    ],
)
def test_receipt_records_post_cutoff_and_verifies(hand_release_dir, tmp_path, cutoff, post, ends_before):
    from evalkit.pit import verify_pit_receipt

    result = _run(tmp_path, hand_release_dir, cutoff, "r")
    p2 = result.body["protocol"]["P2_training_cutoff"]
    assert p2["post_cutoff"] is post
    assert p2["window_start"] == "2023-03-01"
    assert p2["window_ends_before_cutoff"] is ends_before
    assert p2["models"] == [{"model": "stub-1", "training_cutoff": cutoff, "source": None, "post_cutoff": post}]
    assert "P2_training_cutoffs" not in result.body["protocol_gaps"]
    checks = verify_pit_receipt(tmp_path / "r.json", bundle=hand_release_dir, trajectory=tmp_path / "r.jsonl")
    assert [c.name for c in checks if c.status == "MISMATCH"] == []


def test_no_declared_cutoff_is_no_holdout_label(hand_release_dir, tmp_path):
    p2 = _run(tmp_path, hand_release_dir, None, "r").body["protocol"]["P2_training_cutoff"]
    assert (p2["post_cutoff"], p2["models"]) == (None, [])


def test_a_model_agent_takes_p1_and_p2_from_the_registry(registry):
    from evalkit.pit import RunConfig
    from evalkit_cli._pit import _cutoff_from_registry  # pyright: ignore[reportPrivateUsage]

    cfg = _cutoff_from_registry(RunConfig(bundle_path="x", agent="model:sim/strong"))
    assert (cfg.model_version, cfg.training_cutoff) == ("sim/strong", "2023-03-06")
    assert cfg.training_cutoff_source == "model registry: another test's declaration"
    # A config that declares its own cutoff keeps it; a model without one, and other agents, are left alone.
    mine = RunConfig(bundle_path="x", agent="model:sim/strong", training_cutoff="2020-01-01")
    assert _cutoff_from_registry(mine) == mine
    for agent in ("model:sim/mid", "stub"):
        assert _cutoff_from_registry(RunConfig(bundle_path="x", agent=agent)).training_cutoff is None


def test_config_digest_is_unchanged_without_a_cutoff_source():
    from evalkit.pit import RunConfig

    cfg = RunConfig(bundle_path="x")
    assert "training_cutoff_source" not in cfg.digest_view()
    with_source = RunConfig(bundle_path="x", training_cutoff="2023-01-01", training_cutoff_source="card")
    assert with_source.digest_view()["training_cutoff_source"] == "card"
