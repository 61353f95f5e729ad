"""Shared fixtures: one Spark session for the whole run, tiny inline DataFrames."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# py4j logs at INFO when its connections are garbage-collected at exit, into whatever stream a
# captured test's logging handler held (closed by then): keep it to warnings.
logging.getLogger("py4j").setLevel(logging.WARNING)


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
            "spark.databricks.delta.snapshotPartitions": "2",
        },
    )
    yield session
    session.stop()


@pytest.fixture
def warehouse(tmp_path) -> str:
    return str(tmp_path / "warehouse")
