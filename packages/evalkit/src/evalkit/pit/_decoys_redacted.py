"""The redacted arm as served with clones and drawn instants (issue 29, item 6): what hides its issuers.

The redacted arm shows real dates (it tests what an agent knows of issuers, not of dates), so an attacker holding
the record (the main arm: EDGAR's public full index) reads each shown row's form, date and time of day against it,
and a row whose (form, date) or instant is unique in the record names its issuer. Flat padding (the shifted arm's
decoys, :mod:`evalkit.pit._decoys`) does not help here: a decoy on a day the record shows no filing of its form is
known for one, and a decoy copied from another day carries another day's field pattern.

So each real row is shown among **clones**: copies of real rows of its own *signature* (everything a shown row
says once its drawn seconds are taken out: form, filing date, publication date, and for its acceptance and its
dissemination the span a drawn instant stays in, :func:`evalkit.pit._decoys.draw_bounds`: New York date, part of
the day, interval between opening bells). A signature group of ``r`` real rows is shown as ``S`` rows,
``S = max(r + 1, ceil(c * sqrt(r)))`` with ``c = sum over groups of sqrt(r) / (TARGET * rows)``: the sizes that
minimise the clones needed for an attacker who matches the record's filings one to one onto the shown rows of
their group to expect ``TARGET`` of the rows right (a group contributes ``r / S``; the square root is where the
marginal clone buys the most). A clone is a real row of the group under a keyed row key (the release's keyed hash
of ``'clone-'`` + hex of HMAC-SHA256(secret, 'evalkit-decoy/1' NUL 'clone' NUL row_key NUL k), first 12 bytes),
written through the release writer's own :func:`evalkit_core.arm_rows`. The group's real rows are cloned in turn
in an order drawn from the secret.

Then every shown acceptance and dissemination instant, real or clone, is drawn from the secret within its span
(tags ``'tod-redacted'`` and ``'diss-redacted'``: not the shifted arm's ``'tod'``, so a real row's drawn time of day
does not link its two masked copies); a dissemination drawn in the same span as its acceptance is drawn after it.
A real row and its clones are then exchangeable: every field either equal or drawn independently from one
distribution. The arm is ordered by the shown fields (filing date, shown acceptance, row key), never the real ones.

What only the harness holds: which rows are clones (:attr:`Cloned.clones`) and their main-side rows (the real
instants the clocks' entries are computed from: a clone enters when its original does). Same release, same
secret, same window: the same bytes.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import polars as pl

from evalkit.pit._decoys import TEMPLATE_FIELDS, _Columns, _mac, draw_bounds, draw_bounds_of, draw_in  # pyright: ignore[reportPrivateUsage]
from evalkit_core import Calendar, Filing, Release, arm_rows

__all__ = ["CLONE_RULE", "TARGET", "Cloned", "signature", "signatures", "with_clones"]

TARGET = 0.03
CLONE_RULE = (
    "every real row of the redacted arm shown among clones of its signature group (form, filing date, publication "
    "date, and the New York date, part of the day and interval between opening bells of its acceptance and its "
    "dissemination): a group of r real rows shown as max(r + 1, ceil(c * sqrt(r))) rows, c = sum of sqrt(r) over "
    f"groups / ({TARGET} * rows); the group's rows cloned in turn in the order of HMAC-SHA256(secret, "
    "'evalkit-decoy/1' NUL 'clone-order' NUL row_key), under the accession 'clone-' + hex of the first 12 bytes of "
    "HMAC-SHA256(secret, 'evalkit-decoy/1' NUL 'clone' NUL row_key NUL k); every shown acceptance and dissemination "
    "instant drawn within its span (tags 'tod-redacted', 'diss-redacted'; a dissemination in its acceptance's span "
    "after it); rows ordered by filing date, shown acceptance, row key"
)

Signature = tuple[Any, ...]


@attrs.frozen
class Cloned:
    """The redacted arm as served, and what only the harness holds about it."""

    arm: pl.DataFrame  # shown rows: real and clones, instants drawn, in the shown order
    main: pl.DataFrame  # the release's main arm and the clones' main-side rows (real instants: their entries)
    clones: frozenset[str]


def signature(row: Mapping[str, Any], opens: Sequence[dt.datetime]) -> Signature:
    """What a row shows once its drawn seconds are taken out (the same from a real instant and a drawn one)."""

    def span(t: dt.datetime | None) -> tuple[dt.datetime, dt.datetime] | None:
        return None if t is None else draw_bounds(t, opens)

    return (
        row["form"],
        row["partition_date"],
        row["published_at"],
        span(row["acceptance_at"]),
        span(row["disseminated_at"]),
    )


def signatures(frame: pl.DataFrame, opens: Sequence[dt.datetime]) -> list[Signature]:
    """:func:`signature` of every row of ``frame``, in its order (the spans computed over whole columns)."""
    return list(
        zip(
            frame.get_column("form").to_list(),
            frame.get_column("partition_date").to_list(),
            frame.get_column("published_at").to_list(),
            draw_bounds_of(frame.get_column("acceptance_at"), opens),
            draw_bounds_of(frame.get_column("disseminated_at"), opens),
            strict=True,
        )
    )


def group_sizes(counts: Sequence[int]) -> list[int]:
    """How many rows each signature group of ``counts`` real rows is shown as (see the module docstring)."""
    n = sum(counts)
    if not n:
        return []
    c = sum(math.sqrt(r) for r in counts) / (TARGET * n)
    return [max(r + 1, math.ceil(c * math.sqrt(r) - 1e-9)) for r in counts]


def with_clones(release: Release, calendar: Calendar) -> Cloned:
    """The redacted arm of ``release`` (narrowed to the run) served with clones and drawn instants."""
    secret = release.masks.shift_secret
    if secret is None:
        raise ValueError(f"release {release.name} ({release.format}) has no mask secret to draw clones from")
    opens = [s.open for s in calendar.all]
    groups: dict[Signature, list[dict[str, Any]]] = {}
    ordered = release.arm("main").select(TEMPLATE_FIELDS).sort("row_key")
    for sig, row in zip(signatures(ordered, opens), ordered.iter_rows(named=True), strict=True):
        groups.setdefault(sig, []).append(row)
    order = sorted(groups, key=repr)  # a total order over the signatures (some spans are None)
    sizes = group_sizes([len(groups[g]) for g in order])
    main, redacted = release.arm("main"), release.arm("redacted")
    main_side, shown = _Columns(main.schema), _Columns(redacted.schema)  # each clone's rows go straight in
    keys: list[str] = []
    for g, size in zip(order, sizes, strict=True):
        real = sorted(groups[g], key=lambda t: _mac(secret, "clone-order", t["row_key"]))
        for k in range(size - len(real)):
            t = real[k % len(real)]
            h = _mac(secret, "clone", t["row_key"], str(k // len(real)))
            clone = Filing(
                accession="clone-" + h[:12].hex(),
                cik=t["cik"] or "",
                issuer=t["issuer"] or "",
                form=t["form"],
                partition_date=t["partition_date"],
                published_at=t["published_at"],
                acceptance_at=t["acceptance_at"],
                acceptance_real=t["acceptance_at"],
                disseminated_at=t["disseminated_at"],
                flags=("decoy",),
            )
            rows = arm_rows(clone, release.masks)
            keys.append(rows[0]["row_key"])
            main_side.add(rows[0])
            shown.add(rows[1])
    if len(set(keys)) != len(keys) or set(main.get_column("row_key").to_list()).intersection(keys):
        raise ValueError("a clone's row key collides with another row's")  # 80 bits: never expected, never silent
    arm = pl.concat([redacted, shown.frame()], how="vertical")
    arm = _drawn(arm, secret, opens)
    arm = arm.sort(["partition_date", "acceptance_at", "row_key"], nulls_last=True)
    main = pl.concat([main, main_side.frame()], how="vertical")
    return Cloned(arm=arm, main=main, clones=frozenset(keys))


def _drawn(arm: pl.DataFrame, secret: bytes, opens: Sequence[dt.datetime]) -> pl.DataFrame:
    """Every acceptance and dissemination instant drawn within its span (see the module docstring)."""
    keys: list[str] = arm.get_column("row_key").to_list()
    a_spans = draw_bounds_of(arm.get_column("acceptance_at"), opens)
    d_spans = draw_bounds_of(arm.get_column("disseminated_at"), opens)
    acc_out: list[dt.datetime | None] = []
    diss_out: list[dt.datetime | None] = []
    for key, a_span, d_span in zip(keys, a_spans, d_spans, strict=True):
        a2 = draw_in(secret, "tod-redacted", key, *a_span) if a_span is not None else None
        d2 = None
        if d_span is not None:
            lo, hi = d_span
            if a2 is not None and a_span == (lo, hi):
                lo = a2
            d2 = draw_in(secret, "diss-redacted", key, lo, hi)
        acc_out.append(a2)
        diss_out.append(d2)
    return arm.with_columns(
        pl.Series("acceptance_at", acc_out, dtype=arm.schema["acceptance_at"]),
        pl.Series("disseminated_at", diss_out, dtype=arm.schema["disseminated_at"]),
    )
