"""A feed whose clock is behind its events (issue 45, part B): files restored with their
modification times reset weeks before the events they hold, streamed with `--clock arrival`.
The stream names it in its first batch, once, with one line saying what to change; restarted on
the wall clock it closes the windows it kept open and counts every line once."""

from __future__ import annotations

import logging
import os
import shutil
from datetime import UTC, datetime, timedelta

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from stream_helpers import StreamProcess, stream_command

from streaming.logic import (
    SEEN_IDS_BROADCAST_MAX_BYTES,
    WindowParams,
    classify_events,
    seen_ids_join_hint,
)
from tally import tables as T
from tally.spark import without_adaptive_execution
from tally_tools.generate import generate

# Months before any machine's clock, so that on the wall clock no event is ahead of it.
START = datetime(2026, 3, 2, tzinfo=UTC)
DAY_MS = 86_400_000
FILES, HELD_BACK = 8, 2  # the last two files arrive after the restart
STEP_TIMEOUT_S = 600.0


def test_a_clock_behind_the_events_is_named_once_and_the_wall_clock_recovers(
    spark, tmp_path, tally_cli, caplog
) -> None:
    input_dir, later = tmp_path / "in", tmp_path / "later"
    warehouse = str(tmp_path / "warehouse")
    manifest = generate(
        out=str(input_dir),
        events=2_000,
        partitions=2,
        seed=45,
        start=START,
        duration_ms=4 * DAY_MS,
        files=FILES,
        keys=20,
    )
    files = sorted(input_dir.glob("arrival-*.jsonl"))
    assert len(files) == FILES
    reset = (START - timedelta(days=28)).timestamp()  # a restore four weeks before the events
    for path in files:
        os.utime(path, (reset, reset))
    later.mkdir()
    for path in files[-HELD_BACK:]:
        shutil.move(path, later / path.name)

    # The skewed run in its own process at the smallest driver heap Spark starts with (its
    # floor is 450 MiB); what that heap holds at scale is the bench's (docs/benchmarks.md).
    command = stream_command(str(input_dir), warehouse)
    skewed_run = StreamProcess(
        command, tmp_path / "skewed.log", env={"SPARK_DRIVER_MEMORY": "512m"}
    )
    assert skewed_run.wait(STEP_TIMEOUT_S) == 0, skewed_run.tail()
    output = skewed_run.log_path.read_text().splitlines()
    lines = [line[line.index("clock skew:") :] for line in output if "clock skew:" in line]
    assert len(lines) == 1, lines  # once per process, in the first batch
    assert lines[0].startswith("clock skew: batch 0: ")
    assert "up to 4 weeks" in lines[0] and "stream with --clock wall" in lines[0]
    skewed = T.read_table(spark, warehouse, T.STREAM_PROGRESS.name).orderBy("batch_id").collect()
    assert len(skewed) == (FILES - HELD_BACK) // 2
    assert all(r["clock_skewed_events"] == r["valid_events"] > 0 for r in skewed)
    assert all(r["windows_emitted"] == 0 for r in skewed)  # the silent part the line names

    for path in later.iterdir():
        shutil.move(path, input_dir / path.name)
    caplog.clear()
    argv = command[3:]  # after `python -m tally_app.cli`
    wall = [a if a != "arrival" else "wall" for a in argv]
    with caplog.at_level(logging.WARNING, logger="tally"):
        assert tally_cli(wall) == 0
    assert not [r for r in caplog.records if r.getMessage().startswith("clock skew:")]
    progress = T.read_table(spark, warehouse, T.STREAM_PROGRESS.name).orderBy("batch_id")
    rows = progress.collect()
    restarted = rows[len(skewed) :]
    assert restarted and all(r["clock_skewed_events"] == 0 for r in restarted)
    assert sum(r["windows_emitted"] for r in restarted) > 0  # the kept windows close
    # every line counted once, across both processes
    assert sum(r["input_lines"] for r in rows) == manifest["lines"]
    events = T.read_table(spark, warehouse, T.EVENTS.name)
    assert events.count() == manifest["events"] + manifest["duplicates"]
    distinct = events.agg(F.countDistinct("event_id").alias("n")).first()
    assert distinct is not None and distinct["n"] == manifest["events"]


# -- the remembered ids, which pile up while no window closes ------------------------------------
@pytest.mark.parametrize(
    ("state_bytes", "hint"),
    [
        (0, None),  # a first batch: nothing remembered
        (SEEN_IDS_BROADCAST_MAX_BYTES, None),  # at the limit: Spark's own choice (broadcast)
        (SEEN_IDS_BROADCAST_MAX_BYTES + 1, "merge"),  # past it: a join that spills
    ],
)
def test_seen_ids_join_hint(state_bytes: int, hint: str | None) -> None:
    assert seen_ids_join_hint(state_bytes) == hint


def _join_of(spark: SparkSession, seen_ids_bytes: int) -> str:
    events = spark.sql(
        "SELECT id AS event_id, TIMESTAMP'2026-03-02 00:00:05' AS event_time, "
        "TIMESTAMP'2026-03-01 00:00:00' AS source_mtime, 'f' AS source_file, "
        "CAST(id AS BIGINT) AS source_line FROM VALUES ('1'), ('2') AS t(id)"
    )
    # remembered ids '1' and '3' (a range: literal rows would be folded into the plan)
    seen = spark.range(1, 4, 2).selectExpr(
        "CAST(id AS STRING) AS event_id", "TIMESTAMP'2026-03-02 00:01:00' AS window_end"
    )
    with without_adaptive_execution(spark):  # as the stream classifies (streaming/job.py)
        classified = classify_events(
            events, None, WindowParams(60_000, 0), seen, 2, seen_ids_bytes=seen_ids_bytes
        )
        statuses = {r["event_id"]: r["arrival_status"] for r in classified.collect()}
        plan = classified._jdf.queryExecution().executedPlan().toString()
    assert statuses == {"1": "duplicate", "2": "on_time"}
    joins = {j for j in ("BroadcastHashJoin", "SortMergeJoin") if j in plan}
    assert len(joins) == 1, plan
    return joins.pop()


def test_remembered_ids_past_the_limit_are_joined_by_a_sort_merge_join(spark) -> None:
    """A 512 MiB driver could not build the broadcast of 1.2M remembered ids (6.3 MB of state
    files; docs/streaming.md, "A clock behind the events"); a sort-merge join spills."""
    assert _join_of(spark, seen_ids_bytes=0) == "BroadcastHashJoin"
    assert _join_of(spark, seen_ids_bytes=SEEN_IDS_BROADCAST_MAX_BYTES + 1) == "SortMergeJoin"
