"""The report's data: the business date's tables read and reduced to what the report shows
(small, local Python values in `ReportData`), and the exact formatting of its figures.

The completeness curve comes from the caller (`ReportOptions.curve`: dicts with at least
`lateness_ms` and `completeness_pct`, e.g. `tally lateness-curve --json`'s "curve"). Without
one, it is estimated from the late side output: shifting the watermark down by D admits
exactly the late events with `lateness_ms < G + D` (G = allowed lateness), so completeness at
bound L + D is `1 - late events with lateness_ms >= G + D / batch events`. Without late
events and a known current bound the chart says "not computed".

Late events, wherever the report counts them (histogram, estimated curve, partitions), are
the ones the reconciliation counts: first arrivals of their event_id (`tally.arrivals`), not
repeats the stream classified as late after its dedup horizon. The reconciliation writes
these figures (`reconciliation_partitions`, `batch.partitions`); the report takes them for the
run it reports on (`_recorded_figures`) and reads the pinned log only without them (`_read_log`).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from tally import tables as T
from tally.arrivals import (
    FIRST_ARRIVAL,
    LINE_IDENTITY,
    event_of_day,
    explaining_late,
    first_line,
    marked_first,
)
from tally.completeness import meets_target
from tally.dates import DayBounds, business_day_bounds, in_day, window_in_day
from tally.ledger import COPIES_SHOWN, COPY_COLUMNS, date_rollup, run_currency
from tally.money import DEFAULT_CURRENCY, recorded_currency
from tally.money_columns import with_currency
from tally.pins import read_at_frontier
from tally.settings import (
    LATENESS_AUTO,
    SettingsError,
    format_duration,
    parse_duration,
    setting_default,
)
from tally.spark import without_adaptive_execution
from tally.vocabulary import ARRIVAL_ORDER, LATE, UNEXPLAINED
from tally.windows import describe_windowing as windowing_text

# Candidate shifts of the lateness bound for the estimated curve.
CURVE_SHIFTS_MS = (
    0,
    1_000,
    2_000,
    5_000,
    10_000,
    30_000,
    60_000,
    120_000,
    300_000,
    600_000,
    1_800_000,
    3_600_000,
)
LATENESS_BINS_MS = (0, 1_000, 5_000, 10_000, 30_000, 60_000, 300_000, 600_000, 1_800_000)
WORST_KEYS = 10
# The allowed lateness of a run that recorded none: the setting's default.
ALLOWED_LATENESS_DEFAULT_MS: int = setting_default("allowed_lateness")


class ReportError(RuntimeError):
    """The report cannot be built (missing table, bad argument): a one-line message."""


def format_count(count: int) -> str:
    return f"{count:,}"


def format_rate(rate: float | None) -> str:
    return "n/a" if rate is None else f"{rate * 100:.3f} %"


# -- data ------------------------------------------------------------------------------------


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


@dataclass
class ReportData:
    """Everything the HTML shows, already small and local (collected from Spark)."""

    business_date: date
    now: datetime
    report_timezone: str
    headline: dict[str, int]
    late_event_rate: float | None
    max_lateness_ms: int | None
    # (window_start ms, stream amount, batch amount, late amount, residual amount), all keys
    per_window: list[tuple[int, int, int, int, int]]
    lateness_hist: list[tuple[str, int]]  # (bin label, late events)
    curve: list[dict[str, Any]] | None
    curve_source: str
    current_bound_ms: int | None
    recommended_bound_ms: int | None
    completeness_target: float | None
    worst_keys: list[dict[str, Any]]
    partitions: list[dict[str, Any]]  # partition, events, late, rate
    validation: list[dict[str, Any]]
    data_docs_index: str | None
    provenance: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    # per partition: the lateness bounds in force over the date's micro-batches (`bounds_in_force`)
    bounds: list[dict[str, Any]] = field(default_factory=list)
    window_ms: int | None = None
    signoff: dict[str, Any] | None = None  # the date's newest `signoffs` row (None: pending)
    run_time: datetime | None = None  # the reconciliation run the report shows
    # the first `tally.ledger.COPIES_SHOWN` copies of earlier events the stream counted,
    # beside their first arrivals (`reconciliation_copies` of the run; empty: none counted)
    copies: list[dict[str, Any]] = field(default_factory=list)
    # the date's severity under the materiality tolerances and the rule that decided it
    severity: tuple[str, str] | None = None
    # the currency of `headline`, `per_window` and `worst_keys` (the date's first; the run's
    # `default_currency` for rows from before currencies): how each amount is written
    currency: str = DEFAULT_CURRENCY
    # the same three for each currency of the date, by currency (amounts of two currencies are
    # never added: a date in several has a section for each)
    by_currency: tuple[CurrencyFigures, ...] = ()
    # the first `UNEXPLAINED_SHOWN` UNEXPLAINED windows, largest |residual amount| first, over
    # every currency (each links its records in the desk), and how many there are
    unexplained: list[dict[str, Any]] = field(default_factory=list)
    unexplained_total: int = 0


# The report lists at most this many UNEXPLAINED windows (the CSV has every window).
UNEXPLAINED_SHOWN = 50
UNEXPLAINED_COLUMNS = (
    "window_start",
    "key",
    "currency",
    "batch_count",
    "stream_count",
    "late_count",
    "residual_count",
    "residual_amount",
)


@dataclass(frozen=True)
class CurrencyFigures:
    """One currency's part of the report: its headline, amounts per window and worst keys."""

    currency: str
    headline: dict[str, int]
    per_window: list[tuple[int, int, int, int, int]]
    worst_keys: list[dict[str, Any]]
    late_event_rate: float | None = None  # of this currency's events
    max_lateness_ms: int | None = None


@dataclass(frozen=True)
class ReportInputs:
    """What a process that has just reconciled and validated the date holds (`tally
    reconcile`): the report takes it instead of reading the tables back. The same rows: the
    caller hands over what it wrote and read."""

    reconciliation: DataFrame  # the date's rows as written, persisted (the caller releases)
    reconciliation_version: int  # the table's version holding them
    run: dict[str, Any]  # the date's reconciliation_runs row
    summaries: tuple[dict[str, Any], ...]  # the date's reconciliation_summary rows (by currency)
    events: DataFrame | None  # the event log at the version the run pinned
    late_events: DataFrame | None  # late_events at the version the run pinned
    validation: list[dict[str, Any]]  # the date's validation_results rows (`read_results`)


@dataclass(frozen=True)
class _Reconciliation:
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


# -- reading the tables --------------------------------------------------------------------------


def _exists(spark: SparkSession, warehouse: str, name: str) -> bool:
    from delta.tables import DeltaTable

    return bool(DeltaTable.isDeltaTable(spark, T.table_path(warehouse, name)))


def _of_date(
    spark: SparkSession,
    warehouse: str,
    name: str,
    business_date: date,
    version: int | None = None,
) -> DataFrame:
    return T.read_table(spark, warehouse, name, version).where(
        F.col("business_date") == F.lit(business_date)
    )


def _rows_of_date(
    spark: SparkSession, warehouse: str, name: str, business_date: date
) -> tuple[dict[str, Any], ...]:
    """The table's (few) rows of the date; none without the table."""
    if not _exists(spark, warehouse, name):
        return ()
    return tuple(r.asDict() for r in _of_date(spark, warehouse, name, business_date).collect())


def _latest_run(spark: SparkSession, warehouse: str, business_date: date) -> dict[str, Any] | None:
    """The date's latest `reconciliation_runs` row (every run of a date is kept, numbered in
    the order recorded; a row from before run history has no number: the date's only run)."""
    if not _exists(spark, warehouse, "reconciliation_runs"):
        return None
    runs = _of_date(spark, warehouse, "reconciliation_runs", business_date)
    if "run_number" in runs.columns:
        runs = runs.orderBy(F.coalesce("run_number", F.lit(0)).desc())
    latest = runs.first()
    return latest.asDict() if latest is not None else None


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


def _read_reconciliation(
    spark: SparkSession,
    warehouse: str,
    business_date: date,
    report_timezone: str | None,
    inputs: ReportInputs | None = None,
) -> _Reconciliation:
    if inputs is not None:
        return _recorded(
            inputs.reconciliation_version,
            inputs.run,
            inputs.summaries,
            business_date,
            report_timezone,
            inputs,
        )
    if not _exists(spark, warehouse, "reconciliation"):
        raise ReportError(
            f"reconciliation: no Delta table at {T.table_path(warehouse, 'reconciliation')} "
            "(run tally reconcile first)"
        )
    version = T.latest_version(spark, warehouse, "reconciliation")
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
) -> _Reconciliation:
    """The `_Reconciliation` of these rows; the zone: the caller's, else the run's."""
    settings = recorded_settings(run)
    zone = (
        report_timezone
        or (run or {}).get("report_timezone")
        or settings.get("report_timezone", "UTC")
    )
    bounds = business_day_bounds(business_date, zone)
    return _Reconciliation(version, run, summaries, settings, zone, bounds, inputs)


def _pinned(
    spark: SparkSession, warehouse: str, run: dict[str, Any] | None, name: str, key: str
) -> DataFrame | None:
    """A speed-layer table as the reconciliation pinned it: at the batch frontier it recorded
    (the same rows as its version, after compaction, VACUUM and log cleanup: `tally.pins`),
    else at its version (latest when none was recorded)."""
    if not _exists(spark, warehouse, name):
        return None
    frontier = ((run or {}).get("pin_frontiers") or {}).get(name)
    if frontier is not None:
        return read_at_frontier(spark, warehouse, name, frontier)
    version = (run or {}).get(key)
    return T.read_table(spark, warehouse, name, None if version is None else int(version))


def _events_of(spark: SparkSession, warehouse: str, rec: _Reconciliation) -> DataFrame | None:
    """The event log at the version the reconciliation pinned."""
    if rec.inputs is not None:
        return rec.inputs.events
    return _pinned(spark, warehouse, rec.run, "events", "events_version")


def _is_sessions(rec: _Reconciliation) -> bool:
    """The run reconciled session windows (it recorded a gap)."""
    return bool(rec.settings.get("session_gap_ms"))


def _late_of_sessions(late_all: DataFrame, recon: DataFrame, bounds: DayBounds) -> DataFrame:
    """Session windows: the late rows in one of the date's reconciliation rows with late
    events, as the reconciliation placed them: a batch session holds its key's late rows
    timed in it (some after midnight, if it crosses it); a row without a batch side is one
    late row's own span. Rows in a session of another date are that date's."""
    rows = recon.where(F.col("late_count") > 0).select(
        F.col("key").alias("_key"),
        F.col("currency").alias("_currency"),
        F.col("window_start").alias("_start"),
        F.col("window_end").alias("_end"),
        (F.col("batch_count") > 0).alias("_batch"),
    )
    reach = rows.agg(F.max(_ms("_end")).alias("ms")).first()
    if reach is None or reach["ms"] is None:
        return late_all.limit(0)
    late = late_all.where(in_day((bounds[0], int(reach["ms"])), "window_start"))
    in_session = (F.col("event_time") >= F.col("_start")) & (F.col("event_time") < F.col("_end"))
    own_span = (F.col("window_start") == F.col("_start")) & (F.col("window_end") == F.col("_end"))
    owner = (F.col("key") == F.col("_key")) & (F.col("currency") == F.col("_currency"))
    held = owner & F.when(F.col("_batch"), in_session).otherwise(own_span)
    return late.join(rows, held, "left_semi")


def _late_rows(
    spark: SparkSession, warehouse: str, rec: _Reconciliation, recon: DataFrame
) -> DataFrame | None:
    """The pinned late events whose window starts on the date (session windows: the late rows
    in the date's sessions, `_late_of_sessions`), before the first-arrival check
    (`_late_in_day`); None without a late_events table."""
    late_all = (
        rec.inputs.late_events
        if rec.inputs is not None
        else _pinned(spark, warehouse, rec.run, "late_events", "late_events_version")
    )
    if late_all is None:
        return None
    late_all = with_currency(late_all, recorded_currency(rec.settings))  # as `recon`
    if _is_sessions(rec):
        return _late_of_sessions(late_all, recon, rec.bounds)
    return late_all.where(window_in_day(rec.bounds))


def _late_in_day(late: DataFrame | None, log: _LogFigures | None) -> DataFrame | None:
    """The late rows (`_late_rows`) as the reconciliation counts them (lateness and
    partition): first arrivals of their event_id in the pinned log, each once
    (`tally.arrivals`). Repeats beyond the stream's dedup horizon lost no money, so they are
    not late events here either. Without an event log, every row."""
    if late is None:
        return None
    if log is not None:
        late = explaining_late(marked_first(late, log.firsts))
    return late.select("lateness_ms", "partition")


@dataclass(frozen=True)
class _LogFigures:
    """What the report needs of the pinned event log (`_read_log`): `counts`, per source
    partition, the date's events and late events (duplicates left out); `firsts`, the first
    arrival's line (`tally.arrivals.marked_first`) of every event_id of a late row (the late
    side output's and the log's own late rows of the date); `repeat_rows`, the partition of
    each late row of the date that is not its event_id's first arrival (with `null_ids`).
    `kept`: the persisted frames they come from (`release`)."""

    counts: list[Any]
    firsts: DataFrame
    repeat_rows: DataFrame
    kept: tuple[DataFrame, ...]
    # per partition, the date's late rows without an event_id when `repeat_rows` lacks them
    null_ids: dict[Any, int] = field(default_factory=dict)

    def release(self) -> None:
        for df in self.kept:
            df.unpersist()


_GROUP = "struct<kind:int,partition:int,event_id:string>"


def _grouped_log(
    spark: SparkSession, events_all: DataFrame, bounds: DayBounds, ids: DataFrame
) -> tuple[DataFrame, list[Any]]:
    """ONE aggregate over the pinned log: each row adds to its partition's counts if it is an
    event of the date (`event_of_day`), and to its event_id's group if that id is one of `ids`
    (a broadcast set of id hashes; ids that only share a hash form groups nothing joins). An
    id's group holds its first arrival's line (`first`) and the lines of its late rows of the
    date (`day_late`); a partition's, its counts, and the date's late rows no group holds
    (`unheld`, with an id; `null_ids`, without). Returns the aggregate (persisted) and the
    partitions' rows."""
    hashes = (
        ids.select(F.xxhash64("event_id").alias("_h"))
        .distinct()
        .withColumn("_looked_up", F.lit(True))
    )
    order = list(dict.fromkeys((*ARRIVAL_ORDER, *LINE_IDENTITY)))
    rows = (
        events_all.select(
            *order,
            "partition",
            "arrival_status",
            F.coalesce(event_of_day(bounds), F.lit(False)).alias("_in_date"),
        )
        .withColumn("_h", F.xxhash64("event_id"))
        .join(F.broadcast(hashes), "_h", "left")
    )
    looked_up = F.coalesce(F.col("_looked_up"), F.lit(False)) & F.col("event_id").isNotNull()
    day_late = F.col("_in_date") & (F.col("arrival_status") == LATE)
    groups = F.array(
        F.when(
            F.col("_in_date"), F.struct(F.lit(0), F.col("partition"), F.lit(None).cast("string"))
        ).cast(_GROUP),
        F.when(looked_up, F.struct(F.lit(1), F.lit(None).cast("int"), F.col("event_id"))).cast(
            _GROUP
        ),
    )
    held = F.col("g.kind") == 1
    line = F.struct(*[F.col(c) for c in LINE_IDENTITY], F.col("partition"))
    with without_adaptive_execution(spark):  # a row per partition and per late id
        grouped = (
            rows.select("*", F.explode(groups).alias("g"))
            .where(F.col("g").isNotNull())
            .groupBy("g")
            .agg(
                F.count(F.lit(1)).alias("events"),
                F.count_if(F.col("arrival_status") == LATE).alias("late"),
                F.count_if(day_late & F.col("event_id").isNotNull() & ~looked_up).alias("unheld"),
                F.count_if(day_late & F.col("event_id").isNull()).alias("null_ids"),
                first_line().alias("first"),
                F.collect_list(F.when(held & day_late, line)).alias("day_late"),
            )
            .persist()
        )
        try:
            counts = (
                grouped.where(F.col("g.kind") == 0)
                .select(
                    F.col("g.partition").alias("partition"), "events", "late", "unheld", "null_ids"
                )
                .collect()
            )
        except BaseException:
            grouped.unpersist()
            raise
    return grouped, counts


def _read_log(
    spark: SparkSession, events_all: DataFrame, bounds: DayBounds, late: DataFrame | None
) -> _LogFigures:
    """`_LogFigures` of the pinned log. The late side output's ids (`late`) cover the log's
    late rows of the date when the stream wrote each of them there too: then one aggregate
    over the log (`_grouped_log`) gives everything. Otherwise (some late row of the date has
    an id the side output lacks) the date's late rows are read first and their ids added."""
    if late is not None:
        grouped, counts = _grouped_log(spark, events_all, bounds, late.select("event_id"))
        if not any(r["unheld"] for r in counts):
            return _from_groups(grouped, counts)
        grouped.unpersist()
    day_late = (
        events_all.where(event_of_day(bounds) & (F.col("arrival_status") == LATE))
        .select(*LINE_IDENTITY, "partition")
        .persist()
    )
    try:
        ids = day_late.select("event_id")
        if late is not None:
            ids = ids.unionByName(late.select("event_id"))
        grouped, counts = _grouped_log(spark, events_all, bounds, ids)
    except BaseException:
        day_late.unpersist()
        raise
    firsts = grouped.where(F.col("g.kind") == 1).select("first.*")
    repeat_rows = marked_first(day_late, firsts).where(~F.col(FIRST_ARRIVAL)).select("partition")
    return _LogFigures(counts, firsts, repeat_rows, (grouped, day_late))


def _from_groups(grouped: DataFrame, counts: list[Any]) -> _LogFigures:
    """`_LogFigures` from an aggregate that holds every late row of the date: a row is a
    repeat when its line is not its id's first arrival (`marked_first`'s test); rows without
    an event_id are first arrivals of none."""
    ids = grouped.where(F.col("g.kind") == 1)
    firsts = ids.select("first.*")
    rows = ids.select("first.*", F.explode("day_late").alias("r")).select(
        "r.*", *[f"_first_{c}" for c in LINE_IDENTITY]
    )
    same_line = reduce(
        lambda a, b: a & b, [F.col(c).eqNullSafe(F.col(f"_first_{c}")) for c in LINE_IDENTITY]
    )
    repeats = rows.where(~same_line).select("partition")
    null_ids = {r["partition"]: int(r["null_ids"]) for r in counts if r["null_ids"]}
    return _LogFigures(counts, firsts, repeats, (grouped,), null_ids)


def _ms(column: str) -> Any:
    return F.unix_millis(F.col(column))


# -- the reconciliation rows ---------------------------------------------------------------------


def _headline(recon: DataFrame, summary: dict[str, Any] | None) -> dict[str, int]:
    """Counts and amounts (exact BIGINT sums): the summary's when the batch layer wrote one,
    else summed from the reconciliation rows."""
    names = {
        "stream_count": F.col("stream_count"),
        "stream_amount": F.col("stream_amount"),
        "batch_count": F.col("batch_count"),
        "batch_amount": F.col("batch_amount"),
        "gap_count": F.col("diff_count"),
        "gap_amount": F.col("diff_amount"),
        # explained: the late rows less the copies the stream counted (none in older rows)
        "explained_count": F.col("late_count") - T.zero_if_absent(recon, "copies_count"),
        "explained_amount": F.col("late_amount") - T.zero_if_absent(recon, "copies_amount"),
        "unexplained_count": F.col("residual_count"),
        "unexplained_amount": F.col("residual_amount"),
        "copies_count": T.zero_if_absent(recon, "copies_count"),
        "copies_amount": T.zero_if_absent(recon, "copies_amount"),
    }
    keys = (*names, "unexplained_windows", "windows")
    recorded = {k: int(summary[k]) for k in keys if summary and summary.get(k) is not None}
    if len(recorded) == len(keys):  # the summary has them all: no pass over the rows
        return recorded
    row = recon.agg(
        *[F.coalesce(F.sum(col), F.lit(0)).cast("long").alias(k) for k, col in names.items()],
        F.count_if(F.col("status") == UNEXPLAINED).cast("long").alias("unexplained_windows"),
        F.count(F.lit(1)).cast("long").alias("windows"),
    ).first()
    assert row is not None
    return {**{k: int(v) for k, v in row.asDict().items()}, **recorded}


def _per_window(recon: DataFrame) -> list[tuple[int, int, int, int, int]]:
    """(window_start ms, stream, batch, late, residual amount) per window, all keys summed."""
    amounts = (
        ("stream_amount", "s"),
        ("batch_amount", "b"),
        ("late_amount", "l"),
        ("residual_amount", "r"),
    )
    return [
        (int(r["w"]), int(r["s"]), int(r["b"]), int(r["l"]), int(r["r"]))
        for r in recon.groupBy(_ms("window_start").alias("w"))
        .agg(*[F.coalesce(F.sum(col), F.lit(0)).cast("long").alias(a) for col, a in amounts])
        .orderBy("w")
        .collect()
    ]


def _worst_keys(recon: DataFrame) -> list[dict[str, Any]]:
    """Up to WORST_KEYS keys with a gap, by |unexplained| desc, then |gap| desc, then key."""
    return [
        r.asDict()
        for r in recon.groupBy("key")
        .agg(
            F.sum("diff_amount").cast("long").alias("gap_amount"),
            F.sum(F.col("late_amount") - T.zero_if_absent(recon, "copies_amount"))
            .cast("long")
            .alias("explained_amount"),
            F.sum("residual_amount").cast("long").alias("unexplained_amount"),
            F.sum(F.abs("residual_amount")).cast("long").alias("abs_unexplained"),
            F.sum(F.abs("diff_amount")).cast("long").alias("abs_gap"),
            F.count_if(F.col("status") == UNEXPLAINED).alias("unexplained_windows"),
        )
        .where((F.col("abs_gap") != 0) | (F.col("abs_unexplained") != 0))
        .orderBy(F.col("abs_unexplained").desc(), F.col("abs_gap").desc(), "key")
        .limit(WORST_KEYS)
        .collect()
    ]


def _unexplained(recon: DataFrame, count: int) -> list[dict[str, Any]]:
    """The first `UNEXPLAINED_SHOWN` of the date's `count` UNEXPLAINED windows (window rows,
    not events), largest |residual amount| first."""
    if not count:
        return []
    rows = recon.where(F.col("status") == UNEXPLAINED).orderBy(
        F.abs("residual_amount").desc(), "window_start", "key", "currency"
    )
    return [
        r.asDict() for r in rows.select(*UNEXPLAINED_COLUMNS).limit(UNEXPLAINED_SHOWN).collect()
    ]


def _reconciliation_figures(
    recon: DataFrame, summaries: Sequence[dict[str, Any]], business_date: date
) -> tuple[CurrencyFigures, ...]:
    """Per currency of `recon` (its rows with a `currency`, cached by the caller: one read
    for these and the CSV), the headline, the amounts per window and the worst keys."""
    currencies = sorted(r[0] for r in recon.select("currency").distinct().collect())
    if not currencies:
        raise ReportError(
            f"date: {business_date.isoformat()} has no reconciliation rows "
            "(run tally reconcile first)"
        )
    recorded = {s.get("currency"): s for s in summaries}
    sections = []
    for currency in currencies:
        rows = recon.where(F.col("currency") == F.lit(currency))
        # a summary row from before currencies (null) is the date's only one
        summary = recorded.get(currency) or (recorded.get(None) if len(currencies) == 1 else None)
        headline = _headline(rows, summary)
        lateness = (summary or {}).get("max_lateness_ms")
        if summary is None:  # rows of a run without a summary row of this currency
            lateness = rows.agg(F.max("max_lateness_ms")).first()[0]  # type: ignore[index]
        sections.append(
            CurrencyFigures(
                currency,
                headline,
                _per_window(rows),
                _worst_keys(rows),
                _late_event_rate(summary, headline),
                None if lateness is None else int(lateness),
            )
        )
    return tuple(sections)


def _counts_of(sections: Sequence[CurrencyFigures]) -> dict[str, int]:
    """The counts of every currency's headline summed (events are events in any currency)."""
    keys = [k for k in sections[0].headline if not k.endswith("_amount")]
    return {k: sum(s.headline[k] for s in sections) for k in keys}


# -- late events and the lateness bound ----------------------------------------------------------


def _lateness_bucket() -> Column:
    """The index of the `LATENESS_BINS_MS` bin of `lateness_ms` (null: the last bin)."""
    edges = LATENESS_BINS_MS
    bucket = F.lit(len(edges) - 1)
    for i in range(len(edges) - 2, -1, -1):
        bucket = F.when(F.col("lateness_ms") < F.lit(edges[i + 1]), F.lit(i)).otherwise(bucket)
    return bucket


def _lateness_labels() -> list[str]:
    edges = list(LATENESS_BINS_MS)
    return [
        f"{format_duration(lo)}–{format_duration(hi)}" for lo, hi in itertools.pairwise(edges)
    ] + [f"≥ {format_duration(edges[-1])}"]


@dataclass(frozen=True)
class _LateCounts:
    """The late events' figures of one aggregate (`_late_counts`): per `LATENESS_BINS_MS`
    bin, the events in it; per `CURVE_SHIFTS_MS` shift D, the events with `lateness_ms >=
    allowed + D` (None: the curve is not estimated)."""

    hist: list[tuple[str, int]]
    dropped: list[int] | None


def _late_counts(late: DataFrame, allowed_ms: int | None) -> _LateCounts:
    """The histogram's counts and, with `allowed_ms`, the estimated curve's dropped events:
    ONE aggregate over the late rows (a job, where a histogram and a curve took one each)."""
    labels = _lateness_labels()
    bucket = _lateness_bucket()
    hist = [F.count_if(bucket == F.lit(i)).alias(f"b{i}") for i in range(len(labels))]
    shifts = [] if allowed_ms is None else list(CURVE_SHIFTS_MS)
    drops = [
        F.count_if(F.col("lateness_ms") >= F.lit(allowed_ms + d)).alias(f"d{i}")
        for i, d in enumerate(shifts)
        if allowed_ms is not None
    ]
    row = late.agg(*hist, *drops).first()
    assert row is not None
    return _LateCounts(
        [(label, int(row[f"b{i}"] or 0)) for i, label in enumerate(labels)],
        None if allowed_ms is None else [int(row[f"d{i}"] or 0) for i in range(len(shifts))],
    )


@dataclass(frozen=True)
class _Figures:
    """What the report shows of the event log, as the reconciliation wrote it
    (`reconciliation_partitions`, `batch.partitions`): the late events' counts and the
    partition rows (`_partition_rates`' figures)."""

    counts: _LateCounts
    partitions: list[dict[str, Any]]


def _late_rows_where(condition: str) -> str:
    """SQL: a `reconciliation_partitions` row's late rows whose `x.lateness_ms` matches."""
    return f"aggregate(lateness, 0L, (a, x) -> a + IF({condition}, x.late_rows, 0L))"


def _bin_condition(i: int) -> str:
    """SQL: `x.lateness_ms` falls in bin `i` of `LATENESS_BINS_MS` (`_lateness_bucket`)."""
    edges = LATENESS_BINS_MS
    if i == len(edges) - 1:
        return f"x.lateness_ms IS NULL OR x.lateness_ms >= {edges[i]}"
    below = f"x.lateness_ms < {edges[i + 1]}"
    return below if i == 0 else f"x.lateness_ms >= {edges[i]} AND {below}"


def _recorded_figures(
    spark: SparkSession,
    warehouse: str,
    business_date: date,
    rec: _Reconciliation,
    options: ReportOptions,
) -> _Figures | None:
    """The log's figures from the date's `reconciliation_partitions` rows of the recorded
    run (same `run_time`): one small read, where the pinned log took a pass over every row.
    None when there are none (a run from before the table, or a date with neither events nor
    late rows): the caller reads the log."""
    name = T.RECONCILIATION_PARTITIONS.name
    run_time = (rec.run or {}).get("run_time")
    if run_time is None or not _exists(spark, warehouse, name):
        return None
    current_bound_ms = _current_bound(options, rec.settings)
    allowed_ms = _curve_allowed_ms(options.curve, True, current_bound_ms, rec.settings)
    shifts = [] if allowed_ms is None else [allowed_ms + d for d in CURVE_SHIFTS_MS]
    labels = _lateness_labels()
    rows = [
        r
        for r in _of_date(spark, warehouse, name, business_date)
        .selectExpr(
            "run_time",
            "partition",
            "events",
            "late_events",
            *[f"{_late_rows_where(_bin_condition(i))} AS b{i}" for i in range(len(labels))],
            *[
                f"{_late_rows_where(f'x.lateness_ms >= {ms}')} AS d{i}"
                for i, ms in enumerate(shifts)
            ],
        )
        .collect()
        if r["run_time"] == run_time
    ]
    if not rows:
        return None
    counts = _LateCounts(
        [(label, sum(int(r[f"b{i}"]) for r in rows)) for i, label in enumerate(labels)],
        None
        if allowed_ms is None
        else [sum(int(r[f"d{i}"]) for r in rows) for i in range(len(shifts))],
    )
    partitions = [
        {
            "partition": r["partition"],
            "events": int(r["events"]),
            "late": int(r["late_events"]),
            "rate": int(r["late_events"]) / int(r["events"]),
        }
        for r in sorted(rows, key=lambda r: (r["partition"] is not None, r["partition"]))
        if r["events"]  # rows of partitions with only late rows of the windows, or only repeats
    ]
    return _Figures(counts, partitions)


def _current_bound(options: ReportOptions, settings: dict[str, Any]) -> int | None:
    """The caller's bound, else the run's recorded `lateness`, else the fallback."""
    if options.current_bound_ms is not None:
        return options.current_bound_ms
    recorded = recorded_bound(settings)
    return recorded if recorded is not None else options.fallback_bound_ms


def _completeness_target(options: ReportOptions, settings: dict[str, Any]) -> float | None:
    if options.completeness_target is None and settings.get("completeness_target") is not None:
        return float(settings["completeness_target"])
    return options.completeness_target


def _estimated_curve(
    dropped: list[int], batch_events: int, current_ms: int
) -> list[dict[str, Any]]:
    """Completeness at bound current + D for each candidate shift D (see module docstring),
    `dropped[i]`: the late events at or beyond the allowed lateness + `CURVE_SHIFTS_MS[i]`."""
    curve = []
    for shift, dropped_n in zip(CURVE_SHIFTS_MS, dropped, strict=True):
        admitted = batch_events - dropped_n
        curve.append(
            {
                "lateness_ms": current_ms + shift,
                "lateness": format_duration(current_ms + shift),
                "events": batch_events,
                "admitted": admitted,
                "dropped": dropped_n,
                "completeness_pct": 100.0 * admitted / batch_events if batch_events else 100.0,
            }
        )
    return curve


def _curve_allowed_ms(
    given: Sequence[dict[str, Any]] | None,
    has_late_rows: bool,
    current_bound_ms: int | None,
    settings: dict[str, Any],
) -> int | None:
    """The allowed lateness the estimated curve counts from; None when it is not estimated
    (a curve given, no late rows or no current bound)."""
    if given or not has_late_rows or current_bound_ms is None:
        return None
    allowed_ms = recorded_duration(settings, "allowed_lateness")
    return ALLOWED_LATENESS_DEFAULT_MS if allowed_ms is None else allowed_ms


def _curve(
    given: Sequence[dict[str, Any]] | None,
    counts: _LateCounts | None,
    batch_events: int,
    current_bound_ms: int | None,
) -> tuple[list[dict[str, Any]] | None, str]:
    """The curve to draw and where it comes from: the caller's, else estimated."""
    if given:
        return [dict(c) for c in given], "given"
    if counts is None or counts.dropped is None or current_bound_ms is None:
        return None, "not computed"
    curve = _estimated_curve(counts.dropped, batch_events, current_bound_ms)
    return curve, "estimated from the late side output"


def _recommend(curve: list[dict[str, Any]], target: float | None) -> int | None:
    if target is None:
        return None
    for entry in sorted(curve, key=lambda e: e["lateness_ms"]):
        admitted, events = entry.get("admitted"), entry.get("events")
        if admitted is not None and events is not None:
            if meets_target(int(admitted), int(events), target):
                return int(entry["lateness_ms"])
        elif float(entry["completeness_pct"]) >= target:
            return int(entry["lateness_ms"])
    return None


def _late_event_rate(summary: dict[str, Any] | None, headline: dict[str, int]) -> float | None:
    rate = summary.get("late_event_rate") if summary else None
    if rate is None and headline["batch_count"]:
        rate = headline["explained_count"] / headline["batch_count"]
    return None if rate is None else float(rate)


# -- source partitions, validation, provenance ---------------------------------------------------


def _partition_rates(log: _LogFigures | None) -> list[dict[str, Any]]:
    """Events and late events per source partition, duplicates left out: rows marked
    `duplicate`, and `late` rows that repeat an event_id which arrived earlier (beyond the
    stream's dedup horizon; `tally.arrivals`), as the reconciliation leaves them out."""
    if log is None:
        return []
    counts = log.counts
    repeats: dict[Any, int] = {}
    if any(r["late"] for r in counts):  # a repeat is a late row: none without late rows
        repeats = {
            r["partition"]: int(r["repeats"])
            for r in log.repeat_rows.groupBy("partition")
            .agg(F.count(F.lit(1)).alias("repeats"))
            .collect()
        }
        for p, n in log.null_ids.items():  # first arrivals of no event_id: repeats
            repeats[p] = repeats.get(p, 0) + n
    partitions = []
    for r in sorted(counts, key=lambda r: (r["partition"] is not None, r["partition"])):
        # matched as a join on the partition matches: a null partition matches none
        repeated = 0 if r["partition"] is None else repeats.get(r["partition"], 0)
        total, late_n = int(r["events"]) - repeated, int(r["late"]) - repeated
        if total == 0:  # only repeats: nothing of the day arrived on it
            continue
        partitions.append(
            {
                "partition": r["partition"],
                "events": total,
                "late": late_n,
                "rate": late_n / total if total else 0.0,
            }
        )
    return partitions


def _data_docs_uri(gx_root: str | None) -> str | None:
    from expectations.validate import data_docs_index

    if gx_root is None:
        return None
    index = data_docs_index(gx_root)
    return index.resolve().as_uri() if index.is_file() else None


def _fmt_ts(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        # Spark returns session-time (UTC) naive datetimes.
        value = value if value.tzinfo else value.replace(tzinfo=UTC)
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return str(value)


def describe_windowing(window_ms: Any, settings: Mapping[str, Any]) -> str | None:
    """The window kind and its parameters, as the run recorded them: `tumbling 1m`,
    `hopping 5m every 1m` or `session, gap 10s` (a run from before hopping windows recorded
    no slide: tumbling; one from before session windows no gap: fixed windows)."""
    gap = int(settings.get("session_gap_ms") or 0)
    if not window_ms and not gap:
        return None
    size = int(window_ms or gap)  # a session run's curve window is not part of its windowing
    slide = settings.get("window_slide_ms")
    return windowing_text(size, int(slide) if slide else None, gap)


def bounds_in_force(run: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Per partition, the lateness bounds in force the reconciliation recorded (over the
    micro-batches that carried the date): `partition`, `min_ms`, `max_ms`, `last_ms`, by
    partition; [] when it recorded none (no stream_progress, or a run from before)."""
    run = run or {}
    lows, highs, lasts = (
        run.get(c) or {}
        for c in (
            "partition_lateness_min_ms",
            "partition_lateness_max_ms",
            "partition_lateness_last_ms",
        )
    )
    return [
        {"partition": p, "min_ms": lows[p], "max_ms": highs[p], "last_ms": lasts[p]}
        for p in sorted(lows)
        if p in highs and p in lasts
    ]


def describe_bound(b: Mapping[str, Any]) -> str:
    """One partition's bounds in force: `30s` when it never changed, else the range and the
    last one, `1s–17222ms, last 1s`."""
    if b["min_ms"] == b["max_ms"]:
        return format_duration(int(b["min_ms"]))
    return (
        f"{format_duration(int(b['min_ms']))}–{format_duration(int(b['max_ms']))}, "
        f"last {format_duration(int(b['last_ms']))}"
    )


def describe_bounds(bounds: Sequence[Mapping[str, Any]]) -> str | None:
    """All partitions' bounds in force in one line, consecutive partitions with the same
    bounds together: `partitions 0-2: 30s` or `partition 0: 1s–17222ms, last 1s; ...`."""
    groups: list[tuple[int, int, str]] = []  # (first partition, last partition, text)
    for b in bounds:
        text, p = describe_bound(b), int(b["partition"])
        if groups and groups[-1][2] == text and groups[-1][1] == p - 1:
            groups[-1] = (groups[-1][0], p, text)
        else:
            groups.append((p, p, text))
    parts = [
        f"partition {lo}: {text}" if lo == hi else f"partitions {lo}-{hi}: {text}"
        for lo, hi, text in groups
    ]
    return "; ".join(parts) or None


def _provenance(
    now: datetime, rec: _Reconciliation, window_ms: Any, validation: list[dict[str, Any]]
) -> dict[str, Any]:
    """The Delta versions the reconciliation pinned, the run times, the window and zone."""
    provenance: dict[str, Any] = {
        "report generated": now.astimezone(UTC).isoformat(),
        "reconciliation read": f"v{rec.version}",
    }
    if rec.run:
        provenance.update(
            {
                "reconciliation run": _fmt_ts(rec.run.get("run_time")),
                "events version (pinned)": rec.run.get("events_version"),
                "stream_aggregates version (pinned)": rec.run.get("stream_aggregates_version"),
                "late_events version (pinned)": rec.run.get("late_events_version"),
                "window": format_duration(int(window_ms)) if window_ms else None,
                "windows": describe_windowing(window_ms, rec.settings),
                "report time zone": rec.zone,
                "stream_progress version (pinned)": rec.run.get("stream_progress_version"),
                "lateness bounds in force": describe_bounds(bounds_in_force(rec.run)),
            }
        )
    else:
        provenance["reconciliation run"] = "not recorded (no reconciliation_runs row)"
    if validation:
        provenance["validation run"] = _fmt_ts(max(r["run_time"] for r in validation))
    return provenance


# -- all of it -----------------------------------------------------------------------------------


def collect_report_data(
    spark: SparkSession,
    warehouse: str,
    business_date: date,
    now: datetime,
    options: ReportOptions | None = None,
    inputs: ReportInputs | None = None,
) -> tuple[ReportData, DataFrame]:
    """Read the date's tables (or take the caller's `inputs`) and reduce them to what the
    report shows; also returns the reconciliation rows of the date (for the CSV), persisted:
    the caller unpersists them (unless they are the `inputs`')."""
    options = options or ReportOptions()
    with without_adaptive_execution(spark):  # small tables: AQE would only add jobs
        rec = _read_reconciliation(spark, warehouse, business_date, options.report_timezone, inputs)
    _currency(rec.run, business_date)  # a recorded default_currency that is no code: one line
    if inputs is not None:
        return _report_data(
            spark, warehouse, business_date, now, options, rec, inputs.reconciliation
        ), inputs.reconciliation
    # Read once for the figures, the late rows of sessions and the CSV.
    recorded = _of_date(spark, warehouse, "reconciliation", business_date, rec.version)
    # rows of a run from before currencies are in that run's currency
    recon = with_currency(recorded, recorded_currency(rec.settings)).persist()
    try:
        return _report_data(spark, warehouse, business_date, now, options, rec, recon), recon
    except BaseException:
        recon.unpersist()
        raise


def _report_data(
    spark: SparkSession,
    warehouse: str,
    business_date: date,
    now: datetime,
    options: ReportOptions,
    rec: _Reconciliation,
    recon: DataFrame,
) -> ReportData:
    """`collect_report_data` once the reconciliation is read (`recon`: its rows, cached).
    The event log's figures come from the run's `reconciliation_partitions` rows when it
    wrote them (`_recorded_figures`), else from the pinned log itself."""
    figures = _recorded_figures(spark, warehouse, business_date, rec, options)
    if figures is not None:
        return _assemble(
            spark, warehouse, (business_date, now), options, rec, recon, None, None, figures
        )
    events_all = _events_of(spark, warehouse, rec)
    late_rows = _late_rows(spark, warehouse, rec, recon)
    # The event log in one pass: the partitions' counts and the late ids' first arrivals.
    log = None if events_all is None else _read_log(spark, events_all, rec.bounds, late_rows)
    try:
        late = _late_in_day(late_rows, log)  # one aggregate reads it (`_late_counts`)
        return _assemble(spark, warehouse, (business_date, now), options, rec, recon, late, log)
    finally:
        if log is not None:
            log.release()


def _assemble(
    spark: SparkSession,
    warehouse: str,
    when: tuple[date, datetime],
    options: ReportOptions,
    rec: _Reconciliation,
    recon: DataFrame,
    late: DataFrame | None,
    log: _LogFigures | None,
    figures: _Figures | None = None,
) -> ReportData:
    """The report's figures from the read tables; `when` is (business date, now); the late
    rows and the log's figures from `late` and `log`, or all of them from `figures`."""
    from expectations.validate import read_results

    business_date, now = when
    with without_adaptive_execution(spark):  # the date's rows, cached, and validation_results
        sections = _reconciliation_figures(recon, rec.summaries, business_date)
        validation = (
            rec.inputs.validation
            if rec.inputs is not None
            else read_results(spark, warehouse, business_date)
        )
    first, totals = sections[0], _counts_of(sections)
    summary = date_rollup(rec.summaries)
    current_bound_ms = _current_bound(options, rec.settings)
    target = _completeness_target(options, rec.settings)
    if figures is not None:
        counts: _LateCounts | None = figures.counts
        partitions = figures.partitions
    else:
        allowed_ms = _curve_allowed_ms(
            options.curve, late is not None, current_bound_ms, rec.settings
        )
        counts = None if late is None else _late_counts(late, allowed_ms)
        partitions = _partition_rates(log)
    curve, curve_source = _curve(options.curve, counts, totals["batch_count"], current_bound_ms)
    recommended_bound_ms = options.recommended_bound_ms
    if recommended_bound_ms is None and curve:
        recommended_bound_ms = _recommend(curve, target)
    window_ms = (rec.run or {}).get("window_ms") or rec.settings.get("window_ms")
    data = ReportData(
        business_date=business_date,
        now=now,
        report_timezone=rec.zone,
        headline=first.headline,
        late_event_rate=_late_event_rate(summary, totals),
        max_lateness_ms=(summary or {}).get("max_lateness_ms"),
        per_window=first.per_window,
        lateness_hist=counts.hist if counts is not None else [],
        curve=curve,
        curve_source=curve_source,
        current_bound_ms=current_bound_ms,
        recommended_bound_ms=recommended_bound_ms,
        completeness_target=target,
        worst_keys=first.worst_keys,
        partitions=partitions,
        validation=validation,
        data_docs_index=_data_docs_uri(options.gx_root),
        provenance=_provenance(now, rec, window_ms, validation),
        settings=rec.settings,
        bounds=bounds_in_force(rec.run),
        # sessions have no one width: the per-window chart draws its narrowest bars
        window_ms=int(window_ms) if window_ms and not _is_sessions(rec) else None,
        signoff=_latest_signoff(spark, warehouse, business_date),
        run_time=(rec.run or {}).get("run_time"),
        copies=_copies(spark, warehouse, business_date) if totals.get("copies_count") else [],
        severity=_severity(summary),
        currency=first.currency,
        by_currency=sections,
        unexplained=_unexplained(recon, totals["unexplained_windows"]),
        unexplained_total=totals["unexplained_windows"],
    )
    return data


def _currency(run: dict[str, Any] | None, business_date: date) -> str:
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


def _severity(summary: dict[str, Any] | None) -> tuple[str, str] | None:
    """The date's severity under the materiality tolerances and its rule (None: a run from
    before them)."""
    if not summary or summary.get("severity") is None:
        return None
    return str(summary["severity"]), str(summary["tolerance_rule"])


def _copies(spark: SparkSession, warehouse: str, business_date: date) -> list[dict[str, Any]]:
    """The first `COPIES_SHOWN` rows of the date's `reconciliation_copies` (the run's: the
    date's rows are replaced by each run), by window, key and event_id: what the desk shows
    of them (`tally.ledger`)."""
    if not _exists(spark, warehouse, T.RECONCILIATION_COPIES.name):
        return []
    copies = _of_date(spark, warehouse, T.RECONCILIATION_COPIES.name, business_date)
    rows = (
        copies.orderBy("window_start", "key", "event_id")
        .select(*[c for c in COPY_COLUMNS if c in copies.columns])  # older tables lack some
        .limit(COPIES_SHOWN)
        .collect()
    )
    return [r.asDict() for r in rows]


def _latest_signoff(
    spark: SparkSession, warehouse: str, business_date: date
) -> dict[str, Any] | None:
    """The date's newest sign-off decision (None when none was recorded)."""
    if not _exists(spark, warehouse, T.SIGNOFFS.name):
        return None
    rows = _of_date(spark, warehouse, T.SIGNOFFS.name, business_date)
    # the four-eyes columns: absent from a table no run of this tally has written to yet
    four_eyes = [c for c in ("proposed", "prepared_by", "approved_by") if c in rows.columns]
    row = (
        rows.orderBy(F.col("decided_at").desc())
        .select("decision", "decided_by", "decided_at", "reason", "run_time", *four_eyes)
        .first()
    )
    return row.asDict() if row is not None else None
