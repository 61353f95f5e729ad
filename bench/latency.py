"""Section 2: latency at a steady input rate well below capacity, processing-time trigger.

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
"""

from __future__ import annotations

import json
import os
import random
import shutil
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bench.common import file_commit_times, load_average, log, percentile
from bench.speed import StreamShape, start_plain_query, tally_settings


def _iso(ms: int) -> str:
    moment = datetime.fromtimestamp(ms // 1000, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class SteadyWriter(threading.Thread):
    """Drops `rate * interval` events into `input_dir` every `interval` from `t0_ms` on."""

    def __init__(
        self,
        input_dir: Path,
        t0_ms: int,
        run_s: float,
        interval_s: float,
        rate: int,
        partitions: int = 4,
        keys: int = 1000,
        seed: int = 11,
    ) -> None:
        super().__init__(name="bench-steady-writer", daemon=True)
        self.input_dir = input_dir
        self.staging = input_dir.parent / (input_dir.name + "_staging")
        self.t0_ms = t0_ms
        self.end_ms = t0_ms + int(run_s * 1000)
        self.interval_ms = int(interval_s * 1000)
        self.per_file = max(1, round(rate * interval_s))
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
                        "event_time": _iso(event_ms),
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
            for line in path.read_text().splitlines():
                add = json.loads(line).get("add") if line.strip() else None
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


def run_latency(
    spark: SparkSession,
    engine: str,
    run_dir: Path,
    shape: StreamShape,
    trigger_ms: int,
    rate: int,
    run_s: float,
    interval_s: float,
    warmup_s: float,
    lead_s: float,
) -> dict[str, Any]:
    """One engine at a steady rate; returns the per-window delays and batch durations."""
    input_dir = run_dir / "input"
    input_dir.mkdir(parents=True, exist_ok=True)
    t0 = wall_ms() + int(lead_s * 1000)
    lo = t0 + int(warmup_s * 1000)
    # the last windows the input can close: their end plus L must be covered by the input
    hi = t0 + int(run_s * 1000) - shape.lateness_ms - int(interval_s * 1000)
    expected = _expected_ends(lo, hi, shape.window_ms)
    writer = SteadyWriter(input_dir, t0, run_s, interval_s, rate)
    cap_s = lead_s + run_s + (shape.window_ms + shape.lateness_ms + 4 * trigger_ms) / 1000 + 60
    name = "tally_stream" if engine == "tally" else "bench_plain"
    table = str(
        run_dir / "warehouse" / "stream_aggregates"
        if engine == "tally"
        else run_dir / "plain_aggregates"
    )
    stopper = threading.Thread(
        target=_stop_when_readable,
        args=(
            spark,
            name,
            writer,
            table,
            expected[-1] if expected else hi,
            time.monotonic() + cap_s,
        ),
        name="bench-latency-stopper",
        daemon=True,
    )
    load = load_average()
    writer.start()
    stopper.start()
    batch_ms: list[int] = []
    try:
        if engine == "tally":
            from streaming.job import run_stream

            settings = tally_settings(
                run_dir / "warehouse",
                str(input_dir),
                StreamShape(shape.window_ms, shape.lateness_ms, 1000, 60_000),
                spark,
                trigger=trigger_ms,
            )
            run_stream(
                settings, available_now=False, clock="wall", timeout_s=cap_s + 30, spark=spark
            )
            progress = spark.read.format("delta").load(
                str(run_dir / "warehouse" / "stream_progress")
            )
            batch_ms = [
                int(r[0])
                for r in progress.orderBy("batch_id").select("batch_duration_ms").collect()
            ]
        else:
            query = start_plain_query(
                spark,
                str(input_dir),
                run_dir,
                StreamShape(shape.window_ms, shape.lateness_ms, 1000),
                trigger_ms=trigger_ms,
            )
            try:
                query.awaitTermination(int(cap_s + 30))
            finally:
                query.stop()
            batch_ms = [
                int((p.durationMs or {}).get("triggerExecution", 0))
                for p in query.recentProgress
                if p.numInputRows
            ]
    finally:
        writer.stop.set()
        writer.join(timeout=30)
        stopper.join(timeout=60)
    delays = window_delays(spark, table, lo, hi)
    missing = len(expected) - len(delays)
    target = shape.lateness_ms + 2 * trigger_ms
    p50, p99 = percentile(delays, 50), percentile(delays, 99)
    return {
        "engine": engine,
        "windows": len(delays),
        "windows_expected": len(expected),
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
    trigger_ms: int,
    rate: int,
    run_s: float,
    interval_s: float = 1.0,
    warmup_s: float = 20.0,
    lead_s: float = 8.0,
) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for engine in engines:
        log(f"latency: {engine}, {rate} events/s for {run_s:.0f} s, trigger {trigger_ms} ms")
        results[engine] = run_latency(
            spark,
            engine,
            work / f"latency_{engine}",
            shape,
            trigger_ms,
            rate,
            run_s,
            interval_s,
            warmup_s,
            lead_s,
        )
        r = results[engine]
        log(
            f"latency: {engine} p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms over "
            f"{r['windows']} windows (target {r['target_ms']} ms)"
        )
        shutil.rmtree(work / f"latency_{engine}", ignore_errors=True)
    return {
        "window_ms": shape.window_ms,
        "lateness_ms": shape.lateness_ms,
        "trigger_ms": trigger_ms,
        "rate_events_per_s": rate,
        "run_s": run_s,
        "file_interval_s": interval_s,
        "warmup_s": warmup_s,
        "target_ms": shape.lateness_ms + 2 * trigger_ms,
        "engines": results,
        "met": bool(results.get("tally", {}).get("met")),
    }
