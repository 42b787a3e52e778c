"""Acceptance stamps checked against the filing date: flags, the 22:00 cut-off and dissemination."""

from __future__ import annotations

import datetime as dt

import pytest

from evalkit_core.edgar import check_acceptance, expected_filing_date

UTC = dt.UTC


def t(s: str) -> dt.datetime:
    return dt.datetime.fromisoformat(s).replace(tzinfo=UTC)


def test_intraday_stamp_is_served_without_dissemination():
    c = check_acceptance("8-K", "0000320193-23-000001", dt.date(2023, 2, 2), "2023-02-02T21:00:00.000Z")
    assert (c.served, c.real, c.disseminated_at, c.flags) == (
        t("2023-02-02T21:00:00"),
        t("2023-02-02T21:00:00"),
        None,
        (),
    )


def test_after_hours_stamp_is_disseminated_next_business_day_0600_new_york():
    # Apple's 10-Q: accepted 18:01:30 New York on 2023-02-02, filing date 2023-02-03.
    c = check_acceptance("10-Q", "0000320193-23-000006", dt.date(2023, 2, 3), "2023-02-02T23:01:30.000Z")
    assert c.flags == ()
    assert c.served == t("2023-02-02T23:01:30")
    assert c.disseminated_at == t("2023-02-03T11:00:00")  # 06:00 EST


def test_veterans_day_is_skipped_by_the_filing_date_and_dissemination():
    # Thursday 2022-11-10 18:00 New York; Friday 11-11 is a federal holiday (NYSE open): filed Monday 11-14.
    c = check_acceptance("8-K", "0000000001-22-000001", dt.date(2022, 11, 14), "2022-11-10T23:00:00Z")
    assert c.flags == ()
    assert c.disseminated_at == t("2022-11-14T11:00:00")


def test_form_4_until_2200_keeps_its_day_but_is_disseminated_conservatively():
    c = check_acceptance(
        "4", "0001209191-22-061074", dt.date(2022, 12, 13), "2022-12-14T00:21:04.000Z"
    )  # 19:21 NY
    assert c.flags == ()
    assert c.served is not None
    # after 17:30 New York: public at 06:00 New York on the next SEC business day (the later, safer time)
    assert c.disseminated_at == dt.datetime(2022, 12, 14, 11, 0, tzinfo=dt.UTC)
    assert c.extended_cutoff
    # The same stamp on an 8-K would have been filed the next day: dated the same day, it is flagged.
    c8 = check_acceptance("8-K", "0001209191-22-061074", dt.date(2022, 12, 13), "2022-12-14T00:21:04.000Z")
    assert c8.flags == ("accepted_after_cutoff_same_day",)
    assert c8.served is None
    assert c8.real == t("2022-12-14T00:21:04")


def test_form_4_after_2200_rolls_to_next_day():
    assert expected_filing_date("4", t("2022-12-14T03:30:00")) == dt.date(2022, 12, 14)  # 22:30 NY on 12-13


def test_form_144_extension_starts_2023_03_20():
    late = "T22:00:00Z"  # 18:00 New York (EDT)
    assert expected_filing_date("144", t("2023-03-17" + late[:-1])) == dt.date(2023, 3, 20)
    assert expected_filing_date("144", t("2023-03-20" + late[:-1])) == dt.date(2023, 3, 20)


def test_stamp_that_fits_only_as_new_york_time_is_flagged():
    # Intel's 10-K: 13:31 New York on 01-26 would be filed 01-26; as if the digits were New York time,
    # 18:31 -> 01-27, the filing date EDGAR shows.
    c = check_acceptance("10-K", "0000050863-23-000006", dt.date(2023, 1, 27), "2023-01-26T18:31:20.000Z")
    assert c.flags == ("stamp_reads_as_new_york",)
    assert c.served is None
    assert c.real == t("2023-01-26T18:31:20")
    assert c.disseminated_at is None


def test_stamp_before_filing_date_without_a_new_york_explanation():
    c = check_acceptance("8-K", "0000000001-23-000001", dt.date(2023, 1, 27), "2023-01-20T15:00:00Z")
    assert c.flags == ("stamp_before_filing_date",)


def test_stamp_after_filing_date():
    c = check_acceptance("8-K", "0000000001-23-000001", dt.date(2023, 1, 20), "2023-01-25T15:00:00Z")
    assert c.flags == ("stamp_after_filing_date",)


@pytest.mark.parametrize(
    ("form", "accession"),
    [
        ("EFFECT", "9999999995-23-000679"),
        ("UPLOAD", "0000000000-23-000901"),
        ("NO ACT", "0000000001-23-000001"),
    ],
)
def test_sec_generated_forms_are_always_flagged(form: str, accession: str):
    # Even a stamp that would agree with the filing date is not a filer's acceptance.
    c = check_acceptance(form, accession, dt.date(2023, 3, 27), "2023-03-27T15:00:00Z")
    assert c.flags == ("sec_generated_form",)
    assert c.served is None
    assert c.real == t("2023-03-27T15:00:00")


def test_missing_and_unparseable_stamps():
    assert check_acceptance("8-K", "0000000001-23-000001", dt.date(2023, 1, 20), None).served is None
    assert check_acceptance("8-K", "0000000001-23-000001", dt.date(2023, 1, 20), "").flags == ()
    bad = check_acceptance("8-K", "0000000001-23-000001", dt.date(2023, 1, 20), "yesterday")
    assert bad.flags == ("stamp_unparseable",)
    assert bad.real is None
