"""Section 4 (nightly job per stage vs DuckDB) and section 5 (the lateness curve).

Streaming 20M events only to build the nightly job's inputs would take most of the run, so
the speed-layer tables are built by a **batch load** that uses the project's own parse
(`tally.events.parse_events` over `streaming.source.split_lines`, the stream's reader) and
window code (`tally.windows`): files in arrival order form micro-batches of
`files_per_batch`; a batch's processing time is its newest file's modification time (the
stream's arrival clock); the watermark before a batch is the running maximum of earlier
batches' high-water marks (clipped to processing time + max clock skew) minus L (Spark's
global-max rule, not tally's per-partition minimum); an event is a duplicate if its id arrived
before (first arrival wins), else late if its window ended at or before that watermark, else
on time. `stream_aggregates` holds every on-time window once (as if the stream had drained),
`late_events` the late ones, `stream_progress` one row per batch plus a drained last row.
The quarantine table is left empty (nothing nightly reads it).

Timed stages, with the DAG's own stage functions (`tally.nightly`): re-aggregate (reconcile up
to the `batch_aggregates` write) and diff (the rest of reconcile: `reconciliation`, summary,
runs), split by timing `batch.reconcile._replace_date` from the outside; validate (GX, four
suites); report (HTML + CSV). DuckDB runs the re-aggregation's query (dedup by event_id,
window, business-day filter, count and sum, written to Parquet) on the same JSON files, and on
the Parquet files of the `events` Delta table that reconcile reads.
"""

from __future__ import annotations

import math
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from bench.common import load_average, local_path, log, stopwatch
from bench.speed import DAY, generate_backlog

APP_ID = "bench-batch-load"
BUSINESS_DATE: date = DAY.date()
DRAINED_MS = 253402300799999  # streaming.watermark.DRAINED_WATERMARK_MS
CURVE_BOUNDS_MS = (0, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000, 120_000, 300_000, 600_000)


def _inline(spark: SparkSession, rows: list[dict[str, Column]]) -> DataFrame:
    """Literal rows built in the JVM (no Python workers)."""
    structs = [F.struct(*[value.alias(name) for name, value in r.items()]) for r in rows]
    return spark.range(1).select(F.inline(F.array(*structs)))


def _schema_cast(df: DataFrame, table: Any) -> DataFrame:
    return df.select(*[F.col(f.name).cast(f.dataType).alias(f.name) for f in table.schema().fields])


def load_day(
    spark: SparkSession,
    input_dir: Path,
    warehouse: str,
    window_ms: int,
    lateness_ms: int,
    files_per_batch: int,
    max_clock_skew_ms: int = 300_000,
) -> dict[str, Any]:
    """Build events, stream_aggregates, late_events, stream_progress (see the module doc)."""
    from streaming.source import split_lines
    from tally import tables as T
    from tally.events import parse_events
    from tally.windows import aggregate_windows, with_window

    # The tables are created by their first write (creating the empty ones the stream also
    # has would cost a Delta transaction each, and nothing nightly reads them).
    paths = sorted(input_dir.glob("arrival-*.jsonl"), key=lambda p: (p.stat().st_mtime_ns, p.name))
    ingest: dict[int, int] = {}
    file_rows = []
    for i, path in enumerate(paths):
        batch = i // files_per_batch
        mtime_ms = path.stat().st_mtime_ns // 1_000_000
        ingest[batch] = max(ingest.get(batch, mtime_ms), mtime_ms)
        file_rows.append({"file": F.lit(path.name), "batch_id": F.lit(batch).cast("long")})
    files_df = _inline(spark, file_rows)

    # 1. parse once (the stream's reader and parse), staged as Parquet with the batch ids
    stage = str(Path(local_path(warehouse)).parent / "load_stage")
    raw = (
        spark.read.format("text")
        .option("wholetext", True)
        .load(str(input_dir))
        .select(
            "value",
            F.col("_metadata.file_path").alias("source_file"),
            F.col("_metadata.file_modification_time").alias("source_mtime"),
        )
        .transform(split_lines)
    )
    valid = parse_events(raw).valid
    (
        valid.withColumn("file", F.element_at(F.split("source_file", "/"), -1))
        .join(F.broadcast(files_df), "file")
        .drop("file")
        .write.mode("overwrite")
        .parquet(stage)
    )
    staged = spark.read.parquet(stage)

    # 2. the watermark before/after each batch (driver, one number per batch)
    high_water = {
        int(r["batch_id"]): int(r["hw"])
        for r in staged.groupBy("batch_id")
        .agg(F.max(F.unix_millis("event_time")).alias("hw"))
        .collect()
    }
    wm: int | None = None
    marks: list[tuple[int, int, int | None, int | None]] = []
    for batch in sorted(ingest):
        before = wm
        if batch in high_water:
            candidate = min(high_water[batch], ingest[batch] + max_clock_skew_ms) - lateness_ms
            wm = candidate if wm is None else max(wm, candidate)
        marks.append((batch, ingest[batch], before, wm))
    marks_df = _inline(
        spark,
        [
            {
                "batch_id": F.lit(b).cast("long"),
                "ingest_ms": F.lit(i).cast("long"),
                "wm_before_ms": F.lit(before).cast("long"),
            }
            for b, i, before, _ in marks
        ],
    )

    # 3. the event log: first arrival wins, then late against the watermark before the batch
    from pyspark.sql import Window

    arrival = Window.partitionBy("event_id").orderBy(
        "batch_id", "source_mtime", "source_file", "source_line"
    )
    windowed = with_window(staged, window_ms).join(F.broadcast(marks_df), "batch_id")
    status = (
        F.when(F.row_number().over(arrival) > 1, F.lit("duplicate"))
        .when(
            F.col("wm_before_ms").isNotNull()
            & (F.unix_millis("window_end") <= F.col("wm_before_ms")),
            F.lit("late"),
        )
        .otherwise(F.lit("on_time"))
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
    events_path = T.table_path(warehouse, "events")
    (
        _schema_cast(events, T.EVENTS)
        .write.format("delta")
        .mode("append")
        .partitionBy(*T.EVENTS.partition_by)
        .save(events_path)
    )
    log_df = spark.read.format("delta").load(events_path)

    # 4. the stream's outputs, derived from the log
    last_batch, last_ingest = marks[-1][0], marks[-1][1]
    on_time = with_window(log_df.where(F.col("arrival_status") == "on_time"), window_ms)
    aggregates = aggregate_windows(on_time).select(
        "*",
        F.lit(1).alias("revision"),
        F.timestamp_millis(F.lit(last_ingest)).alias("emit_time"),
        F.timestamp_millis(F.lit(DRAINED_MS)).alias("watermark_at_emit"),
        F.lit(last_batch).cast("long").alias("batch_id"),
        F.lit(APP_ID).alias("app_id"),
    )
    _schema_cast(aggregates, T.STREAM_AGGREGATES).write.format("delta").mode("append").save(
        T.table_path(warehouse, "stream_aggregates")
    )
    late = (
        with_window(log_df.where(F.col("arrival_status") == "late"), window_ms)
        .join(F.broadcast(marks_df), "batch_id")
        .select(
            "*",
            F.timestamp_millis("wm_before_ms").alias("watermark_at_arrival"),
            (F.col("wm_before_ms") - F.unix_millis("window_end")).alias("lateness_ms"),
            (F.col("ingest_ms") - F.unix_millis("event_time")).alias("arrival_delay_ms"),
            F.lit("window_closed").alias("reason"),
        )
    )
    _schema_cast(late, T.LATE_EVENTS).write.format("delta").mode("append").save(
        T.table_path(warehouse, "late_events")
    )

    # 5. one progress row per batch, plus the drain
    counts: dict[int, dict[str, int]] = {}
    for r in log_df.groupBy("batch_id", "arrival_status").count().collect():
        counts.setdefault(int(r["batch_id"]), {})[str(r["arrival_status"])] = int(r["count"])
    progress_rows = []
    empty_ts_map = F.create_map().cast("map<int,timestamp>")
    for batch, ingest_ms, before, after in [*marks, (last_batch + 1, last_ingest, wm, DRAINED_MS)]:
        c = counts.get(batch, {})
        drained = after == DRAINED_MS
        progress_rows.append(
            {
                "batch_id": F.lit(batch).cast("long"),
                "app_id": F.lit(APP_ID),
                "processing_time": F.timestamp_millis(F.lit(ingest_ms)),
                "watermark_before": F.timestamp_millis(F.lit(before).cast("long")),
                "watermark_after": F.timestamp_millis(F.lit(after).cast("long")),
                "partition_high_water": empty_ts_map,
                "partition_last_seen": empty_ts_map,
                "partition_idle": F.create_map().cast("map<int,boolean>"),
                "input_lines": F.lit(sum(c.values())).cast("long"),
                "valid_events": F.lit(sum(c.values())).cast("long"),
                "on_time_events": F.lit(c.get("on_time", 0)).cast("long"),
                "allowed_late_events": F.lit(0).cast("long"),
                "late_events": F.lit(c.get("late", 0)).cast("long"),
                "duplicate_events": F.lit(c.get("duplicate", 0)).cast("long"),
                "quarantined_lines": F.lit(0).cast("long"),
                "clock_skewed_events": F.lit(0).cast("long"),
                "windows_emitted": F.lit(0).cast("long"),
                "open_windows": F.lit(0).cast("long"),
                "watermark_lag_ms": F.lit(
                    None if drained or after is None else ingest_ms - after
                ).cast("long"),
                "partition_spread_ms": F.lit(None).cast("long"),
                "batch_duration_ms": F.lit(0).cast("long"),
                "drained": F.lit(drained),
                "window_state_version": F.lit(0).cast("long"),
                "dedup_state_version": F.lit(0).cast("long"),
                "events_version": F.lit(1).cast("long"),
            }
        )
    progress = _inline(spark, progress_rows)
    _schema_cast(progress, T.STREAM_PROGRESS).write.format("delta").mode("append").save(
        T.table_path(warehouse, "stream_progress")
    )
    shutil.rmtree(local_path(stage), ignore_errors=True)
    totals = {
        s: sum(c.get(s, 0) for c in counts.values()) for s in ("on_time", "late", "duplicate")
    }
    return {"batches": len(marks), **totals}


# -- DuckDB ---------------------------------------------------------------------------------------

_ZONED_ISO = r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}(:?\d{2})?)"


def _day_bounds_ms(day: date) -> tuple[int, int]:
    from batch.reconcile import business_day_bounds

    return business_day_bounds(day, "UTC")


def duckdb_json(files_glob: str, day: date, window_ms: int, out: Path) -> dict[str, Any]:
    """The re-aggregation on the raw JSON: validate like the contract (JSON integers only,
    zoned ISO or epoch-ms times), first arrival per event_id, window, the day, count + sum."""
    lo, hi = _day_bounds_ms(day)
    sql = f"""
    COPY (
      WITH raw AS (
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
                   AND regexp_full_match(event_time ->> '$', '{_ZONED_ISO}')))
      ), firsts AS (
        SELECT key, amount, t_ms - ((t_ms % {window_ms}) + {window_ms}) % {window_ms} AS ws
        FROM valid
        QUALIFY row_number() OVER (PARTITION BY event_id ORDER BY filename) = 1
      )
      SELECT make_timestamp(ws * 1000) AS window_start,
             make_timestamp((ws + {window_ms}) * 1000) AS window_end, key,
             count(*) AS event_count, sum(amount)::BIGINT AS amount_sum
      FROM firsts WHERE ws >= {lo} AND ws < {hi}
      GROUP BY ALL
    ) TO '{out}' (FORMAT parquet)
    """
    return _duckdb_timed(sql, out)


def duckdb_parquet(files: list[str], day: date, window_ms: int, out: Path) -> dict[str, Any]:
    """The same query on the Parquet files of the `events` Delta table (arrival order as
    reconcile's: ingest time, batch, file time, file, line)."""
    lo, hi = _day_bounds_ms(day)
    listing = ", ".join(f"'{f}'" for f in files)
    sql = f"""
    COPY (
      WITH firsts AS (
        SELECT key, amount, epoch_ms(event_time) AS t_ms
        FROM read_parquet([{listing}], hive_partitioning = true)
        QUALIFY row_number() OVER (PARTITION BY event_id ORDER BY ingest_time, batch_id,
                                   source_mtime, source_file, source_line) = 1
      ), windowed AS (
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
    return {
        "seconds": t["s"],
        "rows": int(row[0]),
        "events": int(row[1] or 0),
        "amount": int(row[2] or 0),
        "threads": int(threads[0]) if threads else None,
    }


# -- the stages -----------------------------------------------------------------------------------


@contextmanager
def _timed_replace_date(marks: dict[str, float]) -> Iterator[None]:
    """Record when reconcile finishes writing each of its tables."""
    import batch.reconcile as R

    original = R._replace_date

    def timed(df: DataFrame, warehouse: str, table: Any, business_date: date) -> None:
        original(df, warehouse, table, business_date)
        marks[table.name] = time.monotonic()

    R._replace_date = timed
    try:
        yield
    finally:
        R._replace_date = original


@contextmanager
def _env(**values: str) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def nightly_stages(spark: SparkSession, size_dir: Path, warehouse: str, settings: Any) -> dict:
    """reconcile (split in re-aggregate and diff), validate, report; the DAG's stage calls."""
    from tally.nightly import stage_reaggregate, stage_report, stage_validate, wait_condition

    now = datetime.now(UTC)
    out: dict[str, Any] = {}
    with _env(TALLY_GX_ROOT=str(size_dir), TALLY_REPORT_DIR=str(size_dir / "reports")):
        waited = wait_condition(settings, BUSINESS_DATE, spark)
        out["wait_ready"] = waited.ready
        marks: dict[str, float] = {}
        with _timed_replace_date(marks):
            start = time.monotonic()
            result = stage_reaggregate(settings, BUSINESS_DATE, now, spark)
            end = time.monotonic()
        out["reaggregate_s"] = marks["batch_aggregates"] - start
        out["diff_s"] = end - marks["batch_aggregates"]
        out["reconcile_s"] = end - start
        out["balanced"] = bool(result["balanced"])
        out["windows"] = int(result["windows"])
        with stopwatch() as t:
            outcome = stage_validate(settings, BUSINESS_DATE, now, spark)
        out["validate_s"] = t["s"]
        out["validation_passed"] = bool(outcome.success)
        out["validation_failures"] = list(outcome.failures)
        with stopwatch() as t:
            path = stage_report(settings, BUSINESS_DATE, now, spark)
        out["report_s"] = t["s"]
        out["report_exists"] = Path(path).is_file()
    return out


def nightly_size(
    spark: SparkSession,
    work: Path,
    events: int,
    window_ms: int,
    lateness_ms: int,
    files_per_batch: int,
    input_dir: Path | None = None,
    seed: int = 7,
) -> dict[str, Any]:
    """One day of `events` events: generate (unless given), load, run the stages, DuckDB."""
    from tally.settings import Settings

    size_dir = work / f"nightly_{events}"
    size_dir.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"events": events, "load_average_before": load_average()}
    if input_dir is None:
        input_dir = size_dir / "input"
        log(f"nightly {events:,}: generating")
        manifest = generate_backlog(input_dir, events, max(1, min(500, events // 2000)), seed)
        result["generate_s"] = manifest["generate_s"]
    else:
        result["generate_s"] = None
        result["input_reused"] = str(input_dir)
    result["input_bytes"] = sum(p.stat().st_size for p in input_dir.glob("arrival-*.jsonl"))
    warehouse = str(size_dir / "warehouse")
    log(f"nightly {events:,}: batch load of the speed-layer tables")
    with stopwatch() as t:
        result["load"] = load_day(
            spark, input_dir, warehouse, window_ms, lateness_ms, files_per_batch
        )
    result["load_s"] = t["s"]
    settings = Settings(
        warehouse=warehouse,
        window=window_ms,
        lateness=lateness_ms,
        shuffle_partitions=int(spark.conf.get("spark.sql.shuffle.partitions") or 4),
        spark_master=str(spark.sparkContext.master),
    )
    log(f"nightly {events:,}: reconcile, validate, report")
    result.update(nightly_stages(spark, size_dir, warehouse, settings))
    truth = (
        spark.read.format("delta")
        .load(f"{warehouse}/batch_aggregates")
        .agg(F.count(F.lit(1)), F.sum("event_count"), F.sum("amount_sum"))
        .first()
    )
    assert truth is not None
    result["tally_rows"] = int(truth[0])
    result["tally_events"] = int(truth[1] or 0)
    result["tally_amount"] = int(truth[2] or 0)
    log(f"nightly {events:,}: DuckDB")
    result["duckdb_json"] = duckdb_json(
        str(input_dir / "arrival-*.jsonl"), BUSINESS_DATE, window_ms, size_dir / "duck_json.parquet"
    )
    files = [
        local_path(f) for f in spark.read.format("delta").load(f"{warehouse}/events").inputFiles()
    ]
    result["duckdb_parquet"] = duckdb_parquet(
        files, BUSINESS_DATE, window_ms, size_dir / "duck_parquet.parquet"
    )
    tally_s = result["reaggregate_s"] + result["diff_s"]
    result["ratio_json"] = tally_s / result["duckdb_json"]["seconds"]
    result["ratio_parquet"] = tally_s / result["duckdb_parquet"]["seconds"]
    result["same_totals_as_duckdb"] = (
        result["tally_events"] == result["duckdb_json"]["events"]
        and result["tally_amount"] == result["duckdb_json"]["amount"]
    )
    log(
        f"nightly {events:,}: re-aggregate {result['reaggregate_s']:.1f} s, diff "
        f"{result['diff_s']:.1f} s, validate {result['validate_s']:.1f} s, report "
        f"{result['report_s']:.1f} s; DuckDB JSON {result['duckdb_json']['seconds']:.2f} s"
    )
    return result


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
    from batch.curve import events_from_log, lateness_curve, recommend

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
