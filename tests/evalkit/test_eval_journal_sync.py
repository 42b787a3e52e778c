"""The eval journal flushes to disk once per group of verdicts that finished together, and never leaves a verdict
unflushed: appended at once (an interrupt of the process loses none), fsync'd when no other verdict waits, when the
journal closes, and before an eval returns."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import evalkit.grading._eval_journal as journal_module
from evalkit import load_tasks, run_eval
from evalkit.grading._eval_journal import Journal, journal_path
from evalkit_core import generate_signing_key

BANK = Path(__file__).parent / "fixtures" / "tasks"


def _fsyncs(monkeypatch: pytest.MonkeyPatch, path: Path) -> list[int]:
    """Record, at each fsync of the file at ``path``, how many lines it held then."""
    seen: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        real(fd)
        if path.exists() and os.fstat(fd).st_ino == path.stat().st_ino:
            seen.append(path.read_bytes().count(b"\n"))

    monkeypatch.setattr(journal_module.os, "fsync", counting)
    return seen


def test_appends_are_written_at_once_and_flushed_together(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "r.jsonl.partial"
    seen = _fsyncs(monkeypatch, path)
    key = generate_signing_key(tmp_path / "home")
    journal = Journal(path, {"bank": "b"}, key)
    assert seen == [1]  # the header, flushed when the journal is made
    for n in range(3):
        journal.append(f"k{n}", {"n": n})
    assert path.read_bytes().count(b"\n") == 4  # written at once: a crash of this process loses none
    assert seen == [1]
    journal.sync()
    assert seen == [1, 4]
    journal.sync()  # nothing new: no flush
    assert seen == [1, 4]
    journal.append("k3", {"n": 3})
    journal.close()  # what is left unflushed is flushed on close
    assert seen == [1, 4, 5]
    reopened = Journal(path, {"bank": "b"}, key)
    assert sorted(reopened.kept) == ["k0", "k1", "k2", "k3"]
    reopened.discard()


def test_an_eval_flushes_every_verdict_before_it_returns_and_never_more_than_once_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVALKIT_HOME", str(tmp_path / "home"))
    out = tmp_path / "r.jsonl"
    path = journal_path(out)
    seen: list[int] = []
    real_discard = Journal.discard

    def keep_count(self: Journal) -> None:  # the journal is deleted at the end: note what it held first
        seen.append(-path.read_bytes().count(b"\n"))
        real_discard(self)

    flushes = _fsyncs(monkeypatch, path)
    monkeypatch.setattr(Journal, "discard", keep_count)
    total = 2 * len(load_tasks(BANK))
    run_eval(BANK, "reference", k=2, out=out, workers=2)
    held = -seen[0]
    assert held == total + 1  # the header and every verdict
    assert flushes[0] == 1
    assert flushes[-1] == held  # the last flush came after the last verdict was appended
    assert len(flushes) <= total + 1  # at most one flush a verdict, never more
    assert flushes == sorted(flushes)
    assert len(out.read_text().splitlines()) == total
