"""Read-back helpers for the speed layer's tests: input files parsed in plain Python, Delta
tables collected with times as epoch milliseconds, the accounting identity as a DataFrame,
and a supervised `tally stream` subprocess for fault injection.

Times are converted in the JVM (unix_millis): collect() would give naive local datetimes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import MapType, TimestampType

from streaming.lease import LEASE_DIR, LeaseRecord
from tally import tables as T
from tally.arrivals import FIRST_ARRIVAL, with_first_arrival
from tally.windows import WINDOW_KEY, with_window

PROJECT_ROOT = Path(__file__).resolve().parent.parent
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
T0 = datetime(2026, 11, 20, tzinfo=UTC)
T0_MS = (T0 - EPOCH) // timedelta(milliseconds=1)
EVENT_TIME_MIN_MS = (datetime(1, 1, 1, tzinfo=UTC) - EPOCH) // timedelta(milliseconds=1)
EVENT_TIME_MAX_MS = (datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC) - EPOCH) // timedelta(
    milliseconds=1
)

# --- the contract, independently of tally/events.py -----------------------------------------

_ZONED_ISO = re.compile(
    r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}(:?\d{2})?)$"
)


def iso_ms(text: str) -> int:
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        raise ValueError(text)
    return (value - EPOCH) // timedelta(milliseconds=1)


def classify_line(line: str) -> tuple[str | None, dict[str, Any] | None]:
    """(quarantine reason, None) or (None, parsed object): docs/semantics.md, in its order."""
    if line.strip() == "":
        return "empty_line", None
    try:
        obj = json.loads(line)
    except json.JSONDecodeError:
        return "invalid_json", None
    if not isinstance(obj, dict):
        return "invalid_json", None

    def blank(name: str) -> bool:
        value = obj.get(name)
        return value is None or (isinstance(value, str) and value.strip() == "")

    if blank("event_id"):
        return "missing_event_id", None
    if blank("key"):
        return "missing_key", None
    if obj.get("amount") is None:
        return "missing_amount", None
    amount = obj["amount"]
    if isinstance(amount, bool) or not isinstance(amount, int) or not -(2**63) <= amount < 2**63:
        return "amount_not_integer", None
    when = obj.get("event_time")
    if when is None:
        return "missing_event_time", None
    if isinstance(when, bool) or not isinstance(when, int | str):
        return "bad_event_time", None
    if isinstance(when, str):
        if not _ZONED_ISO.match(when):
            return "bad_event_time", None
        try:
            when = iso_ms(when)
        except ValueError:
            return "bad_event_time", None
    if not EVENT_TIME_MIN_MS <= when <= EVENT_TIME_MAX_MS:  # years 0001-9999 UTC
        return "bad_event_time", None
    part = obj.get("partition")
    if part is not None and (isinstance(part, bool) or not isinstance(part, int)):
        return "partition_not_integer", None
    return None, obj


@dataclass(frozen=True)
class InputLine:
    file: str  # base name
    number: int  # 1-based
    text: str
    reason: str | None
    obj: dict[str, Any] | None


def read_input(directory: str | Path) -> list[InputLine]:
    """Every line of every input file (Spark's view: `_`/`.` files are hidden)."""
    out: list[InputLine] = []
    for path in sorted(Path(directory).iterdir()):
        if path.name.startswith(("_", ".")) or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        if text == "":
            continue
        body = text[:-1] if text.endswith("\n") else text
        for number, line in enumerate(body.split("\n"), start=1):
            reason, obj = classify_line(line)
            out.append(InputLine(path.name, number, line, reason, obj))
    return out


# --- tables --------------------------------------------------------------------------------


def read(spark: SparkSession, warehouse: str, name: str) -> DataFrame:
    return T.read_table(spark, warehouse, name)


def base_name(col: str = "source_file") -> Column:
    return F.regexp_extract(F.col(col), r"([^/]+)$", 1)


def _ms_columns(df: DataFrame) -> list[Column]:
    cols: list[Column] = []
    for f in df.schema.fields:
        if isinstance(f.dataType, TimestampType):
            cols.append(F.unix_millis(F.col(f.name)).alias(f.name))
        elif isinstance(f.dataType, MapType) and isinstance(f.dataType.valueType, TimestampType):
            cols.append(F.transform_values(f.name, lambda _k, v: F.unix_millis(v)).alias(f.name))
        elif f.name == "source_file":
            cols.append(base_name().alias(f.name))
        else:
            cols.append(F.col(f.name))
    return cols


def collect(df: DataFrame) -> list[dict[str, Any]]:
    """Rows as dicts; timestamps (also map values) as epoch ms; source_file as base name."""
    return [r.asDict() for r in df.select(*_ms_columns(df)).collect()]


def collect_table(spark: SparkSession, warehouse: str, name: str) -> list[dict[str, Any]]:
    return collect(read(spark, warehouse, name))


def latest_revisions(aggregates: DataFrame) -> DataFrame:
    """The stream's answer per (window, key): its highest revision."""
    top = F.row_number().over(Window.partitionBy(*WINDOW_KEY).orderBy(F.col("revision").desc()))
    return aggregates.withColumn("_top", top).where(F.col("_top") == 1).drop("_top")


def identity_check(spark: SparkSession, warehouse: str, window_ms: int) -> DataFrame:
    """One row per (window, key) seen anywhere, with both sides of the accounting identity.

    first arrivals in `events` = latest stream revision + late_events rows that are first
    arrivals, for count and sum: the nightly's rule (`tally.arrivals`), so a repeat the stream
    no longer recognized (beyond its dedup horizon, `late` in both tables) is on neither side.
    Rows are matched by their input line, not deduplicated: a line written twice to either
    table still breaks the identity. Computed with joins and aggregates only (nothing
    collected).
    """
    log = read(spark, warehouse, "events")
    events = (
        with_first_arrival(log, log)
        .where(F.col(FIRST_ARRIVAL))
        .transform(lambda df: with_window(df, window_ms))
        .groupBy(*WINDOW_KEY)
        .agg(F.count(F.lit(1)).alias("ev_count"), F.sum("amount").alias("ev_sum"))
    )
    stream = latest_revisions(read(spark, warehouse, "stream_aggregates")).select(
        *WINDOW_KEY,
        F.col("event_count").alias("st_count"),
        F.col("amount_sum").alias("st_sum"),
    )
    late = (
        with_first_arrival(read(spark, warehouse, "late_events"), log)
        .where(F.col(FIRST_ARRIVAL))
        .groupBy(*WINDOW_KEY)
        .agg(F.count(F.lit(1)).alias("late_count"), F.sum("amount").alias("late_sum"))
    )
    joined = events.join(stream, list(WINDOW_KEY), "full_outer").join(
        late, list(WINDOW_KEY), "full_outer"
    )
    zero = F.lit(0).cast("long")
    return joined.select(
        *WINDOW_KEY,
        *[F.coalesce(c, zero).alias(c) for c in ("ev_count", "ev_sum", "st_count", "st_sum")],
        *[F.coalesce(c, zero).alias(c) for c in ("late_count", "late_sum")],
    ).withColumn(
        "ok",
        (F.col("ev_count") == F.col("st_count") + F.col("late_count"))
        & (F.col("ev_sum") == F.col("st_sum") + F.col("late_sum")),
    )


# --- a supervised `tally stream` process ---------------------------------------------------


def delta_version(warehouse: str | Path, table: str) -> int:
    """Newest committed version of a local Delta table (-1 if it does not exist yet)."""
    log = Path(warehouse) / table / "_delta_log"
    if not log.is_dir():
        return -1
    versions = [int(p.stem) for p in log.glob("*.json") if p.stem.isdigit()]
    return max(versions, default=-1)


def delta_versions(warehouse: str | Path) -> dict[str, int]:
    return {t.name: delta_version(warehouse, t.name) for t in T.STREAMING_TABLES}


def seconds_after_next_batch(warehouse: str | Path, delay_s: float) -> Callable[[], bool]:
    """A kill condition: true `delay_s` after the first `stream_progress` commit newer than the
    table's version now (some seconds into the batch after a completed one)."""
    base = delta_version(warehouse, "stream_progress")
    advanced: dict[str, float] = {}

    def condition() -> bool:
        if not advanced and delta_version(warehouse, "stream_progress") > base:
            advanced["at"] = time.monotonic()
        return bool(advanced) and time.monotonic() - advanced["at"] >= delay_s

    return condition


class UncommittedFiles:
    """A kill condition: a data file of one Delta table that no commit of its log names yet,
    i.e. a write under way between its files and its commit. Beside an inline housekeeper
    (between micro-batches, so no batch writes then) it is a compaction in flight. Storage
    is read through two functions (local or S3): the table's data file names relative to
    its root, and its commit files' names and texts (a commit is read once: it never
    changes)."""

    def __init__(
        self,
        data_files: Callable[[], list[str]],
        commit_names: Callable[[], list[str]],
        read_commit: Callable[[str], str],
    ) -> None:
        self._data_files, self._commit_names, self._read = data_files, commit_names, read_commit
        self._named: set[str] = set()
        self._read_commits: set[str] = set()
        self.seen: list[str] = []  # the uncommitted files when the condition held

    def _refresh(self) -> None:
        for name in self._commit_names():
            if name not in self._read_commits:
                self._read_commits.add(name)
                for line in self._read(name).splitlines():
                    action = json.loads(line)
                    for kind in ("add", "remove"):
                        if kind in action:
                            self._named.add(unquote(action[kind]["path"]))

    def __call__(self) -> bool:
        files = self._data_files()
        if all(f in self._named for f in files):
            self._refresh()
        self.seen = [f for f in files if f not in self._named]
        return bool(self.seen)


def local_uncommitted(table_dir: str | Path) -> UncommittedFiles:
    root = Path(table_dir)
    log = root / "_delta_log"

    def data_files() -> list[str]:
        return [
            str(p.relative_to(root))
            for p in root.rglob("*.parquet")
            if "_delta_log" not in p.parts and not p.name.startswith(".")
        ]

    def commit_names() -> list[str]:
        return sorted(p.name for p in log.glob("*.json")) if log.is_dir() else []

    return UncommittedFiles(data_files, commit_names, lambda n: (log / n).read_text())


def ui_port_env(port: int) -> dict[str, str]:
    """A `tally stream` process's environment entry that puts its Spark UI on `port`."""
    return {"PYSPARK_SUBMIT_ARGS": f"--conf spark.ui.port={port} pyspark-shell"}


def active_pools(port: int) -> set[str]:
    """The scheduler pools of the Spark stages running now in the application whose UI is on
    `port` (its REST API); empty while it cannot be reached."""
    import urllib.request

    base = f"http://127.0.0.1:{port}/api/v1/applications"
    try:
        with urllib.request.urlopen(base, timeout=1) as r:
            apps = json.load(r)
        with urllib.request.urlopen(f"{base}/{apps[0]['id']}/stages?status=active", timeout=1) as r:
            return {str(stage.get("schedulingPool")) for stage in json.load(r)}
    except (OSError, ValueError, IndexError, KeyError):
        return set()


def compaction_in_flight(port: int, uncommitted: UncommittedFiles) -> Callable[[], bool]:
    """A kill condition: the table holds files no commit names while the last Spark stages
    seen running were housekeeping's (its scheduler pool): a compaction between its files and
    its commit. The housekeeper runs inline, between micro-batches, so no batch writes then;
    a batch's first stages (its input) run long before it writes."""
    from streaming.housekeeping import POOL

    last_pools: set[str] = set()

    def condition() -> bool:
        pools = active_pools(port)
        if pools:
            last_pools.clear()
            last_pools.update(pools)
        return last_pools == {POOL} and uncommitted()

    return condition


def lease_records(warehouse: str | Path) -> list[LeaseRecord]:
    """The stream lease's records in a local warehouse, oldest first (streaming/lease.py)."""
    directory = Path(warehouse) / LEASE_DIR
    return [LeaseRecord.from_json(p.read_bytes()) for p in sorted(directory.glob("*.json"))]


def stream_command(input_dir: str, warehouse: str, drain: bool = False) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "tally_app.cli",
        "stream",
        "--input",
        input_dir,
        "--warehouse",
        warehouse,
        "--window",
        "60s",
        "--lateness",
        "30s",
        "--max-files-per-trigger",
        "2",
        "--available-now",
        "--clock",
        "arrival",
        "--spark-master",
        "local[2]",
        "--shuffle-partitions",
        "2",
    ]
    return [*cmd, "--drain"] if drain else cmd


class StreamProcess:
    """`tally stream` in its own process group, so a kill takes the JVM and workers with it."""

    def __init__(self, cmd: list[str], log_path: Path, env: dict[str, str] | None = None):
        env = {
            **os.environ,
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            **(env or {}),
        }
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 (closed in wait/kill)
        self.proc = subprocess.Popen(
            cmd,
            cwd=PROJECT_ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def running(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole group (python driver, JVM, python workers) at once."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._log.close()

    def wait(self, timeout: float) -> int:
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"stream did not finish in {timeout} s\n{self.tail()}") from None
        # The JVM may outlive its driver for a moment; nothing of the group may keep writing.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self._log.close()
        return rc

    def tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def kill_when(self, condition: Callable[[], bool], timeout: float, poll: float = 0.02) -> bool:
        """Poll `condition`; SIGKILL as soon as it holds. False if the process ended first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                self.kill()
                return True
            if not self.running():
                self.wait(5)
                return False
            time.sleep(poll)
        self.kill()
        raise AssertionError(f"kill condition not reached in {timeout} s\n{self.tail()}")
