"""Section 14 (issue 40, part 1): the nightly costs the day, not the history.

One generated day (`day_events`, loaded with the nightly section's batch load,
`bench.nightly.load_day`) in a warehouse of its own, and copies of it that also hold 1, 10 and
40 days of history before it (`events_per_day` each, written in the JVM: ids repeated across
dates, 0.5 % of them, so the day's partitions hold copies of ids first seen days earlier).
Each warehouse's index of event ids (`batch.firsts`) covers its history and not the day, as
after last night's run: its state is restored before every timed run, so each run catches up
the day itself (the day-only warehouse has no index: its run builds it from the day).

Timed: the whole nightly, `tally reconcile --date D` (re-aggregate, diff, validate, report),
one process each (JVM start included), alternating the warehouses, `rounds` rounds; judged on
the medians: 40 days of history ÷ the day alone ≤ 1.15. Beside it, the same nightly with
`--dedup full` on the largest history (the whole log's repeated ids ranked, the path before
the index), the index's one-time build over the whole log (seconds per million lines), its
bytes per line and each run's catch-up seconds (`event_index_catchups`).
"""

from __future__ import annotations

import shutil
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from batch.firsts import catch_up
from bench.common import (
    DAY,
    Backlog,
    StreamShape,
    dir_bytes,
    load_average,
    log,
    run_process,
    stopwatch,
)
from bench.nightly import load_day
from bench.scaleout import reconcile_argv
from bench.speed import generate_backlog
from tally import tables
from tally.durations import format_duration
from tally.money import DEFAULT_CURRENCY
from tally.pins import frontier_of

TARGET = 1.15
Run = tuple[int, str]  # a nightly's window (ms) and Spark master
HISTORY_APP = "bench-history"
INDEX_TABLES = (tables.EVENT_INDEX.name, tables.EVENT_INDEX_CATCHUPS.name)


@dataclass(frozen=True)
class History:
    """The day, the history sizes (days before it) and how many timed rounds."""

    day_events: int
    day_files: int
    events_per_day: int
    history_days: tuple[int, ...]
    rounds: int


def history_events(spark: SparkSession, days: int, per_day: int) -> DataFrame:
    """`days` days of `per_day` events before the bench's day, as `events` rows of one
    streaming query (`HISTORY_APP`, a batch per 20,000 lines): every 200th line repeats the
    id of a line three days earlier (another date, another event time)."""
    n = days * per_day
    i = F.col("id")
    day_index = (i / per_day).cast("long")
    event_date = F.date_sub(F.lit(DAY.date()), (day_index + 1).cast("int"))
    offset_ms = i * 997 % 86_400_000
    event_time = F.timestamp_millis(F.unix_millis(F.to_timestamp(event_date)) + offset_ms)
    repeats = (i % 200 == 0) & (i >= 3 * per_day)
    source = F.when(repeats, i - 3 * per_day).otherwise(i)
    ingest = event_time + F.expr("INTERVAL 2 SECONDS")
    return spark.range(n).select(
        F.md5(F.concat(F.lit("h"), source.cast("string"))).alias("event_id"),
        F.concat(F.lit("merchant-"), (i % 200).cast("string")).alias("key"),
        (i % 10_000 + 1).alias("amount"),
        event_time.alias("event_time"),
        (i % 4).cast("int").alias("partition"),
        F.lit(None).cast("map<string,string>").alias("extra"),
        F.lit(DEFAULT_CURRENCY).alias("currency"),
        F.lit("on_time").alias("arrival_status"),
        F.lit(False).alias("clock_skewed"),
        ingest.alias("source_mtime"),
        F.concat(F.lit("history-"), (i / 20_000).cast("long").cast("string")).alias("source_file"),
        (i % 20_000).alias("source_line"),
        (i / 20_000).cast("long").alias("batch_id"),
        ingest.alias("ingest_time"),
        F.lit(HISTORY_APP).alias("app_id"),
        event_date.alias("event_date"),
    )


def _index_history(spark: SparkSession, warehouse: str) -> dict[str, Any]:
    """Build the index over the history only (its query's frontier): timed, the one-time
    build of a warehouse without an index."""
    events = tables.read_table(spark, warehouse, tables.EVENTS.name)
    pin = {HISTORY_APP: frontier_of(events.where(F.col("app_id") == HISTORY_APP))[HISTORY_APP]}
    version = tables.latest_version(spark, warehouse, tables.EVENTS.name)
    with stopwatch() as t:
        catch_up(spark, warehouse, pin, version, DAY)
    lines = events.where(F.col("app_id") == HISTORY_APP).count()
    index_bytes = sum(dir_bytes(Path(warehouse) / name) or 0 for name in INDEX_TABLES)
    return {
        "build_s": t["s"],
        "build_lines": lines,
        "build_s_per_million": t["s"] / (lines / 1e6),
        "index_bytes": index_bytes,
        "index_bytes_per_line": index_bytes / lines,
    }


def _snapshot(warehouse: Path, keep: Path) -> None:
    for name in INDEX_TABLES:
        if (warehouse / name).exists():
            shutil.copytree(warehouse / name, keep / name)


def _restore(warehouse: Path, keep: Path) -> None:
    """The index as it was before the day (none if there was none)."""
    for name in INDEX_TABLES:
        shutil.rmtree(warehouse / name, ignore_errors=True)
        if (keep / name).exists():
            shutil.copytree(keep / name, warehouse / name)


def _nightly(name: str, warehouse: Path, log_dir: Path, dedup: str, run: Run) -> float:
    """One `tally reconcile` process (the whole nightly) of the day: its wall seconds."""
    window, master = run
    argv = [
        *reconcile_argv(str(warehouse), master, log_dir / "reports"),
        "--window",
        format_duration(window),
        "--dedup",
        dedup,
    ]
    # the generated day holds events timed up to minutes ahead of their file (a source's
    # clock) and about 1 % late events: not what this section measures, so validation
    # tolerates them (the checks still run, as every night)
    env = {
        "TALLY_MAX_CLOCK_SKEW": "1h",
        "TALLY_LATE_RATE_WARN": "0.05",
        "TALLY_LATE_RATE_FAIL": "0.05",
        "TALLY_GX_ROOT": str(warehouse.parent / "gx"),
    }
    return run_process(name, argv, log_dir, env=env).seconds


def _catch_ups(spark: SparkSession, warehouse: str) -> list[float]:
    rows = tables.read_table(spark, warehouse, tables.EVENT_INDEX_CATCHUPS.name).collect()
    return [float(r["seconds"]) for r in rows if r["kind"] == "catch_up"]


def _warehouses(
    spark: SparkSession, work: Path, h: History, shape: StreamShape
) -> dict[int, dict[str, Any]]:
    """The day-only warehouse (0) and one per history size, each with its index saved."""
    base = work / "day" / "warehouse"
    input_dir = work / "day" / "input"
    generate_backlog(input_dir, Backlog(h.day_events, h.day_files, 11))
    load_day(spark, input_dir, str(base), shape)
    out: dict[int, dict[str, Any]] = {0: {"warehouse": base, "keep": work / "day" / "index"}}
    for days in h.history_days:
        where = work / f"history_{days}"
        warehouse = where / "warehouse"
        shutil.copytree(base, warehouse)
        log(f"history: writing {days} days of {h.events_per_day:,} events")
        with stopwatch() as t:
            rows = history_events(spark, days, h.events_per_day).repartition("event_date")
            tables.write_table(rows, str(warehouse), tables.EVENTS)
        out[days] = {"warehouse": warehouse, "keep": where / "index", "write_s": t["s"]}
        out[days].update(_index_history(spark, str(warehouse)))
    for entry in out.values():
        entry["keep"].mkdir(parents=True, exist_ok=True)
        _snapshot(entry["warehouse"], entry["keep"])
    return out


def history_section(
    spark: SparkSession, work: Path, h: History, shape: StreamShape, master: str
) -> dict[str, Any]:
    result: dict[str, Any] = {
        "day_events": h.day_events,
        "events_per_day": h.events_per_day,
        "history_days": list(h.history_days),
        "rounds": h.rounds,
        "target": TARGET,
        "load_average_before": load_average(),
    }
    stores = _warehouses(spark, work, h, shape)
    run: Run = (shape.window_ms, master)
    runs: dict[int, list[float]] = {days: [] for days in stores}
    catch_up_s: dict[int, list[float]] = {days: [] for days in stores}
    for r in range(h.rounds):
        for days, entry in stores.items():
            _restore(entry["warehouse"], entry["keep"])
            seconds = _nightly(f"r{r}_h{days}", entry["warehouse"], work / "logs", "index", run)
            runs[days].append(seconds)
            if days:
                catch_up_s[days] += _catch_ups(spark, str(entry["warehouse"]))
            log(f"history: {days} days, round {r}: {seconds:.1f} s")
    largest = max(h.history_days)
    full = [
        _nightly(f"full_{r}", stores[largest]["warehouse"], work / "logs", "full", run)
        for r in range(h.rounds)
    ]
    medians = {days: statistics.median(s) for days, s in runs.items()}
    ratio = medians[largest] / medians[0]
    result.update(
        {
            "sizes": [
                {
                    "history_days": days,
                    "nightly_s": runs[days],
                    "median_s": medians[days],
                    "catch_up_s": catch_up_s[days],
                    **{k: v for k, v in stores[days].items() if k not in ("warehouse", "keep")},
                }
                for days in sorted(stores)
            ],
            "full_s": full,
            "full_median_s": statistics.median(full),
            "ratio": ratio,
            "full_ratio": statistics.median(full) / medians[0],
            "met": ratio <= TARGET,
        }
    )
    return result
