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

from bench.common import (
    Backlog,
    StreamShape,
    Tracer,
    delta_commits,
    load_average,
    log,
    quarter_medians,
)
from bench.speed import generate_backlog, stream_backlog, tally_settings
from tally import tables as T

FLAT_FACTOR = 1.5
SERIES = ("open_windows", "window_state_bytes", "dedup_rows", "dedup_bytes", "batch_s")


def _per_version(table_dir: Path) -> dict[int, tuple[int, int]]:
    """Version -> (rows, bytes) written by that commit."""
    out = {}
    for c in delta_commits(str(table_dir)):
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


def per_batch(spark: SparkSession, warehouse: Path, tracer: Tracer) -> list[dict[str, Any]]:
    """One sample per micro-batch: its progress row, the state commits it pinned (rows and
    bytes from the Delta log), its wall time and the event log's size after it."""
    progress = (
        T.read_table(spark, str(warehouse), T.STREAM_PROGRESS.name)
        .orderBy("batch_id")
        .select(
            "batch_id",
            "open_windows",
            "valid_events",
            "batch_duration_ms",
            "window_state_version",
            "dedup_state_version",
            "events_version",
        )
        .collect()
    )
    state = _per_version(warehouse / T.WINDOW_STATE.name)
    dedup = _per_version(warehouse / T.DEDUP_STATE.name)
    events_total = _per_version(warehouse / T.EVENTS.name)
    durations = {s.batch: s.seconds for s in tracer.tops("batch") if s.batch is not None}
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
    return batches


def state_section(
    spark: SparkSession, work: Path, backlog: Backlog, shape: StreamShape
) -> dict[str, Any]:
    data = work / "state_input"
    log(
        f"state: generating {backlog.events:,} events over {backlog.days:g} days in "
        f"{backlog.files} files"
    )
    manifest = generate_backlog(data, backlog)
    warehouse = work / "state_run" / "warehouse"
    settings = tally_settings(warehouse, str(data), shape, spark)
    tracer = Tracer()
    load = load_average()
    log(f"state: streaming {backlog.files // shape.max_files_per_trigger} micro-batches")
    seconds = stream_backlog(spark, settings, tracer)
    batches = per_batch(spark, warehouse, tracer)
    flat = {
        name: _flat([float(b[name]) for b in batches if b[name] is not None]) for name in SERIES
    }
    shutil.rmtree(work / "state_run", ignore_errors=True)
    shutil.rmtree(data, ignore_errors=True)
    return {
        "events": backlog.events,
        "lines": manifest["lines"],
        "days": backlog.days,
        "files": backlog.files,
        "max_files_per_trigger": shape.max_files_per_trigger,
        "window_ms": shape.window_ms,
        "lateness_ms": shape.lateness_ms,
        "seconds": seconds,
        "load_average_before": load,
        "batches": batches,
        "flat": flat,
        "met": all(v["flat"] for v in flat.values()),
    }
