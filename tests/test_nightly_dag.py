"""The nightly DAG run end to end with `dag.test()` (tasks in this process, sharing the test
Spark session) against a migrated throw-away Airflow database.

A small generated stream covers three business days; the speed layer runs over it (drained,
arrival clock). Then, in order (the module's tests share the warehouse):

1. the first date runs through all five tasks, leaving the reconciliation tables, validation
   results, the report and the asset event;
2. back-filling the other two dates gives three reports and one set of rows per date; running
   one date again changes nothing;
3. with an unexplained gap injected (a stream_aggregates row deleted) validation alerts (what,
   for which date, observed, threshold, link) and the run waits for a person's sign-off:
   rejected (the run fails, an alert), then on a re-run accepted with a reason (published),
   then on another unanswered until the timeout (an alert, the run fails); the balanced dates
   signed themselves off;
4. with no stream at all the sensor times out and a critical alert is written.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import airflow_helpers as H  # first: points Airflow at a temporary AIRFLOW_HOME
import pytest

pytestmark = pytest.mark.slow

D1 = H.STREAM_FIRST_DAY
DATES = [D1 + timedelta(days=i) for i in range(H.STREAM_DAYS)]
DATE_TABLES = (
    "batch_aggregates",
    "reconciliation",
    "reconciliation_summary",
    "reconciliation_runs",
    "validation_results",
)


@pytest.fixture(scope="module")
def stream_root(spark, tmp_path_factory) -> Path:
    if H.AIRFLOW_PREIMPORTED:
        pytest.fail("airflow was imported before tests/airflow_helpers.py set AIRFLOW_HOME")
    H.start_migration()  # in the background while the stream runs
    return H.shared_stream(spark, tmp_path_factory)


@pytest.fixture(scope="module")
def settings_env(stream_root: Path) -> Iterator[dict[str, str]]:
    values = H.stream_settings(
        stream_root / "warehouse",
        stream_root / "events",
        TALLY_RETRIES="0",
        TALLY_SENSOR_POKE="1s",
        TALLY_SENSOR_TIMEOUT="5m",
    )
    with pytest.MonkeyPatch.context() as mp:
        for key in (
            "TALLY_CONFIG",
            "TALLY_SPARK_RUNNER",
            "TALLY_REPORT_DIR",
            "TALLY_GX_ROOT",
            "AIRFLOW_CONN_TALLY_SMTP",
            "AIRFLOW_CONN_TALLY_SLACK",
        ):
            mp.delenv(key, raising=False)
        for key, value in values.items():
            mp.setenv(key, value)
        yield values


@pytest.fixture(scope="module")
def warehouse(settings_env: dict[str, str]) -> str:
    return settings_env["TALLY_WAREHOUSE"]


def parse_nightly() -> Any:
    return H.dag_bag().dags[H.NIGHTLY]


@pytest.fixture(scope="module")
def nightly(warehouse) -> Any:
    return parse_nightly()


def run_date(dag: Any, business_date: date) -> tuple[str, dict[str, str]]:
    """dag.test for the run covering `business_date`: (run state, {task_id: state})."""
    dr = dag.test(logical_date=H.logical_date_for(business_date))
    states = {ti.task_id: str(ti.state) for ti in dr.get_task_instances()}
    return str(dr.state), states


def xcom(dag_id: str, task_id: str, business_date: date) -> Any:
    from airflow.models.dagrun import DagRun
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        run = session.scalars(
            select(DagRun).where(
                DagRun.dag_id == dag_id,
                DagRun.logical_date == H.logical_date_for(business_date),
            )
        ).one()
        row = session.scalars(
            select(XComModel).where(
                XComModel.dag_id == dag_id,
                XComModel.run_id == run.run_id,
                XComModel.task_id == task_id,
                XComModel.key == "return_value",
            )
        ).one()
        return XComModel.deserialize_value(row)


def report_file(business_date: date) -> Path:
    value = xcom(H.NIGHTLY, "build_report", business_date)
    path = Path(value["result"] if isinstance(value, dict) else value)
    assert value["business_date"] == business_date.isoformat()
    return path


# Provenance that legitimately moves on a re-run: the Delta version a check read.
PROVENANCE = {"validation_results": ("source_version",)}


def date_rows(spark: Any, warehouse: str, table: str, business_date: date) -> list[tuple]:
    from pyspark.sql import functions as F

    from tally.tables import read_table

    df = read_table(spark, warehouse, table).where(F.col("business_date") == F.lit(business_date))
    df = df.drop(*PROVENANCE.get(table, ()))
    return sorted(tuple(r) for r in df.select(F.to_json(F.struct("*"))).collect())


def report_digest(path: Path) -> tuple[str, str]:
    """Digests of the HTML report (minus the table version it read, which a re-run moves)
    and of its CSV of reconciliation rows."""
    text = re.sub(
        r"(<th>reconciliation read</th><td>)v\d+", r"\1v?", path.read_text(encoding="utf-8")
    )
    csv = path.with_name(path.name.replace("report-", "reconciliation-").replace(".html", ".csv"))
    return (
        hashlib.sha256(text.encode()).hexdigest(),
        hashlib.sha256(csv.read_bytes()).hexdigest(),
    )


def test_first_date_runs_end_to_end(spark, nightly, warehouse) -> None:
    from pyspark.sql import functions as F

    from tally.tables import read_table

    # The shared warehouse may hold decisions for D1 already (the UI test's run of the same
    # date): count this run's only.
    earlier = {r["run_id"] for r in signoffs(spark, warehouse, D1)}
    state, states = run_date(nightly, D1)
    assert state == "success", states
    assert states == dict.fromkeys(H.NIGHTLY_TASKS, "success")

    summary = read_table(spark, warehouse, "reconciliation_summary").where(
        F.col("business_date") == F.lit(D1)
    )
    (row,) = summary.collect()
    assert row["windows"] > 0 and row["unexplained_windows"] == 0
    assert date_rows(spark, warehouse, "validation_results", D1)
    report = report_file(D1)
    assert report.exists() and report.stat().st_size > 0
    (signoff,) = [r for r in signoffs(spark, warehouse, D1) if r["run_id"] not in earlier]
    late = row["gap_amount"] != 0 or row["explained_amount"] != 0
    assert (signoff["decision"], signoff["decided_by"], signoff["status"]) == (
        "auto",
        "tally",
        "explained_by_late" if late else "balanced",
    )
    assert signoff["run_id"] and signoff["dag_id"] == H.NIGHTLY
    assert 'id="signoff">Sign-off: <b>auto</b> by tally' in report.read_text(encoding="utf-8")

    # The publish task's outlet: an asset event for the reconciliation table.
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        uris = session.scalars(
            select(AssetModel.uri).join(AssetEvent, AssetEvent.asset_id == AssetModel.id)
        ).all()
    assert f"file://{warehouse}/reconciliation" in uris


def test_backfill_three_dates_then_rerun_changes_nothing(spark, nightly, warehouse) -> None:
    for day in DATES[1:]:
        state, states = run_date(nightly, day)
        assert state == "success", (day, states)

    reports = {day: report_file(day) for day in DATES}
    assert len(set(reports.values())) == 3 and all(p.exists() for p in reports.values())
    from pyspark.sql import functions as F

    from tally.tables import read_table

    runs = read_table(spark, warehouse, "reconciliation_runs")
    assert sorted(r["business_date"] for r in runs.collect()) == DATES
    recon = read_table(spark, warehouse, "reconciliation")
    dupes = recon.groupBy("business_date", "window_start", "key").count().where("count > 1")
    assert dupes.count() == 0
    assert {r[0] for r in recon.select("business_date").distinct().collect()} == set(DATES)
    summaries = read_table(spark, warehouse, "reconciliation_summary")
    assert summaries.count() == 3
    assert summaries.where(F.col("unexplained_windows") > 0).count() == 0

    day = DATES[1]
    before = {t: date_rows(spark, warehouse, t, day) for t in DATE_TABLES}
    report_before = report_digest(reports[day])
    state, states = run_date(nightly, day)
    assert state == "success", states
    assert {t: date_rows(spark, warehouse, t, day) for t in DATE_TABLES} == before
    assert report_digest(report_file(day)) == report_before


def signoffs(spark: Any, warehouse: str, day: date) -> list[Any]:
    """The date's sign-off decisions, oldest first."""
    from pyspark.sql import functions as F

    from tally.tables import exists, read_table

    if not exists(spark, warehouse, "signoffs"):  # no decision recorded in this warehouse yet
        return []
    table = read_table(spark, warehouse, "signoffs")
    return table.where(F.col("business_date") == F.lit(day)).orderBy("decided_at").collect()


def open_item(spark: Any, warehouse: str, day: date) -> dict[str, Any]:
    """The date's open item (its newest `open_items` row)."""
    from tally_app.signoffs import latest_item

    item = latest_item(spark, warehouse, day)
    assert item is not None
    return item


def test_unexplained_gap_waits_for_a_sign_off(spark, nightly, warehouse, monkeypatch) -> None:
    from pyspark.sql import functions as F

    from tally.tables import read_table

    day = DATES[2]
    H.delete_one_stream_row(spark, warehouse, day)

    def alerts(task_id: str) -> list[Any]:
        return (
            read_table(spark, warehouse, "alerts")
            .where((F.col("task_id") == task_id) & (F.col("business_date") == F.lit(day)))
            .orderBy("alert_time")
            .collect()
        )

    # The back-fill above signed the (then balanced) date off automatically: count from here.
    earlier = len(signoffs(spark, warehouse, day))

    # A material gap (no tolerance rules: any residual): two people. The reviewer prepares a
    # rejection, the approver sends it back: the run fails, the date stays open, an alert.
    monkeypatch.setenv("TALLY_SIGNOFF_PREPARERS", "reviewer")
    monkeypatch.setenv("TALLY_SIGNOFF_APPROVERS", "approver,reviewer")
    dag = parse_nightly()  # who may answer is read when the task asks
    answer = H.answer_in_turn(
        [
            H.Answer("Reject", "totals look wrong"),
            H.Answer("Send back", "look at merchant 7 first", "approve_sign_off", "approver"),
        ]
    )
    state, states = run_date(dag, day)
    answer.join(timeout=5)
    assert state == "failed", states
    assert states["validate"] == states["build_report"] == states["sign_off"] == "success"
    assert states["approve_sign_off"] == "failed" and states["publish"] == "upstream_failed"
    (row,) = alerts("validate")
    assert row["dag_id"] == H.NIGHTLY and row["severity"] == "error"
    assert "data quality" in row["what"] and row["observed"] and row["threshold"]
    assert row["report_link"] and row["run_id"]
    (sent_back,) = alerts("approve_sign_off")
    assert "sent back by approver" in sent_back["what"]
    prepared, back = signoffs(spark, warehouse, day)[earlier:]
    assert (prepared["decision"], prepared["proposed"], prepared["prepared_by"]) == (
        "prepared",
        "rejected",
        "reviewer",
    )
    assert (prepared["tier"], prepared["step"], prepared["reason"]) == (
        2,
        "prepare",
        "totals look wrong",
    )
    assert prepared["status"] == "unexplained" and prepared["run_id"] == sent_back["run_id"]
    assert (back["decision"], back["decided_by"], back["prepared_by"], back["reason"]) == (
        "sent_back",
        "approver",
        "reviewer",
        "look at merchant 7 first",
    )
    # the date is an open item since the run asked, back with its preparer
    item = open_item(spark, warehouse, day)
    assert (item["status"], item["kind"], item["owner"]) == ("open", "sent_back", "reviewer")
    opened_at = item["opened_at"]

    # A re-run asks again: prepared to accept; someone not assigned is refused by Airflow,
    # the preparer by tally (recorded, asked again); the approver approves and the run
    # publishes, the report naming both.
    earlier = len(signoffs(spark, warehouse, day))
    answer = H.answer_in_turn(
        [
            H.Answer("Accept", "known upstream outage, ticket 123"),
            H.Answer("Approve", "", "approve_sign_off", "outsider"),
            H.Answer("Approve", "", "approve_sign_off", "reviewer"),
            H.Answer("Approve", "checked ticket 123", "approve_sign_off", "approver"),
        ]
    )
    state, states = run_date(dag, day)
    answer.join(timeout=5)
    assert state == "success", states
    assert states == dict.fromkeys(H.NIGHTLY_TASKS, "success")
    ((who, status, detail),) = answer.refused
    assert (who, status) == ("outsider", 403) and "not a respondent" in detail
    prepared, refused, approved = signoffs(spark, warehouse, day)[earlier:]
    assert (prepared["decision"], prepared["proposed"]) == ("prepared", "accepted")
    assert (refused["decision"], refused["decided_by"]) == ("self_approval_refused", "reviewer")
    assert (approved["decision"], approved["prepared_by"], approved["approved_by"]) == (
        "accepted",
        "reviewer",
        "approver",
    )
    assert approved["reason"] == "known upstream outage, ticket 123 (approver: checked ticket 123)"
    text = report_file(day).read_text(encoding="utf-8")
    assert "<b>accepted</b> by reviewer, approved by approver" in text
    assert "known upstream outage, ticket 123" in text
    item = open_item(spark, warehouse, day)
    assert (item["status"], item["resolved_by"], item["opened_at"]) == (
        "accepted",
        "approver",
        opened_at,
    )

    # Nobody answers before the deadline: recorded, an alert, the run fails. The gap is
    # graded warn by a materiality tolerance rule here: a person is asked all the same.
    monkeypatch.setenv("TALLY_SIGNOFF_TIMEOUT", "1s")
    rule = {"name": "noise", "key": "*", "window": {"warn_count": 0, "fail_abs": 10**12}}
    monkeypatch.setenv("TALLY_TOLERANCE", json.dumps([rule]))
    dag = parse_nightly()  # the response timeout is read when the DAG file is parsed
    answer = H.answer_sign_off(None)  # warn: one person (tier 1)
    state, states = run_date(dag, day)
    answer.join(timeout=5)
    assert state == "failed" and states["sign_off"] == "failed", states
    assert states["approve_sign_off"] == "upstream_failed", states
    timed_out = signoffs(spark, warehouse, day)[-1]
    assert (timed_out["decision"], timed_out["status"]) == ("timed_out", "unexplained_warn")
    assert (timed_out["tier"], timed_out["step"]) == (1, "decide")
    item = open_item(spark, warehouse, day)  # a new item: the accepted one was closed
    assert (item["status"], item["kind"]) == ("open", "timed_out") and item["opened_at"] > opened_at
    assert "timed out" in alerts("sign_off")[-1]["what"]

    # Graded ok (no warn limit): signed off automatically, the reason naming the rule.
    monkeypatch.setenv("TALLY_TOLERANCE", json.dumps([{**rule, "window": {"fail_abs": 10**12}}]))
    state, states = run_date(dag, day)
    assert state == "success", states
    # (an automatic decision is dated by its run's interval, so it sorts before the others)
    (auto,) = [r for r in signoffs(spark, warehouse, day) if r["status"] == "within_tolerance"]
    assert (auto["decision"], auto["decided_by"]) == ("auto", "tally")
    assert "within the materiality tolerance" in auto["reason"] and "'noise'" in auto["reason"]
    assert open_item(spark, warehouse, day)["status"] == "resolved"  # signed off by itself
    (summary,) = date_rows(spark, warehouse, "reconciliation_summary", day)
    graded = json.loads(summary[0])
    assert graded["unexplained_windows"] == 1 and graded["severity"] == "ok"


def test_stalled_stream_times_out_with_a_critical_alert(
    spark, settings_env, tmp_path, monkeypatch
) -> None:
    from pyspark.sql import functions as F

    from tally.tables import read_table

    empty = str(tmp_path / "no-stream")
    monkeypatch.setenv("TALLY_WAREHOUSE", empty)
    monkeypatch.setenv("TALLY_SENSOR_TIMEOUT", "3s")
    dag = parse_nightly()  # the sensor's timeout is read when the DAG file is parsed
    state, states = run_date(dag, D1)
    assert state == "failed"
    assert states["wait_for_stream_watermark"] == "failed"
    assert states["reaggregate"] == "upstream_failed"
    (row,) = (
        read_table(spark, empty, "alerts")
        .where(F.col("task_id") == "wait_for_stream_watermark")
        .collect()
    )
    assert row["severity"] == "critical" and row["business_date"] == D1
    assert "stream" in row["what"] and "has not committed" in row["observed"]
    assert row["threshold"] == "sensor timeout 3s"


def _tuning_week(spark, warehouse: str, monkeypatch, **env: str) -> tuple[Any, list[Any]]:
    """Run the tuning DAG for the week Monday 2026-11-16 .. Sunday 2026-11-22 (it holds the
    generated days) with these settings; its recommendation row and its alerts."""
    from airflow.dag_processing.dagbag import DagBag
    from pyspark.sql import functions as F

    from tally.tables import exists, read_table

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    dag = DagBag(dag_folder=str(H.DAGS_DIR)).dags[H.TUNING]
    dr = dag.test(logical_date=datetime(2026, 11, 23, 3, 0, tzinfo=UTC))
    assert str(dr.state) == "success"
    (row,) = read_table(spark, warehouse, "lateness_recommendations").collect()
    alerts = (
        read_table(spark, warehouse, "alerts").where(F.col("task_id") == "tune_lateness").collect()
        if exists(spark, warehouse, "alerts")
        else []
    )
    return row, alerts


def test_weekly_tuning_records_a_recommendation(spark, warehouse, monkeypatch) -> None:
    # A 2 h bound outlasts every delay the generator makes (heavy tail <= 30 min, clocks
    # ahead <= 1 h): it meets the target, so the week records and raises nothing.
    row, alerts = _tuning_week(spark, warehouse, monkeypatch, TALLY_LATENESS="2h")
    assert (row["period_start"], row["period_end"]) == (date(2026, 11, 16), date(2026, 11, 22))
    assert row["events"] > 1000 and row["configured_lateness_ms"] == 7_200_000
    assert row["configured_meets_target"] is True and alerts == []
    curve = json.loads(row["curve"])
    smallest = min(p["lateness_ms"] for p in curve if p["meets_target"])
    assert row["target_pct"] == 99.9 and row["recommended_lateness_ms"] == smallest

    # No bound reaches 100 % on a feed with late events: the re-run replaces the week's row
    # and warns once.
    row, alerts = _tuning_week(
        spark, warehouse, monkeypatch, TALLY_LATENESS="0s", TALLY_COMPLETENESS_TARGET="100"
    )
    assert row["configured_meets_target"] is False and row["configured_lateness_ms"] == 0
    assert row["recommended_lateness_ms"] is None
    (alert,) = alerts
    assert alert["severity"] == "warning" and alert["business_date"] == date(2026, 11, 22)
    assert "completeness target" in alert["what"] and "100.0%" in alert["threshold"]
    assert "no bound in the curve reaches it" in alert["threshold"]


def test_streaming_health_check_runs(spark, warehouse, tmp_path, monkeypatch) -> None:
    from pyspark.sql import functions as F

    from tally.tables import exists, read_table

    def health_alerts(where: str) -> list[Any]:
        if not exists(spark, where, "alerts"):
            return []
        table = read_table(spark, where, "alerts")
        return table.where(F.col("task_id") == "check_stream_health").collect()

    run_at = datetime(2026, 11, 23, 0, 5, tzinfo=UTC)
    dag = H.dag_bag().dags[H.HEALTH]
    # One live micro-batch: no steady state to compare with, nothing to alert on.
    assert str(dag.test(logical_date=run_at).state) == "success"
    assert health_alerts(warehouse) == []
    # The same check on a warehouse the stream never wrote: it ran, and says so.
    empty = str(tmp_path / "no-stream")
    monkeypatch.setenv("TALLY_WAREHOUSE", empty)
    # The DAG parsed again under the new warehouse, the first one's asset forgotten: a
    # `tally_restatements` asset left active at the other URI makes this run's outlet inactive
    # and fails check_restatements (as it did on CI).
    dag = H.dag_bag().dags[H.HEALTH]
    assert str(dag.test(logical_date=run_at).state) == "success"  # a warning does not fail
    (alert,) = health_alerts(empty)
    assert (alert["what"], alert["severity"]) == ("stream has committed no micro-batch", "warning")
