"""Section 5: one big input file streams with bounded memory and the same results as the same
events split over 100 files.

The events are generated once (`tally generate` into 100 files) and concatenated, in arrival
order, into one file (full mode ~2 GB: the generator writes ~114 bytes a line, so 17.5M
events; quick mode ~20 MB). The big file gets the newest split file's modification time, so
with the arrival clock both inputs have the same processing time. tally streams each input
in its own process (`tally stream --available-now --clock arrival --drain`), peak RSS of the
process tree sampled, and the two warehouses are compared: the latest revision of every
`stream_aggregates` window, and the row counts of `events`, `late_events` and `quarantine`.

Both inputs are streamed as one micro-batch (all 100 files in one trigger): a file is never
split across micro-batches, so the big file is necessarily one batch, and only the same
batching gives the same watermark history, hence the same late events. What differs is only
how the lines are read: one 2 GB file in splits of `spark.sql.files.maxPartitionBytes`
against 100 small files. Memory is bounded when the peak RSS stays near the JVM's own
limits (the driver's heap is Spark's default, 1g) instead of growing with the file: the
target is met when the results are equal, every line is accounted for, and the big file's
peak RSS is at most 1.25x the split input's.

Expected duration, full mode on 2 cores: generating 17.5M events ~100 s, concatenating ~10 s,
each run ~6-10 min (one 17.5M-line micro-batch plus the drain; a 1M-line single batch took
~65 s on a loaded machine): ~15-20 min, the longest section, so it runs last. Quick mode:
~1-2 min.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from bench import engines
from bench.common import Backlog, StreamShape, arrival_files, load_average, log, stopwatch
from bench.speed import generate_backlog
from tally import tables
from tally.windows import WINDOW_KEY

RSS_TOLERANCE = 1.25  # the big file's peak RSS over the split input's, at most
BYTES_PER_LINE = 114  # what tally_tools.generate writes on average (measured on its output)


def events_for_bytes(target_bytes: int) -> int:
    """How many events make an input of about `target_bytes` (lines ~1.007 x events)."""
    return int(target_bytes / BYTES_PER_LINE / 1.007)


def concatenate(files: list[Path], out: Path) -> int:
    """`files` (in this order) into one file `out`, with the newest modification time of
    them; returns its size. Every generated file ends with a newline."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("wb") as sink:
        for path in files:
            with path.open("rb") as source:
                shutil.copyfileobj(source, sink, length=16 * 1024 * 1024)
    newest = max(p.stat().st_mtime_ns for p in files)
    os.utime(out, ns=(newest, newest))
    return out.stat().st_size


def latest_aggregates(spark: SparkSession, warehouse: str) -> DataFrame:
    """The latest revision of every window, key and currency of `stream_aggregates`."""
    latest = Window.partitionBy(*WINDOW_KEY).orderBy(F.col("revision").desc())
    return (
        tables.read_table(spark, warehouse, tables.STREAM_AGGREGATES.name)
        .withColumn("_r", F.row_number().over(latest))
        .where("_r = 1")
        .select(*WINDOW_KEY, "event_count", "amount_sum")
    )


def compare(spark: SparkSession, split_wh: str, single_wh: str) -> dict[str, Any]:
    """The two warehouses' results side by side, and whether each agrees."""
    out: dict[str, Any] = {}
    for table in (tables.EVENTS, tables.LATE_EVENTS, tables.QUARANTINE):
        a = tables.read_table(spark, split_wh, table.name).count()
        b = tables.read_table(spark, single_wh, table.name).count()
        out[table.name] = {"split": a, "single": b, "equal": a == b}
    a_df, b_df = latest_aggregates(spark, split_wh), latest_aggregates(spark, single_wh)
    only_split = a_df.exceptAll(b_df).count()
    only_single = b_df.exceptAll(a_df).count()
    sums = [df.agg(F.count(F.lit(1)), F.sum("event_count")).first() for df in (a_df, b_df)]
    out["stream_aggregates"] = {
        "split": int(sums[0][0]) if sums[0] else 0,
        "single": int(sums[1][0]) if sums[1] else 0,
        "split_events": int(sums[0][1] or 0) if sums[0] else 0,
        "single_events": int(sums[1][1] or 0) if sums[1] else 0,
        "rows_only_in_split": only_split,
        "rows_only_in_single": only_single,
        "equal": only_split == 0 and only_single == 0,
    }
    out["equal"] = all(v["equal"] for v in out.values() if isinstance(v, dict))
    return out


def _run(
    name: str,
    input_dir: Path,
    run_dir: Path,
    shape: StreamShape,
    env: engines.EngineEnv,
    lines: int,
) -> dict[str, Any]:
    log(f"bigfile: streaming the {name} input")
    load = load_average()
    run = engines.run_tally(name, str(input_dir), run_dir, shape, env, drain=True)
    run.pop("trace_batches")
    run["load_average_before"] = load
    run["events_per_s"] = lines / run["seconds"]
    log(f"bigfile: {name} {run['seconds']:.0f} s, peak RSS {run['peak_rss_mb']:,.0f} MB")
    return run


def bigfile_section(
    spark: SparkSession, work: Path, backlog: Backlog, shape: StreamShape, env: engines.EngineEnv
) -> dict[str, Any]:
    split_dir = work / "bigfile_split"
    single_dir = work / "bigfile_single"
    log(f"bigfile: generating {backlog.events:,} events in {backlog.files} files")
    manifest = generate_backlog(split_dir, backlog)
    with stopwatch() as t:
        size = concatenate(arrival_files(split_dir), single_dir / "arrival-all.jsonl")
    log(f"bigfile: concatenated into one file of {size / 1e9:.2f} GB in {t['s']:.0f} s")
    lines = manifest["lines"]
    one_batch = StreamShape(
        shape.window_ms, shape.lateness_ms, backlog.files, shape.idle_timeout_ms
    )
    runs = {
        "split": _run("split", split_dir, work / "bigfile_run_split", one_batch, env, lines),
        "single": _run("single", single_dir, work / "bigfile_run_single", one_batch, env, lines),
    }
    for run in runs.values():
        run.update(engines.tally_accounting(spark, run["warehouse"], run["checkpoint"]))
    result = compare(spark, runs["split"]["warehouse"], runs["single"]["warehouse"])
    for name in runs:
        shutil.rmtree(work / f"bigfile_run_{name}", ignore_errors=True)
    shutil.rmtree(split_dir, ignore_errors=True)
    shutil.rmtree(single_dir, ignore_errors=True)
    rss_ratio = runs["single"]["peak_rss_mb"] / max(1e-9, runs["split"]["peak_rss_mb"])
    accounted = all(r["input_lines"] == lines for r in runs.values())
    return {
        "events": backlog.events,
        "lines": lines,
        "files": backlog.files,
        "input_bytes": manifest["bytes"],
        "single_file_bytes": size,
        "generate_s": manifest["generate_s"],
        "concatenate_s": t["s"],
        "window_ms": shape.window_ms,
        "lateness_ms": shape.lateness_ms,
        "runs": runs,
        "comparison": result,
        "equal": result["equal"],
        "all_lines_accounted": accounted,
        "rss_ratio": rss_ratio,
        "rss_tolerance": RSS_TOLERANCE,
        "memory_bounded": rss_ratio <= RSS_TOLERANCE,
        "met": result["equal"] and accounted and rss_ratio <= RSS_TOLERANCE,
    }
