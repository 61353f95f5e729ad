"""The nightly reconciliation as stages: what `tally reconcile` and the Airflow DAG both call.

Each stage takes Settings (read by the caller, the entry point), the business date and `now`
(passed in, never read here), builds its own Spark session and returns small plain values.
This module composes the layers (batch: re-aggregate + diff; expectations: validate, report);
the layers never call each other.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

from batch.firsts import catch_up
from batch.reconcile import (
    ReconcileFrames,
    ReconcileResult,
    reconcile,
    recorded_frontiers,
    recorded_run,
    stream_window_ms,
)
from expectations.report import build_report
from expectations.report_read import ReportInputs, ReportOptions
from expectations.suites import Thresholds
from expectations.validate import ValidationOutcome, as_read, validate_date
from streaming.watermark import date_closed_at
from tally import tables
from tally.dates import epoch_ms, iso_ms, window_reach_ms
from tally.ledger import status_of
from tally.money import format_amounts
from tally.settings import Settings
from tally.spark import batch_caching, session_for

log = logging.getLogger("tally.nightly")


@dataclass(frozen=True)
class WaitResult:
    ready: bool
    detail: str


@dataclass(frozen=True)
class StreamPosition:
    """How far the stream got: its newest watermark, or drained (every window closed)."""

    watermark_ms: int | None
    drained: bool


def stream_position(spark: Any, warehouse: str) -> StreamPosition | None:
    """The newest watermark the stream committed (None if it has not run)."""
    from pyspark.sql import functions as F

    if not tables.exists(spark, warehouse, tables.STREAM_PROGRESS.name):
        return None
    row = (
        tables.read_table(spark, warehouse, tables.STREAM_PROGRESS.name)
        .agg(
            F.max(F.unix_millis("watermark_after")).alias("wm"),
            F.max(F.col("drained").cast("int")).alias("drained"),
            F.count(F.lit(1)).alias("batches"),
        )
        .first()
    )
    if row is None or not row["batches"]:
        return None
    return StreamPosition(None if row["wm"] is None else int(row["wm"]), bool(row["drained"]))


def ready_after(settings: Settings, business_date: date) -> datetime:
    """The watermark after which the stream's answer for the date is final: the date is
    closed (`streaming.watermark.date_closed_at`, the rule the stream's compaction of closed
    dates uses too). A session that goes on past midnight may still grow after that (its key
    did not pause): the nightly then reports it as the stream has it so far."""
    return date_closed_at(
        business_date,
        settings.report_timezone,
        window_reach_ms(settings.window, settings.session_gap),
        settings.allowed_lateness,
    )


def wait_condition(settings: Settings, business_date: date, spark: Any = None) -> WaitResult:
    """Ready once the stream's watermark passed `ready_after` (or the stream was drained):
    after that no on-time or allowed-late event can still change one of the day's windows."""
    spark = spark or session_for(settings, "tally-wait", short_lived=True)
    needed = ready_after(settings, business_date)
    position = stream_position(spark, settings.warehouse)
    if position is None:
        return WaitResult(False, "stream has not committed any batch yet")
    if position.drained:
        return WaitResult(True, "stream drained: every window is closed")
    if position.watermark_ms is None:
        return WaitResult(False, "stream has no watermark yet")
    have = iso_ms(position.watermark_ms)
    if position.watermark_ms >= epoch_ms(needed):
        return WaitResult(True, f"watermark {have} passed {needed.isoformat()}")
    return WaitResult(False, f"watermark {have} has not reached {needed.isoformat()}")


# -- the stages ---------------------------------------------------------------------------------


def report_path(settings: Settings, business_date: date) -> Path:
    """Where `stage_report` writes the date's report."""
    return Path(settings.report_location) / f"report-{business_date.isoformat()}.html"


class WindowMismatch(ValueError):
    """The window setting disagrees with the one the stream recorded (one-line message)."""


def with_stream_window(
    settings: Settings, spark: Any, explicit: bool, business_date: date | None = None
) -> Settings:
    """The settings with the window the stream recorded in `stream_aggregates`, unless the
    window was given `explicit`ly (flag, env or config), which must then agree with it.
    Sessions have no one width (the window only sizes the lateness curve): unchanged."""
    if settings.session_gap or not tables.exists(
        spark, settings.warehouse, tables.STREAM_AGGREGATES.name
    ):
        return settings
    recorded = stream_window_ms(spark, settings.warehouse, business_date, settings.report_timezone)
    if recorded is None or recorded == settings.window:
        return settings
    if explicit:
        raise WindowMismatch(
            f"window: the stream recorded {recorded} ms windows, but the window is "
            f"{settings.window} ms (omit --window to use the stream's)"
        )
    return dataclasses.replace(settings, window=recorded)


def reaggregate(
    settings: Settings, business_date: date, now: datetime, spark: Any, keep_frames: bool = False
) -> ReconcileResult:
    """Re-aggregate the date from the pinned event log, diff it against the stream
    (`keep_frames`: the result holds what it read and wrote, for the later stages)."""
    with batch_caching(spark):
        return reconcile(
            spark,
            settings.warehouse,
            business_date,
            settings.window,
            settings.report_timezone,
            now=now,
            settings=settings.describe(),
            window_slide_ms=settings.window_slide or None,
            session_gap_ms=settings.session_gap,
            keep_frames=keep_frames,
            dedup=settings.dedup,
            tolerance=settings.tolerance_rules,
            currency=settings.default_currency,
            evidence_rows=settings.evidence_rows,
        )


def _amount(value: Any) -> int | None:
    return None if value is None else int(value)


def stage_reaggregate(
    settings: Settings, business_date: date, now: datetime, spark: Any = None
) -> dict[str, Any]:
    """Re-aggregate the date from the pinned event log and diff it against the stream."""
    spark = spark or session_for(settings, "tally-nightly", short_lived=True)
    result = reaggregate(settings, business_date, now, spark)
    s = result.summary
    return {
        "business_date": business_date.isoformat(),
        "balanced": result.balanced,
        "windows": int(s["windows"]),
        "unexplained_windows": result.unexplained_windows,
        "unexplained_amount": _amount(s["unexplained_amount"]),
        "gap_count": int(s["gap_count"]),
        "gap_amount": _amount(s["gap_amount"]),
        "explained_amount": _amount(s["explained_amount"]),
        "copies_count": int(s["copies_count"]),
        # the date's materiality grade (`tally.ledger.status_of` reads it)
        "severity": s["severity"],
        "tolerance_rule": s["tolerance_rule"],
        # of every amount above; with several currencies those are null, and each one's are
        # in `by_currency` (two currencies are never added)
        "currency": result.summary.get("currency") or result.currency,
        "by_currency": [
            {
                "currency": r.get("currency") or result.currency,
                **{c: int(r[c]) for c in ("unexplained_amount", "gap_amount", "explained_amount")},
            }
            for r in result.summaries
        ],
        "events_version": result.events_version,
        "stream_aggregates_version": result.stream_aggregates_version,
        "late_events_version": result.late_events_version,
    }


def stage_validate(
    settings: Settings,
    business_date: date,
    now: datetime,
    spark: Any = None,
    sources: Mapping[str, tuple[Any, int]] | None = None,
) -> ValidationOutcome:
    """Great Expectations on the date's tables (`sources`: the ones this process already
    holds, `validate_date`); returns the ValidationOutcome (the caller decides what a failure
    does)."""
    spark = spark or session_for(settings, "tally-nightly", short_lived=True)
    with batch_caching(spark):
        return validate_date(
            spark,
            settings.warehouse,
            business_date,
            Thresholds.from_settings(settings),
            now=now,
            report_timezone=settings.report_timezone,
            gx_root=settings.gx_location,
            sources=sources,
        )


def _tuning_curve(spark: Any, settings: Settings, business_date: date) -> dict[str, Any]:
    """The latest lateness curve recorded by the weekly tuning for a period up to the date."""
    import json

    from pyspark.sql import functions as F

    table = tables.LATENESS_RECOMMENDATIONS.name
    if not tables.exists(spark, settings.warehouse, table):
        return {}
    row = (
        tables.read_table(spark, settings.warehouse, table)
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
    inputs: ReportInputs | None = None,
) -> Path:
    """The date's HTML report (and CSV) in `out_dir` (default the report location); the HTML
    path. `inputs`: what this process already holds of the date (`ReportInputs`)."""
    spark = spark or session_for(settings, "tally-nightly", short_lived=True)
    options = ReportOptions(
        current_bound_ms=settings.fixed_lateness,
        completeness_target=settings.completeness_target,
        report_timezone=settings.report_timezone,
        gx_root=settings.gx_location,
        **_tuning_curve(spark, settings, business_date),
    )
    out = out_dir or Path(settings.report_location)
    with batch_caching(spark):
        return build_report(spark, settings.warehouse, business_date, out, now, options, inputs)


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

    reconciliation: ReconcileResult
    validation: ValidationOutcome
    report: Path

    def _amounts(self, column: str) -> str:
        """A figure of the reconciliation in each of its currencies."""
        recon = self.reconciliation
        return format_amounts(recon.summaries or (recon.summary,), column, recon.currency)

    @property
    def failure(self) -> str | None:
        """One line saying why the date is not clean, or None when it is."""
        when = self.reconciliation.business_date.isoformat()
        s = self.reconciliation.summary
        # graded ok or warn by the materiality tolerances: not a failure (warn asks a person)
        if status_of(s, validation_failed=False) == "unexplained":
            return (
                f"reconcile: {when}: {s['unexplained_windows']:,} UNEXPLAINED window(s), "
                f"residual {s['unexplained_count']:,} events / "
                f"{self._amounts('unexplained_amount')} "
                f"(report: {self.report})"
            )
        if not self.validation.success:
            failures = self.validation.failures
            more = f" (+{len(failures) - 1} more)" if len(failures) > 1 else ""
            return f"validate: {when}: {failures[0] if failures else 'failed'}{more}"
        return None


def _preload_later_stages() -> threading.Thread:
    """Import the libraries of validation and report (Great Expectations, matplotlib: ~3 s of
    Python) in a thread while the re-aggregation runs: the driver's Python mostly waits for
    the JVM then. An import that fails here fails again, with its error, where it is used.
    The caller joins the thread before validating."""

    def load() -> None:
        with contextlib.suppress(Exception):
            from expectations import report_charts, validate

            validate.preload()
            report_charts.preload()

    thread = threading.Thread(target=load, name="tally-preload", daemon=True)
    thread.start()
    return thread


def run_nightly(
    settings: Settings, business_date: date, now: datetime, spark: Any, report_to: Path
) -> NightlyOutcome:
    """Re-aggregate + diff, validate, write the report, publish: the DAG's stage sequence in
    one process. Every stage runs even when an earlier one found a problem, so nothing of a
    failed date is lost; the caller decides the exit code from `failure`."""
    preloading = _preload_later_stages()
    reconciliation = reaggregate(settings, business_date, now, spark, keep_frames=True)
    frames = reconciliation.frames
    assert frames is not None
    try:
        preloading.join()  # no import of the same modules from two threads at once
        sources = _held_sources(spark, settings.warehouse, reconciliation, frames)
        validation = stage_validate(settings, business_date, now, spark, sources)
        inputs = ReportInputs(
            reconciliation=frames.reconciliation,
            reconciliation_version=sources[tables.RECONCILIATION.name][1],
            run=frames.run,
            summaries=reconciliation.summaries,
            validation=as_read(validation.results_rows),
        )
        report = stage_report(settings, business_date, now, spark, report_to, inputs)
    finally:
        frames.release()
    stage_publish(settings, business_date, now, report_to=report_to)
    stage_maintain(settings, business_date, now, spark)
    return NightlyOutcome(reconciliation, validation, report)


# The tables the nightly writes (one writer each), with the date column they are partitioned by
# (the index of event ids by event_date: each run appends to the partitions of the dates whose
# lines arrived since the last, the business date's among them).
NIGHTLY_MAINTAINED = (*tables.RECONCILE_TABLES, tables.VALIDATION_RESULTS, tables.EVENT_INDEX)


def stage_index(settings: Settings, business_date: date, now: datetime, spark: Any) -> int | None:
    """Catch the index of event ids up to the `events` pin of the date's latest run
    (`batch.firsts.catch_up`), after the run, so the next run finds the day's lines in it.
    The rows appended (None: nothing to do: `dedup = full`, session windows, no run, or
    nothing new). A failure is one warning line: the next run adds the missing entries in
    memory, the next catch-up appends them."""
    from pyspark.errors import PySparkException

    if settings.dedup != "index" or settings.session_gap:
        return None
    run = recorded_run(spark, settings.warehouse, business_date)
    frontiers = recorded_frontiers(run) if run is not None else None
    if run is None or not frontiers or tables.EVENTS.name not in frontiers:
        return None
    try:
        return catch_up(
            spark,
            settings.warehouse,
            frontiers[tables.EVENTS.name],
            int(run["events_version"]),
            now,
        )
    except PySparkException as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        log.warning("index of event ids: catch-up failed, retried after the next run: %s", first)
        return None


def stage_maintain(
    settings: Settings, business_date: date, now: datetime, spark: Any = None
) -> list[Any]:
    """The nightly's housekeeping, after the date's run (never beside a reconcile of the same
    date: OPTIMIZE and replaceWhere on one partition conflict): the index of event ids caught
    up (`stage_index`, whatever `maintenance` says), the date's partition of each
    table it writes compacted when it holds small files, retention set, and every table
    vacuumed once every `vacuum_interval` of `now`. Each action is a row of
    `nightly_maintenance_log`; a failed action is logged, never raised (retried next night)."""
    from tally import maintenance

    spark = spark or session_for(settings, "tally-maintain", short_lived=True)
    stage_index(settings, business_date, now, spark)
    if not settings.maintenance:
        return []
    warehouse, now_ms = settings.warehouse, epoch_ms(now)
    wanted = maintenance.retention_properties(
        settings.deleted_file_retention, settings.log_retention
    )
    last = maintenance.last_done(spark, warehouse, tables.NIGHTLY_MAINTENANCE_LOG)
    actions: list[maintenance.Action] = []
    present = [t for t in NIGHTLY_MAINTAINED if tables.exists(spark, warehouse, t.name)]
    for table in present:
        path = tables.table_path(warehouse, table.name)
        maintenance.upgrade_properties(spark, path, table, wanted)
        column = table.partition_by[0]
        layout = maintenance.live_files(spark, path, column)
        day: dict[str | None, maintenance.FileStats] = {
            business_date.isoformat(): layout.get(
                business_date.isoformat(), maintenance.FileStats()
            )
        }
        schedule = maintenance.Schedule(
            1, False, settings.vacuum_interval
        )  # the date: now, not closed
        actions += maintenance.compactions_due(
            table.name, column, day, lambda _d: False, schedule, now_ms, {}
        )
    first_ms = now_ms - settings.vacuum_interval  # never vacuumed: due
    names = [t.name for t in present]
    actions += maintenance.vacuums_due(
        names, maintenance.Schedule(0, False, settings.vacuum_interval), now_ms, last, first_ms
    )
    outcomes = [
        maintenance.run_action(spark, warehouse, a, now_ms, lambda: now_ms) for a in actions
    ]
    maintenance.append_log(spark, warehouse, tables.NIGHTLY_MAINTENANCE_LOG, outcomes, "nightly")
    return outcomes


def _held_sources(
    spark: Any, warehouse: str, result: ReconcileResult, frames: ReconcileFrames
) -> dict[str, tuple[Any, int]]:
    """The tables validation reads that the reconciliation just read or wrote, as it holds
    them (`validate_date`'s `sources`): the date's reconciliation rows (the table's version
    right after the write), and each pinned input still at its latest version (a stream
    that appended since: validation reads the table, as it would in a process of its own)."""
    pinned: dict[str, tuple[Any, int | None]] = {
        tables.EVENTS.name: (frames.events, result.events_version),
        tables.STREAM_AGGREGATES.name: (frames.stream_aggregates, result.stream_aggregates_version),
        tables.STREAM_PROGRESS.name: (frames.stream_progress, result.stream_progress_version),
    }
    held = {
        name: (frame, version)
        for name, (frame, version) in pinned.items()
        if frame is not None
        and version is not None
        and tables.latest_version(spark, warehouse, name) == version
    }
    recon = tables.RECONCILIATION.name
    return {**held, recon: (frames.reconciliation, tables.latest_version(spark, warehouse, recon))}
