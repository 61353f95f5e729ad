"""A date that changes after its sign-off, in Airflow (issue 40 part 2), with `dag.test()` (tasks
in this process, sharing the test Spark session) against the throw-away Airflow database.

The scenario of tests/test_restatements.py: a day streamed, reconciled and signed off; then 3
late first arrivals for it and a duplicate. Under policy rerun with no tolerance, the health
DAG's check warns and emits the asset `tally_restatements` naming the date; the
`tally_restatements` DAG re-runs it and waits in Required Actions, the signed-off run's
figures beside the new run's; accepted by a reviewer with a reason, the decision is recorded
for the new run in `restatements` and `signoffs`, the ledger shows the date settled, and the
signed-off run still reproduces. Checked again, nothing is found and nothing is emitted.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import airflow_helpers as H  # first: points Airflow at a temporary AIRFLOW_HOME
import pytest
from stream_helpers import run_processor
from test_restatements import (
    DAY,
    LATE_AMOUNTS,
    NEXT,
    PARAMS,
    _late_batch,
    _ledger_row,
    reconcile_the_day,
)

pytestmark = pytest.mark.slow

REASON = "late card settlement file, ticket 881"


def _asset_events() -> list[Any]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return list(
            session.scalars(
                select(AssetEvent.extra)
                .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
                .where(AssetModel.name == "tally_restatements")
                .order_by(AssetEvent.timestamp)
            )
        )


def _hitl_body(run_id: str) -> str:
    from airflow.models.hitl import HITLDetail
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return str(
            session.scalars(
                select(HITLDetail.body)
                .join(TaskInstance, HITLDetail.ti_id == TaskInstance.id)
                .where(TaskInstance.dag_id == H.RESTATEMENTS, TaskInstance.run_id == run_id)
            ).one()
        )


def _states(dr: Any) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in dr.get_task_instances()}


def test_a_restated_date_is_rerun_and_signed_off_again_in_airflow(
    spark, warehouse, tmp_path, monkeypatch
) -> None:
    from pyspark.sql import functions as F

    from batch.reconcile import runs_of
    from batch.reproduce import verify
    from tally import tables as T

    first_run = reconcile_the_day(spark, warehouse, tmp_path)
    env = {
        "TALLY_WAREHOUSE": warehouse,
        "TALLY_WINDOW": "60s",
        "TALLY_SPARK_MASTER": "local[2]",
        "TALLY_SHUFFLE_PARTITIONS": "2",
        "TALLY_REPORT_DIR": str(tmp_path / "reports"),
        "TALLY_GX_ROOT": str(tmp_path / "gx"),
        "TALLY_LATE_RATE_WARN": "0.5",
        "TALLY_LATE_RATE_FAIL": "0.9",
        "TALLY_DUPLICATE_RATE_MAX": "0.5",
        "TALLY_WATERMARK_LAG_MAX": "24h",
        "TALLY_RETRIES": "0",
        "TALLY_RESTATEMENT_POLICY": "rerun",
    }
    for key in ("TALLY_CONFIG", "TALLY_SPARK_RUNNER", "AIRFLOW_CONN_TALLY_SMTP"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    bag = H.dag_bag()
    health, restatements = bag.dags[H.HEALTH], bag.dags[H.RESTATEMENTS]

    # the late file, after the signed-off run: 3 first arrivals and a copy of e0
    late = [_late_batch(NEXT + 2 * 3_600_000)]
    run_processor(spark, warehouse, tmp_path / "in", late, PARAMS, first_batch=2)
    assert _ledger_row(warehouse)["status"] == "reopened"

    # the health DAG's check: a warning naming the date, the asset emitted with it
    before = len(_asset_events())
    dr = health.test(logical_date=datetime(2026, 11, 20, 3, tzinfo=UTC))
    assert _states(dr)["check_restatements"] == "success"
    assert _asset_events()[before:] == [{"dates": [DAY.isoformat()]}]
    (alert,) = (
        T.read_table(spark, warehouse, "alerts")
        .where(F.col("task_id") == "check_restatements")
        .collect()
    )
    assert alert["severity"] == "warning" and alert["business_date"] == DAY
    assert f"+3 events, +{sum(LATE_AMOUNTS)} amount, 2 windows" in alert["what"]

    # the restatements DAG: re-run, then Required Actions; the reviewer accepts
    answer = H.answer_sign_off("Accept", REASON, dag_id=H.RESTATEMENTS)
    dr = restatements.test()
    answer.join(timeout=5)
    assert str(dr.state) == "success", _states(dr)
    assert _states(dr) == {"rerun_dates": "success", "sign_off": "success"}
    body = _hitl_body(dr.run_id)
    assert f"**{DAY.isoformat()}**: +3 events" in body
    assert "| batch_count | 20 | 23 |" in body, body

    runs = runs_of(spark, warehouse, DAY)
    assert [r["run_number"] for r in runs] == [1, 2]
    new_run = runs[-1]["run_time"]
    rows = T.read_table(spark, warehouse, T.RESTATEMENTS.name).orderBy("detected_at").collect()
    assert [r["status"] for r in rows] == ["rerun", "accepted"]
    assert (rows[-1]["decided_by"], rows[-1]["reason"]) == ("reviewer", REASON)
    assert rows[-1]["rerun_time"] == new_run and rows[-1]["new_events"] == 3
    signoff = T.read_table(spark, warehouse, "signoffs").orderBy("decided_at").collect()[-1]
    assert (signoff["decision"], signoff["decided_by"], signoff["reason"]) == (
        "accepted",
        "reviewer",
        REASON,
    )
    assert signoff["run_time"] == new_run and signoff["dag_id"] == H.RESTATEMENTS
    row = _ledger_row(warehouse)
    assert row["status"] == "explained_by_late" and row["reopened"] is None
    assert row["signoff"]["decision"] == "accepted" and row["signoff"]["superseded"] is False
    report = (tmp_path / "reports" / f"report-{DAY.isoformat()}.html").read_text("utf-8")
    assert "<b>accepted</b> by reviewer" in report and REASON in report
    # the signed-off run stays in the history and still reproduces
    now = datetime.now(UTC)
    assert verify(spark, warehouse, DAY, first_run, now=now, audit_window_ms=10**12).matched

    # checked again: nothing changed since the new run, nothing emitted (the task skipped)
    dr = health.test(logical_date=datetime(2026, 11, 20, 4, tzinfo=UTC))
    assert _states(dr)["check_restatements"] == "skipped"
    assert len(_asset_events()) == before + 1
