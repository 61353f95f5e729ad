"""Alerts: one row per alert in the `alerts` Delta table, one log line, and a message over SMTP
or a Slack webhook when (and only when) such a connection is configured.

An alert says what failed, for which business date, the observed value and the threshold, and
links the report. Three producers:

* `TallyAlertNotifier`: the task-level `on_failure_callback` of every tally DAG task. A task
  that failed on a data-quality breach raises `AlertRaised` carrying its alerts; any other
  failure becomes a generic "task failed" alert.
* `check_stream_health`: the streaming health checks over the latest `stream_progress` rows
  (watermark lag vs its steady state, late-event rate, idle partitions, growing spread).
* `tune_lateness`: the weekly lateness curve; records the recommended bound in
  `lateness_recommendations` and alerts when the configured bound misses the completeness
  target.

Importing this module is cheap (DAG files import it at parse time): Spark, Delta and the batch
layer are imported inside the functions that need them, and the two tables are built on first
use (`register_tables`), because `tally.tables` imports pyspark.

Delivery: `AIRFLOW_CONN_TALLY_SMTP` (an smtp connection; recipients from `TALLY_ALERT_EMAIL`,
comma-separated, or the connection's `to` extra) and `AIRFLOW_CONN_TALLY_SLACK` (a Slack
incoming webhook: the URL as password, or host + token, or `webhook_url` in the extras).
Credentials live only in those connections; nothing is hard-coded or logged.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from airflow.sdk.bases.notifier import BaseNotifier
from airflow.sdk.exceptions import AirflowFailException

from tally.settings import Settings, format_duration, load_settings, parse_duration

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tally.tables import Table

log = logging.getLogger("tally.alerts")

SEVERITIES = ("info", "warning", "error", "critical")
SMTP_CONN_ID = "tally_smtp"
SLACK_CONN_ID = "tally_slack"

ALERTS_DDL = (
    "alert_time TIMESTAMP, dag_id STRING, task_id STRING, run_id STRING, business_date DATE, "
    "severity STRING, what STRING, observed STRING, threshold STRING, report_link STRING, "
    "log_link STRING"
)
LATENESS_RECOMMENDATIONS_DDL = (
    "period_start DATE, period_end DATE, run_time TIMESTAMP, window_ms BIGINT, "
    "events BIGINT, events_version BIGINT, target_pct DOUBLE, configured_lateness_ms BIGINT, "
    "configured_completeness_pct DOUBLE, configured_meets_target BOOLEAN, "
    "recommended_lateness_ms BIGINT, recommended_completeness_pct DOUBLE, curve STRING"
)
_TABLES: dict[str, Table] = {}


def register_tables() -> tuple[Table, Table]:
    """The `alerts` and `lateness_recommendations` tables, added to `tally.tables.CATALOG`
    (so `tally show alerts` knows them). Imports pyspark: call it where Spark is fine."""
    from tally import tables as T

    if not _TABLES:
        _TABLES["alerts"] = T.register(
            T.Table(
                "alerts",
                ALERTS_DDL,
                "One row per alert: when, which DAG/task/run and business date, severity, "
                "what failed, the observed value and the threshold, links to the report and "
                "the task log.",
            )
        )
        _TABLES["lateness_recommendations"] = T.register(
            T.Table(
                "lateness_recommendations",
                LATENESS_RECOMMENDATIONS_DDL,
                "One row per tuning period: the lateness curve over its days' events, the "
                "smallest lateness bound reaching the completeness target, and how the "
                "configured bound does.",
                partition_by=("period_start",),
            )
        )
    return _TABLES["alerts"], _TABLES["lateness_recommendations"]


# -- the alert ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Alert:
    what: str
    observed: str
    threshold: str
    severity: str = "error"
    business_date: date | None = None
    report_link: str = ""
    dag_id: str = ""
    task_id: str = ""
    run_id: str = ""
    log_link: str = ""
    alert_time: datetime = field(default_factory=lambda: datetime.now(UTC))

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity: expected one of {', '.join(SEVERITIES)}")
        if self.alert_time.tzinfo is None:
            raise ValueError("alert_time: needs a time zone")

    def message(self) -> str:
        """The one line that is logged and sent."""
        where = ".".join(p for p in (self.dag_id, self.task_id) if p) or "tally"
        day = self.business_date.isoformat() if self.business_date else "-"
        text = (
            f"[{self.severity.upper()}] {where} business_date={day}: {self.what}; "
            f"observed {self.observed or '-'}, threshold {self.threshold or '-'}"
        )
        if self.report_link:
            text += f"; report {self.report_link}"
        if self.log_link:
            text += f"; log {self.log_link}"
        return text

    def with_context(self, **values: Any) -> Alert:
        """A copy with the empty fields among `values` filled in."""
        current = asdict(self)
        fills = {k: v for k, v in values.items() if v and not current.get(k)}
        return Alert(**{**current, **fills})


class AlertRaised(AirflowFailException):
    """Fail the task (no retry: data does not improve by retrying) with these alerts.

    `recorded` says whether the raiser already wrote and sent them; otherwise the task's
    `TallyAlertNotifier` does.
    """

    def __init__(self, alerts: Sequence[Alert], recorded: bool = False):
        self.alerts = list(alerts)
        self.recorded = recorded
        super().__init__("; ".join(a.message() for a in self.alerts) or "alert raised")


# -- writing, logging, sending -----------------------------------------------------------------


def _session(settings: Settings) -> SparkSession:
    from tally.spark import build_session

    # getOrCreate: inside a task that already runs Spark this is the task's session.
    return build_session(
        settings.spark_master,
        app_name="tally-alerts",
        shuffle_partitions=settings.shuffle_partitions,
    )


def record_alerts(spark: SparkSession, warehouse: str, alerts: Sequence[Alert]) -> None:
    """Append the alerts to the `alerts` table (created on first use)."""
    if not alerts:
        return
    from functools import reduce

    from pyspark.sql import functions as F

    from tally import tables as T

    table, _ = register_tables()
    T.ensure_table(spark, warehouse, table)
    rows = []
    for a in alerts:
        values = {
            "alert_time": F.timestamp_millis(F.lit(int(a.alert_time.timestamp() * 1000))),
            "dag_id": F.lit(a.dag_id),
            "task_id": F.lit(a.task_id),
            "run_id": F.lit(a.run_id),
            "business_date": F.lit(a.business_date).cast("date"),
            "severity": F.lit(a.severity),
            "what": F.lit(a.what),
            "observed": F.lit(a.observed),
            "threshold": F.lit(a.threshold),
            "report_link": F.lit(a.report_link),
            "log_link": F.lit(a.log_link),
        }
        rows.append(T.literal_row(spark, values))
    df = reduce(lambda x, y: x.unionByName(y), rows)
    schema = table.schema()
    (
        df.select(*[F.col(f.name).cast(f.dataType) for f in schema.fields])
        .write.format("delta")
        .mode("append")
        .save(T.table_path(warehouse, table.name))
    )


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
        record_alerts(spark or _session(settings), settings.warehouse, alerts)
    except Exception as exc:
        log.error("tally alert: could not write the alerts table: %s", exc)
    send(alerts, env=env)


def configured_channels(env: Mapping[str, str] | None = None) -> list[str]:
    """The delivery channels whose connection is configured in the environment."""
    env = os.environ if env is None else env
    channels = []
    if env.get("AIRFLOW_CONN_TALLY_SMTP"):
        channels.append("smtp")
    if env.get("AIRFLOW_CONN_TALLY_SLACK"):
        channels.append("slack")
    return channels


def send(alerts: Sequence[Alert], env: Mapping[str, str] | None = None) -> list[str]:
    """Send over the configured channels; returns the channels that succeeded."""
    env = os.environ if env is None else env
    sent = []
    for channel in configured_channels(env):
        try:
            if channel == "smtp":
                _send_smtp(alerts, env)
            else:
                _send_slack(alerts)
            sent.append(channel)
        except Exception as exc:  # a broken channel must not hide the alert elsewhere
            log.error("tally alert: sending via %s failed: %s", channel, type(exc).__name__)
    return sent


def _send_smtp(alerts: Sequence[Alert], env: Mapping[str, str]) -> None:
    from html import escape

    from airflow.providers.smtp.hooks.smtp import SmtpHook

    with SmtpHook(smtp_conn_id=SMTP_CONN_ID) as hook:
        extra = hook.conn.extra_dejson if getattr(hook, "conn", None) else {}
        to = env.get("TALLY_ALERT_EMAIL") or extra.get("to")
        if not to:
            raise ValueError("no recipients: set TALLY_ALERT_EMAIL or the connection's 'to'")
        worst = max(alerts, key=lambda a: SEVERITIES.index(a.severity))
        subject = f"[tally {worst.severity}] {worst.what}"[:200]
        body = "".join(f"<p>{escape(a.message())}</p>" for a in alerts)
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


def _send_slack(alerts: Sequence[Alert]) -> None:
    text = "\n".join(a.message() for a in alerts)
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


# -- the run's context ------------------------------------------------------------------------


def business_date_of(interval_start: datetime, report_timezone: str = "UTC") -> date:
    """The business date a run covers: the date of its data interval's start, in the report
    time zone (the DAGs' timetables run in that zone)."""
    if interval_start.tzinfo is None:
        raise ValueError("data_interval_start: needs a time zone")
    return interval_start.astimezone(ZoneInfo(report_timezone)).date()


def plain_utc(value: datetime) -> datetime:
    """A stdlib UTC datetime: Airflow hands out pendulum ones, which do not mix with stdlib
    timedelta arithmetic everywhere."""
    if value.tzinfo is None:
        raise ValueError(f"{value!r} has no time zone")
    utc = value.astimezone(UTC)
    return datetime(
        utc.year, utc.month, utc.day, utc.hour, utc.minute, utc.second, utc.microsecond, UTC
    )


def context_fields(context: Mapping[str, Any], settings: Settings) -> dict[str, Any]:
    """dag_id, task_id, run_id, log link and business date of a task's context."""
    ti = context.get("ti") or context.get("task_instance")
    dag = context.get("dag")
    dag_run = context.get("dag_run")
    start = context.get("data_interval_start")
    values: dict[str, Any] = {
        "dag_id": getattr(ti, "dag_id", None) or getattr(dag, "dag_id", "") or "",
        "task_id": getattr(ti, "task_id", "") or "",
        "run_id": getattr(ti, "run_id", None) or getattr(dag_run, "run_id", "") or "",
        "business_date": business_date_of(start, settings.report_timezone) if start else None,
    }
    try:
        values["log_link"] = str(getattr(ti, "log_url", "") or "")
    except Exception:  # log_url needs the api-server's base URL from config
        values["log_link"] = ""
    return values


def report_link_for(settings: Settings, business_date: date | None) -> str:
    """Where the report of the date is (or will be) published."""
    if business_date is None:
        return ""
    try:
        from tally import nightly

        finder = getattr(nightly, "report_path", None)
        if finder is not None:
            return Path(finder(settings, business_date)).resolve().as_uri()
    except Exception:
        pass
    return ""


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
        fields = context_fields(context, settings)
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


# -- streaming health --------------------------------------------------------------------------


@dataclass(frozen=True)
class HealthParams:
    """Thresholds of the streaming health check (env `TALLY_HEALTH_*`)."""

    lag_factor: float = 3.0  # lag alert above factor x median lag of the recent batches
    min_lag_ms: int = 60_000  # ... and above this floor
    history: int = 20  # recent batches read (steady state, late rate)
    spread_batches: int = 5  # k: spread rising in each of the last k batches
    idle_max_ms: int = 600_000  # a partition silent longer than this
    min_history: int = 3  # batches needed before the lag has a steady state

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> HealthParams:
        env = os.environ if env is None else env
        d = cls()
        return cls(
            lag_factor=float(env.get("TALLY_HEALTH_LAG_FACTOR", d.lag_factor)),
            min_lag_ms=parse_duration(
                env.get("TALLY_HEALTH_MIN_LAG", d.min_lag_ms), "TALLY_HEALTH_MIN_LAG"
            ),
            history=int(env.get("TALLY_HEALTH_HISTORY", d.history)),
            spread_batches=int(env.get("TALLY_HEALTH_SPREAD_BATCHES", d.spread_batches)),
            idle_max_ms=parse_duration(
                env.get("TALLY_HEALTH_IDLE_MAX", d.idle_max_ms), "TALLY_HEALTH_IDLE_MAX"
            ),
        )


def _pct(x: float) -> str:
    return f"{100 * x:.3f}%"


def evaluate_health(
    rows: Sequence[Mapping[str, Any]], settings: Settings, params: HealthParams
) -> list[Alert]:
    """Alerts for the recent `stream_progress` rows of one query, oldest first (times as epoch
    ms: `processing_ms`, `watermark_lag_ms`, `partition_spread_ms`, `last_seen` {partition:
    ms}, counts `late_events`, `valid_events`). Pure: no Spark."""
    if not rows:
        return [Alert("stream has committed no micro-batch", "0 batches", ">= 1", "warning")]
    alerts: list[Alert] = []
    latest = rows[-1]

    lag = latest.get("watermark_lag_ms")
    prior = [int(r["watermark_lag_ms"]) for r in rows[:-1] if r.get("watermark_lag_ms") is not None]
    if lag is not None and len(prior) >= params.min_history:
        steady = statistics.median(prior)
        limit = max(steady * params.lag_factor, params.min_lag_ms)
        if lag > limit:
            alerts.append(
                Alert(
                    "watermark lag above its steady state",
                    f"{format_duration(int(lag))} (batch {latest.get('batch_id')})",
                    f"{format_duration(int(limit))} = max({params.lag_factor:g} x median "
                    f"{format_duration(int(steady))}, {format_duration(params.min_lag_ms)})",
                    "error",
                )
            )

    valid = sum(int(r.get("valid_events") or 0) for r in rows)
    late = sum(int(r.get("late_events") or 0) for r in rows)
    if valid:
        rate = late / valid
        if rate > settings.late_rate_fail:
            severity, limit_rate = "error", settings.late_rate_fail
        elif rate > settings.late_rate_warn:
            severity, limit_rate = "warning", settings.late_rate_warn
        else:
            severity, limit_rate = "", 0.0
        if severity:
            alerts.append(
                Alert(
                    "late-event rate above threshold",
                    f"{_pct(rate)} ({late} of {valid} events, last {len(rows)} batches)",
                    _pct(limit_rate),
                    severity,
                )
            )

    now_ms = latest.get("processing_ms")
    if now_ms is not None:
        for part, seen in sorted((latest.get("last_seen") or {}).items()):
            if seen is not None and now_ms - seen > params.idle_max_ms:
                alerts.append(
                    Alert(
                        f"partition {part} idle too long",
                        f"silent {format_duration(int(now_ms - seen))}",
                        format_duration(params.idle_max_ms),
                        "warning",
                    )
                )

    k = params.spread_batches
    spreads = [r.get("partition_spread_ms") for r in rows[-k:]]
    if k >= 2 and len(spreads) == k and all(s is not None for s in spreads):
        values = [int(s) for s in spreads if s is not None]
        rising = all(b > a for a, b in itertools.pairwise(values))
        if rising and values[-1] > settings.lateness:
            alerts.append(
                Alert(
                    f"partition spread grew in each of the last {k} batches",
                    " < ".join(format_duration(v) for v in values),
                    f"monotone rise over {k} batches ending above the lateness bound "
                    f"{format_duration(settings.lateness)}",
                    "warning",
                )
            )
    return alerts


def read_recent_progress(spark: SparkSession, warehouse: str, history: int) -> list[dict[str, Any]]:
    """The last `history` live (not drained) batches of the newest query, oldest first."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    from tally import tables as T

    path = T.table_path(warehouse, T.STREAM_PROGRESS.name)
    if not DeltaTable.isDeltaTable(spark, path):
        return []
    progress = T.read_table(spark, warehouse, T.STREAM_PROGRESS.name)
    newest = progress.orderBy(F.col("processing_time").desc(), F.col("batch_id").desc()).first()
    if newest is None:
        return []
    rows = (
        progress.where((F.col("app_id") == newest["app_id"]) & ~F.col("drained"))
        .orderBy(F.col("batch_id").desc())
        .limit(history)
        .select(
            "batch_id",
            F.unix_millis("processing_time").alias("processing_ms"),
            "watermark_lag_ms",
            "partition_spread_ms",
            F.transform_values("partition_last_seen", lambda _k, v: F.unix_millis(v)).alias(
                "last_seen"
            ),
            "late_events",
            "valid_events",
        )
        .collect()
    )
    return [r.asDict() for r in reversed(rows)]


def check_stream_health(
    settings: Settings,
    params: HealthParams | None = None,
    *,
    context: Mapping[str, Any] | None = None,
    spark: SparkSession | None = None,
) -> list[Alert]:
    """Read the recent stream progress, evaluate it, emit the alerts; returns them."""
    params = params or HealthParams.from_env()
    spark = spark or _session(settings)
    rows = read_recent_progress(spark, settings.warehouse, params.history)
    fields = context_fields(context, settings) if context else {}
    fields.pop("business_date", None)
    if rows:
        fields["business_date"] = datetime.fromtimestamp(
            rows[-1]["processing_ms"] / 1000, UTC
        ).date()
    alerts = [a.with_context(**fields) for a in evaluate_health(rows, settings, params)]
    emit(alerts, settings, spark)
    return alerts


# -- lateness tuning ---------------------------------------------------------------------------


def tune_lateness(
    settings: Settings,
    first_day: date,
    last_day: date,
    *,
    now: datetime,
    lateness_ms: Iterable[int] | None = None,
    context: Mapping[str, Any] | None = None,
    spark: SparkSession | None = None,
) -> dict[str, Any]:
    """The lateness curve over the events of `first_day`..`last_day` (business dates,
    inclusive), recorded in `lateness_recommendations` (one row per period, replaced on
    re-run), with an alert when the configured lateness misses the completeness target."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    from batch.curve import DEFAULT_LATENESS, lateness_curve, recommend, with_arrival_seq
    from batch.reconcile import ARRIVAL_ORDER, day_events
    from tally import tables as T

    if last_day < first_day:
        raise ValueError(f"period: {last_day} is before {first_day}")
    if now.tzinfo is None:
        raise ValueError("now: needs a time zone")
    spark = spark or _session(settings)
    _, table = register_tables()
    values = sorted(
        set(lateness_ms or [parse_duration(p, "lateness") for p in DEFAULT_LATENESS.split(",")])
        | {settings.lateness}
    )
    target = settings.completeness_target
    events_path = T.table_path(settings.warehouse, T.EVENTS.name)
    if not DeltaTable.isDeltaTable(spark, events_path):
        raise ValueError(f"events: no Delta table at {events_path} (run the speed layer first)")
    version = T.latest_version(spark, settings.warehouse, T.EVENTS.name)
    log_df = T.read_table(spark, settings.warehouse, T.EVENTS.name, version)
    days = [first_day + timedelta(days=i) for i in range((last_day - first_day).days + 1)]
    frames = [day_events(log_df, d, settings.window, settings.report_timezone) for d in days]
    union = frames[0]
    for frame in frames[1:]:
        union = union.unionByName(frame)
    curve = lateness_curve(with_arrival_seq(union, ARRIVAL_ORDER), settings.window, values, target)
    best = recommend(curve, target)
    configured = next(e for e in curve if e["lateness_ms"] == settings.lateness)
    events = int(configured["events"])
    result = {
        "period_start": first_day.isoformat(),
        "period_end": last_day.isoformat(),
        "events": events,
        "events_version": version,
        "target_pct": target,
        "configured_lateness_ms": settings.lateness,
        "configured_completeness_pct": configured["completeness_pct"],
        "configured_meets_target": bool(configured["meets_target"]),
        "recommended_lateness_ms": best["lateness_ms"] if best else None,
        "recommended_completeness_pct": best["completeness_pct"] if best else None,
    }
    row = T.literal_row(
        spark,
        {
            "period_start": F.lit(first_day),
            "period_end": F.lit(last_day),
            "run_time": F.timestamp_millis(F.lit(int(now.timestamp() * 1000))),
            "window_ms": F.lit(settings.window).cast("long"),
            "events": F.lit(events).cast("long"),
            "events_version": F.lit(version).cast("long"),
            "target_pct": F.lit(float(target)),
            "configured_lateness_ms": F.lit(settings.lateness).cast("long"),
            "configured_completeness_pct": F.lit(float(configured["completeness_pct"])),
            "configured_meets_target": F.lit(bool(configured["meets_target"])),
            "recommended_lateness_ms": F.lit(result["recommended_lateness_ms"]).cast("long"),
            "recommended_completeness_pct": F.lit(result["recommended_completeness_pct"]).cast(
                "double"
            ),
            "curve": F.lit(json.dumps(curve, sort_keys=True, default=str)),
        },
    )
    T.ensure_table(spark, settings.warehouse, table)
    schema = table.schema()
    (
        row.select(*[F.col(f.name).cast(f.dataType) for f in schema.fields])
        .write.format("delta")
        .mode("overwrite")
        .option("replaceWhere", f"period_start = DATE'{first_day.isoformat()}'")
        .save(T.table_path(settings.warehouse, table.name))
    )
    if not configured["meets_target"]:
        recommended = (
            f"smallest bound reaching it: {format_duration(best['lateness_ms'])}"
            if best
            else "no bound in the curve reaches it"
        )
        fields = context_fields(context, settings) if context else {}
        fields["business_date"] = last_day
        emit(
            [
                Alert(
                    "configured lateness bound misses the completeness target",
                    f"{configured['completeness_pct']:.4f}% complete at lateness "
                    f"{format_duration(settings.lateness)} ({events} events, "
                    f"{first_day}..{last_day})",
                    f"{target}% ({recommended})",
                    "warning",
                ).with_context(**fields)
            ],
            settings,
            spark,
        )
    return result
