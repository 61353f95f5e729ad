"""Section 14's restatement figures (issue 40, part 2): what noticing a changed date costs.

A generated backlog of `days` days (`events_per_day` each, a day a micro-batch) streamed by one
`tally stream --available-now --clock arrival` process; the first date reconciled, then the
next `days - 2` too (every date the stream has closed). Timed at 1 and at all reconciled dates:
the check (`batch.restatements.check`: the runs, the `restatements` rows and one aggregate of
`stream_progress`; no date has a signal, so nothing is recomputed), median of 3. Then a file
with 3 late first arrivals for one date and a copy of one of its events is streamed by a
second process, and: the desk's ledger read (delta-rs) must show exactly that date reopened
with the stream's count (4: the copy is days old, beyond the stream's dedup horizon, so new
to the stream), and the check must record exactly that date, with the 3 events and their
amount (`flag`: recorded, nothing re-run). False flags: any other date reopened or recorded
changed.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from batch.reconcile import reconcile
from batch.restatements import check
from bench.common import DAY, Backlog, StreamShape, log, run_process, stopwatch
from bench.speed import generate_backlog
from tally import tables
from tally.durations import format_duration
from tally.ledger_reads import Location, read_ledger

LATE_AMOUNTS = (1_000, 250, 5)
CHECK_ROUNDS = 3


@dataclass(frozen=True)
class Restated:
    """The streamed days, events a day and files a day (a day a micro-batch)."""

    days: int
    events_per_day: int
    files_per_day: int


def _stream(
    name: str,
    input_dir: Path,
    warehouse: Path,
    shape: StreamShape,
    files: int,
    master: str,
    logs: Path,
) -> float:
    """One `tally stream` process over what `input_dir` holds that it has not read yet."""
    argv = [
        sys.executable,
        "-m",
        "tally_app.cli",
        "stream",
        "--available-now",
        "--clock",
        "arrival",
        "--input",
        str(input_dir),
        "--warehouse",
        str(warehouse),
        "--window",
        format_duration(shape.window_ms),
        "--lateness",
        format_duration(shape.lateness_ms),
        "--max-files-per-trigger",
        str(files),
        "--spark-master",
        master,
        "--shuffle-partitions",
        "2",
    ]
    # the generator's sources run minutes ahead of their files: not what this measures
    return run_process(name, argv, logs, env={"TALLY_MAX_CLOCK_SKEW": "1h"}).seconds


def _timed_checks(spark: SparkSession, warehouse: str, now: datetime) -> tuple[float, int]:
    """The median seconds of `CHECK_ROUNDS` checks, and the dates they returned (none)."""
    seconds, found = [], 0
    for _ in range(CHECK_ROUNDS):
        with stopwatch() as t:
            found += len(check(spark, warehouse, now=now, policy="flag", tolerance=(0, 0)))
        seconds.append(t["s"])
    return statistics.median(seconds), found


def _late_file(spark: SparkSession, warehouse: str, input_dir: Path, day: Any) -> Path:
    """3 late first arrivals timed on `day` and a copy of one of its events, in a file timed
    an hour after the newest input file (the stream's arrival clock)."""
    (copy,) = (
        tables.read_table(spark, warehouse, tables.EVENTS.name)
        .where((F.col("event_date") == F.lit(day)) & (F.col("arrival_status") == "on_time"))
        .select("event_id", "key", "amount", "event_time", "partition")
        .limit(1)
        .collect()
    )
    noon = datetime(day.year, day.month, day.day, 12, tzinfo=UTC)
    lines = [
        {
            "event_id": f"restated-{i}",
            "key": "restated",
            "amount": amount,
            "event_time": (noon + timedelta(seconds=i)).isoformat(),
            "partition": 0,
        }
        for i, amount in enumerate(LATE_AMOUNTS)
    ]
    when = copy["event_time"].replace(tzinfo=UTC)
    lines.append({**copy.asDict(), "event_time": when.isoformat()})
    newest = max(p.stat().st_mtime for p in input_dir.glob("*.jsonl"))
    path = input_dir / "zz-restated.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    os.utime(path, (newest + 3600, newest + 3600))
    return path


def restatements_section(
    spark: SparkSession, work: Path, r: Restated, shape: StreamShape, master: str
) -> dict[str, Any]:
    """Stream the backlog, reconcile, time the check at 1 and all dates, restate one date."""
    where = work / "restatements"
    input_dir, warehouse, logs = where / "input", where / "warehouse", where / "logs"
    generate_backlog(
        input_dir,
        Backlog(r.days * r.events_per_day, r.days * r.files_per_day, 13, days=r.days, partitions=4),
    )
    log(f"restatements: streaming {r.days} days of {r.events_per_day:,} events")
    stream_s = _stream("restate_stream", input_dir, warehouse, shape, r.files_per_day, master, logs)
    dates = [DAY.date() + timedelta(days=i) for i in range(r.days - 1)]
    now = datetime.now(UTC)
    wh = str(warehouse)
    reconcile(spark, wh, dates[0], shape.window_ms, now=now)
    one_s, found_one = _timed_checks(spark, wh, now)
    for day in dates[1:]:
        reconcile(spark, wh, day, shape.window_ms, now=now)
    all_s, found_all = _timed_checks(spark, wh, now)
    restated = dates[len(dates) // 2]
    _late_file(spark, wh, input_dir, restated)
    log(f"restatements: streaming 3 late first arrivals and a copy for {restated}")
    _stream("restate_late", input_dir, warehouse, shape, r.files_per_day, master, logs)
    with stopwatch() as ledger_t:
        ledger = read_ledger(Location(wh), datetime.now(UTC))
    reopened = {row["business_date"]: row["reopened"] for row in ledger if row["reopened"]}
    with stopwatch() as check_t:
        checked = check(spark, wh, now=datetime.now(UTC), policy="flag", tolerance=(0, 0))
    changed = {c.business_date.isoformat(): c for c in checked if c.change.changed}
    mine = changed.get(restated.isoformat())
    return {
        "days": r.days,
        "events_per_day": r.events_per_day,
        "dates_reconciled": len(dates),
        "stream_s": stream_s,
        "check_one_s": one_s,
        "check_all_s": all_s,
        "flat": all_s <= 2 * one_s,
        "checks_without_signal_found": found_one + found_all,
        "ledger_s": ledger_t["s"],
        "ledger_reopened": sorted(reopened),
        "ledger_count": None
        if restated.isoformat() not in reopened
        else reopened[restated.isoformat()]["events"],
        "check_s": check_t["s"],
        "restated_date": restated.isoformat(),
        "restated_events": None if mine is None else mine.change.events,
        "restated_amount": None if mine is None else mine.change.amount,
        "expected_events": len(LATE_AMOUNTS),
        "expected_amount": sum(LATE_AMOUNTS),
        "false_flags": len(set(reopened) - {restated.isoformat()})
        + len(set(changed) - {restated.isoformat()}),
    }
