"""
### tally streaming health

Every five minutes (`TALLY_HEALTH_SCHEDULE`) reads the newest `stream_progress` rows of the
running query and alerts (the `alerts` table, plus SMTP/Slack when configured) when:

* the **watermark lag** exceeds `TALLY_HEALTH_LAG_FACTOR` (3) x its steady state (the median
  lag of the recent batches) and `TALLY_HEALTH_MIN_LAG` (1m);
* the **late-event rate** over the recent batches crosses `late_rate_warn` (warning) or
  `late_rate_fail` (error);
* a **partition is idle** longer than `TALLY_HEALTH_IDLE_MAX` (10m of processing time);
* the **partition spread** grew in each of the last `TALLY_HEALTH_SPREAD_BATCHES` (5) batches
  and ended above the lateness bound.

Error-level findings fail the run (shown red); warnings only alert. Each `TALLY_HEALTH_*`
variable is the tally setting `health_*` (also settable in the TOML config).

Beside it, **check_restatements** looks for reconciled dates the stream changed after their
run (`restatement_policy`): a warning alert per date first found; when the policy re-runs a
date it emits the asset `tally_restatements`, which triggers the `tally_restatements` DAG
(otherwise the task shows skipped). **check_open_items** alerts on each open item (a date
someone must act on: unexplained, awaiting approval, rejected, timed out) that has been open
another `TALLY_AGING_MAX` (7 days): a warning the first time, an error each time after.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import dag, task

from dags.common import default_args, stage_task, wiring_settings
from dags.restatements import check_restatements_task

_settings, _doc = wiring_settings(__doc__)


@dag(
    dag_id="tally_streaming_health",
    schedule=_settings.health_schedule,
    start_date=datetime(2026, 11, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(minutes=10),
    # A check every five minutes: one quick retry for infrastructure hiccups, then the next run.
    default_args={**default_args(_settings), "retries": 1, "retry_delay": timedelta(minutes=1)},
    tags=["tally", "streaming", "monitoring"],
    doc_md=_doc,
)
def tally_streaming_health() -> None:
    stage_task(
        _settings,
        "health",
        "check_stream_health",
        doc_md="Evaluate the recent stream progress; record and send alerts.",
    )
    check_restatements_task(_settings)
    check_open_items_task()


def check_open_items_task() -> Any:
    @task(
        task_id="check_open_items",
        doc_md="An alert for each open item (a date someone must act on) open another "
        "`aging_max` (7 days): a warning the first time, an error each time after.",
    )
    def check_open_items() -> dict[str, Any]:
        from airflow.sdk import get_current_context

        from dags.stages import check_open_items as check
        from tally.settings import load_settings

        context = get_current_context()
        return check(load_settings(), now=context["dag_run"].run_after, context=context)

    return check_open_items()


tally_streaming_health()
