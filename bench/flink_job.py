"""The Flink peer of the Kafka section: Flink SQL over the same pre-filled topic, run by PyFlink
in its own virtualenv (`make flink`, scripts/flink.sh: `.cache/flink`), never in tally's:

    .cache/flink/venv/bin/python -m bench.flink_job --mode agg|durable --bootstrap HOST:PORT
        --topic T --jar KAFKA_CONNECTOR_JAR --out DIR --result FILE
        [--window-ms MS] [--lateness-ms MS] [--parallelism 2] [--checkpoint-ms MS]
    .cache/flink/venv/bin/python -m bench.flink_job --mode count ... (the same flags)

* `agg`: Kafka (the `json` format: parsing in the JVM) -> event time -> watermark (event time
  minus the lateness) -> tumbling window (`TUMBLE`), count and sum per key -> CSV files
  (`window_totals/`). Late rows are dropped silently, as by Spark's `withWatermark`; no
  checkpoints.
* `durable`: one job of two pipelines (a statement set): the bronze pipeline (the `raw`
  format: every record's text with its Kafka partition, offset and timestamp -> JSON files,
  `bronze/`) and the aggregation pipeline; checkpoints every `--checkpoint-ms` into
  `checkpoints/` (the files sink commits its files at checkpoints and at the end).
* `count` (not timed by the bench): the records that the aggregation's parse and filter keep,
  counted in batch mode, so that the rows the timed jobs dropped as late are told apart from
  the records Flink's json format could not read as events.

Both read from the earliest offsets to the offsets that were the latest when the job started
(`scan.bounded.mode = latest-offset`), so the job ends when it has read the pre-filled topic;
at the end of its input Flink closes every window (the maximal watermark), so every event not
dropped as late is in an emitted window. The Kafka source's watermark is per partition (the
minimum over the partitions a reader holds).

Only the standard library and pyflink are imported: this module runs in the Flink virtualenv,
which has neither Spark nor tally. The result file (JSON) holds the session's and the job's
wall seconds; the bench reads the output files afterwards, outside the timed run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

MODES = ("agg", "durable", "count")
TOTALS_DIR, BRONZE_DIR, CHECKPOINT_DIR = "window_totals", "bronze", "checkpoints"
# ISO-8601 UTC with milliseconds (what the generator writes), or epoch milliseconds as text
ISO_PATTERN = "yyyy-MM-dd''T''HH:mm:ss.SSS''Z''"
EVENT_TIME_SQL = (
    "CASE WHEN REGEXP(event_time, '^-?[0-9]+$') "
    "THEN CAST(TO_TIMESTAMP_LTZ(CAST(event_time AS BIGINT), 3) AS TIMESTAMP(3)) "
    f"ELSE TO_TIMESTAMP(event_time, '{ISO_PATTERN}') END"
)


def interval(ms: int) -> str:
    """Milliseconds as a Flink SQL day-to-second interval literal."""
    seconds, milli = divmod(ms, 1000)
    minutes, sec = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    days, hour = divmod(hours, 24)
    return f"INTERVAL '{days} {hour:02d}:{minute:02d}:{sec:02d}.{milli:03d}' DAY TO SECOND(3)"


def kafka_options(bootstrap: str, topic: str, group: str, value_format: str) -> str:
    """The WITH clause of a bounded Kafka source: earliest offsets to the latest at start."""
    options = {
        "connector": "kafka",
        "topic": topic,
        "properties.bootstrap.servers": bootstrap,
        "properties.group.id": group,
        "scan.startup.mode": "earliest-offset",
        "scan.bounded.mode": "latest-offset",
        "format": value_format,
    }
    if value_format == "json":  # a malformed record is skipped, a bad field read as null
        options.update({"json.ignore-parse-errors": "true", "json.fail-on-missing-field": "false"})
    return ", ".join(f"'{k}' = '{v}'" for k, v in options.items())


def events_table_sql(bootstrap: str, topic: str, lateness_ms: int) -> str:
    """The events as the json format reads them, their event time and its watermark."""
    return f"""
        CREATE TABLE events (
            event_id STRING,
            `key` STRING,
            amount BIGINT,
            event_time STRING,
            ts AS {EVENT_TIME_SQL},
            WATERMARK FOR ts AS ts - {interval(lateness_ms)}
        ) WITH ({kafka_options(bootstrap, topic, "bench-flink-events", "json")})"""


VALID_EVENTS_SQL = """
    CREATE TEMPORARY VIEW valid_events AS
    SELECT * FROM events
    WHERE event_id IS NOT NULL AND `key` IS NOT NULL AND amount IS NOT NULL AND ts IS NOT NULL"""


def totals_sql(out: Path, window_ms: int) -> tuple[str, str]:
    """The window totals' sink and the INSERT that fills it (tumbling windows, epoch-aligned)."""
    sink = f"""
        CREATE TABLE window_totals (
            window_start TIMESTAMP(3),
            window_end TIMESTAMP(3),
            `key` STRING,
            event_count BIGINT,
            amount_sum BIGINT
        ) WITH ('connector' = 'filesystem', 'path' = '{out / TOTALS_DIR}', 'format' = 'csv')"""
    insert = f"""
        INSERT INTO window_totals
        SELECT window_start, window_end, `key`, COUNT(*), SUM(amount)
        FROM TABLE(TUMBLE(TABLE valid_events, DESCRIPTOR(ts), {interval(window_ms)}))
        GROUP BY window_start, window_end, `key`"""
    return sink, insert


def bronze_sql(bootstrap: str, topic: str, out: Path) -> tuple[str, str, str]:
    """Every record's text (the raw format) with where it came from, into JSON files."""
    source = f"""
        CREATE TABLE records (
            line STRING,
            kafka_partition INT METADATA FROM 'partition' VIRTUAL,
            kafka_offset BIGINT METADATA FROM 'offset' VIRTUAL,
            kafka_timestamp TIMESTAMP_LTZ(3) METADATA FROM 'timestamp' VIRTUAL
        ) WITH ({kafka_options(bootstrap, topic, "bench-flink-bronze", "raw")})"""
    sink = f"""
        CREATE TABLE bronze (
            line STRING,
            kafka_partition INT,
            kafka_offset BIGINT,
            kafka_timestamp TIMESTAMP_LTZ(3),
            ingest_time TIMESTAMP_LTZ(3)
        ) WITH ('connector' = 'filesystem', 'path' = '{out / BRONZE_DIR}', 'format' = 'json')"""
    insert = """
        INSERT INTO bronze
        SELECT line, kafka_partition, kafka_offset, kafka_timestamp, CURRENT_TIMESTAMP
        FROM records"""
    return source, sink, insert


def table_environment(args: argparse.Namespace, out: Path) -> Any:
    """A streaming TableEnvironment on a local mini-cluster of `--parallelism` slots."""
    from pyflink.common import Configuration
    from pyflink.table import EnvironmentSettings, TableEnvironment

    conf = Configuration()
    conf.set_string("parallelism.default", str(args.parallelism))
    conf.set_string("pipeline.jars", Path(args.jar).resolve().as_uri())
    conf.set_string("table.local-time-zone", "UTC")
    conf.set_string("python.executable", sys.executable)
    conf.set_string("python.client.executable", sys.executable)
    if args.mode == "durable":
        conf.set_string("execution.checkpointing.interval", f"{args.checkpoint_ms} ms")
        conf.set_string("execution.checkpointing.dir", (out / CHECKPOINT_DIR).resolve().as_uri())
    settings = EnvironmentSettings.new_instance().with_configuration(conf)
    if args.mode == "count":
        return TableEnvironment.create(settings.in_batch_mode().build())
    return TableEnvironment.create(settings.in_streaming_mode().build())


def run_job(t_env: Any, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Declare the tables and run the mode's INSERTs as one job, to the end of its input
    (`count`: the valid events, counted)."""
    t_env.execute_sql(events_table_sql(args.bootstrap, args.topic, args.lateness_ms))
    t_env.execute_sql(VALID_EVENTS_SQL)
    if args.mode == "count":
        with t_env.execute_sql("SELECT COUNT(*) FROM valid_events").collect() as rows:
            return {"valid_rows": int(next(iter(rows))[0])}
    totals_sink, totals_insert = totals_sql(out, args.window_ms)
    t_env.execute_sql(totals_sink)
    statements = t_env.create_statement_set()
    statements.add_insert_sql(totals_insert)
    if args.mode == "durable":
        source, sink, insert = bronze_sql(args.bootstrap, args.topic, out)
        t_env.execute_sql(source)
        t_env.execute_sql(sink)
        statements.add_insert_sql(insert)
    statements.execute().wait()
    return {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.flink_job", description=__doc__)
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument("--bootstrap", required=True, help="the Kafka broker, HOST:PORT")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--jar", required=True, help="Flink's Kafka SQL connector jar")
    parser.add_argument("--out", required=True, help="directory for the output files")
    parser.add_argument("--result", required=True, help="JSON file for the job's timings")
    parser.add_argument("--window-ms", type=int, default=60_000)
    parser.add_argument("--lateness-ms", type=int, default=30_000)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--checkpoint-ms", type=int, default=5_000)
    args = parser.parse_args(argv)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    t_env = table_environment(args, out)
    session_s = time.monotonic() - t0
    t1 = time.monotonic()
    counted = run_job(t_env, args, out)
    result = {
        **counted,
        "mode": args.mode,
        "session_s": session_s,
        "run_s": time.monotonic() - t1,
        "parallelism": args.parallelism,
        "checkpoint_ms": args.checkpoint_ms if args.mode == "durable" else None,
    }
    Path(args.result).write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
