"""The plain Spark engines tally is measured against, as a user would write them; each runs as
its own process, so every engine pays its JVM start like `tally stream` does:

    python -m bench.plain_job --mode durable|agg|batch|kafka --input DIR --out DIR --result FILE
        [--files-per-trigger N] [--window-ms MS] [--lateness-ms MS]
        [--spark-master URL] [--shuffle-partitions N]
        [--kafka-bootstrap HOST:PORT --kafka-topic T --records-per-trigger N]

* `durable`: one session, two streaming queries on the same input started side by side, both
  available-now with the same files per trigger: a bronze query appending every raw line to
  Delta (text source, one `from_json`, every row appended: malformed lines keep their text in
  `_corrupt`), and the aggregation query (`agg`). What a plain Spark deployment needs to keep
  every event and produce window totals.
* `agg`: the aggregation query alone: `readStream.json` + `withWatermark` + `window`, count and
  sum per key, append mode into Delta. Late rows are dropped silently; no dedup, no
  quarantine, no event log.
* `batch`: `read.json` + the same aggregation into Delta: the ceiling on this machine.
* `kafka`: the aggregation query reading a Kafka topic instead of files (`--input` is the
  topic): Spark's Kafka source from the earliest offsets, `--records-per-trigger` records a
  micro-batch, the value parsed with `from_json`, then `withWatermark` + `window` into Delta.

The session is `tally.spark.build_session` with the master, shuffle partitions and jars tally
runs with. The result file (JSON) holds what the queries' own progress reports say (input
rows, micro-batches, rows dropped by the watermark, Spark's phase durations) and the
session's start time; the bench reads the output tables afterwards, outside the timed run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bench.common import StreamShape

PLAIN_SCHEMA = "event_id STRING, key STRING, amount BIGINT, event_time STRING, partition INT"
BRONZE_SCHEMA = f"{PLAIN_SCHEMA}, _corrupt STRING"
MODES = ("durable", "agg", "batch", "kafka")
AGG_TABLE, BRONZE_TABLE, BATCH_TABLE = "plain_aggregates", "plain_bronze", "batch_aggregates"


def event_time_column(text: Any) -> Any:
    """ISO-8601 or epoch-millisecond text -> timestamp (null when neither)."""
    return F.when(text.rlike(r"^-?\d+$"), F.timestamp_millis(text.cast("bigint"))).otherwise(
        F.try_to_timestamp(text)
    )


def plain_events(df: DataFrame) -> DataFrame:
    """JSON columns -> typed events; rows missing a field are dropped (the JSON reader gives
    nulls for malformed lines)."""
    return df.select(
        "event_id", "key", "amount", event_time_column(F.col("event_time")).alias("event_time")
    ).where(
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


def _trigger(writer: Any, trigger_ms: int | None) -> Any:
    if trigger_ms is None:
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=f"{trigger_ms} milliseconds")


def start_plain_query(
    spark: SparkSession,
    input_dir: str,
    run_dir: Path,
    shape: StreamShape,
    trigger_ms: int | None = None,
) -> Any:
    """Start the aggregation query: available-now if `trigger_ms` is None, else a
    processing-time trigger. Output: `run_dir/plain_aggregates`."""
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
    return _trigger(writer, trigger_ms).start(str(run_dir / AGG_TABLE))


def start_kafka_query(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    records_per_trigger: int,
    run_dir: Path,
    shape: StreamShape,
) -> Any:
    """The aggregation query over a Kafka topic (available-now), into
    `run_dir/plain_aggregates`."""
    records = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", records_per_trigger)
        .load()
    )
    parsed = records.select(
        F.from_json(F.col("value").cast("string"), PLAIN_SCHEMA).alias("e")
    ).select("e.*")
    totals = window_totals(
        plain_events(parsed).withWatermark("event_time", f"{shape.lateness_ms} milliseconds"),
        shape.window_ms,
    )
    writer = (
        totals.writeStream.format("delta")
        .outputMode("append")
        .option("checkpointLocation", str(run_dir / "checkpoint"))
        .queryName("bench_plain_kafka")
    )
    return writer.trigger(availableNow=True).start(str(run_dir / AGG_TABLE))


def start_bronze_query(
    spark: SparkSession, input_dir: str, run_dir: Path, shape: StreamShape
) -> Any:
    """Start the bronze query: every line of the input appended to `run_dir/plain_bronze`."""
    lines = (
        spark.readStream.format("text")
        .option("maxFilesPerTrigger", shape.max_files_per_trigger)
        .load(input_dir)
    )
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt"}
    bronze = lines.select(
        F.from_json("value", BRONZE_SCHEMA, options).alias("e"),
        F.col("_metadata.file_path").alias("source_file"),
        F.col("_metadata.file_modification_time").alias("source_mtime"),
    ).select(
        "e.event_id",
        "e.key",
        "e.amount",
        event_time_column(F.col("e.event_time")).alias("event_time"),
        "e.partition",
        "e._corrupt",
        "source_file",
        "source_mtime",
        F.current_timestamp().alias("ingest_time"),
    )
    writer = (
        bronze.writeStream.format("delta")
        .outputMode("append")
        .option("checkpointLocation", str(run_dir / "bronze_checkpoint"))
        .queryName("bench_bronze")
    )
    return writer.trigger(availableNow=True).start(str(run_dir / BRONZE_TABLE))


def query_report(query: Any) -> dict[str, Any]:
    """What a finished query's own progress reports say (summed over its micro-batches)."""
    progress = [p for p in query.recentProgress if p.batchId is not None]
    durations: dict[str, int] = {}
    for p in progress:
        for name, ms in (p.durationMs or {}).items():
            durations[name] = durations.get(name, 0) + int(ms)
    return {
        "batches": sum(1 for p in progress if p.numInputRows),
        "input_rows": sum(int(p.numInputRows) for p in progress),
        "dropped_by_watermark": sum(
            int(op.numRowsDroppedByWatermark) for p in progress for op in (p.stateOperators or [])
        ),
        "duration_ms": durations,
    }


def run_mode(
    spark: SparkSession,
    mode: str,
    input_dir: str,
    out: Path,
    shape: StreamShape,
    kafka: tuple[str, int] | None = None,
) -> dict[str, Any]:
    """Run one engine to the end of its input (`kafka`: bootstrap and records per trigger,
    `input_dir` then being the topic); its queries' reports."""
    if mode == "kafka":
        assert kafka is not None, "--mode kafka needs --kafka-bootstrap"
        query = start_kafka_query(spark, kafka[0], input_dir, kafka[1], out, shape)
        query.awaitTermination()
        return {"agg": query_report(query)}
    if mode == "batch":
        events = plain_events(spark.read.schema(PLAIN_SCHEMA).json(input_dir))
        window_totals(events, shape.window_ms).write.format("delta").mode("overwrite").save(
            str(out / BATCH_TABLE)
        )
        return {}
    queries = {}
    if mode == "durable":  # both queries run side by side in the one session
        queries["bronze"] = start_bronze_query(spark, input_dir, out, shape)
    queries["agg"] = start_plain_query(spark, input_dir, out, shape)
    for query in queries.values():
        query.awaitTermination()
    return {name: query_report(query) for name, query in queries.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.plain_job", description=__doc__)
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--out", required=True, help="directory for the output tables")
    parser.add_argument("--result", required=True, help="JSON file for the queries' reports")
    parser.add_argument("--files-per-trigger", type=int, default=10)
    parser.add_argument("--window-ms", type=int, default=60_000)
    parser.add_argument("--lateness-ms", type=int, default=30_000)
    parser.add_argument("--spark-master", default="local[*]")
    parser.add_argument("--shuffle-partitions", type=int, default=4)
    parser.add_argument("--kafka-bootstrap", help="--mode kafka: the broker")
    parser.add_argument("--records-per-trigger", type=int, default=200_000)
    args = parser.parse_args(argv)

    from tally.spark import build_session

    t0 = time.monotonic()
    spark = build_session(
        args.spark_master,
        app_name=f"bench-plain-{args.mode}",
        shuffle_partitions=args.shuffle_partitions,
    )
    session_s = time.monotonic() - t0
    shape = StreamShape(args.window_ms, args.lateness_ms, args.files_per_trigger)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t1 = time.monotonic()
    kafka = (args.kafka_bootstrap, args.records_per_trigger) if args.kafka_bootstrap else None
    queries = run_mode(spark, args.mode, args.input, out, shape, kafka)
    result = {
        "mode": args.mode,
        "session_s": session_s,
        "run_s": time.monotonic() - t1,
        "queries": queries,
    }
    Path(args.result).write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0  # no spark.stop(): like `tally stream`, the JVM ends with this process


if __name__ == "__main__":
    sys.exit(main())
