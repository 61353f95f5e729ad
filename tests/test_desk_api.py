"""The reconciliation desk (tally_desk) served by a real Airflow (auth on), started by
scripts/airflow.sh, over a warehouse written by a real stream and the real nightly stages: the
session's desk warehouse and Airflow, shared with test_desk_browser (tests/desk_fixtures.py
describes both). This module reads D1 (reconciled), D2 (reconciled with an unexplained gap, one
alert, two decisions by `ana`) and D4 (not yet run); D3 is the browser test's, so no assertion
here depends on whether that test ran first.
"""

from __future__ import annotations

import csv
import io
import json
import urllib.error
import urllib.request
from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from typing import Any

import airflow_helpers as H  # first: keeps this process's Airflow settings out of the child
import pytest
from desk_fixtures import D1, D2, D3, D4

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def airflow(desk_airflow: H.RunningAirflow) -> H.RunningAirflow:
    return desk_airflow


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
    # a window's records: routed, authorized, then looked up (no such window: 404)
    f"api/dates/{D2}/windows/{D2}T12:00:00Z?key=no-such-key&currency=USD",
    f"dates/{D2}/windows/{D2}T12:00:00Z/evidence.csv?key=no-such-key&currency=USD",
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
    assert status == (404 if "no-such-" in path else 200), body
    assert "script-src" not in headers["content-security-policy"]
    assert "default-src 'none'" in headers["content-security-policy"]


def test_ledger_lists_the_dates_newest_first(spark, airflow, tokens, desk_env) -> None:
    from pyspark.sql import functions as F

    from tally.tables import read_table

    status, body, _ = get(airflow, "api/ledger", tokens["reviewer"])
    assert status == 200, body
    rows = body["dates"]
    assert [r["business_date"] for r in rows] == [d.isoformat() for d in (D4, D3, D2, D1)]
    by_date = {r["business_date"]: r for r in rows}
    assert by_date[D4.isoformat()]["status"] == "not_run"
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

    # Filters and pages. D3 is unexplained too once the browser test has run it: the filter
    # keeps exactly the unfiltered ledger's unexplained rows, D2 among them.
    unexplained = [r["business_date"] for r in rows if r["status"] == "unexplained"]
    assert D2.isoformat() in unexplained and D1.isoformat() not in unexplained
    status, body, _ = get(airflow, "api/ledger?status=unexplained", tokens["reviewer"])
    assert [r["business_date"] for r in body["dates"]] == unexplained
    query = f"api/ledger?date_from={D1}&date_to={D2}&page_size=1&page=2"
    status, body, _ = get(airflow, query, tokens["reviewer"])
    assert (body["total"], [r["business_date"] for r in body["dates"]]) == (2, [D1.isoformat()])
    for bad in ("status=nope", f"date_from={D2}&date_to={D1}", "date_from=2026-13-01", "page=0"):
        status, body, _ = get(airflow, f"api/ledger?{bad}", tokens["reviewer"])
        assert status == 400 and body["detail"], bad

    status, html, _ = get(airflow, "ledger?status=unexplained", tokens["reviewer"])
    text = html.decode()
    assert status == 200 and f'href="dates/{D2}"' in text and f"dates/{D1}" not in text


def test_tally_ledger_prints_the_rows_the_api_serves(
    airflow, tokens, desk_env, tally_cli, capsys
) -> None:
    """`tally ledger --json` (delta-rs, no Spark) gives the desk API's rows, filters included;
    the grid has a line per date; a bad filter is one line and exit 2."""
    env = {k: v for k, v in desk_env.items() if k.startswith("TALLY_")}
    capsys.readouterr()
    for flags, query in (
        ([], "page_size=200"),
        (
            ["--status", "unexplained", "--from", str(D1), "--to", str(D2)],
            f"status=unexplained&date_from={D1}&date_to={D2}",
        ),
    ):
        status, body, _ = get(airflow, f"api/ledger?{query}", tokens["reviewer"])
        assert status == 200, body
        assert tally_cli(["ledger", "--json", *flags], **env) == 0
        assert json.loads(capsys.readouterr().out) == body["dates"], flags
    assert body["dates"] and [r["business_date"] for r in body["dates"]] == [D2.isoformat()]

    assert tally_cli(["ledger", "--from", str(D1), "--to", str(D2)], **env) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["date", "status"] and len(lines) == 3
    assert lines[1].startswith(f"{D2}  unexplained") and "accepted by ana" in lines[1]
    assert lines[2].startswith(str(D1))

    assert tally_cli(["ledger", "--status", "nope"], **env) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tally: ledger: status: expected one of") and "\n" not in err


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
    assert body["copies"] == {"rows": 0, "shown": []}  # the stream counted no copies there
    provenance = body["provenance"]
    assert provenance["events_version"] is not None
    assert provenance["settings"]["warehouse"] == desk_env["TALLY_WAREHOUSE"]
    # what failed: the date's unexplained windows, critical first, each with its Data Docs page
    failed = body["failed_checks"]
    assert ("gap", "no_unexplained_windows") in {(c["suite"], c["check_name"]) for c in failed}
    assert failed[0]["severity"] == "critical" and failed[0]["observed_value"]
    served = [c["docs_page"] for c in failed if c["docs_page"]]
    assert served and all(page.startswith("docs/") for page in served)
    status, _, _ = get(airflow, served[0], tokens["reviewer"])
    assert status == 200

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
    idents = ("report-link", "csv-link", "data-docs-link", "provenance", "alerts", "copies")
    for ident in (*idents, "failed-checks", "provenance-json"):
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
    # The run's logical date is before the DAG's start (today): Airflow gives it no task
    # instances, so the scheduler never reconciles D2 again under the other tests.
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


def _window_of_d2(airflow: H.RunningAirflow, tokens: dict[str, str]) -> dict[str, Any]:
    """D2's one UNEXPLAINED window (its stream row deleted), as the date page lists it."""
    status, body, _ = get(airflow, f"api/dates/{D2}", tokens["reviewer"])
    assert status == 200, body
    assert body["unexplained_windows"]["rows"] == 1
    (window,) = body["unexplained_windows"]["shown"]
    return window


def test_an_unexplained_window_lists_the_records_behind_it(
    spark, airflow, tokens, desk_env
) -> None:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from tally.tables import read_table

    window = _window_of_d2(airflow, tokens)
    status, found, _ = get(airflow, f"api/{window['page']}&page_size=500", tokens["reviewer"])
    assert status == 200, found
    assert (found["status"], found["evidence"]) == ("UNEXPLAINED", "recorded")
    # the window's first arrivals, recomputed here from the log: each id's first line
    warehouse = desk_env["TALLY_WAREHOUSE"]
    first = Window.partitionBy("event_id").orderBy(
        "ingest_time", "batch_id", "source_mtime", "source_file", "source_line"
    )
    log = read_table(spark, warehouse, "events")
    start = datetime.fromisoformat(found["window_start"].replace("Z", "+00:00"))
    end = datetime.fromisoformat(found["window_end"])
    in_window = (
        (F.col("key") == window["key"])
        & (F.col("event_time") >= F.lit(start))
        & (F.col("event_time") < F.lit(end))
    )
    expected = {
        r["event_id"]: r
        for r in log.withColumn("_n", F.row_number().over(first))
        .where((F.col("_n") == 1) & in_window)
        .collect()
    }
    rows = found["rows"]
    assert len(rows) == found["kinds"]["event"]["total"] == len(expected) > 0
    assert {r["event_id"] for r in rows} == set(expected)
    for row in rows:
        line = expected[row["event_id"]]
        assert (row["source_file"], row["source_line"], row["amount"]) == (
            line["source_file"],
            line["source_line"],
            line["amount"],
        )
    # its stream row is gone: every event not late was never counted, which is the residual
    late = [r for r in rows if r["counted"] == "late"]
    assert {r["counted"] for r in rows} <= {"late", "never counted"}
    never = found["kinds"]["event"]["never_counted"]
    assert never == len(rows) - len(late) == found["figures"]["residual_count"] > 0
    assert [r["counted"] for r in rows[:never]] == ["never counted"] * never
    assert found["kinds"]["revision"]["total"] == 0

    # paged, one row a page: page n is rank n, and the page after the last is empty
    pages = [
        get(airflow, f"api/{window['page']}&page_size=1&page={n}", tokens["reviewer"])[1]["rows"]
        for n in range(1, len(rows) + 2)
    ]
    assert [[r["rank"] for r in p] for p in pages] == [[n] for n in range(1, len(rows) + 1)] + [[]]
    assert [p[0]["event_id"] for p in pages[:-1]] == [r["event_id"] for r in rows]

    # the same rows as CSV, every text cell quoted
    status, data, headers = get(
        airflow, window["page"].replace("?", "/evidence.csv?", 1), tokens["reviewer"]
    )
    assert status == 200 and headers["content-type"].startswith("text/csv")
    assert "attachment" in headers["content-disposition"]
    table = list(csv.DictReader(io.StringIO(data.decode())))
    assert [r["event_id"] for r in table if r["kind"] == "event"] == [r["event_id"] for r in rows]

    # the HTML page: the never-counted line, the records, the way back to the date
    status, html, _ = get(airflow, window["page"], tokens["reviewer"])
    text = html.decode()
    assert status == 200 and 'id="never-counted"' in text and 'id="evidence"' in text
    assert f'href="../../../dates/{D2}"' in text
    status, html, _ = get(airflow, f"dates/{D2}", tokens["reviewer"])
    assert f'href="../{window["page"].replace("&", "&amp;")}"' in html.decode()


def test_a_window_without_a_gap_says_so_and_a_bad_window_is_a_clear_error(
    spark, airflow, tokens, desk_env
) -> None:
    from pyspark.sql import functions as F

    from tally.tables import read_table
    from tally.window_evidence import window_path

    matched = (
        read_table(spark, desk_env["TALLY_WAREHOUSE"], "reconciliation")
        .where((F.col("business_date") == F.lit(D1)) & (F.col("status") == "MATCH"))
        .orderBy("window_start", "key")
        .first()
    )
    assert matched is not None
    page = window_path(D1, matched["window_start"], matched["key"], matched["currency"])
    status, found, _ = get(airflow, f"api/{page}", tokens["reviewer"])
    assert status == 200, found
    assert (found["status"], found["evidence"], found["rows"]) == (
        "MATCH",
        "no_evidence_needed",
        [],
    )
    assert found["figures"]["batch_count"] == matched["batch_count"] > 0
    base = f"api/dates/{D2}/windows"
    for path, status_wanted, words in (
        (f"{base}/noon?key=k&currency=USD", 400, "window start"),
        (f"{base}/{D2}T12:00:00?key=k&currency=USD", 400, "time zone"),
        (f"{base}/{D2}T12:00:00Z?currency=USD", 400, "key"),
        (f"{base}/{D2}T12:00:00Z?key=k&currency=usd", 400, "currency"),
        (f"{base}/{D2}T12:00:00Z?key=k&currency=USD&kind=nope", 400, "kind"),
        (f"{base}/{D2}T12:00:00Z?key=..%2F..%2Fetc&currency=USD", 404, "no window"),
        (f"{base}/..%2F..%2Fetc%2Fpasswd?key=k&currency=USD", 404, "Not Found"),
    ):
        status, body, _ = get(airflow, path, tokens["reviewer"])
        assert status == status_wanted, (path, body)
        assert words in body["detail"], (path, body)
