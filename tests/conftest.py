"""Shared fixtures: one Spark session for the whole run, tiny inline DataFrames, one Kafka
broker, the reconciliation desk's warehouse and Airflow."""

from __future__ import annotations

import gc
import logging
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import settings

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# py4j logs at INFO when its connections are garbage-collected at exit, into whatever stream a
# captured test's logging handler held (closed by then): keep it to warnings.
logging.getLogger("py4j").setLevel(logging.WARNING)

SNAPSHOT_PARTITIONS = "spark.databricks.delta.snapshotPartitions"

# Property tests draw the same examples on every run and every machine (seeded from each test's
# own code): a failure seen anywhere reproduces anywhere, and its blob is printed to replay it.
# `pytest --hypothesis-profile=explore` draws fresh examples instead, and keeps the failing ones
# in .hypothesis/ to replay first next time. Example counts stay each test's own.
settings.register_profile("reproducible", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile("reproducible")


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from tally.spark import build_session

    session = build_session(
        "local[2]",
        app_name="tally-tests",
        shuffle_partitions=2,
        ui=False,
        extra_conf={
            "spark.default.parallelism": "2",
            # Delta replays table logs with 50 tasks by default; tiny test tables need 2.
            SNAPSHOT_PARTITIONS: "2",
            # A test's own VACUUM lists a table in a job of this many tasks (Spark's default
            # 10,000: 40 s of empty tasks per tiny table); tally.maintenance.vacuum sets its own.
            "spark.sql.sources.parallelPartitionDiscovery.parallelism": "4",
            # One JVM runs every test: a whole run's status history (Spark keeps 1000 SQL
            # executions and their plan metrics by default) is not worth its heap here.
            "spark.sql.ui.retainedExecutions": "50",
            "spark.ui.retainedJobs": "100",
            "spark.ui.retainedStages": "100",
            # 2g ran out of heap in test_reconcile's in-process CLI runs, ~1,000 tests into a
            # clean clone's run (java.lang.OutOfMemoryError at a Delta write); the machine has
            # 24 GiB, and what a module leaves is released after it (below).
            "spark.driver.memory": "3g",
        },
    )
    yield session
    session.stop()


@pytest.fixture(autouse=True, scope="module")
def _release_spark_memory() -> Iterator[None]:
    """After each module, drop what its tests left in the one session's JVM: cached frames and
    blocks, and Delta's cached logs of every table the module created (hundreds of tmp tables
    over a run fill a 1 GiB driver heap otherwise). A no-op when no session was started."""
    yield
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is None:
        return
    session.catalog.clearCache()
    jsc = session.sparkContext._jsc
    for rdd in jsc.getPersistentRDDs().values():
        rdd.unpersist(True)
    session._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
    gc.collect()  # Python's references to JVM objects go, so the JVM can collect them


@pytest.fixture(scope="module")
def small_delta_snapshots(spark: Any) -> Iterator[None]:
    """Delta rebuilds a table's state with 50 partitions by default: on two cores and tiny
    tables that is most of the cost of every read and write. 2 is plenty for tests (set
    for the module, then restored, since the session is shared)."""
    old = spark.conf.get(SNAPSHOT_PARTITIONS, None)
    spark.conf.set(SNAPSHOT_PARTITIONS, "2")
    yield
    if old is None:
        spark.conf.unset(SNAPSHOT_PARTITIONS)
    else:
        spark.conf.set(SNAPSHOT_PARTITIONS, old)


@pytest.fixture
def warehouse(tmp_path) -> str:
    return str(tmp_path / "warehouse")


@pytest.fixture
def tally_cli(monkeypatch) -> Callable[..., int]:
    """Run `tally ARGV` as a user does (tally_app.cli.main, in this process, on the session's
    Spark): only the TALLY_* settings given as keywords are in the environment."""
    import os

    from tally_app.cli import main

    def run(argv: list[str], **env: str) -> int:
        for key in [k for k in os.environ if k.startswith("TALLY_")]:
            monkeypatch.delenv(key)
        settings = {"TALLY_SPARK_MASTER": "local[2]", "TALLY_SHUFFLE_PARTITIONS": "2", **env}
        for key, value in settings.items():
            monkeypatch.setenv(key, value)
        return main(argv)

    return run


# -- the reconciliation desk's warehouse and Airflow (tests/desk_fixtures.py) -------------------
# Session fixtures, so that test_desk_api and test_desk_browser share one warehouse and one
# Airflow; desk_fixtures (which imports airflow_helpers) is imported only when first used.


@pytest.fixture(scope="session")
def desk_airflow_home(tmp_path_factory) -> Iterator[Any]:
    import desk_fixtures

    yield from desk_fixtures.airflow_home(tmp_path_factory)


@pytest.fixture(scope="session")
def desk_env(spark, tmp_path_factory, desk_airflow_home) -> dict[str, str]:
    import desk_fixtures

    return desk_fixtures.build_warehouse(spark, tmp_path_factory)


@pytest.fixture(scope="session")
def desk_airflow(desk_env, desk_airflow_home) -> Iterator[Any]:
    import desk_fixtures

    yield from desk_fixtures.start_airflow(desk_airflow_home, desk_env)


# -- one Kafka broker (tests/kafka_broker.py) ---------------------------------------------------
# A session fixture: the Kafka test modules share one broker (each starts its own topics), which
# saves a broker's start (three JVMs: an id, the storage format, the broker) per module.
_BROKERS: list[Any] = []


@pytest.fixture(scope="session")
def broker(tmp_path_factory) -> Iterator[Any]:
    from kafka_broker import kafka_broker

    with kafka_broker(tmp_path_factory.mktemp("kafka")) as running:
        _BROKERS.append(running)
        yield running


def _last_user(item: pytest.Item, fixture: str) -> bool:
    """Whether `item` is the last test of the run that uses `fixture`."""
    if fixture not in getattr(item, "fixturenames", ()):
        return False
    items = item.session.items
    later = items[items.index(item) + 1 :]
    return not any(fixture in getattr(i, "fixturenames", ()) for i in later)


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stop the desk's Airflow and the Kafka broker after the last test that uses them, not at
    the session's end (the rest of the suite runs without an idle scheduler or broker beside
    it)."""
    if _last_user(item, "desk_airflow"):
        import desk_fixtures

        desk_fixtures.stop_airflow()
    if _last_user(item, "broker"):
        for running in _BROKERS:
            running.run("stop")  # by its pid file; the fixture's own stop is then a no-op


# Read once: tests change the environment (tally_cli drops every TALLY_* variable).
_TIMES_FILE = os.environ.get("TEST_TIMES_FILE")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """With TEST_TIMES_FILE=FILE, append each test phase's seconds to FILE as it finishes, so a
    run stopped before its end (pytest's --durations and junit print only then) still says
    where its time went."""
    if _TIMES_FILE:
        with open(_TIMES_FILE, "a", encoding="utf-8") as out:
            out.write(f"{report.duration:.1f}\t{report.when}\t{report.nodeid}\n")
