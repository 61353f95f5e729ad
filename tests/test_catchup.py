"""Catch-up after an outage never crashes (issue 39, part 1b): a backlog of several days,
several days a micro-batch, streamed by `tally stream` in its own process under the memory
pressure of the full-size case, completes and counts every line.

The full-size case (docs/streaming.md, "Catching up after an outage"): 2.5M lines a micro-batch
at Spark's default 1g driver heap, whose unified memory (execution and cache) is ~456 MB. Here
the heap is 512m and Spark's share of it for execution and cache 0.1 (~24 MB), so a micro-batch
of ~130k lines presses on memory as 2.5M lines press on 1g. The files' modification times are
just after the events they hold (`tally generate`), so windows close batch after batch.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pyspark.sql import functions as F
from stream_helpers import StreamProcess, stream_command

from tally import tables as T
from tally_tools.generate import generate

DAYS = 6
DAYS_PER_BATCH = 2
FILES_PER_DAY = 5
EVENTS_PER_DAY = 65_000
KEYS = 200
DAY_MS = 86_400_000
START = datetime(2026, 11, 20, tzinfo=UTC)
# The driver's heap and Spark's share of it for execution and cache (see the docstring).
SMALL_HEAP = {
    "SPARK_DRIVER_MEMORY": "512m",
    "PYSPARK_SUBMIT_ARGS": "--conf spark.memory.fraction=0.1 pyspark-shell",
}


def _stream_rdds(spark) -> set[int]:
    """The RDDs persisted in the session's Spark but Delta's cached table states."""
    persistent = spark.sparkContext._jsc.getPersistentRDDs()
    return {
        int(rdd_id)
        for rdd_id, rdd in persistent.items()
        if not str(rdd.name() or "").startswith("Delta Table State")
    }


def test_a_stream_releases_what_it_kept_from_earlier_batches(spark, tmp_path, tally_cli):
    """Each batch's caches and its fold's checkpoint are released by the stream itself (the
    checkpoint once the batch after it committed, the last one when the stream stops), not
    left to the JVM's garbage collector."""
    input_dir, warehouse = tmp_path / "in", str(tmp_path / "warehouse")
    generate(
        out=str(input_dir),
        events=3_000,
        partitions=2,
        seed=7,
        start=START,
        duration_ms=3 * DAY_MS,
        files=6,
        keys=20,
    )
    before = _stream_rdds(spark)
    argv = _catch_up_command(str(input_dir), warehouse)[3:]  # after `python -m tally_app.cli`
    argv[argv.index("--max-files-per-trigger") + 1] = "2"
    assert tally_cli(argv) == 0
    batches = T.read_table(spark, warehouse, T.STREAM_PROGRESS.name).count()
    assert batches == 3
    assert _stream_rdds(spark) - before == set()


def _catch_up_command(input_dir: str, warehouse: str) -> list[str]:
    cmd = stream_command(input_dir, warehouse)
    flag = cmd.index("--max-files-per-trigger")
    cmd[flag + 1] = str(FILES_PER_DAY * DAYS_PER_BATCH)
    return cmd


@pytest.mark.slow
def test_a_backlog_several_days_a_batch_under_a_small_heap_counts_every_line(spark, tmp_path):
    input_dir, warehouse = tmp_path / "in", str(tmp_path / "warehouse")
    manifest = generate(
        out=str(input_dir),
        events=DAYS * EVENTS_PER_DAY,
        partitions=4,
        seed=39,
        start=START,
        duration_ms=DAYS * DAY_MS,
        files=DAYS * FILES_PER_DAY,
        keys=KEYS,
    )
    env = {**SMALL_HEAP, "TMPDIR": str(tmp_path)}  # the stream's log: <tmp>/tally-logs
    stream = StreamProcess(
        _catch_up_command(str(input_dir), warehouse), tmp_path / "stream.log", env=env
    )
    rc = stream.wait(timeout=600)
    assert rc == 0, stream.tail()

    progress = (
        T.read_table(spark, warehouse, T.STREAM_PROGRESS.name)
        .orderBy("batch_id")
        .select("batch_id", "input_lines", "valid_events", "windows_emitted", "open_windows")
        .collect()
    )
    assert [r["batch_id"] for r in progress] == list(range(DAYS // DAYS_PER_BATCH))
    # every batch held its days' lines, and closed windows: the clock followed the events
    per_batch = manifest["lines"] // len(progress)
    assert all(0.8 * per_batch < r["input_lines"] < 1.2 * per_batch for r in progress)
    assert all(r["windows_emitted"] > 0 for r in progress)
    # every line counted: progress = lines written, events = valid lines (duplicates included)
    assert sum(r["input_lines"] for r in progress) == manifest["lines"]
    valid_lines = manifest["events"] + manifest["duplicates"]
    assert sum(r["valid_events"] for r in progress) == valid_lines
    events = T.read_table(spark, warehouse, T.EVENTS.name)
    assert events.count() == valid_lines
    distinct = events.agg(F.countDistinct("event_id").alias("n")).first()
    assert distinct is not None and distinct["n"] == manifest["events"]
