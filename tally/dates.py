"""Time on the ground floor: epoch milliseconds and business dates, one definition each.

A business date is a calendar date in `report_timezone`; its bounds are the two local midnights
as UTC epoch milliseconds (a day can last 23 or 25 hours). A window belongs to the business date
on which its *start* falls, so a window that straddles midnight belongs to the earlier date.
Pure stdlib, cheap to import (Airflow DAG files import it at parse time); the Column helpers
import pyspark when they are called.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

if TYPE_CHECKING:
    from pyspark.sql import Column

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")

DayBounds = tuple[int, int]  # [start, end) of a business date, UTC epoch ms


def epoch_ms(value: datetime) -> int:
    """A zone-aware datetime as epoch milliseconds (exact, floor for sub-ms parts)."""
    if value.tzinfo is None:
        raise ValueError(f"{value!r} has no time zone")
    return (value - EPOCH) // timedelta(milliseconds=1)


def from_epoch_ms(ms: int) -> datetime:
    """Epoch milliseconds as a UTC datetime (exact, also before 1970)."""
    return EPOCH + timedelta(milliseconds=ms)


def iso_ms(ms: int | None) -> str:
    """`2026-11-20T10:00:00.000Z`, or `none`."""
    if ms is None:
        return "none"
    return from_epoch_ms(ms).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def parse_business_date(text: str) -> date:
    """`YYYY-MM-DD` -> date; ValueError with a one-line message otherwise."""
    try:
        if not _ISO_DATE.match(text):
            raise ValueError
        return date.fromisoformat(text)
    except ValueError:
        raise ValueError(f"date: expected YYYY-MM-DD, got {text!r}") from None


def business_day_start(business_date: date, report_timezone: str = "UTC") -> datetime:
    """Local midnight starting the date, as a UTC datetime."""
    local = datetime.combine(business_date, time(0), ZoneInfo(report_timezone))
    return local.astimezone(UTC)


def business_day_end(business_date: date, report_timezone: str = "UTC") -> datetime:
    """Local midnight ending the date (exclusive), as a UTC datetime."""
    return business_day_start(business_date + timedelta(days=1), report_timezone)


def window_reach_ms(window_ms: int, session_gap_ms: int = 0) -> int:
    """How far past a date's end its windows reach. Fixed windows: one window (a window
    belongs to the date its start falls on, so the last one ends up to one window after
    midnight). Sessions: a session of the date whose events all fall on it ends by midnight +
    D, and an event still counted can touch it until the watermark passes its end + D + G
    (docs/semantics.md, "Session windows", eviction): 2D + G, the G counted by the caller."""
    return 2 * session_gap_ms if session_gap_ms else window_ms


def business_day_bounds(business_date: date, report_timezone: str = "UTC") -> DayBounds:
    """`[start, end)` of the date in `report_timezone`, as UTC epoch milliseconds."""
    return (
        epoch_ms(business_day_start(business_date, report_timezone)),
        epoch_ms(business_day_end(business_date, report_timezone)),
    )


def business_date_of(moment: datetime, report_timezone: str = "UTC") -> date:
    """The business date a zone-aware moment falls on (e.g. a DAG run's interval start)."""
    if moment.tzinfo is None:
        raise ValueError(f"{moment!r} has no time zone")
    return moment.astimezone(ZoneInfo(report_timezone)).date()


def plain_utc(value: datetime) -> datetime:
    """A stdlib UTC datetime: Airflow hands out pendulum ones, which do not mix with stdlib
    timedelta arithmetic everywhere."""
    if value.tzinfo is None:
        raise ValueError(f"{value!r} has no time zone")
    utc = value.astimezone(UTC)
    return datetime(
        utc.year, utc.month, utc.day, utc.hour, utc.minute, utc.second, utc.microsecond, UTC
    )


def window_event_times(bounds: DayBounds, window_ms: int) -> tuple[int, int]:
    """The event times (epoch ms, [start, end)) an event can have if one of its windows of
    `window_ms` (tumbling or hopping) starts within the day: a window starting before the
    day's end ends before `end + window_ms`."""
    return bounds[0], bounds[1] + window_ms


def utc_dates_of(bounds: DayBounds, window_ms: int) -> tuple[date, date]:
    """The UTC dates of `window_event_times`: exactly the `event_date` partitions holding the
    events of the day's windows (the stream's `event_date` is the UTC date of `event_time`,
    its session running in UTC; the index of event ids, `batch.firsts`, relies on it)."""
    start, end = window_event_times(bounds, window_ms)
    return from_epoch_ms(start).date(), from_epoch_ms(end - 1).date()


def utc_dates_touching(bounds: DayBounds, window_ms: int) -> tuple[date, date]:
    """The UTC calendar dates (`event_date` partitions) that can hold events of the day's
    windows, with a day of slack either side so pruning never depends on a time zone."""
    first = from_epoch_ms(bounds[0]).date() - timedelta(days=1)
    last = from_epoch_ms(bounds[1] + window_ms).date() + timedelta(days=1)
    return first, last


def in_day(bounds: DayBounds, column: str) -> Column:
    """A timestamp column falls within the business date: `start <= column < end`."""
    from pyspark.sql import functions as F

    start, end = bounds
    return (F.col(column) >= F.timestamp_millis(F.lit(start))) & (
        F.col(column) < F.timestamp_millis(F.lit(end))
    )


def window_in_day(bounds: DayBounds, column: str = "window_start") -> Column:
    """The rule "this window belongs to this business date": its start falls within it."""
    return in_day(bounds, column)


def carried_day(bounds: DayBounds) -> Column:
    """The rule "this `stream_progress` row (micro-batch) carried the business date": its
    watermark moved across the day (after >= start, before < end) or had none yet."""
    from pyspark.sql import functions as F

    start, end = bounds
    return (
        F.col("watermark_after").isNull() | (F.unix_millis("watermark_after") >= F.lit(start))
    ) & (F.col("watermark_before").isNull() | (F.unix_millis("watermark_before") < F.lit(end)))


def window_reach_back_ms(
    window_ms: int, slide_ms: int | None = None, session_gap_ms: int = 0
) -> int:
    """How long before the start of an event's latest window (its event time, for sessions)
    the earliest window that can hold the event starts: 0 for tumbling windows, size - slide
    for hopping ones, 2 gaps for sessions (as `window_reach_ms` bounds a date's sessions)."""
    if session_gap_ms:
        return 2 * session_gap_ms
    return window_ms - (slide_ms or window_ms)


def counted_dates(
    latest_start_ms: int, reach_back_ms: int, report_timezone: str = "UTC"
) -> tuple[date, date]:
    """The first and last business date whose windows can hold an event whose latest window
    starts at `latest_start_ms` (`window_reach_back_ms`): the dates of its windows' starts."""
    zone = ZoneInfo(report_timezone)
    first = from_epoch_ms(latest_start_ms - reach_back_ms).astimezone(zone).date()
    return first, from_epoch_ms(latest_start_ms).astimezone(zone).date()


def counted_dates_columns(
    reach_back_ms: int, report_timezone: str = "UTC"
) -> tuple[Column, Column]:
    """`counted_dates` as Columns over a row's `window_start` (the Spark session in UTC)."""
    from pyspark.sql import functions as F

    def local_date(ms: Column) -> Column:
        return F.to_date(F.from_utc_timestamp(F.timestamp_millis(ms), report_timezone))

    start = F.unix_millis("window_start")
    return local_date(start - F.lit(reach_back_ms)), local_date(start)
