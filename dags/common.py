"""Wiring shared by the tally DAG files. Cheap to import: no Spark, no batch layer.

Environment (besides the `TALLY_*` settings of `tally.settings`), with defaults:

- `TALLY_SPARK_RUNNER` (`local`): `local` runs the stages in the task's process; `submit` runs
  them as `spark-submit` jobs through the connection `tally_spark` (`AIRFLOW_CONN_TALLY_SPARK`).
- `TALLY_NIGHTLY_SCHEDULE` (`30 0 * * *`): cron of the nightly run, in `report_timezone`.
- `TALLY_NIGHTLY_START` (`2026-11-20`): first business date the nightly DAG reconciles;
  catch-up back-fills from it.
- `TALLY_HEALTH_SCHEDULE` (`*/5 * * * *`): cron of the streaming health check.
- `TALLY_TUNING_SCHEDULE` (`0 3 * * 1`): cron of the weekly lateness tuning (the week before).
- `TALLY_RETRIES`, `TALLY_RETRY_DELAY`, `TALLY_MAX_RETRY_DELAY` (`2`, `5m`, `1h`): retries with
  exponential back-off.
- `TALLY_SENSOR_POKE`, `TALLY_SENSOR_TIMEOUT` (`5m`, `6h`): the watermark sensor.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from airflow.sdk import Asset, BaseSensorOperator, CronDataIntervalTimetable, task
from airflow.sdk.exceptions import AirflowSensorTimeout

from tally.alerts import Alert, AlertRaised, TallyAlertNotifier, business_date_of, plain_utc
from tally.settings import Settings, SettingsError, format_duration, parse_duration

DAGS_DIR = Path(__file__).resolve().parent
SPARK_APP = DAGS_DIR / "spark_apps" / "tally_task.py"
OWNER = "tally-data-platform"
RUNNERS = ("local", "submit")
SPARK_CONN_ID = "tally_spark"  # AIRFLOW_CONN_TALLY_SPARK
DEFAULTS = {
    "TALLY_SPARK_RUNNER": "local",
    "TALLY_NIGHTLY_SCHEDULE": "30 0 * * *",
    "TALLY_NIGHTLY_START": "2026-11-20",
    "TALLY_HEALTH_SCHEDULE": "*/5 * * * *",
    "TALLY_TUNING_SCHEDULE": "0 3 * * 1",
    "TALLY_RETRIES": "2",
    "TALLY_RETRY_DELAY": "5m",
    "TALLY_MAX_RETRY_DELAY": "1h",
    "TALLY_SENSOR_POKE": "5m",
    "TALLY_SENSOR_TIMEOUT": "6h",
}


def env_value(name: str, env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    return env.get(name) or DEFAULTS[name]


def env_duration(name: str, env: Mapping[str, str] | None = None) -> timedelta:
    return timedelta(milliseconds=parse_duration(env_value(name, env), name))


def spark_runner(env: Mapping[str, str] | None = None) -> str:
    runner = env_value("TALLY_SPARK_RUNNER", env)
    if runner not in RUNNERS:
        raise SettingsError(
            f"TALLY_SPARK_RUNNER: expected one of {', '.join(RUNNERS)}, got {runner!r}"
        )
    return runner


def first_business_date(env: Mapping[str, str] | None = None) -> date:
    text = env_value("TALLY_NIGHTLY_START", env)
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise SettingsError(f"TALLY_NIGHTLY_START: expected YYYY-MM-DD, got {text!r}") from None


def start_date_for(first: date, report_timezone: str = "UTC") -> datetime:
    """DAG start_date whose first data interval covers business date `first`: its local
    midnight in the report time zone (the timetables run in that zone)."""
    return datetime(first.year, first.month, first.day, tzinfo=ZoneInfo(report_timezone))


def default_args(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Owner, retries with exponential back-off and the alerting failure callback."""
    retries = int(env_value("TALLY_RETRIES", env))
    if retries < 0:
        raise SettingsError(f"TALLY_RETRIES: must not be negative, got {retries}")
    return {
        "owner": OWNER,
        "retries": retries,
        "retry_delay": env_duration("TALLY_RETRY_DELAY", env),
        "retry_exponential_backoff": 2.0,
        "max_retry_delay": env_duration("TALLY_MAX_RETRY_DELAY", env),
        "on_failure_callback": [TallyAlertNotifier()],
    }


def daily_timetable(settings: Settings, env: Mapping[str, str] | None = None) -> Any:
    """Nightly data intervals (default 00:30 to 00:30 in the report time zone): a run's
    `data_interval_start` falls on the business date it reconciles, and it starts when the
    interval has ended (the sensor then waits for the stream)."""
    return CronDataIntervalTimetable(
        env_value("TALLY_NIGHTLY_SCHEDULE", env), timezone=settings.report_timezone
    )


def weekly_timetable(settings: Settings, env: Mapping[str, str] | None = None) -> Any:
    return CronDataIntervalTimetable(
        env_value("TALLY_TUNING_SCHEDULE", env), timezone=settings.report_timezone
    )


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
    allowed lateness (`tally.nightly.wait_condition`). On timeout (a stalled stream) it fails
    with an alert saying how far the watermark got."""

    ui_color = "#e8f2fb"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._last_detail = "not checked"

    def poke(self, context: Any) -> bool:
        from tally.nightly import wait_condition
        from tally.settings import load_settings

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


def watermark_sensor(env: Mapping[str, str] | None = None) -> StreamWatermarkSensor:
    return StreamWatermarkSensor(
        task_id="wait_for_stream_watermark",
        mode="reschedule",
        poke_interval=env_duration("TALLY_SENSOR_POKE", env).total_seconds(),
        timeout=env_duration("TALLY_SENSOR_TIMEOUT", env).total_seconds(),
        doc_md="Waits (reschedule mode) until `stream_progress` shows a watermark past the end "
        "of the business date plus the allowed lateness; times out with a critical alert.",
    )


def stage_task(
    stage: str,
    task_id: str,
    *,
    outlets: Sequence[Asset] = (),
    doc_md: str = "",
    env: Mapping[str, str] | None = None,
) -> Any:
    """One stage of `dags.stages` as a task: in-process (`local`) or `spark-submit`."""
    if spark_runner(env) == "submit":
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
    interval = (
        "data_interval_start if data_interval_start "
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
            "{{ (data_interval_end if data_interval_end else dag_run.run_after).isoformat() }}",
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
        env_vars={"PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python},
        outlets=list(outlets),
        doc_md=doc_md,
    )
