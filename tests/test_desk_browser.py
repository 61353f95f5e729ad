"""The reconciliation desk as a reviewer uses it, in headless Chromium against `make airflow`
(scripts/airflow.sh standalone: api-server, scheduler, dag-processor, triggerer; auth on).

A warehouse from a real stream (three generated days; the first two are reviewed), the
second day with an unexplained gap (one stream row deleted). The first date is reconciled by
the nightly stages directly (`run_nightly`: the same stages, no Airflow run, to keep the test
short on a busy machine); the nightly DAG is triggered for the second and runs in the
scheduler until its sign-off waits in Required Actions. In the browser: log in, open
Reconciliation, see both dates, open the unexplained date's page and its report (the charts
load under the content security policy), accept the Required Action with a reason, and see the
sign-off in the ledger and in the re-rendered report. Screenshots: artifacts/desk_*.png.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any

import airflow_helpers as H  # first: keeps this process's Airflow settings out of the child
import pytest
from browser import ARTIFACTS, CHROMIUM_ARGS, chromium_path
from test_desk_api import delete_one_stream_row

from tally_tools.ports import free_port

pytestmark = pytest.mark.slow

D1 = date(2026, 10, 5)  # the same generated feed as test_desk_api's: its first date balances
D2 = D1 + timedelta(days=1)
REASON = "known upstream outage, ticket 123"


@pytest.fixture(scope="module")
def desk_env(spark, tmp_path_factory) -> dict[str, str]:
    from tally.settings import load_settings
    from tally_app.nightly import run_nightly

    root = Path(tmp_path_factory.mktemp("desk-browser"))
    env = H.stream_settings(
        root / "warehouse",
        root / "events",
        TALLY_REPORT_DIR=str(root / "reports"),
        TALLY_GX_ROOT=str(root / "gx-root"),
    )
    H.make_stream(spark, root, D1, days=3, events=900, env=env)
    settings = load_settings(env=env)
    now = datetime.combine(D2, time(0, 30), tzinfo=UTC)
    run_nightly(settings, D1, now, spark, Path(settings.report_location))
    delete_one_stream_row(spark, env["TALLY_WAREHOUSE"], D2)
    return env


@pytest.fixture(scope="module")
def airflow(desk_env: dict[str, str], tmp_path_factory) -> Iterator[H.RunningAirflow]:
    root = Path(tmp_path_factory.mktemp("desk-browser-airflow"))
    port = free_port()
    env = H.clean_env(
        {
            **desk_env,
            "TALLY_AIRFLOW_HOME": str(root / "home"),
            "AIRFLOW_PORT": str(port),
            "AIRFLOW_WORKER_LOG_PORT": str(free_port()),
            "AIRFLOW_TRIGGER_LOG_PORT": str(free_port()),
            # Catch-up starts today: the test triggers the runs it wants.
            "TALLY_NIGHTLY_START": datetime.now(UTC).date().isoformat(),
            "TALLY_RETRIES": "0",
            "TALLY_SENSOR_POKE": "10s",
            "TALLY_SENSOR_TIMEOUT": "5m",
        }
    )
    running = H.start_airflow(root, port, env)
    try:
        yield running
    finally:
        H.stop_airflow(running.process)


def trigger(airflow: H.RunningAirflow, token: str, day: date) -> str:
    api = f"{airflow.base}/api/v2/dags/{H.NIGHTLY}"
    start = datetime.combine(day, time(0), tzinfo=UTC)
    run_id = f"desk_{day.isoformat()}"
    status, body = H.http(
        f"{api}/dagRuns",
        "POST",
        {
            "dag_run_id": run_id,
            "logical_date": (datetime.now(UTC) - timedelta(minutes=1)).isoformat(),
            "data_interval_start": start.isoformat(),
            "data_interval_end": (start + timedelta(days=1)).isoformat(),
        },
        token,
    )
    assert status == 200, body
    return run_id


def states(airflow: H.RunningAirflow, token: str, run_id: str) -> tuple[str, dict[str, str]]:
    url = f"{airflow.base}/api/v2/dags/{H.NIGHTLY}/dagRuns/{run_id}"
    _, run = H.http(url, token=token)
    _, tis = H.http(f"{url}/taskInstances", token=token)
    tasks = {t["task_id"]: t["state"] for t in (tis or {}).get("task_instances", [])}
    return (run or {}).get("state", "?") if isinstance(run, dict) else "?", tasks


def shot(page: Any, name: str) -> Path:
    path = ARTIFACTS / f"desk_{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 5_000
    return path


def test_review_and_sign_off_in_the_browser(airflow: H.RunningAirflow) -> None:
    from playwright.sync_api import sync_playwright

    token = H.token_for(airflow)
    dag_url = f"{airflow.base}/api/v2/dags/{H.NIGHTLY}"
    H.wait_for(
        "the nightly DAG to be parsed",
        lambda: H.http(dag_url, token=token)[0] == 200,
        timeout=180,
        airflow=airflow,
    )
    status, body = H.http(dag_url, "PATCH", {"is_paused": False}, token)
    assert status == 200, body
    second = trigger(airflow, token, D2)

    def waiting() -> bool:
        state, tasks = states(airflow, token, second)
        assert state != "failed", tasks
        return tasks.get("sign_off") == "awaiting_input"

    H.wait_for("the run's sign-off to wait for a person", waiting, 2400, airflow, every=5)

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=chromium_path(), args=CHROMIUM_ARGS, headless=True
        )
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.set_default_timeout(60_000)
            violations: list[str] = []
            page.on(
                "console",
                lambda m: (
                    violations.append(m.text) if "Content Security Policy" in m.text else None
                ),
            )
            page.goto(f"{airflow.base}/")
            page.wait_for_url("**/auth/login**")
            page.locator("input[name=username]").fill("admin")
            page.locator("input[name=password]").fill(airflow.password())
            page.locator("button[type=submit]").click()
            page.wait_for_url(f"{airflow.base}/")

            # Reconciliation in the navigation: the ledger, in an iframe.
            page.locator("a[href$='plugin/reconciliation']").first.click()
            page.wait_for_url("**/plugin/reconciliation")
            ledger = page.frame_locator("iframe[title=Reconciliation]")
            row2 = ledger.locator(f'tr[data-date="{D2}"]')
            row2.wait_for()
            assert "unexplained" in row2.inner_text()
            assert "pending" in row2.inner_text()
            row1 = ledger.locator(f'tr[data-date="{D1}"]')
            assert "unexplained" not in row1.inner_text()
            text = row1.inner_text()
            assert any(s in text for s in ("balanced", "explained by late events")), text
            shot(page, "ledger")

            # The unexplained date's page and its report.
            row2.get_by_role("link", name=D2.isoformat()).click()
            ledger.locator("#provenance").wait_for()
            assert "unexplained" in ledger.locator("#status").inner_text()
            assert ledger.locator("a.required-action").count() == 1
            shot(page, "date")
            ledger.locator("#report-link").click()
            ledger.locator("#business-date").wait_for()
            images = ledger.locator("img")
            assert images.count() >= 3
            loaded = images.evaluate_all("els => els.map(e => e.complete && e.naturalWidth > 0)")
            assert all(loaded), loaded
            assert "pending" in ledger.locator("#signoff").inner_text()
            shot(page, "report")

            # Required Actions: accept with a reason.
            page.goto(
                f"{airflow.base}/dags/{H.NIGHTLY}/runs/{second}/tasks/sign_off/required_actions"
            )
            page.get_by_text("Sign off").first.wait_for()
            page.locator("#element_reason").fill(REASON)
            shot(page, "required_action")
            page.get_by_role("button", name="Accept").click()

            def second_done() -> Any:
                state, _ = states(airflow, token, second)
                return state if state in ("success", "failed") else None

            assert H.wait_for("the second run", second_done, 1200, airflow, every=5) == "success"

            page.goto(f"{airflow.base}/plugin/reconciliation")
            row2 = page.frame_locator("iframe[title=Reconciliation]").locator(
                f'tr[data-date="{D2}"]'
            )
            row2.wait_for()
            assert "accepted by admin" in row2.inner_text() and REASON in row2.inner_text()
            shot(page, "ledger_signed")
            page.goto(f"{airflow.base}/tally/files/report-{D2}.html")
            text = page.locator("#signoff").inner_text()
            assert "accepted" in text and "admin" in text and REASON in text
            shot(page, "report_signed")
            assert violations == []
        finally:
            browser.close()
