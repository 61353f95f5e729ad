"""Airflow test plumbing: a throw-away AIRFLOW_HOME, the metadata DB, small generated streams.

Importing this module points Airflow at a temporary AIRFLOW_HOME whose dags_folder is the
repo's dags/ (Airflow reads its configuration once, at its first import, so the test modules
import this before anything imports airflow). Subprocesses that must not see these settings
(scripts/airflow.sh) get `clean_env()`.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time as time_module
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DAGS_DIR = REPO / "dags"
VENV_BIN = Path(sys.executable).parent
NIGHTLY = "tally_nightly_reconciliation"
# The nightly DAG's tasks, in order: every one succeeds in a run that completes.
NIGHTLY_TASKS = (
    "wait_for_stream_watermark",
    "reaggregate",
    "validate",
    "build_report",
    "sign_off",
    "approve_sign_off",
    "publish",
)
HEALTH = "tally_streaming_health"
TUNING = "tally_lateness_tuning"
RESTATEMENTS = "tally_restatements"
DAG_IDS = (NIGHTLY, HEALTH, TUNING, RESTATEMENTS)

# Airflow reads AIRFLOW_HOME and its database URL at its first import: if something imported
# it before this module, the in-process DAG runs cannot use the test database.
AIRFLOW_PREIMPORTED = "airflow" in sys.modules and "_TALLY_TEST_AIRFLOW_HOME" not in os.environ
AIRFLOW_HOME = Path(
    os.environ.get("_TALLY_TEST_AIRFLOW_HOME") or tempfile.mkdtemp(prefix="tally-airflow-")
)
if "_TALLY_TEST_AIRFLOW_HOME" not in os.environ:
    atexit.register(shutil.rmtree, AIRFLOW_HOME, True)
AIRFLOW_ENV = {
    "_TALLY_TEST_AIRFLOW_HOME": str(AIRFLOW_HOME),
    "AIRFLOW_HOME": str(AIRFLOW_HOME),
    "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_DIR),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{AIRFLOW_HOME}/airflow.db",
    "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
    "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
    # dag.test writes the DAG it parsed every time, not once per 30 s: a test that parses the
    # DAGs again under other settings runs those, however fast the machine
    "AIRFLOW__CORE__MIN_SERIALIZED_DAG_UPDATE_INTERVAL": "0",
}
os.environ.update(AIRFLOW_ENV)
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without any Airflow or tally settings, plus `extra`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AIRFLOW", "_TALLY_TEST", "TALLY_", "PYTEST_"))
    }
    env.update(extra or {})
    return env


_MIGRATION: list[subprocess.Popen[bytes]] = []


def start_migration() -> None:
    """Start `airflow db migrate` into the test AIRFLOW_HOME in the background (once)."""
    if _MIGRATION or (AIRFLOW_HOME / ".migrated").exists():
        return
    _MIGRATION.append(
        subprocess.Popen(
            [str(VENV_BIN / "airflow"), "db", "migrate"],
            env={**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
    )


def migrate_db() -> None:
    """Wait for (or run) `airflow db migrate` into the test AIRFLOW_HOME."""
    marker = AIRFLOW_HOME / ".migrated"
    if marker.exists():
        return
    start_migration()
    process = _MIGRATION[0]
    out, _ = process.communicate(timeout=300)
    if process.returncode != 0:
        raise RuntimeError(f"airflow db migrate failed:\n{out.decode(errors='replace')[-3000:]}")
    marker.touch()


def forget_active_assets() -> None:
    """Airflow keeps one active asset per name. Test modules share this AIRFLOW_HOME's
    database, each with its own warehouse: once one module's nightly run registered
    `tally_reconciliation` at its warehouse's URI, the next module's asset of that name (another
    URI) would stay inactive and its publish task fail. A module that runs the DAG starts by
    forgetting which asset was active (the next DAG sync activates its own)."""
    from airflow.models.asset import AssetActive
    from airflow.utils.session import create_session
    from sqlalchemy import delete

    with create_session() as session:
        session.execute(delete(AssetActive))


def dag_bag() -> Any:
    """The repo's DAGs parsed against the migrated test database (its active assets
    forgotten, `forget_active_assets`), none failing to import."""
    from airflow.dag_processing.dagbag import DagBag

    migrate_db()
    forget_active_assets()
    bag = DagBag(dag_folder=str(DAGS_DIR))
    assert bag.import_errors == {}
    return bag


def logical_date_for(business_date: date) -> datetime:
    """The logical date `dag.test` needs so that the nightly run covers `business_date`: the
    end of the date's data interval (00:30 the next day with the default schedule)."""
    return datetime.combine(business_date + timedelta(days=1), time(0, 30), tzinfo=UTC)


def stream_settings(warehouse: Path, input_dir: Path, **extra: str) -> dict[str, str]:
    """TALLY_* variables of a test run over a generated stream (small, local[2]).

    The generated feed is deliberately messy; these runs are about the orchestration, so a
    global-max watermark keeps the lag small and wide thresholds keep clean days clean."""
    return {
        "TALLY_WAREHOUSE": str(warehouse),
        "TALLY_INPUT": str(input_dir),
        "TALLY_SPARK_MASTER": "local[2]",
        "TALLY_SHUFFLE_PARTITIONS": "2",
        "TALLY_WINDOW": "60s",
        "TALLY_LATENESS": "30s",
        "TALLY_IDLE_TIMEOUT": "10m",
        "TALLY_MAX_FILES_PER_TRIGGER": "1000",  # the whole backlog in one micro-batch
        "TALLY_WATERMARK_POLICY": "global-max",
        "TALLY_LATE_RATE_WARN": "0.5",
        "TALLY_LATE_RATE_FAIL": "0.5",
        "TALLY_MAX_CLOCK_SKEW": "2h",
        **extra,
    }


# One generated stream per session, shared by the nightly DAG tests: three days from
# STREAM_FIRST_DAY, drained.
STREAM_FIRST_DAY = date(2026, 11, 20)
STREAM_DAYS = 3
_STREAMS: dict[str, Path] = {}


def shared_stream(spark: Any, tmp_path_factory: Any) -> Path:
    """The root of the session's generated stream (`events/`, `warehouse/`), made on first
    use. Tests only add date-partitioned outputs to it, except the gap test, which runs last."""
    if "root" not in _STREAMS:
        root = Path(tmp_path_factory.mktemp("stream"))
        make_stream(
            spark,
            root,
            STREAM_FIRST_DAY,
            days=STREAM_DAYS,
            events=1500,
            env=stream_settings(root / "warehouse", root / "events"),
        )
        _STREAMS["root"] = root
    return _STREAMS["root"]


def make_stream(
    spark: Any,
    root: Path,
    first_day: date,
    days: int,
    events: int,
    env: Mapping[str, str],
    seed: int = 3,
) -> dict[str, Any]:
    """Generate `days` days of events from `first_day` and run the speed layer over them
    (available-now, drained, arrival clock) with the settings in `env`.

    The whole backlog is one micro-batch, whose watermark lag is the newest arrival minus
    the newest event time plus the lateness: a heavy-tail arrival at the very end makes it
    large and trips the `watermark_lag` expectation (10 min). The default seed has none
    (about 30 s with both the 1-day and the 3-day streams); this is checked below."""
    from streaming.run import run_stream
    from tally.settings import load_settings
    from tally_tools.generate import generate

    manifest = generate(
        out=str(root / "events"),
        events=events,
        partitions=4,
        seed=seed,
        start=datetime.combine(first_day, time(0), tzinfo=UTC),
        duration_ms=days * 86_400_000,
        files=days,
        keys=40,
    )
    settings = load_settings(env=env)
    run_stream(settings, available_now=True, drain=True, clock="arrival", spark=spark)
    from pyspark.sql import functions as F

    from tally.tables import read_table

    row = (
        read_table(spark, settings.warehouse, "stream_progress")
        .where(~F.col("drained"))
        .agg(F.max("watermark_lag_ms").alias("lag"))
        .first()
    )
    lag = None if row is None else row["lag"]
    assert lag is not None and lag < 300_000, f"seed {seed}: final watermark lag {lag} ms"
    return manifest


# -- Airflow as a user runs it (scripts/airflow.sh in a child process) ---------------------------


@dataclass
class RunningAirflow:
    """scripts/airflow.sh running in its own process group (stopped with `stop_airflow`)."""

    base: str
    home: Path
    log: Path
    process: subprocess.Popen[bytes]

    def password(self, user: str = "admin") -> str:
        path = self.home / "simple_auth_manager_passwords.json.generated"
        return str(json.loads(path.read_text())[user])

    def tail(self, lines: int = 60) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def http(
    url: str,
    method: str = "GET",
    body: Any = None,
    token: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, Any]:
    """(status, JSON body or text) of a request; (0, error) when nothing answered."""
    data = None if body is None else json.dumps(body).encode()
    sent = {"Content-Type": "application/json", **(headers or {})}
    if token:
        sent["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=data, headers=sent, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            raw = response.read()
            try:
                return response.status, json.loads(raw) if raw else None
            except ValueError:
                return response.status, raw.decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
        return 0, str(exc)


def wait_for(
    what: str, check: Any, timeout: float, airflow: RunningAirflow, every: float = 0.5
) -> Any:
    """`check()`'s first truthy answer, polled `every` seconds (a local HTTP request is cheap
    next to the seconds a longer poll gives away after the event)."""
    import pytest

    deadline = time_module.monotonic() + timeout
    while time_module.monotonic() < deadline:
        if airflow.process.poll() is not None:
            pytest.fail(f"Airflow exited while waiting for {what}:\n{airflow.tail()}")
        result = check()
        if result:
            return result
        time_module.sleep(every)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}:\n{airflow.tail()}")


def start_airflow(
    root: Path, port: int, env: Mapping[str, str], args: Sequence[str] = ()
) -> RunningAirflow:
    """`scripts/airflow.sh ARGS` (default: standalone) on `port`, its AIRFLOW_HOME under
    `root`, in its own process group; returns once its API answers /api/v2/monitor/health."""
    log = root / "airflow.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            ["bash", str(REPO / "scripts" / "airflow.sh"), *args],
            cwd=REPO,
            env=dict(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, stopped as a whole
        )
    running = RunningAirflow(f"http://127.0.0.1:{port}", root / "home", log, process)
    try:
        wait_for(
            "the API server",
            lambda: http(f"{running.base}/api/v2/monitor/health")[0] == 200,
            timeout=240,
            airflow=running,
        )
    except BaseException:
        stop_airflow(process)
        raise
    return running


def stop_airflow(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    group = os.getpgid(process.pid)
    os.killpg(group, signal.SIGTERM)
    try:
        process.wait(timeout=45)
    except subprocess.TimeoutExpired:
        os.killpg(group, signal.SIGKILL)
        process.wait(timeout=15)
    # Components that outlive standalone (task runners) belong to the same group.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)


def token_for(airflow: RunningAirflow, user: str = "admin") -> str:
    status, body = http(
        f"{airflow.base}/auth/token",
        "POST",
        {"username": user, "password": airflow.password(user)},
    )
    assert status in (200, 201), body
    return str(body["access_token"])


def delete_one_stream_row(spark: Any, warehouse: str, day: date) -> None:
    """Delete the first stream window from noon of `day` on: an unexplained gap on that date."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    from tally.tables import read_table, table_path

    victim = (
        read_table(spark, warehouse, "stream_aggregates")
        .where(F.col("window_start") >= F.lit(f"{day.isoformat()} 12:00:00").cast("timestamp"))
        .orderBy("window_start", "key")
        .select("window_start", "key")
        .first()
    )
    assert victim is not None
    path = table_path(warehouse, "stream_aggregates")
    # a defect from outside the stream: its tables refuse deletes (delta.appendOnly)
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.appendOnly' = 'false')")
    DeltaTable.forPath(spark, path).delete(
        (F.col("window_start") == F.lit(victim["window_start"])) & (F.col("key") == victim["key"])
    )


def answer_sign_off(
    choice: str | None, reason: str = "", dag_id: str = NIGHTLY
) -> threading.Thread:
    """In the background, once the sign_off task of `dag_id` waits for input: answer it as the
    Required Actions page does (Airflow's own PATCH handler, user `reviewer`), or with
    `choice=None` let its response deadline pass (the scheduler's own timeout sweep)."""
    return answer_in_turn([Answer(choice, reason)], dag_id)


@dataclass(frozen=True)
class Answer:
    """One answer to a Required Action: the option (None: let the deadline pass), the reason,
    the task waiting and the Airflow user answering."""

    choice: str | None
    reason: str = ""
    task_id: str = "sign_off"
    user: str = "reviewer"


class AnsweredThread(threading.Thread):
    """`answer_in_turn`'s thread; `refused` holds each answer Airflow refused: (user, the
    HTTP status, its detail)."""

    refused: list[tuple[str, int, str]]


def answer_in_turn(answers: Sequence[Answer], dag_id: str = NIGHTLY) -> AnsweredThread:
    """In the background, each answer in turn: once its task waits for input with no response
    yet (a request tally asked again is answered afresh), as the Required Actions page does
    (Airflow's own PATCH handler, with its check of the assigned users). An answer Airflow
    refuses is kept in `refused` and the next is tried on the same request."""
    # Imported here, in the calling thread: an import in the answering thread while the
    # test's thread configures Airflow's models deadlocks on the import lock.
    from airflow.api_fastapi.app import create_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.api_fastapi.core_api.datamodels.hitl import UpdateHITLDetailPayload
    from airflow.api_fastapi.core_api.routes.public.hitl import update_hitl_detail
    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState
    from fastapi import HTTPException
    from sqlalchemy import select

    # the handler asks the auth manager whether the user is assigned (as the api-server)
    create_auth_manager()
    refused: list[tuple[str, int, str]] = []

    def answer(answer: Answer) -> None:
        deadline = time_module.monotonic() + 900
        while time_module.monotonic() < deadline:
            with create_session() as session:
                ti = session.scalars(
                    select(TaskInstance).where(
                        TaskInstance.dag_id == dag_id,
                        TaskInstance.task_id == answer.task_id,
                        TaskInstance.state == TaskInstanceState.AWAITING_INPUT,
                    )
                ).first()
                if ti is not None and answer.choice is not None:
                    try:
                        update_hitl_detail(
                            dag_id=dag_id,
                            dag_run_id=ti.run_id,
                            task_id=answer.task_id,
                            update_hitl_detail_payload=UpdateHITLDetailPayload(
                                chosen_options=[answer.choice],
                                params_input={"reason": answer.reason},
                            ),
                            user=SimpleAuthManagerUser(username=answer.user, role="admin"),
                            session=session,
                        )
                        return
                    except HTTPException as exc:
                        if exc.status_code != 409:  # 409: the last answer is not taken yet
                            refused.append((answer.user, exc.status_code, str(exc.detail)))
                            return
                if ti is not None and answer.choice is None:
                    runner = SchedulerJobRunner.__new__(SchedulerJobRunner)
                    runner.check_awaiting_input_timeouts(session=session)
            time_module.sleep(1)

    def run() -> None:
        for each in answers:
            answer(each)

    thread = AnsweredThread(target=run, daemon=True)
    thread.refused = refused
    thread.start()
    return thread
