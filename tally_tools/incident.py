"""A planted incident for the demo: a backfill job that writes events straight into the event
log, bypassing the stream, so the nightly finds windows it cannot explain (`UNEXPLAINED`) and
the desk shows the records behind them. Never run against a real warehouse: it breaks the one
writer rule of `events` on purpose.

    python -m tally_tools.incident --warehouse demo/warehouse --date 2026-11-20 --events 150

Each planted line copies an on-time line of the date (key, currency, event time, amount,
partition) under a new `event_id` (`backfill-N`), in a micro-batch the stream never ran (after
all of its batches, same streaming query) and from the source `backfill:incident`: the batch
counts it, the stream never did.
"""

from __future__ import annotations

import argparse
import sys
from datetime import date

SOURCE = "backfill:incident"


def plant(spark: object, warehouse: str, business_date: date, events: int) -> int:
    """Append `events` uncounted lines to the date's events; returns how many were written."""
    from pyspark.sql import SparkSession, Window
    from pyspark.sql import functions as F

    from tally import tables

    assert isinstance(spark, SparkSession)
    log = tables.read_table(spark, warehouse, tables.EVENTS.name)
    stream = tables.read_table(spark, warehouse, tables.STREAM_AGGREGATES.name)
    last = log.select("batch_id").unionByName(stream.select("batch_id")).agg(F.max("batch_id"))
    last_batch = last.first()[0] or 0  # type: ignore[index]
    # a spread of the date's on-time lines, the same on every run (by id hash)
    of_date = (F.col("event_date") == F.lit(business_date)) & (F.col("arrival_status") == "on_time")
    picked = (
        log.where(of_date)
        .orderBy(F.xxhash64("event_id"), "event_id")
        .limit(events)
        .withColumn("_n", F.row_number().over(Window.orderBy(F.xxhash64("event_id"), "event_id")))
    )
    planted = (
        picked.withColumn("event_id", F.concat(F.lit("backfill-"), F.col("_n").cast("string")))
        .withColumn("batch_id", F.lit(last_batch + 1).cast("long"))
        .withColumn("source_file", F.lit(SOURCE))
        .withColumn("source_line", F.col("_n").cast("long"))
        .drop("_n")
    )
    written = planted.count()
    tables.write_table(planted, warehouse, tables.EVENTS)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tally_tools.incident", description=__doc__)
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("--date", required=True, type=date.fromisoformat)
    parser.add_argument("--events", type=int, default=150)
    args = parser.parse_args(argv)
    if args.events <= 0:
        print("incident: --events must be positive", file=sys.stderr)
        return 2
    from tally.settings import load_settings
    from tally.spark import session_for

    settings = load_settings(overrides={"warehouse": args.warehouse})
    spark = session_for(settings, "tally-incident", short_lived=True)
    written = plant(spark, settings.warehouse, args.date, args.events)
    print(f"incident: {written} events written into the log of {args.date} behind the stream")
    return 0


if __name__ == "__main__":
    sys.exit(main())
