"""The only place a SparkSession is built."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DELTA_PACKAGE = "io.delta:delta-spark_4.1_2.13:4.3.1"
PROJECT_ROOT = Path(__file__).resolve().parent.parent


def jars_dir() -> Path:
    return Path(os.environ.get("TALLY_JARS_DIR", PROJECT_ROOT / ".cache" / "jars"))


def delta_jars() -> list[str]:
    """The jars `make jars` fetched once; empty when they are not there."""
    directory = jars_dir()
    return sorted(str(p) for p in directory.glob("*.jar")) if directory.is_dir() else []


def build_session(
    master: str = "local[*]",
    app_name: str = "tally",
    shuffle_partitions: int | None = None,
    ui: bool = True,
    extra_conf: dict[str, str] | None = None,
) -> SparkSession:
    """A Delta-enabled session on any master URL, UTC, with Python workers on this interpreter."""
    # Workers must run this virtualenv's interpreter, or they import a pyarrow-less python3.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config(
            "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"
        )
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
        .config("spark.executor.extraJavaOptions", "-Duser.timezone=UTC")
        .config("spark.ui.enabled", "true" if ui else "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.log.structuredLogging.enabled", "false")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        # Our own foreachBatch writes are made idempotent with txnAppId/txnVersion.
        .config("spark.databricks.delta.schema.autoMerge.enabled", "false")
    )
    jars = delta_jars()
    if jars:
        # Fetched once by `make jars`; the driver ships them to executors on a cluster.
        builder = builder.config("spark.jars", ",".join(jars))
    else:
        builder = builder.config("spark.jars.packages", DELTA_PACKAGE)
    if shuffle_partitions is not None:
        builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        # Delta replays a table's log with 50 tasks by default: far too many for the small
        # state and progress tables the stream rewrites every micro-batch.
        builder = builder.config(
            "spark.databricks.delta.snapshotPartitions", str(max(2, shuffle_partitions))
        )
    for key, value in (extra_conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
