"""The nightly reconciliation as stages: what `tally reconcile` and the Airflow DAG both call.

Each stage takes Settings (read by the caller, the entry point), the business date and `now`
(passed in, never read here), builds its own Spark session and returns small plain values.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from tally.settings import Settings


@dataclass(frozen=True)
class WaitResult:
    ready: bool
    detail: str


def business_day_end(business_date: date, timezone: str) -> datetime:
    """End of the business day (exclusive) as a UTC datetime."""
    local_end = datetime.combine(business_date + timedelta(days=1), time(0), ZoneInfo(timezone))
    return local_end.astimezone(UTC)


def _session(settings: Settings, app: str) -> Any:
    from tally.spark import build_session

    return build_session(
        settings.spark_master, app_name=app, shuffle_partitions=settings.shuffle_partitions
    )


def stream_watermark_ms(spark: Any, warehouse: str) -> int | None:
    """The newest watermark the stream has committed (None if it has not run)."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    from tally import tables as T

    path = T.table_path(warehouse, T.STREAM_PROGRESS.name)
    if not DeltaTable.isDeltaTable(spark, path):
        return None
    row = (
        T.read_table(spark, warehouse, T.STREAM_PROGRESS.name)
        .select(F.max(F.unix_millis("watermark_after")).alias("wm"))
        .first()
    )
    return None if row is None or row["wm"] is None else int(row["wm"])


def wait_condition(settings: Settings, business_date: date, spark: Any = None) -> WaitResult:
    """Ready once the stream's watermark passed the end of the day's last window plus allowed
    lateness: after that no on-time or allowed-late event can still change one of the day's
    windows. A window belongs to the date its start falls on, so the last one ends up to one
    window length after midnight."""
    spark = spark or _session(settings, "tally-wait")
    needed = business_day_end(business_date, settings.report_timezone) + timedelta(
        milliseconds=settings.window + settings.allowed_lateness
    )
    watermark = stream_watermark_ms(spark, settings.warehouse)
    if watermark is None:
        return WaitResult(False, "stream has not committed any batch yet")
    needed_ms = int(needed.timestamp() * 1000)
    have = datetime.fromtimestamp(watermark // 1000, UTC).isoformat()
    if watermark >= needed_ms:
        return WaitResult(True, f"watermark {have} passed {needed.isoformat()}")
    return WaitResult(False, f"watermark {have} has not reached {needed.isoformat()}")


# -- stages (added by the Airflow engineer while the lead's version was pending; same shape) --


def output_root(settings: Settings) -> Path:
    """Local directory next to a local warehouse for the reports and the GX project
    (`TALLY_REPORT_DIR` / `TALLY_GX_ROOT` override; a URI warehouse uses the working
    directory)."""
    if "://" in settings.warehouse and not settings.warehouse.startswith("file:"):
        return Path.cwd()
    local = settings.warehouse.removeprefix("file://")
    return Path(local).resolve().parent


def report_dir(settings: Settings) -> Path:
    return Path(os.environ.get("TALLY_REPORT_DIR") or output_root(settings) / "reports")


def gx_root(settings: Settings) -> Path:
    return Path(os.environ.get("TALLY_GX_ROOT") or output_root(settings))


def report_path(settings: Settings, business_date: date) -> Path:
    """Where `stage_report` writes the date's report."""
    return report_dir(settings) / f"report-{business_date.isoformat()}.html"


def reaggregate(settings: Settings, business_date: date, now: datetime, spark: Any) -> Any:
    """Re-aggregate the date from the pinned event log, diff it against the stream; the
    ReconcileResult."""
    from batch.reconcile import reconcile

    return reconcile(
        spark,
        settings.warehouse,
        business_date,
        settings.window,
        settings.report_timezone,
        now=now,
        settings=settings.describe(),
    )


def stage_reaggregate(
    settings: Settings, business_date: date, now: datetime, spark: Any = None
) -> dict[str, Any]:
    """Re-aggregate the date from the pinned event log and diff it against the stream."""
    spark = spark or _session(settings, "tally-nightly")
    result = reaggregate(settings, business_date, now, spark)
    s = result.summary
    return {
        "business_date": business_date.isoformat(),
        "balanced": result.balanced,
        "windows": int(s["windows"]),
        "unexplained_windows": result.unexplained_windows,
        "gap_amount": int(s["gap_amount"]),
        "explained_amount": int(s["explained_amount"]),
        "events_version": result.events_version,
        "stream_aggregates_version": result.stream_aggregates_version,
        "late_events_version": result.late_events_version,
    }


def stage_validate(
    settings: Settings, business_date: date, now: datetime, spark: Any = None
) -> Any:
    """Great Expectations on the date's tables; returns the ValidationOutcome (the caller
    decides what a failure does)."""
    from expectations.suites import Thresholds
    from expectations.validate import validate_date

    spark = spark or _session(settings, "tally-nightly")
    return validate_date(
        spark,
        settings.warehouse,
        business_date,
        Thresholds.from_settings(settings),
        now=now,
        report_timezone=settings.report_timezone,
        gx_root=str(gx_root(settings)),
    )


def _tuning_curve(spark: Any, settings: Settings, business_date: date) -> dict[str, Any]:
    """The latest lateness curve recorded by the weekly tuning for a period up to the date."""
    import json

    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    from tally import tables as T

    path = T.table_path(settings.warehouse, "lateness_recommendations")
    if not DeltaTable.isDeltaTable(spark, path):
        return {}
    row = (
        T.read_table(spark, settings.warehouse, "lateness_recommendations")
        .where(F.col("period_start") <= F.lit(business_date))
        .orderBy(F.col("period_start").desc())
        .select("curve", "recommended_lateness_ms")
        .first()
    )
    if row is None:
        return {}
    return {
        "curve": json.loads(row["curve"]),
        "recommended_bound_ms": row["recommended_lateness_ms"],
    }


def stage_report(
    settings: Settings,
    business_date: date,
    now: datetime,
    spark: Any = None,
    out_dir: Path | None = None,
) -> Path:
    """The date's HTML report (and CSV) in `out_dir` (default `report_dir`); the HTML path."""
    from expectations.report import build_report

    spark = spark or _session(settings, "tally-nightly")
    return build_report(
        spark,
        settings.warehouse,
        business_date,
        out_dir or report_dir(settings),
        now,
        current_bound_ms=settings.lateness,
        completeness_target=settings.completeness_target,
        report_timezone=settings.report_timezone,
        gx_root=str(gx_root(settings)),
        **_tuning_curve(spark, settings, business_date),
    )


def stage_publish(
    settings: Settings, business_date: date, now: datetime, report_to: Path | None = None
) -> dict[str, Any]:
    """Publish the date's report: (re)write `index.html` in the report directory, linking
    every published report, newest first. Idempotent; fails if the report is missing."""
    import html

    report = (
        report_to / report_path(settings, business_date).name
        if report_to
        else report_path(settings, business_date)
    )
    if not report.exists():
        raise FileNotFoundError(f"report: {report} does not exist (run the report stage first)")
    directory = report.parent
    reports = sorted(directory.glob("report-????-??-??.html"), reverse=True)
    items = "\n".join(
        f'<li><a href="{html.escape(p.name)}">{html.escape(p.stem[len("report-") :])}</a></li>'
        for p in reports
    )
    index = directory / "index.html"
    tmp = index.with_suffix(".html.tmp")
    tmp.write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>tally reports</title></head>"
        f"<body><h1>tally reconciliation reports</h1><ul>\n{items}\n</ul></body></html>\n",
        encoding="utf-8",
    )
    tmp.replace(index)
    return {"report": str(report), "index": str(index), "reports": len(reports)}


@dataclass(frozen=True)
class NightlyOutcome:
    """What `tally reconcile` did for a date: every stage ran and wrote its output."""

    reconciliation: Any  # batch.reconcile.ReconcileResult
    validation: Any  # expectations.validate.ValidationOutcome
    report: Path

    @property
    def failure(self) -> str | None:
        """One line saying why the date is not clean, or None when it is."""
        when = self.reconciliation.business_date.isoformat()
        s = self.reconciliation.summary
        if not self.reconciliation.balanced:
            return (
                f"reconcile: {when}: {s['unexplained_windows']:,} UNEXPLAINED window(s), "
                f"residual {s['unexplained_count']:,} events / {s['unexplained_amount']:,} "
                f"minor units (report: {self.report})"
            )
        if not self.validation.success:
            failures = self.validation.failures
            more = f" (+{len(failures) - 1} more)" if len(failures) > 1 else ""
            return f"validate: {when}: {failures[0] if failures else 'failed'}{more}"
        return None


def run_nightly(
    settings: Settings, business_date: date, now: datetime, spark: Any, report_to: Path
) -> NightlyOutcome:
    """Re-aggregate + diff, validate, write the report, publish: the DAG's stage sequence in
    one process. Every stage runs even when an earlier one found a problem, so nothing of a
    failed date is lost; the caller decides the exit code from `failure`."""
    reconciliation = reaggregate(settings, business_date, now, spark)
    validation = stage_validate(settings, business_date, now, spark)
    report = stage_report(settings, business_date, now, spark, out_dir=report_to)
    stage_publish(settings, business_date, now, report_to=report_to)
    return NightlyOutcome(reconciliation, validation, report)
