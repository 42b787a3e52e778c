"""Helpers for the agent-shape, SDK-endpoint and hostile-async tests: write an agent module under the test's temp
directory (named ``module:function``, so the harness never imports it), run it, and read the run's events."""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from evalkit.pit import RunConfig

RUN_START, RUN_END = "2023-03-01", "2023-03-02"

needs_wall = pytest.mark.needs("bwrap")  # without it the agent runs behind a weaker wall


def make_writer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., str]:
    counter = iter(range(1000))
    where = tmp_path / "agentsrc"
    where.mkdir()
    monkeypatch.syspath_prepend(str(where))

    def write(source: str, func: str = "agent") -> str:
        name = f"shape_{os.getpid()}_{next(counter)}"
        (where / f"{name}.py").write_text(textwrap.dedent(source))
        return f"{name}:{func}"

    return write


def cfg(release_dir: Path, **kw: Any) -> RunConfig:
    base: dict[str, Any] = {
        "bundle_path": str(release_dir),
        "forms": ("8-K",),
        "start": RUN_START,
        "end": RUN_END,
        "arms": ("main",),
        "clocks": ("pit",),
        "probe_items": 0,
        # the window's sessions only (these tests count calls per session): the masks as released
        "mask_decoys": False,
    }
    return RunConfig(**{**base, **kw})


def events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def texts(result: Any) -> list[str]:
    return [e["text"] for e in events(result.trajectory_path) if e["type"] == "decision"]


def kinds(result: Any, kind: str) -> list[dict[str, Any]]:
    return [e for e in events(result.trajectory_path) if e["type"] == kind]
