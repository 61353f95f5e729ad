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
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bench.common import (
    DAY,
    Backlog,
    StreamShape,
    Tracer,
    arrival_files,
    load_average,
    log,
    session_settings,
    stopwatch,
    summary,
)
from bench.probe import describe_phase, traced_stream
from tally import tables as T
from tally.events import parse_events, read_jsonl_lines
from tally.settings import Settings

PLAIN_SCHEMA = "event_id STRING, key STRING, amount BIGINT, event_time STRING, partition INT"
ENGINES = ("tally", "plain", "batch")
ENGINE_LABELS = {
    "tally": "(a) tally stream",
    "plain": "(b) plain Spark streaming",
    "batch": "(c) Spark batch (ceiling)",
}
TARGET_RATIO = 0.8  # tally events/s over plain Spark events/s

Runner = Callable[[str, Path], dict[str, Any]]  # (input directory, run directory) -> result


# -- data -----------------------------------------------------------------------------------------


def generate_backlog(out: Path, backlog: Backlog) -> dict[str, Any]:
    """A backlog from `tally.generate` (1,000 keys, the generator's lateness and disorder)."""
    from tally.generate import generate

    with stopwatch() as t:
        manifest = generate(
            out=str(out),
            events=backlog.events,
            partitions=backlog.partitions,
            seed=backlog.seed,
            start=DAY,
            duration_ms=int(backlog.days * 86_400_000),
            files=backlog.files,
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


def _output_totals(spark: SparkSession, table_dir: Path) -> dict[str, int]:
    """Rows and summed `event_count` of an engine's output table."""
    out = spark.read.format("delta").load(str(table_dir))
    row = out.agg(F.count(F.lit(1)).alias("rows"), F.sum("event_count").alias("events")).first()
    assert row is not None
    return {"output_rows": int(row["rows"]), "output_events": int(row["events"] or 0)}


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
    return {
        "seconds": t["s"],
        "batches": sum(1 for p in progress if p.numInputRows),
        "input_rows": sum(int(p.numInputRows) for p in progress),
        "dropped_by_watermark": dropped,
        **_output_totals(spark, run_dir / "plain_aggregates"),
        "duration_ms": durations,
    }


def run_batch(spark: SparkSession, input_dir: str, run_dir: Path, shape: StreamShape) -> dict:
    with stopwatch() as t:
        events = plain_events(spark.read.schema(PLAIN_SCHEMA).json(input_dir))
        window_totals(events, shape.window_ms).write.format("delta").mode("overwrite").save(
            str(run_dir / "batch_aggregates")
        )
    return {"seconds": t["s"], **_output_totals(spark, run_dir / "batch_aggregates")}


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
    paths = [str(p) for p in arrival_files(input_dir)[:files]]
    raw = read_jsonl_lines(spark, paths).persist()
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
) -> Settings:
    return session_settings(
        spark,
        window=shape.window_ms,
        lateness=shape.lateness_ms,
        idle_timeout=shape.idle_timeout_ms,
        warehouse=str(warehouse),
        input=input_dir,
        max_files_per_trigger=shape.max_files_per_trigger,
        **extra,
    )


def stream_backlog(spark: SparkSession, settings: Settings, tracer: Tracer) -> float:
    """tally's stream over the whole input (available-now, arrival clock, not drained), its
    micro-batches traced into `tracer`; the wall seconds of the `run_stream` call."""
    from streaming.job import run_stream

    with traced_stream(tracer), stopwatch() as t:
        run_stream(settings, available_now=True, drain=False, clock="arrival", spark=spark)
    return t["s"]


def tally_accounting(spark: SparkSession, warehouse: str) -> dict[str, int]:
    """Read back what the stream did: input lines, valid events, and the accounting identity's
    sides (emitted + late + still open = counted events)."""
    from pyspark.sql import Window

    p = (
        T.read_table(spark, warehouse, T.STREAM_PROGRESS.name)
        .agg(
            F.count(F.lit(1)).alias("batches"),
            F.sum("input_lines").alias("input_lines"),
            F.sum("valid_events").alias("valid_events"),
            F.sum("duplicate_events").alias("duplicates"),
            F.sum("quarantined_lines").alias("quarantined"),
            F.max("window_state_version").alias("state_version"),
        )
        .first()
    )
    assert p is not None
    latest = Window.partitionBy("window_start", "window_end", "key").orderBy(
        F.col("revision").desc()
    )
    emitted = (
        T.read_table(spark, warehouse, T.STREAM_AGGREGATES.name)
        .withColumn("_r", F.row_number().over(latest))
        .where("_r = 1")
        .agg(F.sum("event_count"))
        .first()
    )
    emitted_events = int(emitted[0] or 0) if emitted is not None else 0
    late = T.read_table(spark, warehouse, T.LATE_EVENTS.name).count()
    state_version = p["state_version"]
    open_events = 0
    if state_version is not None:
        row = (
            T.read_table(spark, warehouse, T.WINDOW_STATE.name, int(state_version))
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
        "emitted_events": emitted_events,
        "open_window_events": open_events,
        "accounted_events": emitted_events + int(late) + open_events,
    }


def run_tally(
    spark: SparkSession, input_dir: str, run_dir: Path, shape: StreamShape, tracer: Tracer
) -> dict:
    settings = tally_settings(run_dir / "warehouse", input_dir, shape, spark)
    seconds = stream_backlog(spark, settings, tracer)
    in_batches = tracer.total("batch")
    setup = tracer.total("create tables")
    return {
        "seconds": seconds,
        **tally_accounting(spark, settings.warehouse),
        "phases_s": {describe_phase(k): v for k, v in tracer.breakdown("batch").items()},
        "in_foreach_batch_s": in_batches,
        "create_tables_s": setup,
        "outside_foreach_batch_s": seconds - in_batches - setup,
        "batch_seconds": [s.seconds for s in tracer.tops("batch")],
    }


# -- the section ----------------------------------------------------------------------------------


def _engines(spark: SparkSession, shape: StreamShape) -> dict[str, Runner]:
    """The three engines, in `ENGINES` order."""
    return {
        "tally": lambda source, d: run_tally(spark, source, d, shape, Tracer()),
        "plain": lambda source, d: run_plain(spark, source, d, shape),
        "batch": lambda source, d: run_batch(spark, source, d, shape),
    }


def _warm_up(engines: dict[str, Runner], data: Path, work: Path, files: int) -> None:
    """One unmeasured run of each engine on the first few files (JIT, caches)."""
    warm = work / "speed_warmup_input"
    copy_first_files(data, warm, files)
    log("speed: warm-up run of each engine (not measured)")
    for engine, run in engines.items():
        run(str(warm), work / f"warmup_{engine}")
    for d in (*(f"warmup_{e}" for e in engines), "speed_warmup_input"):
        shutil.rmtree(work / d, ignore_errors=True)


def _alternate(
    engines: dict[str, Runner], input_dir: str, work: Path, repetitions: int, lines: int
) -> dict[str, list[dict]]:
    """`repetitions` rounds of every engine, in an order rotated each round, fresh directories."""
    runs: dict[str, list[dict]] = {e: [] for e in ENGINES}
    for rep in range(repetitions):
        for engine in ENGINES[rep % 3 :] + ENGINES[: rep % 3]:
            run_dir = work / f"speed_rep{rep}_{engine}"
            load = load_average()
            log(f"speed: repetition {rep + 1}/{repetitions}, {engine}")
            result = engines[engine](input_dir, run_dir)
            result["load_average_before"] = load
            result["events_per_s"] = lines / result["seconds"]
            runs[engine].append(result)
            log(
                f"speed: {engine} {result['seconds']:.1f} s, {result['events_per_s']:,.0f} events/s"
            )
            shutil.rmtree(run_dir, ignore_errors=True)
    return runs


def _median_breakdown(tally_runs: list[dict]) -> dict[str, Any]:
    """Where the time went in the median tally repetition."""
    median_rep = sorted(tally_runs, key=lambda run: run["seconds"])[len(tally_runs) // 2]
    keys = ("seconds", "create_tables_s", "in_foreach_batch_s", "outside_foreach_batch_s")
    batch_seconds = median_rep["batch_seconds"]
    return {
        **{k: median_rep[k] for k in keys},
        "phases_s": median_rep["phases_s"],
        "batches": median_rep["batches"],
        "median_batch_s": statistics.median(batch_seconds) if batch_seconds else None,
    }


def _input_facts(manifest: dict[str, Any]) -> dict[str, Any]:
    """What the generator wrote, as the report describes the input."""
    return {
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
    }


def speed_section(
    spark: SparkSession,
    work: Path,
    backlog: Backlog,
    shape: StreamShape,
    repetitions: int,
    warm_up: bool,
) -> dict[str, Any]:
    """Generate the backlog once, then run (a), (b), (c) alternately `repetitions` times."""
    data = work / "speed_input"
    log(f"speed: generating {backlog.events:,} events in {backlog.files} files")
    manifest = generate_backlog(data, backlog)
    engines = _engines(spark, shape)
    if warm_up:
        _warm_up(engines, data, work, min(4, 2 * shape.max_files_per_trigger))
    runs = _alternate(engines, str(data), work, repetitions, manifest["lines"])

    log("speed: parse diagnostic (one micro-batch of files)")
    parse = parse_diagnostic(spark, data, shape.max_files_per_trigger)
    stats = {e: summary([r["events_per_s"] for r in runs[e]]) for e in ENGINES}
    # tally events/s over plain events/s = plain seconds over tally seconds, per repetition.
    ratios = [
        b["seconds"] / a["seconds"] for a, b in zip(runs["tally"], runs["plain"], strict=True)
    ]
    ratio = stats["tally"]["median"] / stats["plain"]["median"]
    return {
        "events": backlog.events,
        "files": backlog.files,
        **_input_facts(manifest),
        "window_ms": shape.window_ms,
        "lateness_ms": shape.lateness_ms,
        "max_files_per_trigger": shape.max_files_per_trigger,
        "repetitions": repetitions,
        "warm_up": warm_up,
        "runs": runs,
        "events_per_s": stats,
        "seconds": {e: summary([r["seconds"] for r in runs[e]]) for e in ENGINES},
        "ratio_tally_plain": ratio,
        "ratio_per_repetition": ratios,
        "target_ratio": TARGET_RATIO,
        "met": ratio >= TARGET_RATIO,
        "tally_breakdown": _median_breakdown(runs["tally"]),
        "parse": parse,
        "data_dir": str(data),
        "cpu_count": os.cpu_count(),
    }
