"""A campaign on a PostgreSQL store runs, reports, resumes and binds a receipt exactly as on SQLite: the same
rows, the same summary, the same spend."""

from __future__ import annotations

from pathlib import Path

import pytest
from campaign_support import write_campaign  # pyright: ignore[reportImplicitRelativeImport]

from evalkit_core.models import budget_status
from evalkit_core.store import Store
from evalkit_router import campaign_report, run_campaign, verify_campaign_receipt, write_campaign_outputs


def _run(tmp: Path, monkeypatch: pytest.MonkeyPatch, location: str | None) -> tuple[object, object, str]:
    if location is None:
        monkeypatch.delenv("EVALKIT_STORE", raising=False)
    else:
        monkeypatch.setenv("EVALKIT_STORE", location)
    path = write_campaign(tmp / "c", k=2)
    home = tmp / "home"
    outcome = run_campaign(path, home=home)
    assert (outcome.status, outcome.called) == ("done", 12)
    # as if killed after storing two completions, before grading them: resume grades them, calls nothing
    with Store.open(home) as store, store.transaction() as db:
        db.execute(
            "UPDATE rollouts SET status = 'completed', result = NULL, graded_at = NULL WHERE rollout_key IN"
            " (SELECT rollout_key FROM rollouts ORDER BY rollout_key LIMIT 2)"
        )
    again = run_campaign(path, home=home)
    assert (again.called, again.regraded, again.skipped) == (0, 2, 10)
    with Store.open(home) as store:
        report = campaign_report(store, "c")
        spent = budget_status(store).spent
        _, _, receipt = write_campaign_outputs(report, tmp / "out", home=home)
        where = str(store.path)
    assert all(c.ok for c in verify_campaign_receipt(receipt, home=home)), verify_campaign_receipt(receipt, home=home)
    assert (home / "evalkit.sqlite3").exists() == (location is None)
    return report.rows, (report.summary, spent), where


def test_a_campaign_on_postgres_matches_the_same_campaign_on_sqlite(tmp_path, monkeypatch, pg_cluster):
    url = pg_cluster.create_schema()
    try:
        lite_rows, lite_summary, _ = _run(tmp_path / "lite", monkeypatch, None)
        pg_rows, pg_summary, where = _run(tmp_path / "pg", monkeypatch, url)
    finally:
        pg_cluster.drop_schema(url)
    assert where.startswith("postgresql://")
    assert pg_rows == lite_rows
    assert pg_summary == lite_summary
