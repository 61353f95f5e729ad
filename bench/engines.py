"""The engines as OS processes, each timed from the outside (wall clock from process start to
exit, JVM start included) with the peak RSS of its process tree (`bench.common.run_process`):

* tally: the real command line, `tally stream --available-now --clock arrival` (through
  `bench.tally_cli`, which only adds a handler writing the stream's DEBUG phase records to a
  trace file);
* the plain Spark engines of `bench.plain_job` (durable, aggregation only, batch).

Every engine process builds its session with `tally.spark.build_session` on the same master
and shuffle partitions (and jars); what they wrote is read afterwards by the bench's own
session, outside the timed run.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bench import phases
from bench.common import StreamShape, run_process
from bench.plain_job import AGG_TABLE, BATCH_TABLE, BRONZE_TABLE
from tally import tables
from tally.durations import format_duration
from tally.windows import WINDOW_KEY

Sampler = Callable[[float, int], None]


@dataclass(frozen=True)
class EngineEnv:
    """What every engine process runs with."""

    master: str
    shuffle_partitions: int
    timeout_s: float = 7200.0  # per process


def _rounded_mb(n: int) -> float:
    return round(n / 1e6, 1)


# -- tally ----------------------------------------------------------------------------------------


def tally_argv(
    trace: Path,
    input_dir: str,
    run_dir: Path,
    shape: StreamShape,
    env: EngineEnv,
    drain: bool = False,
) -> list[str]:
    """`tally stream --available-now --clock arrival` with the shape's settings."""
    args = [
        "stream",
        "--available-now",
        "--clock",
        "arrival",
        "--input",
        input_dir,
        "--warehouse",
        str(run_dir / "warehouse"),
        "--checkpoint",
        str(run_dir / "checkpoint"),
        "--window",
        format_duration(shape.window_ms),
        "--lateness",
        format_duration(shape.lateness_ms),
        "--idle-timeout",
        format_duration(shape.idle_timeout_ms),
        "--max-files-per-trigger",
        str(shape.max_files_per_trigger),
        "--spark-master",
        env.master,
        "--shuffle-partitions",
        str(env.shuffle_partitions),
    ]
    if drain:
        args.append("--drain")
    return [sys.executable, "-m", "bench.tally_cli", str(trace), "--", *args]


def run_tally(
    name: str,
    input_dir: str,
    run_dir: Path,
    shape: StreamShape,
    env: EngineEnv,
    drain: bool = False,
    sample: Sampler | None = None,
    extra: Sequence[str] = (),
) -> dict[str, Any]:
    """One `tally stream` process over the whole input (`extra`: more stream flags); its wall
    time, peak RSS and the micro-batches' phases from its trace."""
    trace = run_dir / "trace.jsonl"
    proc = run_process(
        name,
        [*tally_argv(trace, input_dir, run_dir, shape, env, drain), *extra],
        run_dir / "logs",
        sample=sample,
        timeout_s=env.timeout_s,
    )
    batches = phases.read_trace(trace)
    return {
        "seconds": proc.seconds,
        "peak_rss_mb": _rounded_mb(proc.peak_rss_bytes),
        "trace_batches": batches,
        "wall_split": phases.wall_split(batches, proc.started_epoch, proc.seconds),
        "warehouse": str(run_dir / "warehouse"),
        "checkpoint": str(run_dir / "checkpoint"),
    }


def tally_accounting(spark: SparkSession, warehouse: str, checkpoint: str) -> dict[str, int]:
    """What the stream did, read back: input lines, valid events, and the accounting identity's
    sides (events in emitted windows + late side output + still in open windows)."""
    from pyspark.sql import Window

    from streaming.state import StateStore

    p = (
        tables.read_table(spark, warehouse, tables.STREAM_PROGRESS.name)
        .agg(
            F.count(F.lit(1)).alias("batches"),
            F.sum("input_lines").alias("input_lines"),
            F.sum("valid_events").alias("valid_events"),
            F.sum("duplicate_events").alias("duplicates"),
            F.sum("quarantined_lines").alias("quarantined"),
            F.max_by("window_state_version", "batch_id").alias("state_batch"),
        )
        .first()
    )
    assert p is not None
    latest = Window.partitionBy(*WINDOW_KEY).orderBy(F.col("revision").desc())
    emitted = (
        tables.read_table(spark, warehouse, tables.STREAM_AGGREGATES.name)
        .withColumn("_r", F.row_number().over(latest))
        .where("_r = 1")
        .agg(F.sum("event_count"))
        .first()
    )
    emitted_events = int(emitted[0] or 0) if emitted is not None else 0
    late = tables.read_table(spark, warehouse, tables.LATE_EVENTS.name).count()
    open_events = 0
    if p["state_batch"] is not None:
        windows, _dedup = StateStore(spark, checkpoint).read(int(p["state_batch"]))
        row = windows.agg(F.sum("event_count")).first()
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


def progress_rows(spark: SparkSession, warehouse: str) -> list[dict[str, Any]]:
    """Every `stream_progress` row (the columns the benchmark reads), in batch order."""
    rows = (
        tables.read_table(spark, warehouse, tables.STREAM_PROGRESS.name)
        .orderBy("batch_id")
        .select(
            "batch_id",
            "input_lines",
            "valid_events",
            "late_events",
            "clock_skewed_events",
            "open_windows",
            "windows_emitted",
            "batch_duration_ms",
            "drained",
        )
        .collect()
    )
    return [r.asDict() for r in rows]


# -- plain Spark ----------------------------------------------------------------------------------


def run_plain(
    name: str,
    mode: str,
    input_dir: str,
    run_dir: Path,
    shape: StreamShape,
    env: EngineEnv,
    extra: Sequence[str] = (),
) -> dict[str, Any]:
    """One `bench.plain_job` process (`extra`: more of its flags); its wall time, peak RSS and
    its queries' reports."""
    result = run_dir / "result.json"
    argv = [
        sys.executable,
        "-m",
        "bench.plain_job",
        "--mode",
        mode,
        "--input",
        input_dir,
        "--out",
        str(run_dir / "out"),
        "--result",
        str(result),
        "--files-per-trigger",
        str(shape.max_files_per_trigger),
        "--window-ms",
        str(shape.window_ms),
        "--lateness-ms",
        str(shape.lateness_ms),
        "--spark-master",
        env.master,
        "--shuffle-partitions",
        str(env.shuffle_partitions),
        *extra,
    ]
    proc = run_process(name, argv, run_dir / "logs", timeout_s=env.timeout_s)
    report = json.loads(result.read_text(encoding="utf-8"))
    return {
        "seconds": proc.seconds,
        "peak_rss_mb": _rounded_mb(proc.peak_rss_bytes),
        "session_s": report["session_s"],
        "queries": report["queries"],
        "out": str(run_dir / "out"),
    }


def plain_outputs(spark: SparkSession, mode: str, out: str) -> dict[str, int]:
    """Rows and summed `event_count` of the aggregation output; the bronze table's rows."""

    def totals(table: str) -> tuple[int, int]:
        row = (
            spark.read.format("delta")
            .load(f"{out}/{table}")
            .agg(F.count(F.lit(1)), F.sum("event_count"))
            .first()
        )
        assert row is not None
        return int(row[0]), int(row[1] or 0)

    rows, events = totals(BATCH_TABLE if mode == "batch" else AGG_TABLE)
    result = {"output_rows": rows, "output_events": events}
    if mode == "durable":
        result["bronze_rows"] = spark.read.format("delta").load(f"{out}/{BRONZE_TABLE}").count()
    return result
