"""`run_eval` reports progress per graded rollout, from whichever worker finishes it, without changing results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import evalkit.grading._eval
from evalkit import load_tasks, run_eval
from evalkit_core import ConfigError

BANK = Path(__file__).parent / "fixtures" / "tasks"


def test_progress_counts_every_rollout_once_and_ends_at_the_total(tmp_path: Path) -> None:
    seen: list[tuple[int, int]] = []
    with_bar = run_eval(
        BANK, "reference", k=2, out=tmp_path / "a.jsonl", workers=2, progress=lambda d, t: seen.append((d, t))
    )
    without = run_eval(BANK, "reference", k=2, out=tmp_path / "b.jsonl", workers=1)
    total = 2 * len(load_tasks(BANK))
    assert seen == [(i, total) for i in range(1, total + 1)]
    assert with_bar.summary == without.summary
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    assert json.loads((tmp_path / "a.jsonl").read_text().splitlines()[0])["sample"] == 0


def test_an_unknown_solver_is_refused_before_any_sandbox_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_sandbox(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a sandbox was opened for a solver that is refused")

    monkeypatch.setattr(evalkit.grading._eval, "Sandbox", no_sandbox)
    with pytest.raises(ConfigError, match="--solver must be"):
        run_eval(BANK, "oracle", out=tmp_path / "x.jsonl")
    assert not (tmp_path / "x.jsonl").exists()
