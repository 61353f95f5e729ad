"""Hostile event keys end to end: a stream whose late events carry keys made to attack the
outputs people open (a spreadsheet formula, a script tag, Slack broadcasts, control
characters, broken mathtext) runs through `run_stream`, `tally reconcile` (validate, report,
CSV) and the alert text; every output shows the keys as data."""

from __future__ import annotations

import contextlib
import csv
import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from stream_helpers import InputFile, write_file

from dags.alerting import email_content, slack_message
from streaming.run import run_stream
from tally.alert import Alert
from tally.settings import Settings

DAY = "2026-11-20"
START = datetime(2026, 11, 20, tzinfo=UTC)
HOSTILE_KEYS = (
    '=HYPERLINK("http://x")',
    "<script>alert(1)</script>",
    "<!channel>",
    "@here",
    "+1",
    "-2+3",
    "tab\there",
    "\rcr",
    "$x^$",
)
LATE_AMOUNT = -5  # a negative amount: the CSV must keep it the number -5


def _ms(at: datetime) -> int:
    return int((at - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(milliseconds=1))


def _line(event_id: str, key: str, amount: int, at: datetime) -> str:
    time = at.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    return json.dumps({"event_id": event_id, "key": key, "amount": amount, "event_time": time})


@pytest.fixture(scope="module")
def reconciled(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The stream drained and `tally reconcile --date DAY` run; (reports dir, gx root)."""
    from tally_app.cli import main

    root = tmp_path_factory.mktemp("hostile")
    on_time = [
        _line(f"ok-{i}", f"k{i % 3}", 100 + i, START + timedelta(minutes=10 + i)) for i in range(12)
    ]
    # Second file, read after the first pushed the watermark to ~00:21: every event is late.
    late = [
        _line(f"late-{i}", key, LATE_AMOUNT, START + timedelta(minutes=1))
        for i, key in enumerate(HOSTILE_KEYS)
    ]
    arrival = _ms(START + timedelta(minutes=22))  # just after the last on-time event
    write_file(root / "in", InputFile("a-on-time.jsonl", arrival, on_time))
    write_file(root / "in", InputFile("b-late.jsonl", arrival + 1_000, late))
    settings = Settings(
        window=60_000,
        lateness=30_000,
        allowed_lateness=0,
        warehouse=str(root / "warehouse"),
        input=str(root / "in"),
        max_files_per_trigger=1,
        shuffle_partitions=2,
        spark_master="local[2]",
    )
    run_stream(settings, available_now=True, drain=True, clock="arrival", spark=spark)
    env = {
        "TALLY_SPARK_MASTER": "local[2]",
        "TALLY_SHUFFLE_PARTITIONS": "2",
        "TALLY_GX_ROOT": str(root / "gx"),
        "TALLY_LATE_RATE_WARN": "0.9",  # the late events are the point here
        "TALLY_LATE_RATE_FAIL": "0.9",
    }
    mp = pytest.MonkeyPatch()
    for key, value in env.items():
        mp.setenv(key, value)
    out = io.StringIO()
    out_dir = ("--out", str(root / "r"))
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = main(["reconcile", "--date", DAY, "--warehouse", settings.warehouse, *out_dir])
    finally:
        mp.undo()
    assert code == 0, out.getvalue()
    return root / "r", root / "gx"


def _csv_rows(reports: Path) -> list[dict[str, Any]]:
    with (reports / f"reconciliation-{DAY}.csv").open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_the_csv_neutralises_every_hostile_key_and_keeps_numbers(
    reconciled: tuple[Path, Path],
) -> None:
    reports, _ = reconciled
    rows = _csv_rows(reports)
    keys = {r["key"] for r in rows}
    formula_starts = ("=", "+", "-", "@", "\t", "\r")
    expected = {"'" + k if k.startswith(formula_starts) else k for k in HOSTILE_KEYS}
    assert expected <= keys, keys
    assert not any(k.startswith(formula_starts) for k in keys)
    late = [r for r in rows if r["key"] in expected]
    # each late event is a window the stream never had, all of it explained
    assert {r["status"] for r in late} == {"MISSING_IN_STREAM"}
    assert {r["residual_amount"] for r in late} == {"0"}
    # The amounts are the numbers, not neutralised text: -5 stays -5.
    assert {r["batch_amount"] for r in late} == {str(LATE_AMOUNT)}
    assert {r["diff_amount"] for r in late} == {str(LATE_AMOUNT)}
    raw = (reports / f"reconciliation-{DAY}.csv").read_text()
    assert ",-5," in raw  # unquoted: a spreadsheet reads a number


def test_the_report_and_data_docs_escape_every_hostile_key(
    reconciled: tuple[Path, Path],
) -> None:
    reports, gx_root = reconciled
    page = (reports / f"report-{DAY}.html").read_text()
    assert "<script" not in page and "<!channel>" not in page
    # the worst-keys table holds the keys, escaped
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;!channel&gt;" in page and "$x^$" in page
    docs = list((gx_root / "gx" / "uncommitted" / "data_docs").rglob("*.html"))
    assert docs
    for doc in docs:
        assert "<script>alert(1)" not in doc.read_text(), doc


def test_an_alert_naming_the_keys_carries_no_live_markup(
    reconciled: tuple[Path, Path],
) -> None:
    reports, _ = reconciled
    keys = sorted({r["key"] for r in _csv_rows(reports) if r["status"] == "MISSING_IN_STREAM"})
    alerts = [Alert(f"late events on key {k}", observed=k, threshold="0") for k in keys]
    slack = slack_message(alerts)
    for live in ("<!channel>", "<@", "<script", "@here", "<http"):
        assert live not in slack
    assert "&lt;!channel&gt;" in slack and "@\u2060here" in slack
    assert len(slack.splitlines()) == len(alerts)  # a CR in a key made no extra line
    subject, body = email_content(alerts)
    assert "\r" not in subject and "\n" not in subject
    assert "<script" not in body and "&lt;script&gt;" in body


def test_tally_show_prints_control_characters_as_pictures(reconciled: tuple[Path, Path]) -> None:
    from tally_app.show import show_table

    reports, _gx = reconciled
    settings = Settings(warehouse=str(reports.parent / "warehouse"), spark_master="local[2]")
    grid, lines = io.StringIO(), io.StringIO()
    assert show_table(settings, "late_events", limit=50, out=grid) == 0
    assert show_table(settings, "late_events", as_json=True, limit=50, out=lines) == 0
    text = grid.getvalue()
    # Only the grid's own line breaks: a key's tab or carriage return cannot move the cursor.
    assert [c for c in text if not c.isprintable() and c != "\n"] == []
    assert "tab\u2409here" in text and "\u240dcr" in text
    keys = {json.loads(line)["key"] for line in lines.getvalue().splitlines()}
    assert {"tab\there", "\rcr"} <= keys  # scripts get the data itself (JSON escapes it)
