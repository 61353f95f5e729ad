"""
### tally nightly reconciliation

Audits one **business date** per run: the date of the run's `data_interval_start` (in
`report_timezone`). Intervals run 00:30 to 00:30 (`TALLY_NIGHTLY_SCHEDULE`), so the run for a
date starts just after it ended.

1. **wait_for_stream_watermark**: sensor (reschedule mode) until the stream's watermark in
   `stream_progress` passed the end of the day plus the allowed lateness. A stalled stream
   makes it time out (`TALLY_SENSOR_TIMEOUT`) with a critical alert.
2. **reaggregate**: re-aggregate the date from the pinned `events` log and diff it against the
   stream (`batch_aggregates`, `reconciliation`, `reconciliation_summary`,
   `reconciliation_runs`).
3. **validate**: Great Expectations on the date's tables; each failed critical expectation
   writes an alert: what, observed, threshold, link.
4. **build_report**: the date's report.
5. **sign_off**: a balanced date (or one whose residual the materiality tolerances grade ok)
   is signed off automatically; an unexplained one (with tolerance rules: graded warn or fail),
   or one with a failed critical expectation, waits in **Required Actions** for a person:
   *Accept* with a reason, or *Reject* (alert; the run fails, the date stays open). Unanswered after
   `TALLY_SIGNOFF_TIMEOUT`: alert, the run fails. A material gap (graded fail, or any without
   tolerance rules) takes two people: a reviewer prepares the decision here...
6. **approve_sign_off**: ...and a second, different one approves it or sends it back
   (Required Actions; nothing to do for other dates). Every step goes to the `signoffs`
   table, the report and the **Reconciliation** view.
7. **publish**: publishes the report; updates the Asset `tally_reconciliation`.

Every write replaces exactly the date, so re-runs and back-fills
(`airflow backfill create --dag-id tally_nightly_reconciliation --from-date ... --to-date ...`)
are idempotent. Catch-up is on from `TALLY_NIGHTLY_START`. Failures alert through
`dags.alerting` (the `alerts` table, plus SMTP/Slack when configured).
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import chain, dag

from dags.common import (
    daily_timetable,
    default_args,
    first_business_date,
    reconciliation_asset,
    stage_task,
    start_date_for,
    watermark_sensor,
    wiring_settings,
)
from dags.signoff import approve_task, sign_off_task
from tally.vocabulary import NIGHTLY_DAG

_settings, _doc = wiring_settings(__doc__)


@dag(
    dag_id=NIGHTLY_DAG,
    schedule=daily_timetable(_settings),
    start_date=start_date_for(first_business_date(_settings), _settings.report_timezone),
    catchup=True,
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=12),
    default_args=default_args(_settings),
    tags=["tally", "reconciliation", "nightly"],
    doc_md=_doc,
)
def tally_nightly_reconciliation() -> None:
    chain(
        watermark_sensor(_settings),
        stage_task(
            _settings,
            "reaggregate",
            "reaggregate",
            doc_md="Re-aggregate the business date from the event log and diff it against "
            "the stream.",
        ),
        stage_task(
            _settings,
            "validate",
            "validate",
            doc_md="Great Expectations on the date's tables; a breach fails with an alert.",
        ),
        stage_task(_settings, "report", "build_report", doc_md="Build the business date's report."),
        sign_off_task(_settings),
        approve_task(_settings),
        stage_task(
            _settings,
            "publish",
            "publish",
            outlets=[reconciliation_asset(_settings)],
            doc_md="Publish the report; emits the `tally_reconciliation` asset event.",
        ),
    )


tally_nightly_reconciliation()
