"""Apache Flink beside Spark in the Kafka section: `bench.flink_job` run as its own process by
the Python of the Flink virtualenv (`make flink`: scripts/flink.sh into `.cache/flink`, or
`TALLY_FLINK_HOME`), timed from the outside like every engine; its output files read back
afterwards by the bench's session.

Two jobs over the same pre-filled topic, parallelism 2 (this machine's cores): `agg`
(aggregation only, like plain Spark's Kafka query) and `durable` (bronze + aggregation in one
job, checkpoints every `CHECKPOINT_MS`). Flink drops rows behind its watermark silently, so the
rows it dropped are measured as the records read minus the events in its windows (at the end
of its bounded input Flink closes every window). That difference holds the records its `json`
format cannot read as events too: an untimed third job (`count`, batch mode) counts the valid
events, which splits it into dropped as late and not read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bench.common import StreamShape, run_process

PROJECT_ROOT = Path(__file__).resolve().parent.parent
FLINK_VERSION = "2.3.0"  # scripts/flink.sh installs this PyFlink
MODES = ("agg", "durable")  # timed; `count` runs untimed
PARALLELISM = 2
CHECKPOINT_MS = 5_000  # durable: about the plain Kafka query's micro-batch interval
# Flink's JVM (the PyFlink gateway running the local cluster) gets the heap Spark's engines
# run with (Spark's default driver memory), not the JVM's default of a quarter of the RAM.
# `JDK_JAVA_OPTIONS` reaches the `java` the gateway starts and keeps Flink's own options.
JVM_OPTIONS = "-Xmx1g"
TOTALS_SCHEMA = (
    "window_start TIMESTAMP, window_end TIMESTAMP, key STRING, event_count BIGINT, "
    "amount_sum BIGINT"
)


def flink_home() -> Path:
    """Where scripts/flink.sh put the virtualenv and the connector (`TALLY_FLINK_HOME`, else
    `.cache/flink` in the project)."""
    return Path(os.environ.get("TALLY_FLINK_HOME") or PROJECT_ROOT / ".cache" / "flink")


def installation() -> tuple[Path, Path] | None:
    """The Flink virtualenv's Python and the Kafka connector jar; None when not installed."""
    home = flink_home()
    python = home / "venv" / "bin" / "python"
    jars = sorted((home / "jars").glob("flink-sql-connector-kafka-*.jar"))
    if not python.exists() or not jars:
        return None
    return python, jars[-1]


def run_flink(
    name: str,
    mode: str,
    bootstrap: str,
    topic: str,
    run_dir: Path,
    shape: StreamShape,
    timeout_s: float,
) -> dict[str, Any]:
    """One `bench.flink_job` process to the end of the topic: wall time, peak RSS of its
    process tree (the Python client and Flink's JVM), the job's own timings."""
    found = installation()
    if found is None:
        raise RuntimeError(f"Flink is not installed in {flink_home()}: run `make flink`")
    python, jar = found
    result = run_dir / "result.json"
    argv = [
        str(python),
        "-m",
        "bench.flink_job",
        "--mode",
        mode,
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--jar",
        str(jar),
        "--out",
        str(run_dir / "out"),
        "--result",
        str(result),
        "--window-ms",
        str(shape.window_ms),
        "--lateness-ms",
        str(shape.lateness_ms),
        "--parallelism",
        str(PARALLELISM),
        "--checkpoint-ms",
        str(CHECKPOINT_MS),
    ]
    logs = run_dir / "logs"
    proc = run_process(
        name,
        argv,
        logs,
        timeout_s=timeout_s,
        env={"FLINK_LOG_DIR": str(logs.resolve()), "JDK_JAVA_OPTIONS": JVM_OPTIONS},
    )
    report = json.loads(result.read_text(encoding="utf-8"))
    return {
        "seconds": proc.seconds,
        "peak_rss_mb": round(proc.peak_rss_bytes / 1e6, 1),
        "session_s": report["session_s"],
        "job_s": report["run_s"],
        "out": str(run_dir / "out"),
        **({"valid_rows": report["valid_rows"]} if "valid_rows" in report else {}),  # count
    }


def flink_outputs(spark: SparkSession, mode: str, out: str) -> dict[str, int]:
    """Rows and summed `event_count` of the window totals (CSV); the bronze rows (durable)."""
    row = (
        spark.read.schema(TOTALS_SCHEMA)
        .csv(f"{out}/window_totals")
        .agg(F.count(F.lit(1)), F.sum("event_count"))
        .first()
    )
    assert row is not None
    result = {"output_rows": int(row[0]), "output_events": int(row[1] or 0)}
    if mode == "durable":
        result["bronze_rows"] = spark.read.text(f"{out}/bronze").count()
    return result


def dropped(records: int, output_events: int, valid_rows: int | None = None) -> dict[str, Any]:
    """The records no window counted and their share of the records; with the valid events
    counted, how many of them were dropped as late and how many were not read as events."""
    rows = records - output_events
    result: dict[str, Any] = {
        "dropped_rows": rows,
        "dropped_pct": 100.0 * rows / records if records else None,
    }
    if valid_rows is not None:
        late = valid_rows - output_events
        result.update(
            late_rows=late,
            late_pct=100.0 * late / valid_rows if valid_rows else None,
            unread_rows=records - valid_rows,
        )
    return result
