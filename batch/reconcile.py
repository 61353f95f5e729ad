"""The batch layer's run: pin the inputs, diff a business date, write and record it.

    reconcile(spark, warehouse, business_date, window_ms, report_timezone="UTC",
              events_version=None, stream_versions=None, *, now, settings=None)
        -> ReconcileResult

The diff itself (first arrivals, the stream's answer, late totals, the status rule, the
summary) is `batch.diff`, pure DataFrame -> DataFrame; this module reads and writes around it:

1. **Pinning.** `events`, `stream_aggregates` and `late_events` (and `stream_progress`, for
   the bounds in force) are read at a pinned Delta version each, the latest unless given.
2. **Re-aggregation.** The date's first arrivals, windowed and aggregated, are written to
   `batch_aggregates`.
3. **Diff.** The batch totals, the stream's answer and the late totals are diffed into
   `reconciliation`; `reconciliation_summary` holds the day's totals, and
   `reconciliation_partitions` the report's figures per source partition. Late rows that
   repeat an earlier event are counted in `ReconcileResult.late_repeats` (logged and
   described; no table column).
4. **Provenance.** `reconciliation_runs` records the versions read and the settings, so a run
   can be reproduced exactly (`reproduce`), whatever was appended since.

Session windows (`session_gap_ms`; docs/semantics.md, "Session windows", "In the nightly";
`batch.sessions`): the truth is the sessions of first arrivals that start on the date, read
from `D` before it to `D` after it, widened a day at a time (at most 31) while a session of
the date reaches the end of what was read. The stream's answer is its current final sessions
(highest final revision per session, minus the retracted). Each row of the diff is a batch
session `B`: its stream side is the stream's sessions of B's key inside B, its late side the
late rows of B's key whose event time is in B. A stream session or late row in no batch
session is its own UNEXPLAINED row (batch 0) on the date its start falls on.

Every output table is partitioned by `business_date` and written with Delta `replaceWhere`
on that date: re-running a date replaces exactly that date, atomically. The date partitions
do not record the time zone: use one `report_timezone` per warehouse.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from py4j.protocol import Py4JError
from pyspark.errors import AnalysisException, PySparkException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from batch.bounds import BOUND_COLUMNS, bounds_of_day
from batch.diff import (
    COPY_COLUMNS,
    LATE_COLUMNS,
    Copies,
    batch_aggregates,
    copy_evidence,
    copy_totals,
    counted_copies,
    day_events,
    diff_windows,
    explaining_rows,
    late_arrivals,
    late_totals,
    latest_final_rows,
    latest_stream,
    log_copies,
    ranked_hashes,
    repeated_ids,
    summarize,
)
from batch.evidence import (
    EVENT_COLUMNS,
    event_evidence,
    evidence_rows,
    late_evidence,
    revision_evidence,
    unexplained_windows,
    with_session_answers,
    with_window_answers,
)
from batch.firsts import day_copies, index_for_run, ranked_copies
from batch.partitions import write_partition_figures
from batch.sessions import (
    SessionError,
    check_session_width,
    date_sessions,
    events_per_session,
    first_arrivals_in,
    late_per_session,
    session_aggregates,
    stream_per_session,
    stream_reach_ms,
    stream_rows_per_session,
)
from tally import tables
from tally.arrivals import FIRST_ARRIVAL
from tally.dates import (
    DayBounds,
    business_day_bounds,
    epoch_ms,
    utc_dates_of,
    window_in_day,
)
from tally.ledger import TOTALS, date_rollup
from tally.money import (
    DEFAULT_CURRENCY,
    CurrencyError,
    check_currency,
    format_amounts,
    recorded_currency,
)
from tally.money_columns import with_currency
from tally.pins import frontier_of, read_at_frontier, within
from tally.settings import DEDUP_MODES, EVIDENCE_ROWS
from tally.spark import without_adaptive_execution
from tally.tolerance_columns import with_window_verdicts
from tally.tolerances import NO_RULE, ToleranceRule, rules_from_json
from tally.vocabulary import ARRIVAL_ORDER
from tally.windows import describe_windowing, slide_of, window_kind, windowing_problem

log = logging.getLogger("tally.reconcile")

BATCH_TABLES = tables.RECONCILE_TABLES
INPUT_TABLES = (tables.EVENTS, tables.STREAM_AGGREGATES, tables.LATE_EVENTS)


# The headline figures a run records in `reconciliation_runs`, as its summary names them
# (`batch.reproduce` compares a recomputation with them).
FIGURES = (
    "windows",
    *TOTALS,
    "late_events",
    "unexplained_windows",
    "unexplained_amount",
)


class ReconcileError(RuntimeError):
    """The run cannot start (missing table, bad argument): a one-line message."""


# -- the run ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReconcileFrames:
    """What a run read and wrote, for the later stages of the same process (`reconcile`'s
    `keep_frames`): the pinned reads, the date's `reconciliation` rows as written (persisted
    until `release`) and its `reconciliation_runs` row. Validation and the report take them
    instead of reading the tables back (a Delta file listing, and a snapshot of each version
    just written, per read)."""

    events: DataFrame
    stream_aggregates: DataFrame
    late_events: DataFrame
    stream_progress: DataFrame | None
    reconciliation: DataFrame
    run: dict[str, Any]

    def release(self) -> None:
        self.reconciliation.unpersist()


@dataclass(frozen=True)
class ReconcileResult:
    business_date: date
    events_version: int
    stream_aggregates_version: int
    late_events_version: int
    window_ms: int
    report_timezone: str
    summary: dict[str, Any] = field(default_factory=dict)
    # Late side-output rows of the date's windows that are not the first arrival of their
    # event_id (repeats beyond the stream's dedup horizon): left out of the late totals.
    late_repeats: int = 0
    window_slide_ms: int | None = None  # hopping windows slide by this (None: tumbling)
    session_gap_ms: int = 0  # session windows with this gap (0: fixed windows)
    # the stream_progress version whose bounds in force it recorded (None: no such table)
    stream_progress_version: int | None = None
    # what it read and wrote, when asked to keep it (`keep_frames`); the caller releases it
    frames: ReconcileFrames | None = field(default=None, compare=False, repr=False)
    currency: str = DEFAULT_CURRENCY  # the run's default_currency
    # the date's `reconciliation_summary` rows, one a currency (`summary` is their rollup)
    summaries: tuple[dict[str, Any], ...] = ()

    @property
    def windowing(self) -> str:
        """`tumbling 1m`, `hopping 5m every 1m` or `session, gap 10s`."""
        return describe_windowing(self.window_ms, self.window_slide_ms, self.session_gap_ms)

    @property
    def unexplained_windows(self) -> int:
        return int(self.summary["unexplained_windows"])

    @property
    def balanced(self) -> bool:
        return self.unexplained_windows == 0

    @property
    def stream_versions(self) -> dict[str, int]:
        versions = {
            "stream_aggregates": self.stream_aggregates_version,
            "late_events": self.late_events_version,
        }
        if self.stream_progress_version is not None:
            versions["stream_progress"] = self.stream_progress_version
        return versions

    def describe(self) -> str:
        """The one-paragraph summary the CLI prints."""
        s = self.summary
        rate = s["late_event_rate"]
        kind = f"windows: {self.windowing}"

        def money(column: str) -> str:  # each currency's on its own
            return format_amounts(self.summaries or (s,), column, self.currency)

        lines = [
            f"Reconciliation of {self.business_date.isoformat()} ({self.report_timezone}, "
            f"{kind}; events v{self.events_version}, stream_aggregates "
            f"v{self.stream_aggregates_version}, late_events v{self.late_events_version}): "
            f"{s['windows']:,} windows;",
            f"batch {s['batch_count']:,} events / {money('batch_amount')},",
            f"stream {s['stream_count']:,} events / {money('stream_amount')};",
            f"gap {s['gap_count']:,} events / {money('gap_amount')},",
            f"explained by late events {s['explained_count']:,} / {money('explained_amount')}",
            f"({s['explained_by_late_windows']:,} windows explained, "
            f"{s['missing_in_stream_windows']:,} missing in stream);",
            f"unexplained {s['unexplained_windows']:,} windows "
            f"(residual {s['unexplained_count']:,} events / {money('unexplained_amount')}, "
            f"|residual| {money('unexplained_abs_amount')});",
            "late rate "
            + ("n/a" if rate is None else f"{rate:.4%}")
            + (
                f" (max lateness {s['max_lateness_ms']:,} ms)."
                if s["max_lateness_ms"] is not None
                else "."
            ),
        ]
        if s.get("copies_count"):
            lines.append(
                f"The stream counted {s['copies_count']:,} copies of earlier events / "
                f"{money('copies_amount')} again (beyond its dedup horizon; "
                f"{s['explained_by_copies_windows']:,} windows EXPLAINED_BY_COPIES, listed in "
                "reconciliation_copies): explained = late events less these copies."
            )
        if self.late_repeats:
            lines.append(
                f"{self.late_repeats:,} late rows repeat an earlier event (beyond the dedup "
                "horizon): not counted."
            )
        if s["worst_keys"]:
            lines.append(f"Worst keys: {', '.join(s['worst_keys'])}.")
        if not self.balanced and s.get("severity") is not None:
            rule = s["tolerance_rule"]
            lines.append(
                f"Severity {s['severity']} ("
                + ("no materiality tolerance rule" if rule == NO_RULE else f"rule {rule!r}")
                + ")."
            )
        lines.append("BALANCED." if self.balanced else "UNEXPLAINED DIFFERENCES.")
        return " ".join(lines)


def _require_tables(spark: SparkSession, warehouse: str) -> None:
    for table in INPUT_TABLES:
        if not tables.exists(spark, warehouse, table.name):
            raise ReconcileError(
                f"{table.name}: no Delta table at {tables.table_path(warehouse, table.name)} "
                "(run the speed layer first)"
            )


def _ensure_outputs(spark: SparkSession, warehouse: str) -> None:
    """Bring the existing output tables up to date (a file-system check each). A missing one
    is created by its first write (`T.creates_on_write`): creating it empty first cost a
    commit, and the write after it a snapshot of that commit (a fresh warehouse: 16 Spark
    jobs of the nightly's ~190)."""
    for table in BATCH_TABLES:
        if not tables.exists(spark, warehouse, table.name):
            if not tables.creates_on_write(table):
                tables.ensure_table(spark, warehouse, table)
        elif table in (
            tables.BATCH_AGGREGATES,
            tables.RECONCILIATION,
            tables.RECONCILIATION_COPIES,
            tables.RECONCILIATION_RUNS,
            tables.RECONCILIATION_SUMMARY,
        ):
            # columns they gained
            tables.add_missing_columns(spark, warehouse, table)


def _pin(spark: SparkSession, warehouse: str, name: str, version: int | None) -> int:
    latest = tables.latest_version(spark, warehouse, name)
    if version is None:
        return latest
    if not 0 <= version <= latest:
        raise ReconcileError(f"{name}: version {version} does not exist (latest is {latest})")
    return int(version)


class PinExpired(ReconcileError):
    """A pin read by version whose commit the log no longer holds, or whose files VACUUM
    deleted (one line: the table, the version, what is kept)."""


# How Delta and Spark refuse a version a pin names: its commit cleaned from the log; older than
# the table's delta.deletedFileRetentionDuration (Delta refuses to time travel past it, whether
# or not VACUUM ran); one of its files deleted by VACUUM (a failed read, mid-run).
VERSION_NOT_FOUND = "DELTA_VERSION_NOT_FOUND"
BEYOND_RETENTION = "DELTA_UNSUPPORTED_TIME_TRAVEL_BEYOND_DELETED_FILE_RETENTION_DURATION"
FILE_NOT_FOUND = "FAILED_READ_FILE.FILE_NOT_EXIST"
_LOST = {VERSION_NOT_FOUND: "log", BEYOND_RETENTION: "retention"}


@dataclass(frozen=True)
class Pin:
    """A stream table as a run reads it: at `version`, or (`frontier` given) as its rows at
    or below that batch frontier in the latest snapshot (`tally.pins`: the same rows, and
    they survive compaction, VACUUM and log cleanup)."""

    name: str
    version: int
    frontier: Mapping[str, int] | None = None

    def read(self, spark: SparkSession, warehouse: str) -> DataFrame:
        if self.frontier is not None:
            return read_at_frontier(spark, warehouse, self.name, self.frontier)
        try:
            return tables.read_table(spark, warehouse, self.name, self.version)
        except AnalysisException as exc:
            lost = _LOST.get(str(exc.getCondition()))
            if lost is None:
                raise
            raise expired(spark, warehouse, self.name, self.version, lost) from None


def expired(spark: SparkSession, warehouse: str, name: str, version: int, lost: str) -> PinExpired:
    """The one-line PinExpired of a version `lost` to log cleanup ("log"), to the table's
    time-travel limit ("retention") or to VACUUM ("files"): what the table still keeps, and
    since when."""
    log_ = _delta_log(spark, warehouse, name)
    latest = _snapshot(log_)
    config = latest.metadata().configuration()

    def setting(key: str, default: str) -> str:
        found = config.get(key)
        return str(found.get()) if found.isDefined() else default

    if lost == "files":
        retention = setting("delta.deletedFileRetentionDuration", "interval 1 week")
        return PinExpired(
            f"{name} version {version} has expired (its files were vacuumed: kept are files "
            f"removed less than delta.deletedFileRetentionDuration={retention} ago)"
        )
    if lost == "retention":
        retention = setting("delta.deletedFileRetentionDuration", "interval 1 week")
        written = _commit_time(spark, log_, version)
        return PinExpired(
            f"{name} version {version} has expired ("
            + (f"written {written}, " if written else "")
            + "older than Delta time travel reaches back: "
            f"delta.deletedFileRetentionDuration={retention})"
        )
    earliest = _earliest(log_)
    since = _commit_time(spark, log_, earliest)
    retention = setting("delta.logRetentionDuration", "interval 30 days")
    return PinExpired(
        f"{name} version {version} has expired (kept: {earliest}-{latest.version()}"
        + (f", since {since}" if since else "")
        + f"; delta.logRetentionDuration={retention})"
    )


def _earliest(log_: Any) -> int:
    return int(log_.history().getEarliestRecreatableCommit())


def _delta_log(spark: SparkSession, warehouse: str, name: str) -> Any:
    from tally.spark import jvm_class

    delta_log = jvm_class(spark, "org.apache.spark.sql.delta.DeltaLog")
    return delta_log.forTable(spark._jsparkSession, tables.table_path(warehouse, name))


def _snapshot(log_: Any) -> Any:
    return log_.update(*[getattr(log_, f"update$default${i}")() for i in (1, 2, 3)])


def _commit_time(spark: SparkSession, log_: Any, version: int) -> str | None:
    """When the log file of `version` (its commit, else its checkpoint) was written, UTC."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    for suffix in ("json", "checkpoint.parquet"):
        path = jvm.org.apache.hadoop.fs.Path(f"{log_.logPath().toString()}/{version:020d}.{suffix}")
        fs = path.getFileSystem(conf)
        if fs.exists(path):
            written = datetime.fromtimestamp(
                fs.getFileStatus(path).getModificationTime() / 1000, UTC
            )
            return written.strftime("%Y-%m-%d %H:%M UTC")
    return None


def conditions(exc: BaseException) -> list[str]:
    """The Spark error conditions of `exc` and of the JVM exceptions it wraps (a failed read
    of a vacuumed file arrives as a failed job whose cause names the condition)."""
    found = []
    if isinstance(exc, PySparkException) and exc.getCondition():
        found.append(str(exc.getCondition()))
    java = getattr(exc, "_origin", None) or getattr(exc, "java_exception", None)
    while java is not None:
        try:
            condition = java.getCondition()
        except Py4JError:  # not a SparkThrowable
            condition = None
        if condition:
            found.append(str(condition))
        java = java.getCause()
    return found


def _replace_date(df: DataFrame, warehouse: str, table: tables.Table, business_date: date) -> None:
    tables.write_table(
        df, warehouse, table, replace_where=f"business_date = DATE'{business_date.isoformat()}'"
    )


def _read_date(
    spark: SparkSession, warehouse: str, table: tables.Table, business_date: date
) -> DataFrame:
    return tables.read_table(spark, warehouse, table.name).where(
        F.col("business_date") == F.lit(business_date)
    )


def _window_width() -> Column:
    return F.unix_millis("window_end") - F.unix_millis("window_start")


def stream_window_ms(
    spark: SparkSession,
    warehouse: str,
    business_date: date | None = None,
    report_timezone: str = "UTC",
) -> int | None:
    """The window size the stream recorded in `stream_aggregates` (of the date's windows when
    a date is given and has any, else of the newest row); None when it emitted nothing."""
    rows = tables.read_table(spark, warehouse, tables.STREAM_AGGREGATES.name)
    if business_date is not None:
        bounds = business_day_bounds(business_date, report_timezone)
        of_day = rows.where(window_in_day(bounds)).select(_window_width().alias("ms")).first()
        if of_day is not None:
            return int(of_day["ms"])
    newest = rows.orderBy(F.col("emit_time").desc()).select(_window_width().alias("ms")).first()
    return None if newest is None else int(newest["ms"])


def _check_window_size(
    stream: DataFrame, window_ms: int, business_date: date, slide_ms: int | None = None
) -> None:
    """The stream's windows of the date have the size, and start on the slide's grid (a
    hopping stream reconciled as tumbling windows would fail here)."""
    width = _window_width()
    slide = slide_of(window_ms, slide_ms)
    off_grid = F.pmod(F.unix_millis("window_start"), F.lit(slide)) != F.lit(0)
    # one aggregate (one job; `first()` of a filter that matches nothing ran a job per
    # growing batch of files): the earliest offending window, a wrong width before a slide
    offending = stream.where((width != F.lit(window_ms)) | off_grid).select(
        F.struct(
            (width == F.lit(window_ms)).alias("width_ok"),
            F.unix_millis("window_start").alias("start"),
            width.alias("ms"),
        ).alias("o")
    )
    found = offending.agg(F.min("o").alias("o")).first()
    other = None if found is None else found["o"]
    if other is None:
        return
    if other["ms"] != window_ms:
        raise ReconcileError(
            f"window: stream_aggregates holds {other['ms']} ms windows on "
            f"{business_date.isoformat()}, but the window is {window_ms} ms"
        )
    raise ReconcileError(
        f"window_slide: stream_aggregates holds a window starting at {other['start']} ms on "
        f"{business_date.isoformat()}, off the {slide} ms slide (did the stream hop?)"
    )


def _checked_windowing(window_ms: int, slide_ms: int | None, gap_ms: int) -> None:
    """The window, slide and session gap make one windowing (one-line ReconcileError)."""
    problem = windowing_problem(window_ms, slide_ms, gap_ms)
    if problem is not None:
        raise ReconcileError(problem)


def _checked_bounds(
    windowing: tuple[int, int | None, int],
    now: datetime,
    stream_versions: Mapping[str, Any],
    business_date: date,
    zone: str,
) -> DayBounds:
    """The date's bounds, after the arguments are checked (one-line ReconcileError);
    `windowing` is (window_ms, slide_ms, session_gap_ms)."""
    _checked_windowing(*windowing)
    if now.tzinfo is None:
        raise ReconcileError("now: needs a time zone")
    unknown = set(stream_versions) - {"stream_aggregates", "late_events", "stream_progress"}
    if unknown:
        raise ReconcileError(
            f"stream_versions: unknown table(s) {', '.join(sorted(unknown))} "
            "(expected stream_aggregates, late_events, stream_progress)"
        )
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError, IsADirectoryError):  # not a zone's name
        raise ReconcileError(f"report_timezone: unknown time zone {zone!r}") from None
    try:
        return business_day_bounds(business_date, zone)
    except OverflowError:  # the last date there is has no next midnight
        raise ReconcileError(f"business_date: {business_date} has no end (out of range)") from None


def _windowing_settings(window_ms: int, slide_ms: int | None, gap_ms: int) -> dict[str, Any]:
    """How the run windowed, as `reconciliation_runs.settings` records it (a session run has
    no slide; a fixed-window run records no gap, as before session windows)."""
    if gap_ms:
        return {
            "window_ms": window_ms,
            "window_slide_ms": None,
            "session_gap_ms": gap_ms,
            "window_kind": window_kind(window_ms, None, gap_ms),
        }
    return {
        "window_ms": window_ms,
        "window_slide_ms": slide_of(window_ms, slide_ms),
        "window_kind": window_kind(window_ms, slide_ms),
    }


def _provenance(
    one_row: DataFrame,
    figures: Mapping[str, Any],
    pinned: Pinned,
    windowing: tuple[int, int | None, int],
    report_timezone: str,
    now: datetime,
    settings: Mapping[str, Any] | None,
) -> DataFrame:
    """The `reconciliation_runs` row (`one_row`: a frame of one row of the date): what was
    read (versions and batch frontiers), with which settings, and the date's `figures`
    (`date_rollup`: amounts only with one currency); `windowing` is (window_ms, slide_ms,
    session_gap_ms). The stream's bounds in force are joined on by the caller
    (`_with_bounds`)."""
    window_ms = windowing[0]
    settings_json = json.dumps(
        {
            **dict(settings or {}),
            **_windowing_settings(*windowing),
            "report_timezone": report_timezone,
        },
        sort_keys=True,
        default=str,
    )
    frontiers = F.create_map(
        *[
            x
            for name, frontier in sorted(pinned.frontiers.items())
            for x in (F.lit(name), tables.literal_map(frontier, "string", "bigint"))
        ]
    ).cast("map<string,map<string,bigint>>")
    return one_row.select(
        "business_date",
        _run_time(now).alias("run_time"),
        F.lit(pinned.events).cast("long").alias("events_version"),
        F.lit(pinned.stream_aggregates).cast("long").alias("stream_aggregates_version"),
        F.lit(pinned.late_events).cast("long").alias("late_events_version"),
        F.lit(window_ms).cast("long").alias("window_ms"),
        F.lit(report_timezone).alias("report_timezone"),
        F.lit(settings_json).alias("settings"),
        *[F.lit(figures[c]).cast("long").alias(c) for c in FIGURES],
        F.lit(figures["unexplained_windows"] == 0).alias("balanced"),
        F.lit(pinned.stream_progress).cast("long").alias("stream_progress_version"),
        frontiers.alias("pin_frontiers"),
        F.array(*[F.lit(c) for c in figures["currencies"]]).alias("currencies"),
    )


def _with_bounds(provenance: DataFrame, progress: DataFrame | None, run: _Run) -> DataFrame:
    """The provenance row with the `stream_progress` version read and, per partition, the
    lateness bounds in force over the micro-batches that carried the date (`batch.bounds`;
    nulls without a stream_progress table)."""
    in_force = bounds_of_day(progress, run.bounds)
    if in_force is None:
        maps = [F.lit(None).cast("map<int,bigint>").alias(c) for c in BOUND_COLUMNS]
        return provenance.select("*", *maps)
    return provenance.crossJoin(in_force)


@dataclass(frozen=True)
class _Run:
    """One run: where it writes, the date (its zone and bounds), the pinned tables read."""

    spark: SparkSession
    warehouse: str
    business_date: date
    report_timezone: str
    bounds: DayBounds
    events: DataFrame
    stream_aggregates: DataFrame
    late_events: DataFrame
    now: datetime  # the run's run_time
    # Frames persisted for the run (`keep`); `reconcile` unpersists them at its end.
    kept: list[DataFrame] = field(default_factory=list)
    # `keep_frames`: the run hands what it wrote over (`ReconcileFrames`)
    hand_over: bool = False
    # False: the run computes what it would write and writes nothing (`batch.reproduce`)
    writes: bool = True
    # `dedup = index`: the index of event ids as the run probes it (`batch.firsts`);
    # None: `dedup = full`, the whole log's repeated ids are ranked
    firsts: DataFrame | None = None
    # the pinned log's batch frontier (`tally.pins`): which late rows' lines it holds
    events_frontier: Mapping[str, int] = field(default_factory=dict)
    # the materiality tolerance rules grading the rows, and the rows' currency
    tolerance: tuple[ToleranceRule, ...] = ()
    currency: str = DEFAULT_CURRENCY
    # at most this many `reconciliation_evidence` rows of each kind per UNEXPLAINED window
    evidence_rows: int = EVIDENCE_ROWS

    def keep(self, df: DataFrame) -> DataFrame:
        """`df` persisted until the run ends: written once, then reused instead of being
        recomputed or read back from the table just written."""
        self.kept.append(df.persist())
        return df

    def in_log(self) -> Column:
        """Whether a late row's line is in the pinned log (`tally.pins.within` its frontier)."""
        return within(self.events_frontier)

    def release(self) -> None:
        for df in self.kept:
            df.unpersist()
        self.kept.clear()

    def replace(self, df: DataFrame, table: tables.Table) -> None:
        if self.writes:
            _replace_date(df, self.warehouse, table, self.business_date)


@dataclass(frozen=True)
class Diff:
    """What the re-aggregation and diff of a run give its later phases (all kept):
    the date's `reconciliation` rows, its late rows that explain (`explaining_rows`: the
    figures' lateness), the log's ranked copies (`log_copies`: the figures' repeats) and how
    many late rows repeat an earlier event."""

    reconciliation: DataFrame
    explaining: DataFrame
    copies: DataFrame
    repeats: int


@dataclass(frozen=True)
class Recorded:
    """What a run recorded: its `reconciliation_summary` row, and (when it hands its frames
    over) its `reconciliation_runs` row as the table holds it and the `stream_progress`
    version it read."""

    summary: dict[str, Any]  # the date's figures (`tally.ledger.date_rollup` of `summaries`)
    summaries: tuple[dict[str, Any], ...]  # its `reconciliation_summary` rows, by currency
    run: dict[str, Any] | None = None
    stream_progress: DataFrame | None = None


def _write_diff(
    run: _Run,
    batch: DataFrame,
    stream: DataFrame,
    late: DataFrame,
    copies: Copies,
    windows: tuple[int, int | None] | None = None,
) -> Diff:
    """Write the date's `reconciliation` rows from the batch side, the stream's answer, the
    late rows (`late_arrivals`, kept: ranked and counted from the cache) and, for fixed
    `windows` (size, slide), the copies the stream counted (`counted_copies`, written to
    `reconciliation_copies`); returns them (kept: the summary is computed from them) with the
    explaining late rows and how many late rows repeat an earlier event."""
    late = run.keep(late)
    # ranked once for the diff's late totals and the figures' lateness (narrow: kept)
    explaining = run.keep(explaining_rows(late))
    counted = None
    if windows is not None:
        counted = run.keep(counted_copies(copies, late, run.bounds, *windows))
        _write_evidence(run, counted, copies)
    totals = None if counted is None else copy_totals(counted)
    rows = diff_windows(batch, stream, late_totals(explaining), run.business_date, totals)
    rows = with_window_verdicts(rows, run.tolerance, F.col("currency"))
    # in the table's column order (the handed-over frame is what the table holds)
    diff = run.keep(
        tables.conform(
            rows.select("*", _run_time(run.now).alias("run_time")), tables.RECONCILIATION
        )
    )
    run.replace(diff, tables.RECONCILIATION)
    repeats = late.where(~F.col(FIRST_ARRIVAL)).count()
    return Diff(diff, explaining, copies.lines, repeats)


def _write_evidence(run: _Run, counted: DataFrame, copies: Copies) -> None:
    """The date's `reconciliation_copies` rows (`counted`, kept): replaced like the date's
    other rows, so a re-run that finds none clears an earlier run's; a warehouse whose runs
    never found any has no such table (no commit, no empty table)."""
    name = tables.RECONCILIATION_COPIES.name
    if counted.limit(1).count() == 0 and not tables.exists(run.spark, run.warehouse, name):
        return
    evidence = copy_evidence(counted, copies, run.business_date)
    run.replace(
        evidence.select("*", _run_time(run.now).alias("run_time")), tables.RECONCILIATION_COPIES
    )


def _diff_fixed(run: _Run, window_ms: int, slide_ms: int | None) -> Diff:
    """Fixed windows: re-aggregate the date into `batch_aggregates` (persisted while it is
    written, so the diff reuses the dedup instead of reading the table back), then the diff."""
    day, bounds = run.business_date, run.bounds
    stream_rows = run.stream_aggregates.where(window_in_day(bounds))
    # The window check and the diff run without adaptive execution (`without_adaptive_
    # execution`), which made a Spark job of each shuffle stage: the batch side is persisted,
    # the stream side has a row per window, the late rows are few and the log is filtered by
    # a broadcast set of their hashes (a 200k-event day: the diff's write 13 -> 5 jobs).
    # The re-aggregation keeps it: its sides are known only at run time.
    with without_adaptive_execution(run.spark):
        _check_window_size(stream_rows, window_ms, day, slide_ms)
    stream = latest_stream(stream_rows, bounds)
    # only the columns the diff and the figures read (`LATE_COLUMNS`: not `extra`, a map, nor
    # the watermark, delay and reason columns); not kept: `late_arrivals` reads them once
    # per branch, a narrow scan, and keeps what it marks (1.4M late rows of a 20M-event day
    # cached twice cost more than the second scan)
    rows = run.late_events.where(window_in_day(bounds)).select(*LATE_COLUMNS)
    copies = _kept_copies(run, window_ms)
    truth = run.keep(
        batch_aggregates(run.events, day, window_ms, run.report_timezone, slide_ms, copies)
    )
    run.replace(truth, tables.BATCH_AGGREGATES)
    with without_adaptive_execution(run.spark):  # the late rows and copies are kept
        late = late_arrivals(rows, copies, bounds, run.in_log())
        diff = _write_diff(run, truth, stream, late, copies, (window_ms, slide_ms))
    windows = _unexplained_for_evidence(run, diff.reconciliation)
    if windows is not None:
        events = day_events(
            run.events,
            day,
            window_ms,
            run.report_timezone,
            slide_ms=slide_ms,
            copies=copies,
            columns=EVENT_COLUMNS,
        )
        firsts = with_window_answers(events, latest_final_rows(stream_rows, bounds), windows)
        _write_window_evidence(run, windows, firsts, late, stream_rows)
    return diff


def _unexplained_for_evidence(run: _Run, recon: DataFrame) -> DataFrame | None:
    """The date's UNEXPLAINED windows (kept) when the run writes their evidence; None when it
    writes none (a run that writes nothing, or a date without one: its earlier evidence is
    cleared, without reading the log again; a warehouse whose runs never found one has no
    such table)."""
    if not run.writes:
        return None
    windows = run.keep(unexplained_windows(recon))
    if windows.limit(1).count() > 0:
        return windows
    table = tables.RECONCILIATION_EVIDENCE
    if tables.exists(run.spark, run.warehouse, table.name):
        run.replace(tables.empty_frame(run.spark, table), table)
    return None


def _write_window_evidence(
    run: _Run, windows: DataFrame, firsts: DataFrame, late: DataFrame, stream_rows: DataFrame
) -> None:
    """The date's `reconciliation_evidence` rows (`batch.evidence`) for its UNEXPLAINED
    `windows`, replaced like its other rows: `firsts` (with their answers), the late rows
    placed in the windows, and the stream rows placed in them."""
    cap = run.evidence_rows
    rows = evidence_rows(
        run.business_date,
        event_evidence(firsts, late, windows, cap),
        late_evidence(late, windows, cap),
        revision_evidence(stream_rows, windows, cap),
    )
    run.replace(
        rows.select("*", _run_time(run.now).alias("run_time")), tables.RECONCILIATION_EVIDENCE
    )


def _kept_copies(run: _Run, window_ms: int) -> Copies:
    """The log's copies the run ranks once (`ranked_hashes` of the repeated ids), kept with
    the repeated ids: the re-aggregation takes its first arrivals from them, the diff its
    late rows' marks and the figures per partition their repeats, so the log is scanned for
    them once. `--dedup full`: the ids repeated anywhere in the log, ranked over the whole
    log; `--dedup index`: those repeated in the date's partitions or with an index entry
    outside them (`batch.firsts`), ranked over the date's lines and those entries."""
    if run.firsts is None:
        repeated = run.keep(repeated_ids(run.events))
        lines = log_copies(run.events, ranked_hashes(repeated))
        return Copies(repeated, run.keep(lines))
    dates = utc_dates_of(run.bounds, window_ms)
    day, repeated, outside = day_copies(run.events, run.firsts, dates, COPY_COLUMNS, run.keep)
    hashes = ranked_hashes(repeated)
    return Copies(repeated, run.keep(ranked_copies(day, outside, hashes, ARRIVAL_ORDER)))


def _diff_sessions(run: _Run, gap_ms: int) -> Diff:
    """Session windows: the date's sessions into `batch_aggregates`, then the diff per batch
    session (`batch.sessions`)."""
    try:
        check_session_width(
            run.stream_aggregates.where(window_in_day(run.bounds)), gap_ms, run.business_date
        )
        reach = stream_reach_ms(latest_stream(run.stream_aggregates, run.bounds), run.bounds)
        reach_row = reach.first()
        sessions, read_end = date_sessions(
            run.events,
            run.bounds,
            gap_ms,
            None if reach_row is None else reach_row["reach"],
            run.business_date,
        )
    except SessionError as exc:
        raise ReconcileError(str(exc)) from None
    truth = session_aggregates(sessions, run.bounds)
    truth = run.keep(truth.select(F.lit(run.business_date).alias("business_date"), *truth.columns))
    try:
        run.replace(truth, tables.BATCH_AGGREGATES)
        read = (run.bounds[0], read_end)  # what starts from the date to the end of the read
        stream = stream_per_session(
            latest_stream(run.stream_aggregates, read), sessions, run.bounds
        )
        rows = run.late_events.where(window_in_day(read))
        copies = _kept_copies(run, 0)
        late = late_arrivals(rows, copies, read, run.in_log())
        late = late_per_session(late, sessions, run.bounds)
        diff = _write_diff(run, truth, stream, late, copies)
        windows = _unexplained_for_evidence(run, diff.reconciliation)
        if windows is not None:
            current = latest_final_rows(run.stream_aggregates, read)
            events = first_arrivals_in(run.events, read, columns=EVENT_COLUMNS)
            firsts = events_per_session(with_session_answers(events, current), sessions, run.bounds)
            stream_rows = stream_rows_per_session(
                run.stream_aggregates.where(window_in_day(read)), sessions, run.bounds
            )
            _write_window_evidence(run, windows, firsts, late, stream_rows)
        return diff
    finally:
        sessions.unpersist()


def reconcile(
    spark: SparkSession,
    warehouse: str,
    business_date: date,
    window_ms: int,
    report_timezone: str = "UTC",
    events_version: int | None = None,
    stream_versions: Mapping[str, int | None] | None = None,
    *,
    now: datetime,
    settings: Mapping[str, Any] | None = None,
    window_slide_ms: int | None = None,
    session_gap_ms: int = 0,
    keep_frames: bool = False,
    frontiers: Mapping[str, Mapping[str, int]] | None = None,
    write: bool = True,
    dedup: str = "index",
    tolerance: Sequence[ToleranceRule] = (),
    currency: str = DEFAULT_CURRENCY,
    evidence_rows: int = EVIDENCE_ROWS,
) -> ReconcileResult:
    """Re-aggregate `business_date`, diff it against the stream, write the four tables.

    Versions not given are pinned to the latest (read from the Delta history, then read with
    versionAsOf, so the run records exactly what it read). `stream_versions` may hold
    `stream_aggregates` and `late_events`. `now` is the run time recorded in
    `reconciliation_runs` (the entry point passes the wall clock); `settings` (JSON-able)
    is recorded with it. Re-running with the recorded pins reproduces the same rows.
    `window_slide_ms`: hopping windows of `window_ms` sliding by it (None: tumbling).
    `session_gap_ms`: session windows with this gap instead (0: fixed windows; `window_ms`
    is then only recorded). `keep_frames`: the result's `frames` hold what the run read and
    wrote (`ReconcileFrames`; the caller releases them). `frontiers`: per table, the batch
    frontier a run recorded at its version: the table is read at it instead (`Pin`).
    `write=False`: compute everything, write nothing (the frames then hold what it would
    have written). `dedup`: how first arrivals over the whole log are found, "index" (the
    index of event ids, read only: `batch.firsts.catch_up` appends to it after the run; not
    for session windows) or "full" (every repeated id of the log ranked); both give the
    same rows. `tolerance`: the materiality rules that grade each row and the date
    (`severity`, `tolerance_rule`; none: every residual fails); `currency`: the rows'.
    `evidence_rows`: the cap per kind of each UNEXPLAINED window's `reconciliation_evidence`.
    """
    if dedup not in DEDUP_MODES:
        raise ReconcileError(f"dedup: expected one of {', '.join(DEDUP_MODES)}, got {dedup!r}")
    slide_ms = window_slide_ms if window_slide_ms != window_ms else None
    windowing = (window_ms, slide_ms, session_gap_ms)
    stream_versions = dict(stream_versions or {})
    bounds = _checked_bounds(windowing, now, stream_versions, business_date, report_timezone)
    _require_tables(spark, warehouse)
    pins = _pins(spark, warehouse, events_version, stream_versions, frontiers or {})
    reads = _pinned_reads(spark, warehouse, pins, currency)
    if write:
        _ensure_outputs(spark, warehouse)
    pinned = Pinned.of(pins, reads)
    firsts = None
    if dedup == "index" and not session_gap_ms:
        pin = pinned.frontiers[tables.EVENTS.name]
        dates = utc_dates_of(bounds, window_ms)
        firsts = index_for_run(spark, warehouse, reads[tables.EVENTS.name], pin, dates)
    run = _Run(
        spark,
        warehouse,
        business_date,
        report_timezone,
        bounds,
        reads[tables.EVENTS.name],
        reads[tables.STREAM_AGGREGATES.name],
        reads[tables.LATE_EVENTS.name],
        now,
        hand_over=keep_frames,
        writes=write,
        firsts=firsts,
        events_frontier=pinned.frontiers[tables.EVENTS.name],
        tolerance=tuple(tolerance),
        currency=currency,
        evidence_rows=evidence_rows,
    )
    try:
        return _run(run, pinned, windowing, settings)
    finally:
        run.release()


def _pinned_reads(
    spark: SparkSession, warehouse: str, pins: Mapping[str, Pin], currency: str
) -> dict[str, DataFrame]:
    """Each input table as pinned, its rows from before currencies in the run's `currency`."""
    reads = {name: pin.read(spark, warehouse) for name, pin in pins.items()}
    for name in (tables.EVENTS.name, tables.STREAM_AGGREGATES.name, tables.LATE_EVENTS.name):
        reads[name] = with_currency(reads[name], currency)
    return reads


def _pins(
    spark: SparkSession,
    warehouse: str,
    events_version: int | None,
    stream_versions: Mapping[str, int | None],
    frontiers: Mapping[str, Mapping[str, int]],
) -> dict[str, Pin]:
    """The run's pin of each stream table it reads (`stream_progress` only if the warehouse
    has one: without it a run records no bounds in force)."""
    wanted: dict[str, int | None] = {
        tables.EVENTS.name: events_version,
        tables.STREAM_AGGREGATES.name: stream_versions.get(tables.STREAM_AGGREGATES.name),
        tables.LATE_EVENTS.name: stream_versions.get(tables.LATE_EVENTS.name),
    }
    if tables.exists(spark, warehouse, tables.STREAM_PROGRESS.name):
        wanted[tables.STREAM_PROGRESS.name] = stream_versions.get(tables.STREAM_PROGRESS.name)
    return {
        name: Pin(name, _pin(spark, warehouse, name, version), frontiers.get(name))
        for name, version in wanted.items()
    }


@dataclass(frozen=True)
class Pinned:
    """What a run read: the version of each table, and its batch frontier there (recorded in
    `reconciliation_runs.pin_frontiers`); `stream_progress` None without that table."""

    events: int
    stream_aggregates: int
    late_events: int
    stream_progress: int | None
    stream_progress_rows: DataFrame | None
    frontiers: dict[str, dict[str, int]]

    @classmethod
    def of(cls, pins: Mapping[str, Pin], reads: Mapping[str, DataFrame]) -> Pinned:
        """The pins and their frontiers: the recorded one of a table read at its frontier,
        else that of its rows at the version read (a small aggregate of two columns)."""
        frontiers = {
            name: dict(pin.frontier) if pin.frontier is not None else frontier_of(reads[name])
            for name, pin in pins.items()
        }
        progress = pins.get(tables.STREAM_PROGRESS.name)
        return cls(
            pins[tables.EVENTS.name].version,
            pins[tables.STREAM_AGGREGATES.name].version,
            pins[tables.LATE_EVENTS.name].version,
            None if progress is None else progress.version,
            reads.get(tables.STREAM_PROGRESS.name),
            frontiers,
        )


def _handed_over(run: _Run, diff: Diff, recorded: Recorded) -> ReconcileFrames:
    """The run's `ReconcileFrames`: its reconciliation rows leave `run.kept` (still persisted)
    and become the caller's to release."""
    recon = diff.reconciliation
    if not recon.is_cached:
        recon.persist()
    run.kept[:] = [df for df in run.kept if df is not recon]
    assert recorded.run is not None  # a run that hands over records its row
    return ReconcileFrames(
        run.events,
        run.stream_aggregates,
        run.late_events,
        recorded.stream_progress,
        recon,
        recorded.run,
    )


def _run(
    run: _Run,
    pinned: Pinned,
    windowing: tuple[int, int | None, int],
    settings: Mapping[str, Any] | None,
) -> ReconcileResult:
    """Re-aggregate, diff, summarize and record the run (`reconcile`, once the inputs are
    pinned); `run.kept` frames are the caller's to release."""
    business_date, report_timezone = run.business_date, run.report_timezone
    window_ms, slide_ms, session_gap_ms = windowing
    # 2.-3. Re-aggregation and diff.
    if session_gap_ms:
        diff = _diff_sessions(run, session_gap_ms)
    else:
        diff = _diff_fixed(run, window_ms, slide_ms)
    if run.writes:  # the report's figures per source partition, before the run's row
        write_partition_figures(
            run.spark,
            run.warehouse,
            business_date,
            run.events,
            diff.copies,
            diff.explaining,
            run.bounds,
            run.now,
        )
    if diff.repeats:
        log.info(
            "%s: %d late side-output row(s) repeat an event_id that arrived earlier (beyond "
            "the stream's dedup horizon); counted neither in the truth nor as late",
            business_date.isoformat(),
            diff.repeats,
        )
    # The summary of the rows just written (kept: not read back from the table), itself kept
    # for its row and the provenance; it and the run's row are small (one row each, from
    # persisted frames): planned without AQE, which made a Spark job of each shuffle stage.
    with without_adaptive_execution(run.spark):
        recorded = _write_summary_and_run(run, diff.reconciliation, pinned, windowing, settings)
    return ReconcileResult(
        business_date,
        pinned.events,
        pinned.stream_aggregates,
        pinned.late_events,
        window_ms,
        report_timezone,
        recorded.summary,
        diff.repeats,
        slide_ms or None,
        session_gap_ms,
        pinned.stream_progress,
        frames=_handed_over(run, diff, recorded) if run.hand_over else None,
        currency=run.currency,
        summaries=recorded.summaries,
    )


def _write_summary_and_run(
    run: _Run,
    recon: DataFrame,
    pinned: Pinned,
    windowing: tuple[int, int | None, int],
    settings: Mapping[str, Any] | None,
) -> Recorded:
    """Write the date's `reconciliation_summary` row (kept: not read back from the table) and
    add its `reconciliation_runs` row (`_provenance`), numbered after the date's runs."""
    summary_df = run.keep(summarize(recon, run.business_date, run.tolerance, run.currency))
    run.replace(summary_df, tables.RECONCILIATION_SUMMARY)
    rows = tuple(r.asDict() for r in summary_df.orderBy("currency").collect())  # one a currency
    rollup = date_rollup(rows)
    assert rollup is not None  # a date without windows has its one row too

    # 4. Provenance: what was read, with which settings.
    provenance = _provenance(
        summary_df.limit(1), rollup, pinned, windowing, run.report_timezone, run.now, settings
    ).select("*", F.lit(_next_run_number(run)).cast("long").alias("run_number"))
    provenance = _with_bounds(provenance, pinned.stream_progress_rows, run)
    if run.hand_over:  # the row as the table holds it, kept while written, for the caller
        provenance = run.keep(tables.conform(provenance, tables.RECONCILIATION_RUNS))
    if run.writes:
        tables.write_table(
            provenance,
            run.warehouse,
            tables.RECONCILIATION_RUNS,
            replace_where=f"{_date_is(run.business_date)} AND {_run_is(run.now)}",
        )
    if not run.hand_over:
        return Recorded(rollup, rows)
    written = provenance.first()
    assert written is not None
    return Recorded(rollup, rows, written.asDict(), pinned.stream_progress_rows)


def _date_is(business_date: date) -> str:
    return f"business_date = DATE'{business_date.isoformat()}'"


def _run_is(run_time: datetime) -> str:
    return f"run_time = timestamp_millis({epoch_ms(run_time)})"


def _run_time(now: datetime) -> Column:
    return F.timestamp_millis(F.lit(epoch_ms(now)))


def _next_run_number(run: _Run) -> int:
    """The number of the run among its date's runs: one more than the date's latest (a row
    from before run history has none: it counts as 0), or the latest's own when this run
    replaces it (the same run_time again: re-running a run is idempotent). The nightly is
    the date's one writer."""
    if not tables.exists(run.spark, run.warehouse, tables.RECONCILIATION_RUNS.name):
        return 1
    runs = _read_date(run.spark, run.warehouse, tables.RECONCILIATION_RUNS, run.business_date)
    if "run_number" not in runs.columns:  # from before run history (upgraded when written)
        return 1
    number = F.coalesce("run_number", F.lit(0))
    latest = (
        runs.select(
            number.alias("n"), (F.unix_millis("run_time") == epoch_ms(run.now)).alias("same")
        )
        .agg(F.max(F.struct("n", "same")).alias("latest"))
        .first()
    )
    if latest is None or latest["latest"] is None:
        return 1
    n, same = latest["latest"]
    return int(n) if same and n else int(n) + 1


def runs_of(spark: SparkSession, warehouse: str, business_date: date) -> list[dict[str, Any]]:
    """Every `reconciliation_runs` row of the date, oldest first (in the order recorded)."""
    if not tables.exists(spark, warehouse, tables.RECONCILIATION_RUNS.name):
        return []
    rows = [
        r.asDict()
        for r in _read_date(spark, warehouse, tables.RECONCILIATION_RUNS, business_date).collect()
    ]
    return sorted(rows, key=lambda r: (r.get("run_number") or 0, r["run_time"]))


def recorded_run(
    spark: SparkSession,
    warehouse: str,
    business_date: date,
    run_time: datetime | None = None,
) -> dict[str, Any] | None:
    """The date's latest `reconciliation_runs` row (the one its other tables hold), or its
    run at `run_time`; None if there is none."""
    runs = runs_of(spark, warehouse, business_date)
    if run_time is None:
        return runs[-1] if runs else None
    named = [r for r in runs if _same_moment(r["run_time"], run_time)]
    return named[-1] if named else None


def _same_moment(recorded: datetime, wanted: datetime) -> bool:
    """A recorded run_time (Spark returns session-local naive datetimes) is `wanted`."""
    return epoch_ms(aware(recorded)) == epoch_ms(wanted)


def aware(value: datetime) -> datetime:
    """A timestamp as Spark collects it (naive, the process's local time) made aware."""
    return value if value.tzinfo is not None else value.astimezone(UTC)


def recorded_frontiers(run: Mapping[str, Any]) -> dict[str, dict[str, int]] | None:
    """The batch frontiers a run recorded (None: a run from before them, read by version)."""
    frontiers = run.get("pin_frontiers")
    if frontiers is None:
        return None
    return {name: {str(a): int(b) for a, b in f.items()} for name, f in frontiers.items()}


def rerun_arguments(run: Mapping[str, Any]) -> dict[str, Any]:
    """`reconcile`'s arguments that re-run a recorded run at its pins, windowing and zone."""
    recorded = json.loads(run["settings"])
    return {
        "window_ms": int(run["window_ms"]),
        "report_timezone": str(run["report_timezone"]),
        "events_version": int(run["events_version"]),
        "stream_versions": {
            "stream_aggregates": int(run["stream_aggregates_version"]),
            "late_events": int(run["late_events_version"]),
            # absent before the bounds in force were recorded: the latest
            "stream_progress": run.get("stream_progress_version"),
        },
        "settings": recorded,
        "window_slide_ms": recorded.get("window_slide_ms"),  # absent before hopping windows
        "session_gap_ms": int(recorded.get("session_gap_ms") or 0),  # absent: fixed windows
        "frontiers": recorded_frontiers(run),
        # absent before tolerances: none (every residual failed), in the default currency
        "tolerance": rules_from_json(recorded.get("tolerance", "[]")),
        "currency": _recorded_currency(recorded),
    }


def _recorded_currency(recorded: Mapping[str, Any]) -> str:
    """The run's `default_currency` (what its rows from before currencies are read as), or a
    ReconcileError in one line when what it recorded is no currency code."""
    try:
        return check_currency(recorded_currency(recorded))
    except CurrencyError as exc:
        raise ReconcileError(f"reconciliation_runs.settings: default_currency: {exc}") from None


def reproduce(
    spark: SparkSession,
    warehouse: str,
    business_date: date,
    *,
    now: datetime,
    run_time: datetime | None = None,
) -> ReconcileResult:
    """Re-run the date at the pins, windowing and zone of its latest run (or of its run at
    `run_time`), and write it as a new run (`batch.reproduce.verify` writes nothing)."""
    run = recorded_run(spark, warehouse, business_date, run_time)
    if run is None:
        raise never_reconciled(business_date, run_time)
    return reconcile(spark, warehouse, business_date, now=now, **rerun_arguments(run))


def never_reconciled(business_date: date, run_time: datetime | None) -> ReconcileError:
    if run_time is None:
        return ReconcileError(f"date: {business_date.isoformat()} was never reconciled")
    return ReconcileError(
        f"run_time: {business_date.isoformat()} has no run at {run_time.isoformat()}"
    )
