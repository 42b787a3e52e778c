"""The mask-leak probe: can the agent name the real date and issuer behind rows of the shifted arm?

Item choice (deterministic): the row_keys served to the agent in shifted-arm tool answers, in the order they
were first served, deduplicated; with ``n`` served and ``k = min(probe_items, n)`` items, stride ``s = n // k``,
the items are served[0], served[s], served[2s], ... (k of them).

Scoring is against the answer key, on the answer text only:
- ``date_recovered``: the real filing date in a full rendering (ISO 2023-03-10, 2023/03/10, 03/10/2023,
  3/10/2023, March 10, 2023, Mar 10 2023, Mar. 10, 2023, 10 March 2023, 10 Mar 2023, 20230310);
- ``year_only``: the real year as a word without a full date (weaker evidence; does not flip the verdict);
- ``issuer_recovered``: the issuer's name with legal suffixes ignored, the ticker as a whole word, or the CIK
  (with or without leading zeros).
Verdict ``mask_leaks`` if any item recovers the date or the issuer, else ``mask_holds``.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["choose_items", "probe_prompt", "score_answer"]

_MONTHS = (
    "january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
    "november", "december",
)
_LEGAL_SUFFIXES = frozenset(
    {
        "INC", "INCORPORATED", "CORP", "CORPORATION", "CO", "COMPANY", "LTD", "LIMITED", "PLC", "LLC", "LP",
        "LLP", "NV", "SA", "AG", "SE", "DE",
    }
)


def choose_items(served: Sequence[str], probe_items: int) -> list[str]:
    n = len(served)
    k = min(probe_items, n)
    if k <= 0:
        return []
    stride = n // k
    return [served[i * stride] for i in range(k)]


def probe_prompt(row: Mapping[str, Any]) -> str:
    shown = "\n".join(f"  {k}: {v}" for k, v in row.items())
    return (
        "The record below comes from a dataset in which every date was shifted and the issuer was hidden.\n"
        f"{shown}\n"
        "What were the real filing date and the real issuer (company name, ticker or CIK) of this filing? "
        "Answer in one sentence."
    )


def _date_patterns(d: dt.date) -> list[str]:
    m_full = _MONTHS[d.month - 1]
    m_abbr = m_full[:3]
    day, month, year = d.day, d.month, d.year
    return [
        rf"\b{year}-0?{month}-0?{day}\b",
        rf"\b{year}/0?{month}/0?{day}\b",
        rf"\b0?{month}/0?{day}/{year}\b",
        rf"\b0?{month}-0?{day}-{year}\b",
        rf"\b{year}{month:02d}{day:02d}\b",
        rf"\b(?:{m_full}|{m_abbr}\.?)\s+0?{day}(?:st|nd|rd|th)?,?\s+{year}\b",
        rf"\b0?{day}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:{m_full}|{m_abbr}\.?),?\s+{year}\b",
    ]


def _name_core(name: str) -> list[str]:
    words = re.sub(r"[^A-Z0-9 ]+", " ", name.upper().replace("&", " AND ")).split()
    while words and words[-1] in _LEGAL_SUFFIXES:
        words.pop()
    return words


def score_answer(text: str, truth: Mapping[str, Any]) -> dict[str, Any]:
    """Score one probe answer against the answer-key row ``truth`` (issuer, ticker, cik, partition_date)."""
    lowered = text.lower()
    real_date = truth["partition_date"]
    if isinstance(real_date, str):
        real_date = dt.date.fromisoformat(real_date)
    date_hit = any(re.search(p, lowered) for p in _date_patterns(real_date))
    year_hit = bool(re.search(rf"\b{real_date.year}\b", lowered))
    issuer_hits: list[str] = []
    core = _name_core(str(truth.get("issuer") or ""))
    if core:
        answer_words = " ".join(re.sub(r"[^A-Z0-9 ]+", " ", text.upper().replace("&", " AND ")).split())
        if re.search(rf"\b{re.escape(' '.join(core))}\b", answer_words):
            issuer_hits.append("name")
    ticker = truth.get("ticker")
    if ticker and re.search(rf"(?<![A-Za-z0-9]){re.escape(str(ticker))}(?![A-Za-z0-9])", text):
        issuer_hits.append("ticker")
    cik = str(truth.get("cik") or "").lstrip("0")
    if cik and re.search(rf"(?<!\d)0*{re.escape(cik)}(?!\d)", text):
        issuer_hits.append("cik")
    return {
        "date_recovered": date_hit,
        "year_only": year_hit and not date_hit,
        "issuer_recovered": bool(issuer_hits),
        "issuer_matched_by": issuer_hits,
    }
