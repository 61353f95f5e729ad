"""Dates that change after their run, in Airflow (docs/airflow.md, "Restated dates").

* `check_restatements_task` (in the health DAG): `tally_app.restatements.checked` every health
  run; a warning alert for each date first found changed; when the policy re-runs a date it
  emits the `tally_restatements` asset (extra: the dates), else it is skipped.
* `rerun_task` (the `tally_restatements` DAG, triggered by the asset): the dates' nightly
  sequence again (`tally_app.restatements.settle`: a new run each, the restated one kept and
  reproducible); within the tolerance signed off automatically.
* `RestatementSignOffOperator`: the dates re-run beyond the tolerance wait in **Required
  Actions**, the signed-off run's figures beside the new run's: *Accept* with a reason or
  *Reject* (an alert; the run fails, the dates stay awaiting). Each decision is appended to
  `restatements` and `signoffs` (for the new run).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.providers.standard.operators.hitl import HITLOperator
from airflow.sdk import task

from dags.alerting import triggering_dates
from dags.common import restatements_asset
from dags.signoff import ACCEPT, REJECT, answer_of, fail_sign_off, reason_param
from tally.dates import parse_business_date
from tally.durations import format_duration
from tally.settings import Settings, load_settings
from tally.vocabulary import SIGNOFF_TASK

RERUN_TASK = "rerun_dates"


def check_restatements_task(settings: Settings) -> Any:
    asset = restatements_asset(settings)

    @task(
        task_id="check_restatements",
        outlets=[asset],
        doc_md="Checks the reconciled dates for first arrivals after their run; a warning per "
        "date found; emits `tally_restatements` when the policy re-runs one (else skipped).",
    )
    def check_restatements() -> dict[str, Any]:
        from airflow.sdk import get_current_context
        from airflow.sdk.exceptions import AirflowSkipException

        from dags.stages import check_restatements as check

        context = get_current_context()
        result = check(load_settings(), now=context["dag_run"].run_after, context=context)
        if not result["rerun"]:
            raise AirflowSkipException(f"no date to re-run (changed: {len(result['found'])})")
        context["outlet_events"][asset].extra = {"dates": result["rerun"]}
        return result

    return check_restatements()


def rerun_task(settings: Settings) -> Any:
    @task(
        task_id=RERUN_TASK,
        doc_md="Re-runs the restated dates' nightly sequence; within the tolerance they are "
        "signed off automatically, otherwise they await the sign-off below.",
    )
    def rerun_dates() -> dict[str, Any]:
        from airflow.sdk import get_current_context

        from dags.stages import rerun_restatements

        context = get_current_context()
        # None (a manual trigger): every changed date is re-run
        dates = triggering_dates(context.get("triggering_asset_events"))
        return rerun_restatements(load_settings(), dates, now=context["dag_run"].run_after)

    return rerun_dates()


def awaiting_of(result: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The re-run dates that wait for a person (status `rerun`)."""
    return [s for s in (result or {}).get("settled", []) if s["status"] == "rerun"]


def before_after_table(dates: list[dict[str, Any]]) -> str:
    """Markdown: per date, each figure of the signed-off run and of the new run."""
    lines = []
    for d in dates:
        lines += [
            f"**{d['business_date']}**: {d['change']}; signed-off run {d['restated_run']}, "
            f"new run {d['new_run']}",
            "",
            "| figure | signed-off run | new run |",
            "|---|---:|---:|",
            *[f"| {name} | {a} | {b} |" for name, (a, b) in d["figures"].items()],
            "",
        ]
    return "\n".join(lines)


class RestatementSignOffOperator(HITLOperator):
    """Sign-off of the dates re-run beyond the tolerance (see the module)."""

    ui_color = "#fff4e0"

    def __init__(self, *, settings: Settings, **kwargs: Any) -> None:
        super().__init__(
            subject="Sign off the restated dates",
            options=[ACCEPT, REJECT],
            multiple=False,
            params=reason_param(),
            response_timeout=timedelta(milliseconds=settings.signoff_timeout),
            **kwargs,
        )

    def _awaiting(self, context: Any) -> list[dict[str, Any]]:
        return awaiting_of(context["ti"].xcom_pull(task_ids=RERUN_TASK))

    def execute(self, context: Any) -> Any:
        dates = self._awaiting(context)
        if not dates:
            return {"decision": "none", "dates": []}
        settings = load_settings()
        names = ", ".join(d["business_date"] for d in dates)
        self.subject = f"Sign off restated {names}: changed after sign-off"
        self.body = (
            f"First arrivals came after the signed-off run of {names} and beyond the "
            "restatement tolerance; the date was re-run.\n\n"
            f"{before_after_table(dates)}\n"
            "Review it under **Reconciliation** (the date page, its report), then **Accept** "
            "with a reason, or **Reject** (an alert; the date stays awaiting sign-off). "
            f"Unanswered after {format_duration(settings.signoff_timeout)}: an alert."
        )
        return super().execute(context)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        if event.get("error_type") == "timeout":
            self._fail(context, "restatement sign-off timed out: nobody decided", "")
        if "error" in event:
            return super().execute_complete(context, event)
        decision, who, reason, when = answer_of(self, event)
        days = self._record(context, decision, who, reason, when)
        if decision == "rejected":
            self._fail(context, f"restatement sign-off: rejected by {who}", reason)
        return {"decision": decision, "by": who, "reason": reason, "dates": days}

    def _record(self, context: Any, decision: str, who: str, reason: str, when: Any) -> list[str]:
        """Record the decision for every awaiting date, then render each date's report again
        to show it."""
        from tally.spark import session_for
        from tally_app.nightly import stage_report
        from tally_app.restatements import conclude

        settings = load_settings()
        spark = session_for(settings, "tally-signoff")
        statuses = {
            parse_business_date(d["business_date"]): d["date_status"]
            for d in self._awaiting(context)
        }
        days = conclude(
            settings,
            spark,
            accepted=decision == "accepted",
            who=who,
            when=when if isinstance(when, datetime) else datetime.now(UTC),
            reason=reason,
            statuses=statuses,
            airflow_run=(context["ti"].dag_id, context["ti"].run_id),
        )
        for day, run_time in days:
            stage_report(settings, day, run_time, spark)
        return [day.isoformat() for day, _ in days]

    def _fail(self, context: Any, what: str, reason: str) -> None:
        days = [d["business_date"] for d in self._awaiting(context)]
        day = parse_business_date(days[0]) if days else None
        fail_sign_off(context, load_settings(), day, what, f"restated {', '.join(days)}", reason)


def restatement_sign_off_task(settings: Settings) -> RestatementSignOffOperator:
    return RestatementSignOffOperator(
        settings=settings,
        task_id=SIGNOFF_TASK,
        doc_md="The dates re-run beyond the tolerance wait here (Required Actions), before and "
        "after side by side: accept with a reason, or reject (alert). Decisions go to the "
        "`restatements` and `signoffs` tables.",
    )
