"""Decoders against the redacted arm as served with clones and drawn instants (:mod:`evalkit.pit._decoys_redacted`).

The redacted arm shows real dates, so every attacker here holds the record (the main arm of the run: EDGAR's
public full index, or the public synthetic generator) and tries to name the issuer of each shown row. An attacker's
answer is a one-to-one matching of the record's filings onto shown rows (a filing is one row: naming the same
issuer for every row of a group is not naming a row), scored over the real rows as the expected share whose
issuer it names: a group of ``S`` shown rows that the attacker cannot tell apart, holding ``r`` record filings,
gives ``r / S`` rows right in expectation, never ``r``.

- ``date_form_match``: rows grouped by (form, filing date); a uniform one-to-one matching within each group.
- ``signature_match``: rows grouped by everything a shown row says but its drawn seconds (form, dates, and the
  spans of its acceptance and dissemination: :func:`evalkit.pit._decoys_redacted.signature`); uniform within.
- ``instant_match`` / ``dissemination_match``: a shown row whose exact acceptance (dissemination) instant and form
  are one record filing's is matched to it (several shown rows on one instant: a uniform pick).
- ``nearest_instant``: within each signature group, the matching of record filings to shown rows that minimises
  the total distance between real and shown acceptance instants (the drawn times' rule is public).
- ``row_order``: within each signature group, the k-th record filing (by real acceptance, then accession order as
  the index lists it) to the shown row at the same quantile of the arm's order (what the order would leak if it
  followed the real instants).

All of it is a pure function of the release, the served arm and the answer key.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Sequence
from typing import Any

import polars as pl

from evalkit.pit._decoys_redacted import Signature, signatures

__all__ = ["redacted_attacks"]


_SIG = "\x00signature"  # a row dict's own signature (no column has this name)

def redacted_attacks(
    arm: pl.DataFrame, main: pl.DataFrame, truth: pl.DataFrame, opens: Sequence[dt.datetime]
) -> list[tuple[str, float]]:
    """Each attacker's name and its expected count of real rows whose issuer it names (module docstring)."""
    issuer_of: dict[str, str] = dict(truth.select("row_key", "issuer").iter_rows())
    shown_frame = arm.select("row_key", "form", "partition_date", "published_at", "acceptance_at", "disseminated_at")
    record_frame = main.select("form", "partition_date", "published_at", "acceptance_at", "disseminated_at", "issuer")
    shown = list(shown_frame.iter_rows(named=True))
    record = list(record_frame.iter_rows(named=True))
    # every row's signature, computed once over whole columns (the attackers below group by it)
    for rows, frame in ((shown, shown_frame), (record, record_frame)):
        for r, sig in zip(rows, signatures(frame, opens), strict=True):
            r[_SIG] = sig
    out: list[tuple[str, float]] = []

    def by_date(r: dict[str, Any]) -> Any:
        return (r["form"], r["partition_date"])

    def by_sig(r: dict[str, Any]) -> Any:
        return r[_SIG]

    groups = _groups(shown, record)
    out.append(("date_form_match", _uniform(shown, record, issuer_of, by_date)))
    out.append(("signature_match", _uniform(shown, record, issuer_of, by_sig)))
    out.append(("instant_match", _exact(shown, record, issuer_of, "acceptance_at")))
    out.append(("dissemination_match", _exact(shown, record, issuer_of, "disseminated_at")))
    out.append(("nearest_instant", _nearest(groups, issuer_of)))
    out.append(("row_order", _by_order(groups, issuer_of)))
    return out


def _uniform(shown: list[dict[str, Any]], record: list[dict[str, Any]], issuer_of: dict[str, str], key: Any) -> float:
    """A uniform one-to-one matching within each group: a real row gets its issuer with probability (the record
    filings of its issuer in the group) / (shown rows in the group)."""
    sizes: Counter[Any] = Counter(key(r) for r in shown)
    filed: dict[Any, Counter[str]] = {}
    for r in record:
        filed.setdefault(key(r), Counter())[r["issuer"]] += 1
    total = 0.0
    for r in shown:
        who = issuer_of.get(r["row_key"])
        if who is not None:
            total += filed.get(key(r), Counter())[who] / sizes[key(r)]
    return total


def _exact(shown: list[dict[str, Any]], record: list[dict[str, Any]], issuer_of: dict[str, str], col: str) -> float:
    """A record filing unique in its (form, instant) to a uniform pick among the shown rows showing it."""
    counts: Counter[tuple[str, dt.datetime]] = Counter((r["form"], r[col]) for r in record if r[col] is not None)
    unique = {(r["form"], r[col]): r["issuer"] for r in record if r[col] is not None and counts[r["form"], r[col]] == 1}
    showing: Counter[tuple[str, dt.datetime]] = Counter((r["form"], r[col]) for r in shown if r[col] is not None)
    total = 0.0
    for r in shown:
        at = (r["form"], r[col])
        who = issuer_of.get(r["row_key"])
        if who is not None and r[col] is not None and unique.get(at) == who:
            total += 1 / showing[at]
    return total


_Groups = dict[Signature, tuple[list[dict[str, Any]], list[dict[str, Any]]]]


def _groups(shown: list[dict[str, Any]], record: list[dict[str, Any]]) -> _Groups:
    out: _Groups = {}
    for r in shown:
        out.setdefault(r[_SIG], ([], []))[0].append(r)
    for r in record:
        out.setdefault(r[_SIG], ([], []))[1].append(r)
    return out


def _nearest(groups: _Groups, issuer_of: dict[str, str]) -> float:
    """Per signature group with acceptance instants: the least-total-distance one-to-one matching (in one
    dimension an order-keeping one is optimal: a dynamic programme over both sorted lists)."""
    total = 0.0
    for sig, (rows, filed) in groups.items():
        if sig[3] is None or not rows or not filed:
            continue
        a = sorted(filed, key=lambda r: r["acceptance_at"])
        b = sorted(rows, key=lambda r: (r["acceptance_at"], r["row_key"]))
        for i, j in _match_1d([r["acceptance_at"].timestamp() for r in a], [r["acceptance_at"].timestamp() for r in b]):
            total += issuer_of.get(b[j]["row_key"]) == a[i]["issuer"]
    return total


def _match_1d(a: Sequence[float], b: Sequence[float]) -> list[tuple[int, int]]:
    """The order-keeping matching of every ``a`` (or every ``b``, the shorter) to the other of least total
    distance."""
    if len(a) > len(b):
        return [(i, j) for j, i in _match_1d(b, a)]
    n, m = len(a), len(b)
    inf = float("inf")
    cost = [[inf] * (m + 1) for _ in range(n + 1)]
    cost[0] = [0.0] * (m + 1)
    for i in range(1, n + 1):
        row, prev = cost[i], cost[i - 1]
        for j in range(i, m + 1):
            row[j] = min(row[j - 1], prev[j - 1] + abs(a[i - 1] - b[j - 1]))
    pairs: list[tuple[int, int]] = []
    i, j = n, m
    while i > 0:
        if cost[i][j] == cost[i][j - 1] and j > i:
            j -= 1
        else:
            pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
    return pairs


def _by_order(groups: _Groups, issuer_of: dict[str, str]) -> float:
    """Per signature group: the k-th of r record filings (real order) to the shown row at quantile (k + 1/2) / r of
    the group's rows in the arm's order."""
    total = 0.0
    for rows, filed in groups.values():
        if not rows or not filed:
            continue
        real = sorted(filed, key=lambda r: (r["acceptance_at"] is None, r["acceptance_at"] or dt.datetime.min.replace(tzinfo=dt.UTC)))
        for k, f in enumerate(real):
            j = min(len(rows) - 1, int((k + 0.5) * len(rows) / len(real)))
            total += issuer_of.get(rows[j]["row_key"]) == f["issuer"]
    return total
