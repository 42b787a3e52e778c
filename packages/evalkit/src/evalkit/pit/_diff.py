"""Where a replayed receipt body differs from the one a receipt holds: paths and both values, shown briefly."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from evalkit_core import canonical_bytes

__all__ = ["ABSENT", "diff", "show"]


def show(value: object) -> str:
    if value is ABSENT:
        return "absent"
    text = canonical_bytes(value).decode("utf-8", "replace")
    return text if len(text) <= 80 else text[:77] + "..."


ABSENT = object()


def _cell_label(cell: object, index: int) -> str:
    if isinstance(cell, dict):
        c = cast("dict[str, Any]", cell)
        return f"{c.get('arm')}/{c.get('clock')}"
    return str(index)


def diff(theirs: Any, ours: Any, path: str = "") -> list[tuple[str, str, str]]:
    """Every leaf where two JSON values differ, as (path, receipt value, replay value)."""
    if isinstance(theirs, dict) and isinstance(ours, dict):
        a, b = cast("dict[str, Any]", theirs), cast("dict[str, Any]", ours)
        out: list[tuple[str, str, str]] = []
        for k in sorted(set(a) | set(b)):
            sub = f"{path}.{k}" if path else k
            if k not in a or k not in b:
                out.append((sub, show(a.get(k, ABSENT)), show(b.get(k, ABSENT))))
            else:
                out += diff(a[k], b[k], sub)
        return out
    if isinstance(theirs, list) and isinstance(ours, list):
        a_list, b_list = cast("list[object]", theirs), cast("list[object]", ours)
        if path == "cells":
            return _diff_cells(a_list, b_list)
        lengths = (
            [(f"{path}.length", str(len(a_list)), str(len(b_list)))] if len(a_list) != len(b_list) else []
        )
        return lengths + _diff_pairs(a_list, b_list, path)
    a_leaf, b_leaf = cast("object", theirs), cast("object", ours)  # narrowed past dict and list: any other leaf
    return [] if canonical_bytes(a_leaf) == canonical_bytes(b_leaf) else [(path, show(a_leaf), show(b_leaf))]


def _diff_pairs(a: Sequence[object], b: Sequence[object], path: str) -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        out += diff(x, y, f"{path}[{i}]")
    return out


def _diff_cells(a: Sequence[object], b: Sequence[object]) -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []
    labels_a = [_cell_label(c, i) for i, c in enumerate(a)]
    labels_b = [_cell_label(c, i) for i, c in enumerate(b)]
    if labels_a != labels_b:
        out.append(("cells.order", ",".join(labels_a), ",".join(labels_b)))
    by_label = dict(zip(labels_b, b, strict=False))
    for label, cell in zip(labels_a, a, strict=False):
        if label in by_label:
            out += diff(cell, by_label[label], f"cells[{label}]")
    return out
