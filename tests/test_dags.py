"""The DAG files: they import cleanly and fast, without Spark, and wire what the issue asks.

Also the pure parts of the alerting: health evaluation, alert fields, delivery channels.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import airflow_helpers as H  # first: points Airflow at a temporary AIRFLOW_HOME
import pytest

EXPECTED_TASKS = {
    H.NIGHTLY: {
        "wait_for_stream_watermark": {"reaggregate"},
        "reaggregate": {"validate"},
        "validate": {"build_report"},
        "build_report": {"sign_off"},
        "sign_off": {"approve_sign_off"},
        "approve_sign_off": {"publish"},
        "publish": set(),
    },
    H.HEALTH: {
        "check_stream_health": set(),
        "check_restatements": set(),
        "check_open_items": set(),
    },
    H.TUNING: {"tune_lateness": set()},
    H.RESTATEMENTS: {"rerun_dates": {"sign_off"}, "sign_off": set()},
}
STAGE_TASKS = {"reaggregate", "validate", "build_report", "publish"}


def load_bag(monkeypatch: pytest.MonkeyPatch, **env: str) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    for key in ("TALLY_SPARK_RUNNER", "TALLY_NIGHTLY_SCHEDULE", "TALLY_WAREHOUSE"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return DagBag(dag_folder=str(H.DAGS_DIR))


@pytest.fixture
def bag(monkeypatch: pytest.MonkeyPatch, tmp_path) -> Any:
    return load_bag(monkeypatch, TALLY_WAREHOUSE=str(tmp_path / "wh"))


def test_dagbag_imports_without_errors(bag) -> None:
    assert bag.import_errors == {}
    assert set(bag.dag_ids) == set(H.DAG_IDS)
    # Support modules are not DAG files (.airflowignore).
    assert {Path(s.file).name for s in bag.dagbag_stats} == {f"{d}.py" for d in H.DAG_IDS}


@pytest.mark.parametrize("dag_id", H.DAG_IDS)
def test_every_dag_has_owner_tags_docs_retries_and_alerting(bag, dag_id: str) -> None:
    from dags.alerting import TallyAlertNotifier

    dag = bag.dags[dag_id]
    assert dag.tags and "tally" in dag.tags
    assert dag.doc_md and len(dag.doc_md) > 200
    assert dag.max_active_runs == 1
    assert dag.owner == "tally-data-platform"
    for t in dag.tasks:
        assert t.owner == "tally-data-platform"
        assert t.retry_exponential_backoff == 2.0
        assert t.doc_md
        assert any(isinstance(cb, TallyAlertNotifier) for cb in t.on_failure_callback)


# (retries, retry_delay, max_retry_delay) of every task with the default settings: the
# settings' 2, 5m and 1h; the health checks run every five minutes and retry once, quickly.
DEFAULT_RETRIES = {
    H.NIGHTLY: (2, timedelta(minutes=5), timedelta(hours=1)),
    H.TUNING: (2, timedelta(minutes=5), timedelta(hours=1)),
    H.HEALTH: (1, timedelta(minutes=1), timedelta(hours=1)),
    H.RESTATEMENTS: (2, timedelta(minutes=5), timedelta(hours=1)),
}
# The same with TALLY_RETRIES=4, TALLY_RETRY_DELAY=30s, TALLY_MAX_RETRY_DELAY=2h at parse time.
SET_RETRIES = {
    H.NIGHTLY: (4, timedelta(seconds=30), timedelta(hours=2)),
    H.TUNING: (4, timedelta(seconds=30), timedelta(hours=2)),
    H.HEALTH: (1, timedelta(minutes=1), timedelta(hours=2)),
    H.RESTATEMENTS: (4, timedelta(seconds=30), timedelta(hours=2)),
}


def _retries(bag: Any) -> dict[str, set[tuple[int, timedelta, timedelta]]]:
    return {
        dag_id: {(t.retries, t.retry_delay, t.max_retry_delay) for t in bag.dags[dag_id].tasks}
        for dag_id in H.DAG_IDS
    }


def test_retries_are_the_settings_defaults(monkeypatch, tmp_path) -> None:
    for key in ("TALLY_RETRIES", "TALLY_RETRY_DELAY", "TALLY_MAX_RETRY_DELAY"):
        monkeypatch.delenv(key, raising=False)
    bag = load_bag(monkeypatch, TALLY_WAREHOUSE=str(tmp_path / "wh"))
    assert _retries(bag) == {d: {v} for d, v in DEFAULT_RETRIES.items()}


def test_retry_settings_change_the_dags(monkeypatch, tmp_path) -> None:
    bag = load_bag(
        monkeypatch,
        TALLY_WAREHOUSE=str(tmp_path / "wh"),
        TALLY_RETRIES="4",
        TALLY_RETRY_DELAY="30s",
        TALLY_MAX_RETRY_DELAY="2h",
    )
    assert bag.import_errors == {}
    assert _retries(bag) == {d: {v} for d, v in SET_RETRIES.items()}


@pytest.mark.parametrize("dag_id", H.DAG_IDS)
def test_task_graph(bag, dag_id: str) -> None:
    dag = bag.dags[dag_id]
    graph = {t.task_id: set(t.downstream_task_ids) for t in dag.tasks}
    assert graph == EXPECTED_TASKS[dag_id]


def test_nightly_schedule_sensor_and_asset(monkeypatch, tmp_path) -> None:
    from airflow.serialization.encoders import coerce_to_core_timetable
    from airflow.timetables.base import TimeRestriction

    from tally.dates import business_date_of

    bag = load_bag(monkeypatch, TALLY_WAREHOUSE=str(tmp_path / "wh"))
    dag = bag.dags[H.NIGHTLY]
    assert dag.catchup is True
    assert dag.timetable.expression == "30 0 * * *"
    # The first scheduled run covers the first business date, and starts after it ended.
    timetable = coerce_to_core_timetable(dag.timetable)
    first = timetable.next_dagrun_info(
        last_automated_data_interval=None,
        restriction=TimeRestriction(earliest=dag.start_date, latest=None, catchup=True),
    )
    assert business_date_of(first.data_interval.start) == date(2026, 11, 20)
    assert first.run_after == datetime(2026, 11, 21, 0, 30, tzinfo=UTC)
    # dag.test(logical_date=...) infers the same interval from the helper's logical date.
    inferred = timetable.infer_manual_data_interval(
        run_after=H.logical_date_for(date(2026, 11, 20))
    )
    assert inferred == first.data_interval

    sensor = dag.get_task("wait_for_stream_watermark")
    assert type(sensor).__name__ == "StreamWatermarkSensor"
    assert sensor.mode == "reschedule"
    assert 0 < sensor.timeout <= 24 * 3600

    (asset,) = dag.get_task("publish").outlets
    assert asset.name == "tally_reconciliation"
    assert asset.uri == f"file://{tmp_path}/wh/reconciliation"

    other = load_bag(
        monkeypatch, TALLY_NIGHTLY_SCHEDULE="15 2 * * *", TALLY_NIGHTLY_START="2026-10-01"
    )
    assert other.dags[H.NIGHTLY].timetable.expression == "15 2 * * *"
    assert other.dags[H.NIGHTLY].start_date.date() == date(2026, 10, 1)


@pytest.mark.parametrize("runner", ["local", "submit"])
def test_both_spark_runners_build(monkeypatch, tmp_path, runner: str) -> None:
    bag = load_bag(monkeypatch, TALLY_SPARK_RUNNER=runner, TALLY_WAREHOUSE=str(tmp_path / "wh"))
    assert bag.import_errors == {}
    stage_tasks = [
        *(bag.dags[H.NIGHTLY].get_task(t) for t in STAGE_TASKS),
        bag.dags[H.HEALTH].get_task("check_stream_health"),
        bag.dags[H.TUNING].get_task("tune_lateness"),
    ]
    kinds = {type(t).__name__ for t in stage_tasks}
    if runner == "local":
        assert kinds == {"_PythonDecoratedOperator"}
    else:
        assert kinds == {"SparkSubmitOperator"}
        for t in stage_tasks:
            assert t._conn_id == "tally_spark"
            assert t.application == str(H.DAGS_DIR / "spark_apps" / "tally_task.py")
            assert t.application_args[0] in {
                "reaggregate",
                "validate",
                "report",
                "publish",
                "health",
                "tune",
            }
            assert "--interval-start" in t.application_args
        assert bag.dags[H.NIGHTLY].get_task("publish").outlets
    # The sensor is the same either way.
    assert type(bag.dags[H.NIGHTLY].get_task("wait_for_stream_watermark")).__name__ == (
        "StreamWatermarkSensor"
    )


def test_a_bad_setting_loads_every_dag_and_every_task_names_it(monkeypatch) -> None:
    # One bad TALLY_* value used to make all the DAG files import errors: the DAGs vanished.
    from dags.stages import run_stage
    from tally.settings import SettingsError

    bag = load_bag(monkeypatch, TALLY_SPARK_RUNNER="yarn")
    assert bag.import_errors == {}
    assert set(bag.dag_ids) == set(H.DAG_IDS)
    for dag_id in H.DAG_IDS:  # the DAG's page says what is wrong...
        assert bag.dags[dag_id].doc_md.startswith("**Settings error: spark_runner: expected one of")
    # ...and a task, which loads the settings when it runs, fails with the same line
    start = datetime(2026, 11, 20, 0, 30, tzinfo=UTC)
    with pytest.raises(SettingsError, match=r"^spark_runner: expected one of"):
        run_stage("health", start, start + timedelta(days=1))


IMPORT_PROBE = """
import sys, runpy
runpy.run_path(sys.argv[1])
print(' '.join(sorted({name.split('.')[0] for name in sys.modules})))
"""
# What a DAG file must not pull in at parse time (the scheduler parses it every few seconds):
# Spark, Delta, GX, plotting, and every floor but the ground floor's settings and dates.
HEAVY_AT_PARSE_TIME = {
    "pyspark",
    "delta",
    "great_expectations",
    "matplotlib",
    "streaming",
    "batch",
    "expectations",
    "tally_app",
}


@pytest.mark.parametrize("dag_id", H.DAG_IDS)
def test_dag_file_imports_nothing_heavy(dag_id: str) -> None:
    # How long parsing takes is measured by the benchmark's machine, not asserted here.
    out = subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE, str(H.DAGS_DIR / f"{dag_id}.py")],
        cwd=H.REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    imported = set(out.stdout.strip().splitlines()[-1].split())
    assert {"airflow", "dags", "tally"} <= imported  # the probe really ran the file
    assert imported & HEAVY_AT_PARSE_TIME == set()


# -- alerting, without Spark ---------------------------------------------------------------------


def _settings(**values: Any) -> Any:
    from tally.settings import Settings

    return Settings(**values)


def _params(**values: Any) -> Any:
    """HealthParams from settings of these values (health_* and the late rates/lateness)."""
    from streaming.health import HealthParams

    return HealthParams.from_settings(_settings(**values))


def _progress(n: int, lag: int = 40_000, spread: int = 1_000, late: int = 0, **extra: Any):
    rows = []
    for i in range(n):
        rows.append(
            {
                "batch_id": i,
                "processing_ms": 1_000_000 + 10_000 * i,
                "watermark_lag_ms": lag,
                "partition_spread_ms": spread,
                "last_seen": {0: 1_000_000 + 10_000 * i, 1: 1_000_000 + 10_000 * i},
                "late_events": late,
                "valid_events": 1000,
                **extra,
            }
        )
    return rows


def test_health_quiet_stream_raises_nothing() -> None:
    from streaming.health import evaluate_health

    assert evaluate_health(_progress(10), _params()) == []


def test_health_watermark_lag_against_steady_state() -> None:
    from streaming.health import evaluate_health

    rows = _progress(10)
    rows[-1]["watermark_lag_ms"] = 200_000  # 5x the 40 s steady state
    (alert,) = evaluate_health(rows, _params(health_lag_factor=3.0))
    assert alert.what == "watermark lag above its steady state"
    assert alert.severity == "error"
    assert alert.observed.startswith("200s")
    assert alert.threshold.startswith("2m")  # max(3 x 40 s, 1 m floor) = 120 s
    rows[-1]["watermark_lag_ms"] = 110_000  # under 3x steady state
    assert evaluate_health(rows, _params()) == []


def test_health_late_rate_warn_and_fail() -> None:
    from streaming.health import evaluate_health

    params = _params(late_rate_warn=0.001, late_rate_fail=0.01)
    (warn,) = evaluate_health(_progress(5, late=5), params)
    assert (warn.severity, warn.threshold) == ("warning", "0.100%")
    (fail,) = evaluate_health(_progress(5, late=50), params)
    assert (fail.severity, fail.threshold) == ("error", "1.000%")
    assert fail.observed.startswith("5.000% (250 of 5000 events")


def test_health_idle_partition_and_growing_spread() -> None:
    from streaming.health import evaluate_health

    rows = _progress(6)
    rows[-1]["last_seen"] = {0: rows[-1]["processing_ms"], 1: rows[-1]["processing_ms"] - 900_000}
    for i, row in enumerate(rows):
        row["partition_spread_ms"] = 20_000 + 10_000 * i  # 20 s .. 70 s, rising
    alerts = evaluate_health(rows, _params(lateness=30_000, health_idle_max=600_000))
    whats = sorted(a.what for a in alerts)
    assert whats == [
        "partition 1 idle too long",
        "partition spread grew in each of the last 5 batches",
    ]
    rows[-2]["partition_spread_ms"] = 80_000  # not monotone any more
    assert [a.what for a in evaluate_health(rows, _params())] == ["partition 1 idle too long"]


def test_health_expected_partition_unheard_too_long() -> None:
    from streaming.health import evaluate_health

    rows = _progress(3)
    now = rows[-1]["processing_ms"]
    # partition 2 expected since 11 min ago (over the 10 min default), 3 since 1 min ago
    rows[-1]["unheard"] = {2: now - 660_000, 3: now - 60_000}
    (alert,) = evaluate_health(rows, _params())
    assert (alert.what, alert.severity) == ("expected partition 2 not heard from", "warning")
    assert alert.observed.startswith("nothing for 11m") and alert.threshold == "10m"
    assert evaluate_health(rows, _params(health_idle_max=900_000)) == []


@pytest.mark.parametrize(
    ("regressed_batches", "alerts"),
    [
        ([7, 8, 9], 1),  # 3 of the last 10 batches: the default minimum
        ([8, 9], 0),  # 2 of 10: a source hiccup, no alert
        ([0, 1, 9], 0),  # 3, but two of them older than the last 10 batches
    ],
)
def test_health_source_watermark_keeps_regressing(
    regressed_batches: list[int], alerts: int
) -> None:
    from streaming.health import evaluate_health

    rows = _progress(12)
    for row in rows:
        row["regressions"] = {0: 0, 1: 2 if row["batch_id"] in regressed_batches else 0}
    found = evaluate_health(rows, _params())
    assert [a.what for a in found] == ["partition 1's source watermark keeps going back"] * alerts
    if alerts:
        assert found[0].observed == "regressed in 3 of the last 10 batches"


@pytest.mark.parametrize(
    ("valid", "skewed", "mostly"),
    [
        (1000, 501, True),  # just over half: the watermark follows the clock, not the events
        (1000, 500, False),  # exactly half is not most
        (1000, 0, False),  # a calm stream
        (3, 3, True),  # every event of a tiny batch
        (0, 0, False),  # no valid event: nothing to say
    ],
)
def test_mostly_skewed(valid: int, skewed: int, mostly: bool) -> None:
    from streaming.health import mostly_skewed

    assert mostly_skewed(valid, skewed) is mostly


@pytest.mark.parametrize(
    ("arrival_clock", "ahead_ms", "says"),
    [
        # files restored with reset times, streamed with --clock arrival: switch the clock
        (True, 27 * 86_400_000, ("up to 4 weeks", "stream with --clock wall")),
        # producers whose clocks run ahead of the wall clock: fix them (or the bound)
        (False, 6 * 3_600_000, ("up to 6 hours", "raise max_clock_skew")),
    ],
)
def test_clock_skew_warning_names_the_gap_and_the_fix(
    arrival_clock: bool, ahead_ms: int, says: tuple[str, str]
) -> None:
    from streaming.health import clock_skew_warning

    line = clock_skew_warning(3, 12_000, 11_000, ahead_ms, 300_000, arrival_clock)
    assert line is not None and "\n" not in line
    assert line.startswith("clock skew: batch 3: 11,000 of 12,000 events are more than 5m ahead")
    assert all(part in line for part in says), line
    assert clock_skew_warning(3, 12_000, 6_000, ahead_ms, 300_000, arrival_clock) is None


def test_health_clock_behind_the_events() -> None:
    from streaming.health import evaluate_health

    rows = _progress(5, clock_skewed_events=0)
    assert evaluate_health(rows, _params()) == []
    for row in rows[-3:]:
        row["clock_skewed_events"] = 1000  # every event of the last 3 of 5 batches: 3000 of 5000
    (alert,) = evaluate_health(rows, _params(max_clock_skew=600_000))
    assert alert.severity == "error" and "no window closes" in alert.what
    assert (
        alert.observed
        == "3000 of 5000 events more than 10m ahead of processing time (last 5 batches)"
    )
    assert "--clock wall" in alert.threshold


def test_health_without_progress_warns() -> None:
    from streaming.health import evaluate_health

    (alert,) = evaluate_health([], _params())
    assert alert.severity == "warning"


def _context(exception: BaseException | None) -> dict[str, Any]:
    ti = SimpleNamespace(
        dag_id=H.NIGHTLY,
        task_id="reaggregate",
        run_id="scheduled__2026-11-20",
        try_number=3,
        log_url="http://localhost:8080/log",
        task=SimpleNamespace(retries=2),
    )
    return {
        "ti": ti,
        "data_interval_start": datetime(2026, 11, 20, 0, 30, tzinfo=UTC),
        "exception": exception,
    }


def test_notifier_turns_a_failure_into_one_alert() -> None:
    from dags.alerting import TallyAlertNotifier

    (alert,) = TallyAlertNotifier().alerts_for(_context(RuntimeError("disk full")), _settings())
    assert alert.what == "task reaggregate failed"
    assert alert.observed == "RuntimeError: disk full"
    assert alert.threshold == "try 3 of 3"
    assert alert.business_date == date(2026, 11, 20)
    assert (alert.dag_id, alert.run_id) == (H.NIGHTLY, "scheduled__2026-11-20")
    line = alert.message()
    assert "business_date=2026-11-20" in line and "observed RuntimeError: disk full" in line


class _UnreadableEvents:
    """Triggering asset events Airflow fails to read (the notifier must still alert)."""

    def values(self) -> Any:
        raise RuntimeError("metadata database gone")


@pytest.mark.parametrize(
    ("events", "business_date", "observed"),
    [
        # a scheduled run: its data interval's date
        (None, date(2026, 11, 20), "RuntimeError: disk full"),
        # the restatements asset named one date: that date, not the trigger's moment
        (
            {"tally_restatements": [{"dates": ["2026-10-03"]}]},
            date(2026, 10, 3),
            "RuntimeError: disk full",
        ),
        # several dates (two events): no one date; the alert names them all
        (
            {"tally_restatements": [{"dates": ["2026-10-03"]}, {"dates": ["2026-09-30"]}]},
            None,
            "RuntimeError: disk full (dates 2026-09-30, 2026-10-03)",
        ),
        # an event without dates (a manual trigger): the data interval's, as before
        ({"tally_restatements": [{}]}, date(2026, 11, 20), "RuntimeError: disk full"),
        # events that cannot be read: still one alert, dated by the data interval
        (_UnreadableEvents(), date(2026, 11, 20), "RuntimeError: disk full"),
    ],
)
def test_the_notifier_dates_a_failure_by_the_dates_its_run_was_triggered_for(
    events: Any, business_date: date | None, observed: str
) -> None:
    from dags.alerting import TallyAlertNotifier

    context = _context(RuntimeError("disk full"))
    if isinstance(events, dict):
        events = {
            name: [SimpleNamespace(extra=extra) for extra in extras]
            for name, extras in events.items()
        }
    context["triggering_asset_events"] = events
    (alert,) = TallyAlertNotifier().alerts_for(context, _settings())
    assert alert.business_date == business_date
    assert alert.observed == observed
    # the report link is the named date's (none without one date)
    assert (business_date is not None) == bool(alert.report_link)
    if business_date is not None:
        assert business_date.isoformat() in alert.report_link


def test_notifier_passes_data_quality_alerts_through() -> None:
    from dags.alerting import AlertRaised, TallyAlertNotifier
    from tally.alert import Alert

    breach = Alert("data quality: gap", "3 UNEXPLAINED windows", "<= 0", report_link="r.html")
    (alert,) = TallyAlertNotifier().alerts_for(_context(AlertRaised([breach])), _settings())
    assert (alert.what, alert.observed, alert.threshold) == (
        "data quality: gap",
        "3 UNEXPLAINED windows",
        "<= 0",
    )
    assert alert.report_link == "r.html"
    assert alert.task_id == "reaggregate" and alert.business_date == date(2026, 11, 20)
    recorded = AlertRaised([breach], recorded=True)
    assert TallyAlertNotifier().alerts_for(_context(recorded), _settings()) == []


def test_validation_outcome_becomes_alerts() -> None:
    from dags.stages import validation_alerts

    passed = SimpleNamespace(success=True, failures=[], results_rows=[], data_docs_path="d")
    assert validation_alerts(passed) == []
    failed = SimpleNamespace(
        success=False,
        failures=["gap: unexplained windows"],
        data_docs_path="/gx/index.html",
        results_rows=[
            {
                "suite": "gap",
                "check_name": "unexplained_windows",
                "expectation": "expect_x",
                "kwargs": '{"catch_exceptions": true, "column": "status", "max_value": 0}',
                "success": False,
                "severity": "critical",
                "observed_value": "1",
                "column_name": "status",
                "description": None,
                "data_docs_page": None,
            },
            {
                "suite": "events",
                "check_name": "late_rate",
                "success": False,
                "severity": "warning",
                "observed_value": "0.2",
            },
        ],
    )
    (alert,) = validation_alerts(failed)
    assert alert.what == "data quality: gap: unexplained_windows (column status)"
    assert (alert.observed, alert.report_link) == ("1", "/gx/index.html")
    assert alert.threshold == "expect_x max_value=0"


def test_no_channel_is_used_unless_configured() -> None:
    from dags.alerting import configured_channels, send
    from tally.alert import Alert

    assert configured_channels({}) == []
    assert send([Alert("x", "1", "0")], env={}) == []
    assert configured_channels(
        {"AIRFLOW_CONN_TALLY_SMTP": "smtp://h", "AIRFLOW_CONN_TALLY_SLACK": "x"}
    ) == ["smtp", "slack"]


@pytest.fixture
def webhook() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    received: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers["Content-Length"])
            received.append(json.loads(self.rfile.read(length)))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/services/T/B/x", received
    server.shutdown()


def test_slack_webhook_receives_the_alert_when_configured(monkeypatch, webhook) -> None:
    from dags.alerting import send
    from tally.alert import Alert

    url, received = webhook
    conn = json.dumps({"conn_type": "http", "password": url})
    monkeypatch.setenv("AIRFLOW_CONN_TALLY_SLACK", conn)
    alert = Alert("late-event rate above threshold", "5.000%", "1.000%", severity="error")
    assert send([alert], env={"AIRFLOW_CONN_TALLY_SLACK": conn}) == ["slack"]
    assert received == [{"text": alert.message()}]


def test_slack_receives_a_hostile_key_as_text(monkeypatch, webhook) -> None:
    """A key naming a broadcast, a mention and a link arrives escaped (tally.outputs)."""
    from dags.alerting import send
    from tally.alert import Alert

    url, received = webhook
    conn = json.dumps({"conn_type": "http", "password": url})
    monkeypatch.setenv("AIRFLOW_CONN_TALLY_SLACK", conn)
    alert = Alert("gap on key <!channel> <@U123> <http://x|y> @here\nfake", "1", "0")
    assert send([alert], env={"AIRFLOW_CONN_TALLY_SLACK": conn}) == ["slack"]
    ((payload,),) = [received]
    text = payload["text"]
    assert "<" not in text and ">" not in text and "@here" not in text and "\n" not in text
    assert "&lt;!channel&gt; &lt;@U123&gt; &lt;http://x|y&gt; @\u2060here\\nfake" in text


def test_submitted_arguments_render_for_runs_with_and_without_a_data_interval(
    monkeypatch, tmp_path
) -> None:
    """A run triggered from the UI without a logical date has no `data_interval_*` in its
    template context at all; the arguments still render (yesterday relative to run_after)."""
    from airflow.sdk.execution_time import macros

    bag = load_bag(monkeypatch, TALLY_SPARK_RUNNER="submit", TALLY_WAREHOUSE=str(tmp_path))
    dag = bag.dags[H.NIGHTLY]
    task = dag.get_task("reaggregate")
    template_env = dag.get_template_env()
    run_after = datetime(2026, 11, 21, 0, 30, tzinfo=UTC)
    base = {
        "dag_run": SimpleNamespace(run_after=run_after),
        "macros": macros,
        "dag": dag,
        "task": task,
        "run_id": "manual__1",
    }
    scheduled = {
        **base,
        "data_interval_start": datetime(2026, 11, 20, 0, 30, tzinfo=UTC),
        "data_interval_end": datetime(2026, 11, 21, 0, 30, tzinfo=UTC),
    }

    def rendered(context: dict[str, Any]) -> list[str]:
        return [template_env.from_string(a).render(**context) for a in task.application_args]

    manual = rendered(base)
    assert manual[manual.index("--interval-start") + 1] == "2026-11-20T00:30:00+00:00"
    assert manual[manual.index("--interval-end") + 1] == "2026-11-21T00:30:00+00:00"
    assert rendered(scheduled) == manual  # the same day either way


def test_the_submitted_app_starts_inside_a_task_process(monkeypatch, tmp_path) -> None:
    """A task process blocks Airflow's database for its children; the submitted app imports
    Airflow (alert delivery) and must start all the same, with the operator's environment."""
    bag = load_bag(monkeypatch, TALLY_SPARK_RUNNER="submit", TALLY_WAREHOUSE=str(tmp_path))
    task = bag.dags[H.NIGHTLY].get_task("reaggregate")
    blocked = {**os.environ, "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "airflow-db-not-allowed:///"}
    app = [sys.executable, task.application, "--help"]
    without = subprocess.run(app, env=blocked, capture_output=True, text=True, timeout=120)
    assert without.returncode != 0 and "SQLAlchemy URL" in without.stderr  # the trap is real
    started = subprocess.run(
        app, env={**blocked, **task.env_vars}, capture_output=True, text=True, timeout=120
    )
    assert started.returncode == 0, started.stderr
    assert "--interval-start" in started.stdout


def _tuning_result(**values: Any) -> dict[str, Any]:
    """A tuning result (batch.tuning.tune_lateness) of a week where partition 1 misses."""
    return {
        "period_start": "2026-11-16",
        "period_end": "2026-11-22",
        "events": 9,
        "events_version": 3,
        "target_pct": 99.9,
        "configured_lateness_ms": 2_000,
        "configured_completeness_pct": 99.95,
        "configured_meets_target": True,
        "recommended_lateness_ms": 1_000,
        "recommended_completeness_pct": 99.92,
        "recommended_by_partition": {0: 0, 1: 30_000, 2: None},
        "configured_by_partition": {0: 100, 1: 5_000, 2: 2_000},
        "configured_completeness_by_partition": {0: 100.0, 1: 50.0, 2: 98.5},
        "partitions_missing_target": [1, 2],
        **values,
    }


def test_tuning_partition_alert_names_the_partitions_that_miss() -> None:
    from dags.stages import partition_tuning_alert

    alert = partition_tuning_alert(_tuning_result())
    assert alert is not None and alert.severity == "warning"
    assert alert.what == "configured per-partition lateness bound misses the completeness target"
    assert alert.observed == (
        "partition 1 50.0000% at 5s, partition 2 98.5000% at 2s (2026-11-16..2026-11-22)"
    )
    assert alert.threshold == "99.9% (smallest bounds reaching it: 1=30s, 2=none in the curve)"
    assert partition_tuning_alert(_tuning_result(partitions_missing_target=[])) is None
    many = _tuning_result(
        partitions_missing_target=list(range(12)),
        configured_by_partition=dict.fromkeys(range(12), 0),
        configured_completeness_by_partition=dict.fromkeys(range(12), 1.0),
        recommended_by_partition=dict.fromkeys(range(12), 1_000),
    )
    alert = partition_tuning_alert(many)
    assert alert is not None and alert.observed.count("partition ") == 10
    assert " and 2 more (2026-11-16" in alert.observed


def test_tuning_in_force_alert_names_the_partitions_auto_kept_too_narrow() -> None:
    from dags.stages import in_force_alert

    result = _tuning_result(
        in_force_max_by_partition={0: 5_000, 1: 10_000, 2: 60_000},
        partitions_short_of_curve=[1, 2],
    )
    alert = in_force_alert(result)
    assert alert is not None and alert.severity == "warning"
    assert alert.what == "lateness auto chose bounds narrower than the completeness target needed"
    assert alert.observed == (
        "partition 1 at most 10s, partition 2 at most 1m (2026-11-16..2026-11-22)"
    )
    assert alert.threshold == "99.9% (smallest bounds reaching it: 1=30s, 2=none in the curve)"
    assert in_force_alert(_tuning_result(partitions_short_of_curve=[])) is None


@pytest.mark.parametrize(
    ("by_partition", "meets", "whats"),
    [
        # per-source bounds configured: partition 1 misses, the overall bound does not
        ("1=5s,2=2s", True, ["configured per-partition lateness bound misses"]),
        # both miss: two alerts, the overall one first
        (
            "1=5s,2=2s",
            False,
            [
                "configured lateness bound misses",
                "configured per-partition lateness bound misses",
            ],
        ),
        # no per-source bounds: only the overall bound's alert, as before
        ("", True, []),
        ("", False, ["configured lateness bound misses"]),
    ],
)
def test_tuning_stage_passes_per_partition_bounds(
    monkeypatch, by_partition: str, meets: bool, whats: list[str]
) -> None:
    import batch.tuning
    import dags.stages as stages

    seen: dict[str, Any] = {}

    def fake_tune(spark: Any, params: Any, first: date, last: date, *, now: datetime) -> Any:
        seen["params"] = params
        return _tuning_result(configured_meets_target=meets)

    monkeypatch.setattr(batch.tuning, "tune_lateness", fake_tune)
    monkeypatch.setattr(stages, "emit", lambda alerts, *_: seen.update(alerts=alerts))
    settings = _settings(lateness_by_partition=by_partition, lateness=2_000)
    now = datetime(2026, 11, 23, 3, tzinfo=UTC)
    stages.tune_lateness(settings, date(2026, 11, 16), date(2026, 11, 22), now=now, spark=1)
    expected = {1: 5_000, 2: 2_000} if by_partition else {}
    assert seen["params"].configured_by_partition == expected
    assert seen["params"].configured_lateness_ms == 2_000
    alerts = seen.get("alerts", [])
    assert [a.what.removesuffix(" the completeness target") for a in alerts] == whats
    assert all(a.business_date == date(2026, 11, 22) for a in alerts)


@pytest.mark.parametrize("lateness", [None, 2_000])  # None: lateness auto
def test_tuning_stage_under_auto_alerts_on_bounds_short_of_the_curve(
    monkeypatch, lateness: int | None
) -> None:
    import batch.tuning
    import dags.stages as stages

    seen: dict[str, Any] = {}

    def fake_tune(spark: Any, params: Any, first: date, last: date, *, now: datetime) -> Any:
        seen["params"] = params
        return _tuning_result(in_force_max_by_partition={1: 10_000}, partitions_short_of_curve=[1])

    monkeypatch.setattr(batch.tuning, "tune_lateness", fake_tune)
    monkeypatch.setattr(stages, "emit", lambda alerts, *_: seen.update(alerts=alerts))
    settings = _settings(lateness=lateness, lateness_max=60_000)
    now = datetime(2026, 11, 23, 3, tzinfo=UTC)
    stages.tune_lateness(settings, date(2026, 11, 16), date(2026, 11, 22), now=now, spark=1)
    assert seen["params"].configured_lateness_ms == (60_000 if lateness is None else lateness)
    whats = [a.what for a in seen.get("alerts", [])]
    expected = "lateness auto chose bounds narrower than the completeness target needed"
    assert whats == ([expected] if lateness is None else [])


# -- restated dates, without Spark ---------------------------------------------------------------


def _asset_event(extra: dict[str, Any] | None) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(extra=extra)


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        (None, None),  # a manual trigger: no asset events, every changed date
        ({"a": [_asset_event(None)]}, None),  # an event without dates: the same
        ({"a": [_asset_event({"dates": ["2026-11-19"]})]}, [date(2026, 11, 19)]),
        # two checks queued before the run: their dates once each, in order
        (
            {
                "a": [
                    _asset_event({"dates": ["2026-11-20", "2026-11-19"]}),
                    _asset_event({"dates": ["2026-11-19"]}),
                ]
            },
            [date(2026, 11, 19), date(2026, 11, 20)],
        ),
    ],
)
def test_triggering_dates(events: Any, expected: list[date] | None) -> None:
    from dags.alerting import triggering_dates

    assert triggering_dates(events) == expected


def test_only_dates_re_run_beyond_the_tolerance_await_a_person() -> None:
    from dags.restatements import awaiting_of, before_after_table

    figures = {"batch_count": [20, 23], "batch_amount": [1900, 2616]}
    settled = [
        {"business_date": "2026-11-19", "status": "rerun", "change": "+3 events",
         "restated_run": "r1", "new_run": "r2", "figures": figures},
        {"business_date": "2026-11-20", "status": "auto_accepted", "change": "+1 events",
         "restated_run": "r1", "new_run": "r2", "figures": figures},
    ]  # fmt: skip
    assert [d["business_date"] for d in awaiting_of({"settled": settled})] == ["2026-11-19"]
    assert awaiting_of(None) == []
    table = before_after_table(awaiting_of({"settled": settled}))
    assert "**2026-11-19**: +3 events; signed-off run r1, new run r2" in table
    assert "| batch_count | 20 | 23 |" in table and "| batch_amount | 1900 | 2616 |" in table
    assert "2026-11-20" not in table


@pytest.mark.parametrize(
    ("policy", "threshold"),
    [
        ("rerun", "re-run; signed off automatically within 3 events, 716 amount"),
        ("flag", "policy flag: a person re-runs the date (tally reconcile) and signs it off"),
    ],
)
def test_a_restatement_alert_says_what_settles_it(policy: str, threshold: str) -> None:
    from batch.restatements import Restatement
    from dags.stages import restatement_alert
    from tally.restatements import Change

    found = Restatement(
        date(2026, 11, 19),
        datetime(2026, 11, 20, 1, tzinfo=UTC),
        (4, 717),
        Change(3, 716, 2),
        "pending" if policy == "flag" else "rerun",
        {"a": 3},
    )
    settings = _settings(
        restatement_policy=policy,
        restatement_tolerance_events=3,
        restatement_tolerance_amount=716,
    )
    alert = restatement_alert(found, settings)
    assert alert.what == (
        "business date 2026-11-19 changed after its run 2026-11-20T01:00:00+00:00: "
        "+3 events, +716 amount, 2 windows"
    )
    assert alert.threshold == threshold and alert.severity == "warning"
    assert alert.business_date == date(2026, 11, 19)
