"""One stream per warehouse, with real `tally stream` processes: two started together on one
warehouse (exactly one runs, the other exits 2 naming it), and it counts no event twice.

A SIGKILLed stream restarted on its checkpoint takes its lease back at once, not after the
ttl: tests/test_exactly_once.py checks it on each of its four kills and restarts."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from stream_helpers import (
    StreamProcess,
    identity_check,
    lease_records,
    read,
    read_input,
    stream_command,
)

pytestmark = pytest.mark.slow

STEP_TIMEOUT_S = 600.0


def generate_input(directory: Path, seed: int) -> int:
    """Eight small files; the number of lines that are valid events."""
    from tally_tools.generate import generate

    generate(
        out=str(directory),
        events=1200,
        partitions=2,
        seed=seed,
        start=datetime(2026, 11, 20, tzinfo=UTC),
        duration_ms=10 * 60_000,
        files=8,
        keys=10,
        progress=False,
    )
    return sum(1 for line in read_input(directory) if line.reason is None)


def assert_counted_once(spark: SparkSession, warehouse: Path, valid_lines: int) -> None:
    """Every valid input line is in `events` exactly once, and the books balance."""
    events = read(spark, str(warehouse), "events")
    per_line = events.groupBy("source_file", "source_line").count()
    assert per_line.where(F.col("count") > 1).count() == 0
    assert per_line.count() == valid_lines
    identity = identity_check(spark, str(warehouse), 60_000)
    assert identity.count() > 0
    assert identity.where(~F.col("ok")).count() == 0


def test_two_streams_on_one_warehouse_exactly_one_runs(spark: SparkSession, tmp_path: Path) -> None:
    valid = generate_input(tmp_path / "in", seed=5)
    warehouse = tmp_path / "wh"
    cmd = stream_command(str(tmp_path / "in"), str(warehouse), drain=True)
    procs = [StreamProcess(cmd, tmp_path / f"stream{i}.log") for i in range(2)]
    try:
        codes = [p.wait(STEP_TIMEOUT_S) for p in procs]
    finally:
        for p in procs:
            if p.running():
                p.kill()
    assert sorted(codes) == [0, 2], [p.tail() for p in procs]
    winner, loser = (procs[0], procs[1]) if codes[0] == 0 else (procs[1], procs[0])
    line = loser.tail(1)
    match = re.fullmatch(
        rf"tally: stream: warehouse {re.escape(str(warehouse))} is owned by a running stream "
        r"\(host [^,]+, pid (\d+), since \S+, last heartbeat \S+\); .*",
        line,
    )
    assert match, loser.tail()
    assert int(match.group(1)) == winner.proc.pid
    # the loser stopped before its session: it wrote nothing, not even its own lease
    assert [r.holder.pid for r in lease_records(warehouse)] == [winner.proc.pid]
    assert lease_records(warehouse)[-1].released
    assert_counted_once(spark, warehouse, valid)
