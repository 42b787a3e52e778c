"""What the report modules share: the receipt kinds, the model type, the error, and the readers of JSON files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

from evalkit_core import ConfigError

__all__ = ["CAMPAIGN_KIND", "EVAL_KIND", "PIT_KIND", "Model", "ReportError", "first_row", "read_json", "read_jsonl"]

PIT_KIND = "pit_run"
EVAL_KIND = "evalkit.eval"
CAMPAIGN_KIND = "evalkit.campaign"

Model = dict[str, Any]


class ReportError(ConfigError):
    """PATH is not something a report can be made of."""


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise ReportError(f"{path}:{n}: not valid JSON ({exc})") from None
            if not isinstance(row, dict):
                raise ReportError(f"{path}:{n}: expected a JSON object")
            rows.append(cast("dict[str, Any]", row))
    return rows


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None



def first_row(p: Path) -> dict[str, Any] | None:
    try:
        with p.open(encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    row = json.loads(line)
                    return cast("dict[str, Any]", row) if isinstance(row, dict) else None
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return None

