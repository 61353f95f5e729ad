"""Alerting for the tally DAGs: every alert is logged (one line), written to the `alerts` table,
and sent over SMTP or a Slack webhook when (and only when) such a connection is configured.

* `TallyAlertNotifier`: the task-level `on_failure_callback` of every tally DAG task. A task
  that failed on a data-quality breach raises `AlertRaised` carrying its alerts; any other
  failure becomes a generic "task failed" alert.
* The health and tuning stages (`dags.stages`) emit the alerts their checks return.

Delivery: `AIRFLOW_CONN_TALLY_SMTP` (an smtp connection; recipients from the setting
`alert_email` (`TALLY_ALERT_EMAIL`), comma-separated, or the connection's `to` extra) and
`AIRFLOW_CONN_TALLY_SLACK` (a Slack incoming webhook: the URL as password, or host + token, or
`webhook_url` in the extras). Credentials live only in those connections; nothing is
hard-coded or logged. Cheap to import (DAG files import it at parse time): Spark is imported
inside the functions that write.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from datetime import date
from html import escape
from typing import TYPE_CHECKING, Any

from airflow.sdk.bases.notifier import BaseNotifier
from airflow.sdk.exceptions import AirflowFailException

from tally.alert import Alert
from tally.dates import business_date_of, parse_business_date
from tally.outputs import one_line, slack_text
from tally.settings import Settings, load_settings
from tally.spark import session_for
from tally.vocabulary import SEVERITIES

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("tally.alerts")

SMTP_CONN_ID = "tally_smtp"
SLACK_CONN_ID = "tally_slack"


class AlertRaised(AirflowFailException):
    """Fail the task (no retry: data does not improve by retrying) with these alerts.

    `recorded` says whether the raiser already wrote and sent them; otherwise the task's
    `TallyAlertNotifier` does.
    """

    def __init__(self, alerts: Sequence[Alert], recorded: bool = False):
        self.alerts = list(alerts)
        self.recorded = recorded
        super().__init__("; ".join(a.message() for a in self.alerts) or "alert raised")


def emit(
    alerts: Sequence[Alert],
    settings: Settings | None = None,
    spark: SparkSession | None = None,
    env: Mapping[str, str] | None = None,
) -> None:
    """Log each alert (one line), append them to `alerts`, then send them where configured.

    Never raises: a failed write or send is logged and the other channels still run.
    """
    if not alerts:
        return
    settings = settings or load_settings()
    for a in alerts:
        level = logging.WARNING if a.severity in ("info", "warning") else logging.ERROR
        log.log(level, "tally alert: %s", a.message())
    try:
        from tally_app.alerts import record_alerts

        record_alerts(spark or session_for(settings, "tally-alerts"), settings.warehouse, alerts)
    except Exception as exc:
        log.error("tally alert: could not write the alerts table: %s", exc)
    send(alerts, settings.alert_email, env=env)


def configured_channels(env: Mapping[str, str] | None = None) -> list[str]:
    """The delivery channels whose connection is configured in the environment."""
    env = os.environ if env is None else env
    channels = []
    if env.get("AIRFLOW_CONN_TALLY_SMTP"):
        channels.append("smtp")
    if env.get("AIRFLOW_CONN_TALLY_SLACK"):
        channels.append("slack")
    return channels


def send(
    alerts: Sequence[Alert], recipients: str = "", env: Mapping[str, str] | None = None
) -> list[str]:
    """Send over the configured channels; returns the channels that succeeded."""
    sent = []
    for channel in configured_channels(env):
        try:
            if channel == "smtp":
                _send_smtp(alerts, recipients)
            else:
                _send_slack(alerts)
            sent.append(channel)
        except Exception as exc:  # a broken channel must not hide the alert elsewhere
            log.error("tally alert: sending via %s failed: %s", channel, type(exc).__name__)
    return sent


def email_content(alerts: Sequence[Alert]) -> tuple[str, str]:
    """(subject, HTML body) of the alert e-mail: one line per alert, payload text escaped."""
    worst = max(alerts, key=lambda a: SEVERITIES.index(a.severity))
    subject = one_line(f"[tally {worst.severity}] {worst.what}")[:200]
    body = "".join(f"<p>{escape(a.message())}</p>" for a in alerts)
    return subject, body


def _send_smtp(alerts: Sequence[Alert], recipients: str) -> None:
    from airflow.providers.smtp.hooks.smtp import SmtpHook

    with SmtpHook(smtp_conn_id=SMTP_CONN_ID) as hook:
        extra = hook.conn.extra_dejson if getattr(hook, "conn", None) else {}
        to = recipients or extra.get("to")
        if not to:
            raise ValueError("no recipients: set TALLY_ALERT_EMAIL or the connection's 'to'")
        subject, body = email_content(alerts)
        hook.send_email_smtp(
            to=[t.strip() for t in str(to).split(",")], subject=subject, html_content=body
        )


def _slack_url(conn: Any) -> str:
    extra = conn.extra_dejson or {}
    for candidate in (extra.get("webhook_url"), extra.get("url"), conn.password, conn.host):
        if candidate and str(candidate).startswith(("https://", "http://")):
            return str(candidate)
    host = (conn.host or "hooks.slack.com/services").strip("/")
    return f"https://{host}/{(conn.password or '').lstrip('/')}"


def slack_message(alerts: Sequence[Alert]) -> str:
    """The Slack text of the alerts: one line each, shown literally (no mention or link a key
    could inject: `tally.outputs.slack_text`)."""
    return "\n".join(slack_text(a.message()) for a in alerts)


def _send_slack(alerts: Sequence[Alert]) -> None:
    text = slack_message(alerts)
    try:  # the Slack provider, when it is installed
        from airflow.providers.slack.hooks.slack_webhook import (  # type: ignore[import-not-found]
            SlackWebhookHook,
        )
    except ImportError:
        pass
    else:
        SlackWebhookHook(slack_webhook_conn_id=SLACK_CONN_ID).send(text=text)
        return
    import urllib.request

    from airflow.sdk import BaseHook

    url = _slack_url(BaseHook.get_connection(SLACK_CONN_ID))
    request = urllib.request.Request(
        url,
        data=json.dumps({"text": text}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


def context_fields(context: Mapping[str, Any], settings: Settings) -> dict[str, Any]:
    """dag_id, task_id, run_id, log link and business date of a task's context."""
    return _fields(context, settings, _named_dates(context))


def _fields(
    context: Mapping[str, Any], settings: Settings, named: list[date] | None
) -> dict[str, Any]:
    """`context_fields`, with the dates the run's triggering asset events name (`named`)."""
    ti = context.get("ti") or context.get("task_instance")
    dag = context.get("dag")
    dag_run = context.get("dag_run")
    values: dict[str, Any] = {
        "dag_id": getattr(ti, "dag_id", None) or getattr(dag, "dag_id", "") or "",
        "task_id": getattr(ti, "task_id", "") or "",
        "run_id": getattr(ti, "run_id", None) or getattr(dag_run, "run_id", "") or "",
        "business_date": _business_date(context, settings, named),
    }
    try:
        values["log_link"] = str(getattr(ti, "log_url", "") or "")
    except Exception:  # log_url needs the api-server's base URL from config
        values["log_link"] = ""
    return values


def triggering_dates(events: Any) -> list[date] | None:
    """The dates the triggering asset events name (extra `dates`, emitted by
    `dags.restatements`); None: a run without them, e.g. a manual trigger."""
    days: set[date] = set()
    for asset_events in (events or {}).values():
        for event in asset_events:
            days.update(parse_business_date(d) for d in (event.extra or {}).get("dates", []))
    return sorted(days) or None


def _named_dates(context: Mapping[str, Any]) -> list[date] | None:
    """The dates the run's triggering asset events name; None: none (a scheduled or manual
    run), or they could not be read (an alert must still go out)."""
    try:
        return triggering_dates(context.get("triggering_asset_events"))
    except Exception as exc:  # the events are read from Airflow's database
        log.warning("alert without the triggering dates: %s", one_line(str(exc)))
        return None


def _business_date(
    context: Mapping[str, Any], settings: Settings, named: list[date] | None
) -> date | None:
    """The date a failed task worked on: the one its triggering asset events name (a run the
    `tally_restatements` asset triggered: its data interval is the trigger's moment, not a
    business date; None when they name several), else its data interval's."""
    if named is not None:
        return named[0] if len(named) == 1 else None
    start = context.get("data_interval_start")
    return business_date_of(start, settings.report_timezone) if start else None


def report_link_for(settings: Settings, business_date: date | None) -> str:
    """Where the report of the date is (or will be) published."""
    if business_date is None:
        return ""
    from tally_app.nightly import report_path

    return report_path(settings, business_date).resolve().as_uri()


class TallyAlertNotifier(BaseNotifier):
    """`on_failure_callback` of the tally tasks: records and sends one alert per failure.

    A task failing with `AlertRaised` contributes its own alerts (what, observed, threshold);
    they are written here unless the task already did. Other failures give one alert naming
    the task, the exception and the retries used.
    """

    def __init__(self, severity: str = "error"):
        super().__init__()
        if severity not in SEVERITIES:
            raise ValueError(f"severity: expected one of {', '.join(SEVERITIES)}")
        self.severity = severity

    def alerts_for(self, context: Mapping[str, Any], settings: Settings) -> list[Alert]:
        named = _named_dates(context)  # read once: the date, and the dates in the detail
        fields = _fields(context, settings, named)
        link = report_link_for(settings, fields["business_date"])
        error = context.get("exception")
        if isinstance(error, AlertRaised):
            if error.recorded:
                return []
            return [a.with_context(report_link=link, **fields) for a in error.alerts]
        ti = context.get("ti")
        tries = getattr(ti, "try_number", None)
        retries = getattr(getattr(ti, "task", None), "retries", None)
        detail = f"{type(error).__name__}: {error}" if error is not None else "task failed"
        detail = detail.strip().splitlines()[0][:500] if detail.strip() else "task failed"
        if named is not None and len(named) > 1:  # no one business date: name them all
            detail = f"{detail} (dates {', '.join(d.isoformat() for d in named)})"
        return [
            Alert(
                what=f"task {fields['task_id'] or '?'} failed",
                observed=detail,
                threshold=f"try {tries} of {None if retries is None else retries + 1}",
                severity=self.severity,
                report_link=link,
                **fields,
            )
        ]

    def notify(self, context: Any) -> None:
        settings = load_settings()
        emit(self.alerts_for(context, settings), settings)
