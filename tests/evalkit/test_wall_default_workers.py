"""The sandbox's default worker count: one per CPU and one more (at most 8), the same for the early zygotes the CLI
launches and for the sandbox that adopts them."""

from __future__ import annotations

import pytest

import evalkit.wall._zygote as zygote_module
from evalkit.wall import Sandbox, default_workers
from evalkit_cli import _early_workers  # pyright: ignore[reportPrivateUsage]


@pytest.mark.parametrize(("cpus", "want"), [(None, 2), (1, 2), (2, 3), (4, 5), (7, 8), (8, 8), (64, 8)])
def test_one_worker_per_cpu_and_one_more_at_most_eight(
    monkeypatch: pytest.MonkeyPatch, cpus: int | None, want: int
) -> None:
    monkeypatch.setattr(zygote_module.os, "cpu_count", lambda: cpus)
    assert default_workers() == want
    assert _early_workers(["eval", "--tasks", "b", "--solver", "reference"]) == want
    assert _early_workers(["eval", "--workers", "5"]) == 5
    assert _early_workers(["tasks", "list"]) is None
    with Sandbox() as box, Sandbox(workers=1) as one:  # neither starts a zygote until a job or prestart
        assert box.workers == want
        assert one.workers == 1
