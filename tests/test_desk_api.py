"""The reconciliation desk (tally_desk) served by a real `airflow api-server` (auth on), started
by scripts/airflow.sh, over a warehouse written by a real stream and the real nightly stages.

The warehouse: three generated days, streamed (drained); the first two reconciled, validated,
reported and published (`tally_app.nightly.run_nightly`), the second after one of its stream
rows was deleted (an unexplained gap); the third never reconciled (not yet run). One alert row
is written for the second date. Users: `admin` (admin), `reviewer` (viewer: may read the
nightly DAG's runs) and `outsider` (no role: may read nothing).
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any

import airflow_helpers as H  # first: keeps this process's Airflow settings out of the child
import pytest

from tally_tools.ports import free_port

pytestmark = pytest.mark.slow

D1 = date(2026, 10, 5)
D2, D3 = D1 + timedelta(days=1), D1 + timedelta(days=2)
USERS = "admin:admin,reviewer:viewer,outsider:"


def delete_one_stream_row(spark: Any, warehouse: str, day: date) -> None:
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
    DeltaTable.forPath(spark, table_path(warehouse, "stream_aggregates")).delete(
        (F.col("window_start") == F.lit(victim["window_start"])) & (F.col("key") == victim["key"])
    )


@pytest.fixture(scope="module")
def airflow_home(tmp_path_factory) -> Iterator[tuple[Path, dict[str, str], Any]]:
    """A fresh AIRFLOW_HOME whose `airflow db migrate` runs while the warehouse is written."""
    root = Path(tmp_path_factory.mktemp("desk-airflow"))
    env = H.clean_env(
        {
            "TALLY_AIRFLOW_HOME": str(root / "home"),
            "AIRFLOW_PORT": str(free_port()),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": USERS,
            "TALLY_NIGHTLY_START": D1.isoformat(),
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


@pytest.fixture(scope="module")
def desk_env(spark, tmp_path_factory, airflow_home) -> dict[str, str]:
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
    H.make_stream(spark, root, D1, days=3, events=900, env=env)
    settings = load_settings(env=env)
    for day in (D1, D2):
        if day == D2:
            delete_one_stream_row(spark, settings.warehouse, day)
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
                run_time=datetime.combine(D2 + timedelta(days=1), time(0, 30), tzinfo=UTC),
                dag_id=H.NIGHTLY,
                run_id="manual__x",
            ),
        )
    return env


@pytest.fixture(scope="module")
def airflow(desk_env: dict[str, str], airflow_home) -> Iterator[H.RunningAirflow]:
    root, env, migrate = airflow_home
    out, _ = migrate.communicate(timeout=600)
    assert migrate.returncode == 0, out.decode(errors="replace")[-3000:]
    env = {**env, **desk_env}
    done = subprocess.run(
        ["bash", str(H.REPO / "scripts" / "airflow.sh"), "dags", "reserialize"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    running = H.start_airflow(root, int(env["AIRFLOW_PORT"]), env, ["api-server"])
    try:
        yield running
    finally:
        H.stop_airflow(running.process)


@pytest.fixture(scope="module")
def tokens(airflow: H.RunningAirflow) -> dict[str, str]:
    return {user: H.token_for(airflow, user) for user in ("admin", "reviewer", "outsider")}


def get(airflow: H.RunningAirflow, path: str, token: str | None = None) -> tuple[int, Any, Any]:
    """(status, body, headers) of GET /tally/PATH; bodies as text or JSON."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(f"{airflow.base}/tally/{path}", headers=headers)

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(request, timeout=60) as response:
            raw = response.read()
            status, headers_ = response.status, response.headers
    except urllib.error.HTTPError as exc:
        raw, status, headers_ = exc.read(), exc.code, exc.headers
    kind = headers_.get("content-type", "")
    if kind.startswith("application/json"):
        return status, json.loads(raw), headers_
    return status, raw, headers_


ENDPOINTS = (
    "api/ledger",
    "ledger",
    f"api/dates/{D2}",
    f"dates/{D2}",
    f"files/report-{D2}.html",
    f"files/reconciliation-{D2}.csv",
    f"runs/{H.NIGHTLY}/no-such-run",
)


@pytest.mark.parametrize("path", ENDPOINTS)
def test_every_endpoint_needs_an_allowed_airflow_user(airflow, tokens, path: str) -> None:
    assert get(airflow, path)[0] == 401
    status, body, headers = get(airflow, path, "not-a-jwt")
    assert status == 401 and headers["www-authenticate"] == "Bearer"
    forged = tokens["admin"][:-4] + ("AAAA" if not tokens["admin"].endswith("AAAA") else "BBBB")
    assert get(airflow, path, forged)[0] == 401
    status, body, _ = get(airflow, path, tokens["outsider"])
    assert status == 403, body
    status, body, headers = get(airflow, path, tokens["reviewer"])
    assert status == (404 if "no-such-run" in path else 200), body
    assert "script-src" not in headers["content-security-policy"]
    assert "default-src 'none'" in headers["content-security-policy"]


def test_ledger_lists_the_dates_newest_first(spark, airflow, tokens, desk_env) -> None:
    from pyspark.sql import functions as F

    from tally.tables import read_table

    status, body, _ = get(airflow, "api/ledger", tokens["reviewer"])
    assert status == 200, body
    rows = body["dates"]
    assert [r["business_date"] for r in rows] == [D3.isoformat(), D2.isoformat(), D1.isoformat()]
    by_date = {r["business_date"]: r for r in rows}
    assert by_date[D3.isoformat()]["status"] == "not_run"
    assert by_date[D2.isoformat()]["status"] == "unexplained"
    assert by_date[D2.isoformat()]["unexplained_amount"] != 0
    summary = {
        r["business_date"].isoformat(): r
        for r in read_table(spark, desk_env["TALLY_WAREHOUSE"], "reconciliation_summary")
        .where(F.col("business_date").isin(D1, D2))
        .collect()
    }
    for day, s in summary.items():
        for column in ("stream_count", "stream_amount", "batch_amount", "gap_amount"):
            assert by_date[day][column] == s[column], (day, column)
    first = summary[D1.isoformat()]
    expected = "balanced" if first["gap_count"] == 0 and first["gap_amount"] == 0 else "explained"
    assert by_date[D1.isoformat()]["status"].startswith(expected)
    assert by_date[D1.isoformat()]["last_run"].startswith(D2.isoformat())
    assert by_date[D1.isoformat()]["signoff"] is None
    signoff = by_date[D2.isoformat()]["signoff"]
    assert (signoff["decision"], signoff["decided_by"]) == ("accepted", "ana")
    assert signoff["reason"] == "accepted: ticket 123"
    assert signoff["decided_at"] == "2026-10-07T09:05:00+00:00"

    # Filters and pages.
    status, body, _ = get(airflow, "api/ledger?status=unexplained", tokens["reviewer"])
    assert [r["business_date"] for r in body["dates"]] == [D2.isoformat()]
    query = f"api/ledger?date_from={D1}&date_to={D2}&page_size=1&page=2"
    status, body, _ = get(airflow, query, tokens["reviewer"])
    assert (body["total"], [r["business_date"] for r in body["dates"]]) == (2, [D1.isoformat()])
    for bad in ("status=nope", f"date_from={D2}&date_to={D1}", "date_from=2026-13-01", "page=0"):
        status, body, _ = get(airflow, f"api/ledger?{bad}", tokens["reviewer"])
        assert status == 400 and body["detail"], bad

    status, html, _ = get(airflow, "ledger?status=unexplained", tokens["reviewer"])
    text = html.decode()
    assert status == 200 and f'href="dates/{D2}"' in text and f"dates/{D1}" not in text


def test_date_page_has_report_csv_docs_alerts_and_provenance(airflow, tokens, desk_env) -> None:
    status, body, _ = get(airflow, f"api/dates/{D2}", tokens["reviewer"])
    assert status == 200, body
    assert body["ledger"]["status"] == "unexplained"
    files = body["files"]
    assert files["report"] == f"files/report-{D2}.html"
    assert files["csv"] == f"files/reconciliation-{D2}.csv"
    assert files["data_docs"].startswith("docs/local_site/")
    assert [s["decision"] for s in body["signoffs"]] == ["accepted", "rejected"]
    (alert,) = body["alerts"]
    assert alert["what"] == "data quality: <unexplained> gap"
    provenance = body["provenance"]
    assert provenance["events_version"] is not None
    assert provenance["settings"]["warehouse"] == desk_env["TALLY_WAREHOUSE"]

    reports = Path(desk_env["TALLY_REPORT_DIR"])
    status, report, headers = get(airflow, files["report"], tokens["reviewer"])
    assert status == 200 and report == (reports / f"report-{D2}.html").read_bytes()
    assert headers["content-type"].startswith("text/html")
    status, data, headers = get(airflow, files["csv"], tokens["reviewer"])
    assert status == 200 and data == (reports / f"reconciliation-{D2}.csv").read_bytes()
    assert "attachment" in headers["content-disposition"]
    assert list(csv.reader(io.StringIO(data.decode())))[1:]
    status, docs, headers = get(airflow, files["data_docs"], tokens["reviewer"])
    assert status == 200 and b"<html" in docs.lower()

    status, html, _ = get(airflow, f"dates/{D2}", tokens["reviewer"])
    text = html.decode()
    assert status == 200
    assert "data quality: &lt;unexplained&gt; gap" in text and "<unexplained>" not in text
    assert "accepted by ana" in text and "accepted: ticket 123" in text
    for ident in ("report-link", "csv-link", "data-docs-link", "provenance", "alerts"):
        assert f'id="{ident}"' in text, ident


@pytest.mark.parametrize(
    "path",
    [
        "files/..%2Fwarehouse",
        "files/report-2026-10-06.html%2F..%2F..%2Fetc%2Fpasswd",
        "files/report-2026-10-06.htm",
        "files/index.html",
        "files/%2Fetc%2Fpasswd",
        "docs/..%2F..%2Fgreat_expectations.yml",
        "docs/local_site/..%2F..%2F..%2Fgreat_expectations.yml",
        "docs/local_site/%2Fetc%2Fpasswd",
        "files/report-2026-10-09.html",
    ],
)
def test_only_report_and_data_docs_files_are_served(airflow, tokens, path: str) -> None:
    status, body, headers = get(airflow, path, tokens["reviewer"])
    assert status == 404, body
    assert "default-src 'none'" in headers["content-security-policy"]


def test_bad_date_is_a_clear_400(airflow, tokens) -> None:
    for path in ("api/dates/2026-02-30", "api/dates/2026-1-1", "dates/yesterday"):
        status, body, _ = get(airflow, path, tokens["reviewer"])
        assert status == 400, (path, body)
        text = body["detail"] if isinstance(body, dict) else body.decode()
        assert "expected YYYY-MM-DD" in text
    # A date with slashes in it matches no route at all.
    assert get(airflow, "api/dates/..%2F..%2Fetc", tokens["reviewer"])[0] == 404


def test_a_nightly_run_opens_its_date_page(airflow, tokens) -> None:
    api = f"{airflow.base}/api/v2/dags/{H.NIGHTLY}/dagRuns"
    start = datetime.combine(D2, time(0, 30), tzinfo=UTC)
    status, body = H.http(
        api,
        "POST",
        {
            "dag_run_id": "desk_test",
            "logical_date": (start + timedelta(days=1)).isoformat(),
            "data_interval_start": start.isoformat(),
            "data_interval_end": (start + timedelta(days=1)).isoformat(),
        },
        tokens["admin"],
    )
    assert status == 200, body
    status, _, headers = get(airflow, f"runs/{H.NIGHTLY}/desk_test", tokens["reviewer"])
    assert status == 307 and headers["location"] == f"../../dates/{D2}"
    status, body, _ = get(airflow, f"api/dates/{D2}", tokens["reviewer"])
    (run,) = body["airflow_runs"]
    assert run["run_id"] == "desk_test" and run["url"] == f"/dags/{H.NIGHTLY}/runs/desk_test"
    status, html, _ = get(airflow, f"runs/other_dag/{'x'}", tokens["reviewer"])
    assert status == 200 and b"Not a reconciliation run" in html

    # The plugin's views are registered with the UI.
    status, plugins = H.http(f"{airflow.base}/api/v2/plugins", token=tokens["admin"])
    assert status == 200, plugins
    views = [v for p in plugins["plugins"] for v in p["external_views"]]
    assert {(v["destination"], v["href"]) for v in views} >= {
        ("nav", "/tally/ledger"),
        ("dag_run", "/tally/runs/{DAG_ID}/{RUN_ID}"),
    }
