"""The nightly's sign-off: a balanced date signs itself off; any other asks people in
Airflow's Required Actions (human-in-the-loop operators of the standard provider).

* balanced, or explained by late events, with every critical expectation passed: `auto`,
  recorded at once (tier 0);
* unexplained below materiality (graded warn), or a critical expectation failed: one person
  (`sign_off`, tier 1) *Accepts* with a reason (recorded, the run goes on to publish) or
  *Rejects* (recorded, an alert, the run fails: the date stays open until a fixed re-run,
  which asks again);
* a material gap (`tally.ledger.signoff_tier`: graded fail, or any without tolerance rules,
  under `signoff_two_person = fail`): four eyes (tier 2). `sign_off` asks a preparer
  (`signoff_preparers`) to accept or reject with a reason (recorded as `prepared`); then
  `approve_sign_off` asks an approver (`signoff_approvers`) to *Approve* it (the proposal is
  recorded as the decision, with both people) or *Send back* with a reason (recorded, an
  alert, the run fails: clear `sign_off` to prepare again). Airflow lets only the listed users
  answer (`assigned_users`); the preparer is not left out of the approvers there but refused
  here, recorded as `self_approval_refused` and asked again, so the attempt is on record (and
  a cleared task, whose request Airflow keeps, still cannot be approved by its preparer);
* nobody answers within `signoff_timeout`: `timed_out` is recorded, an alert fires, the run
  fails.

Every step is appended to the `signoffs` table (date, decision, who, when, reason, the date's
status, the reconciliation run, tier, step, proposal, preparer, approver) and the date's
report is rendered again to show it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.providers.standard.operators.hitl import HITLOperator
from airflow.sdk import Param
from airflow.sdk.execution_time.hitl import HITLUser

from dags.alerting import AlertRaised, context_fields, emit
from tally.alert import Alert
from tally.dates import business_date_of
from tally.durations import format_duration
from tally.ledger import NEEDS_PERSON_TEXT
from tally.settings import Settings, load_settings
from tally.vocabulary import APPROVE_TASK, SIGNOFF_TASK

ACCEPT, REJECT = "Accept", "Reject"


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


def responder_id(event: dict[str, Any]) -> str:
    """The Airflow user id of whoever answered (what `assigned_users` compares)."""
    return str((event.get("responded_by_user") or {}).get("id") or "")


def assigned(user_ids: tuple[str, ...]) -> list[HITLUser] | None:
    """`assigned_users` for these Airflow user ids (None: anyone Airflow lets answer)."""
    return [HITLUser(id=u, name=u) for u in user_ids] or None


def _windows_text(settings: Settings, day: Any) -> str:
    """The body's list of the largest UNEXPLAINED windows, each linking its records."""
    from tally_app.signoffs import window_links

    links = window_links(settings, day)
    return f"The records behind the gap, largest first:\n\n{links}\n\n" if links else ""


def _stage_result(context: Any, task_id: str) -> dict[str, Any]:
    value = context["ti"].xcom_pull(task_ids=task_id) or {}
    return dict(value.get("result") or {})


class _DateSignOff(HITLOperator):
    """What both sign-off steps share: the run's date and status, recording a step."""

    ui_color = "#fff4e0"

    def _date(self, context: Any) -> tuple[Settings, Any, str, dict[str, Any]]:
        from dags.common import interval_of
        from tally_app.signoffs import date_status

        settings = load_settings()
        start, end = interval_of(context)
        day = business_date_of(start, settings.report_timezone)
        reconciliation = _stage_result(context, "reaggregate")
        status = date_status(reconciliation, _stage_result(context, "validate"))
        return settings, day, status, {**reconciliation, "run_time": end}

    def _tier(self, settings: Settings, status: str) -> int:
        from tally.ledger import signoff_tier

        return signoff_tier(status, settings.signoff_two_person)

    def _record(self, context: Any, decision: str, who: str, reason: str, **step: Any) -> None:
        """Append the step to `signoffs` (`step`: SignOff's tier, step, proposed, prepared_by,
        approved_by, and `when`), then render the date's report again."""
        from tally.spark import session_for
        from tally_app.nightly import stage_report
        from tally_app.signoffs import SignOff, record_signoff

        settings, day, status, recon = self._date(context)
        when = step.pop("when", None)
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
                **step,
            ),
            settings.signoff_people,
        )
        stage_report(settings, day, recon["run_time"], spark)

    def _open_item(self, context: Any) -> None:
        """The date needs a person: its open item opens (or takes the date's status)."""
        from tally.spark import session_for
        from tally_app.signoffs import record_asked

        settings, day, status, recon = self._date(context)
        spark = session_for(settings, "tally-signoff")
        when = datetime.now(UTC)
        record_asked(
            spark, settings.warehouse, day, status, when, recon["run_time"], settings.signoff_people
        )

    def _fail(self, context: Any, what: str, reason: str) -> None:
        settings, day, status, _ = self._date(context)
        fail_sign_off(context, settings, day, what, f"date status {status}", reason)


class SignOffOperator(_DateSignOff):
    """Sign-off of the run's business date, or its preparation (tier 2; see the module)."""

    def __init__(self, *, settings: Settings, **kwargs: Any) -> None:
        super().__init__(
            subject="Sign off the business date",
            options=[ACCEPT, REJECT],
            multiple=False,
            params=reason_param(),
            response_timeout=timedelta(milliseconds=settings.signoff_timeout),
            **kwargs,
        )

    def execute(self, context: Any) -> Any:
        from tally_app.signoffs import money_of, within_tolerance_reason

        settings, day, status, recon = self._date(context)
        tier = self._tier(settings, status)
        if tier == 0:
            reason = within_tolerance_reason(recon) if status == "within_tolerance" else ""
            self._record(context, "auto", "tally", reason, when=recon["run_time"], tier=0)
            return {"decision": "auto", "status": status, "tier": 0}
        self._open_item(context)
        self.assigned_users = assigned(settings.preparers)
        who = ", ".join(settings.preparers) or "any reviewer"
        if tier == 2:
            self.subject = f"Prepare the sign-off of {day.isoformat()}: {NEEDS_PERSON_TEXT[status]}"
            steps = (
                f"This gap is material: two people sign it off. **Prepare** it ({who}): "
                "**Accept** with a reason, or **Reject**; then a second, different person "
                f"({', '.join(settings.approvers) or 'any other reviewer'}) approves it or "
                "sends it back under **Required Actions** of `approve_sign_off`."
            )
        else:
            self.subject = f"Sign off {day.isoformat()}: {NEEDS_PERSON_TEXT[status]}"
            steps = (
                f"**Accept** with a reason ({who}), or **Reject** to leave the date open (an "
                "alert fires; re-run after a fix)."
            )
        self.body = (
            f"Business date **{day.isoformat()}** has {NEEDS_PERSON_TEXT[status]}: "
            f"{recon.get('unexplained_windows', 0)} unexplained window(s), gap "
            f"{money_of(recon, 'gap_amount')} "
            f"({money_of(recon, 'explained_amount')} explained by late events).\n\n"
            + _windows_text(settings, day)
            + f"Review it under **Reconciliation** (`/tally/dates/{day.isoformat()}`: the "
            "report, the CSV, the alerts, each window's records). "
            + steps
            + f" Unanswered after {format_duration(settings.signoff_timeout)}: an alert, "
            "the date stays open."
        )
        return super().execute(context)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        settings, _, status, _ = self._date(context)
        tier = self._tier(settings, status)
        step = "prepare" if tier == 2 else "decide"
        if event.get("error_type") == "timeout":
            self._record(context, "timed_out", "", "", tier=tier, step=step)
            self._fail(context, "sign-off timed out: nobody accepted or rejected the date", "")
        if "error" in event:
            return super().execute_complete(context, event)
        decision, who, reason, when = answer_of(self, event)
        if tier == 2:
            self._record(
                context, "prepared", who, reason, when=when, tier=2, step=step,
                proposed=decision, prepared_by=who,
            )  # fmt: skip
            return {
                "decision": "prepared",
                "proposed": decision,
                "by": who,
                "by_id": responder_id(event),
                "reason": reason,
                "tier": 2,
            }
        self._record(context, decision, who, reason, when=when, tier=tier, step=step)
        if decision == "rejected":
            self._fail(context, f"sign-off: date rejected by {who}", reason)
        return {"decision": decision, "by": who, "reason": reason, "tier": tier}


APPROVE, SEND_BACK = "Approve", "Send back"


class ApproveSignOffOperator(_DateSignOff):
    """The second person of a tier-2 sign-off (see the module); nothing to do otherwise."""

    def __init__(self, *, settings: Settings, **kwargs: Any) -> None:
        super().__init__(
            subject="Approve the sign-off of the business date",
            options=[APPROVE, SEND_BACK],
            multiple=False,
            params={
                # null allowed: the form's field is optional (approving needs no note)
                "reason": Param(
                    None,
                    type=["null", "string"],
                    title="Note",
                    description="Required to send back: what the preparer should look at; "
                    "optional to approve.",
                )
            },
            response_timeout=timedelta(milliseconds=settings.signoff_timeout),
            **kwargs,
        )

    @staticmethod
    def _prepared(context: Any) -> dict[str, Any] | None:
        value = context["ti"].xcom_pull(task_ids=SIGNOFF_TASK)
        return value if isinstance(value, dict) and value.get("decision") == "prepared" else None

    def execute(self, context: Any) -> Any:
        prepared = self._prepared(context)
        if prepared is None:
            return {"decision": "not_needed"}
        settings, day, status, _ = self._date(context)
        self.assigned_users = assigned(settings.approvers)
        proposal = "accept" if prepared["proposed"] == "accepted" else "reject"
        self.subject = (
            f"Approve the sign-off of {day.isoformat()}: {prepared['by']} proposes to {proposal}"
        )
        self.body = (
            f"Business date **{day.isoformat()}** has {NEEDS_PERSON_TEXT[status]}, a material gap: "
            f"**{prepared['by']}** prepared its sign-off and proposes to **{proposal}** it: "
            f'"{prepared.get("reason") or "(no reason)"}".\n\n'
            + _windows_text(settings, day)
            + f"Review it under **Reconciliation** (`/tally/dates/{day.isoformat()}`), then "
            "**Approve** (the proposal becomes the decision, with both names) or **Send "
            f"back** with a note. You cannot approve what you prepared "
            f"({', '.join(settings.approvers) or 'any other reviewer'} may). Unanswered after "
            f"{format_duration(settings.signoff_timeout)}: an alert, the date stays open."
        )
        return super().execute(context)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        prepared = self._prepared(context) or {}
        step = {"tier": 2, "step": "approve", "prepared_by": prepared.get("by", "")}
        if event.get("error_type") == "timeout":
            self._record(context, "timed_out", "", "", **step)
            self._fail(context, "sign-off approval timed out: nobody approved the date", "")
        if "error" in event:
            return super().execute_complete(context, event)
        chosen = list(event.get("chosen_options") or [])
        self.validate_chosen_options(chosen)
        note = str((event.get("params_input") or {}).get("reason") or "").strip()
        who = str((event.get("responded_by_user") or {}).get("name") or "?")
        when = event.get("responded_at")
        if responder_id(event) == prepared.get("by_id"):
            # four eyes: recorded, and the same request asked again (a new wait)
            self._record(context, "self_approval_refused", who, note, when=when, **step)
            self.log.warning("%s prepared this sign-off and may not approve it", who)
            return self.execute(context)
        if chosen == [SEND_BACK]:
            if not note:
                raise AlertRaised(
                    [
                        Alert(
                            "sign-off: sent back without a note, not recorded",
                            observed=f"sent back by {who}",
                            threshold="a note is required to send back (clear the task)",
                        )
                    ]
                )
            self._record(context, "sent_back", who, note, when=when, **step)
            self._fail(
                context, f"sign-off sent back by {who}: clear sign_off to prepare again", note
            )
        proposed = str(prepared.get("proposed"))
        reason = str(prepared.get("reason") or "") + (f" (approver: {note})" if note else "")
        self._record(context, proposed, who, reason, when=when, approved_by=who, **step)
        if proposed == "rejected":
            self._fail(
                context, f"sign-off: date rejected by {prepared.get('by')}, approved by {who}", note
            )
        return {"decision": proposed, "by": prepared.get("by"), "approved_by": who, "tier": 2}


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
        task_id=SIGNOFF_TASK,
        doc_md="Signs a balanced date off automatically; otherwise asks a person (Required "
        "Actions): accept with a reason, or reject (alert, the date stays open); a material "
        "gap is prepared here and approved by a second person in `approve_sign_off`. Every "
        "step goes to the `signoffs` table and the report.",
    )


def approve_task(settings: Settings) -> ApproveSignOffOperator:
    return ApproveSignOffOperator(
        settings=settings,
        task_id=APPROVE_TASK,
        doc_md="Four eyes on a material gap: a second, different person approves the prepared "
        "sign-off or sends it back (Required Actions); nothing to do for other dates.",
    )
