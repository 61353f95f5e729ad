"""Open items (tally.open_items): how each sign-off step moves a date's item, its age and
bucket, and when its aging alert is due. Pure rules, table-tested."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tally.open_items import (
    ASKED,
    OPERATORS,
    Step,
    age_days,
    bucket_counts,
    bucket_of,
    due_alert,
    item_after,
    latest_items,
)

T0 = datetime(2026, 11, 21, 0, 40, tzinfo=UTC)
LATER = T0 + timedelta(hours=3)


def step(decision: str, **extra: Any) -> Step:
    fields: dict[str, Any] = {"by": "ana", "at": LATER, "preparers": "ana, ben", "approvers": "cy"}
    fields.update(extra)
    return Step(decision, **fields)


OPEN_UNEXPLAINED = {
    "status": "open",
    "kind": "unexplained",
    "owner": "ana, ben",
    "opened_at": T0,
    "changed_at": T0,
    "alerted_periods": 1,
}


@pytest.mark.parametrize(
    ("previous", "the_step", "expected"),
    [
        # asked about a date with no item: it opens now, the preparers must act
        (None, step(ASKED, kind="unexplained"), {"status": "open", "owner": "ana, ben"}),
        # asked again with the same status: nothing changes, no row
        (OPEN_UNEXPLAINED, step(ASKED, kind="unexplained"), None),
        # prepared: still open, the approvers must act; it keeps its age and alerts
        (
            OPEN_UNEXPLAINED,
            step("prepared"),
            {"kind": "awaiting_approval", "owner": "cy", "opened_at": T0, "alerted_periods": 1},
        ),
        # sent back: the preparers again
        (OPEN_UNEXPLAINED, step("sent_back", step="approve"), {"kind": "sent_back"}),
        # rejected: it stays open until someone fixes the cause and re-runs
        (OPEN_UNEXPLAINED, step("rejected"), {"kind": "rejected", "owner": OPERATORS}),
        # an approval that timed out waits on the approvers, a preparation on the preparers
        (OPEN_UNEXPLAINED, step("timed_out", step="approve"), {"owner": "cy"}),
        (OPEN_UNEXPLAINED, step("timed_out", step="prepare"), {"owner": "ana, ben"}),
        # accepted: closed, the reason its resolution, nobody owns it
        (
            OPEN_UNEXPLAINED,
            step("accepted", reason="ticket 9"),
            {"status": "accepted", "resolution": "ticket 9", "resolved_by": "ana", "owner": None},
        ),
        # a re-run that signed the date off by itself resolves it
        (OPEN_UNEXPLAINED, step("auto", by="tally"), {"status": "resolved", "resolved_by": None}),
        # a balanced date never opens an item
        (None, step("auto", by="tally"), None),
        # a refused self-approval changes nothing (signoffs records it)
        (OPEN_UNEXPLAINED, step("self_approval_refused"), None),
        # asked again after it was accepted (a restated run): a new item, opened now
        (
            {**OPEN_UNEXPLAINED, "status": "accepted"},
            step(ASKED, kind="unexplained_warn"),
            {"status": "open", "kind": "unexplained_warn", "opened_at": LATER},
        ),
    ],
)
def test_item_after(previous: Any, the_step: Step, expected: dict[str, Any] | None) -> None:
    item = item_after(previous, the_step)
    if expected is None:
        assert item is None
        return
    assert item is not None
    assert {k: item[k] for k in expected} == expected
    assert item["changed_at"] == LATER


def test_an_unknown_decision_is_an_error() -> None:
    with pytest.raises(ValueError, match="no rule"):
        item_after(OPEN_UNEXPLAINED, step("maybe"))


@pytest.mark.parametrize(
    ("hours", "age", "bucket"),
    [
        (0, 0, "0-1"),  # just opened
        (47, 1, "0-1"),  # a whole day, not two
        (48, 2, "2-7"),
        (7 * 24 + 23, 7, "2-7"),
        (8 * 24, 8, "8-30"),
        (30 * 24 + 23, 30, "8-30"),
        (31 * 24, 31, ">30"),  # over a month
    ],
)
def test_age_and_bucket(hours: int, age: int, bucket: str) -> None:
    assert age_days(T0, T0 + timedelta(hours=hours)) == age
    assert bucket_of(age) == bucket


def test_bucket_counts_count_open_items_only() -> None:
    items = [
        {"status": "open", "age_days": 0},
        {"status": "open", "age_days": 9},
        {"status": "accepted", "age_days": 40},
    ]
    assert bucket_counts(items) == {"0-1": 1, "2-7": 0, "8-30": 1, ">30": 0}


WEEK_MS = 7 * 86_400_000


@pytest.mark.parametrize(
    ("days_open", "alerted", "status", "due"),
    [
        (6, 0, "open", None),  # not yet aging_max old
        (7, 0, "open", 1),  # passed it: the first alert
        (8, 1, "open", None),  # alerted for this period already
        (14, 1, "open", 2),  # another period: alerted again
        (30, 0, "open", 4),  # missed checks: one alert, for the period it is in
        (30, 0, "accepted", None),  # closed items never alert
    ],
)
def test_due_alert(days_open: int, alerted: int, status: str, due: int | None) -> None:
    item = {"status": status, "opened_at": T0, "alerted_periods": alerted}
    assert due_alert(item, T0 + timedelta(days=days_open), WEEK_MS) == due


def test_latest_items_take_each_dates_newest_change() -> None:
    day = T0.date()
    rows = [
        {"business_date": day, "changed_at": LATER, "status": "accepted"},
        {"business_date": day, "changed_at": T0, "status": "open"},
    ]
    assert latest_items(rows)[day]["status"] == "accepted"


def test_aging_alerts_fire_once_a_period_and_are_recorded(spark: Any, tmp_path: Any) -> None:
    """A real `open_items` table: an item open 8 days alerts once (a warning), not again the
    same period; 15 days in, again (an error); an accepted item never."""
    from tally.settings import Settings
    from tally_app.open_items import aging_alerts, open_items_of
    from tally_app.signoffs import record_asked, record_item

    warehouse = str(tmp_path / "warehouse")
    settings = Settings(warehouse=warehouse, aging_max=WEEK_MS)
    day, closed = T0.date(), (T0 - timedelta(days=1)).date()
    record_asked(spark, warehouse, day, "unexplained", T0, None, ("ana", "ben"))
    record_asked(spark, warehouse, closed, "unexplained", T0, None, ("ana", "ben"))
    record_item(spark, warehouse, closed, step("accepted", reason="ticket 1"))

    first = aging_alerts(settings, T0 + timedelta(days=8), spark)
    assert [(a.business_date, a.severity) for a in first] == [(day, "warning")]
    assert "open 8 day(s) (unexplained; owner: ana)" in first[0].what
    assert aging_alerts(settings, T0 + timedelta(days=9), spark) == []
    (second,) = aging_alerts(settings, T0 + timedelta(days=15), spark)
    assert second.severity == "error"
    items = open_items_of(spark, warehouse)
    assert items[day]["alerted_periods"] == 2 and items[day]["opened_at"] == T0
    assert items[closed]["status"] == "accepted"
