"""One stream per warehouse, with real `tally stream` processes: two started together on one
warehouse (exactly one runs, the other exits 2 naming it), and a SIGKILLed stream restarted
on its checkpoint (it takes its lease back at once, not after the ttl). Neither counts an
event twice."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from stream_tables import (
    StreamProcess,
    delta_version,
    identity_check,
    read,
    read_input,
    stream_command,
)

from streaming.lease import LEASE_DIR, LeaseRecord

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


def lease_records(warehouse: Path) -> list[LeaseRecord]:
    directory = warehouse / LEASE_DIR
    return [LeaseRecord.from_json(p.read_bytes()) for p in sorted(directory.glob("*.json"))]


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


def test_a_killed_stream_takes_its_lease_back_at_once(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Waiting out this ttl would fail the test: the restart must prove the owner is gone.
    monkeypatch.setenv("TALLY_LEASE_TTL", "1h")
    valid = generate_input(tmp_path / "in", seed=6)
    warehouse = tmp_path / "wh"
    first = StreamProcess(stream_command(str(tmp_path / "in"), str(warehouse)), tmp_path / "1.log")
    try:
        killed = first.kill_when(
            lambda: delta_version(warehouse, "stream_progress") >= 2, STEP_TIMEOUT_S
        )
        assert killed, first.tail()
        (held,) = lease_records(warehouse)
        assert held.holder.pid == first.proc.pid and not held.released
        restart = StreamProcess(
            stream_command(str(tmp_path / "in"), str(warehouse), drain=True),
            tmp_path / "2.log",
        )
        assert restart.wait(STEP_TIMEOUT_S) == 0, restart.tail()
    finally:
        if first.running():
            first.kill()
    records = lease_records(warehouse)
    assert [r.generation for r in records] == [0, 1]
    assert records[1].holder.pid == restart.proc.pid
    assert records[1].holder.checkpoint == held.holder.checkpoint
    assert records[1].holder.query_id == held.holder.query_id  # same checkpoint, same query
    assert records[1].released
    assert_counted_once(spark, warehouse, valid)
    # the record is plain JSON in the warehouse: an operator can read who holds it
    assert json.loads((warehouse / LEASE_DIR / "000000000001.json").read_text())["released"]
