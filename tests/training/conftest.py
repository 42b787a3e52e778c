"""Shared fixtures for the training tests: the fixture task bank and one sandbox per module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from evalkit import Sandbox, Task, load_tasks

BANK = Path(__file__).parents[1] / "evalkit" / "fixtures" / "tasks"


@pytest.fixture(scope="module")
def bank() -> dict[str, Task]:
    return {t.id: t for t in load_tasks(BANK)}


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox(workers=2) as box:
        yield box
