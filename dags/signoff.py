"""The nightly's sign-off: a balanced date signs itself off; any other asks a person in
Airflow's Required Actions (a human-in-the-loop operator of the standard provider).

* balanced, or explained by late events, with every critical expectation passed: `auto`,
  recorded at once;
* unexplained, or a critical expectation failed: the task waits (`awaiting_input`) for
  *Accept* with a reason (recorded, the run goes on to publish) or *Reject* (recorded, an
  alert, the run fails: the date stays open until a fixed re-run, which asks again);
* nobody answers within `signoff_timeout`: `timed_out` is recorded, an alert fires, the run
  fails.

Every decision is appended to the `signoffs` table (date, decision, who, when, reason, the
date's status, the reconciliation run) and the date's report is rendered again to show it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.providers.standard.operators.hitl import HITLOperator
from airflow.sdk import Param

from dags.alerting import AlertRaised, context_fields, emit
from tally.alert import Alert
from tally.dates import business_date_of
from tally.settings import Settings, format_duration, load_settings

ACCEPT, REJECT = "Accept", "Reject"
STATUS_TEXT = {
    "unexplained": "an UNEXPLAINED gap",
    "unexplained_warn": "an UNEXPLAINED gap above a materiality warn limit",
    "validation_failed": "a failed critical expectation",
}


def answer_of(operator: HITLOperator, event: dict[str, Any]) -> tuple[str, str, str, Any]:
    """A person's answer in Required Actions: (`accepted` or `rejected`, who, reason, when).
    Accepting needs a reason: without one, an alert and nothing recorded."""
    chosen = list(event.get("chosen_options") or [])
    operator.validate_chosen_options(chosen)
    reason = str((event.get("params_input") or {}).get("reason") or "").strip()
    who = str((event.get("responded_by_user") or {}).get("name") or "?")
    if chosen == [ACCEPT] and not reason:
        raise AlertRaised(
            [
                Alert(
                    "sign-off: accepted without a reason, not recorded",
                    observed=f"accepted by {who}",
                    threshold="a reason is required to accept (clear the task to ask again)",
                )
            ]
        )
    decision = "accepted" if chosen == [ACCEPT] else "rejected"
    return decision, who, reason, event.get("responded_at")


def reason_param() -> dict[str, Param]:
    return {
        "reason": Param(
            "",
            type="string",
            title="Reason",
            description="Required to accept: why the difference is acceptable, e.g. "
            "'known upstream outage, ticket 123'.",
        )
    }


def _windows_text(settings: Settings, day: Any) -> str:
    """The body's list of the largest UNEXPLAINED windows, each linking its records."""
    from tally_app.signoffs import window_links

    links = window_links(settings, day)
    return f"The records behind the gap, largest first:\n\n{links}\n\n" if links else ""


def _stage_result(context: Any, task_id: str) -> dict[str, Any]:
    value = context["ti"].xcom_pull(task_ids=task_id) or {}
    return dict(value.get("result") or {})


class SignOffOperator(HITLOperator):
    """Sign-off of the run's business date (see the module)."""

    ui_color = "#fff4e0"

    def __init__(self, *, settings: Settings, **kwargs: Any) -> None:
        super().__init__(
            subject="Sign off the business date",
            options=[ACCEPT, REJECT],
            multiple=False,
            params=reason_param(),
            response_timeout=timedelta(milliseconds=settings.signoff_timeout),
            **kwargs,
        )

    # -- what the date needs -------------------------------------------------------------------

    def _date(self, context: Any) -> tuple[Settings, Any, str, dict[str, Any]]:
        from dags.common import interval_of
        from tally_app.signoffs import date_status

        settings = load_settings()
        start, end = interval_of(context)
        day = business_date_of(start, settings.report_timezone)
        reconciliation = _stage_result(context, "reaggregate")
        status = date_status(reconciliation, _stage_result(context, "validate"))
        return settings, day, status, {**reconciliation, "run_time": end}

    def execute(self, context: Any) -> Any:
        from tally_app.signoffs import money_of, needs_person, within_tolerance_reason

        settings, day, status, recon = self._date(context)
        if not needs_person(status):
            reason = within_tolerance_reason(recon) if status == "within_tolerance" else ""
            self._record(context, "auto", "tally", reason, when=recon["run_time"])
            return {"decision": "auto", "status": status}
        self.subject = f"Sign off {day.isoformat()}: {STATUS_TEXT[status]}"
        self.body = (
            f"Business date **{day.isoformat()}** has {STATUS_TEXT[status]}: "
            f"{recon.get('unexplained_windows', 0)} unexplained window(s), gap "
            f"{money_of(recon, 'gap_amount')} "
            f"({money_of(recon, 'explained_amount')} explained by late events).\n\n"
            + _windows_text(settings, day)
            + f"Review it under **Reconciliation** (`/tally/dates/{day.isoformat()}`: the "
            "report, the CSV, the alerts, each window's records), then **Accept** with a "
            "reason, or **Reject** to leave the "
            f"date open (an alert fires; re-run after a fix). Unanswered after "
            f"{format_duration(settings.signoff_timeout)}: an alert, the date stays open."
        )
        return super().execute(context)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        if event.get("error_type") == "timeout":
            self._record(context, "timed_out", "", "")
            self._fail(context, "sign-off timed out: nobody accepted or rejected the date", "")
        if "error" in event:
            return super().execute_complete(context, event)
        decision, who, reason, when = answer_of(self, event)
        self._record(context, decision, who, reason, when=when)
        if decision == "rejected":
            self._fail(context, f"sign-off: date rejected by {who}", reason)
        return {"decision": decision, "by": who, "reason": reason}

    # -- recording -----------------------------------------------------------------------------

    def _record(self, context: Any, decision: str, who: str, reason: str, when: Any = None) -> None:
        """Append the decision to `signoffs`, then render the date's report again."""
        from tally.spark import session_for
        from tally_app.nightly import stage_report
        from tally_app.signoffs import SignOff, record_signoff

        settings, day, status, recon = self._date(context)
        decided_at = when if isinstance(when, datetime) else datetime.now(UTC)
        spark = session_for(settings, "tally-signoff")
        record_signoff(
            spark,
            settings.warehouse,
            SignOff(
                business_date=day,
                decision=decision,
                decided_by=who,
                decided_at=decided_at,
                reason=reason,
                status=status,
                run_time=recon["run_time"],
                dag_id=context["ti"].dag_id,
                run_id=context["ti"].run_id,
            ),
        )
        stage_report(settings, day, recon["run_time"], spark)

    def _fail(self, context: Any, what: str, reason: str) -> None:
        settings, day, status, _ = self._date(context)
        fail_sign_off(context, settings, day, what, f"date status {status}", reason)


def fail_sign_off(
    context: Any, settings: Settings, day: Any, what: str, observed: str, reason: str
) -> None:
    """Record and send an error alert about a sign-off of `day` (rejected, timed out), then
    fail the task with it."""
    fields = context_fields(context, settings)
    fields["business_date"] = day
    alert = Alert(
        what,
        observed=observed + (f"; reason: {reason}" if reason else ""),
        threshold=f"sign-off within {format_duration(settings.signoff_timeout)}",
        severity="error",
    ).with_context(**fields)
    emit([alert], settings)
    raise AlertRaised([alert], recorded=True)


def sign_off_task(settings: Settings) -> SignOffOperator:
    return SignOffOperator(
        settings=settings,
        task_id="sign_off",
        doc_md="Signs a balanced date off automatically; otherwise asks a person (Required "
        "Actions): accept with a reason, or reject (alert, the date stays open). Every decision "
        "goes to the `signoffs` table and the report.",
    )
