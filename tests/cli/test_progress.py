"""Progress on stderr: an ETA that does not stick, and --progress where stderr is not a terminal."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from evalkit_cli._app import main
from evalkit_cli._progress import eta_seconds, format_eta

BANK = Path(__file__).resolve().parents[1] / "evalkit" / "fixtures" / "tasks"


def test_the_eta_grows_while_nothing_finishes_and_is_zero_at_the_end():
    assert eta_seconds(0, 10, 5.0) is None
    assert eta_seconds(5, 10, 10.0) == 10.0
    stalled = [eta_seconds(5, 10, t) for t in (10.0, 11.0, 12.0)]
    assert stalled == sorted(stalled) and len(set(stalled)) == 3  # no stale estimate: it moves every second
    assert eta_seconds(10, 10, 30.0) == 0.0
    assert format_eta(None) == "ETA --:--"
    assert format_eta(75.4) == "ETA 1:15"
    assert format_eta(3725) == "ETA 1:02:05"


def test_progress_lines_on_a_pipe_only_when_asked(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for extra, shown in (([], False), (["--progress"], True), (["--json", "--progress"], True)):
        monkeypatch.setattr(
            sys, "argv", ["evalkit", "eval", "--tasks", str(BANK), "--solver", "reference", *extra]
        )
        with pytest.raises(SystemExit) as exc:
            main()
        assert exc.value.code == 0
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.startswith("grading")]
        assert bool(lines) is shown, err
        if shown:
            assert re.fullmatch(r"grading 4/4  elapsed \d+s  ETA 0:00", lines[-1]), lines
