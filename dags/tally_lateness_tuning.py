"""
### tally lateness tuning

Weekly (`TALLY_TUNING_SCHEDULE`, Mondays 03:00): replays the arrivals of the week's business
dates from the `events` log through the lateness curve (`batch.curve`): completeness and emit
latency per lateness bound. Records the smallest bound reaching `completeness_target` in the
Delta table `lateness_recommendations` (one row per week, replaced on re-run) and alerts when
the configured `lateness` falls short of the target. Beside the curve it records the bounds the
stream had in force per partition (`stream_progress`; under `lateness = "auto"` the ones auto
chose) and, under auto, alerts when a partition's stayed narrower than the curve's
recommendation.
"""

from __future__ import annotations

from datetime import date, timedelta

from airflow.sdk import dag

from dags.common import default_args, stage_task, start_date_for, weekly_timetable, wiring_settings

_settings, _doc = wiring_settings(__doc__)


@dag(
    dag_id="tally_lateness_tuning",
    schedule=weekly_timetable(_settings),
    start_date=start_date_for(date(2026, 11, 16), _settings.report_timezone),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=4),
    default_args=default_args(_settings),
    tags=["tally", "lateness", "weekly"],
    doc_md=_doc,
)
def tally_lateness_tuning() -> None:
    stage_task(
        _settings,
        "tune",
        "tune_lateness",
        doc_md="Lateness curve over the week's events; record the recommended bound.",
    )


tally_lateness_tuning()
