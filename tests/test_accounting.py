"""The accounting identity on a generated stream, end to end through `run_stream`.

~5000 generated events (late, lagging, idle, bursty, duplicated, malformed, clocks ahead) run
with the arrival clock and a drain; then every input line is in `events` or `quarantine`
exactly once, the counts match the generator's manifest, and for every (window, key)
first arrivals in events = latest stream revision + late_events that are first arrivals,
checked in DataFrame operations. The oracle ranks first arrivals itself (stream_helpers), not
with `tally.arrivals`, and is held here to the plain-Python rule of tests/reference_diff.py.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import reference_diff as R
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from reference_diff import ARRIVAL_ORDER, LINE
from stream_helpers import collect, first_arrival_rows, first_arrivals, identity_check, read

from streaming.run import run_stream
from streaming.state import StateStore
from tally.settings import Settings
from tally_tools.generate import generate

WINDOW_MS = 60_000


@pytest.fixture(scope="module")
def drained(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, dict[str, Any]]:
    root = tmp_path_factory.mktemp("accounting")
    manifest = generate(
        out=str(root / "in"),
        events=5000,
        partitions=4,
        seed=23,
        start=datetime(2026, 11, 20, tzinfo=UTC),
        duration_ms=30 * 60_000,
        files=8,
        keys=40,
        progress=False,
    )
    settings = Settings(
        window=WINDOW_MS,
        lateness=30_000,
        allowed_lateness=0,
        idle_timeout=60_000,
        max_clock_skew=300_000,
        warehouse=str(root / "warehouse"),
        input=str(root / "in"),
        max_files_per_trigger=4,
        shuffle_partitions=2,
        spark_master="local[2]",
    )
    summary = run_stream(settings, available_now=True, drain=True, clock="arrival", spark=spark)
    assert "(drained)" in summary
    return settings.warehouse, manifest


def test_every_line_is_in_events_or_quarantine_once(
    spark: SparkSession, drained: tuple[str, dict[str, Any]]
) -> None:
    warehouse, manifest = drained
    events = read(spark, warehouse, "events").select("source_file", "source_line")
    quarantine = read(spark, warehouse, "quarantine").select("source_file", "source_line")
    both = events.unionByName(quarantine)
    assert both.count() == manifest["lines"]
    assert both.distinct().count() == manifest["lines"]
    assert events.count() == manifest["valid_events"] + manifest["duplicates"]
    assert quarantine.count() == manifest["malformed_lines"]


def test_counts_match_the_manifest(
    spark: SparkSession, drained: tuple[str, dict[str, Any]]
) -> None:
    warehouse, manifest = drained
    events = read(spark, warehouse, "events")
    by_status = {
        r["arrival_status"]: r["n"]
        for r in events.groupBy("arrival_status").agg(F.count(F.lit(1)).alias("n")).collect()
    }
    assert sum(n for s, n in by_status.items() if s != "duplicate") == manifest["valid_events"]
    assert by_status.get("duplicate", 0) == manifest["duplicates"]
    counted = events.where(F.col("arrival_status") != "duplicate")
    assert counted.select("event_id").distinct().count() == manifest["valid_events"]
    total = counted.agg(F.sum("amount")).first()
    assert total is not None and total[0] == manifest["amount_total"]
    # the stream saw late events and duplicates: the identity below is not trivial
    assert by_status.get("late", 0) > 0
    progress = read(spark, warehouse, "stream_progress").agg(
        F.sum("input_lines").alias("lines"),
        F.sum("quarantined_lines").alias("quarantined"),
        F.sum("duplicate_events").alias("duplicates"),
        F.sum("late_events").alias("late"),
        F.sum("clock_skewed_events").alias("skewed"),
    )
    row = progress.first()
    assert row is not None
    assert row["lines"] == manifest["lines"]
    assert row["quarantined"] == manifest["malformed_lines"]
    assert row["duplicates"] == manifest["duplicates"]
    assert row["late"] == by_status["late"] == read(spark, warehouse, "late_events").count()
    assert row["skewed"] == manifest["clock_ahead_events"]
    reasons = read(spark, warehouse, "quarantine").groupBy("reason").count().collect()
    by_reason = {r["reason"]: r["count"] for r in reasons}
    kinds = dict(manifest["malformed_by_kind"])
    kinds["invalid_json"] = kinds.get("invalid_json", 0) + kinds.pop("non_object", 0)
    assert by_reason == {k: n for k, n in kinds.items() if n}


def test_accounting_identity_for_every_window(
    spark: SparkSession, drained: tuple[str, dict[str, Any]]
) -> None:
    warehouse, _ = drained
    checked = identity_check(spark, warehouse, WINDOW_MS).persist()
    try:
        stats = checked.agg(
            F.count(F.lit(1)).alias("windows"),
            F.count_if(F.col("late_count") > 0).alias("with_late"),
            F.count_if(~F.col("ok")).alias("violations"),
        ).first()
        assert stats is not None
        violations = checked.where(~F.col("ok")).limit(20).collect()
        assert violations == []
        assert stats["violations"] == 0
        assert stats["windows"] > 0
        assert stats["with_late"] > 0
    finally:
        checked.unpersist()


def test_the_oracles_first_arrivals_are_the_plain_python_rule(
    spark: SparkSession, drained: tuple[str, dict[str, Any]]
) -> None:
    # The identity above is only as good as its first arrivals: on this log (a few thousand
    # rows, duplicates among them) they are exactly those of reference_diff, and the late
    # rows it counts are exactly the late rows whose line is such a first arrival.
    warehouse, manifest = drained
    log = read(spark, warehouse, "events")
    columns = list(dict.fromkeys((*ARRIVAL_ORDER, *LINE)))  # each once
    rows = collect(log.select(*columns))
    firsts = R.first_rows(rows)
    assert len(firsts) == manifest["valid_events"] < len(rows)
    spark_firsts = collect(first_arrivals(log).select(*columns))
    assert {r["event_id"]: r for r in spark_firsts} == firsts
    first_lines = {tuple(r[c] for c in LINE) for r in firsts.values()}
    late = collect(read(spark, warehouse, "late_events").select(*LINE))
    counted = collect(first_arrival_rows(read(spark, warehouse, "late_events"), log).select(*LINE))
    assert len(counted) > 0
    assert sorted(map(repr, counted)) == sorted(
        repr(r) for r in late if tuple(r[c] for c in LINE) in first_lines
    )


def test_one_answer_per_window_revision(
    spark: SparkSession, drained: tuple[str, dict[str, Any]]
) -> None:
    warehouse, _ = drained
    aggregates = read(spark, warehouse, "stream_aggregates")
    keys = ["window_start", "window_end", "key", "revision"]
    repeated = aggregates.groupBy(*keys).count().where(F.col("count") > 1).limit(5).collect()
    assert repeated == []
    late = read(spark, warehouse, "late_events")
    assert late.count() == late.select("event_id").distinct().count()
    # after the drain nothing is left open, and no id is remembered
    path = Path(warehouse) / "_checkpoints" / "stream"
    last = max(int(p.name) for p in (path / "tally" / "state").iterdir())
    windows, dedup = StateStore(spark, str(path)).read(last)
    assert (windows.count(), dedup.count()) == (0, 0)
    assert read(spark, warehouse, "stream_progress").where("drained").count() == 1


# -- generate -> stream -> `tally reconcile` (the CLI, in this process and session) --

DAY = "2026-11-20"


def reconcile_cli(
    warehouse: str, out: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    """`tally reconcile --date DAY` as a user runs it; the session fixture is reused."""
    from tally_app.cli import main

    monkeypatch.setenv("TALLY_SPARK_MASTER", "local[2]")
    monkeypatch.setenv("TALLY_SHUFFLE_PARTITIONS", "2")
    monkeypatch.setenv("TALLY_GX_ROOT", str(out / "gx"))
    # The generated feed is deliberately messy (a heavy tail, bursts, a few clocks 30 min
    # ahead, a replay whose last batch lags): these thresholds tolerate that, so the tests
    # are about the reconciliation.
    monkeypatch.setenv("TALLY_LATE_RATE_WARN", "0.5")
    monkeypatch.setenv("TALLY_LATE_RATE_FAIL", "0.5")
    monkeypatch.setenv("TALLY_CLOCK_SKEW_TOLERANCE", "0.01")
    monkeypatch.setenv("TALLY_WATERMARK_LAG_MAX", "1h")
    capsys.readouterr()
    reports = str(out / "reports")
    code = main(["reconcile", "--date", DAY, "--warehouse", warehouse, "--out", reports])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def day_rows(spark: SparkSession, warehouse: str, table: str) -> DataFrame:
    return read(spark, warehouse, table).where(F.col("business_date") == F.lit(DAY).cast("date"))


def test_reconcile_of_a_generated_day_has_no_unexplained_window(
    spark: SparkSession,
    drained: tuple[str, dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    warehouse, manifest = drained
    code, out, err = reconcile_cli(warehouse, tmp_path, monkeypatch, capsys)
    assert (code, err) == (0, ""), out
    statuses = {
        r["status"]: r["n"]
        for r in day_rows(spark, warehouse, "reconciliation")
        .groupBy("status")
        .agg(F.count(F.lit(1)).alias("n"))
        .collect()
    }
    assert "UNEXPLAINED" not in statuses
    # late events made a real gap, and all of it is explained
    assert statuses.get("EXPLAINED_BY_LATE", 0) + statuses.get("MISSING_IN_STREAM", 0) > 0
    summary = day_rows(spark, warehouse, "reconciliation_summary").first()
    assert summary is not None
    assert summary["batch_amount"] == manifest["amount_total"]
    assert summary["gap_amount"] == summary["explained_amount"] > 0
    # the CLI also validated and reported
    results = day_rows(spark, warehouse, "validation_results")
    assert results.count() > 0 and results.where(~F.col("success")).count() == 0
    assert (tmp_path / "reports" / f"report-{DAY}.html").is_file()
    assert "BALANCED" in out and "PASSED" in out
    # the run recorded the bounds the stream had in force over the day: the fixed 30 s on
    # each of the four partitions, at the stream_progress version it read
    run = day_rows(spark, warehouse, "reconciliation_runs").first()
    assert run is not None and run["stream_progress_version"] is not None
    for column in ("min", "max", "last"):
        assert run[f"partition_lateness_{column}_ms"] == dict.fromkeys(range(4), 30_000)
    page = (tmp_path / "reports" / f"report-{DAY}.html").read_text()
    assert "<th>lateness bounds in force</th><td>partitions 0-3: 30s</td>" in page
    assert_every_table_reads_with_delta_rs(spark, warehouse)
    # a date without an UNEXPLAINED window writes no evidence (no table, no empty commit)
    assert not Path(warehouse, "reconciliation_evidence").exists()


def assert_every_table_reads_with_delta_rs(spark: SparkSession, warehouse: str) -> None:
    """Every user-facing table of a drained stream and its nightly run reads with delta-rs
    (what analysts use with pandas/polars) into pyarrow, row for row as Spark reads it."""
    from deltalake import DeltaTable

    from tally import tables as T

    user_facing = [t for t in T.ALL_TABLES if not t.internal and T.exists(spark, warehouse, t.name)]
    names = {t.name for t in user_facing}
    assert {"events", "stream_aggregates", "stream_progress", "reconciliation"} <= names
    assert {"late_events", "quarantine", "validation_results", "reconciliation_runs"} <= names
    for table in user_facing:
        arrow = DeltaTable(T.table_path(warehouse, table.name)).to_pyarrow_table()
        assert arrow.num_rows == read(spark, warehouse, table.name).count() > 0, table.name
        assert set(arrow.column_names) == set(table.schema().fieldNames()), table.name


def test_a_deleted_stream_row_is_exactly_one_unexplained_window(
    spark: SparkSession,
    drained: tuple[str, dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import shutil

    from delta.tables import DeltaTable

    # a copy, so the other tests keep the untouched warehouse
    warehouse = str(tmp_path / "warehouse")
    shutil.copytree(drained[0], warehouse)
    stream = read(spark, warehouse, "stream_aggregates")
    latest = stream.groupBy("window_start", "key").agg(F.max("revision").alias("revision"))
    victim = (
        stream.join(latest, ["window_start", "key", "revision"])
        .orderBy(F.col("amount_sum").desc(), "window_start", "key")
        .first()
    )
    assert victim is not None and victim["amount_sum"] > 0
    is_victim = (F.col("window_start") == F.lit(victim["window_start"])) & (
        F.col("key") == victim["key"]
    )
    path = f"{warehouse}/stream_aggregates"
    # a defect from outside the stream: its tables refuse deletes (delta.appendOnly)
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.appendOnly' = 'false')")
    DeltaTable.forPath(spark, path).delete(is_victim)

    code, _, err = reconcile_cli(warehouse, tmp_path, monkeypatch, capsys)

    assert code == 1
    assert len(err.strip().splitlines()) == 1 and "1 UNEXPLAINED window" in err, err
    unexplained = (
        day_rows(spark, warehouse, "reconciliation").where(F.col("status") == "UNEXPLAINED")
    ).collect()
    assert [(r["window_start"], r["key"]) for r in unexplained] == [
        (victim["window_start"], victim["key"])
    ]
    assert unexplained[0]["residual_amount"] == victim["amount_sum"]
    assert unexplained[0]["residual_count"] == victim["event_count"]
    # everything was still written: the failed validation and the report
    failed = day_rows(spark, warehouse, "validation_results").where(~F.col("success"))
    assert failed.where(F.col("suite") == "gap").count() >= 1
    assert (tmp_path / "reports" / f"report-{DAY}.html").is_file()


def _window_of(events: DataFrame, window: Any) -> DataFrame:
    return events.where(
        (F.col("key") == window["key"])
        & (F.col("event_time") >= F.lit(window["window_start"]))
        & (F.col("event_time") < F.lit(window["window_end"]))
    )


def test_an_unexplained_window_names_the_records_behind_it(
    spark: SparkSession, drained: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    """Two defects from outside the stream, each an UNEXPLAINED window: its stream rows
    deleted (none of its events counted), and a line appended to the log after the window's
    answer (one event the stream never counted). The evidence lists the window's first
    arrivals as recomputed here from the log, the never-counted ones first, at most
    `evidence_rows` of each kind, and says how many there are in all."""
    import shutil
    from datetime import date

    from delta.tables import DeltaTable

    from batch.reconcile import reconcile

    warehouse = str(tmp_path / "warehouse")
    shutil.copytree(drained[0], warehouse)
    stream = read(spark, warehouse, "stream_aggregates")
    late_keys = read(spark, warehouse, "late_events").select("window_start", "key").distinct()
    big = stream.where(F.col("event_count") >= 3)
    # the deleted window has late rows too, so its evidence has all three kinds but revisions
    deleted = big.join(late_keys, ["window_start", "key"]).orderBy("window_start", "key").first()
    grown = big.orderBy(F.col("window_start").desc(), "key").first()
    assert deleted is not None and grown is not None
    assert (deleted["window_start"], deleted["key"]) != (grown["window_start"], grown["key"])
    path = f"{warehouse}/stream_aggregates"
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.appendOnly' = 'false')")
    DeltaTable.forPath(spark, path).delete(
        (F.col("window_start") == F.lit(deleted["window_start"])) & (F.col("key") == deleted["key"])
    )
    log = read(spark, warehouse, "events")
    # after every micro-batch of the stream, its drain included (which emitted the answers)
    last_batch = log.select("batch_id").unionByName(stream.select("batch_id"))
    last_batch = last_batch.agg(F.max("batch_id")).first()
    line = _window_of(log, grown).where(F.col("arrival_status") == "on_time").limit(1)
    assert last_batch is not None and line.count() == 1
    line.withColumn("event_id", F.lit("appended-after-the-answer")).withColumn(
        "batch_id", F.lit(last_batch[0] + 1).cast("long")
    ).write.format("delta").mode("append").save(f"{warehouse}/events")

    reconcile(
        spark,
        warehouse,
        date.fromisoformat(DAY),
        WINDOW_MS,
        now=datetime(2026, 11, 21, 1, tzinfo=UTC),
        evidence_rows=2,
    )

    recon = day_rows(spark, warehouse, "reconciliation").where(F.col("status") == "UNEXPLAINED")
    by_window = {(r["window_start"], r["key"]): r for r in recon.collect()}
    assert set(by_window) == {
        (deleted["window_start"], deleted["key"]),
        (grown["window_start"], grown["key"]),
    }
    evidence = day_rows(spark, warehouse, "reconciliation_evidence")
    firsts = first_arrivals(read(spark, warehouse, "events"))
    late = read(spark, warehouse, "late_events")
    for window, never in ((deleted, None), (grown, 1)):
        rows = evidence.where(
            (F.col("window_start") == F.lit(window["window_start"]))
            & (F.col("key") == window["key"])
        )
        expected = {r["event_id"]: r for r in _window_of(firsts, window).collect()}
        events = rows.where(F.col("kind") == "event").orderBy("rank").collect()
        # capped at 2 of the window's first arrivals, each one of them, from its first line
        assert [r["rank"] for r in events] == [1, 2]
        assert {r["kind_rows"] for r in events} == {len(expected)}
        for r in events:
            first = expected[r["event_id"]]
            assert (r["source_file"], r["source_line"], r["batch_id"]) == (
                first["source_file"],
                first["source_line"],
                first["batch_id"],
            )
        # what the stream never counted is exactly the window's unexplained residual
        residual = by_window[(window["window_start"], window["key"])]["residual_count"]
        assert events[0]["never_counted_rows"] == residual == (never or residual) > 0
        assert not events[0]["in_late"] and not events[0]["counted_by_stream"]
        revisions = rows.where(F.col("kind") == "revision")
        late_rows = rows.where(F.col("kind") == "late")
        window_late = _window_of(late, window).count()
        assert late_rows.count() == min(2, window_late)
        if window is deleted:
            assert revisions.count() == 0 and window_late > 0
            assert events[0]["never_counted_rows"] == len(expected) - window_late
        else:
            assert events[0]["event_id"] == "appended-after-the-answer"
            assert events[1]["counted_by_stream"]
            same = (F.col("window_start") == F.lit(window["window_start"])) & (
                F.col("key") == window["key"]
            )
            assert revisions.count() == stream.where(same).count() > 0
    assert evidence.select("run_time").distinct().count() == 1


def test_a_stream_without_input_still_creates_its_tables(
    spark: SparkSession, tmp_path: Path
) -> None:
    # The tables are created while the first batch runs; with no batch at all the stream still
    # waits for them, so readers (the nightly, `tally show`) find every table, empty.
    from tally import tables as T

    (tmp_path / "in").mkdir()
    settings = Settings(
        window=WINDOW_MS,
        lateness=30_000,
        warehouse=str(tmp_path / "warehouse"),
        input=str(tmp_path / "in"),
        shuffle_partitions=2,
        spark_master="local[2]",
    )
    assert run_stream(settings, available_now=True, clock="arrival", spark=spark) == (
        "no input processed"
    )
    for table in T.STREAMING_TABLES:
        assert T.exists(spark, settings.warehouse, table.name), table.name
        assert read(spark, settings.warehouse, table.name).count() == 0, table.name
