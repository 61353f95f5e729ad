"""The stream maintains its own tables: compaction beside the running stream, closed dates
packed, a pinned read unchanged, `tally maintain` and its refusal (docs/operations.md). A
SIGKILL during housekeeping is test_s3_warehouse's, on S3.

Two dates of tiny files, one file a micro-batch, replayed under the arrival clock: the
housekeeper's schedule follows that clock (`compact_interval` 1h of event time), so it
compacts while the batches keep coming, and the drain closes both dates.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from stream_helpers import (
    read,
    read_input,
)

from tally import tables as T
from tally.maintenance import live_files
from tally.pins import frontier_of, read_at_frontier
from tally_tools.generate import generate

pytestmark = pytest.mark.slow

FILES = 10
UNPARTITIONED = ("stream_progress", "stream_aggregates", "late_events", "quarantine")
HOUSEKEEPING = {
    "TALLY_COMPACT_INTERVAL": "1h",
    "TALLY_COMPACT_MIN_FILES": "2",  # a handful of files a date (the default waits for 50)
    "TALLY_MAINTENANCE_MODE": "thread",
}
STEP_TIMEOUT_S = 1200.0


def two_dates(root: Path, seed: int) -> Path:
    generate(
        out=str(root / "in"),
        events=1500,
        partitions=2,
        seed=seed,
        start=datetime(2026, 11, 20, tzinfo=UTC),
        duration_ms=2 * 86_400_000,
        files=FILES,
        keys=10,
        progress=False,
    )
    return root / "in"


def stream_argv(input_dir: Path, warehouse: Path, *extra: str) -> list[str]:
    return [
        "stream",
        "--input",
        str(input_dir),
        "--warehouse",
        str(warehouse),
        "--window",
        "60s",
        "--lateness",
        "30s",
        "--idle-timeout",
        "10m",
        "--max-files-per-trigger",
        "1",
        "--clock",
        "arrival",
        "--available-now",
        *extra,
    ]


def valid_lines(input_dir: Path) -> Counter[tuple[str, int]]:
    return Counter((line.file, line.number) for line in read_input(input_dir) if line.obj)


def logged(spark: SparkSession, warehouse: Path) -> list[dict[str, Any]]:
    return [r.asDict() for r in read(spark, str(warehouse), "maintenance_log").collect()]


def events_files_per_date(spark: SparkSession, warehouse: Path) -> dict[str | None, int]:
    layout = live_files(spark, T.table_path(str(warehouse), "events"), "event_date")
    return {date: stats.files for date, stats in layout.items()}


@pytest.fixture(scope="module")
def maintained(tmp_path_factory, spark: SparkSession) -> dict[str, Any]:
    """One stream over two dates with housekeeping in its thread, drained; in this process."""
    from tally_app.cli import main

    root = tmp_path_factory.mktemp("housekeeping")
    input_dir, wh = two_dates(root, seed=11), root / "warehouse"
    env = {"TALLY_SPARK_MASTER": "local[2]", "TALLY_SHUFFLE_PARTITIONS": "2", **HOUSEKEEPING}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        rc = main(stream_argv(input_dir, wh, "--drain"))
    return {"rc": rc, "input": input_dir, "warehouse": wh}


def test_the_stream_compacted_while_it_ran(maintained, spark):
    assert maintained["rc"] == 0
    rows = logged(spark, maintained["warehouse"])
    assert [r for r in rows if r["outcome"] != "done"] == []
    by_action = Counter((r["table_name"], r["action"]) for r in rows)
    # open dates and the unpartitioned tables were compacted during the run, before the drain
    assert by_action[("events", "compact")] >= 1, by_action
    assert sum(by_action[(t, "compact")] for t in UNPARTITIONED) >= 2, by_action
    progress = read(spark, str(maintained["warehouse"]), "stream_progress")
    first_done = min(r["processing_time"] for r in rows)
    assert progress.where(F.col("processing_time") > F.lit(first_done)).count() >= 2, (
        "housekeeping ran beside the stream, with batches after it"
    )
    assert {r["run_by"] for r in rows} == {"stream"}
    for r in rows:
        if r["action"] in ("compact", "compact_closed"):
            assert r["files_after"] < r["files_before"], r


def test_each_closed_date_is_a_few_files_and_the_small_tables_stay_small(maintained, spark):
    wh = maintained["warehouse"]
    batches = read(spark, str(wh), "stream_progress").count()
    assert batches >= FILES
    per_date = events_files_per_date(spark, wh)
    assert set(per_date) == {"2026-11-20", "2026-11-21"}
    assert all(files <= 4 for files in per_date.values()), per_date
    rows = logged(spark, wh)
    # Each closed date was packed, unless the thread's compaction of the open date had
    # already left it one file (a race with the drain): `finish` packs whatever is left.
    packed = {r["partition"] for r in rows if r["action"] == "compact_closed"}
    assert packed <= set(per_date), packed
    assert all(date in packed or files == 1 for date, files in per_date.items()), (
        packed,
        per_date,
    )
    for name in UNPARTITIONED:
        layout = live_files(spark, T.table_path(str(wh), name), None)
        assert layout[None].files <= 3, (name, layout)


def test_compaction_changed_no_row(maintained, spark):
    wh, expected = maintained["warehouse"], valid_lines(maintained["input"])
    events = read(spark, str(wh), "events")
    got = Counter(
        (Path(r["source_file"]).name, r["source_line"])
        for r in events.select("source_file", "source_line").collect()
    )
    assert got == expected and sum(expected.values()) > 1000


def test_a_pinned_read_is_unchanged_by_compaction(maintained, spark):
    wh = str(maintained["warehouse"])
    pins = (
        read(spark, wh, "stream_progress")
        .where(F.col("batch_id") == 3)
        .select("events_version")
        .first()
    )
    assert pins is not None
    version = int(pins["events_version"])
    compacted_after = [
        r for r in logged(spark, maintained["warehouse"]) if r["table_name"] == "events"
    ]
    assert compacted_after, "events was compacted after the pinned version"
    # set operations need comparable columns: the `extra` map as its JSON text
    comparable = {"extra": F.to_json("extra")}
    as_of = T.read_table(spark, wh, "events", version).withColumns(comparable)
    frontier = frontier_of(as_of)
    assert set(frontier.values()) == {3}
    again = read_at_frontier(spark, wh, "events", frontier).withColumns(comparable)
    assert as_of.count() == again.count() > 0
    assert as_of.exceptAll(again).isEmpty() and again.exceptAll(as_of).isEmpty()


def test_inline_runs_one_action_between_two_batches(tmp_path, tally_cli, spark):
    """Inline, a plan of several actions is spread over the gaps after the next batches, one
    each; the plan's log rows are written with its last action; `finish` leaves nothing."""
    from streaming.housekeeping import Clock, Closing, Housekeeper
    from tally import maintenance as M

    input_dir, wh = two_dates(tmp_path, seed=13), tmp_path / "warehouse"
    argv = stream_argv(input_dir, wh, "--drain")
    assert tally_cli(argv, TALLY_MAINTENANCE="false", TALLY_SHUFFLE_PARTITIONS="2") == 0
    schedule = M.Schedule(3_600_000, True, 0, compact_min_files=2)
    housekeeper = Housekeeper(
        spark,
        str(wh),
        schedule,
        Closing(60_000, 0),
        mode="inline",
        wall_ms=lambda: int(datetime.now(UTC).timestamp() * 1000),
    )
    clock = Clock(int(datetime(2026, 11, 23, tzinfo=UTC).timestamp() * 1000), None, drained=True)
    per_gap = []
    while True:
        housekeeper.after_batch(clock)  # a batch committed: the housekeeper's turn
        per_gap.append(len(housekeeper.outcomes) - sum(per_gap))
        if not housekeeper.pending:
            break
        assert not T.exists(spark, str(wh), "maintenance_log")  # rows wait for the last
    # two closed dates and the four small tables, each its own gap
    assert per_gap == [1] * len(per_gap) and len(per_gap) >= 4, per_gap
    kinds = {(o.action.kind, o.action.partition) for o in housekeeper.outcomes}
    assert {(M.COMPACT_CLOSED, "2026-11-20"), (M.COMPACT_CLOSED, "2026-11-21")} <= kinds
    assert all(o.outcome == M.DONE for o in housekeeper.outcomes)
    assert len(logged(spark, wh)) == len(per_gap)
    assert housekeeper.finish() == []  # nothing was left due
    assert all(n <= 1 for d, n in events_files_per_date(spark, wh).items() if d), wh


def test_maintain_refuses_while_a_live_stream_holds_the_lease(tmp_path, tally_cli, capsys):
    from streaming.lease import WarehouseLease, lease_store, this_process
    from tally.dates import epoch_ms

    wh = tmp_path / "warehouse"
    lease = WarehouseLease(
        lease_store(str(wh), "", "", True),
        str(wh),
        this_process(str(wh / "_checkpoints" / "stream")),
        60_000,
        now_ms=lambda: epoch_ms(datetime.now(UTC)),
    )
    lease.acquire()
    try:
        rc = tally_cli(["maintain", "--warehouse", str(wh)])
    finally:
        lease.release()
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and "is owned by a running stream" in err[0], err
    assert err[0].startswith("tally: maintain: ")


def test_the_nightly_maintains_the_tables_it_writes(maintained, tally_cli, spark, tmp_path):
    """After the date's run, the date's partitions are compacted where they hold small files
    and every table it writes is vacuumed (never before: due); a re-run of the date after
    that reads and writes the same."""
    wh = str(maintained["warehouse"])
    argv = ["reconcile", "--date", "2026-11-20", "--warehouse", wh, "--out", str(tmp_path)]
    assert tally_cli(argv, TALLY_WINDOW="60s") in (0, 1)  # 1: the feed's planted faults
    first = read(spark, wh, "reconciliation_summary").collect()
    rows = [r.asDict() for r in read(spark, wh, "nightly_maintenance_log").collect()]
    assert [r for r in rows if r["outcome"] != "done"] == []
    assert {r["run_by"] for r in rows} == {"nightly"}
    vacuumed = {r["table_name"] for r in rows if r["action"] == "vacuum"}
    assert {"reconciliation", "batch_aggregates", "reconciliation_runs", "event_index"} <= vacuumed
    for r in rows:
        if r["action"] == "compact":
            assert r["partition"] == "2026-11-20" and r["files_after"] < r["files_before"], r
    for name in ("reconciliation", "batch_aggregates"):
        layout = live_files(spark, T.table_path(wh, name), "business_date")
        assert layout["2026-11-20"].files <= 2, (name, layout)
    assert tally_cli(argv, TALLY_WINDOW="60s") in (0, 1)
    assert read(spark, wh, "reconciliation_summary").collect() == first


def test_a_warehouse_of_an_earlier_tally_gets_its_properties_at_the_next_start(
    tmp_path, tally_cli, spark
):
    """Tables created without today's properties (an earlier tally: no append-only, Delta's
    default retention) get them when the stream starts, before its first append; a changed
    retention setting reaches existing tables the same way."""
    from tally.maintenance import table_properties

    wh, empty_input = tmp_path / "warehouse", tmp_path / "in"
    empty_input.mkdir()
    for table in T.STREAMING_TABLES:
        T.ensure_table(spark, str(wh), T.Table(table.name, table.ddl, "", table.partition_by))
    before = table_properties(spark, T.table_path(str(wh), "events"))
    assert "delta.appendOnly" not in before
    argv = stream_argv(empty_input, wh)
    assert tally_cli(argv, TALLY_LOG_RETENTION="7d") == 0
    for table in T.STREAMING_TABLES:
        props = table_properties(spark, T.table_path(str(wh), table.name))
        assert props.get("delta.appendOnly") == "true", (table.name, props)
        assert props.get("delta.logRetentionDuration") == "interval 7 days", (table.name, props)
        assert props.get("delta.deletedFileRetentionDuration") == "interval 7 days"
