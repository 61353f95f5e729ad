"""Business dates and epoch milliseconds: the ground floor's time rules (pure, no Spark)."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from tally.dates import (
    business_date_of,
    business_day_bounds,
    business_day_end,
    epoch_ms,
    iso_ms,
    parse_business_date,
    plain_utc,
    utc_dates_of,
    utc_dates_touching,
)


@pytest.mark.parametrize(
    ("zone", "end"),
    [
        ("UTC", datetime(2026, 11, 21, tzinfo=UTC)),  # midnight UTC after the day
        ("Asia/Kolkata", datetime(2026, 11, 20, 18, 30, tzinfo=UTC)),  # +05:30 closes earlier
        ("America/New_York", datetime(2026, 11, 21, 5, tzinfo=UTC)),  # -05:00 in November
    ],
)
def test_business_day_end(zone: str, end: datetime) -> None:
    assert business_day_end(date(2026, 11, 20), zone) == end


def test_business_day_end_across_dst_change() -> None:
    # New York leaves daylight time on 2026-11-01: that day has 25 hours.
    start = business_day_end(date(2026, 10, 31), "America/New_York")
    end = business_day_end(date(2026, 11, 1), "America/New_York")
    assert (end - start).total_seconds() == 25 * 3600


@pytest.mark.parametrize(
    ("zone", "hours"),
    [
        ("UTC", 24),
        ("Asia/Kolkata", 24),  # a half-hour offset moves both ends, not the length
        ("Europe/Berlin", 24),  # 2026-11-20 is no DST change day
    ],
)
def test_business_day_bounds_are_the_local_midnights(zone: str, hours: int) -> None:
    start, end = business_day_bounds(date(2026, 11, 20), zone)
    assert end - start == hours * 3_600_000
    assert end == epoch_ms(business_day_end(date(2026, 11, 20), zone))


@pytest.mark.parametrize(
    ("moment", "zone", "day"),
    [
        (datetime(2026, 11, 20, 23, 59, tzinfo=UTC), "UTC", date(2026, 11, 20)),
        # 23:59Z on the 20th is 05:29 on the 21st in India
        (datetime(2026, 11, 20, 23, 59, tzinfo=UTC), "Asia/Kolkata", date(2026, 11, 21)),
        (datetime(2026, 11, 20, 3, 0, tzinfo=UTC), "America/New_York", date(2026, 11, 19)),
    ],
)
def test_business_date_of(moment: datetime, zone: str, day: date) -> None:
    assert business_date_of(moment, zone) == day


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "1970-01-01T00:00:00.000Z"),
        (1_763_600_000_123, "2025-11-20T00:53:20.123Z"),
        (-1, "1969-12-31T23:59:59.999Z"),  # before the epoch: floor, not truncation
        (None, "none"),
    ],
)
def test_iso_ms(ms: int | None, text: str) -> None:
    assert iso_ms(ms) == text


def test_utc_dates_touching_has_a_day_of_slack_and_covers_the_last_window() -> None:
    bounds = business_day_bounds(date(2026, 11, 20), "Asia/Kolkata")
    # the day's last window can end a window after local midnight (18:30Z on the 20th)
    assert utc_dates_touching(bounds, 7 * 60_000) == (date(2026, 11, 18), date(2026, 11, 21))


@pytest.mark.parametrize(
    ("zone", "window_ms", "dates"),
    [
        # zone, window, the event_date partitions of the day's windows' events; why
        ("UTC", 60_000, (date(2026, 11, 20), date(2026, 11, 21))),  # the last window's reach
        ("UTC", 0, (date(2026, 11, 20), date(2026, 11, 20))),  # no reach: the day itself
        ("Asia/Kolkata", 60_000, (date(2026, 11, 19), date(2026, 11, 20))),  # 18:30Z to 18:31Z
        ("America/New_York", 3_600_000, (date(2026, 11, 20), date(2026, 11, 21))),  # 05Z to 06Z
    ],
)
def test_utc_dates_of_are_exactly_the_dates_of_the_windows_events(zone, window_ms, dates) -> None:
    assert utc_dates_of(business_day_bounds(date(2026, 11, 20), zone), window_ms) == dates


@pytest.mark.parametrize("text", ["20-11-2026", "2026-13-01", "2026-11-20T00:00", "", "20261120"])
def test_parse_business_date_rejects(text: str) -> None:
    with pytest.raises(ValueError, match=r"^date: expected YYYY-MM-DD"):
        parse_business_date(text)


def test_naive_datetimes_are_refused() -> None:
    naive = datetime(2026, 11, 20)  # noqa: DTZ001 - the point of the test
    for convert in (epoch_ms, plain_utc, business_date_of):
        with pytest.raises(ValueError, match="no time zone"):
            convert(naive)
