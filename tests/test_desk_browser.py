"""The reconciliation desk as a reviewer uses it, in headless Chromium against `make airflow`
(scripts/airflow.sh standalone: api-server, scheduler, dag-processor, triggerer; auth on).

The session's desk warehouse and Airflow, shared with test_desk_api (tests/desk_fixtures.py
describes both): a real stream over four generated days. The first date was reconciled by the
nightly stages directly (`run_nightly`: the same stages, no Airflow run, to keep the test short
on a busy machine); this test's date is the third, with an unexplained gap (one stream row
deleted): the nightly DAG is triggered for it and runs in the scheduler until its sign-off waits
in Required Actions. In the browser: log in, open Reconciliation, see both dates, open the
unexplained date's page and its report (the charts load under the content security policy),
accept the Required Action with a reason, and see the sign-off in the ledger and in the
re-rendered report; every task of the run succeeded, the run's grid view is screenshotted
(artifacts/airflow_grid.png) and the published table's asset event is recorded. Screenshots:
artifacts/desk_*.png. The API test's dates (D2 with `ana`'s decisions) are not this test's, so
it does not depend on running first.

This is the suite's one Airflow run by its scheduler (the other DAG tests use `dag.test()`): the
anonymous request refused, the login, the trigger through the REST API, the sign-off and the
run to success are all checked here.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any

import airflow_helpers as H  # first: keeps this process's Airflow settings out of the child
import pytest
from browser import ARTIFACTS, CHROMIUM_ARGS, chromium_path
from desk_fixtures import D1, D3

pytestmark = pytest.mark.slow

REVIEWED = D3  # reconciled by this test's run, unexplained, never signed off before it
REASON = "known upstream outage, ticket 123"


@pytest.fixture(scope="module")
def airflow(desk_airflow: H.RunningAirflow) -> H.RunningAirflow:
    return desk_airflow


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

    # Auth is on: the API refuses anonymous requests (the UI sends them to the login page).
    assert H.http(f"{airflow.base}/api/v2/dags")[0] == 401
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
    run_id = trigger(airflow, token, REVIEWED)

    def waiting() -> bool:
        state, tasks = states(airflow, token, run_id)
        assert state != "failed", tasks
        return tasks.get("sign_off") == "awaiting_input"

    H.wait_for("the run's sign-off to wait for a person", waiting, 2400, airflow, every=1)

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
            reviewed_row = ledger.locator(f'tr[data-date="{REVIEWED}"]')
            reviewed_row.wait_for()
            assert "unexplained" in reviewed_row.inner_text()
            assert "pending" in reviewed_row.inner_text()
            row1 = ledger.locator(f'tr[data-date="{D1}"]')
            assert "unexplained" not in row1.inner_text()
            text = row1.inner_text()
            assert any(s in text for s in ("balanced", "explained by late events")), text
            shot(page, "ledger")

            # The unexplained date's page and its report.
            reviewed_row.get_by_role("link", name=REVIEWED.isoformat()).click()
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
                f"{airflow.base}/dags/{H.NIGHTLY}/runs/{run_id}/tasks/sign_off/required_actions"
            )
            page.get_by_text("Sign off").first.wait_for()
            page.locator("#element_reason").fill(REASON)
            shot(page, "required_action")
            page.get_by_role("button", name="Accept").click()

            def run_done() -> Any:
                state, _ = states(airflow, token, run_id)
                return state if state in ("success", "failed") else None

            assert H.wait_for("the run", run_done, 1200, airflow, every=1) == "success"
            _, tasks = states(airflow, token, run_id)
            assert tasks == dict.fromkeys(H.NIGHTLY_TASKS, "success")

            # The run's grid view, as a user would look at it.
            page.goto(f"{airflow.base}/dags/{H.NIGHTLY}/runs/{run_id}")
            page.get_by_text("build_report").first.wait_for()
            page.wait_for_load_state("networkidle")
            grid = ARTIFACTS / "airflow_grid.png"
            page.screenshot(path=str(grid), full_page=True)
            assert grid.stat().st_size > 10_000

            page.goto(f"{airflow.base}/plugin/reconciliation")
            reviewed_row = page.frame_locator("iframe[title=Reconciliation]").locator(
                f'tr[data-date="{REVIEWED}"]'
            )
            reviewed_row.wait_for()
            assert (
                "accepted by admin" in reviewed_row.inner_text()
                and REASON in reviewed_row.inner_text()
            )
            shot(page, "ledger_signed")
            page.goto(f"{airflow.base}/tally/files/report-{REVIEWED}.html")
            text = page.locator("#signoff").inner_text()
            assert "accepted" in text and "admin" in text and REASON in text
            shot(page, "report_signed")
            assert violations == []
        finally:
            browser.close()

    # The published table is the DAG's asset; the run's event was recorded.
    status, events = H.http(f"{airflow.base}/api/v2/assets/events?limit=10", token=token)
    assert status == 200, events
    assert any(e["source_run_id"] == run_id for e in events["asset_events"])
