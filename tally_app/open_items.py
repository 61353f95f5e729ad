"""Aging of open items: an alert for each date someone must act on that has been open another
`aging_max` (`tally.open_items.due_alert`), recorded in `open_items` (`alerted_periods`) so
each period alerts once. The health DAG runs it every few minutes (`check_open_items`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tally import tables
from tally.alert import Alert
from tally.durations import format_duration
from tally.open_items import age_days, due_alert, latest_items
from tally.settings import Settings

__all__ = ["aging_alerts", "open_items_of"]


def open_items_of(spark: Any, warehouse: str) -> dict[Any, dict[str, Any]]:
    """Each date's open item (newest `open_items` row), timestamps zone-aware (UTC)."""
    from tally_app.signoffs import aware_row

    if not tables.exists(spark, warehouse, tables.OPEN_ITEMS.name):
        return {}
    rows = tables.read_table(spark, warehouse, tables.OPEN_ITEMS.name).collect()
    return latest_items(aware_row(r.asDict()) for r in rows)


def aging_alerts(settings: Settings, now: datetime, spark: Any) -> list[Alert]:
    """The aging alerts due at `now` (each recorded as sent in `open_items`)."""
    from tally_app.signoffs import write_item

    alerts = []
    for day, item in sorted(open_items_of(spark, settings.warehouse).items()):
        period = due_alert(item, now, settings.aging_max)
        if period is None:
            continue
        age = age_days(item["opened_at"], now)
        alerts.append(
            Alert(
                f"open item aging: {day.isoformat()} has been open {age} day(s) "
                f"({item['kind']}; owner: {item.get('owner')})",
                observed=f"open since {item['opened_at'].isoformat()}",
                threshold=f"closed within {format_duration(settings.aging_max * period)}",
                severity="warning" if period == 1 else "error",
                business_date=day,
                alert_time=now,
            )
        )
        alerted = {**item, "alerted_periods": period, "changed_at": now}
        write_item(spark, settings.warehouse, day, alerted)
    return alerts
