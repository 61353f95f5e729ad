"""
### tally restatements

Runs when the health DAG's **check_restatements** emits the asset `tally_restatements`: a
reconciled date gained first arrivals after its run and the policy (`restatement_policy =
rerun`) re-runs it. A manual trigger re-runs every date changed since its run.

1. **rerun_dates**: each date's nightly sequence again (re-aggregate + diff, validate,
   report, publish) with the windowing and zone of the run it restates: a new run in the run
   history; the restated run stays there and reproducible (`tally reconcile --reproduce`).
   Within `restatement_tolerance_events` / `restatement_tolerance_amount`, and with nothing
   unexplained, the date is signed off automatically with the reason recorded.
2. **sign_off**: the dates re-run beyond the tolerance wait in **Required Actions**, each
   figure of the signed-off run beside the new run's: *Accept* with a reason, or *Reject* (an
   alert, the run fails, the date stays awaiting sign-off). Unanswered after
   `TALLY_SIGNOFF_TIMEOUT`: an alert. Decisions go to `restatements` and `signoffs`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import chain, dag

from dags.common import default_args, restatements_asset, wiring_settings
from dags.restatements import rerun_task, restatement_sign_off_task

_settings, _doc = wiring_settings(__doc__)


@dag(
    dag_id="tally_restatements",
    schedule=[restatements_asset(_settings)],
    start_date=datetime(2026, 11, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=12),
    default_args=default_args(_settings),
    tags=["tally", "reconciliation", "restatements"],
    doc_md=_doc,
)
def tally_restatements() -> None:
    chain(rerun_task(_settings), restatement_sign_off_task(_settings))


tally_restatements()
