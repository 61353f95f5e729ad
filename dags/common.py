"""Wiring shared by the tally DAG files. Cheap to import: no Spark, no batch layer.

Everything configurable is a tally setting (`tally.settings`, `TALLY_*` in the environment):
`spark_runner` (`local` runs the stages in the task's process, `submit` as `spark-submit` jobs
through the connection `tally_spark`, `AIRFLOW_CONN_TALLY_SPARK`), `nightly_schedule`,
`nightly_start` (first business date; catch-up back-fills from it), `health_schedule`,
`tuning_schedule` (crons in `report_timezone`), `retries`, `retry_delay`, `max_retry_delay`
(exponential back-off), `sensor_poke`, `sensor_timeout` (the watermark sensor).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping, Sequence
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from airflow.sdk import Asset, BaseSensorOperator, CronDataIntervalTimetable, task
from airflow.sdk.exceptions import AirflowSensorTimeout

from dags.alerting import AlertRaised, TallyAlertNotifier
from tally.alert import Alert
from tally.dates import business_date_of, plain_utc
from tally.durations import format_duration
from tally.settings import Settings, SettingsError, load_settings

DAGS_DIR = Path(__file__).resolve().parent
SPARK_APP = DAGS_DIR / "spark_apps" / "tally_task.py"
OWNER = "tally-data-platform"
SPARK_CONN_ID = "tally_spark"  # AIRFLOW_CONN_TALLY_SPARK


def wiring_settings(doc: str | None) -> tuple[Settings, str]:
    """The settings a DAG file is wired with at parse time, and its doc. One bad `TALLY_*`
    value must not make every DAG vanish from Airflow: the DAGs are then wired from the
    defaults, their doc opens with the setting's one line, and each task, which loads the
    settings again when it runs, fails with that line (nothing runs on the defaults)."""
    try:
        return load_settings(), doc or ""
    except SettingsError as exc:
        logging.getLogger(__name__).error(
            "tally settings: %s (the DAGs are wired from the defaults)", exc
        )
        return (
            Settings(),
            f"**Settings error: {exc}** Every task fails with it until it is fixed.\n\n{doc or ''}",
        )


def first_business_date(settings: Settings) -> date:
    return date.fromisoformat(settings.nightly_start)


def start_date_for(first: date, report_timezone: str = "UTC") -> datetime:
    """DAG start_date whose first data interval covers business date `first`: its local
    midnight in the report time zone (the timetables run in that zone)."""
    return datetime(first.year, first.month, first.day, tzinfo=ZoneInfo(report_timezone))


def default_args(settings: Settings) -> dict[str, Any]:
    """Owner, retries with exponential back-off and the alerting failure callback."""
    return {
        "owner": OWNER,
        "retries": settings.retries,
        "retry_delay": timedelta(milliseconds=settings.retry_delay),
        "retry_exponential_backoff": 2.0,
        "max_retry_delay": timedelta(milliseconds=settings.max_retry_delay),
        "on_failure_callback": [TallyAlertNotifier()],
    }


def daily_timetable(settings: Settings) -> Any:
    """Nightly data intervals (default 00:30 to 00:30 in the report time zone): a run's
    `data_interval_start` falls on the business date it reconciles, and it starts when the
    interval has ended (the sensor then waits for the stream)."""
    return CronDataIntervalTimetable(settings.nightly_schedule, timezone=settings.report_timezone)


def weekly_timetable(settings: Settings) -> Any:
    return CronDataIntervalTimetable(settings.tuning_schedule, timezone=settings.report_timezone)


def warehouse_uri(warehouse: str) -> str:
    """The warehouse as a URI: directories become absolute `file://` URIs."""
    if "://" in warehouse:
        return warehouse.rstrip("/")
    return Path(warehouse).resolve().as_uri()


def reconciliation_asset(settings: Settings) -> Asset:
    """The `reconciliation` Delta table, produced by the nightly DAG's publish task."""
    return Asset(
        name="tally_reconciliation",
        uri=f"{warehouse_uri(settings.warehouse)}/reconciliation",
        group="tally",
        extra={"format": "delta", "partitioned_by": "business_date"},
    )


def restatements_asset(settings: Settings) -> Asset:
    """The `restatements` Delta table: the health DAG's restatement check emits it when the
    policy re-runs a date (extra: the dates); it triggers the `tally_restatements` DAG."""
    return Asset(
        name="tally_restatements",
        uri=f"{warehouse_uri(settings.warehouse)}/restatements",
        group="tally",
        extra={"format": "delta"},
    )


def interval_of(context: Mapping[str, Any]) -> tuple[datetime, datetime]:
    """The run's data interval. A run triggered without a logical date has none: it then
    covers the day before its `run_after` (like a manual trigger of the nightly schedule)."""
    start = context.get("data_interval_start")
    end = context.get("data_interval_end")
    if start is None or end is None:
        run_after = getattr(context.get("dag_run"), "run_after", None)
        if run_after is None:
            raise ValueError("the run has neither a data interval nor run_after")
        start, end = run_after - timedelta(days=1), run_after
    return plain_utc(start), plain_utc(end)


# -- tasks --------------------------------------------------------------------------------------


class StreamWatermarkSensor(BaseSensorOperator):
    """Waits until the streaming watermark passed the end of the run's business date plus the
    allowed lateness (`tally_app.nightly.wait_condition`). On timeout (a stalled stream) it fails
    with an alert saying how far the watermark got."""

    ui_color = "#e8f2fb"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._last_detail = "not checked"

    def poke(self, context: Any) -> bool:
        from tally.settings import load_settings
        from tally_app.nightly import wait_condition

        settings = load_settings()
        start, _ = interval_of(context)
        day = business_date_of(start, settings.report_timezone)
        result = wait_condition(settings, day)
        self._last_detail = result.detail
        self.log.info("business date %s: %s", day, result.detail)
        return bool(result.ready)

    def execute(self, context: Any) -> Any:
        try:
            return super().execute(context)
        except AirflowSensorTimeout as exc:
            raise AlertRaised(
                [
                    Alert(
                        "stream watermark did not pass the end of the business day plus "
                        "allowed lateness before the sensor timed out (stream stalled?)",
                        observed=self._last_detail,
                        threshold=f"sensor timeout {format_duration(int(self.timeout * 1000))}",
                        severity="critical",
                    )
                ]
            ) from exc


def watermark_sensor(settings: Settings) -> StreamWatermarkSensor:
    return StreamWatermarkSensor(
        task_id="wait_for_stream_watermark",
        mode="reschedule",
        poke_interval=settings.sensor_poke / 1000,
        timeout=settings.sensor_timeout / 1000,
        doc_md="Waits (reschedule mode) until `stream_progress` shows a watermark past the end "
        "of the business date plus the allowed lateness; times out with a critical alert.",
    )


def stage_task(
    settings: Settings,
    stage: str,
    task_id: str,
    *,
    outlets: Sequence[Asset] = (),
    doc_md: str = "",
) -> Any:
    """One stage of `dags.stages` as a task: in-process (`local`) or `spark-submit`."""
    if settings.spark_runner == "submit":
        return _submit_task(stage, task_id, outlets=outlets, doc_md=doc_md)

    @task(task_id=task_id, outlets=list(outlets), doc_md=doc_md)
    def run_stage() -> dict[str, Any]:
        from airflow.sdk import get_current_context

        from dags.stages import run_stage as run

        context = get_current_context()
        start, end = interval_of(context)
        return run(stage, start, end, context=context)

    return run_stage()


def _submit_task(stage: str, task_id: str, *, outlets: Sequence[Asset], doc_md: str) -> Any:
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from tally.spark import DELTA_PACKAGE, delta_jars

    jars = delta_jars()
    python = os.environ.get("PYSPARK_PYTHON", sys.executable)
    # A run triggered without a logical date has no data interval in its context at all (not
    # None): `is defined` first, or the template fails on the undefined name.
    interval = (
        "data_interval_start if data_interval_start is defined and data_interval_start "
        "else dag_run.run_after - macros.timedelta(days=1)"
    )
    return SparkSubmitOperator(
        task_id=task_id,
        application=str(SPARK_APP),
        application_args=[
            stage,
            "--interval-start",
            "{{ (" + interval + ").isoformat() }}",
            "--interval-end",
            "{{ (data_interval_end if data_interval_end is defined and data_interval_end "
            "else dag_run.run_after).isoformat() }}",
            "--dag-id",
            "{{ dag.dag_id }}",
            "--task-id",
            "{{ task.task_id }}",
            "--run-id",
            "{{ run_id }}",
        ],
        conn_id=SPARK_CONN_ID,
        name=f"tally-{stage}",
        jars=",".join(jars) or None,
        packages=None if jars else DELTA_PACKAGE,
        conf={
            "spark.sql.session.timeZone": "UTC",
            "spark.pyspark.python": python,
            "spark.pyspark.driver.python": python,
        },
        env_vars={
            "PYSPARK_PYTHON": python,
            "PYSPARK_DRIVER_PYTHON": python,
            # A task process blocks Airflow's database for its children
            # (AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=airflow-db-not-allowed:///), and the
            # submitted app imports Airflow (alert delivery): Airflow's own switch for a Python
            # subprocess of a task lets it import without a database.
            "PYTHON_OPERATORS_VIRTUAL_ENV_MODE": "1",
        },
        outlets=list(outlets),
        doc_md=doc_md,
    )
