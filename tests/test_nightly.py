"""Business-day arithmetic the nightly wait uses (pure, no Spark)."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from tally.nightly import business_day_end


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
