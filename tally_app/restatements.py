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

from batch.reconcile import FIGURES, aware, rerun_arguments
from batch.restatements import Restatement, awaiting, check, decided, record
from tally import restatements
from tally.settings import Settings
from tally_app.nightly import NightlyOutcome, run_nightly
from tally_app.signoffs import (
    SignOff,
    date_status,
    needs_person,
    record_asked,
    record_signoff,
)

DECIDED_BY = "tally"  # who signs off a restatement within the tolerance


@dataclass(frozen=True)
class Settled:
    """A checked date and what was done: its final status and, when re-run, the new run."""

    restatement: Restatement
    status: str
    rerun: NightlyOutcome | None = None
    rerun_time: datetime | None = None  # the new run's (reconciliation_runs.run_time)

    def describe(self) -> str:
        r = self.restatement
        head = f"{r.business_date.isoformat()}: run {r.run_time.isoformat()}"
        if self.status == restatements.UNCHANGED:
            return f"{head}: unchanged (the stream's {r.signal[0]:,} new event(s) were repeats)"
        what = f"{head}: restated, {r.change.describe()}"
        if self.status == restatements.PENDING:
            return f"{what}; pending (policy flag: re-run the date to settle it)"
        if self.status == restatements.AUTO_ACCEPTED:
            return f"{what}; re-run and signed off automatically (within the tolerance)"
        return f"{what}; re-run, awaiting sign-off"


def checked(
    settings: Settings, now: datetime, spark: Any, only: Sequence[date] | None = None
) -> list[Restatement]:
    """The reconciled dates (or `only`) that changed after their run, each decided by the
    policy (`batch.restatements.check`; nothing re-run here)."""
    tolerance = (settings.restatement_tolerance_events, settings.restatement_tolerance_amount)
    return check(
        spark,
        settings.warehouse,
        now=now,
        policy=settings.restatement_policy,
        tolerance=tolerance,
        dedup=settings.dedup,
        only=only,
    )


def to_rerun(found: Sequence[Restatement]) -> list[date]:
    """The dates the policy re-runs (`auto_accepted` or `rerun` as checked)."""
    return [
        r.business_date
        for r in found
        if r.status in (restatements.AUTO_ACCEPTED, restatements.RERUN)
    ]


def settle(
    settings: Settings,
    now: datetime,
    spark: Any,
    report_to: Path,
    only: Sequence[date] | None = None,
) -> list[Settled]:
    """Check the reconciled dates (or `only`) and act on each change by the policy."""
    found = checked(settings, now, spark, only)
    out = []
    for restatement in found:
        if restatement.status not in (restatements.AUTO_ACCEPTED, restatements.RERUN):
            out.append(Settled(restatement, restatement.status))
            continue
        out.append(_rerun(settings, restatement, now, spark, report_to))
    open_reopened(settings, spark, [(s.restatement, s.status) for s in out], now)
    return out


def open_reopened(
    settings: Settings, spark: Any, found: Sequence[tuple[Restatement, str]], now: datetime
) -> None:
    """Each date left waiting for someone (flagged `pending`, or re-run and awaiting sign-off:
    `rerun`) is an open item (`reopened`)."""
    for restatement, status in found:
        if status in (restatements.PENDING, restatements.RERUN):
            run_time = restatement.run_time if status == restatements.PENDING else now
            record_asked(
                spark,
                settings.warehouse,
                restatement.business_date,
                "reopened",
                now,
                run_time,
                settings.signoff_people,
            )


def _rerun(
    settings: Settings, restatement: Restatement, now: datetime, spark: Any, report_to: Path
) -> Settled:
    """Run the date's nightly sequence again with its run's windowing and zone, sign it off
    when it may be, and record the restatement with the new run."""
    day = restatement.business_date
    outcome = run_nightly(_date_settings(settings, restatement), day, now, spark, report_to)
    status = _date_status(outcome)
    final = restatement.status
    restated = restatement.run_time.isoformat()
    reason = f"restatement of run {restated}: {restatement.change.describe()}"
    if final == restatements.AUTO_ACCEPTED and needs_person(status):
        final = restatements.RERUN  # within the tolerance, but the new run itself needs a person
    if final == restatements.AUTO_ACCEPTED:
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
        settled=(now, DECIDED_BY if final == restatements.AUTO_ACCEPTED else "", reason),
    )
    return Settled(restatement, final, outcome, now)


def _date_status(outcome: NightlyOutcome) -> str:
    summary = outcome.reconciliation.summary
    return date_status(summary, {"success": outcome.validation.success})


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


def before_after(settled: Settled) -> dict[str, Any]:
    """A re-run date for the reviewer: the restated run's figures and the new run's, side by
    side (`FIGURES`), the change and the final status (plain values: an XCom)."""
    r = settled.restatement
    after = {} if settled.rerun is None else settled.rerun.reconciliation.summary
    return {
        "business_date": r.business_date.isoformat(),
        "status": settled.status,
        # the new run's date status (tally_app.signoffs.date_status)
        "date_status": None if settled.rerun is None else _date_status(settled.rerun),
        "change": r.change.describe(),
        "restated_run": r.run_time.isoformat(),
        "new_run": None if settled.rerun_time is None else settled.rerun_time.isoformat(),
        "figures": {f: [r.run.get(f), after.get(f)] for f in FIGURES},
    }


def conclude(
    settings: Settings,
    spark: Any,
    *,
    accepted: bool,
    who: str,
    when: datetime,
    reason: str,
    statuses: dict[date, str],
    airflow_run: tuple[str, str] = ("", ""),
) -> list[tuple[date, datetime]]:
    """A person's decision on every date re-run and awaiting sign-off: the restatement
    recorded `accepted` or `rejected` and the decision appended to `signoffs` for the new run
    (`statuses`: each date's status from its re-run; `airflow_run`: dag and run id). Returns
    each date decided with its new run's time."""
    decision = restatements.ACCEPTED if accepted else restatements.REJECTED
    days = []
    for row in awaiting(spark, settings.warehouse):
        day = row["business_date"]
        decided(
            spark, settings.warehouse, row, status=decision, now=when, decided_by=who, reason=reason
        )
        signoff = SignOff(
            day,
            decision,
            who,
            when,
            reason=reason,
            status=statuses.get(day, "unexplained"),
            run_time=aware(row["rerun_time"]),
            dag_id=airflow_run[0],
            run_id=airflow_run[1],
        )
        record_signoff(spark, settings.warehouse, signoff)
        days.append((day, aware(row["rerun_time"])))
    return days
