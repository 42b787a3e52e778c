"""No module past 600 lines unless it says, near its top, why it is one piece.

A module of packages/*/src longer than ``LIMIT`` lines must carry, among its first ``HEAD`` lines, a comment (a
real ``#`` comment token, not text inside a docstring) that starts with ``# One piece:`` and gives the reason
in at least a few words. Splits are by responsibility, not by line count: the marker is for a module whose parts
would only be read together (a protocol's two ends, one state machine), and the reason says so.
"""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 600
HEAD = 30
MARKER = "# One piece:"
MIN_REASON = 20  # characters of explanation after the marker


def _has_marker(text: str) -> bool:
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return False
    for tok in tokens:
        if tok.start[0] > HEAD:
            break
        if tok.type == tokenize.COMMENT and tok.string.startswith(MARKER):
            return len(tok.string[len(MARKER) :].strip()) >= MIN_REASON
    return False


def oversized(packages: Path) -> dict[str, int]:
    """Relative path -> line count, for each module over LIMIT lines without the marker."""
    out: dict[str, int] = {}
    for path in sorted(packages.glob("*/src/**/*.py")):
        text = path.read_text(encoding="utf-8")
        lines = len(text.splitlines())
        if lines > LIMIT and not _has_marker(text):
            out[str(path.relative_to(packages.parent))] = lines
    return out


def test_no_module_is_past_600_lines_without_saying_why_it_is_one_piece() -> None:
    packages = ROOT / "packages"
    assert len(list(packages.glob("*/src/**/*.py"))) > 100  # the walk sees the tree
    found = oversized(packages)
    assert not found, (
        f"modules over {LIMIT} lines with no '{MARKER} <reason>' comment in their first {HEAD} lines "
        "(split them by responsibility, or say why they are one piece):\n"
        + "\n".join(f"  {path}: {n} lines" for path, n in sorted(found.items()))
    )


# --- the check can fail ------------------------------------------------------------------------------------

_BODY = "\n".join(f"x{i} = {i}" for i in range(LIMIT))  # LIMIT lines of code


@pytest.mark.parametrize(
    ("text", "flagged"),
    [
        ('"""A module."""\n' + _BODY + "\n", True),  # LIMIT + 1 lines, no marker
        (_BODY + "\n", False),  # exactly LIMIT lines
        ('"""A module."""\n# One piece: the parser and its error table are read together.\n' + _BODY, False),
        ('"""A module."""\n# One piece:\n' + _BODY, True),  # a marker with no reason
        ('"""A module."""\n# One piece: why\n' + _BODY, True),  # a reason too short to be one
        ('"""A module.\n\n# One piece: inside the docstring, so not a comment at all.\n"""\n' + _BODY, True),
        ("\n" * HEAD + "# One piece: the parser and its error table are read together.\n" + _BODY, True),  # too late
        ('"""A module."""\n#One piece: the parser and its error table are read together.\n' + _BODY, True),
    ],
    ids=["over", "at-limit", "marked", "empty-reason", "short-reason", "in-docstring", "too-late", "misspelt"],
)
def test_the_check_flags_an_unexplained_long_module(tmp_path: Path, text: str, flagged: bool) -> None:
    module = tmp_path / "packages" / "demo" / "src" / "demo" / "_big.py"
    module.parent.mkdir(parents=True)
    module.write_text(text, encoding="utf-8")
    found = oversized(tmp_path / "packages")
    assert ("packages/demo/src/demo/_big.py" in found) is flagged, found
