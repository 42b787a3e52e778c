"""Campaigns in process: config checks, pass@k, a sim campaign end to end, resume, changed files, receipts."""

from __future__ import annotations

import itertools
import json
import sqlite3
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest
from campaign_support import SEED_BANK, SUBSET, write_campaign  # pyright: ignore[reportImplicitRelativeImport]

import evalkit
import evalkit_router
from evalkit import CodeTask, Counterexample, bank_counterexamples
from evalkit_core import ConfigError
from evalkit_core.store import Store
from evalkit_router import (
    CampaignChangedError,
    CampaignError,
    campaign_report,
    campaign_status,
    load_campaign,
    pass_at_k,
    rollout_key,
    run_campaign,
    verify_campaign_receipt,
    write_campaign_outputs,
)


def test_public_surface_is_pinned() -> None:
    assert evalkit_router.__all__ == sorted(evalkit_router.__all__)
    assert set(evalkit_router.__all__) == {
        "CampaignChangedError", "CampaignConfig", "CampaignError", "CampaignIntegrityError", "CampaignReport",
        "CampaignStatus", "LostCall", "PlannedRollout", "ProgressFn", "ReceiptCheck", "RunOutcome",
        "adversarial_set", "campaign_label", "campaign_report", "campaign_status", "check_rollout_costs",
        "default_out_dir", "load_campaign", "pass_at_k", "plan_rollouts", "render_table", "require_store",
        "rollout_key", "run_campaign", "run_campaign_async", "select_tasks", "summarize_results", "summary_intervals",
        "verify_campaign_receipt", "write_campaign_outputs",
        # routing
        "Calibration", "LiveDecision", "ModelQuality", "RouteOutcome", "RoutingReport", "calibrate", "digest_of_rows",
        "family_of", "route_live", "route_order", "simulate_routing", "split_tasks", "sweep", "wilson_lower_bound",
    }  # fmt: skip


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_pass_at_k_is_the_chance_that_k_of_n_samples_hold_a_correct_one(n: int) -> None:
    for c in range(n + 1):
        outcomes = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            draws = list(itertools.combinations(range(n), k))
            expected = Fraction(sum(any(outcomes[i] for i in d) for d in draws), len(draws))
            assert pass_at_k(n, c, k) == expected


def test_rollout_key_changes_with_each_part() -> None:
    base = ("c", "m", "t", "sha256:x", 0)
    keys = {rollout_key(*base)}
    for i, alt in enumerate(("c2", "m2", "t2", "sha256:y", 1)):
        parts = list(base)
        parts[i] = alt
        keys.add(rollout_key(*parts))  # type: ignore[arg-type]
    assert len(keys) == 6


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('models = ["sim/weak"]\nk = 1\n[tasks]\ndir = "."\n', "field 'name'"),
        ('name = "x"\nmodels = ["sim/weak"]\nk = 0\n[tasks]\ndir = "."\n', "field 'k'"),
        ('name = "x"\nmodels = []\nk = 1\n[tasks]\ndir = "."\n', "field 'models'"),
        (
            'name = "x"\nmodels = ["a"]\nk = 1\nbudget_usd = "lots"\n[tasks]\ndir = "."\n',
            "field 'budget_usd'",
        ),
        ('name = "x"\nmodels = ["a"]\nk = 1\nspeed = 3\n[tasks]\ndir = "."\n', "unknown field(s) speed"),
        ('name = "x"\nmodels = ["a"]\nk = 1\n', "table [tasks] is required"),
        ("name = ", "not a valid TOML file"),
    ],
)
def test_bad_campaign_files_name_the_file_and_field(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(body)
    with pytest.raises(CampaignError) as info:
        load_campaign(path)
    assert str(path) in str(info.value)
    assert message in str(info.value)


def test_unknown_task_ids_and_models_are_refused(tmp_path: Path) -> None:
    path = write_campaign(tmp_path, ids=("code/nope/001",))
    with pytest.raises(CampaignError, match=r"tasks.ids.*code/nope/001"):
        run_campaign(path, home=tmp_path / "home")
    path = write_campaign(tmp_path, models=("sim/nope",))
    with pytest.raises(ConfigError, match="unknown model 'sim/nope'"):
        run_campaign(path, home=tmp_path / "home")


def _calls(home: Path) -> int:
    with sqlite3.connect(home / "evalkit.sqlite3") as db:
        return int(db.execute("SELECT count(*) FROM model_calls").fetchone()[0])


def test_sim_campaign_runs_reports_and_binds_a_receipt(tmp_path: Path) -> None:
    path = write_campaign(tmp_path / "c", k=3)
    home = tmp_path / "home"
    seen: list[tuple[int, int]] = []
    outcome = run_campaign(path, home=home, progress=lambda d, t, _s: seen.append((d, t)))
    assert outcome.status == "done"
    assert (outcome.planned, outcome.called, outcome.skipped, outcome.remaining) == (18, 18, 0, 0)
    assert seen[-1] == (18, 18)
    assert _calls(home) == 18
    with Store.open(home) as store:
        report = campaign_report(store, "c")
        status = campaign_status(store, "c")
        results, _, receipt = write_campaign_outputs(report, tmp_path / "out")
    assert (status.graded, status.missing, status.ungraded) == (18, 0, 0)
    summary = report.summary
    per_model = {m["model"]: m for m in summary["per_model"]}  # type: ignore[union-attr,index]
    assert set(per_model) == {"sim/weak", "sim/strong"}
    for m in per_model.values():
        assert m["graded"] == 9
        assert m["infra_errors"] == 0
        assert set(m["pass@k"]) == {"1", "2", "3"}
        assert m["adversarial_pass@1"] is None
        pk = [m["pass@k"][str(j)] for j in (1, 2, 3)]
        assert pk == sorted(pk)
    strong, weak = per_model["sim/strong"], per_model["sim/weak"]
    assert (
        strong["hidden_pass@1"] >= weak["hidden_pass@1"]
    )  # the sim draw is shared: strong solves a superset
    # the total is the exact sum of the stored completions' costs
    with sqlite3.connect(home / "evalkit.sqlite3") as db:
        costs = [Decimal(c) for (c,) in db.execute("SELECT cost FROM rollouts")]
    assert Decimal(summary["cost_usd"]) == sum(costs) == outcome.spent_total  # type: ignore[arg-type]
    checks = verify_campaign_receipt(receipt)
    assert [(c.name, c.ok) for c in checks] == [
        ("signature", True), ("body", True), ("campaign_file", True), ("tasks", True), ("registry", True), ("results", True),
        ("summary", True),
    ]  # fmt: skip
    lines = results.read_text().splitlines()
    row = json.loads(lines[0])
    row["hidden"]["passed"] = 0 if row["hidden"]["passed"] else row["hidden"]["total"]
    lines[0] = json.dumps(row)
    results.write_text("\n".join(lines) + "\n")
    bad = {c.name: c for c in verify_campaign_receipt(receipt)}
    assert not bad["results"].ok
    assert "receipt expects" in bad["results"].detail
    assert bad["body"].ok
    assert bad["campaign_file"].ok
    assert bad["signature"].ok  # the receipt itself is untouched


def test_campaign_receipt_is_signed_and_a_resigned_one_fails(tmp_path: Path) -> None:
    from evalkit_core import SigningKey, load_signing_key, make_receipt, read_receipt, write_receipt

    path = write_campaign(tmp_path / "c", k=1)
    home = tmp_path / "home"
    run_campaign(path, home=home)
    with Store.open(home) as store:
        _, _, receipt = write_campaign_outputs(campaign_report(store, "c"), tmp_path / "out", home=home)
    data = read_receipt(receipt)
    assert data["signer"]["keyid"] == load_signing_key(home).key_id
    assert {c.name: c.ok for c in verify_campaign_receipt(receipt, home=home)}["signature"]
    # The default trust is $EVALKIT_HOME's key, not the campaign home's: name the signer to trust it.
    assert not {c.name: c.ok for c in verify_campaign_receipt(receipt)}["signature"]
    assert {c.name: c.ok for c in verify_campaign_receipt(receipt, key=data["signer"]["keyid"])}["signature"]
    forger = SigningKey.from_seed(b"\x13" * 32)
    body = data["body"]
    body["summary"] = {**body["summary"], "note": "edited"}
    write_receipt(receipt, make_receipt(body, key=forger))
    checks = {c.name: c for c in verify_campaign_receipt(receipt, home=home)}
    assert not checks["signature"].ok
    assert "not a trusted key" in checks["signature"].detail


def test_resume_regrades_stored_completions_without_calling_and_skips_graded(tmp_path: Path) -> None:
    path = write_campaign(tmp_path / "c", k=2)
    home = tmp_path / "home"
    run_campaign(path, home=home)
    with Store.open(home) as store:
        before = campaign_report(store, "c").rows
    with sqlite3.connect(home / "evalkit.sqlite3") as db:  # as if killed after storing, before grading
        db.execute(
            "UPDATE rollouts SET status = 'completed', result = NULL, graded_at = NULL WHERE rollout_key IN"
            " (SELECT rollout_key FROM rollouts ORDER BY rollout_key LIMIT 3)"
        )
        db.execute("DELETE FROM rollouts WHERE rollout_key = (SELECT max(rollout_key) FROM rollouts)")
    calls = _calls(home)
    with Store.open(home) as store:
        st = campaign_status(store, "c")
    assert (st.graded, st.ungraded, st.missing) == (8, 3, 1)
    outcome = run_campaign(path, home=home)
    assert (outcome.called, outcome.regraded, outcome.skipped) == (1, 3, 8)
    assert _calls(home) == calls + 1
    with Store.open(home) as store:
        assert campaign_report(store, "c").rows == before
    again = run_campaign(path, home=home)
    assert (again.called, again.regraded, again.skipped, again.status) == (0, 0, 12, "done")
    assert _calls(home) == calls + 1


def test_each_verdict_records_what_it_was_graded_under_and_an_unrecorded_one_is_regraded(tmp_path: Path) -> None:
    """Schema 3: settings digest, bank digest and isolation beside each verdict; a verdict without them (graded
    before) or under other ones is graded again on resume, with no model call."""
    path = write_campaign(tmp_path / "c", k=1, ids=SUBSET[:2])
    home = tmp_path / "home"
    run_campaign(path, home=home)
    with evalkit.Sandbox(workers=1) as box:
        label = box.isolation.label
    with sqlite3.connect(home / "evalkit.sqlite3") as db:
        rows = db.execute("SELECT settings_digest, bank_digest, isolation, result FROM rollouts").fetchall()
        (ident,) = db.execute("SELECT json_extract(config, '$.identity.tasks_digest') FROM campaigns").fetchone()
        assert {(s, b) for s, b, _, _ in rows} == {(json.loads(rows[0][3])["settings_digest"], ident)}
        assert {i for _, _, i, _ in rows} == {label}
        db.execute(
            "UPDATE rollouts SET settings_digest = NULL, bank_digest = NULL, isolation = NULL WHERE rollout_key ="
            " (SELECT min(rollout_key) FROM rollouts)"
        )
        db.execute("UPDATE rollouts SET isolation = 'weaker: seccomp' WHERE rollout_key = (SELECT max(rollout_key) FROM rollouts)")
    outcome = run_campaign(path, home=home)
    assert (outcome.called, outcome.regraded) == (0, 2)
    with sqlite3.connect(home / "evalkit.sqlite3") as db:
        assert db.execute("SELECT DISTINCT isolation FROM rollouts").fetchall() == [(label,)]


def test_a_changed_file_is_refused_with_what_changed_unless_renamed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = write_campaign(tmp_path / "c", k=1, ids=SUBSET[:2])
    run_campaign(path, home=home)
    path = write_campaign(tmp_path / "c", k=2, ids=SUBSET[1:], models=("sim/weak", "sim/mid"))
    with pytest.raises(CampaignChangedError) as info:
        run_campaign(path, home=home)
    text = str(info.value)
    assert "k: 1 -> 2" in text
    assert "models: added sim/mid; removed sim/strong" in text
    assert f"tasks: added {SUBSET[2]}; removed {SUBSET[0]}" in text
    assert "--new-name" in text
    renamed = run_campaign(path, home=home, new_name="c2")
    assert (renamed.name, renamed.status, renamed.called) == ("c2", "done", 8)
    # run settings may change: budget and concurrency
    path = write_campaign(tmp_path / "c", k=1, ids=SUBSET[:2], budget="9", concurrency=2)
    outcome = run_campaign(path, home=home)
    assert outcome.called == 0
    assert any(n.startswith("budget_usd changed") for n in outcome.notes)


def test_banked_adversarial_tests_are_graded_apart_from_hidden_and_regraded_when_the_set_grows(
    tmp_path: Path,
) -> None:
    task_id = "code/median/001"
    task = next(t for t in evalkit.load_tasks(SEED_BANK) if t.id == task_id)
    assert isinstance(task, CodeTask)

    def banked(args: list[object], expected: object) -> Counterexample:
        return Counterexample(
            task_id=task_id, task_digest=task.digest, args=(args,), kwargs={}, expected=expected,  # type: ignore[arg-type]
            category="other", hint="test", found_by="test", candidate_digest="sha256:x", actual="",
        )  # fmt: skip

    home = tmp_path / "home"
    path = write_campaign(tmp_path / "c", k=2, ids=(task_id,), models=("sim/strong",))
    with Store.open(home) as store:
        bank_counterexamples(store, [banked([5, 1, 3], 3)])
    run_campaign(path, home=home)
    with Store.open(home) as store:
        report = campaign_report(store, "c")
    for row in report.rows:
        adv = row["adversarial"]
        assert adv["total"] == 1  # type: ignore[index]
        assert [t[0] for t in adv["tests"]] == ["adversarial/0"]  # type: ignore[index]
        assert row["hidden"]["total"] == len(task.hidden_tests)  # type: ignore[index]
    m = report.summary["per_model"][0]  # type: ignore[index]
    assert m["adversarial_pass@1"] == 1.0
    assert m["adversarial_tasks"] == 1
    # the set grows (a wrong expected value no solver passes): a resume re-grades without calling the model
    with Store.open(home) as store:
        bank_counterexamples(store, [banked([2, 4], -1)])
    calls = _calls(home)
    outcome = run_campaign(path, home=home)
    assert (outcome.called, outcome.regraded) == (0, 2)
    assert _calls(home) == calls
    with Store.open(home) as store:
        m = campaign_report(store, "c").summary["per_model"][0]  # type: ignore[index]
    assert m["adversarial_pass@1"] == 0.0


def test_mine_banks_counterexamples_against_candidates_the_static_tests_miss(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ids = ("code/merge-intervals/001",)
    path = write_campaign(
        tmp_path / "c", k=5, ids=ids, models=("sim/weak", "sim/mid", "sim/strong"), extra="mine = true"
    )
    outcome = run_campaign(path, home=home)
    assert outcome.status == "done"
    assert outcome.mined > 0
    with Store.open(home) as store:
        assert len(evalkit.adversarial_tests(store, ids[0])) == outcome.mined
        summary = campaign_report(store, "c").summary
    rates = [m["adversarial_pass@1"] for m in summary["per_model"]]  # type: ignore[union-attr,index]
    hidden = [m["hidden_pass@1"] for m in summary["per_model"]]  # type: ignore[union-attr,index]
    assert min(r for r in rates if r is not None) < max(h for h in hidden if h is not None)
    again = run_campaign(path, home=home)
    assert (again.called, again.regraded, again.mined) == (0, 0, 0)


def test_the_model_layers_global_cap_halts_the_campaign_cleanly(tmp_path: Path) -> None:
    from evalkit_core.models import set_budget_cap

    home = tmp_path / "home"
    path = write_campaign(tmp_path / "c", k=2, models=("sim/strong",))
    with Store.open(home) as store:
        set_budget_cap(store, Decimal("0.03"))
    halted = run_campaign(path, home=home)
    assert halted.status == "halted"
    assert halted.halted_by is not None
    assert "global budget cap $0.03" in halted.halted_by
    assert "evalkit budget set" in halted.halted_by
    assert 0 < halted.remaining < 6
    assert halted.remaining_worst_case > 0
    with Store.open(home) as store:
        set_budget_cap(store, None)
    resumed = run_campaign(path, home=home)
    assert (resumed.status, resumed.called, resumed.remaining) == ("done", halted.remaining, 0)
