"""``evalkit gate`` on PIT receipts: a clean run passes its baseline; a leaking run fails, one line per rule.

The leaking release is the hand-built one (conftest.py) with two acceptance stamps moved later, as a faulty
nightly index would show them: B is accepted at 16:00Z on its filing day (after the bell, so the leaky cell's
trade of B is now a look-ahead trade) and D the morning after the index listed it (so the *dump* clock, which
trusts the index, trades D at a bell before its acceptance: a look-ahead trade in a reachable cell).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from pathlib import Path

import attrs
import pytest

from evalkit_core import write_release

UTC = dt.UTC


def _leaking_filings(filings):
    out = []
    b_at = dt.datetime(2023, 3, 3, 16, tzinfo=UTC)
    d_at = dt.datetime(2023, 3, 8, 15, tzinfo=UTC)
    for f in filings:
        if f.issuer.startswith("BRAVO"):
            out.append(attrs.evolve(f, acceptance_at=b_at, acceptance_real=b_at))
        elif f.issuer.startswith("DELTA"):
            out.append(attrs.evolve(f, acceptance_at=d_at, acceptance_real=d_at, disseminated_at=None))
        else:
            out.append(f)
    return out


def _run(base: Path, release: Path, prices: Path, name: str) -> dict[str, Path]:
    from evalkit.pit import RunConfig, load_prices, run, stub_agent

    out = base / name
    out.mkdir()
    cfg = RunConfig(bundle_path=str(release), forms=("8-K",), start="2023-03-01", end="2023-03-10", hold_sessions=2,
                    prices_path=str(prices), price_source="hand-written test prices",
                    trajectory_path=str(out / "trajectory.jsonl"), receipt_path=str(out / "receipt.json"), probe_items=3)
    old = Path.cwd()
    os.chdir(base)
    try:
        run(stub_agent, cfg, None, load_prices(prices, source="hand-written test prices"))
    finally:
        os.chdir(old)
    return {"receipt": out / "receipt.json", "bundle": release, "prices": prices, "dir": out}


@pytest.fixture(scope="module")
def runs(hand_release_dir, hand_filing_list, hand_prices_path, tmp_path_factory):
    base = tmp_path_factory.mktemp("pit-gate")
    clean_release = base / "clean-release"
    shutil.copytree(hand_release_dir, clean_release)
    leaking_release = write_release(
        base / "leaking-release", name="hand-built-leaking", start=dt.date(2023, 3, 1), end=dt.date(2023, 3, 10),
        filings=_leaking_filings(hand_filing_list), provenance={"kind": "synthetic", "statement": "hand-built test release, faulty index"},
    )
    return {
        "clean": _run(base, clean_release, hand_prices_path, "clean"),
        "leaking": _run(base, leaking_release, hand_prices_path, "leaking"),
        "base": base,
    }


def _args(r: dict[str, Path]) -> list[str]:
    return [str(r["receipt"]), "--bundle", str(r["bundle"]), "--prices", str(r["prices"])]


def _fails(out: str) -> list[str]:
    return [ln for ln in out.splitlines() if ln.startswith("FAIL ")]


def test_clean_run_passes_its_own_baseline(runs, cli, tmp_path):
    baseline = tmp_path / "baseline.json"
    code, out, err = cli("gate", *_args(runs["clean"]), "--baseline", baseline, "--write-baseline")
    assert code == 0, err
    assert "wrote baseline" in out
    data = json.loads(baseline.read_text())
    assert data["format"] == "evalkit-gate-baseline/1"
    assert data["metrics"]["cells"]["main/dump"]["lookahead_trades"] == 0
    assert data["metrics"]["cells"]["main/leaky"]["lookahead_trades"] == 3  # A, D and E (conftest's table)
    code, out, err = cli("gate", *_args(runs["clean"]), "--baseline", baseline)
    assert (code, _fails(out)) == (0, []), out + err
    assert out.startswith("ok   14 rules hold")


def test_leaking_run_fails_even_against_its_own_baseline(runs, cli, tmp_path):
    """The absolute rules need no baseline: a look-ahead trade in a reachable cell fails every time."""
    baseline = tmp_path / "baseline.json"
    assert cli("gate", *_args(runs["leaking"]), "--baseline", baseline, "--write-baseline")[0] == 0
    code, out, _ = cli("gate", *_args(runs["leaking"]), "--baseline", baseline)
    assert code == 1
    # D is traded one session early in every dump cell (the control arms use the main arm's clocks).
    assert _fails(out) == [
        f"FAIL lookahead: cell {arm}/dump (reachable) made 1 look-ahead trade(s)" for arm in ("main", "redacted", "shifted")
    ]


def test_leaking_run_against_the_clean_baseline_names_every_rule_it_breaks(runs, cli, tmp_path):
    baseline = tmp_path / "baseline.json"
    assert cli("gate", *_args(runs["clean"]), "--baseline", baseline, "--write-baseline")[0] == 0
    code, out, _ = cli("gate", *_args(runs["leaking"]), "--baseline", baseline)
    assert code == 1
    fails = _fails(out)
    rules = {ln.split(":")[0].removeprefix("FAIL ") for ln in fails}
    assert {"lookahead", "lookahead_unreachable", "release_digest"} <= rules, out
    assert "FAIL lookahead_unreachable: cell main/leaky (unreachable) made 4 look-ahead trade(s), baseline 3" in fails
    assert "calendar_digest" not in rules  # same calendar
    # B's dump and pit trades enter a session later now (03-06 instead of 03-03 for pit): the pit return moved.
    assert any(ln.startswith("FAIL cell_return: cell main/pit total_return") for ln in fails), out
    code, out, _ = cli("gate", *_args(runs["leaking"]), "--baseline", baseline, "--json")
    verdict = json.loads(out)
    assert code == 1 and verdict["ok"] is False
    assert {v["rule"] for v in verdict["violations"]} == rules


def test_policy_can_ignore_a_rule_and_loosen_a_tolerance(runs, cli, tmp_path):
    baseline = tmp_path / "baseline.json"
    assert cli("gate", *_args(runs["clean"]), "--baseline", baseline, "--write-baseline")[0] == 0
    policy = tmp_path / "gate.toml"
    policy.write_text('[gate]\nignore = ["lookahead", "lookahead_unreachable", "release_digest"]\nreturn_tolerance = 10.0\n'
                      'contamination_tolerance = 10.0\n')
    code, out, _ = cli("gate", *_args(runs["leaking"]), "--baseline", baseline, "--policy", policy)
    assert (code, _fails(out)) == (0, []), out


def test_a_tampered_receipt_fails_on_verify_and_is_never_a_baseline(runs, cli, tmp_path):
    from evalkit_core import digest

    receipt = json.loads(runs["clean"]["receipt"].read_text())
    receipt["body"]["network"]["egress_attempts"] = 0  # unchanged value, then a real edit:
    receipt["body"]["cells"][0]["total_return"] = 0.5
    receipt["body_sha256"] = digest(receipt["body"])
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(receipt))
    r = {**runs["clean"], "receipt": forged}
    baseline = tmp_path / "baseline.json"
    code, out, _ = cli("gate", *_args(r), "--baseline", baseline, "--write-baseline")
    assert code == 1
    assert not baseline.exists()
    assert any(ln.startswith("FAIL verify: signature") for ln in _fails(out)), out
    assert cli("gate", *_args(runs["clean"]), "--baseline", baseline, "--write-baseline")[0] == 0
    code, out, _ = cli("gate", *_args(r), "--baseline", baseline)
    assert code == 1
    assert all(ln.startswith("FAIL verify: ") for ln in _fails(out)) and _fails(out)


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda a, b, p: (a[:1] + a[3:], b, p), "needs --bundle"),
        (lambda a, b, p: (a[:3], b, p), "pass it with --prices"),
        (lambda a, b, p: (["missing.json", *a[1:]], b, p), "missing.json"),
        (lambda a, b, p: (a, b.parent / "absent.json", p), "baseline not found"),
        (lambda a, b, p: (a, b.with_name("garbage.json"), p), "not valid JSON"),
        (lambda a, b, p: (a, b.with_name("other.json"), p), "field 'format'"),
        (lambda a, b, p: (a, b, "[gate]\nconfidence = 2\n"), "confidence"),
        (lambda a, b, p: (a, b, "[gate]\nignore = ['nosuchrule']\n"), "ignore"),
        (lambda a, b, p: (a, b, "[gate]\ntolerance = 1\n"), "unknown key(s) tolerance"),
        (lambda a, b, p: (a, b, "not toml ["), "not valid TOML"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(runs, cli, tmp_path, mutate, needle):
    baseline = tmp_path / "baseline.json"
    assert cli("gate", *_args(runs["clean"]), "--baseline", baseline, "--write-baseline")[0] == 0
    (tmp_path / "garbage.json").write_text("{not json")
    (tmp_path / "other.json").write_text('{"format": "something-else/9", "metrics": {}}')
    args, base, policy_text = mutate(_args(runs["clean"]), baseline, None)
    extra: list[str] = []
    if policy_text is not None:
        (tmp_path / "gate.toml").write_text(policy_text)
        extra = ["--policy", str(tmp_path / "gate.toml")]
    code, out, err = cli("gate", *args, "--baseline", base, *extra)
    assert code == 2, out + err
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and needle in err, err


def test_bad_policy_writes_no_baseline(runs, cli, tmp_path):
    (tmp_path / "gate.toml").write_text("[gate]\nhacking = 'sometimes'\n")
    baseline = tmp_path / "baseline.json"
    code, _, err = cli("gate", *_args(runs["clean"]), "--baseline", baseline, "--write-baseline", "--policy",
                       tmp_path / "gate.toml")
    assert code == 2 and "hacking" in err
    assert not baseline.exists()
