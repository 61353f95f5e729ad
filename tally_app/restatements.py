"""Dates that changed after their run, acted on by the policy (`restatement_policy`): what
`tally restatements` and the Airflow check both call.

`batch.restatements.check` finds the reconciled dates the stream touched since their latest
run and what exactly they gained. Then, per date with a change:

* policy `flag`: recorded `pending` (by the check); the date stays reopened until re-run;
* policy `rerun`: the date's nightly sequence runs again (`run_nightly`: a new run in the run
  history, the restated one kept and reproducible). Within the tolerance, and when the new
  run needs no person (`needs_person`), it is signed off automatically (`auto`, the reason
  naming the change and the run restated) and recorded `auto_accepted`; otherwise it is
  recorded `rerun` and awaits a person's sign-off (the DAG asks in Required Actions).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

from batch.reconcile import rerun_arguments
from batch.restatements import Restatement, check, record
from tally import restatements as R
from tally.settings import Settings
from tally_app.nightly import NightlyOutcome, run_nightly
from tally_app.signoffs import SignOff, date_status, needs_person, record_signoff

DECIDED_BY = "tally"  # who signs off a restatement within the tolerance


@dataclass(frozen=True)
class Settled:
    """A checked date and what was done: its final status and, when re-run, the new run."""

    restatement: Restatement
    status: str
    rerun: NightlyOutcome | None = None

    def describe(self) -> str:
        r = self.restatement
        head = f"{r.business_date.isoformat()}: run {r.run_time.isoformat()}"
        if self.status == R.UNCHANGED:
            return f"{head}: unchanged (the stream's {r.signal[0]:,} new event(s) were repeats)"
        what = f"{head}: restated, {r.change.describe()}"
        if self.status == R.PENDING:
            return f"{what}; pending (policy flag: re-run the date to settle it)"
        if self.status == R.AUTO_ACCEPTED:
            return f"{what}; re-run and signed off automatically (within the tolerance)"
        return f"{what}; re-run, awaiting sign-off"


def settle(
    settings: Settings,
    now: datetime,
    spark: Any,
    report_to: Path,
    only: Sequence[date] | None = None,
) -> list[Settled]:
    """Check the reconciled dates (or `only`) and act on each change by the policy."""
    tolerance = (settings.restatement_tolerance_events, settings.restatement_tolerance_amount)
    found = check(
        spark,
        settings.warehouse,
        now=now,
        policy=settings.restatement_policy,
        tolerance=tolerance,
        dedup=settings.dedup,
        only=only,
    )
    out = []
    for restatement in found:
        if restatement.status not in (R.AUTO_ACCEPTED, R.RERUN):
            out.append(Settled(restatement, restatement.status))
            continue
        out.append(_rerun(settings, restatement, now, spark, report_to))
    return out


def _rerun(
    settings: Settings, restatement: Restatement, now: datetime, spark: Any, report_to: Path
) -> Settled:
    """Run the date's nightly sequence again with its run's windowing and zone, sign it off
    when it may be, and record the restatement with the new run."""
    day = restatement.business_date
    outcome = run_nightly(_date_settings(settings, restatement), day, now, spark, report_to)
    result = outcome.reconciliation
    status = date_status(result.summary, {"success": outcome.validation.success})
    final = restatement.status
    restated = restatement.run_time.isoformat()
    reason = f"restatement of run {restated}: {restatement.change.describe()}"
    if final == R.AUTO_ACCEPTED and needs_person(status):
        final = R.RERUN  # within the tolerance, but the new run itself needs a person
    if final == R.AUTO_ACCEPTED:
        tolerance = (
            f"{settings.restatement_tolerance_events:,} events, "
            f"{settings.restatement_tolerance_amount:,} amount"
        )
        signoff = SignOff(
            day,
            "auto",
            DECIDED_BY,
            now,
            reason=f"{reason} (within the tolerance: {tolerance})",
            status=status,
            run_time=now,
        )
        record_signoff(spark, settings.warehouse, signoff)
    record(
        spark,
        settings.warehouse,
        dataclasses.replace(restatement, status=final),
        now=now,
        policy=settings.restatement_policy,
        settled=(now, DECIDED_BY if final == R.AUTO_ACCEPTED else "", reason),
    )
    return Settled(restatement, final, outcome)


def _date_settings(settings: Settings, restatement: Restatement) -> Settings:
    """The settings with the windowing and zone of the run restated (`rerun_arguments`)."""
    arguments = rerun_arguments(restatement.run)
    return dataclasses.replace(
        settings,
        window=arguments["window_ms"],
        window_slide=arguments["window_slide_ms"] or 0,
        session_gap=arguments["session_gap_ms"],
        report_timezone=arguments["report_timezone"],
    )
