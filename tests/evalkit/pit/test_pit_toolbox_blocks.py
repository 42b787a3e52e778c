"""An arm's rendered rows keep only the blocks used last: a row asked for again after its block was dropped is
rendered again to the same text, whatever the order rows are asked in."""

from __future__ import annotations

import random

import pytest

from evalkit.pit import _toolbox
from evalkit.pit._toolbox import ArmRows
from evalkit_core import Release
from evalkit_core._synth import write_demo_release


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Release:
    return Release.load(write_demo_release(tmp_path_factory.mktemp("blocks") / "demo"))


@pytest.mark.parametrize("arm", ["main", "redacted", "shifted"])
def test_rows_after_their_block_was_dropped_are_the_same(demo: Release, monkeypatch: pytest.MonkeyPatch, arm: str) -> None:
    frame = demo.arm(arm)
    whole = ArmRows(frame)  # keeps every block (the demo is small)
    want_text = [whole.text(i) for i in range(frame.height)]
    want_rows = [whole.row(i) for i in range(frame.height)]
    monkeypatch.setattr(_toolbox, "_TEXT_BLOCK", 64)
    monkeypatch.setattr(_toolbox, "_BLOCK", 16)
    monkeypatch.setattr(_toolbox, "_TEXT_BLOCKS_KEPT", 2)
    monkeypatch.setattr(_toolbox, "_BLOCKS_KEPT", 3)
    small = ArmRows(frame)
    rng = random.Random(arm)
    order = [rng.randrange(frame.height) for _ in range(300)] + list(range(0, frame.height, 7))
    for i in order:
        assert small.text(i) == want_text[i]
        assert small.row(i) == want_rows[i]
        assert len(small._texts) <= 2 and len(small._blocks) <= 3  # pyright: ignore[reportPrivateUsage]
