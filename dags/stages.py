"""What each tally task does, given its run's data interval.

Shared by the in-process tasks (`TALLY_SPARK_RUNNER=local`) and the spark-submit application
(`dags/spark_apps/tally_task.py`), so both runners do exactly the same thing. The business date
is the date of the interval's start in the report time zone; the run time handed to the stages
is the interval's end, so re-running a date reproduces the same rows.

Stages: `reaggregate` (re-aggregate + diff), `validate` (Great Expectations; a failed
expectation raises `AlertRaised`), `report`, `publish` (tally.nightly); `health` and `tune`
(tally.alerts).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from datetime import date, datetime, timedelta
from pathlib import PurePath
from typing import Any

from tally.alerts import Alert, AlertRaised, business_date_of, plain_utc
from tally.settings import Settings, load_settings

NIGHTLY_STAGES = ("reaggregate", "validate", "report", "publish")
STAGES = (*NIGHTLY_STAGES, "health", "tune")


def plain(value: Any) -> Any:
    """A JSON-able copy of a stage's result (for XCom and the command line)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, date | datetime):
        return value.isoformat()
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [plain(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return str(value)


def period_of(start: datetime, end: datetime, report_timezone: str) -> tuple[date, date]:
    """Business dates covered by `[start, end)`: first and last, inclusive."""
    first = business_date_of(start, report_timezone)
    last = business_date_of(end, report_timezone) - timedelta(days=1)
    return first, max(first, last)


def _threshold(row: Mapping[str, Any]) -> str:
    """`expect_column_max_to_be_between max_value=600000` from a validation_results row."""
    try:
        kwargs = json.loads(row.get("kwargs") or "{}")
    except (TypeError, ValueError):
        kwargs = {}
    bounds = " ".join(
        f"{k}={v}"
        for k, v in sorted(kwargs.items())
        if k not in ("catch_exceptions", "column", "result_format", "include_config", "meta")
    )
    return f"{row.get('expectation') or ''} {bounds}".strip()


def _row_alert(row: Mapping[str, Any], link: str) -> Alert:
    """An alert for one failed `validation_results` row (expectations.validate)."""
    check = row.get("description") or row.get("check_name") or row.get("expectation")
    column = row.get("column_name")
    suite = row.get("suite")
    return Alert(
        what=f"data quality: {suite + ': ' if suite else ''}{check}"
        + (f" (column {column})" if column else ""),
        observed=str(row.get("observed_value") or ""),
        threshold=_threshold(row),
        severity="error",
        report_link=str(row.get("data_docs_page") or link),
    )


def validation_alerts(outcome: Any) -> list[Alert]:
    """Alerts for a failed validation (`expectations.validate.ValidationOutcome`): one per
    failed critical expectation; [] when the date passed."""
    if getattr(outcome, "success", True):
        return []
    link = str(getattr(outcome, "data_docs_path", "") or "")
    rows = [
        r
        for r in getattr(outcome, "results_rows", None) or []
        if not r.get("success") and r.get("severity") == "critical"
    ]
    if rows:
        return [_row_alert(r, link) for r in rows]
    failures = list(getattr(outcome, "failures", None) or []) or ["validation failed"]
    return [
        Alert(f"data quality: {f}", observed="", threshold="", report_link=link) for f in failures
    ]


def run_stage(
    stage: str,
    interval_start: datetime,
    interval_end: datetime,
    *,
    settings: Settings | None = None,
    context: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Run one stage for the run whose data interval is `[interval_start, interval_end)`."""
    if stage not in STAGES:
        raise ValueError(f"stage: expected one of {', '.join(STAGES)}, got {stage!r}")
    if interval_start.tzinfo is None or interval_end.tzinfo is None:
        raise ValueError("data interval: needs a time zone")
    settings = settings or load_settings()
    interval_start, interval_end = plain_utc(interval_start), plain_utc(interval_end)
    now = interval_end
    business_date = business_date_of(interval_start, settings.report_timezone)
    out: dict[str, Any] = {"stage": stage, "business_date": business_date.isoformat()}

    if stage in NIGHTLY_STAGES:
        from tally import nightly

        result: Any
        if stage == "reaggregate":
            result = nightly.stage_reaggregate(settings, business_date, now)
        elif stage == "validate":
            result = nightly.stage_validate(settings, business_date, now)
            alerts = validation_alerts(result)
            if alerts:
                raise AlertRaised(
                    [dataclasses.replace(a, business_date=business_date) for a in alerts]
                )
        elif stage == "report":
            result = nightly.stage_report(settings, business_date, now)
        else:
            result = nightly.stage_publish(settings, business_date, now)
        out["result"] = plain(result)
        return out

    if stage == "health":
        from tally.alerts import check_stream_health

        alerts = check_stream_health(settings, context=context)
        out.update(alerts=[a.message() for a in alerts])
        errors = [a for a in alerts if a.severity in ("error", "critical")]
        if errors:  # already recorded and sent: fail the run so it shows red
            raise AlertRaised(errors, recorded=True)
        return out

    from tally.alerts import tune_lateness

    first, last = period_of(interval_start, interval_end, settings.report_timezone)
    out["result"] = plain(tune_lateness(settings, first, last, now=now, context=context))
    return out
