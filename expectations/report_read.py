"""The report's reading of the recorded run: what the caller fixes (`ReportOptions`) or
hands over (`ReportInputs`), the date's reconciliation run and the settings it recorded, and
the few small tables the report shows rows of (`reconciliation_partitions` of the run,
`reconciliation_copies`, `signoffs`).

A run that recorded no `reconciliation_partitions` rows (a date reconciled by an earlier
version) has no figures of the event log to show: the report refuses it in one line naming
the command that records them (`no_log_figures`), and computes none itself.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from tally import tables
from tally.dates import DayBounds, business_day_bounds
from tally.durations import LATENESS_AUTO, SettingsError, parse_duration
from tally.ledger import COPIES_SHOWN, COPY_COLUMNS, run_currency
from tally.money import DEFAULT_CURRENCY


class ReportError(RuntimeError):
    """The report cannot be built (missing table, bad argument): a one-line message."""


@dataclass(frozen=True)
class ReportOptions:
    """What the caller fixes. None: what the reconciliation run recorded (its settings), else
    a default (`fallback_bound_ms` for the current bound, UTC for the zone)."""

    curve: Sequence[dict[str, Any]] | None = None
    current_bound_ms: int | None = None
    recommended_bound_ms: int | None = None
    completeness_target: float | None = None
    report_timezone: str | None = None
    gx_root: str | None = None
    fallback_bound_ms: int | None = None


@dataclass(frozen=True)
class ReportInputs:
    """What a process that has just reconciled and validated the date holds (`tally
    reconcile`): the report takes it instead of reading the tables back. The same rows: the
    caller hands over what it wrote and read."""

    reconciliation: DataFrame  # the date's rows as written, persisted (the caller releases)
    reconciliation_version: int  # the table's version holding them
    run: dict[str, Any]  # the date's reconciliation_runs row
    summaries: tuple[dict[str, Any], ...]  # the date's reconciliation_summary rows (by currency)
    validation: list[dict[str, Any]]  # the date's validation_results rows (`read_results`)


@dataclass(frozen=True)
class Reconciliation:
    """The date's reconciliation as recorded: the table version read, its run and summary
    rows (None when not written), the settings the run recorded, the zone and day bounds;
    `inputs`: what the caller handed over instead (None: the tables are read)."""

    version: int
    run: dict[str, Any] | None
    summaries: tuple[dict[str, Any], ...]  # one a currency (none: not written)
    settings: dict[str, Any]
    zone: str
    bounds: DayBounds
    inputs: ReportInputs | None = None

    @property
    def is_sessions(self) -> bool:
        """The run reconciled session windows (it recorded a gap)."""
        return bool(self.settings.get("session_gap_ms"))


# -- the tables ----------------------------------------------------------------------------------


def of_date(
    spark: SparkSession,
    warehouse: str,
    name: str,
    business_date: date,
    version: int | None = None,
) -> DataFrame:
    """The table's rows of the date (at `version`; None: the latest)."""
    return tables.read_table(spark, warehouse, name, version).where(
        F.col("business_date") == F.lit(business_date)
    )


def _rows_of_date(
    spark: SparkSession, warehouse: str, name: str, business_date: date
) -> tuple[dict[str, Any], ...]:
    """The table's (few) rows of the date; none without the table."""
    if not tables.exists(spark, warehouse, name):
        return ()
    return tuple(r.asDict() for r in of_date(spark, warehouse, name, business_date).collect())


def _latest_run(spark: SparkSession, warehouse: str, business_date: date) -> dict[str, Any] | None:
    """The date's latest `reconciliation_runs` row (every run of a date is kept, numbered in
    the order recorded; a row from before run history has no number: the date's only run)."""
    if not tables.exists(spark, warehouse, "reconciliation_runs"):
        return None
    runs = of_date(spark, warehouse, "reconciliation_runs", business_date)
    if "run_number" in runs.columns:
        runs = runs.orderBy(F.coalesce("run_number", F.lit(0)).desc())
    latest = runs.first()
    return latest.asDict() if latest is not None else None


# -- the recorded settings -----------------------------------------------------------------------


def recorded_settings(run: dict[str, Any] | None) -> dict[str, Any]:
    """The settings the reconciliation run recorded (a JSON object; {} when none were).
    Anything else is a ReportError: the report must not guess the bounds it explains."""
    if not run or not run.get("settings"):
        return {}
    try:
        value = json.loads(run["settings"])
    except ValueError as exc:
        raise ReportError(f"reconciliation_runs.settings: not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ReportError(
            f"reconciliation_runs.settings: expected a JSON object, got {type(value).__name__}"
        )
    return value


def recorded_duration(settings: dict[str, Any], name: str) -> int | None:
    """The duration `name` the run recorded, in ms; None when it recorded none. One that
    does not parse is a ReportError naming it (never a silent default)."""
    if settings.get(name) is None:
        return None
    try:
        return parse_duration(settings[name], name)
    except SettingsError as exc:
        raise ReportError(f"reconciliation_runs.settings: {exc}") from None


def recorded_bound(settings: dict[str, Any]) -> int | None:
    """The run's one fixed lateness bound: its `lateness`, or under `auto` its `lateness_max`
    (the widest bound auto may choose: `Settings.fixed_lateness`); None when not recorded."""
    lateness = settings.get("lateness")
    if isinstance(lateness, str) and lateness.strip().lower() == LATENESS_AUTO:
        return recorded_duration(settings, "lateness_max")
    return recorded_duration(settings, "lateness")


def current_bound(options: ReportOptions, settings: dict[str, Any]) -> int | None:
    """The caller's bound, else the run's recorded `lateness`, else the fallback."""
    if options.current_bound_ms is not None:
        return options.current_bound_ms
    recorded = recorded_bound(settings)
    return recorded if recorded is not None else options.fallback_bound_ms


def completeness_target(options: ReportOptions, settings: dict[str, Any]) -> float | None:
    """The caller's completeness target, else the run's recorded one."""
    if options.completeness_target is None and settings.get("completeness_target") is not None:
        return float(settings["completeness_target"])
    return options.completeness_target


def report_currency(run: dict[str, Any] | None, business_date: date) -> str:
    """The currency of the run's amounts (`tally.ledger.run_currency`, the desk's rule too); a
    date without a run row: the default. A recorded value that is no code is a ReportError."""
    if run is None:
        return DEFAULT_CURRENCY
    currency = run_currency(run)
    if currency is None:
        raise ReportError(
            f"report {business_date.isoformat()}: the run recorded a default_currency that is "
            "no ISO 4217 code in use (reconciliation_runs.settings)"
        )
    return currency


# -- the recorded run ----------------------------------------------------------------------------


def read_reconciliation(
    spark: SparkSession,
    warehouse: str,
    business_date: date,
    report_timezone: str | None,
    inputs: ReportInputs | None = None,
) -> Reconciliation:
    """The date's `Reconciliation`: the caller's `inputs`, else read from the tables."""
    if inputs is not None:
        return _recorded(
            inputs.reconciliation_version,
            inputs.run,
            inputs.summaries,
            business_date,
            report_timezone,
            inputs,
        )
    if not tables.exists(spark, warehouse, "reconciliation"):
        raise ReportError(
            f"reconciliation: no Delta table at {tables.table_path(warehouse, 'reconciliation')} "
            "(run tally reconcile first)"
        )
    version = tables.latest_version(spark, warehouse, "reconciliation")
    run = _latest_run(spark, warehouse, business_date)
    summaries = _rows_of_date(spark, warehouse, "reconciliation_summary", business_date)
    return _recorded(version, run, summaries, business_date, report_timezone)


def _recorded(
    version: int,
    run: dict[str, Any] | None,
    summaries: tuple[dict[str, Any], ...],
    business_date: date,
    report_timezone: str | None,
    inputs: ReportInputs | None = None,
) -> Reconciliation:
    """The `Reconciliation` of these rows; the zone: the caller's, else the run's."""
    settings = recorded_settings(run)
    zone = (
        report_timezone
        or (run or {}).get("report_timezone")
        or settings.get("report_timezone", "UTC")
    )
    bounds = business_day_bounds(business_date, zone)
    return Reconciliation(version, run, summaries, settings, zone, bounds, inputs)


def run_partition_rows(
    spark: SparkSession,
    warehouse: str,
    business_date: date,
    rec: Reconciliation,
    columns: Sequence[str],
) -> list[Any]:
    """The date's `reconciliation_partitions` rows of the recorded run (same `run_time`),
    selected as `columns` (SQL): one small read. None without a run row or the table, and
    none of another run (a re-run replaced them; or an older run's, before the table)."""
    name = tables.RECONCILIATION_PARTITIONS.name
    run_time = (rec.run or {}).get("run_time")
    if run_time is None or not tables.exists(spark, warehouse, name):
        return []
    rows = of_date(spark, warehouse, name, business_date).selectExpr("run_time", *columns)
    return [r for r in rows.collect() if r["run_time"] == run_time]


def no_log_figures(business_date: date, run: dict[str, Any] | None) -> ReportError:
    """The one line refusing a date whose run recorded no figures of the event log (no
    `reconciliation_partitions` rows: a run of an earlier version), naming the command that
    records them: the run reproduced at its pins, or (no run row) a reconciliation."""
    day = business_date.isoformat()
    if run is None:
        return ReportError(
            f"report {day}: no reconciliation run recorded (reconciliation_runs); "
            f"run `tally reconcile --date {day}`"
        )
    return ReportError(
        f"report {day}: its reconciliation run recorded no figures of the event log "
        "(reconciliation_partitions: a run of an earlier version); "
        f"run `tally reconcile --date {day} --reproduce --write` to record them at its pins"
    )


def date_copies(spark: SparkSession, warehouse: str, business_date: date) -> list[dict[str, Any]]:
    """The first `COPIES_SHOWN` rows of the date's `reconciliation_copies` (the run's: the
    date's rows are replaced by each run), by window, key and event_id: what the desk shows
    of them (`tally.ledger`)."""
    if not tables.exists(spark, warehouse, tables.RECONCILIATION_COPIES.name):
        return []
    copies = of_date(spark, warehouse, tables.RECONCILIATION_COPIES.name, business_date)
    rows = (
        copies.orderBy("window_start", "key", "event_id")
        .select(*[c for c in COPY_COLUMNS if c in copies.columns])  # older tables lack some
        .limit(COPIES_SHOWN)
        .collect()
    )
    return [r.asDict() for r in rows]


def latest_signoff(
    spark: SparkSession, warehouse: str, business_date: date
) -> dict[str, Any] | None:
    """The date's newest sign-off decision (None when none was recorded)."""
    if not tables.exists(spark, warehouse, tables.SIGNOFFS.name):
        return None
    rows = of_date(spark, warehouse, tables.SIGNOFFS.name, business_date)
    # the four-eyes columns: absent from a table no run of this tally has written to yet
    four_eyes = [c for c in ("proposed", "prepared_by", "approved_by") if c in rows.columns]
    row = (
        rows.orderBy(F.col("decided_at").desc())
        .select("decision", "decided_by", "decided_at", "reason", "run_time", *four_eyes)
        .first()
    )
    return row.asDict() if row is not None else None
