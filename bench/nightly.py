"""Section 6 (nightly job per stage vs DuckDB) and section 7 (the lateness curve).

Judged against issue 27's targets (`bench.nightly_targets`). Expected duration, full mode on 2
cores: ~22 min (mostly generating and batch-loading the 20M-event day); the curve ~20 s.

Streaming 20M events only to build the nightly job's inputs would take most of the run, so
the speed-layer tables are built by a **batch load** that uses the project's own reader and
parse (`tally.events.read_jsonl_lines`, `tally.events.parse_events`) and window code
(`tally.windows`): files in arrival order form micro-batches of `files_per_batch`; a batch's
processing time is its newest file's modification time (the stream's arrival clock); the
watermark before a batch is the running maximum of earlier batches' high-water marks (clipped
to processing time + max clock skew) minus L (Spark's global-max rule, not tally's
per-partition minimum); an event is a duplicate if its id arrived before (first arrival wins),
else late if its window ended at or before that watermark, else on time. `stream_aggregates`
holds every on-time window once, emitted by the drain (no watermark at emit), `late_events`
the late ones, `stream_progress` one row per batch plus the drain's row (`drained`, no
watermark after it), as the drained stream stores them. The quarantine table is left empty
(nothing nightly reads it).

Timed stages, with the DAG's own stage functions (`tally_app.nightly`): re-aggregate
(reconcile up to the `batch_aggregates` write) and diff (the rest of reconcile:
`reconciliation`, summary, runs), split by timing `batch.reconcile._replace_date` from the
outside; validate (GX, four suites); report (HTML + CSV); the Spark jobs of each stage and
the peak RSS of the process tree while they run. DuckDB runs the re-aggregation's
query (dedup by event_id, window, business-day filter, count and sum, written to Parquet) on
the same JSON files, and on the Parquet files of the `events` Delta table that reconcile reads;
plain Spark SQL runs it on that table (`spark_plain`: Spark's own floor for target 1).
The process imports the libraries of validate and report once, timed apart, before the first
size (`import_stage_libraries`): every size's stages then do the same work.
"""

from __future__ import annotations

import itertools
import math
import os
import shutil
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, NamedTuple

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from bench.common import (
    DAY,
    Backlog,
    StreamShape,
    arrival_files,
    load_average,
    local_path,
    log,
    session_settings,
    stopwatch,
    tree_rss,
)
from bench.speed import generate_backlog
from tally import tables
from tally.dates import business_day_bounds
from tally.events import ZONED_ISO_TIME, parse_events, read_jsonl_lines
from tally.settings import Settings, setting_default
from tally.vocabulary import ARRIVAL_ORDER, DUPLICATE, LATE, LINE_ORDER, ON_TIME
from tally.windows import aggregate_windows, with_window

APP_ID = "bench-batch-load"
BUSINESS_DATE: date = DAY.date()
CURVE_BOUNDS_MS = (0, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000, 120_000, 300_000, 600_000)
STATUSES = (ON_TIME, LATE, DUPLICATE)  # the statuses the batch load assigns
MAX_CLOCK_SKEW_MS: int = setting_default("max_clock_skew")  # 5 minutes


def _inline(spark: SparkSession, rows: list[dict[str, Column]]) -> DataFrame:
    """Literal rows built in the JVM (no Python workers)."""
    structs = [F.struct(*[value.alias(name) for name, value in r.items()]) for r in rows]
    return spark.range(1).select(F.inline(F.array(*structs)))


def _long(value: int | None) -> Column:
    return F.lit(value).cast("long")


# -- the batch load -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Arrivals:
    """The input files in arrival order, grouped into micro-batches of `files_per_batch`."""

    paths: list[Path]
    batch_of: dict[str, int]  # file name -> batch id
    ingest_ms: dict[int, int]  # batch id -> processing time (its newest file's mtime)


class BatchMark(NamedTuple):
    """A micro-batch's processing time and the watermark before and after it (epoch ms)."""

    batch_id: int
    ingest_ms: int
    before: int | None
    after: int | None  # None before the first event, and after the drain
    drained: bool = False


def _arrivals(input_dir: Path, files_per_batch: int) -> Arrivals:
    paths = arrival_files(input_dir)
    batch_of: dict[str, int] = {}
    ingest: dict[int, int] = {}
    for i, path in enumerate(paths):
        batch = i // files_per_batch
        mtime_ms = path.stat().st_mtime_ns // 1_000_000
        ingest[batch] = max(ingest.get(batch, mtime_ms), mtime_ms)
        batch_of[path.name] = batch
    return Arrivals(paths, batch_of, ingest)


def _stage_parsed(spark: SparkSession, arrivals: Arrivals, stage: str) -> DataFrame:
    """Parse once (the stream's reader and parse), staged as Parquet with the batch ids."""
    files_df = _inline(
        spark,
        [{"file": F.lit(name), "batch_id": _long(b)} for name, b in arrivals.batch_of.items()],
    )
    valid = parse_events(read_jsonl_lines(spark, [str(p) for p in arrivals.paths])).valid
    (
        valid.withColumn("file", F.element_at(F.split("source_file", "/"), -1))
        .join(F.broadcast(files_df), "file")
        .drop("file")
        .write.mode("overwrite")
        .parquet(stage)
    )
    return spark.read.parquet(stage)


def _watermarks(
    staged: DataFrame, ingest: dict[int, int], lateness_ms: int, max_clock_skew_ms: int
) -> list[BatchMark]:
    """The watermark before/after each batch (driver, one number per batch): the running
    maximum of the batches' high-water marks, clipped to processing time + skew, minus L."""
    high_water = {
        int(r["batch_id"]): int(r["hw"])
        for r in staged.groupBy("batch_id")
        .agg(F.max(F.unix_millis("event_time")).alias("hw"))
        .collect()
    }
    wm: int | None = None
    marks: list[BatchMark] = []
    for batch in sorted(ingest):
        before = wm
        if batch in high_water:
            candidate = min(high_water[batch], ingest[batch] + max_clock_skew_ms) - lateness_ms
            wm = candidate if wm is None else max(wm, candidate)
        marks.append(BatchMark(batch, ingest[batch], before, wm))
    return marks


def _write_event_log(
    spark: SparkSession,
    staged: DataFrame,
    marks_df: DataFrame,
    warehouse: str,
    window_ms: int,
    max_clock_skew_ms: int,
) -> DataFrame:
    """The event log: first arrival wins, then late against the watermark before the batch.
    Returns the written table."""
    arrival = Window.partitionBy("event_id").orderBy("batch_id", *LINE_ORDER)
    windowed = with_window(staged, window_ms).join(F.broadcast(marks_df), "batch_id")
    status = (
        F.when(F.row_number().over(arrival) > 1, F.lit(DUPLICATE))
        .when(
            F.col("wm_before_ms").isNotNull()
            & (F.unix_millis("window_end") <= F.col("wm_before_ms")),
            F.lit(LATE),
        )
        .otherwise(F.lit(ON_TIME))
    )
    events = windowed.select(
        "*",
        status.alias("arrival_status"),
        (F.unix_millis("event_time") > F.col("ingest_ms") + F.lit(max_clock_skew_ms)).alias(
            "clock_skewed"
        ),
        F.timestamp_millis("ingest_ms").alias("ingest_time"),
        F.lit(APP_ID).alias("app_id"),
        F.to_date("event_time").alias("event_date"),
    )
    tables.write_table(events, warehouse, tables.EVENTS)
    return tables.read_table(spark, warehouse, tables.EVENTS.name)


def _write_stream_outputs(
    log_df: DataFrame, marks_df: DataFrame, warehouse: str, window_ms: int, last: BatchMark
) -> None:
    """The stream's outputs, derived from the log: every on-time window once, emitted by the
    drain (no watermark at emit), and the late side output."""
    on_time = with_window(log_df.where(F.col("arrival_status") == ON_TIME), window_ms)
    aggregates = aggregate_windows(on_time).select(
        "*",
        F.lit(1).alias("revision"),
        F.timestamp_millis(F.lit(last.ingest_ms)).alias("emit_time"),
        F.lit(None).cast("timestamp").alias("watermark_at_emit"),
        _long(last.batch_id).alias("batch_id"),
        F.lit(APP_ID).alias("app_id"),
        F.lit(True).alias("final"),
        F.lit(False).alias("retracted"),
    )
    tables.write_table(aggregates, warehouse, tables.STREAM_AGGREGATES)
    late = (
        with_window(log_df.where(F.col("arrival_status") == LATE), window_ms)
        .join(F.broadcast(marks_df), "batch_id")
        .select(
            "*",
            F.timestamp_millis("wm_before_ms").alias("watermark_at_arrival"),
            (F.col("wm_before_ms") - F.unix_millis("window_end")).alias("lateness_ms"),
            (F.col("ingest_ms") - F.unix_millis("event_time")).alias("arrival_delay_ms"),
            F.lit("window_closed").alias("reason"),
        )
    )
    tables.write_table(late, warehouse, tables.LATE_EVENTS)


def _progress_row(mark: BatchMark, counts: dict[str, int]) -> dict[str, Column]:
    """The `stream_progress` row of one batch (or of the drain)."""
    zero = _long(0)
    lag = None if mark.drained or mark.after is None else mark.ingest_ms - mark.after
    return {
        "batch_id": _long(mark.batch_id),
        "app_id": F.lit(APP_ID),
        "processing_time": F.timestamp_millis(F.lit(mark.ingest_ms)),
        "watermark_before": F.timestamp_millis(_long(mark.before)),
        "watermark_after": F.timestamp_millis(_long(mark.after)),
        "partition_high_water": tables.literal_map({}, "int", "timestamp"),
        "partition_last_seen": tables.literal_map({}, "int", "timestamp"),
        "partition_idle": tables.literal_map({}, "int", "boolean"),
        "input_lines": _long(sum(counts.values())),
        "valid_events": _long(sum(counts.values())),
        "on_time_events": _long(counts.get(ON_TIME, 0)),
        "allowed_late_events": zero,
        "late_events": _long(counts.get(LATE, 0)),
        "duplicate_events": _long(counts.get(DUPLICATE, 0)),
        "quarantined_lines": zero,
        "clock_skewed_events": zero,
        "windows_emitted": zero,
        "open_windows": zero,
        "watermark_lag_ms": _long(lag),
        "partition_spread_ms": _long(None),
        "batch_duration_ms": zero,
        "drained": F.lit(mark.drained),
        "window_state_version": zero,
        "dedup_state_version": zero,
        "events_version": _long(1),
        "control_records": zero,
        "partition_source_watermark": tables.literal_map({}, "int", "timestamp"),
        "partition_unheard": tables.literal_map({}, "int", "timestamp"),
        "source_watermark_regressions": tables.literal_map({}, "int", "bigint"),
        "source_watermark_regression_ms": tables.literal_map({}, "int", "bigint"),
        "partition_lateness_ms": tables.literal_map({}, "int", "bigint"),
        "partition_delay_weights": F.create_map().cast("map<int,map<int,bigint>>"),
        "partition_delays_measured": tables.literal_map({}, "int", "bigint"),
        # restatements' signal: nothing reads it in this section
        "new_events_by_date": tables.literal_map({}, "date", "bigint"),
        "new_amount_by_date": tables.literal_map({}, "date", "bigint"),
        "report_timezone": F.lit("UTC"),
    }


def _write_progress(
    spark: SparkSession, log_df: DataFrame, marks: list[BatchMark], warehouse: str
) -> dict[int, dict[str, int]]:
    """One progress row per batch, plus the drain's; returns the counts per batch and status."""
    counts: dict[int, dict[str, int]] = {}
    for r in log_df.groupBy("batch_id", "arrival_status").count().collect():
        counts.setdefault(int(r["batch_id"]), {})[str(r["arrival_status"])] = int(r["count"])
    last = marks[-1]
    drain = BatchMark(last.batch_id + 1, last.ingest_ms, last.after, None, drained=True)
    rows = [_progress_row(m, counts.get(m.batch_id, {})) for m in [*marks, drain]]
    tables.write_table(_inline(spark, rows), warehouse, tables.STREAM_PROGRESS)
    return counts


def load_day(
    spark: SparkSession,
    input_dir: Path,
    warehouse: str,
    shape: StreamShape,
    skew_ms: int = MAX_CLOCK_SKEW_MS,
) -> dict[str, Any]:
    """Build events, stream_aggregates, late_events, stream_progress (see the module doc),
    `shape.max_files_per_trigger` files a micro-batch, `skew_ms` the max clock skew.

    The tables are created by their first write (creating the empty ones the stream also
    has would cost a Delta transaction each, and nothing nightly reads them)."""
    window_ms = shape.window_ms
    arrivals = _arrivals(input_dir, shape.max_files_per_trigger)
    stage = str(Path(local_path(warehouse)).parent / "load_stage")
    staged = _stage_parsed(spark, arrivals, stage)
    marks = _watermarks(staged, arrivals.ingest_ms, shape.lateness_ms, skew_ms)
    marks_df = _inline(
        spark,
        [
            {
                "batch_id": _long(m.batch_id),
                "ingest_ms": _long(m.ingest_ms),
                "wm_before_ms": _long(m.before),
            }
            for m in marks
        ],
    )
    log_df = _write_event_log(spark, staged, marks_df, warehouse, window_ms, skew_ms)
    _write_stream_outputs(log_df, marks_df, warehouse, window_ms, marks[-1])
    counts = _write_progress(spark, log_df, marks, warehouse)
    shutil.rmtree(local_path(stage), ignore_errors=True)
    totals = {s: sum(c.get(s, 0) for c in counts.values()) for s in STATUSES}
    return {"batches": len(marks), **totals}


# -- DuckDB ---------------------------------------------------------------------------------------


def duckdb_json(files_glob: str, day: date, window_ms: int, out: Path) -> dict[str, Any]:
    """The re-aggregation on the raw JSON: validate like the contract (JSON integers only,
    zoned ISO or epoch-ms times), first arrival per event_id, window, the day, count + sum."""
    firsts = f"""raw AS (
        SELECT event_id, key, amount, event_time, filename
        FROM read_json('{files_glob}', format = 'newline_delimited', filename = true,
                       ignore_errors = true,
                       columns = {{event_id: 'VARCHAR', key: 'VARCHAR', amount: 'JSON',
                                   event_time: 'JSON', partition: 'JSON'}})
      ), valid AS (
        SELECT event_id, key, CAST(amount AS BIGINT) AS amount, filename,
               CASE WHEN json_type(event_time) IN ('BIGINT', 'UBIGINT')
                    THEN CAST(event_time AS BIGINT)
                    ELSE epoch_ms(CAST(event_time ->> '$' AS TIMESTAMPTZ)) END AS t_ms
        FROM raw
        WHERE trim(event_id) <> '' AND trim(key) <> ''
          AND json_type(amount) IN ('BIGINT', 'UBIGINT')
          AND (json_type(event_time) IN ('BIGINT', 'UBIGINT')
               OR (json_type(event_time) = 'VARCHAR'
                   AND regexp_full_match(event_time ->> '$', '{ZONED_ISO_TIME}')))
      ), firsts AS (
        SELECT key, amount, t_ms
        FROM valid
        QUALIFY row_number() OVER (PARTITION BY event_id ORDER BY filename) = 1
      )"""
    return _duckdb_window_totals(firsts, day, window_ms, out)


def duckdb_parquet(files: list[str], day: date, window_ms: int, out: Path) -> dict[str, Any]:
    """The same query on the Parquet files of the `events` Delta table (arrival order as
    reconcile's: ingest time, batch, file time, file, line)."""
    listing = ", ".join(f"'{f}'" for f in files)
    firsts = f"""firsts AS (
        SELECT key, amount, epoch_ms(event_time) AS t_ms
        FROM read_parquet([{listing}], hive_partitioning = true)
        QUALIFY row_number() OVER (PARTITION BY event_id ORDER BY {", ".join(ARRIVAL_ORDER)}) = 1
      )"""
    return _duckdb_window_totals(firsts, day, window_ms, out)


def _duckdb_window_totals(firsts: str, day: date, window_ms: int, out: Path) -> dict[str, Any]:
    """`firsts`: SQL common table expressions ending in `firsts(key, amount, t_ms)`, one row
    per event. Window them, keep the day's windows, count and sum into Parquet at `out`."""
    lo, hi = business_day_bounds(day, "UTC")
    sql = f"""
    COPY (
      WITH {firsts}, windowed AS (
        SELECT key, amount, t_ms - ((t_ms % {window_ms}) + {window_ms}) % {window_ms} AS ws
        FROM firsts
      )
      SELECT make_timestamp(ws * 1000) AS window_start,
             make_timestamp((ws + {window_ms}) * 1000) AS window_end, key,
             count(*) AS event_count, sum(amount)::BIGINT AS amount_sum
      FROM windowed WHERE ws >= {lo} AND ws < {hi}
      GROUP BY ALL
    ) TO '{out}' (FORMAT parquet)
    """
    return _duckdb_timed(sql, out)


def spark_plain(
    spark: SparkSession, warehouse: str, day: date, window_ms: int, out: Path
) -> dict[str, Any]:
    """The same query as plain Spark SQL on the `events` Delta table, written to Parquet like
    DuckDB's: the first arrival per event_id as one aggregate (`min_by` on the arrival order:
    no sort; faster here than a `row_number` window), window, the day, count + sum. No
    pinning, diff or Delta output: Spark's own floor for the re-aggregation on this machine,
    what target 1 asks of tally's whole re-aggregate + diff."""
    lo, hi = business_day_bounds(day, "UTC")
    log_df = tables.read_table(spark, warehouse, tables.EVENTS.name)
    line = F.struct("key", "amount", F.unix_millis("event_time").alias("t_ms"))
    firsts = (
        log_df.groupBy("event_id")
        .agg(F.min_by(line, F.struct(*ARRIVAL_ORDER)).alias("f"))
        .select("f.*")
    )
    ws = F.col("t_ms") - F.pmod(F.col("t_ms"), F.lit(window_ms))
    rows = (
        firsts.select("key", "amount", ws.alias("ws"))
        .where((F.col("ws") >= lo) & (F.col("ws") < hi))
        .groupBy("ws", "key")
        .agg(F.count(F.lit(1)).alias("event_count"), F.sum("amount").alias("amount_sum"))
    )
    with stopwatch() as t:
        rows.write.mode("overwrite").parquet(str(out))
    totals = (
        spark.read.parquet(str(out))
        .agg(F.count(F.lit(1)), F.sum("event_count"), F.sum("amount_sum"))
        .first()
    )
    assert totals is not None
    return _timed_totals(t["s"], tuple(totals))


def _timed_totals(seconds: float, totals: tuple[Any, ...]) -> dict[str, Any]:
    """A query's time and its output's (rows, events, amount)."""
    rows, events, amount = totals
    return {
        "seconds": seconds,
        "rows": int(rows),
        "events": int(events or 0),
        "amount": int(amount or 0),
    }


def _duckdb_timed(sql: str, out: Path) -> dict[str, Any]:
    import duckdb

    con = duckdb.connect()
    try:
        with stopwatch() as t:
            con.execute(sql)
        row = con.execute(
            f"SELECT count(*), sum(event_count), sum(amount_sum) FROM read_parquet('{out}')"
        ).fetchone()
        threads = con.execute("SELECT current_setting('threads')").fetchone()
    finally:
        con.close()
    assert row is not None
    return {**_timed_totals(t["s"], row), "threads": int(threads[0]) if threads else None}


# -- the stages -----------------------------------------------------------------------------------


@contextmanager
def _timed_replace_date(marks: dict[str, float]) -> Iterator[None]:
    """Record when reconcile finishes writing each of its tables."""
    import batch.reconcile as reconcile_module

    original = reconcile_module._replace_date

    def timed(df: DataFrame, warehouse: str, table: Any, business_date: date) -> None:
        original(df, warehouse, table, business_date)
        marks[table.name] = time.monotonic()

    reconcile_module._replace_date = timed
    try:
        yield
    finally:
        reconcile_module._replace_date = original


_JOB_GROUPS = itertools.count()


@contextmanager
def _jobs_of(spark: SparkSession, stage: str, jobs: dict[str, int]) -> Iterator[None]:
    """Count the Spark jobs a stage starts (`jobs[stage]`): its own job group, from Spark's
    status tracker (it keeps the last `spark.ui.retainedJobs`, 1,000, jobs). A group per call:
    the session runs every size, and a group's ids accumulate over its calls."""
    sc = spark.sparkContext
    group = f"bench-nightly-{stage}-{next(_JOB_GROUPS)}"
    sc.setJobGroup(group, f"nightly {stage}")
    try:
        yield
    finally:
        sc._jsc.clearJobGroup()
        jobs[stage] = len(sc.statusTracker().getJobIdsForGroup(group))


@contextmanager
def _peak_rss(out: dict[str, Any], poll_s: float = 0.25) -> Iterator[None]:
    """`out["peak_rss_mb"]`: the peak RSS of this process's tree (Python and the session's
    JVM), polled every `poll_s` while the block runs."""
    peak = [tree_rss(os.getpid())]
    done = threading.Event()

    def poll() -> None:
        while not done.wait(poll_s):
            peak[0] = max(peak[0], tree_rss(os.getpid()))

    poller = threading.Thread(target=poll, name="nightly-rss", daemon=True)
    poller.start()
    try:
        yield
    finally:
        done.set()
        poller.join()
        out["peak_rss_mb"] = max(peak[0], tree_rss(os.getpid())) / 1024 / 1024


def import_stage_libraries() -> float:
    """Import the libraries of validate and report (Great Expectations with its expectations,
    matplotlib) and return the seconds it took: once per process, before the first size. The
    first size's stages would otherwise carry this one-time cost (~2.5 s) that no later size
    pays; `tally reconcile` imports them while its re-aggregation runs."""
    from expectations import report_charts, validate

    with stopwatch() as t:
        validate.preload()
        report_charts.preload()
    return float(t["s"])


def nightly_stages(spark: SparkSession, settings: Settings) -> dict[str, Any]:
    """reconcile (split in re-aggregate and diff), validate, report; the DAG's stage calls;
    the Spark jobs each stage ran (`jobs`); the peak RSS meanwhile (`peak_rss_mb`)."""
    out: dict[str, Any] = {}
    with _peak_rss(out):
        out.update(_stages(spark, settings))
    return out


def _stages(spark: SparkSession, settings: Settings) -> dict[str, Any]:
    from tally_app.nightly import stage_reaggregate, stage_report, stage_validate, wait_condition

    now = datetime.now(UTC)
    out: dict[str, Any] = {}
    jobs: dict[str, int] = {}
    out["jobs"] = jobs
    with _jobs_of(spark, "wait", jobs):
        waited = wait_condition(settings, BUSINESS_DATE, spark)
    out["wait_ready"] = waited.ready
    marks: dict[str, float] = {}
    with _timed_replace_date(marks), _jobs_of(spark, "reconcile", jobs):
        start = time.monotonic()
        result = stage_reaggregate(settings, BUSINESS_DATE, now, spark)
        end = time.monotonic()
    out["reaggregate_s"] = marks[tables.BATCH_AGGREGATES.name] - start
    out["diff_s"] = end - marks[tables.BATCH_AGGREGATES.name]
    out["reconcile_s"] = end - start
    out["balanced"] = bool(result["balanced"])
    out["windows"] = int(result["windows"])
    with stopwatch() as t, _jobs_of(spark, "validate", jobs):
        outcome = stage_validate(settings, BUSINESS_DATE, now, spark)
    out["validate_s"] = t["s"]
    out["validation_passed"] = bool(outcome.success)
    out["validation_failures"] = list(outcome.failures)
    with stopwatch() as t, _jobs_of(spark, "report", jobs):
        path = stage_report(settings, BUSINESS_DATE, now, spark)
    out["report_s"] = t["s"]
    out["report_exists"] = Path(path).is_file()
    return out


def _nightly_input(size_dir: Path, events: int, input_dir: Path | None) -> dict[str, Any]:
    """The day's input: `input_dir` if given, else a generated day of `events` events."""
    if input_dir is not None:
        return {"input_dir": input_dir, "generate_s": None, "input_reused": str(input_dir)}
    input_dir = size_dir / "input"
    log(f"nightly {events:,}: generating")
    manifest = generate_backlog(input_dir, Backlog(events, max(1, min(500, events // 2000)), 7))
    return {"input_dir": input_dir, "generate_s": manifest["generate_s"]}


def _tally_totals(spark: SparkSession, warehouse: str) -> dict[str, int]:
    """Windows, events and amount of the re-aggregation (`batch_aggregates`)."""
    truth = (
        tables.read_table(spark, warehouse, tables.BATCH_AGGREGATES.name)
        .agg(F.count(F.lit(1)), F.sum("event_count"), F.sum("amount_sum"))
        .first()
    )
    assert truth is not None
    return {
        "tally_rows": int(truth[0]),
        "tally_events": int(truth[1] or 0),
        "tally_amount": int(truth[2] or 0),
    }


def _against_duckdb(
    spark: SparkSession, size_dir: Path, input_dir: Path, warehouse: str, window_ms: int
) -> dict[str, Any]:
    """DuckDB's re-aggregation of the same JSON files and of the `events` table's Parquet, and
    plain Spark SQL's of the table (`spark_plain`)."""
    files = [
        local_path(f) for f in tables.read_table(spark, warehouse, tables.EVENTS.name).inputFiles()
    ]
    return {
        "duckdb_json": duckdb_json(
            str(input_dir / "arrival-*.jsonl"),
            BUSINESS_DATE,
            window_ms,
            size_dir / "duck_json.parquet",
        ),
        "duckdb_parquet": duckdb_parquet(
            files, BUSINESS_DATE, window_ms, size_dir / "duck_parquet.parquet"
        ),
        "spark_plain": spark_plain(
            spark, warehouse, BUSINESS_DATE, window_ms, size_dir / "spark_plain.parquet"
        ),
    }


def nightly_size(
    spark: SparkSession,
    work: Path,
    events: int,
    shape: StreamShape,
    input_dir: Path | None = None,
) -> dict[str, Any]:
    """One day of `events` events: generate (unless given), load, run the stages, DuckDB.
    Micro-batches of the load are `shape.max_files_per_trigger` files."""
    size_dir = work / f"nightly_{events}"
    size_dir.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"events": events, "load_average_before": load_average()}
    result.update(_nightly_input(size_dir, events, input_dir))
    source: Path = result.pop("input_dir")
    result["input_bytes"] = sum(p.stat().st_size for p in source.glob("arrival-*.jsonl"))
    warehouse = str(size_dir / "warehouse")
    log(f"nightly {events:,}: batch load of the speed-layer tables")
    with stopwatch() as t:
        result["load"] = load_day(spark, source, warehouse, shape)
    result["load_s"] = t["s"]
    settings = session_settings(
        spark,
        warehouse=warehouse,
        window=shape.window_ms,
        lateness=shape.lateness_ms,
        gx_root=str(size_dir),
        report_dir=str(size_dir / "reports"),
    )
    log(f"nightly {events:,}: reconcile, validate, report")
    result.update(nightly_stages(spark, settings))
    result.update(_tally_totals(spark, warehouse))
    log(f"nightly {events:,}: DuckDB")
    result.update(_against_duckdb(spark, size_dir, source, warehouse, shape.window_ms))
    result.update(_paired_with_plain(spark, settings, size_dir, result))
    tally_s = result["reaggregate_s"] + result["diff_s"]
    result["ratio_json"] = tally_s / result["duckdb_json"]["seconds"]
    result["ratio_parquet"] = tally_s / result["duckdb_parquet"]["seconds"]
    result["ratio_spark_plain"] = (
        result["spark_plain"]["seconds"] / result["duckdb_parquet"]["seconds"]
    )
    result["same_totals_as_duckdb"] = (
        result["tally_events"] == result["duckdb_json"]["events"]
        and result["tally_amount"] == result["duckdb_json"]["amount"]
        and result["tally_events"] == result["spark_plain"]["events"]
        and result["tally_amount"] == result["spark_plain"]["amount"]
    )
    log(
        f"nightly {events:,}: re-aggregate {result['reaggregate_s']:.1f} s, diff "
        f"{result['diff_s']:.1f} s, validate {result['validate_s']:.1f} s, report "
        f"{result['report_s']:.1f} s; DuckDB JSON {result['duckdb_json']['seconds']:.2f} s"
    )
    return result


def _paired_with_plain(
    spark: SparkSession, settings: Settings, size_dir: Path, result: dict[str, Any]
) -> dict[str, Any]:
    """Re-aggregate + diff against plain Spark SQL's query, alternated in the same session
    (issue 40's target): the stages' run, then plain's (in `_against_duckdb`), then one
    more of each. A single plain run, first of its query in the process and after DuckDB,
    measured 39.0 s where warm runs took 26-29 s: a ratio of one run each says more about
    the order than about tally. Each side's figure is the median (here the mean) of its
    two."""
    from tally_app.nightly import stage_reaggregate

    with stopwatch() as t:
        stage_reaggregate(settings, BUSINESS_DATE, datetime.now(UTC), spark)
    again = spark_plain(
        spark, settings.warehouse, BUSINESS_DATE, settings.window, size_dir / "plain_2.parquet"
    )
    tally_runs = [result["reaggregate_s"] + result["diff_s"], t["s"]]
    plain_runs = [result["spark_plain"]["seconds"], again["seconds"]]
    return {
        "paired": {
            "tally_s": tally_runs,
            "plain_s": plain_runs,
            "ratio": statistics.median(tally_runs) / statistics.median(plain_runs),
        }
    }


def growth(sizes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Time growth of re-aggregate + diff from the smallest to the largest size, and the
    exponent k of time ~ events^k (1.0 = linear)."""
    if len(sizes) < 2:
        return None
    small, large = sizes[0], sizes[-1]
    t_small = small["reaggregate_s"] + small["diff_s"]
    t_large = large["reaggregate_s"] + large["diff_s"]
    size_ratio = large["events"] / small["events"]
    time_ratio = t_large / t_small
    exponent = math.log(time_ratio) / math.log(size_ratio)
    return {
        "from_events": small["events"],
        "to_events": large["events"],
        "size_ratio": size_ratio,
        "time_ratio": time_ratio,
        "exponent": exponent,
        "met": exponent <= 1.0,
    }


def curve_section(
    spark: SparkSession, warehouse: str, window_ms: int, events: int
) -> dict[str, Any]:
    """`lateness_curve` over the date's events from the log, for 10 bounds."""
    from batch.curve import events_from_log, lateness_curve
    from tally.completeness import recommend

    with stopwatch() as t:
        frame, version = events_from_log(spark, warehouse, BUSINESS_DATE, window_ms)
        curve = lateness_curve(frame, window_ms, list(CURVE_BOUNDS_MS), 99.9)
    best = recommend(curve, 99.9)
    return {
        "events": events,
        "curve_events": curve[0]["events"] if curve else 0,
        "bounds": len(CURVE_BOUNDS_MS),
        "seconds": t["s"],
        "recommended_ms": best["lateness_ms"] if best else None,
        "completeness_pct": {str(c["lateness_ms"]): c["completeness_pct"] for c in curve},
        "events_version": version,
    }
