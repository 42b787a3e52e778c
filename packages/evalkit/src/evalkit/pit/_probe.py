"""The mask-leak probe: can the agent name the real date and issuer behind rows of the shifted arm?

Item choice (deterministic): the row_keys served to the agent in shifted-arm tool answers, in the order they
were first served, deduplicated; with ``n`` served and ``k = min(probe_items, n)`` items, stride ``s = n // k``,
the items are served[0], served[s], served[2s], ... (k of them).

Scoring is against the answer key, on the answer text only, after normalising it: Unicode NFKC (full-width
letters and digits, ligatures, non-breaking spaces), accents and invisible format characters (zero-width
spaces, soft hyphens) removed, every dash to ``-``, curly quotes and apostrophes to straight ones (then dropped
inside words: ``Macy\u2019s`` = ``Macy's`` = ``Macys``), digits of any script to ASCII, and casefolded.

- ``date_recovered``: the real filing date in a full rendering: ISO ``2023-03-10`` (also ``/`` or ``.`` as
  separators, ``20230310``), month first ``03/10/2023``, ``3-10-2023``, ``03/10/23``, day first
  ``10/03/2023``, ``10.03.2023``, and with the month's name ``March 10, 2023``, ``Mar. 10th 2023``,
  ``Sept 10 2023``, ``10 March 2023``, ``the 10th of March, 2023``, ``10-Mar-2023``, ``2023 March 10``. A day
  first rendering counts too, so an ambiguous answer counts as recovered: the probe errs towards ``mask_leaks``;
- ``year_only``: the real year as a word without a full date (weaker evidence; does not flip the verdict);
- ``issuer_recovered``: the issuer's name with legal suffixes ignored, the ticker as a whole word (its case
  kept), or the CIK (with or without leading zeros).
Verdict ``mask_leaks`` if any item recovers the date or the issuer, else ``mask_holds``; ``not_run`` when no
item was asked, which leaves the masks unproven (the receipt says so in ``masks``).
"""

from __future__ import annotations

import datetime as dt
import re
import unicodedata
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


_MONTH_ABBR = {9: "sept?"}  # "Sep" and "Sept"
_ORD = r"(?:st|nd|rd|th)?"
_SEP = r"[-/.]"


def _date_patterns(d: dt.date) -> list[str]:
    m_full = _MONTHS[d.month - 1]
    m_abbr = _MONTH_ABBR.get(d.month, m_full[:3])
    month_name = rf"(?:{m_full}|{m_abbr}\.?)"
    day, month, year, yy = d.day, d.month, d.year, d.year % 100
    return [
        rf"(?<!\d){year}{_SEP}0?{month}{_SEP}0?{day}(?!\d)",  # 2023-03-10, 2023/3/10, 2023.03.10
        rf"(?<!\d){year}{month:02d}{day:02d}(?!\d)",  # 20230310
        rf"(?<!\d)0?{month}{_SEP}0?{day}{_SEP}(?:{year}|{yy:02d})(?!\d)",  # 03/10/2023, 3-10-2023, 03/10/23
        rf"(?<!\d)0?{day}{_SEP}0?{month}{_SEP}(?:{year}|{yy:02d})(?!\d)",  # 10/03/2023, 10.03.2023
        rf"\b{month_name}[\s,-]*0?{day}{_ORD}(?!\d)[\s,-]+{year}(?!\d)",  # March 10, 2023; Mar. 10th 2023
        rf"(?<!\d)0?{day}{_ORD}(?:\s+of)?[\s,-]+{month_name}[\s,-]+{year}(?!\d)",  # 10 March 2023; 10-Mar-2023
        rf"(?<!\d){year}[\s,-]+{month_name}[\s,-]+0?{day}{_ORD}(?!\d)",  # 2023 March 10
    ]


_QUOTES = str.maketrans(
    dict.fromkeys("\u2018\u2019\u201a\u201b\u2032\u02bc\u0060\u00b4", "'")
    | dict.fromkeys("\u201c\u201d\u201e\u201f\u2033\u00ab\u00bb", '"')
)


def normalize_text(text: str, *, fold: bool = True) -> str:
    """The answer text as the scorer reads it (see the module docstring); ``fold=False`` keeps the case."""
    t = unicodedata.normalize("NFKC", text)
    out: list[str] = []
    for ch in unicodedata.normalize("NFKD", t):
        cat = unicodedata.category(ch)
        if cat in {"Mn", "Cf"}:  # combining accents; zero-width and other invisible format characters
            continue
        if cat == "Pd":
            out.append("-")
        elif cat == "Nd":
            out.append(str(unicodedata.digit(ch)))
        elif cat == "Zs":
            out.append(" ")
        else:
            out.append(ch)
    t = unicodedata.normalize("NFC", "".join(out)).translate(_QUOTES)
    return t.casefold() if fold else t


def _name_core(name: str) -> list[str]:
    words = _words(name)
    while words and words[-1] in _LEGAL_SUFFIXES:
        words.pop()
    return words


def _words(text: str) -> list[str]:
    t = normalize_text(text).upper().replace("&", " AND ")
    t = re.sub(r"(?<=\w)'(?=\w)", "", t)  # apostrophes inside a word: MACY'S = MACYS
    return re.sub(r"[^A-Z0-9 ]+", " ", t).split()


def score_answer(text: str, truth: Mapping[str, Any]) -> dict[str, Any]:
    """Score one probe answer against the answer-key row ``truth`` (issuer, ticker, cik, partition_date)."""
    lowered = normalize_text(text)
    cased = normalize_text(text, fold=False)
    real_date = truth["partition_date"]
    if isinstance(real_date, str):
        real_date = dt.date.fromisoformat(real_date)
    date_hit = any(re.search(p, lowered) for p in _date_patterns(real_date))
    year_hit = bool(re.search(rf"(?<![\w]){real_date.year}(?![\w])", lowered))
    issuer_hits: list[str] = []
    core = _name_core(str(truth.get("issuer") or ""))
    if core and re.search(rf"\b{re.escape(' '.join(core))}\b", " ".join(_words(text))):
        issuer_hits.append("name")
    ticker = normalize_text(str(truth.get("ticker") or ""), fold=False)
    if ticker and re.search(rf"(?<![A-Za-z0-9]){re.escape(ticker)}(?![A-Za-z0-9])", cased):
        issuer_hits.append("ticker")
    cik = str(truth.get("cik") or "").lstrip("0")
    if cik and re.search(rf"(?<!\d)0*{re.escape(cik)}(?!\d)", lowered):
        issuer_hits.append("cik")
    return {
        "date_recovered": date_hit,
        "year_only": year_hit and not date_hit,
        "issuer_recovered": bool(issuer_hits),
        "issuer_matched_by": issuer_hits,
    }
