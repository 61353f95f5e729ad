"""Audit pins: a reconciliation run stays reproducible after the stream's tables are compacted,
vacuumed and their logs cleaned (batch frontiers, `tally.pins`); every run of a date is kept;
a pin that did expire is one line, exit 2, nothing written; a warehouse of the earlier layout
(one `reconciliation_runs` row per date, no frontiers) upgrades in place."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from batch_fixtures import (
    append,
    event,
    late,
    stream_row,
    table_rows,
    write_inputs,
)
from frames import frame_rows
from pyspark.errors import AnalysisException
from test_reconcile import DAY, NOW, W, balanced_day, win

from batch.reconcile import (
    BEYOND_RETENTION,
    FILE_NOT_FOUND,
    VERSION_NOT_FOUND,
    conditions,
    reconcile,
    recorded_run,
    runs_of,
)
from tally import tables as T
from tally.pins import read_at_frontier

STREAM_TABLES = (T.EVENTS, T.STREAM_AGGREGATES, T.LATE_EVENTS)
CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"


def later_batch(spark, warehouse: str) -> None:
    """What the stream appends after a run pinned its tables (batch 5): a late event of the
    date's window "b" and a new window "e", so a table's latest rows differ from the pin's."""
    start_b, start_e = win("2026-11-20T02:00:00Z"), win("2026-11-20T05:00:00Z")
    arrived = start_b + 3 * W
    row = event("b9", "b", 1000, start_b + 5000, status="late", ingest=arrived, batch_id=5)
    append(spark, warehouse, T.EVENTS, [row, event("e1", "e", 4, start_e + 1000, batch_id=5)])
    append(spark, warehouse, T.LATE_EVENTS, [late(row, W, arrived - start_b - W)])
    append(
        spark,
        warehouse,
        T.STREAM_AGGREGATES,
        [{**stream_row(start_e, W, "e", 1, 4), "batch_id": 5}],
    )


@contextmanager
def retention_check_off(spark) -> Iterator[None]:
    spark.conf.set(CHECK, "false")
    try:
        yield
    finally:
        spark.conf.unset(CHECK)


def compact_and_vacuum(spark, warehouse: str) -> None:
    """OPTIMIZE, then VACUUM keeping nothing: the files the pinned versions read are gone."""
    for table in STREAM_TABLES:
        path = T.table_path(warehouse, table.name)
        spark.sql(f"OPTIMIZE delta.`{path}`")
        with retention_check_off(spark):
            spark.sql(f"VACUUM delta.`{path}` RETAIN 0 HOURS")


def clean_logs(spark, warehouse: str) -> None:
    """Log cleanup as Delta does it at a checkpoint: one day of log kept, a checkpoint every
    second commit, the log's files three days old (cleanup compares modification times), two
    commits (one of them checkpoints and cleans)."""
    three_days_ago = time.time() - 3 * 86_400
    for table in STREAM_TABLES:
        path = T.table_path(warehouse, table.name)
        spark.sql(
            f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ("
            "'delta.logRetentionDuration' = 'interval 1 day', "
            "'delta.deletedFileRetentionDuration' = 'interval 1 day', "
            "'delta.checkpointInterval' = '2')"
        )
        log_dir = os.path.join(path, "_delta_log")
        for name in os.listdir(log_dir):
            os.utime(os.path.join(log_dir, name), (three_days_ago, three_days_ago))
        for n in (1, 2):
            spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('tally.test.commit' = '{n}')")


def versions(spark, warehouse: str) -> dict[str, int]:
    """Every table's latest version: what a command that writes nothing leaves as it was."""
    return {
        t.name: T.latest_version(spark, warehouse, t.name)
        for t in T.ALL_TABLES
        if T.exists(spark, warehouse, t.name)
    }


def old_layout(monkeypatch) -> None:
    """Write as tally did before run history: `reconciliation_runs` without pin_frontiers and
    run_number, `reconciliation` without run_time (one run row per date, pins by version)."""
    runs, recon = T.RECONCILIATION_RUNS, T.RECONCILIATION
    old_runs = runs.ddl.replace(
        ", pin_frontiers MAP<STRING, MAP<STRING, BIGINT>>, run_number BIGINT", ""
    )
    old_recon = recon.ddl.replace(", run_time TIMESTAMP", "")
    assert old_runs != runs.ddl and old_recon != recon.ddl
    monkeypatch.setattr(T, "RECONCILIATION_RUNS", dataclasses.replace(runs, ddl=old_runs))
    monkeypatch.setattr(T, "RECONCILIATION", dataclasses.replace(recon, ddl=old_recon))


def reproduce_cli(tally_cli, warehouse: str, *extra: str, audit_window: str = "3650d") -> int:
    """`tally reconcile --reproduce` of DAY; the runs' times are fixed (NOW), the test runs
    later: an audit window of ten years unless told."""
    return tally_cli(
        ["reconcile", "--date", DAY.isoformat(), "--reproduce", "--warehouse", warehouse, *extra],
        TALLY_AUDIT_WINDOW=audit_window,
    )


def test_pins_survive_compaction_vacuum_and_log_cleanup(spark, warehouse, tally_cli, capsys):
    ev, st = balanced_day()
    write_inputs(spark, warehouse, W, ev, st)
    first = reconcile(spark, warehouse, DAY, W, now=NOW)
    run = recorded_run(spark, warehouse, DAY)
    assert run is not None and run["run_number"] == 1
    frontiers = run["pin_frontiers"]
    assert frontiers == {
        "events": {"test-app": 0},
        "stream_aggregates": {"test-app": 1},
        "late_events": {},
    }
    pinned = {t.name: table_rows(spark, warehouse, t.name) for t in STREAM_TABLES}
    later_batch(spark, warehouse)
    compact_and_vacuum(spark, warehouse)
    clean_logs(spark, warehouse)

    # Delta refuses the version the run read: its commit cleaned from the log, or (Delta
    # 4.3 checks it first) older than delta.deletedFileRetentionDuration...
    with pytest.raises(AnalysisException) as refused:
        T.read_table(spark, warehouse, T.EVENTS.name, first.events_version).count()
    assert refused.value.getCondition() in (VERSION_NOT_FOUND, BEYOND_RETENTION)
    # ...while the frontier reads exactly the rows of that version from the latest snapshot.
    for table in STREAM_TABLES:
        rows = read_at_frontier(spark, warehouse, table.name, frontiers[table.name])
        assert frame_rows(rows) == pinned[table.name], table.name
    assert len(pinned["events"]) == 6

    before = versions(spark, warehouse)
    assert reproduce_cli(tally_cli, warehouse) == 0
    out = capsys.readouterr().out
    assert out.endswith(": MATCH\n") and "3 windows and the run's figures" in out
    assert "batch frontiers" in out
    assert versions(spark, warehouse) == before  # nothing written


def test_run_history_keeps_every_run_and_upgrades_the_old_layout(
    spark, warehouse, tally_cli, capsys, monkeypatch
):
    ev, st = balanced_day()
    write_inputs(spark, warehouse, W, ev, st)
    with monkeypatch.context() as patched:  # today's main: one row per date, version pins
        old_layout(patched)
        reconcile(spark, warehouse, DAY, W, now=NOW)
    assert "pin_frontiers" not in T.read_table(spark, warehouse, "reconciliation_runs").columns
    later_batch(spark, warehouse)
    second = reconcile(spark, warehouse, DAY, W, now=NOW + timedelta(hours=1))

    runs = runs_of(spark, warehouse, DAY)
    assert [r["run_number"] for r in runs] == [None, 1]  # the old row is kept, upgraded in place
    assert runs[0]["pin_frontiers"] is None and runs[1]["pin_frontiers"]["events"] == {
        "test-app": 5
    }
    assert recorded_run(spark, warehouse, DAY) == runs[1]
    assert (runs[0]["windows"], runs[1]["windows"]) == (3, 4)  # the second run saw window "e"
    assert second.summary["explained_count"] == 1

    before = versions(spark, warehouse)
    assert reproduce_cli(tally_cli, warehouse) == 0  # the latest: window by window
    assert capsys.readouterr().out.endswith("4 windows and the run's figures): MATCH\n")
    assert reproduce_cli(tally_cli, warehouse, "--run-time", "2026-11-22T03:00:00Z") == 0
    out = capsys.readouterr().out  # the first run, by its figures, at its versions
    assert "run 2026-11-22T03:00:00Z (pins read at their Delta versions" in out
    assert out.endswith(": MATCH\n") and "not the date's latest run" in out
    assert versions(spark, warehouse) == before

    # Its figures recorded differently: the reproduction names them, exit 1.
    path = T.table_path(warehouse, "reconciliation_runs")
    spark.sql(f"UPDATE delta.`{path}` SET batch_amount = batch_amount + 1 WHERE run_number IS NULL")
    assert reproduce_cli(tally_cli, warehouse, "--run-time", "2026-11-22T03:00:00") == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("DIFFERENT") and out[1:] == ["batch_amount: recorded 73, recomputed 72"]

    assert reproduce_cli(tally_cli, warehouse, "--run-time", "2026-11-23T00:00:00Z") == 2
    assert capsys.readouterr().err == (
        "tally: reproduce 2026-11-20: run_time: 2026-11-20 has no run at "
        "2026-11-23T00:00:00+00:00\n"
    )

    # Past the audit window (a day, the runs days old by now): one line, nothing written,
    # whether or not its pins could still be read.
    before = versions(spark, warehouse)
    assert reproduce_cli(tally_cli, warehouse, audit_window="1d") == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == (
        "tally: reproduce 2026-11-20: run 2026-11-22T04:00:00Z is outside the audit window "
        "(audit_window=1d): reproducible until 2026-11-23T04:00:00Z; the signed-off figures "
        "are in reconciliation_runs; nothing changed\n"
    )
    assert versions(spark, warehouse) == before


def test_an_expired_pin_is_one_line_and_writes_nothing(
    spark, warehouse, tally_cli, capsys, monkeypatch
):
    ev, st = balanced_day()
    write_inputs(spark, warehouse, W, ev, st)
    with monkeypatch.context() as patched:  # a run from before frontiers: read by version
        old_layout(patched)
        first = reconcile(spark, warehouse, DAY, W, now=NOW)
    later_batch(spark, warehouse)
    compact_and_vacuum(spark, warehouse)
    before = versions(spark, warehouse)

    # Its files vacuumed: Spark fails the read with this condition in the failed job's cause.
    with pytest.raises(Exception) as missing:
        T.read_table(spark, warehouse, T.EVENTS.name, first.events_version).collect()
    assert FILE_NOT_FOUND in conditions(missing.value), type(missing.value)
    assert reproduce_cli(tally_cli, warehouse) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith(
        f"tally: reproduce 2026-11-20: events version {first.events_version} has expired (its "
        "files were vacuumed: kept are files removed less than "
        "delta.deletedFileRetentionDuration="
    )
    assert captured.err.endswith(
        " ago); the signed-off figures are in reconciliation_runs; nothing changed\n"
    )
    assert versions(spark, warehouse) == before

    # Its commit cleaned from the log, or older than Delta's time travel reaches.
    clean_logs(spark, warehouse)
    before = versions(spark, warehouse)
    assert reproduce_cli(tally_cli, warehouse) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.endswith("; nothing changed\n")
    assert err.startswith(
        f"tally: reproduce 2026-11-20: events version {first.events_version} has expired ("
    )
    assert (
        "delta.logRetentionDuration=interval 1 day)" in err
        or "delta.deletedFileRetentionDuration=interval 1 day)" in err
    ), err
    assert versions(spark, warehouse) == before


def test_the_desk_reads_each_dates_latest_run():
    """The desk (delta-rs, no Spark) shows a date's latest run: the highest run_number, a row
    from before run history (no number) counting as the first."""
    from datetime import UTC, date, datetime

    from tally.ledger_reads import latest_runs

    d1, d2 = date(2026, 11, 20), date(2026, 11, 21)

    def run(day: date, hour: int, number: int | None) -> dict[str, Any]:
        return {
            "business_date": day,
            "run_time": datetime(2026, 11, 22, hour, tzinfo=UTC),
            "run_number": number,
        }

    rows = [run(d1, 5, 2), run(d1, 9, 1), run(d1, 3, None), run(d2, 3, None)]
    assert latest_runs(rows) == [rows[0], rows[3]]


def test_the_audit_window_is_a_setting():
    from tally.settings import Settings, SettingsError

    assert Settings().audit_window == 90 * 86_400_000
    with pytest.raises(SettingsError, match=r"^audit_window: must be at least 1d, got 1h$"):
        Settings(audit_window=3_600_000)
