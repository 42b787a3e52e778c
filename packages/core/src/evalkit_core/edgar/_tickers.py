"""The SEC's ticker map: ``company_tickers.json`` (or ``company_tickers_exchange.json``), CIK -> ticker.

The map is a snapshot as of the day it was downloaded, not point-in-time: a company that changed its ticker
or was delisted before the snapshot shows its later ticker or none. The builder records that in provenance.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from evalkit_core._canonical import digest_bytes
from evalkit_core._errors import ReleaseError
from evalkit_core.edgar._inputs import InputFile

__all__ = ["TickerMap", "read_ticker_map"]


@attrs.frozen
class TickerMap:
    """CIK (unpadded) -> ticker. Where the SEC lists several tickers for one CIK, the first listed wins."""

    by_cik: Mapping[str, str]
    source: InputFile

    def get(self, cik: str) -> str | None:
        return self.by_cik.get(cik)


def _cik(v: Any) -> str | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str) and v.strip().isdigit():
        return str(int(v))
    return None


def read_ticker_map(path: Path) -> TickerMap:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ReleaseError(f"{path}: cannot read the ticker map ({exc.strerror})") from None
    try:
        doc: Any = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ReleaseError(
            f"{path}: not valid JSON ({exc}); expected the SEC's company_tickers.json"
        ) from None
    pairs: list[tuple[str, str]] = []
    obj: dict[str, Any] = doc if isinstance(doc, dict) else {}  # pyright: ignore[reportUnknownVariableType]
    if "fields" in obj and "data" in obj:
        fields: Any = obj["fields"]
        data: Any = obj["data"]
        if not (
            isinstance(fields, list) and "cik" in fields and "ticker" in fields and isinstance(data, list)
        ):
            raise ReleaseError(
                f"{path}: field 'fields' must list 'cik' and 'ticker', and 'data' must be an array"
            )
        ci, ti = fields.index("cik"), fields.index("ticker")
        for n, row in enumerate(data):  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
            if not isinstance(row, list) or len(row) <= max(ci, ti):  # pyright: ignore[reportUnknownArgumentType]
                raise ReleaseError(f"{path}: field 'data[{n}]' is not a row of {len(fields)} values")  # pyright: ignore[reportUnknownArgumentType]
            pairs.append(_pair(path, f"data[{n}]", row[ci], row[ti]))
    elif isinstance(doc, dict):
        entries = obj
        # Keys are "0", "1", ... in the SEC's order; sort numerically so the first-listed ticker wins.
        for key in sorted(entries, key=lambda k: (0, int(k), "") if k.isdigit() else (1, 0, k)):
            item = entries[key]
            if not isinstance(item, dict):
                raise ReleaseError(f"{path}: field {key!r} is not an object with cik_str and ticker")
            it: dict[str, Any] = item  # pyright: ignore[reportUnknownVariableType]
            pairs.append(_pair(path, key, it.get("cik_str"), it.get("ticker")))
    else:
        raise ReleaseError(f"{path}: expected a JSON object (the SEC's company_tickers.json)")
    by_cik: dict[str, str] = {}
    for cik, ticker in pairs:
        by_cik.setdefault(cik, ticker)
    return TickerMap(
        by_cik=by_cik,
        source=InputFile(name=path.name, sha256=digest_bytes(raw), size=len(raw), kind="tickers"),
    )


def _pair(path: Path, where: str, cik: Any, ticker: Any) -> tuple[str, str]:
    c = _cik(cik)
    if c is None or not isinstance(ticker, str) or not ticker:
        raise ReleaseError(
            f"{path}: entry {where!r}: expected a numeric cik and a ticker string, got {cik!r}, {ticker!r}"
        )
    return c, ticker
