"""A feed whose clock is behind its events (issue 45, part B): files restored with their
modification times reset weeks before the events they hold, streamed with `--clock arrival`.
The stream names it in its first batch, once, with one line saying what to change; restarted on
the wall clock it closes the windows it kept open and counts every line once."""

from __future__ import annotations

import logging
import os
import shutil
from datetime import UTC, datetime, timedelta

from pyspark.sql import functions as F
from stream_tables import stream_command

from tally import tables as T
from tally_tools.generate import generate

# Months before any machine's clock, so that on the wall clock no event is ahead of it.
START = datetime(2026, 3, 2, tzinfo=UTC)
DAY_MS = 86_400_000
FILES, HELD_BACK = 8, 2  # the last two files arrive after the restart


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

    argv = stream_command(str(input_dir), warehouse)[3:]  # after `python -m tally_app.cli`
    with caplog.at_level(logging.WARNING, logger="tally"):
        assert tally_cli(argv) == 0
    named = [r.getMessage() for r in caplog.records if r.getMessage().startswith("clock skew:")]
    assert len(named) == 1, named  # once per process, in the first batch
    assert named[0].startswith("clock skew: batch 0: ") and "\n" not in named[0]
    assert "up to 4 weeks" in named[0] and "stream with --clock wall" in named[0]
    skewed = T.read_table(spark, warehouse, T.STREAM_PROGRESS.name).orderBy("batch_id").collect()
    assert len(skewed) == (FILES - HELD_BACK) // 2
    assert all(r["clock_skewed_events"] == r["valid_events"] > 0 for r in skewed)
    assert all(r["windows_emitted"] == 0 for r in skewed)  # the silent part the line names

    for path in later.iterdir():
        shutil.move(path, input_dir / path.name)
    caplog.clear()
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
