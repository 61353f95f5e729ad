"""Airflow as a user runs it: `scripts/airflow.sh` in the background on a free port, a login
through the real UI in headless Chromium, the nightly DAG triggered (REST API, token from
POST /auth/token) for a generated day, run by the scheduler to success, and a screenshot of
the run's grid view in artifacts/airflow_grid.png. Airflow is stopped at the end.

Chromium is Debian's /usr/bin/chromium driven by Playwright (no browser download); if it is
missing, scripts/install-browser.sh installs it.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import airflow_helpers as H  # first: keeps this process's Airflow settings out of the child
import pytest
from browser import ARTIFACTS, CHROMIUM_ARGS, chromium_path

from tally_tools.ports import free_port

pytestmark = pytest.mark.slow

BUSINESS_DATE = H.STREAM_FIRST_DAY
ARTIFACT = ARTIFACTS / "airflow_grid.png"


Airflow = H.RunningAirflow
_request = H.http
_wait = H.wait_for


@pytest.fixture(scope="module")
def chromium() -> str:
    return chromium_path()


@pytest.fixture(scope="module")
def warehouse(spark, tmp_path_factory) -> Path:
    """The session's generated stream (three days, drained: the watermark passed them)."""
    return H.shared_stream(spark, tmp_path_factory) / "warehouse"


@pytest.fixture(scope="module")
def airflow(warehouse: Path, tmp_path_factory) -> Iterator[Airflow]:
    root = tmp_path_factory.mktemp("airflow-ui")
    port = free_port()
    # Catch-up starts today: no interval is complete yet, so unpausing creates no run; the
    # test triggers the one it wants (tasks only run for logical dates >= the start date).
    today = datetime.now(UTC).date()
    env = H.clean_env(
        {
            "TALLY_AIRFLOW_HOME": str(root / "home"),
            "AIRFLOW_PORT": str(port),
            "AIRFLOW_WORKER_LOG_PORT": str(free_port()),
            "AIRFLOW_TRIGGER_LOG_PORT": str(free_port()),
            **H.stream_settings(warehouse, warehouse.parent / "events"),
            "TALLY_NIGHTLY_START": today.isoformat(),
            "TALLY_RETRY_DELAY": "10s",
            "TALLY_SENSOR_POKE": "10s",
            "TALLY_SENSOR_TIMEOUT": "5m",
        }
    )
    running = H.start_airflow(root, port, env)
    try:
        yield running
    finally:
        H.stop_airflow(running.process)


def _token(airflow: Airflow) -> str:
    return H.token_for(airflow)


def test_login_trigger_nightly_and_screenshot_grid(airflow: Airflow, chromium: str) -> None:
    from playwright.sync_api import sync_playwright

    # Auth is on: the API refuses anonymous requests, the UI sends us to the login page.
    assert _request(f"{airflow.base}/api/v2/dags")[0] == 401
    token = _token(airflow)
    api = f"{airflow.base}/api/v2"
    dag_url = f"{api}/dags/{H.NIGHTLY}"
    _wait(
        "the nightly DAG to be parsed",
        lambda: _request(dag_url, token=token)[0] == 200,
        timeout=180,
        airflow=airflow,
    )

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 900})
            page.set_default_timeout(60_000)
            page.goto(f"{airflow.base}/")
            page.wait_for_url("**/auth/login**")
            page.locator("input[name=username]").fill("admin")
            page.locator("input[name=password]").fill(airflow.password())
            page.locator("button[type=submit]").click()
            page.wait_for_url(f"{airflow.base}/")
            page.goto(f"{airflow.base}/dags/{H.NIGHTLY}")
            page.get_by_text("wait_for_stream_watermark").first.wait_for()

            # Trigger a run now that reprocesses the generated day: its data interval is the
            # day's (the business date is the interval's start date).
            start = H.logical_date_for(BUSINESS_DATE) - timedelta(days=1)
            logical = datetime.now(UTC) - timedelta(minutes=1)
            run_id = f"ui_test__{BUSINESS_DATE.isoformat()}"
            status, body = _request(dag_url, "PATCH", {"is_paused": False}, token)
            assert status == 200, body
            status, body = _request(
                f"{dag_url}/dagRuns",
                "POST",
                {
                    "dag_run_id": run_id,
                    "logical_date": logical.isoformat(),
                    "data_interval_start": start.isoformat(),
                    "data_interval_end": (start + timedelta(days=1)).isoformat(),
                    "note": "triggered by tests/test_airflow_ui.py",
                },
                token,
            )
            assert status == 200, body
            run_url = f"{dag_url}/dagRuns/{run_id}"

            def finished() -> str | None:
                code, run = _request(run_url, token=token)
                state = run.get("state") if code == 200 and isinstance(run, dict) else None
                return state if state in ("success", "failed") else None

            state = _wait("the nightly run to finish", finished, 900, airflow, every=1)
            _, tis = _request(f"{run_url}/taskInstances", token=token)
            states = {t["task_id"]: t["state"] for t in tis["task_instances"]}
            assert state == "success", f"run {state}: {states}\n{airflow.tail()}"
            assert states == dict.fromkeys(
                [
                    "wait_for_stream_watermark",
                    "reaggregate",
                    "validate",
                    "build_report",
                    "sign_off",
                    "publish",
                ],
                "success",
            )

            # The run's grid view, as a user would look at it.
            page.goto(f"{airflow.base}/dags/{H.NIGHTLY}/runs/{run_id}")
            page.get_by_text("build_report").first.wait_for()
            page.get_by_text("success", exact=False).first.wait_for()
            page.wait_for_load_state("networkidle")
            ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACT), full_page=True)
        finally:
            browser.close()
    assert ARTIFACT.stat().st_size > 10_000

    # The published table is the DAG's asset; its event was recorded.
    status, events = _request(f"{api}/assets/events?limit=10", token=token)
    assert status == 200, events
    assert any(e["source_run_id"] == run_id for e in events["asset_events"])
