"""Checking an acceptance stamp against the filing date EDGAR gave the filing.

The base rule is :func:`evalkit_core._edgar_rules.filing_date_for` (after 17:30 New York time, or on a day that
is not an SEC business day, the filing gets the next SEC business day's date). Two refinements that the real
data needs, kept here so the shared rule stays the one the synthetic generator uses:

- **The 22:00 cut-off.** Regulation S-T Rule 13(a)(3)-(4) lets some forms be submitted until 22:00 New York
  time and still be filed that day: Forms 3, 4 and 5 (Section 16 reports), Rule 462(b) registration
  statements (the ``*MEF`` forms and ``POS 462B``), Schedule 14N, Form 144 (from 2023-03-20) and, after the
  2023 beneficial-ownership amendments, Schedules 13D and 13G. Such a filing accepted between 17:30 and 22:00
  keeps that day's filing date, so its stamp is not flagged. (On the 2022-11..2023-03 sample, over 400 Form 4
  rows are of this kind.) Its ``disseminated_at`` still follows the issue's conservative rule: accepted after
  17:30 New York time, public at 06:00 on the next SEC business day. EDGAR may publish such filings the same
  evening; taking the later time can only delay a pit entry, never let one trade early.
- **SEC-generated forms** (EFFECT, NO ACT, UPLOAD, ...) are written by the staff, not accepted from a filer;
  their stamps fit neither the UTC nor the New York reading of the rule, so they are always flagged.

A stamp that contradicts its filing date is flagged with one reason code; the arms then serve no
``acceptance_at`` (the pit clock falls back to the dump rule) while the answer key keeps the stamp.
"""

from __future__ import annotations

import datetime as dt

import attrs

from evalkit_core._calendar import is_sec_business_day
from evalkit_core._edgar_rules import NEW_YORK, disseminated_at_for, filing_date_for
from evalkit_core._release import parse_instant

__all__ = [
    "EXTENDED_CUTOFF",
    "EXTENDED_CUTOFF_FORMS",
    "FLAG_REASONS",
    "SEC_GENERATED_FORMS",
    "AcceptanceCheck",
    "check_acceptance",
    "expected_filing_date",
    "is_sec_generated",
]

EXTENDED_CUTOFF = dt.time(22, 0)
_ALWAYS = dt.date(1993, 1, 1)

# Form type -> first day the 22:00 cut-off applied to it.
EXTENDED_CUTOFF_FORMS: dict[str, dt.date] = {
    **dict.fromkeys(("3", "3/A", "4", "4/A", "5", "5/A"), _ALWAYS),
    **dict.fromkeys(
        (
            "F-1MEF",
            "F-3MEF",
            "F-4MEF",
            "N-14MEF",
            "N-2MEF",
            "POS 462B",
            "S-11MEF",
            "S-1MEF",
            "S-3MEF",
            "S-4MEF",
            "S-BMEF",
            "SC 14N",
            "SC 14N/A",
        ),
        _ALWAYS,
    ),
    "144": dt.date(2023, 3, 20),
    "144/A": dt.date(2023, 3, 20),
    # Assumed from the 2023 Regulation 13D-G amendments (structured Schedules 13D/G on EDGAR, December 2024).
    # Before this date a late same-day schedule is flagged, which only ever makes the pit clock more cautious.
    **{
        f: dt.date(2024, 12, 18)
        for f in (
            "SC 13D",
            "SC 13D/A",
            "SC 13G",
            "SC 13G/A",
            "SCHEDULE 13D",
            "SCHEDULE 13D/A",
            "SCHEDULE 13G",
            "SCHEDULE 13G/A",
        )
    },
}

SEC_GENERATED_FORMS: frozenset[str] = frozenset(
    {"CT ORDER", "EFFECT", "NO ACT", "SEC ACTION", "SEC STAFF ACTION", "SEC STAFF LETTER", "UPLOAD"}
)
# Accession prefixes (the submitting "filer agent" CIK) that EDGAR uses for documents the SEC itself posts.
_SEC_ACCESSION_PREFIXES = ("9999999995-", "9999999996-", "9999999997-", "0000000000-")

FLAG_REASONS: dict[str, str] = {
    "sec_generated_form": "an SEC-generated form (EFFECT, NO ACT, UPLOAD, ...): its stamp is not a filer's acceptance",
    "stamp_reads_as_new_york": "the stamp fits the filing date only if its 'Z' were New York time (it may be hours early)",
    "stamp_before_filing_date": "under the UTC reading the stamp belongs to an earlier filing date",
    "accepted_after_cutoff_same_day": "accepted after the form's cut-off yet dated that same day",
    "stamp_after_filing_date": "under the UTC reading the stamp belongs to a later filing date",
    "stamp_unparseable": "acceptanceDateTime is not an ISO 8601 instant",
}


@attrs.frozen
class AcceptanceCheck:
    """What the builder makes of one filing's acceptance stamp.

    ``served`` goes to the arms (None when flagged or absent), ``real`` to the answer key, ``disseminated_at``
    is set when the filing was accepted after its cut-off (public at 06:00 New York the next SEC business day).
    """

    served: dt.datetime | None
    real: dt.datetime | None
    disseminated_at: dt.datetime | None
    flags: tuple[str, ...] = ()
    extended_cutoff: bool = False  # accepted 17:30-22:00 and dated that day under the 22:00 cut-off


def is_sec_generated(form: str, accession: str) -> bool:
    return form in SEC_GENERATED_FORMS or accession.startswith(_SEC_ACCESSION_PREFIXES)


def _extended(form: str, day: dt.date) -> bool:
    since = EXTENDED_CUTOFF_FORMS.get(form)
    return since is not None and day >= since


def expected_filing_date(form: str, accepted: dt.datetime) -> dt.date:
    """The filing date EDGAR gives ``form`` accepted at ``accepted``, with the 22:00 cut-off where it applies."""
    local = accepted.astimezone(NEW_YORK)
    day = local.date()
    if _extended(form, day) and is_sec_business_day(day) and local.time() <= EXTENDED_CUTOFF:
        return day
    return filing_date_for(accepted)


_NO_STAMP = AcceptanceCheck(served=None, real=None, disseminated_at=None)


def check_acceptance(form: str, accession: str, filing_date: dt.date, stamp: str | None) -> AcceptanceCheck:
    """Check ``stamp`` (EDGAR's acceptanceDateTime, read as UTC) against ``filing_date``."""
    if not stamp:
        return _NO_STAMP
    try:
        accepted = parse_instant(stamp)
    except ValueError:
        return AcceptanceCheck(served=None, real=None, disseminated_at=None, flags=("stamp_unparseable",))
    if is_sec_generated(form, accession):
        return AcceptanceCheck(
            served=None, real=accepted, disseminated_at=None, flags=("sec_generated_form",)
        )
    expected = expected_filing_date(form, accepted)
    if expected == filing_date:
        local_day = accepted.astimezone(NEW_YORK).date()
        if expected == local_day:
            late_same_day = accepted.astimezone(NEW_YORK).time() > dt.time(17, 30)
            return AcceptanceCheck(
                served=accepted,
                real=accepted,
                disseminated_at=disseminated_at_for(accepted),
                extended_cutoff=late_same_day,
            )
        return AcceptanceCheck(served=accepted, real=accepted, disseminated_at=disseminated_at_for(accepted))
    as_new_york = accepted.replace(tzinfo=NEW_YORK)
    if expected < filing_date and expected_filing_date(form, as_new_york) == filing_date:
        reason = "stamp_reads_as_new_york"
    elif expected < filing_date:
        reason = "stamp_before_filing_date"
    elif accepted.astimezone(NEW_YORK).date() == filing_date:
        reason = "accepted_after_cutoff_same_day"
    else:
        reason = "stamp_after_filing_date"
    return AcceptanceCheck(served=None, real=accepted, disseminated_at=None, flags=(reason,))
