"""What each tally task does, given its run's data interval.

Shared by the in-process tasks (`TALLY_SPARK_RUNNER=local`) and the spark-submit application
(`dags/spark_apps/tally_task.py`), so both runners do exactly the same thing. The business date
is the date of the interval's start in the report time zone; the run time handed to the stages
is the interval's end, so re-running a date reproduces the same rows.

Stages: `reaggregate` (re-aggregate + diff), `validate` (Great Expectations; each failed
critical expectation is an alert, and the date then waits for a sign-off: `dags.signoff`),
`report`, `publish` (tally_app.nightly); `health` (streaming.health) and `tune` (batch.tuning),
whose findings are emitted as alerts here.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from datetime import date, datetime, timedelta
from pathlib import Path, PurePath
from typing import Any

from dags.alerting import AlertRaised, context_fields, emit
from tally.alert import Alert
from tally.dates import business_date_of, from_epoch_ms, plain_utc
from tally.durations import format_duration
from tally.settings import Settings, load_settings
from tally.spark import session_for

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
        result = _nightly_stage(stage, settings, business_date, now)
        if stage == "validate":
            report_validation_alerts(result, settings, business_date, context)
        out["result"] = plain(result)
        return out
    if stage == "health":
        alerts = check_stream_health(settings, context=context)
        out.update(alerts=[a.message() for a in alerts])
        errors = [a for a in alerts if a.severity in ("error", "critical")]
        if errors:  # already recorded and sent: fail the run so it shows red
            raise AlertRaised(errors, recorded=True)
        return out
    first, last = period_of(interval_start, interval_end, settings.report_timezone)
    out["result"] = plain(tune_lateness(settings, first, last, now=now, context=context))
    return out


def report_validation_alerts(
    outcome: Any,
    settings: Settings,
    business_date: date,
    context: Mapping[str, Any] | None = None,
) -> list[Alert]:
    """Emit one alert per failed critical expectation (recorded and sent now; the task still
    succeeds: the date then waits for a person's sign-off, `dags.signoff`)."""
    fields = context_fields(context, settings) if context else {}
    fields["business_date"] = business_date
    alerts = [a.with_context(**fields) for a in validation_alerts(outcome)]
    emit(alerts, settings)
    return alerts


def _nightly_stage(stage: str, settings: Settings, business_date: date, now: datetime) -> Any:
    from tally_app import nightly

    if stage == "reaggregate":
        return nightly.stage_reaggregate(settings, business_date, now)
    if stage == "validate":
        return nightly.stage_validate(settings, business_date, now)
    if stage == "report":
        report = nightly.stage_report(settings, business_date, now)
        # the nightly's housekeeping, in the last stage that runs Spark (publish starts no
        # session): after the date's tables were written (docs/operations.md); a failed action
        # is logged in nightly_maintenance_log, never a failed task
        nightly.stage_maintain(settings, business_date, now)
        return report
    return nightly.stage_publish(settings, business_date, now)


def check_stream_health(
    settings: Settings, *, context: Mapping[str, Any] | None = None, spark: Any = None
) -> list[Alert]:
    """Read the recent stream progress, evaluate it, emit the alerts; returns them."""
    from streaming.health import HealthParams, evaluate_health, read_recent_progress

    params = HealthParams.from_settings(settings)
    spark = spark or session_for(settings, "tally-dag")
    rows = read_recent_progress(spark, settings.warehouse, params.rows_needed)
    fields = context_fields(context, settings) if context else {}
    fields.pop("business_date", None)
    if rows:
        fields["business_date"] = from_epoch_ms(rows[-1]["processing_ms"]).date()
    alerts = [a.with_context(**fields) for a in evaluate_health(rows, params)]
    emit(alerts, settings, spark)
    return alerts


def tune_lateness(
    settings: Settings,
    first_day: date,
    last_day: date,
    *,
    now: datetime,
    context: Mapping[str, Any] | None = None,
    spark: Any = None,
) -> dict[str, Any]:
    """The weekly tuning of `first_day`..`last_day`; an alert when the configured lateness
    misses the completeness target, one when per-source bounds are configured
    (`lateness_by_partition`) and some partition's bound misses it, and under lateness auto
    one when a partition's bounds in force stayed narrower than the curve's recommendation."""
    from batch.tuning import TuningParams
    from batch.tuning import tune_lateness as tune

    params = TuningParams(
        warehouse=settings.warehouse,
        window_ms=settings.window,
        configured_lateness_ms=settings.fixed_lateness,
        candidates_ms=settings.lateness_candidates_ms,
        target_pct=settings.completeness_target,
        report_timezone=settings.report_timezone,
        configured_by_partition=settings.lateness_by_partition_ms,
    )
    spark = spark or session_for(settings, "tally-dag")
    result = tune(spark, params, first_day, last_day, now=now)
    overall = (
        None if result["configured_meets_target"] else tuning_alert(result, settings.fixed_lateness)
    )
    # Per partition only with per-source bounds: otherwise the one bound's alert says it.
    per_partition = partition_tuning_alert(result) if params.configured_by_partition else None
    # Under lateness auto, also whether the bounds it chose kept up with the week's delays.
    auto = in_force_alert(result) if settings.lateness_auto else None
    alerts = [a for a in (overall, per_partition, auto) if a is not None]
    if alerts:
        fields = context_fields(context, settings) if context else {}
        fields["business_date"] = last_day
        emit([a.with_context(**fields) for a in alerts], settings, spark)
    return result


def tuning_alert(result: Mapping[str, Any], configured_ms: int) -> Alert:
    """The alert of a tuning period whose configured bound misses the target."""
    best = result["recommended_lateness_ms"]
    recommended = (
        f"smallest bound reaching it: {format_duration(best)}"
        if best is not None
        else "no bound in the curve reaches it"
    )
    return Alert(
        "configured lateness bound misses the completeness target",
        f"{result['configured_completeness_pct']:.4f}% complete at lateness "
        f"{format_duration(configured_ms)} ({result['events']} events, "
        f"{result['period_start']}..{result['period_end']})",
        f"{result['target_pct']}% ({recommended})",
        "warning",
    )


def partition_tuning_alert(result: Mapping[str, Any]) -> Alert | None:
    """One alert for the partitions whose configured bound misses the target (None if
    none does), each with its completeness there and its smallest bound reaching it (the
    first 10 partitions named)."""
    if not result["partitions_missing_target"]:
        return None
    missing = result["partitions_missing_target"][:10]
    more = len(result["partitions_missing_target"]) - len(missing)
    configured = result["configured_by_partition"]
    completeness = result["configured_completeness_by_partition"]
    best = result["recommended_by_partition"]
    observed = ", ".join(
        f"partition {p} {completeness[p]:.4f}% at {format_duration(configured[p])}" for p in missing
    )
    smallest = ", ".join(
        f"{p}={'none in the curve' if best[p] is None else format_duration(best[p])}"
        for p in missing
    )
    return Alert(
        "configured per-partition lateness bound misses the completeness target",
        f"{observed}{f' and {more} more' if more else ''} "
        f"({result['period_start']}..{result['period_end']})",
        f"{result['target_pct']}% (smallest bounds reaching it: {smallest})",
        "warning",
    )


def in_force_alert(result: Mapping[str, Any]) -> Alert | None:
    """Lateness auto: one alert for the partitions whose bounds in force over the period all
    stayed below the curve's smallest bound reaching the target (None if none did), each with
    its widest bound in force and that recommendation (the first 10 partitions named)."""
    short = result["partitions_short_of_curve"]
    if not short:
        return None
    named = short[:10]
    more = len(short) - len(named)
    widest = result["in_force_max_by_partition"]
    best = result["recommended_by_partition"]
    observed = ", ".join(f"partition {p} at most {format_duration(widest[p])}" for p in named)
    needed = ", ".join(
        f"{p}={'none in the curve' if best[p] is None else format_duration(best[p])}" for p in named
    )
    return Alert(
        "lateness auto chose bounds narrower than the completeness target needed",
        f"{observed}{f' and {more} more' if more else ''} "
        f"({result['period_start']}..{result['period_end']})",
        f"{result['target_pct']}% (smallest bounds reaching it: {needed})",
        "warning",
    )


def restatement_alert(restatement: Any, settings: Settings) -> Alert:
    """A date that changed after its run (`batch.restatements.Restatement`), as a warning."""
    tolerance = (
        f"{settings.restatement_tolerance_events:,} events, "
        f"{settings.restatement_tolerance_amount:,} amount"
    )
    settles = (
        f"re-run; signed off automatically within {tolerance}"
        if settings.restatement_policy == "rerun"
        else "policy flag: a person re-runs the date (tally reconcile) and signs it off"
    )
    return Alert(
        f"business date {restatement.business_date.isoformat()} changed after its run "
        f"{restatement.run_time.isoformat()}: {restatement.change.describe()}",
        observed=f"{restatement.status} (policy {settings.restatement_policy})",
        threshold=settles,
        severity="warning",
        business_date=restatement.business_date,
    )


def check_restatements(
    settings: Settings, *, now: datetime, context: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The reconciled dates that changed after their run (`tally_app.restatements.checked`):
    one warning each when first found; returns the dates the policy re-runs."""
    from tally_app.restatements import checked, open_reopened, to_rerun

    spark = session_for(settings, "tally-dag")
    found = [r for r in checked(settings, now, spark) if r.status != "unchanged"]
    open_reopened(settings, spark, [(r, r.status) for r in found], now)  # flagged: pending
    fields = context_fields(context, settings) if context else {}
    fields.pop("business_date", None)
    alerts = [
        restatement_alert(r, settings).with_context(**fields) for r in found if not r.repeated
    ]
    emit(alerts, settings, spark)
    return {
        "found": [r.business_date.isoformat() for r in found],
        "rerun": [d.isoformat() for d in to_rerun(found)],
    }


def check_open_items(
    settings: Settings, *, now: datetime, context: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The aging alerts of the open items due at `now` (`tally_app.open_items.aging_alerts`),
    sent and recorded."""
    from tally_app.open_items import aging_alerts

    spark = session_for(settings, "tally-dag")
    fields = context_fields(context, settings) if context else {}
    fields.pop("business_date", None)
    alerts = [a.with_context(**fields) for a in aging_alerts(settings, now, spark)]
    emit(alerts, settings, spark)
    return {"aging": [a.business_date.isoformat() for a in alerts if a.business_date]}


def rerun_restatements(
    settings: Settings, dates: list[date] | None, *, now: datetime
) -> dict[str, Any]:
    """Re-run the dates the policy re-runs (`only`: those the check named; None: any), each
    signed off automatically within the tolerance or left awaiting a person's sign-off
    (`tally_app.restatements.settle`); each date before and after, for the reviewer."""
    from tally_app.restatements import before_after, settle

    spark = session_for(settings, "tally-dag")
    settled = settle(settings, now, spark, Path(settings.report_location), only=dates)
    return {"settled": [plain(before_after(s)) for s in settled if s.rerun is not None]}
