"""Section 3: latency at a steady input rate well below capacity, processing-time trigger.

A writer thread drops one JSONL file into the input directory every `interval` seconds
(atomic rename from a staging directory); its events happened during the interval before
the file, so event time *is* the writer's wall clock. For every window, the delay is the
timestamp of the first Delta commit of the output table that holds a row of the window
(read from the table's `_delta_log`, joined to the rows through their data files) minus the
window's end. Target: at most L + 2 trigger intervals.

The input is clean and steady on purpose (keys Zipf-distributed over 1,000 keys, every
partition in every file, arrival delay below the file interval): the section measures the
engine's delay, not the data's disorder (the generator's clock-ahead events would move the
watermark minutes ahead of the wall clock).

Full mode (issue 12): 1,000 events/s, 2 s trigger, L = 5 s, 10 s windows, so the target is
p99 <= 5 s + 2 x 2 s = 9 s; tally and the plain aggregation query run one after the other in
the bench's own session, 90 s of input each. Expected duration: ~4 min (quick: ~1 min).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bench.common import (
    SteadyRate,
    StreamShape,
    file_commit_times,
    load_average,
    log,
    log_actions,
    percentile,
    session_settings,
)
from bench.plain_job import AGG_TABLE, start_plain_query
from tally import tables
from tally.dates import iso_ms
from tally.settings import Settings


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class SteadyWriter(threading.Thread):
    """Drops `rate * interval` events into `input_dir` every `interval` from `t0_ms` on."""

    def __init__(
        self,
        input_dir: Path,
        t0_ms: int,
        steady: SteadyRate,
        partitions: int = 4,
        keys: int = 1000,
        seed: int = 11,
    ) -> None:
        super().__init__(name="bench-steady-writer", daemon=True)
        self.input_dir = input_dir
        self.staging = input_dir.parent / (input_dir.name + "_staging")
        self.t0_ms = t0_ms
        self.end_ms = t0_ms + int(steady.run_s * 1000)
        self.interval_ms = int(steady.interval_s * 1000)
        self.per_file = max(1, round(steady.rate * steady.interval_s))
        self.partitions = partitions
        self.rng = random.Random(seed)
        weights, acc = [], 0.0
        for k in range(1, keys + 1):
            acc += 1.0 / k**1.1
            weights.append(acc)
        self.keys = [f"merchant-{k}" for k in range(1, keys + 1)]
        self.cum = weights
        self.files = 0
        self.events = 0
        self.late_drops = 0  # files written more than one interval behind schedule
        self.stop = threading.Event()

    def run(self) -> None:
        self.input_dir.mkdir(parents=True, exist_ok=True)
        self.staging.mkdir(parents=True, exist_ok=True)
        due = self.t0_ms
        while due <= self.end_ms and not self.stop.is_set():
            wait = (due - wall_ms()) / 1000
            if wait > 0 and self.stop.wait(wait):
                break
            now = wall_ms()
            if now - due > self.interval_ms:
                self.late_drops += 1
            self._drop(now)
            due += self.interval_ms

    def _drop(self, now: int) -> None:
        rng = self.rng
        keys = rng.choices(self.keys, cum_weights=self.cum, k=self.per_file)
        lines = []
        for i in range(self.per_file):
            # happened during the last interval; arrives now
            event_ms = now - int(rng.random() * self.interval_ms)
            lines.append(
                json.dumps(
                    {
                        "event_id": f"s-{self.events + i:09d}",
                        "key": keys[i],
                        "amount": rng.randint(100, 50_000),
                        "event_time": iso_ms(event_ms),
                        "partition": (self.events + i) % self.partitions,
                    },
                    separators=(",", ":"),
                )
            )
        name = f"steady-{self.files:06d}.jsonl"
        staged = self.staging / name
        staged.write_text("\n".join(lines) + "\n", encoding="utf-8")
        os.replace(staged, self.input_dir / name)
        self.files += 1
        self.events += self.per_file


def window_delays(spark: SparkSession, table_dir: str, lo_end_ms: int, hi_end_ms: int) -> list[int]:
    """Delay (ms) from window end to the first commit holding a row of the window, for every
    window ending in [lo, hi] that has a row (in window order)."""
    times = file_commit_times(table_dir)
    rows = (
        spark.read.format("delta")
        .load(table_dir)
        .select(
            F.unix_millis("window_end").alias("end_ms"),
            F.element_at(F.split(F.col("_metadata.file_path"), "/"), -1).alias("file"),
        )
        .where(F.col("end_ms").between(lo_end_ms, hi_end_ms))
        .distinct()
        .collect()
    )
    first: dict[int, int] = {}
    for r in rows:
        committed = times.get(str(r["file"]))
        if committed is None:
            continue
        end = int(r["end_ms"])
        first[end] = min(first.get(end, committed), committed)
    return [first[e] - e for e in sorted(first)]


def _expected_ends(lo_ms: int, hi_ms: int, window_ms: int) -> list[int]:
    first = -(-lo_ms // window_ms) * window_ms
    return list(range(first, hi_ms + 1, window_ms))


class LogWatch:
    """The largest `window_end` any committed file of a local Delta table holds, from the
    per-file statistics in its `_delta_log` (no Spark job)."""

    def __init__(self, table_dir: str) -> None:
        self.log_dir = Path(table_dir) / "_delta_log"
        self.seen: set[str] = set()
        self.max_end_ms: int | None = None

    def poll(self) -> int | None:
        if not self.log_dir.is_dir():
            return None
        for path in sorted(self.log_dir.glob("*.json")):
            if path.name in self.seen:
                continue
            self.seen.add(path.name)
            for action in log_actions(path):
                add = action.get("add")
                stats = json.loads(add["stats"]) if add and add.get("stats") else None
                end = (stats or {}).get("maxValues", {}).get("window_end")
                if end:
                    ms = int(datetime.fromisoformat(end).timestamp() * 1000)
                    self.max_end_ms = ms if self.max_end_ms is None else max(self.max_end_ms, ms)
        return self.max_end_ms


def _stop_when_readable(
    spark: SparkSession,
    query_name: str,
    writer: SteadyWriter,
    table_dir: str,
    last_end_ms: int,
    deadline: float,
) -> None:
    """After the writer is done, stop the query as soon as the last expected window is
    readable (between triggers), or at the deadline (run_stream's own timeout is the cap)."""
    writer.join()
    watch = LogWatch(table_dir)
    while time.monotonic() < deadline:
        seen = watch.poll()
        if seen is not None and seen >= last_end_ms:
            break
        time.sleep(0.5)
    for query in spark.streams.active:
        if query.name != query_name:
            continue
        for _ in range(120):  # let the batch in flight finish its remaining writes
            if not query.status.get("isTriggerActive"):
                break
            time.sleep(0.25)
        try:
            query.stop()
        except Exception as exc:  # the query may stop on its own at the same moment
            log(f"latency: stopping {query_name}: {exc}")


@dataclass(frozen=True)
class Schedule:
    """When the writer starts (`t0_ms`), which window ends count (`lo_ms`..`hi_ms`, the ends
    expected in between) and how long an engine may run at most (`cap_s`)."""

    t0_ms: int
    lo_ms: int
    hi_ms: int
    expected: list[int]
    cap_s: float


def _schedule(shape: StreamShape, steady: SteadyRate) -> Schedule:
    t0 = wall_ms() + int(steady.lead_s * 1000)
    lo = t0 + int(steady.warmup_s * 1000)
    # the last windows the input can close: their end plus L must be covered by the input
    hi = t0 + int(steady.run_s * 1000) - shape.lateness_ms - int(steady.interval_s * 1000)
    cap_s = (
        steady.lead_s
        + steady.run_s
        + (shape.window_ms + shape.lateness_ms + 4 * steady.trigger_ms) / 1000
        + 60
    )
    return Schedule(t0, lo, hi, _expected_ends(lo, hi, shape.window_ms), cap_s)


def tally_settings(
    warehouse: Path, input_dir: str, shape: StreamShape, spark: SparkSession, **extra: Any
) -> Settings:
    """tally's settings for a run in this process's session."""
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


def _run_tally(
    spark: SparkSession, run_dir: Path, shape: StreamShape, steady: SteadyRate, cap_s: float
) -> list[int]:
    """tally's stream on a processing-time trigger until stopped; its batch durations (ms)."""
    from streaming.run import run_stream

    warehouse = run_dir / "warehouse"
    settings = tally_settings(
        warehouse,
        str(run_dir / "input"),
        StreamShape(shape.window_ms, shape.lateness_ms, 1000, 60_000),
        spark,
        trigger=steady.trigger_ms,
    )
    run_stream(settings, available_now=False, clock="wall", timeout_s=cap_s + 30, spark=spark)
    progress = tables.read_table(spark, str(warehouse), tables.STREAM_PROGRESS.name)
    return [int(r[0]) for r in progress.orderBy("batch_id").select("batch_duration_ms").collect()]


def _run_plain(
    spark: SparkSession, run_dir: Path, shape: StreamShape, steady: SteadyRate, cap_s: float
) -> list[int]:
    """The plain query on a processing-time trigger until stopped; its batch durations (ms)."""
    query = start_plain_query(
        spark,
        str(run_dir / "input"),
        run_dir,
        StreamShape(shape.window_ms, shape.lateness_ms, 1000),
        trigger_ms=steady.trigger_ms,
    )
    try:
        query.awaitTermination(int(cap_s + 30))
    finally:
        query.stop()
    return [
        int((p.durationMs or {}).get("triggerExecution", 0))
        for p in query.recentProgress
        if p.numInputRows
    ]


ENGINE_RUNS = {"tally": ("tally_stream", _run_tally), "plain": ("bench_plain", _run_plain)}


def _output_table(engine: str, run_dir: Path) -> str:
    if engine == "tally":
        return str(run_dir / "warehouse" / tables.STREAM_AGGREGATES.name)
    return str(run_dir / AGG_TABLE)


def run_latency(
    spark: SparkSession, engine: str, run_dir: Path, shape: StreamShape, steady: SteadyRate
) -> dict[str, Any]:
    """One engine at a steady rate; returns the per-window delays and batch durations."""
    (run_dir / "input").mkdir(parents=True, exist_ok=True)
    plan = _schedule(shape, steady)
    writer = SteadyWriter(run_dir / "input", plan.t0_ms, steady)
    query_name, run_engine = ENGINE_RUNS[engine]
    table = _output_table(engine, run_dir)
    last_end = plan.expected[-1] if plan.expected else plan.hi_ms
    stopper = threading.Thread(
        target=_stop_when_readable,
        args=(spark, query_name, writer, table, last_end, time.monotonic() + plan.cap_s),
        name="bench-latency-stopper",
        daemon=True,
    )
    load = load_average()
    writer.start()
    stopper.start()
    try:
        batch_ms = run_engine(spark, run_dir, shape, steady, plan.cap_s)
    finally:
        writer.stop.set()
        writer.join(timeout=30)
        stopper.join(timeout=60)
    delays = window_delays(spark, table, plan.lo_ms, plan.hi_ms)
    missing = len(plan.expected) - len(delays)
    target = shape.lateness_ms + 2 * steady.trigger_ms
    p50, p99 = percentile(delays, 50), percentile(delays, 99)
    return {
        "engine": engine,
        "windows": len(delays),
        "windows_expected": len(plan.expected),
        "windows_missing": missing,
        "delays_ms": delays,
        "p50_ms": p50,
        "p99_ms": p99,
        "max_ms": max(delays) if delays else None,
        "target_ms": target,
        "met": p99 is not None and p99 <= target and missing == 0,
        "batch_duration_ms": batch_ms,
        "files": writer.files,
        "events": writer.events,
        "writer_late_drops": writer.late_drops,
        "load_average_before": load,
    }


def latency_section(
    spark: SparkSession,
    work: Path,
    engines: tuple[str, ...],
    shape: StreamShape,
    steady: SteadyRate,
) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for engine in engines:
        log(
            f"latency: {engine}, {steady.rate} events/s for {steady.run_s:.0f} s, "
            f"trigger {steady.trigger_ms} ms"
        )
        r = results[engine] = run_latency(spark, engine, work / f"latency_{engine}", shape, steady)
        log(
            f"latency: {engine} p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms over "
            f"{r['windows']} windows (target {r['target_ms']} ms)"
        )
        shutil.rmtree(work / f"latency_{engine}", ignore_errors=True)
    return {
        "window_ms": shape.window_ms,
        "lateness_ms": shape.lateness_ms,
        "trigger_ms": steady.trigger_ms,
        "rate_events_per_s": steady.rate,
        "run_s": steady.run_s,
        "file_interval_s": steady.interval_s,
        "warmup_s": steady.warmup_s,
        "target_ms": shape.lateness_ms + 2 * steady.trigger_ms,
        "engines": results,
        "met": bool(results.get("tally", {}).get("met")),
    }
