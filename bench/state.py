"""Section 3: open-window state and batch duration over a long run.

A backlog spanning many days of event time is streamed with available-now in many small
micro-batches (10x the speed run's number of batches in full mode). Per micro-batch:
`stream_progress.open_windows` and the `window_state` / `dedup_state` commit's rows and
bytes (`operationMetrics` of the overwrite, read from the Delta log), and the batch's wall
time (timed from the outside). Flat means the last quarter's median is within 1.5x the first
quarter's, while the event log keeps growing.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bench.common import Tracer, delta_commits, load_average, log, quarter_medians, stopwatch
from bench.probe import traced_stream
from bench.speed import StreamShape, generate_backlog, tally_settings

FLAT_FACTOR = 1.5


def _per_version(table_dir: str) -> dict[int, tuple[int, int]]:
    """Version -> (rows, bytes) written by that commit."""
    out = {}
    for c in delta_commits(table_dir):
        if c.metrics:
            out[c.version] = (
                int(c.metrics.get("numOutputRows", 0)),
                int(c.metrics.get("numOutputBytes", 0)),
            )
    return out


def _flat(series: list[float]) -> dict[str, Any]:
    first, last = quarter_medians(series)
    ratio = (last / first) if first and last is not None else (1.0 if not last else None)
    return {
        "first_quarter_median": first,
        "last_quarter_median": last,
        "ratio": ratio,
        "flat": ratio is not None and ratio <= FLAT_FACTOR,
        "max": max(series) if series else None,
    }


def state_section(
    spark: SparkSession,
    work: Path,
    events: int,
    days: float,
    files: int,
    shape: StreamShape,
    seed: int = 17,
) -> dict[str, Any]:
    data = work / "state_input"
    log(f"state: generating {events:,} events over {days:g} days in {files} files")
    manifest = generate_backlog(data, events, files, seed, days=days)
    warehouse = work / "state_run" / "warehouse"
    settings = tally_settings(warehouse, str(data), shape, spark)
    tracer = Tracer()
    load = load_average()
    log(f"state: streaming {files // shape.max_files_per_trigger} micro-batches")
    from streaming.job import run_stream

    with traced_stream(tracer), stopwatch() as t:
        run_stream(settings, available_now=True, drain=False, clock="arrival", spark=spark)
    progress = (
        spark.read.format("delta")
        .load(str(warehouse / "stream_progress"))
        .orderBy("batch_id")
        .select(
            "batch_id",
            "open_windows",
            "valid_events",
            "batch_duration_ms",
            "window_state_version",
            "dedup_state_version",
            "events_version",
            F.unix_millis("watermark_after").alias("watermark_ms"),
        )
        .collect()
    )
    state = _per_version(str(warehouse / "window_state"))
    dedup = _per_version(str(warehouse / "dedup_state"))
    events_total = _per_version(str(warehouse / "events"))
    durations = {
        s.batch: s.end - s.start
        for s in tracer.spans
        if s.label == "batch" and s.depth == 0 and s.batch is not None
    }
    batches: list[dict[str, Any]] = []
    log_rows = 0
    for r in progress:
        rows_bytes = state.get(int(r["window_state_version"]), (0, 0))
        dedup_rb = dedup.get(int(r["dedup_state_version"]), (0, 0))
        log_rows += events_total.get(int(r["events_version"]), (0, 0))[0]
        batches.append(
            {
                "batch_id": int(r["batch_id"]),
                "valid_events": int(r["valid_events"]),
                "open_windows": int(r["open_windows"]),
                "window_state_bytes": rows_bytes[1],
                "dedup_rows": dedup_rb[0],
                "dedup_bytes": dedup_rb[1],
                "batch_s": durations.get(int(r["batch_id"])),
                "batch_duration_ms": int(r["batch_duration_ms"]),
                "event_log_rows": log_rows,
            }
        )

    def series(name: str) -> list[float]:
        return [float(b[name]) for b in batches if b[name] is not None]

    flat = {
        "open_windows": _flat(series("open_windows")),
        "window_state_bytes": _flat(series("window_state_bytes")),
        "dedup_rows": _flat(series("dedup_rows")),
        "dedup_bytes": _flat(series("dedup_bytes")),
        "batch_s": _flat(series("batch_s")),
    }
    shutil.rmtree(work / "state_run", ignore_errors=True)
    shutil.rmtree(data, ignore_errors=True)
    return {
        "events": events,
        "lines": manifest["lines"],
        "days": days,
        "files": files,
        "max_files_per_trigger": shape.max_files_per_trigger,
        "window_ms": shape.window_ms,
        "lateness_ms": shape.lateness_ms,
        "seconds": t["s"],
        "load_average_before": load,
        "batches": batches,
        "flat": flat,
        "met": all(v["flat"] for v in flat.values()),
    }
