"""The reconciliation desk's test world, shared by tests/test_desk_api.py and
tests/test_desk_browser.py: ONE warehouse written by a real stream and the real nightly stages,
and ONE `make airflow` over it (scripts/airflow.sh standalone: api-server, scheduler,
dag-processor, triggerer; auth on). Both are built on first use (the session fixtures
`desk_env` and `desk_airflow` in conftest.py) and the Airflow is stopped by pid after the last
test that uses it.

The warehouse: four generated days, streamed (drained).
- D1 reconciled, validated, reported and published (`tally_app.nightly.run_nightly`); nobody
  signs it off.
- D2 reconciled the same way after one of its stream rows was deleted (an unexplained gap), with
  one alert and two decisions by `ana`: the API test's date.
- D3 with one stream row deleted, not reconciled: the browser test's date, which it runs through
  the nightly DAG in the scheduler and signs off in the UI.
- D4 never reconciled (not yet run).
Each test changes only its own date, so neither depends on running first. Catch-up starts today
(the tests trigger the runs they want): a run triggered for an older logical date, like the API
test's, gets no task instances (Airflow creates none before a task's start date), so it never
writes to the warehouse. Users: `admin` (admin), `reviewer` (viewer: may read the nightly DAG's
runs), `outsider` (no role: may read nothing) and `approver` (user: the second person of a
material gap's sign-off, `TALLY_SIGNOFF_APPROVERS`).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any

import airflow_helpers as H  # first: keeps this process's Airflow settings out of the child

from tally_tools.ports import free_port

D1 = date(2026, 10, 5)
D2, D3, D4 = (D1 + timedelta(days=n) for n in (1, 2, 3))
USERS = "admin:admin,reviewer:viewer,outsider:,approver:user"
SIGNOFF_RUN_TIME = datetime.combine(D2 + timedelta(days=1), time(0, 30), tzinfo=UTC)

# The desk's running Airflow (at most one), stopped after its last test (conftest.py).
_RUNNING: list[H.RunningAirflow] = []


def airflow_home(
    tmp_path_factory: Any,
) -> Iterator[tuple[Path, dict[str, str], subprocess.Popen[bytes]]]:
    """A fresh AIRFLOW_HOME and the Airflow environment; `airflow db migrate` runs in the
    background while the warehouse is written (`start_airflow` waits for it)."""
    root = Path(tmp_path_factory.mktemp("desk-airflow"))
    env = H.clean_env(
        {
            "TALLY_AIRFLOW_HOME": str(root / "home"),
            "AIRFLOW_PORT": str(free_port()),
            "AIRFLOW_WORKER_LOG_PORT": str(free_port()),
            "AIRFLOW_TRIGGER_LOG_PORT": str(free_port()),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": USERS,
            # Catch-up starts today: the tests trigger the runs they want.
            "TALLY_NIGHTLY_START": datetime.now(UTC).date().isoformat(),
            "TALLY_RETRIES": "0",
            "TALLY_SENSOR_POKE": "10s",
            "TALLY_SENSOR_TIMEOUT": "5m",
            # four eyes on a material gap: admin prepares, approver approves (admin may
            # approve too, but not what admin prepared: refused and recorded)
            "TALLY_SIGNOFF_APPROVERS": "approver,admin",
        }
    )
    migrate = subprocess.Popen(
        ["bash", str(H.REPO / "scripts" / "airflow.sh"), "db", "migrate"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        yield root, env, migrate
    finally:
        H.stop_airflow(migrate)


def build_warehouse(spark: Any, tmp_path_factory: Any) -> dict[str, str]:
    """The warehouse described above; the TALLY_* settings that read it."""
    from tally.alert import Alert
    from tally.settings import load_settings
    from tally_app.alerts import record_alerts
    from tally_app.nightly import run_nightly
    from tally_app.signoffs import SignOff, record_signoff

    root = Path(tmp_path_factory.mktemp("desk"))
    env = H.stream_settings(
        root / "warehouse",
        root / "events",
        TALLY_REPORT_DIR=str(root / "reports"),
        TALLY_GX_ROOT=str(root / "gx-root"),
    )
    H.make_stream(spark, root, D1, days=4, events=1200, env=env)
    settings = load_settings(env=env)
    for day in (D1, D2):
        if day == D2:
            H.delete_one_stream_row(spark, settings.warehouse, day)
        now = datetime.combine(day + timedelta(days=1), time(0, 30), tzinfo=UTC)
        run_nightly(settings, day, now, spark, Path(settings.report_location))
    record_alerts(
        spark,
        settings.warehouse,
        [Alert("data quality: <unexplained> gap", "1 window", "0", business_date=D2)],
    )
    for decision, minute in (("rejected", 0), ("accepted", 5)):
        record_signoff(
            spark,
            settings.warehouse,
            SignOff(
                business_date=D2,
                decision=decision,
                decided_by="ana",
                decided_at=datetime(2026, 10, 7, 9, minute, tzinfo=UTC),
                reason=f"{decision}: ticket 123",
                status="unexplained",
                run_time=SIGNOFF_RUN_TIME,
                dag_id=H.NIGHTLY,
                run_id="manual__x",
            ),
        )
    H.delete_one_stream_row(spark, settings.warehouse, D3)
    return env


def start_airflow(
    home: tuple[Path, dict[str, str], subprocess.Popen[bytes]], desk_env: dict[str, str]
) -> Iterator[H.RunningAirflow]:
    """`make airflow` over the desk's warehouse, once its nightly DAG is parsed."""
    root, env, migrate = home
    out, _ = migrate.communicate(timeout=600)
    assert migrate.returncode == 0, out.decode(errors="replace")[-3000:]
    running = H.start_airflow(root, int(env["AIRFLOW_PORT"]), {**env, **desk_env})
    _RUNNING.append(running)
    try:
        token = H.token_for(running)
        H.wait_for(
            "the nightly DAG to be parsed",
            lambda: H.http(f"{running.base}/api/v2/dags/{H.NIGHTLY}", token=token)[0] == 200,
            timeout=180,
            airflow=running,
        )
        yield running
    finally:
        stop_airflow()


def stop_airflow() -> None:
    """Stop the desk's Airflow (its process group) if it runs; safe to call twice."""
    for running in _RUNNING:
        H.stop_airflow(running.process)
