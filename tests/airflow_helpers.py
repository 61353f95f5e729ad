"""Airflow test plumbing: a throw-away AIRFLOW_HOME, the metadata DB, small generated streams.

Importing this module points Airflow at a temporary AIRFLOW_HOME whose dags_folder is the
repo's dags/ (Airflow reads its configuration once, at its first import, so the test modules
import this before anything imports airflow). Subprocesses that must not see these settings
(scripts/airflow.sh) get `clean_env()`.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DAGS_DIR = REPO / "dags"
VENV_BIN = Path(sys.executable).parent
NIGHTLY = "tally_nightly_reconciliation"
HEALTH = "tally_streaming_health"
TUNING = "tally_lateness_tuning"
DAG_IDS = (NIGHTLY, HEALTH, TUNING)

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


def migrate_db() -> None:
    """`airflow db migrate` into the test AIRFLOW_HOME (once per session)."""
    marker = AIRFLOW_HOME / ".migrated"
    if marker.exists():
        return
    subprocess.run(
        [str(VENV_BIN / "airflow"), "db", "migrate"],
        env={**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"},
        check=True,
        capture_output=True,
        timeout=300,
    )
    marker.touch()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def logical_date_for(business_date: date) -> datetime:
    """The logical date `dag.test` needs so that the nightly run covers `business_date`: the
    end of the date's data interval (00:30 the next day with the default schedule)."""
    return datetime.combine(business_date + timedelta(days=1), time(0, 30), tzinfo=UTC)


def stream_settings(warehouse: Path, input_dir: Path, **extra: str) -> dict[str, str]:
    """TALLY_* variables of a test run over a generated stream (small, local[2])."""
    return {
        "TALLY_WAREHOUSE": str(warehouse),
        "TALLY_INPUT": str(input_dir),
        "TALLY_SPARK_MASTER": "local[2]",
        "TALLY_SHUFFLE_PARTITIONS": "2",
        "TALLY_WINDOW": "60s",
        "TALLY_LATENESS": "30s",
        "TALLY_IDLE_TIMEOUT": "10m",
        "TALLY_MAX_FILES_PER_TRIGGER": "1000",  # the whole backlog in one micro-batch
        **extra,
    }


def make_stream(
    spark: Any,
    root: Path,
    first_day: date,
    days: int,
    events: int,
    env: Mapping[str, str],
    seed: int = 11,
) -> dict[str, Any]:
    """Generate `days` days of events from `first_day` and run the speed layer over them
    (available-now, drained, arrival clock) with the settings in `env`."""
    from streaming.job import run_stream
    from tally.generate import generate
    from tally.settings import load_settings

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
    return manifest
