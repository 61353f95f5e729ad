"""Section 1: the speed layer vs plain Spark on the same JSON backlog, with available-now.

(a) tally: `streaming.job.run_stream(available_now=True, drain=False, clock="arrival")`: parse
    and quarantine, per-partition watermark, dedup, late side output, five Delta tables and
    the state tables committed every micro-batch.
(b) plain Spark: `readStream.json` + `withWatermark` + `window` aggregation, append mode, a
    Delta sink; late rows are dropped silently, no dedup, no quarantine, no event log.
(c) Spark batch: `read.json` + the same aggregation into Delta: the ceiling on this machine.

Same session (settings, shuffle partitions), same files per trigger; the engines run
alternately within a repetition, in a rotated order, each on fresh directories.
"""

from __future__ import annotations

import os
import shutil
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bench.common import Tracer, load_average, log, stopwatch, summary
from bench.probe import describe_phase, traced_stream

PLAIN_SCHEMA = "event_id STRING, key STRING, amount BIGINT, event_time STRING, partition INT"
ENGINES = ("tally", "plain", "batch")
ENGINE_LABELS = {
    "tally": "(a) tally stream",
    "plain": "(b) plain Spark streaming",
    "batch": "(c) Spark batch (ceiling)",
}
DAY = datetime(2026, 11, 20, tzinfo=UTC)


@dataclass(frozen=True)
class StreamShape:
    window_ms: int
    lateness_ms: int
    max_files_per_trigger: int
    idle_timeout_ms: int = 600_000


# -- data -----------------------------------------------------------------------------------------


def generate_backlog(
    out: Path, events: int, files: int, seed: int, days: float = 1.0, partitions: int = 8
) -> dict[str, Any]:
    """A backlog from `tally.generate` (1,000 keys, the generator's lateness and disorder)."""
    from tally.generate import generate

    with stopwatch() as t:
        manifest = generate(
            out=str(out),
            events=events,
            partitions=partitions,
            seed=seed,
            start=DAY,
            duration_ms=int(days * 86_400_000),
            files=files,
            keys=1000,
        )
    manifest["generate_s"] = t["s"]
    manifest["bytes"] = sum(p.stat().st_size for p in out.glob("arrival-*.jsonl"))
    return manifest


def copy_first_files(src: Path, dst: Path, count: int) -> None:
    """The first `count` files (arrival order), modification times kept: a warm-up input."""
    dst.mkdir(parents=True, exist_ok=True)
    for path in sorted(src.glob("arrival-*.jsonl"))[:count]:
        shutil.copy2(path, dst / path.name)


# -- the plain query, as a user would write it ----------------------------------------------------


def plain_events(df: DataFrame) -> DataFrame:
    """JSON columns -> typed events: ISO-8601 or epoch-millisecond times; rows missing a field
    are dropped (the JSON reader gives nulls for malformed lines)."""
    text = F.col("event_time")
    event_time = F.when(text.rlike(r"^-?\d+$"), F.timestamp_millis(text.cast("bigint"))).otherwise(
        F.try_to_timestamp(text)
    )
    return df.select("event_id", "key", "amount", event_time.alias("event_time")).where(
        F.col("event_id").isNotNull()
        & F.col("key").isNotNull()
        & F.col("amount").isNotNull()
        & F.col("event_time").isNotNull()
    )


def window_totals(events: DataFrame, window_ms: int) -> DataFrame:
    """Spark's own tumbling `window` (epoch-aligned, like tally's), count and sum."""
    return (
        events.groupBy(F.window("event_time", f"{window_ms} milliseconds"), "key")
        .agg(F.count(F.lit(1)).alias("event_count"), F.sum("amount").alias("amount_sum"))
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "key",
            "event_count",
            "amount_sum",
        )
    )


def start_plain_query(
    spark: SparkSession,
    input_dir: str,
    run_dir: Path,
    shape: StreamShape,
    trigger_ms: int | None = None,
) -> Any:
    """Start (b): available-now if `trigger_ms` is None, else a processing-time trigger."""
    source = (
        spark.readStream.schema(PLAIN_SCHEMA)
        .option("maxFilesPerTrigger", shape.max_files_per_trigger)
        .json(input_dir)
    )
    totals = window_totals(
        plain_events(source).withWatermark("event_time", f"{shape.lateness_ms} milliseconds"),
        shape.window_ms,
    )
    writer = (
        totals.writeStream.format("delta")
        .outputMode("append")
        .option("checkpointLocation", str(run_dir / "checkpoint"))
        .queryName("bench_plain")
    )
    writer = (
        writer.trigger(availableNow=True)
        if trigger_ms is None
        else writer.trigger(processingTime=f"{trigger_ms} milliseconds")
    )
    return writer.start(str(run_dir / "plain_aggregates"))


def run_plain(spark: SparkSession, input_dir: str, run_dir: Path, shape: StreamShape) -> dict:
    with stopwatch() as t:
        query = start_plain_query(spark, input_dir, run_dir, shape)
        query.awaitTermination()
    progress = [p for p in query.recentProgress if p.batchId is not None]
    durations: dict[str, int] = {}
    for p in progress:
        for name, ms in (p.durationMs or {}).items():
            durations[name] = durations.get(name, 0) + int(ms)
    dropped = sum(
        int(op.numRowsDroppedByWatermark) for p in progress for op in (p.stateOperators or [])
    )
    out = spark.read.format("delta").load(str(run_dir / "plain_aggregates"))
    row = out.agg(F.count(F.lit(1)).alias("rows"), F.sum("event_count").alias("events")).first()
    assert row is not None
    return {
        "seconds": t["s"],
        "batches": sum(1 for p in progress if p.numInputRows),
        "input_rows": sum(int(p.numInputRows) for p in progress),
        "dropped_by_watermark": dropped,
        "output_rows": int(row["rows"]),
        "output_events": int(row["events"] or 0),
        "duration_ms": durations,
    }


def run_batch(spark: SparkSession, input_dir: str, run_dir: Path, shape: StreamShape) -> dict:
    with stopwatch() as t:
        events = plain_events(spark.read.schema(PLAIN_SCHEMA).json(input_dir))
        window_totals(events, shape.window_ms).write.format("delta").mode("overwrite").save(
            str(run_dir / "batch_aggregates")
        )
    out = spark.read.format("delta").load(str(run_dir / "batch_aggregates"))
    row = out.agg(F.count(F.lit(1)).alias("rows"), F.sum("event_count").alias("events")).first()
    assert row is not None
    return {
        "seconds": t["s"],
        "output_rows": int(row["rows"]),
        "output_events": int(row["events"] or 0),
    }


# -- the parse, measured on its own ---------------------------------------------------------------


def _force(df: DataFrame) -> None:
    """Compute every column (a hash sum; maps by their size), return nothing."""
    types = dict(df.dtypes)
    cols = [F.size(c) if types[c].startswith("map") else F.col(c) for c in df.columns]
    df.agg(F.sum(F.hash(*cols))).first()


def parse_diagnostic(spark: SparkSession, input_dir: Path, files: int) -> dict[str, Any]:
    """The first `files` files (one micro-batch): tally's `parse_events` on the raw lines,
    cached as the stream caches them (valid, then quarantine; every column computed), against
    the plain query's JSON reader on the same files (which also reads them), and how many
    `from_json` calls tally's optimized plans hold."""
    from streaming.source import split_lines
    from tally.events import parse_events

    paths = [
        str(p)
        for p in sorted(
            input_dir.glob("arrival-*.jsonl"), key=lambda p: (p.stat().st_mtime_ns, p.name)
        )[:files]
    ]
    raw = split_lines(
        spark.read.format("text")
        .option("wholetext", True)
        .load(paths)
        .select(
            "value",
            F.col("_metadata.file_path").alias("source_file"),
            F.col("_metadata.file_modification_time").alias("source_mtime"),
        )
    ).persist()
    try:
        out: dict[str, Any] = {"files": files, "lines": raw.count()}
        parsed = parse_events(raw)
        for name, frame in (("tally_valid", parsed.valid), ("tally_quarantine", parsed.quarantine)):
            with stopwatch() as t:
                _force(frame)
            out[f"{name}_s"] = t["s"]
            plan = frame._jdf.queryExecution().optimizedPlan().toString()
            out[f"{name}_json_parses_in_plan"] = plan.count("from_json(")
        with stopwatch() as t:
            _force(plain_events(spark.read.schema(PLAIN_SCHEMA).json(paths)))
        out["plain_s"] = t["s"]
    finally:
        raw.unpersist()
    return out


# -- tally ----------------------------------------------------------------------------------------


def tally_settings(
    warehouse: Path, input_dir: str, shape: StreamShape, spark: SparkSession, **extra: Any
) -> Any:
    from tally.settings import Settings

    return Settings(
        window=shape.window_ms,
        lateness=shape.lateness_ms,
        idle_timeout=shape.idle_timeout_ms,
        warehouse=str(warehouse),
        input=input_dir,
        max_files_per_trigger=shape.max_files_per_trigger,
        shuffle_partitions=int(spark.conf.get("spark.sql.shuffle.partitions") or 4),
        spark_master=str(spark.sparkContext.master),
        **extra,
    )


def tally_accounting(spark: SparkSession, warehouse: str) -> dict[str, int]:
    """Read back what the stream did: input lines, valid events, and the accounting identity's
    sides (emitted + late + still open = counted events)."""
    from pyspark.sql import Window

    from tally import tables as T

    progress = T.read_table(spark, warehouse, "stream_progress")
    p = progress.agg(
        F.count(F.lit(1)).alias("batches"),
        F.sum("input_lines").alias("input_lines"),
        F.sum("valid_events").alias("valid_events"),
        F.sum("duplicate_events").alias("duplicates"),
        F.sum("late_events").alias("late"),
        F.sum("quarantined_lines").alias("quarantined"),
        F.max("window_state_version").alias("state_version"),
    ).first()
    assert p is not None
    latest = Window.partitionBy("window_start", "window_end", "key").orderBy(
        F.col("revision").desc()
    )
    emitted = (
        T.read_table(spark, warehouse, "stream_aggregates")
        .withColumn("_r", F.row_number().over(latest))
        .where("_r = 1")
        .agg(F.sum("event_count"))
        .first()
    )
    late = T.read_table(spark, warehouse, "late_events").count()
    state_version = p["state_version"]
    open_events = 0
    if state_version is not None:
        row = (
            T.read_table(spark, warehouse, "window_state", int(state_version))
            .agg(F.sum("event_count"))
            .first()
        )
        open_events = int(row[0] or 0) if row is not None else 0
    return {
        "batches": int(p["batches"]),
        "input_lines": int(p["input_lines"] or 0),
        "valid_events": int(p["valid_events"] or 0),
        "duplicates": int(p["duplicates"] or 0),
        "quarantined": int(p["quarantined"] or 0),
        "late_events": int(late),
        "emitted_events": int(emitted[0] or 0) if emitted is not None else 0,
        "open_window_events": open_events,
        "accounted_events": int(emitted[0] or 0) + int(late) + open_events
        if emitted is not None
        else int(late) + open_events,
    }


def run_tally(
    spark: SparkSession, input_dir: str, run_dir: Path, shape: StreamShape, tracer: Tracer
) -> dict:
    from streaming.job import run_stream

    settings = tally_settings(run_dir / "warehouse", input_dir, shape, spark)
    with traced_stream(tracer), stopwatch() as t:
        run_stream(settings, available_now=True, drain=False, clock="arrival", spark=spark)
    result: dict[str, Any] = {"seconds": t["s"]}
    result.update(tally_accounting(spark, settings.warehouse))
    phases = tracer.breakdown("batch")
    in_batches = tracer.total("batch")
    setup = sum(s.end - s.start for s in tracer.spans if s.label == "create tables")
    result["phases_s"] = {describe_phase(k): v for k, v in phases.items()}
    result["in_foreach_batch_s"] = in_batches
    result["create_tables_s"] = setup
    result["outside_foreach_batch_s"] = t["s"] - in_batches - setup
    result["batch_seconds"] = [
        s.end - s.start for s in tracer.spans if s.label == "batch" and s.depth == 0
    ]
    return result


# -- the section ----------------------------------------------------------------------------------


def speed_section(
    spark: SparkSession,
    work: Path,
    events: int,
    files: int,
    repetitions: int,
    shape: StreamShape,
    warm_up: bool,
    seed: int = 7,
) -> dict[str, Any]:
    """Generate the backlog once, then run (a), (b), (c) alternately `repetitions` times."""
    data = work / "speed_input"
    log(f"speed: generating {events:,} events in {files} files")
    manifest = generate_backlog(data, events, files, seed)
    input_dir = str(data)
    runners: dict[str, Callable[[Path], dict]] = {
        "plain": lambda d: run_plain(spark, input_dir, d, shape),
        "batch": lambda d: run_batch(spark, input_dir, d, shape),
    }

    def tally_runner(d: Path, source: str = input_dir) -> dict:
        return run_tally(spark, source, d, shape, Tracer())

    if warm_up:
        warm = work / "speed_warmup_input"
        copy_first_files(data, warm, min(4, 2 * shape.max_files_per_trigger))  # JIT, caches
        log("speed: warm-up run of each engine (not measured)")
        tally_runner(work / "warmup_tally", str(warm))
        run_plain(spark, str(warm), work / "warmup_plain", shape)
        run_batch(spark, str(warm), work / "warmup_batch", shape)
        for d in ("warmup_tally", "warmup_plain", "warmup_batch", "speed_warmup_input"):
            shutil.rmtree(work / d, ignore_errors=True)

    runs: dict[str, list[dict]] = {e: [] for e in ENGINES}
    for rep in range(repetitions):
        order = ENGINES[rep % 3 :] + ENGINES[: rep % 3]
        for engine in order:
            run_dir = work / f"speed_rep{rep}_{engine}"
            load = load_average()
            log(f"speed: repetition {rep + 1}/{repetitions}, {engine}")
            result = tally_runner(run_dir) if engine == "tally" else runners[engine](run_dir)
            result["load_average_before"] = load
            result["events_per_s"] = manifest["lines"] / result["seconds"]
            runs[engine].append(result)
            log(
                f"speed: {engine} {result['seconds']:.1f} s, {result['events_per_s']:,.0f} events/s"
            )
            shutil.rmtree(run_dir, ignore_errors=True)

    log("speed: parse diagnostic (one micro-batch of files)")
    parse = parse_diagnostic(spark, data, shape.max_files_per_trigger)
    stats = {e: summary([r["events_per_s"] for r in runs[e]]) for e in ENGINES}
    seconds = {e: summary([r["seconds"] for r in runs[e]]) for e in ENGINES}
    # tally events/s over plain events/s = plain seconds over tally seconds, per repetition.
    ratios = [
        b["seconds"] / a["seconds"] for a, b in zip(runs["tally"], runs["plain"], strict=True)
    ]
    ratio = stats["tally"]["median"] / stats["plain"]["median"]
    # The phase breakdown of the median tally repetition.
    by_time = sorted(runs["tally"], key=lambda run: run["seconds"])
    median_rep = by_time[len(by_time) // 2]
    return {
        "events": events,
        "files": files,
        "lines": manifest["lines"],
        "valid_events": manifest["events"] + manifest["duplicates"],
        "distinct_events": manifest["events"],
        "duplicates": manifest["duplicates"],
        "malformed_lines": manifest["malformed_lines"],
        "empty_lines": manifest["malformed_by_kind"]["empty_line"],
        "keys": manifest["keys"],
        "partitions": manifest["partitions"],
        "input_bytes": manifest["bytes"],
        "generate_s": manifest["generate_s"],
        "window_ms": shape.window_ms,
        "lateness_ms": shape.lateness_ms,
        "max_files_per_trigger": shape.max_files_per_trigger,
        "repetitions": repetitions,
        "warm_up": warm_up,
        "runs": runs,
        "events_per_s": stats,
        "seconds": seconds,
        "ratio_tally_plain": ratio,
        "ratio_per_repetition": ratios,
        "target_ratio": 0.8,
        "met": ratio >= 0.8,
        "tally_breakdown": {
            "seconds": median_rep["seconds"],
            "create_tables_s": median_rep["create_tables_s"],
            "in_foreach_batch_s": median_rep["in_foreach_batch_s"],
            "outside_foreach_batch_s": median_rep["outside_foreach_batch_s"],
            "phases_s": median_rep["phases_s"],
            "batches": median_rep["batches"],
            "median_batch_s": statistics.median(median_rep["batch_seconds"])
            if median_rep["batch_seconds"]
            else None,
        },
        "parse": parse,
        "data_dir": str(data),
        "cpu_count": os.cpu_count(),
    }
