"""Verify a recorded reconciliation run: recompute it at its pins and compare, writing nothing.

    verify(spark, warehouse, business_date, run_time=None, *, now, audit_window_ms)
        -> Verification

The run is the date's latest in `reconciliation_runs` unless `run_time` names another. It is
recomputed with `batch.reconcile.reconcile(write=False)` at the pins it recorded: each stream
table at its batch frontier (`tally.pins`: the same rows, after compaction, VACUUM and log
cleanup), or, for a run from before frontiers were recorded, at its Delta version. The date's
latest run is compared window by window with the `reconciliation` rows it wrote, and every
run by its headline figures in its `reconciliation_runs` row. A run older than the audit
window, or a pin that can no longer be read (its commit cleaned from the log, or its files
vacuumed), is a one-line `PinExpired`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from batch.diff import window_differences
from batch.reconcile import (
    FIGURES,
    FILE_NOT_FOUND,
    PinExpired,
    ReconcileFrames,
    ReconcileResult,
    conditions,
    expired,
    never_reconciled,
    reconcile,
    recorded_run,
    rerun_arguments,
)
from tally import tables
from tally.dates import epoch_ms, from_epoch_ms
from tally.durations import format_duration
from tally.money_columns import with_currency
from tally.windows import WINDOW_KEY

SHOWN_WINDOWS = 20  # differing windows named; the rest are counted


@dataclass(frozen=True)
class Verification:
    """A recorded run recomputed at its pins: what was compared and what differs."""

    business_date: date
    run_time: datetime
    latest: bool  # the date's latest run: compared window by window too
    by_frontier: bool  # its pins were read at their batch frontiers (else by version)
    windows: int  # the recomputed windows
    differences: tuple[str, ...]

    @property
    def matched(self) -> bool:
        return not self.differences

    def describe(self) -> str:
        """`MATCH` on its own line after what was compared, or the differences, one a line."""
        compared = (
            f"{self.windows:,} windows and the run's figures"
            if self.latest
            else "the run's figures (not the date's latest run: its windows were replaced)"
        )
        pins = "batch frontiers" if self.by_frontier else "Delta versions"
        head = (
            f"reproduce {self.business_date.isoformat()}, run {_iso(self.run_time)} "
            f"(pins read at their {pins}; compared: {compared}):"
        )
        if self.matched:
            return f"{head} MATCH"
        return "\n".join((f"{head} DIFFERENT", *self.differences))


def verify(
    spark: SparkSession,
    warehouse: str,
    business_date: date,
    run_time: datetime | None = None,
    *,
    now: datetime,
    audit_window_ms: int,
) -> Verification:
    """Recompute the date's latest run (or its run at `run_time`) at its pins and compare it
    with what it recorded; writes nothing. ReconcileError (PinExpired: a run older than the
    audit window at `now`, or a pin that can no longer be read) in one line."""
    run = recorded_run(spark, warehouse, business_date, run_time)
    if run is None:
        raise never_reconciled(business_date, run_time)
    when = from_epoch_ms(_run_ms(run))
    left_window = audit_expiry(when, audit_window_ms)
    if now >= left_window:
        raise PinExpired(
            f"run {_iso(when)} is outside the audit window (audit_window="
            f"{format_duration(audit_window_ms)}): reproducible until {_iso(left_window)}"
        )
    latest = recorded_run(spark, warehouse, business_date)
    is_latest = latest is not None and _same_run(latest, run)
    arguments = rerun_arguments(run)
    recorded_rows = _recorded_windows(spark, warehouse, business_date, when) if is_latest else None
    if recorded_rows is not None:  # rows of a run from before currencies are in its currency
        recorded_rows = with_currency(recorded_rows, arguments["currency"])
    try:
        result = reconcile(
            spark, warehouse, business_date, now=when, keep_frames=True, write=False, **arguments
        )
        assert result.frames is not None
        try:
            differences = _compared(result, run, result.frames, recorded_rows)
        finally:
            result.frames.release()
    except (PySparkException, Py4JJavaError) as exc:
        found = conditions(exc)
        if FILE_NOT_FOUND in found:
            raise _lost(spark, warehouse, arguments) from None
        raise
    return Verification(
        business_date,
        when,
        recorded_rows is not None,
        arguments["frontiers"] is not None,
        int(result.summary["windows"]),
        differences,
    )


def audit_expiry(run_time: datetime, audit_window_ms: int) -> datetime:
    """When a run leaves the audit window: `--reproduce` promises it until then."""
    return run_time + timedelta(milliseconds=audit_window_ms)


def _compared(
    result: ReconcileResult,
    run: dict[str, Any],
    frames: ReconcileFrames,
    recorded_rows: DataFrame | None,
) -> tuple[str, ...]:
    """The differences between the recomputed run and what it recorded: its figures, and its
    windows when the date's `reconciliation` rows are its own."""
    figures = tuple(
        f"{name}: recorded {run[name]}, recomputed {result.summary[name]}"
        for name in FIGURES
        if run.get(name) != result.summary[name]
    )
    if run.get("balanced") != result.balanced:
        figures += (f"balanced: recorded {run.get('balanced')}, recomputed {result.balanced}",)
    if recorded_rows is None:
        return figures
    differing = window_differences(frames.reconciliation, recorded_rows).orderBy(*WINDOW_KEY)
    shown = differing.limit(SHOWN_WINDOWS + 1).collect()  # a few rows of the diff, not events
    lines = [_window_line(r.asDict(recursive=True)) for r in shown[:SHOWN_WINDOWS]]
    if len(shown) > SHOWN_WINDOWS:
        lines.append(f"... and {differing.count() - SHOWN_WINDOWS:,} more windows")
    return (*lines, *figures)


def _recorded_windows(
    spark: SparkSession, warehouse: str, business_date: date, when: datetime
) -> DataFrame | None:
    """The date's `reconciliation` rows if the run at `when` wrote them (rows from before
    they carried a run_time count as the latest run's); None if another run's replaced them
    (a run that stopped after writing them, before its `reconciliation_runs` row)."""
    if not tables.exists(spark, warehouse, tables.RECONCILIATION.name):
        return None
    version = tables.latest_version(spark, warehouse, tables.RECONCILIATION.name)
    rows = tables.read_table(spark, warehouse, tables.RECONCILIATION.name, version).where(
        F.col("business_date") == F.lit(business_date)
    )
    if "run_time" not in rows.columns:
        return rows
    others = rows.where(
        F.col("run_time").isNotNull() & (F.unix_millis("run_time") != epoch_ms(when))
    )
    return None if not others.isEmpty() else rows


def _lost(spark: SparkSession, warehouse: str, arguments: dict[str, Any]) -> PinExpired:
    """The PinExpired of the first pin read by version whose files are gone: a missing file
    fails the recomputation mid-run; which table's it was is found here, off the hot path.
    (A version the log or Delta's time-travel limit refuses fails its pin's read at once.)"""
    versions = {
        tables.EVENTS.name: arguments["events_version"],
        **{k: v for k, v in arguments["stream_versions"].items() if v is not None},
    }
    for name, version in versions.items():
        if name in (arguments["frontiers"] or {}):
            continue
        files = tables.read_table(spark, warehouse, name, int(version)).inputFiles()
        if not all(_exists(spark, f) for f in files):
            return expired(spark, warehouse, name, int(version), "files")
    return PinExpired("a file a pinned version reads is missing (none of the run's versions)")


def _exists(spark: SparkSession, uri: str) -> bool:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    path = jvm.org.apache.hadoop.fs.Path(uri)
    return bool(path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).exists(path))  # type: ignore[union-attr]


def _window_line(row: dict[str, Any]) -> str:
    """One differing window: what the run recorded, what the recomputation gives."""
    where = f"window {_iso(row['window_start'])}/{_iso(row['window_end'])} key {row['key']!r}"
    return f"{where}: recorded {_side(row['recorded'])}; recomputed {_side(row['recomputed'])}"


def _side(values: dict[str, Any] | None) -> str:
    if values is None:
        return "no row"
    counts = ", ".join(
        f"{side} {values[f'{side}_count']}/{values[f'{side}_amount']}"
        for side in ("batch", "stream", "late", "residual")
    )
    return f"{values['status']} ({counts})"


def _run_ms(run: dict[str, Any]) -> int:
    value = run["run_time"]
    return epoch_ms(value if value.tzinfo is not None else value.astimezone())


def _same_run(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return _run_ms(a) == _run_ms(b) and a.get("run_number") == b.get("run_number")


def _iso(value: datetime) -> str:
    aware = value if value.tzinfo is not None else value.astimezone()
    return from_epoch_ms(epoch_ms(aware)).isoformat().replace("+00:00", "Z")
