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
        # two and three blocks kept, until the arm has dropped as many blocks as it has (then it keeps them all)
        dropped = small._dropped  # pyright: ignore[reportPrivateUsage]
        assert len(small._texts) <= 2 or dropped[0] >= _toolbox._REDRAWS * -(-frame.height // 64)  # pyright: ignore[reportPrivateUsage]
        assert len(small._blocks) <= 3 or dropped[1] >= _toolbox._REDRAWS * -(-frame.height // 16)  # pyright: ignore[reportPrivateUsage]


def test_an_agent_asking_all_over_the_arm_cannot_make_blocks_render_again_and_again(
    demo: Release, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows asked for in a stride that misses the kept blocks every time: once the arm has dropped _REDRAWS times its
    blocks, it keeps them all, so each block renders at most _REDRAWS + 1 times whatever the agent asks."""
    frame = demo.arm("main")
    monkeypatch.setattr(_toolbox, "_TEXT_BLOCK", 64)
    monkeypatch.setattr(_toolbox, "_TEXT_BLOCKS_KEPT", 2)
    rows = ArmRows(frame)
    renders: list[int] = []
    real = rows._text_block  # pyright: ignore[reportPrivateUsage]

    def counted(block: int) -> tuple[list[str], list[str], list[str]]:
        renders.append(block)
        return real(block)

    monkeypatch.setattr(rows, "_text_block", counted)
    blocks = -(-frame.height // 64)
    for _ in range(20):  # every block in turn, twenty times over: an LRU of two would render each every time
        for b in range(blocks):
            rows.text(b * 64)
    assert len(renders) <= (_toolbox._REDRAWS + 1) * blocks
    assert max(renders.count(b) for b in range(blocks)) <= _toolbox._REDRAWS + 1
