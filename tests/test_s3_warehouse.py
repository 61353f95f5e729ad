"""A whole day on S3: `tally stream`, `tally maintain` and `tally reconcile` (the whole nightly
sequence, its report included) as a user runs them, with the warehouse and the stream's
checkpoint on `s3a://` (moto's S3 server, scripts/s3.sh), then the tables read back from the
bucket with Delta time travel. (`tally report` alone runs the report stage `reconcile` ran:
not a third Spark process here.)

The CLI processes get the endpoint as settings (TALLY_S3_ENDPOINT, TALLY_S3_REGION,
TALLY_S3_PATH_STYLE) and dummy credentials as AWS_* in their environment only.
The same commands on a local warehouse and on a cluster, timed side by side in one run, are
the benchmark's section 9 (`tally bench --only scaleout`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from s3_server import REGION, S3Server, s3_server
from stream_helpers import (
    InputLine,
    StreamProcess,
    UncommittedFiles,
    collect,
    compaction_in_flight,
    identity_check,
    read,
    read_input,
    stream_command,
    ui_port_env,
)

from tally import tables as T
from tally.maintenance import live_files
from tally_tools.generate import generate
from tally_tools.ports import free_port

pytestmark = pytest.mark.slow

PROJECT_ROOT = Path(__file__).resolve().parent.parent
WINDOW_MS = 60_000
DAY = "2026-11-20"
TIMEOUT_S = 900  # per command; generous for a loaded machine, a stuck run still fails


@dataclass(frozen=True)
class Command:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def describe(self) -> str:
        return f"$ tally {' '.join(self.argv)}\nexit {self.returncode}\n{self.stdout}{self.stderr}"


@dataclass
class Day:
    server: S3Server
    bucket: str
    root: Path  # the commands' working directory
    warehouse: str  # s3a://BUCKET/wh
    lines: list[InputLine]
    manifest: dict[str, Any]
    commands: dict[str, Command] = field(default_factory=dict)


def tally(day: Day, *argv: str) -> Command:
    env = {
        **day.server.env,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "TALLY_SPARK_MASTER": "local[2]",
        "TALLY_SHUFFLE_PARTITIONS": "2",
    }
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "tally_app.cli", *argv],
        cwd=day.root,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    seconds = time.monotonic() - started
    return Command(list(argv), done.returncode, done.stdout, done.stderr, seconds)


def stream_argv(day: Day, warehouse: str) -> list[str]:
    # The checkpoint is the default one, inside the warehouse: s3a:// too.
    return [
        "stream",
        "--input",
        str(day.root / "in"),
        "--warehouse",
        warehouse,
        "--window",
        "60s",
        "--lateness",
        "30s",
        "--max-files-per-trigger",
        "2",
        "--available-now",
        "--drain",
        "--clock",
        "arrival",
    ]


def reconcile_argv(warehouse: str, out: Path) -> list[str]:
    return ["reconcile", "--date", DAY, "--warehouse", warehouse, "--out", str(out)]


@pytest.fixture(scope="module")
def day(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Day]:
    root = tmp_path_factory.mktemp("s3_warehouse")
    manifest = generate(
        out=str(root / "in"),
        events=2000,
        partitions=3,
        seed=5,
        start=datetime(2026, 11, 20, tzinfo=UTC),
        duration_ms=20 * 60_000,
        files=4,
        keys=20,
        progress=False,
    )
    with s3_server(root / "s3") as server:
        bucket = f"tally-{uuid.uuid4().hex[:12]}"  # the test JVM caches a file system per bucket
        server.bucket(bucket)
        d = Day(
            server,
            bucket,
            root,
            f"s3a://{bucket}/wh",
            read_input(root / "in"),
            manifest,
        )
        d.commands["stream"] = tally(d, *stream_argv(d, d.warehouse))
        d.commands["maintain"] = tally(d, "maintain", "--warehouse", d.warehouse)
        d.commands["reconcile"] = tally(d, *reconcile_argv(d.warehouse, root / "reports"))
        yield d


@pytest.fixture(scope="module")
def s3_spark(spark: SparkSession, day: Day) -> Iterator[SparkSession]:
    """The test session, able to read the bucket. Its JVM was started (tests/conftest.py)
    without AWS_* in its environment and without an endpoint, and other tests share it, so it
    is told at run time and for this bucket only: Hadoop's per-bucket keys
    `fs.s3a.bucket.<bucket>.*` override the global `fs.s3a.*` for that bucket alone, and set as
    session conf they reach every Hadoop configuration the session builds for a read
    (SessionState.newHadoopConf copies the session conf into it). The access and secret keys
    are read by SimpleAWSCredentialsProvider, part of S3A's default provider chain. Afterwards
    the keys are unset and the bucket's cached file system closed (Hadoop caches one per
    bucket, keyed by URI, not by configuration: hence a fresh bucket name per run)."""
    prefix = f"fs.s3a.bucket.{day.bucket}."
    conf = {
        "endpoint": day.server.endpoint,
        "endpoint.region": REGION,
        "path.style.access": "true",
        "connection.ssl.enabled": "false",
        "access.key": day.server.env["AWS_ACCESS_KEY_ID"],
        "secret.key": day.server.env["AWS_SECRET_ACCESS_KEY"],
    }
    for key, value in conf.items():
        spark.conf.set(prefix + key, value)
    try:
        yield spark
    finally:
        jvm = spark._jvm
        assert jvm is not None
        hadoop_conf = spark._jsparkSession.sessionState().newHadoopConf()
        jvm.org.apache.hadoop.fs.Path(f"s3a://{day.bucket}/").getFileSystem(hadoop_conf).close()
        for key in conf:
            spark.conf.unset(prefix + key)


# -- the commands ------------------------------------------------------------------------------
def test_the_day_runs_on_s3(day: Day) -> None:
    for name, command in day.commands.items():  # shown with -rP
        print(f"{name}: {command.seconds:.1f} s, exit {command.returncode}")
    stream = day.commands["stream"]
    assert stream.returncode == 0, stream.describe()
    assert "(drained)" in stream.stdout and day.warehouse in stream.stdout
    reconcile = day.commands["reconcile"]
    # The generator plants data-quality faults (a clock 30 min ahead; the drained backlog's
    # watermark lag) that the suites catch (exit 1); the books must balance all the same.
    assert reconcile.returncode in (0, 1), reconcile.describe()
    assert "unexplained 0 windows" in reconcile.stdout and "BALANCED" in reconcile.stdout
    if reconcile.returncode == 1:  # the one line names a failed expectation, not the books
        assert "tally: validate:" in reconcile.stderr, reconcile.describe()
    assert (day.root / "reports" / f"report-{DAY}.html").is_file()


def test_tables_and_checkpoint_are_in_the_bucket_and_nothing_on_local_disk(day: Day) -> None:
    listed = day.server.client().get_paginator("list_objects_v2")
    keys = {
        obj["Key"]
        for page in listed.paginate(Bucket=day.bucket, Prefix="wh/")
        for obj in page.get("Contents", [])
    }
    first_commit = "_delta_log/00000000000000000000.json"
    # reconciliation_copies and reconciliation_evidence are created by the first run that finds
    # a copy (test_counted_copies) or an UNEXPLAINED window (test_accounting)
    written = (*T.STREAMING_TABLES, *T.RECONCILE_TABLES, T.VALIDATION_RESULTS)
    lazy = (T.RECONCILIATION_COPIES, T.RECONCILIATION_EVIDENCE)
    for table in (t for t in written if t not in lazy):
        assert f"wh/{table.name}/{first_commit}" in keys, table.name
    checkpoint = "wh/_checkpoints/stream"
    assert f"{checkpoint}/commits/0" in keys  # Spark's own checkpoint
    assert any(k.startswith(f"{checkpoint}/tally/state/") for k in keys)  # the stream's state
    # the stream held the warehouse's lease in the bucket (a conditional PUT) and released it
    lease = json.loads(
        day.server.client()
        .get_object(Bucket=day.bucket, Key="wh/_lease/stream/000000000000.json")["Body"]
        .read()
    )
    assert (
        lease["released"] and lease["holder"]["checkpoint"] == f"{day.warehouse}/{checkpoint[3:]}"
    )
    # A local-path slip would have made `s3a:/BUCKET/wh` a directory where the command ran.
    assert not (day.root / "s3a:").exists() and not (PROJECT_ROOT / "s3a:").exists()
    stray = [
        p
        for p in day.root.rglob("*")
        if p.name in ("_delta_log", "_checkpoints", "_lease", day.bucket)
    ]
    assert stray == []


# -- the tables, read back ---------------------------------------------------------------------
def test_events_hold_every_valid_line_and_quarantine_the_rest(
    s3_spark: SparkSession, day: Day
) -> None:
    valid = sum(1 for line in day.lines if line.obj is not None)
    assert valid == day.manifest["valid_events"] + day.manifest["duplicates"]
    events = read(s3_spark, day.warehouse, "events")
    assert events.count() == valid
    assert events.select("source_file", "source_line").distinct().count() == valid
    assert read(s3_spark, day.warehouse, "quarantine").count() == day.manifest["malformed_lines"]


def test_time_travel_on_s3(s3_spark: SparkSession, day: Day) -> None:
    from delta.tables import DeltaTable

    latest = T.latest_version(s3_spark, day.warehouse, "events")
    history = DeltaTable.forPath(s3_spark, T.table_path(day.warehouse, "events")).history()
    assert sorted(r["version"] for r in history.select("version").collect()) == list(
        range(latest + 1)
    )
    assert latest >= 2  # created empty, then one commit per micro-batch with events
    assert T.read_table(s3_spark, day.warehouse, "events", version=0).count() == 0
    # Version 1 is micro-batch 0's append: exactly the rows the latest version says batch 0 wrote.
    at_v1 = T.read_table(s3_spark, day.warehouse, "events", version=1)
    now = T.read_table(s3_spark, day.warehouse, "events")
    first_batch = now.where(F.col("batch_id") == 0).count()
    assert 0 < first_batch < now.count()
    assert at_v1.count() == first_batch
    assert at_v1.where(F.col("batch_id") != 0).count() == 0
    # The nightly pinned the version it read, on S3 too.
    runs = read(s3_spark, day.warehouse, "reconciliation_runs").collect()
    assert [(str(r["business_date"]), r["events_version"], r["balanced"]) for r in runs] == [
        (DAY, latest, True)
    ]


def test_accounting_identity_holds_on_s3(s3_spark: SparkSession, day: Day) -> None:
    rows = collect(identity_check(s3_spark, day.warehouse, WINDOW_MS))
    assert rows and [r for r in rows if not r["ok"]] == []
    assert any(r["late_count"] > 0 for r in rows)  # the identity is not all on-time


def test_no_unexplained_window(s3_spark: SparkSession, day: Day) -> None:
    statuses = {
        r["status"]: r["n"]
        for r in read(s3_spark, day.warehouse, "reconciliation")
        .where(F.col("business_date") == F.lit(DAY).cast("date"))
        .groupBy("status")
        .agg(F.count(F.lit(1)).alias("n"))
        .collect()
    }
    assert statuses.get("UNEXPLAINED", 0) == 0 and statuses.get("MATCH", 0) > 0
    [summary] = read(s3_spark, day.warehouse, "reconciliation_summary").collect()
    assert summary["unexplained_windows"] == 0 and summary["unexplained_amount"] == 0
    assert summary["batch_count"] == day.manifest["valid_events"]
    assert summary["gap_count"] == summary["explained_count"] > 0
    suites = read(s3_spark, day.warehouse, "validation_results").select("suite").distinct()
    assert suites.count() > 0


def test_the_stream_and_maintain_keep_the_tables_small_on_s3(
    s3_spark: SparkSession, day: Day
) -> None:
    """The stream's housekeeping ran in the bucket (the drained run packed its closed date and
    compacted its small tables before it exited), and `tally maintain` took the lease there
    and found the same tables with nothing left to do but a VACUUM."""
    from tally.maintenance import live_files

    maintain = day.commands["maintain"]
    assert maintain.returncode == 0, maintain.describe()
    log = [r.asDict() for r in read(s3_spark, day.warehouse, "maintenance_log").collect()]
    assert [r for r in log if r["outcome"] != "done"] == [], log
    by_run = {(r["run_by"], r["action"]) for r in log}
    assert ("stream", "compact_closed") in by_run and ("maintain", "vacuum") in by_run, by_run
    per_date = live_files(s3_spark, f"{day.warehouse}/events", "event_date")
    assert per_date and all(stats.files == 1 for stats in per_date.values()), per_date


def s3_uncommitted(day: Day, table_prefix: str) -> UncommittedFiles:
    """`UncommittedFiles` of the Delta table under `table_prefix` in the day's bucket."""
    client = day.server.client()
    root, log = f"{table_prefix}/", f"{table_prefix}/_delta_log/"

    def keys() -> list[str]:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=day.bucket, Prefix=root)
        return [obj["Key"] for page in pages for obj in page.get("Contents", [])]

    def data_files() -> list[str]:
        return [
            k.removeprefix(root) for k in keys() if k.endswith(".parquet") and not k.startswith(log)
        ]

    def commit_names() -> list[str]:
        return sorted(
            k.removeprefix(log)
            for k in keys()
            if k.startswith(log) and k.endswith(".json") and "/" not in k.removeprefix(log)
        )

    def read_commit(name: str) -> str:
        body = client.get_object(Bucket=day.bucket, Key=log + name)["Body"].read()
        return body.decode()

    return UncommittedFiles(data_files, commit_names, read_commit)


def test_sigkill_during_a_compaction_on_s3_loses_nothing(
    s3_spark: SparkSession, day: Day, tmp_path: Path
) -> None:
    """The stream's housekeeping (inline) killed while a compaction of `events` in the bucket
    has written its files and not committed them; the restart finishes the stream and its
    housekeeping in the bucket, every valid line is in `events` exactly once, and the killed
    compaction's files stay out of the table (VACUUM deletes them once older than the
    retention). The suite's only SIGKILL of a compaction: on a local warehouse it is the same
    code between the same commits (it was a second test there, two minutes of the suite)."""
    input_dir = tmp_path / "in"
    generate(
        out=str(input_dir),
        events=1500,
        partitions=2,
        seed=23,
        start=datetime(2026, 11, 20, tzinfo=UTC),
        duration_ms=2 * 86_400_000,
        files=10,
        keys=10,
        progress=False,
    )
    warehouse = f"s3a://{day.bucket}/kill"
    port = free_port()
    env = {
        **day.server.env,
        "TALLY_COMPACT_INTERVAL": "1h",
        "TALLY_COMPACT_MIN_FILES": "2",
        "TALLY_MAINTENANCE_MODE": "inline",
        "TALLY_LEASE_TTL": "1h",
        **ui_port_env(port),
    }
    command = stream_command(str(input_dir), warehouse)
    command[command.index("--max-files-per-trigger") + 1] = "1"
    run1 = StreamProcess(command, tmp_path / "run1.log", env=env)
    uncommitted = s3_uncommitted(day, "kill/events")
    assert run1.kill_when(compaction_in_flight(port, uncommitted), TIMEOUT_S), run1.tail()
    orphans = list(uncommitted.seen)
    assert orphans  # the compaction's files were in the bucket, uncommitted
    run2 = StreamProcess([*command, "--drain"], tmp_path / "run2.log", env=env)
    assert run2.wait(TIMEOUT_S) == 0, run2.tail()

    events = read(s3_spark, warehouse, "events").select("source_file", "source_line")
    got = Counter((Path(r["source_file"]).name, r["source_line"]) for r in events.collect())
    assert got == Counter((line.file, line.number) for line in read_input(input_dir) if line.obj)
    log = [r.asDict() for r in read(s3_spark, warehouse, "maintenance_log").collect()]
    assert [r for r in log if r["outcome"] != "done"] == [], log
    assert any(r["table_name"] == "events" and r["action"].startswith("compact") for r in log)
    after = s3_uncommitted(day, "kill/events")
    after()
    assert set(orphans) <= set(after.seen), "the killed compaction's files were never committed"
    layout = live_files(s3_spark, T.table_path(warehouse, "events"), "event_date")
    assert all(stats.files <= 4 for stats in layout.values()), layout  # compacted after all
