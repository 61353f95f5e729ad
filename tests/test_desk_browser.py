"""The reconciliation desk as a reviewer uses it, in headless Chromium against `make airflow`
(scripts/airflow.sh standalone: api-server, scheduler, dag-processor, triggerer; auth on).

The session's desk warehouse and Airflow, shared with test_desk_api (tests/desk_fixtures.py
describes both): a real stream over four generated days. The first date was reconciled by the
nightly stages directly (`run_nightly`: the same stages, no Airflow run, to keep the test short
on a busy machine); this test's date is the third, with an unexplained gap (one stream row
deleted): the nightly DAG is triggered for it and runs in the scheduler until its sign-off waits
in Required Actions. In the browser: log in, open Reconciliation, see both dates (the
unexplained one an open item of today), open the unexplained date's page, one of its windows'
records (the events the stream never counted) and its report (the charts load under the
content security policy); the gap is material, so four eyes: prepare the sign-off as `admin`
(accept with a reason), fail to approve it as `admin` (refused and recorded, asked again),
approve it as `approver` in a second session, and see the sign-off with both names in the
ledger and in the re-rendered report, and the item leave the open list; every task of the run
succeeded, the run's grid view is screenshotted
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


def login(browser: Any, airflow: H.RunningAirflow, user: str, violations: list[str]) -> Any:
    """A fresh page (its own cookies) logged in to the Airflow UI as `user`."""
    page = browser.new_context(viewport={"width": 1600, "height": 1000}).new_page()
    page.set_default_timeout(60_000)
    page.on(
        "console",
        lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None,
    )
    page.goto(f"{airflow.base}/")
    page.wait_for_url("**/auth/login**")
    page.locator("input[name=username]").fill(user)
    page.locator("input[name=password]").fill(airflow.password(user))
    page.locator("button[type=submit]").click()
    page.wait_for_url(f"{airflow.base}/")
    return page


def task_waits(airflow: H.RunningAirflow, token: str, run_id: str) -> Any:
    """A check: the run's approval waits for a person (and the run has not failed)."""

    def check() -> bool:
        state, tasks = states(airflow, token, run_id)
        assert state != "failed", tasks
        return tasks.get("approve_sign_off") == "awaiting_input"

    return check


def parked(airflow: H.RunningAirflow, token: str, run_id: str, times: int) -> Any:
    """A check: the approval's workload has ended parked (`awaiting_input`) `times` times, as
    the scheduler logs it. An answer while a parked workload's process is still exiting makes
    Airflow fail the resumed try (its executor then reports `success` for a running task)."""
    url = f"{airflow.base}/api/v2/dags/{H.NIGHTLY}/dagRuns/{run_id}/taskInstances/approve_sign_off"

    def check() -> bool:
        status, ti = H.http(url, token=token)
        assert status == 200, ti
        workload = f"workload_id={ti['id']}"
        lines = airflow.log.read_text(errors="replace").splitlines()
        ended = [x for x in lines if workload in x and "final_state=awaiting_input" in x]
        return len(ended) >= times

    return check


def decisions(airflow: H.RunningAirflow, token: str) -> list[str]:
    """The reviewed date's sign-off decisions, as the desk's API lists them."""
    status, body = H.http(f"{airflow.base}/tally/api/dates/{REVIEWED}", token=token)
    assert status == 200, body
    return [s["decision"] for s in body["signoffs"]]


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
            violations: list[str] = []
            page = login(browser, airflow, "admin", violations)

            # Reconciliation in the navigation: the ledger, in an iframe.
            page.locator("a[href$='plugin/reconciliation']").first.click()
            page.wait_for_url("**/plugin/reconciliation")
            ledger = page.frame_locator("iframe[title=Reconciliation]")
            reviewed_row = ledger.locator(f'tr[data-date="{REVIEWED}"]')
            reviewed_row.wait_for()
            assert "unexplained" in reviewed_row.inner_text()
            assert "pending" in reviewed_row.inner_text()
            # asked about, the date is an open item from today, its preparers to act
            assert "open 0 day(s) (unexplained" in reviewed_row.locator(".open-item").inner_text()
            assert "Open items:" in ledger.locator("#aging").inner_text()
            row1 = ledger.locator(f'tr[data-date="{D1}"]')
            assert "unexplained" not in row1.inner_text()
            text = row1.inner_text()
            assert any(s in text for s in ("balanced", "explained by late events")), text
            shot(page, "ledger")

            # The unexplained date's page, a window's records, the report.
            reviewed_row.get_by_role("link", name=REVIEWED.isoformat()).click()
            ledger.locator("#provenance").wait_for()
            assert "unexplained" in ledger.locator("#status").inner_text()
            assert ledger.locator("a.required-action").count() == 1
            shot(page, "date")
            ledger.locator("a.window-link").first.click()
            ledger.locator("#never-counted").wait_for()
            assert ledger.locator("#window-status").inner_text() == "UNEXPLAINED"
            events = ledger.locator("#evidence tr")
            assert events.count() >= 2  # a heading and at least one event
            assert "never counted" in ledger.locator("#evidence").inner_text()
            shot(page, "window")
            ledger.get_by_role("link", name=f"← {REVIEWED.isoformat()}").click()
            ledger.locator("#report-link").click()
            ledger.locator("#business-date").wait_for()
            images = ledger.locator("img")
            assert images.count() >= 3
            loaded = images.evaluate_all("els => els.map(e => e.complete && e.naturalWidth > 0)")
            assert all(loaded), loaded
            assert "pending" in ledger.locator("#signoff").inner_text()
            assert ledger.locator("#unexplained-windows a.window-link").count() == 1
            shot(page, "report")

            # Four eyes: admin prepares (accept with a reason)...
            actions = f"{airflow.base}/dags/{H.NIGHTLY}/runs/{run_id}/tasks"
            page.goto(f"{actions}/sign_off/required_actions")
            page.get_by_text("Prepare the sign-off").first.wait_for()
            page.locator("#element_reason").fill(REASON)
            shot(page, "required_action")
            page.get_by_role("button", name="Accept").click()
            H.wait_for("the approval to wait", task_waits(airflow, token, run_id), 600, airflow)
            H.wait_for("its workload to park", parked(airflow, token, run_id, 1), 600, airflow)
            # the ledger says who must act now
            page.goto(f"{airflow.base}/tally/ledger")
            prepared = page.locator(f'tr[data-date="{REVIEWED}"]')
            assert "prepared by admin (proposes accepted): awaiting approval" in (
                prepared.inner_text()
            )
            assert "(awaiting_approval; owner: approver, admin)" in prepared.inner_text()

            # ...then tries to approve it too: refused and recorded, asked again...
            page.goto(f"{actions}/approve_sign_off/required_actions")
            page.get_by_text("Approve the sign-off").first.wait_for()
            page.get_by_role("button", name="Approve").click()
            H.wait_for(
                "the self-approval to be refused",
                lambda: (
                    "self_approval_refused" in decisions(airflow, token)
                    and task_waits(airflow, token, run_id)()
                ),
                600,
                airflow,
            )
            H.wait_for(
                "its workload to park again", parked(airflow, token, run_id, 2), 600, airflow
            )
            page.reload()  # the request as asked again
            page.get_by_text("Approve the sign-off").first.wait_for()
            shot(page, "self_approval")

            # ...and a second person approves.
            second = login(browser, airflow, "approver", violations)
            second.goto(f"{actions}/approve_sign_off/required_actions")
            second.get_by_text("Approve the sign-off").first.wait_for()
            second.locator("#element_reason").fill("checked the window's records")
            second.get_by_role("button", name="Approve").click()

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
            frame = page.frame_locator("iframe[title=Reconciliation]")
            reviewed_row = frame.locator(f'tr[data-date="{REVIEWED}"]')
            reviewed_row.wait_for()
            signed = reviewed_row.inner_text()
            assert "accepted by admin, approved by approver" in signed and REASON in signed
            assert "accepted by approver after 0 day(s)" in signed
            shot(page, "ledger_signed")
            # the item left the open list
            page.goto(f"{airflow.base}/tally/ledger?older_than=0")
            assert page.locator(f'tr[data-date="{REVIEWED}"]').count() == 0
            page.goto(f"{airflow.base}/tally/files/report-{REVIEWED}.html")
            text = page.locator("#signoff").inner_text()
            assert "accepted" in text and "approved by approver" in text and REASON in text
            shot(page, "report_signed")
            assert violations == []
        finally:
            browser.close()

    # The published table is the DAG's asset; the run's event was recorded.
    status, events = H.http(f"{airflow.base}/api/v2/assets/events?limit=10", token=token)
    assert status == 200, events
    assert any(e["source_run_id"] == run_id for e in events["asset_events"])
