"""The project's Spark session: Delta on, UTC, time travel works, jars come from the local cache."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pyspark.sql import functions as F

from tally import tables as T
from tally.spark import delta_jars, with_task_retries


def test_delta_time_travel(spark, warehouse) -> None:
    path = T.table_path(warehouse, "ledger")
    first = spark.range(3).select(F.col("id").alias("n"), (F.col("id") * 100).alias("amount"))
    first.write.format("delta").save(path)
    first.where("n > 0").withColumn("amount", F.col("amount") + 1).write.format("delta").mode(
        "overwrite"
    ).save(path)

    v0 = spark.read.format("delta").option("versionAsOf", 0).load(path)
    v1 = spark.read.format("delta").option("versionAsOf", 1).load(path)
    assert sorted(tuple(r) for r in v0.collect()) == [(0, 0), (1, 100), (2, 200)]
    assert sorted(tuple(r) for r in v1.collect()) == [(1, 101), (2, 201)]
    assert T.latest_version(spark, warehouse, "ledger") == 1


def test_session_is_utc_with_delta_extensions(spark) -> None:
    conf = spark.conf
    assert conf.get("spark.sql.session.timeZone") == "UTC"
    assert "DeltaSparkSessionExtension" in conf.get("spark.sql.extensions")
    ts = spark.sql("SELECT unix_millis(TIMESTAMP'2026-11-21 00:00:00') AS ms").first()["ms"]
    assert ts == int(datetime(2026, 11, 21, tzinfo=UTC).timestamp()) * 1000


@pytest.mark.parametrize(
    ("master", "expected"),
    [
        ("local[2]", "local[2,4]"),  # the tests' and benchmarks' master
        ("local[*]", "local[*,4]"),  # the default setting
        ("local", "local[1,4]"),  # one thread, as Spark reads it
        (" local[ 8 ] ", "local[8,4]"),  # spaces a hand-written setting may carry
        ("local[2,1]", "local[2,1]"),  # attempts named by the user: kept
        ("local-cluster[2,1,1024]", "local-cluster[2,1,1024]"),  # not local mode's scheduler
        ("spark://127.0.0.1:7077", "spark://127.0.0.1:7077"),  # a cluster retries on its own
        ("localhost", "localhost"),  # not a local master at all
    ],
)
def test_a_local_master_retries_a_failed_task_as_a_cluster_does(master, expected) -> None:
    assert with_task_retries(master) == expected


def test_the_session_retries_a_failed_task(spark) -> None:
    assert spark.sparkContext.master.endswith(",4]")


def test_delta_jars_come_from_the_local_cache() -> None:
    jars = delta_jars()
    assert any("delta-spark_4.1_2.13-4.3.1.jar" in j for j in jars)
    assert any("delta-storage-4.3.1.jar" in j for j in jars)


def test_catalog_tables_are_created_empty_and_idempotently(spark, warehouse) -> None:
    T.ensure_tables(spark, warehouse, T.STREAMING_TABLES)
    T.ensure_tables(spark, warehouse, T.STREAMING_TABLES)  # second call is a no-op
    events = T.read_table(spark, warehouse, "events")
    assert events.schema == T.EVENTS.schema()
    assert events.count() == 0
    assert T.latest_version(spark, warehouse, "events") == 0


def test_show_knows_every_table_the_pipeline_writes(spark, warehouse, capsys) -> None:
    from tally_app.cli import main

    # registered by the Airflow layer, shown by the CLI: known, just not written yet
    assert main(["show", "alerts", "--warehouse", warehouse]) == 2
    assert f"no table 'alerts' in {warehouse}" in capsys.readouterr().err
    assert main(["show", "no_such_table", "--warehouse", warehouse]) == 2
    err = capsys.readouterr().err
    assert "unknown table 'no_such_table'" in err and "lateness_recommendations" in err


def test_events_files_carry_statistics_only_where_readers_skip_files(spark, warehouse) -> None:
    """The stream's replay check skips files by (app_id, batch_id), time ranges by event_time;
    statistics on the other columns would only slow every append."""
    import json
    from pathlib import Path

    T.ensure_tables(spark, warehouse, (T.EVENTS,))
    ms = F.lit(1_795_000_000_000) + F.col("id")
    given = {
        "event_id": F.concat(F.lit("e-"), F.col("id").cast("string")),
        "event_time": F.timestamp_millis(ms),
        "event_date": F.to_date(F.timestamp_millis(ms)),
        "batch_id": F.lit(7),
        "app_id": F.lit("app"),
    }
    rows = spark.range(2).select(
        *[
            given.get(f.name, F.lit(None)).cast(f.dataType).alias(f.name)
            for f in T.EVENTS.schema().fields
        ]
    )
    rows.write.format("delta").mode("append").save(T.table_path(warehouse, "events"))
    log = Path(T.table_path(warehouse, "events")) / "_delta_log"
    adds = [
        json.loads(action["add"]["stats"])
        for commit in sorted(log.glob("*.json"))
        for action in map(json.loads, commit.read_text().splitlines())
        if "add" in action
    ]
    assert adds and all(s["numRecords"] >= 1 for s in adds)
    assert all(set(s["minValues"]) == {"app_id", "batch_id", "event_time"} for s in adds)
    assert all(s["minValues"]["batch_id"] == 7 for s in adds)


def test_a_first_write_creates_the_table_as_ensure_table_would(spark, warehouse) -> None:
    """The nightly's output tables are created by their first write (no empty commit first):
    the same columns, types and nullability, and the same partitioning."""
    from delta.tables import DeltaTable

    lazy = [t for t in (*T.RECONCILE_TABLES, T.VALIDATION_RESULTS) if T.creates_on_write(t)]
    assert T.RECONCILIATION in lazy and T.VALIDATION_RESULTS in lazy
    for table in lazy:
        T.write_table(
            T.empty_frame(spark, table),
            f"{warehouse}/written",
            table,
            replace_where="business_date = DATE'2026-11-20'",
        )
        T.ensure_table(spark, f"{warehouse}/ensured", table)
        written, ensured = (
            DeltaTable.forPath(spark, T.table_path(f"{warehouse}/{how}", table.name))
            for how in ("written", "ensured")
        )
        assert written.toDF().schema == ensured.toDF().schema == table.schema(), table.name
        details = [d.detail().select("partitionColumns").first()[0] for d in (written, ensured)]
        assert details == [list(table.partition_by)] * 2, table.name


def test_session_conf_holds_for_the_block_only(spark) -> None:
    from tally.spark import session_conf, without_adaptive_execution

    key = "spark.sql.limit.initialNumPartitions"
    before = spark.conf.get(key)
    try:
        with session_conf(spark, {key: "7"}), without_adaptive_execution(spark):
            assert spark.conf.get(key) == "7"
            assert spark.conf.get("spark.sql.adaptive.enabled") == "false"
            raise RuntimeError("a failing block")
    except RuntimeError:
        pass
    assert spark.conf.get(key) == before
    assert spark.conf.get("spark.sql.adaptive.enabled") == "true"


def _cached_bytes(spark, frame) -> int:  # type: ignore[no-untyped-def]
    """The memory of `frame` persisted and computed (Spark's storage status, less what the
    shared session held before: in the full suite an earlier test's blocks may still be
    there; 16,563 bytes once), then freed."""

    def stored() -> int:
        return sum(info.memSize() for info in spark.sparkContext._jsc.sc().getRDDStorageInfo())

    before = stored()
    frame.persist()
    try:
        frame.count()
        return stored() - before
    finally:
        frame.unpersist(blocking=True)


def test_batch_caching_keeps_cached_columns_uncompressed_in_the_block_only(spark) -> None:
    """A column of one repeated value: compressed, its cache is a few bytes per batch of
    rows; in the block it is 8 bytes a row; after the block the session compresses again."""
    from tally.spark import UNCOMPRESSED_CACHE, batch_caching, session_conf

    key = "spark.sql.inMemoryColumnarStorage.compressed"
    assert key in UNCOMPRESSED_CACHE
    rows = 200_000
    frame = spark.range(rows, numPartitions=2).select(F.lit(7).cast("long").alias("x"))
    # Spark's default here, whatever an earlier test left (the stream's session sets false)
    with session_conf(spark, {key: "true"}):
        compressed = _cached_bytes(spark, frame)
        with batch_caching(spark):
            assert spark.conf.get(key) == "false"
            uncompressed = _cached_bytes(spark, frame)
        assert spark.conf.get(key) == "true"
    assert uncompressed >= 8 * rows > 100 * compressed


def test_functions_calls_skip_the_class_and_member_lookups(spark) -> None:
    """A `functions` call after the first of its name is one Py4J round trip (the call), not
    three (class lookup, member lookup, call): `pin_jvm_classes` in every session."""
    from py4j.clientserver import ClientServerConnection
    from pyspark.sql import functions as F

    from tally.spark import pin_jvm_classes

    pin_jvm_classes(spark)  # idempotent: build_session did it already
    F.col("warm_up")
    sent: list[str] = []
    send = ClientServerConnection.send_command

    def counting(self, command, *args, **kwargs):  # type: ignore[no-untyped-def]
        sent.append(command.split("\n", 1)[0])
        return send(self, command, *args, **kwargs)

    ClientServerConnection.send_command = counting  # type: ignore[method-assign]
    try:
        column = F.col("x")
    finally:
        ClientServerConnection.send_command = send  # type: ignore[method-assign]
    assert "r" not in sent and sent.count("c") == 1  # no reflection call; releases may come
    assert spark.range(2).select(F.col("id").alias("x")).select(column).count() == 2
