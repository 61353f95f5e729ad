"""Great Expectations suites: a clean day passes every suite; each injected fault fails exactly
the expectation meant to catch it (with the observed value); re-runs do not duplicate rows.

Tables are hand-built from tiny inline rows (`frames.frame`; the helpers below are also used
by test_report.py); the batch layer's tables are built here from their column names, not with
batch/reconcile.py.
One GX project (a scratch `gx_root`) is shared by the whole module: GX on Spark is slowish.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from frames import frame
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from expectations import suites as S
from expectations.validate import (
    ValidationError,
    ValidationOutcome,
    data_docs_index,
    outcome_of,
    read_results,
    run_suite,
    validate_date,
    validate_frame,
)
from tally import tables as T
from tally.settings import Settings

DAY = date(2026, 11, 20)
NOW = datetime(2026, 11, 21, 2, 0, tzinfo=UTC)
WINDOW_MS = 60_000

# The batch layer's tables, by the column names it publishes.
RECONCILIATION_DDL = (
    "business_date DATE, window_start TIMESTAMP, window_end TIMESTAMP, key STRING, "
    "stream_count BIGINT, stream_amount BIGINT, batch_count BIGINT, batch_amount BIGINT, "
    "diff_count BIGINT, diff_amount BIGINT, late_count BIGINT, late_amount BIGINT, "
    "residual_count BIGINT, residual_amount BIGINT, max_lateness_ms BIGINT, status STRING"
)
SUMMARY_DDL = (
    "business_date DATE, windows BIGINT, stream_count BIGINT, stream_amount BIGINT, "
    "batch_count BIGINT, batch_amount BIGINT, gap_count BIGINT, gap_amount BIGINT, "
    "explained_count BIGINT, explained_amount BIGINT, unexplained_windows BIGINT, "
    "unexplained_count BIGINT, unexplained_amount BIGINT, late_events BIGINT, "
    "late_amount BIGINT, late_event_rate DOUBLE, max_lateness_ms BIGINT, "
    "worst_keys ARRAY<STRING>"
)
BATCH_AGGREGATES_DDL = (
    "business_date DATE, window_start TIMESTAMP, window_end TIMESTAMP, key STRING, "
    "event_count BIGINT, amount_sum BIGINT"
)
RUNS_DDL = (
    "business_date DATE, run_time TIMESTAMP, events_version BIGINT, "
    "stream_aggregates_version BIGINT, late_events_version BIGINT, window_ms BIGINT, "
    "report_timezone STRING, settings STRING, stream_progress_version BIGINT, "
    "partition_lateness_min_ms MAP<INT, BIGINT>, partition_lateness_max_ms MAP<INT, BIGINT>, "
    "partition_lateness_last_ms MAP<INT, BIGINT>"
)


# -- tiny tables ---------------------------------------------------------------------------------


def at(hhmmss: str, day: date = DAY) -> datetime:
    """A UTC time on the day: at("10:00:05")."""
    return datetime.fromisoformat(f"{day.isoformat()}T{hhmmss}+00:00")


def write(
    spark: SparkSession,
    warehouse: str,
    name: str,
    ddl: str | T.Table,
    rows: list[dict[str, Any]],
    partition_by: tuple[str, ...] = (),
) -> None:
    writer = frame(spark, ddl, rows).write.format("delta").mode("append")
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    writer.save(T.table_path(warehouse, name))


def recon(
    window: str,
    key: str,
    stream: tuple[int, int] = (0, 0),
    batch: tuple[int, int] = (0, 0),
    late: tuple[int, int] = (0, 0),
    status: str | None = None,
    in_stream: bool = True,
) -> dict[str, Any]:
    """A reconciliation row: window by its start ("10:00"), (count, amount) pairs; the status
    follows the batch layer's rule unless given."""
    diff = (batch[0] - stream[0], batch[1] - stream[1])
    residual = (diff[0] - late[0], diff[1] - late[1])
    if status is None:
        if residual != (0, 0):
            status = "UNEXPLAINED"
        elif late == (0, 0):
            status = "MATCH"
        else:
            status = "EXPLAINED_BY_LATE" if in_stream else "MISSING_IN_STREAM"
    start = at(f"{window}:00")
    return {
        "business_date": DAY,
        "window_start": start,
        "window_end": start + timedelta(milliseconds=WINDOW_MS),
        "key": key,
        "stream_count": stream[0],
        "stream_amount": stream[1],
        "batch_count": batch[0],
        "batch_amount": batch[1],
        "diff_count": diff[0],
        "diff_amount": diff[1],
        "late_count": late[0],
        "late_amount": late[1],
        "residual_count": residual[0],
        "residual_amount": residual[1],
        "max_lateness_ms": 4_000 if late[0] else None,
        "status": status,
    }


def event(
    event_id: str,
    key: str | None,
    amount: int,
    time: str,
    status: str = "on_time",
    ingest_delay_ms: int = 1_000,
    partition: int = 0,
) -> dict[str, Any]:
    event_time = at(time)
    ingest = event_time + timedelta(milliseconds=ingest_delay_ms)
    return {
        "event_id": event_id,
        "key": key,
        "amount": amount,
        "event_time": event_time,
        "partition": partition,
        "currency": "USD",
        "arrival_status": status,
        "clock_skewed": False,
        "source_mtime": ingest,
        "source_file": "in/arrival-000000.jsonl",
        "source_line": int(event_id.split("-")[-1]),
        "batch_id": 0,
        "ingest_time": ingest,
        "app_id": "app-1",
        "event_date": event_time.date(),
    }


def stream(window: str, key: str, count: int, amount: int, revision: int = 1) -> dict[str, Any]:
    start = at(f"{window}:00")
    end = start + timedelta(milliseconds=WINDOW_MS)
    emit = end + timedelta(seconds=30 * revision)
    return {
        "window_start": start,
        "window_end": end,
        "key": key,
        "event_count": count,
        "amount_sum": amount,
        "revision": revision,
        "emit_time": emit,
        "watermark_at_emit": emit,
        "batch_id": revision,
        "app_id": "app-1",
    }


def progress(
    batch_id: int,
    wm_before: str | None,
    wm_after: str | None,
    lag_ms: int | None,
    drained: bool = False,
) -> dict[str, Any]:
    processing = at("10:00:00") + timedelta(minutes=batch_id)
    return {
        "batch_id": batch_id,
        "app_id": "app-1",
        "processing_time": processing,
        "watermark_before": None if wm_before is None else at(wm_before),
        "watermark_after": None if wm_after is None else at(wm_after),
        "input_lines": 10,
        "valid_events": 10,
        "watermark_lag_ms": lag_ms,
        "drained": drained,
    }


def clean_tables() -> dict[str, list[dict[str, Any]]]:
    """A clean day: one window explained by one late event (late rate 1/3001), the rest
    matching; a clean event log; revisions once each; a monotonic watermark."""
    return {
        "reconciliation": [
            recon("10:00", "k1", stream=(1500, 150_000), batch=(1501, 150_070), late=(1, 70)),
            recon("10:00", "k2", stream=(1000, 99_960), batch=(1000, 99_960)),
            recon("10:01", "k1", stream=(500, 50_000), batch=(500, 50_000)),
        ],
        "events": [
            event("e-1", "k1", 100, "10:00:05"),
            event("e-2", "k1", 250, "10:00:30"),
            event("e-3", "k2", -40, "10:00:10", partition=1),
            event("e-4", "k1", 500, "10:01:10"),
            event("e-5", "k2", 70, "10:00:20", status="late", ingest_delay_ms=95_000),
        ],
        "stream_aggregates": [
            stream("10:00", "k1", 1, 100),
            stream("10:00", "k1", 2, 350, revision=2),
            stream("10:00", "k2", 1, -40),
            stream("10:01", "k1", 1, 500),
        ],
        "stream_progress": [
            progress(0, None, None, None),
            progress(1, None, "10:00:30", 30_000),
            progress(2, "10:00:30", "10:01:30", 30_000),
            progress(3, "10:01:30", "10:02:30", 40_000),
            progress(4, "10:02:30", None, None, drained=True),  # the drain stores no watermark
        ],
    }


TABLES: dict[str, tuple[str | T.Table, tuple[str, ...]]] = {
    "reconciliation": (RECONCILIATION_DDL, ("business_date",)),
    "events": (T.EVENTS, ("event_date",)),
    "stream_aggregates": (T.STREAM_AGGREGATES, ()),
    "stream_progress": (T.STREAM_PROGRESS, ()),
    "late_events": (T.LATE_EVENTS, ()),
    "reconciliation_summary": (SUMMARY_DDL, ("business_date",)),
    "batch_aggregates": (BATCH_AGGREGATES_DDL, ("business_date",)),
    "reconciliation_runs": (RUNS_DDL, ("business_date",)),
}


def write_tables(
    spark: SparkSession, warehouse: str, tables: dict[str, list[dict[str, Any]]]
) -> None:
    for name, rows in tables.items():
        ddl, partition_by = TABLES[name]
        write(spark, warehouse, name, ddl, rows, partition_by)


def failed(outcome_or_rows: ValidationOutcome | list[dict[str, Any]]) -> set[tuple[str, str]]:
    rows = (
        outcome_or_rows.results_rows
        if isinstance(outcome_or_rows, ValidationOutcome)
        else outcome_or_rows
    )
    return {(r["suite"], r["check_name"]) for r in rows if not r["success"]}


def row_of(rows: list[dict[str, Any]], check: str) -> dict[str, Any]:
    (row,) = [r for r in rows if r["check_name"] == check]
    return row


def docs_page(row: dict[str, Any]) -> str:
    """The HTML of a validation_results row's Data Docs page."""
    from pathlib import Path

    return Path(row["data_docs_page"].removeprefix("file://")).read_text()


def stored_result(gx_root: str, row: dict[str, Any]) -> dict[str, Any]:
    """The `result` GX stored for a validation_results row's expectation (the run of its page;
    every run of this module is named DAY at NOW, so the last one)."""
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier,
        ValidationResultIdentifier,
    )

    from expectations.validate import gx_context

    batch = row["data_docs_page"].rsplit("/", 1)[1].removesuffix(".html")
    identifier = ValidationResultIdentifier(
        ExpectationSuiteIdentifier(row["suite"]), RunIdentifier(DAY.isoformat(), NOW), batch
    )
    suite_result = gx_context(gx_root).validation_results_store.get(identifier)
    (each,) = [
        r for r in suite_result.results if r.expectation_config.meta["check"] == row["check_name"]
    ]
    return dict(each.result)


# -- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gx_root(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("gx_project"))


@pytest.fixture(scope="module")
def clean(spark, gx_root, tmp_path_factory) -> tuple[str, ValidationOutcome]:
    warehouse = str(tmp_path_factory.mktemp("clean") / "warehouse")
    write_tables(spark, warehouse, clean_tables())
    outcome = validate_date(spark, warehouse, DAY, now=NOW, gx_root=gx_root)
    return warehouse, outcome


# -- the clean day -------------------------------------------------------------------------------

EXPECTED_CHECKS = {
    S.GAP: {
        "reconciled",
        "known_status",
        "no_unexplained_windows",
        "unexplained_windows_named",
        "explained_gap_is_late_output",
        "no_copies_counted",
        "late_rate_warn",
        "late_rate_fail",
        "batch_side_present",
    },
    S.EVENTS: {
        "events_present",
        "event_id_not_null",
        "key_not_null",
        "event_time_not_null",
        "amount_is_integer",
        "amount_within_bounds",
        "event_time_not_ahead_of_ingest",
        "duplicate_rate",
    },
    S.STREAM_AGGREGATES: {"revision_unique", "latest_revision_unique"},
    S.STREAM_PROGRESS: {"batches_present", "watermark_monotonic", "watermark_lag"},
}


def test_clean_day_passes_every_suite(spark, clean, gx_root) -> None:
    warehouse, outcome = clean
    assert outcome.success, outcome.describe()
    assert outcome.failures == [] and outcome.warnings == []
    checks = {(r["suite"], r["check_name"]) for r in outcome.results_rows}
    assert checks == {(s, c) for s, cs in EXPECTED_CHECKS.items() for c in cs}
    assert all(r["success"] for r in outcome.results_rows)
    assert all(r["exception"] is None for r in outcome.results_rows)

    rows = {(r["suite"], r["check_name"]): r for r in read_results(spark, warehouse, DAY)}
    assert set(rows) == checks
    rate = rows[(S.GAP, "late_rate_warn")]
    assert rate["observed_value"] == "0.033 %"  # 1 / 3001, as a person reads a rate
    assert rate["severity"] == "warning" and rows[(S.GAP, "late_rate_fail")]["severity"] == (
        "critical"
    )
    assert rows[(S.EVENTS, "amount_is_integer")]["observed_value"] == "LongType"
    assert rows[(S.GAP, "no_unexplained_windows")]["observed_value"] == "0"
    # no UNEXPLAINED window: nothing named, the warning passes
    named = rows[(S.GAP, "unexplained_windows_named")]
    assert named["success"] and named["severity"] == "warning"
    assert (named["unexpected_count"], named["element_count"]) == (0, 3)
    assert named["observed_value"] == "0 of 3 rows unexpected"
    assert rows[(S.STREAM_PROGRESS, "watermark_lag")]["observed_value"] == "40000"
    assert rows[(S.EVENTS, "key_not_null")]["observed_value"] == "0 of 5 rows unexpected"
    # Provenance: the Delta version each suite validated, and the run time.
    assert {r["source_version"] for r in rows.values()} == {0}
    assert {r["run_time"] for r in rows.values()} == {NOW.replace(tzinfo=None)}

    # Data Docs: the site index and one page per suite run.
    index = data_docs_index(gx_root)
    assert index.is_file()
    assert outcome.data_docs_path == str(index)
    pages = {r["data_docs_page"] for r in outcome.results_rows}
    assert len(pages) == 4
    for page in pages:
        assert page.startswith("file://") and page.endswith(".html")
        assert (index.parent / page.split("/local_site/", 1)[1]).is_file()
    assert "|k1|" not in docs_page(named)  # the clean windows are not named


def test_suites_and_config_stay_in_the_scratch_project(clean, gx_root) -> None:
    from pathlib import Path

    gx_dir = Path(gx_root) / "gx"
    committed = {
        p.relative_to(gx_dir).as_posix()
        for p in gx_dir.rglob("*")
        if p.is_file() and "uncommitted" not in p.parts
    }
    # Everything a run writes (suites, checkpoints, results, docs) is under uncommitted/.
    assert committed == {"great_expectations.yml", ".gitignore"}
    suites = {p.stem for p in (gx_dir / "uncommitted" / "expectations").glob("*.json")}
    assert suites == set(S.SUITES)


def test_running_twice_does_not_duplicate_rows(spark, clean, gx_root) -> None:
    warehouse, first = clean
    before = T.read_table(spark, warehouse, T.VALIDATION_RESULTS.name).count()
    later = NOW + timedelta(hours=1)
    # Re-run one suite (each suite costs a GX run): its rows are replaced, the others kept.
    again = validate_date(spark, warehouse, DAY, now=later, gx_root=gx_root, suites=[S.GAP])
    assert again.success
    rows = read_results(spark, warehouse, DAY)
    assert len(rows) == before == len(first.results_rows)
    assert {r["run_time"] for r in rows if r["suite"] == S.GAP} == {later.replace(tzinfo=None)}
    assert {r["run_time"] for r in rows if r["suite"] != S.GAP} == {NOW.replace(tzinfo=None)}
    assert sorted((r["suite"], r["check_name"]) for r in rows) == sorted(
        (r["suite"], r["check_name"]) for r in first.results_rows
    )


# -- injected faults: each fails exactly its expectation -----------------------------------------


@pytest.fixture(scope="module")
def faults_warehouse(tmp_path_factory) -> str:
    """A warehouse with no source tables, for the tests that write validation_results."""
    return str(tmp_path_factory.mktemp("faults") / "warehouse")


def _validate(spark, gx_root: str, suite: str, rows: list[dict[str, Any]]) -> ValidationOutcome:
    """Run the suite on hand-built rows of its source table, in memory and without writing
    validation_results (the clean fixture covers reading Delta, the float test writing)."""
    ddl = TABLES[S.SOURCE_TABLE[suite]][0]
    prepared = S.select_for_date(suite, frame(spark, ddl, rows), DAY)
    return outcome_of(run_suite(DAY, suite, prepared, now=NOW, gx_root=gx_root), gx_root)


def test_an_unexplained_gap_fails_only_no_unexplained_windows(spark, gx_root) -> None:
    tables = clean_tables()
    tables["reconciliation"].append(recon("10:02", "k1", stream=(10, 1000), batch=(12, 1300)))
    outcome = _validate(spark, gx_root, S.GAP, tables["reconciliation"])
    # the critical count fails the date; the warning beside it names the window
    assert failed(outcome) == {
        (S.GAP, "no_unexplained_windows"),
        (S.GAP, "unexplained_windows_named"),
    }
    assert not outcome.success
    assert row_of(outcome.results_rows, "no_unexplained_windows")["observed_value"] == "1"
    (line,) = outcome.failures
    assert line.startswith("gap/no_unexplained_windows:") and line.endswith("Observed: 1")
    (warning,) = outcome.warnings
    assert warning.startswith("gap/unexplained_windows_named:")
    assert warning.endswith(
        'Observed: 1 of 4 rows unexpected, e.g. ["2026-11-20T10:02:00.000Z|k1|"]'
    )


def test_the_unexplained_windows_are_named_in_the_result_and_data_docs(spark, gx_root) -> None:
    tables = clean_tables()
    tables["reconciliation"] += [
        recon("10:02", "kx-one", stream=(10, 1000), batch=(12, 1300)),
        recon("10:03", "kx-two", stream=(10, 1000), batch=(11, 1100)),
        recon("10:04", "kx-matched", stream=(10, 1000), batch=(10, 1000)),
    ]
    outcome = _validate(spark, gx_root, S.GAP, tables["reconciliation"])
    assert outcome.failed_checks("critical") == {(S.GAP, "no_unexplained_windows")}
    assert outcome.failed_checks("warning") == {(S.GAP, "unexplained_windows_named")}
    row = row_of(outcome.results_rows, "unexplained_windows_named")
    assert (row["unexpected_count"], row["element_count"]) == (2, 6)
    one, two = "2026-11-20T10:02:00.000Z|kx-one|", "2026-11-20T10:03:00.000Z|kx-two|"
    assert row["observed_value"].startswith("2 of 6 rows unexpected, e.g. [")
    assert one in row["observed_value"] and two in row["observed_value"]

    # the stored result: each named window's start, key and currency (rows of no currency)
    result = stored_result(gx_root, row)
    assert sorted(result["partial_unexpected_list"]) == [one, two]
    named = sorted(result["partial_unexpected_index_list"], key=lambda w: w["key"])
    assert [(str(w["window_start"])[:19], w["key"], w["currency"]) for w in named] == [
        ("2026-11-20T10:02:00", "kx-one", None),
        ("2026-11-20T10:03:00", "kx-two", None),
    ]
    # Data Docs: exactly those two, each once, all of them (not a sample)
    html = docs_page(row)
    assert html.count(one) == html.count(two) == 1
    assert "kx-matched" not in html and "|k1|" not in html
    assert "Sampled Unexpected Values" not in html


def test_the_named_windows_are_capped(spark, gx_root) -> None:
    """A date may have thousands of UNEXPLAINED windows: NAMED_WINDOWS of them are named."""
    tables = clean_tables()
    many = S.NAMED_WINDOWS + 5
    tables["reconciliation"] += [
        recon(f"11:{i:02d}", f"kx-{i:02d}", stream=(1, 100), batch=(2, 200)) for i in range(many)
    ]
    outcome = _validate(spark, gx_root, S.GAP, tables["reconciliation"])
    assert row_of(outcome.results_rows, "no_unexplained_windows")["observed_value"] == str(many)
    row = row_of(outcome.results_rows, "unexplained_windows_named")
    assert row["unexpected_count"] == many and not row["success"]
    result = stored_result(gx_root, row)
    labels = {f"2026-11-20T11:{i:02d}:00.000Z|kx-{i:02d}|" for i in range(many)}
    assert len(set(result["partial_unexpected_list"]) & labels) == S.NAMED_WINDOWS
    assert len(result["partial_unexpected_index_list"]) == S.NAMED_WINDOWS
    html = docs_page(row)
    assert sum(label in html for label in labels) == S.NAMED_WINDOWS
    assert "Sampled Unexpected Values" in html  # GX says the list is a sample


def test_a_late_rate_between_the_thresholds_is_a_warning(spark, gx_root) -> None:
    tables = clean_tables()
    # 10 late of 3010 batch events: 0.33 % (above 0.1 %, below 1 %)
    tables["reconciliation"].append(
        recon("10:01", "k2", stream=(0, 0), batch=(9, 900), late=(9, 900), in_stream=False)
    )
    outcome = _validate(spark, gx_root, S.GAP, tables["reconciliation"])
    assert failed(outcome) == {(S.GAP, "late_rate_warn")}
    assert outcome.success  # a warning flags the date, it does not fail it
    assert outcome.failures == []
    (line,) = outcome.warnings
    observed = row_of(outcome.results_rows, "late_rate_warn")["observed_value"]
    assert observed == "0.332 %"  # 10 / 3010
    assert observed in line


def test_a_late_rate_over_the_failure_threshold_fails(spark, gx_root) -> None:
    tables = clean_tables()
    # 41 late of 3041 batch events: 1.35 % (above 1 %): both late-rate expectations fail
    tables["reconciliation"].append(
        recon("10:01", "k2", stream=(0, 0), batch=(40, 4000), late=(40, 4000), in_stream=False)
    )
    outcome = _validate(spark, gx_root, S.GAP, tables["reconciliation"])
    assert failed(outcome) == {(S.GAP, "late_rate_warn"), (S.GAP, "late_rate_fail")}
    assert not outcome.success
    fail = row_of(outcome.results_rows, "late_rate_fail")
    assert fail["observed_value"] == "1.348 %"  # 41 / 3041
    assert fail["severity"] == "critical"
    (line,) = outcome.failures
    assert "late_rate_fail" in line and fail["observed_value"] in line


def test_a_null_key_fails_only_key_not_null(spark, gx_root) -> None:
    tables = clean_tables()
    tables["events"].append(event("e-6", None, 30, "10:01:40"))
    outcome = _validate(spark, gx_root, S.EVENTS, tables["events"])
    assert failed(outcome) == {(S.EVENTS, "key_not_null")}
    row = row_of(outcome.results_rows, "key_not_null")
    assert row["observed_value"] == "1 of 6 rows unexpected, e.g. [null]"
    assert row["unexpected_count"] == 1 and row["element_count"] == 6
    assert "Observed: 1 of 6 rows unexpected" in outcome.failures[0]


def test_events_in_several_currencies_pass_the_events_suite(spark, gx_root) -> None:
    """Each currency is reconciled on its own (its own windows and summary row), so a date's
    events may be in several; rows from before events carried a currency (null) too."""
    tables = clean_tables()
    tables["events"][0]["currency"] = None
    tables["events"].append({**event("e-6", "k1", 30, "10:01:40"), "currency": "JPY"})
    tables["events"].append({**event("e-7", "k1", 30, "10:01:41"), "currency": "BHD"})
    outcome = _validate(spark, gx_root, S.EVENTS, tables["events"])
    assert failed(outcome) == set() and outcome.success
    checked = {r["check_name"] for r in outcome.results_rows}
    assert "one_currency" not in checked and "amount_within_bounds" in checked


def test_a_float_amount_fails_only_amount_is_integer(spark, gx_root, faults_warehouse) -> None:
    # events.amount is BIGINT in Delta, so the fault is a DataFrame whose amount is DOUBLE.
    warehouse = faults_warehouse
    events = frame(spark, T.EVENTS, clean_tables()["events"])
    floats = events.withColumn("amount", F.col("amount").cast("double") + F.lit(0.5))
    rows = validate_frame(
        spark, warehouse, DAY, S.EVENTS, S.prepare(S.EVENTS, floats), now=NOW, gx_root=gx_root
    )
    assert failed(rows) == {(S.EVENTS, "amount_is_integer")}
    assert row_of(rows, "amount_is_integer")["observed_value"] == "DoubleType"
    stored = [r for r in read_results(spark, warehouse, DAY) if r["suite"] == S.EVENTS]
    assert failed(stored) == {(S.EVENTS, "amount_is_integer")}  # replaced, not appended
    assert len(stored) == len(EXPECTED_CHECKS[S.EVENTS])


def test_a_decreasing_watermark_fails_only_watermark_monotonic(spark, gx_root) -> None:
    tables = clean_tables()
    tables["stream_progress"][3] = progress(3, "10:01:30", "10:01:00", 40_000)
    outcome = _validate(spark, gx_root, S.STREAM_PROGRESS, tables["stream_progress"])
    assert failed(outcome) == {(S.STREAM_PROGRESS, "watermark_monotonic")}
    row = row_of(outcome.results_rows, "watermark_monotonic")
    assert row["observed_value"] == "1 of 5 rows unexpected, e.g. [-30000]"


# -- without GX runs ---------------------------------------------------------------------------


def test_a_missing_table_is_one_failed_row(spark, faults_warehouse, gx_root) -> None:
    # The fault tests validate frames, so this warehouse holds no source tables.
    day = DAY - timedelta(days=1)
    outcome = validate_date(
        spark, faults_warehouse, day, now=NOW, gx_root=gx_root, suites=[S.GAP, S.STREAM_AGGREGATES]
    )
    assert failed(outcome) == {(S.GAP, "table_exists"), (S.STREAM_AGGREGATES, "table_exists")}
    assert "no Delta table at" in outcome.failures[0]
    assert len(read_results(spark, faults_warehouse, day)) == 2


def test_thresholds_come_from_settings_and_are_checked() -> None:
    settings = Settings(late_rate_warn=0.002, late_rate_fail=0.05, unexplained_tolerance=3)
    t = S.Thresholds.from_settings(settings)
    assert (t.late_rate_warn, t.late_rate_fail, t.unexplained_tolerance) == (0.002, 0.05, 3)
    assert t.max_clock_skew_ms == settings.max_clock_skew == 300_000
    suite = S.gap_suite(
        unexplained_tolerance=3, late_rate_warn=0.002, late_rate_fail=0.05, graded=False
    )
    by_check: dict[str, Any] = {(e.meta or {})["check"]: e for e in suite.expectations}
    assert by_check["no_unexplained_windows"].max_value == 3
    assert by_check["unexplained_windows_named"].severity == "warning"
    assert by_check["late_rate_warn"].severity == "warning"
    assert by_check["late_rate_fail"].max_value == 0.05
    assert "no_material_gap" not in by_check and t.tolerance == ()
    # with materiality tolerance rules the date's severity is checked instead of the count
    rules = '[{"key": "*", "window": {"fail_abs": 10}}]'
    t = S.Thresholds.from_settings(Settings(tolerance=rules))
    graded = S.build_suite(S.GAP, t)
    by_check = {(e.meta or {})["check"]: e for e in graded.expectations}
    assert "no_unexplained_windows" not in by_check and len(t.tolerance) == 1
    assert by_check["no_material_gap"].severity == "critical"
    assert by_check["no_material_gap"].value_set == ["ok", "warn"]
    assert by_check["unexplained_windows_named"].severity == "warning"  # in both modes
    assert (by_check["no_gap_above_warn"].severity, by_check["no_gap_above_warn"].value_set) == (
        "warning",
        ["ok"],
    )
    # the bounds are checked once, where the settings are read
    with pytest.raises(ValueError, match="late_rate_warn"):
        S.Thresholds.from_settings(Settings(late_rate_warn=0.2, late_rate_fail=0.1))
    assert S.Thresholds.defaults() == S.Thresholds.from_settings(Settings())


@pytest.mark.parametrize("build", [S.gap_suite, S.events_suite, S.stream_progress_suite])
def test_suites_have_no_defaults_of_their_own(build: Any) -> None:
    """A default here would be a second copy of the setting's (tally.settings.Settings)."""
    import inspect

    parameters = inspect.signature(build).parameters.values()
    assert parameters  # every one of these suites takes thresholds
    assert [p.name for p in parameters if p.default is not inspect.Parameter.empty] == []
    with pytest.raises(ValidationError, match="now: needs a time zone"):
        validate_date(None, "wh", DAY, now=datetime(2026, 1, 1), gx_root="gx")  # type: ignore[arg-type]  # noqa: DTZ001


def test_gap_frame_derives_exact_columns(spark) -> None:
    rows = [
        recon("10:00", "k1", stream=(5, 500), batch=(6, 570), late=(1, 70)),
        recon(
            "10:01", "k1", stream=(5, 500), batch=(6, 570), late=(1, 60), status="EXPLAINED_BY_LATE"
        ),
        recon("10:02", "k1", stream=(0, 0), batch=(0, 0), late=(0, 0), status="MATCH"),
    ]
    got = S.gap_frame(frame(spark, RECONCILIATION_DDL, rows)).orderBy("window_start").collect()
    assert [r["gap_is_explained"] for r in got] == [True, False, True]
    assert [r["batch_window_count"] for r in got] == [6, 6, None]
    assert {r["late_event_rate"] for r in got} == {2 / 12}
    assert "date_severity" not in got[0].asDict()  # no tolerance rules: the count is checked


def test_an_unexplained_window_is_named_by_start_key_and_currency(spark) -> None:
    rows = [
        recon("10:00", "k1", stream=(5, 500), batch=(6, 570)),  # UNEXPLAINED
        recon("10:00", "k2", stream=(5, 500), batch=(5, 500)),
        recon("10:01", "k3", stream=(5, 500), batch=(6, 570)),  # UNEXPLAINED, no currency
    ]
    reconciliation = frame(spark, RECONCILIATION_DDL, rows).withColumn(
        "currency", F.when(F.col("key") == "k1", "EUR")
    )
    got = S.gap_frame(reconciliation).orderBy("window_start", "key").collect()
    assert [r["unexplained_window"] for r in got] == [
        "2026-11-20T10:00:00.000Z|k1|EUR",
        None,
        "2026-11-20T10:01:00.000Z|k3|",
    ]


@pytest.mark.parametrize(
    ("window", "date", "expected"),
    [
        ({"warn_abs": 20}, {}, "ok"),  # 10 in the window, no date limits
        ({"warn_abs": 5}, {}, "warn"),  # the window above warn
        ({"warn_abs": 20}, {"fail_abs": 9}, "fail"),  # the date's sum above fail
    ],
)
def test_gap_frame_grades_the_date_under_tolerance_rules(
    spark, window: dict[str, int], date: dict[str, int], expected: str
) -> None:
    from tally.tolerance_columns import with_window_verdicts
    from tally.tolerances import parse_rules

    rules = parse_rules([{"name": "r", "key": "k*", "window": window, "date": date}])
    rows = [
        recon("10:00", "k1", stream=(5, 500), batch=(6, 510), late=(0, 0), status="UNEXPLAINED"),
        recon("10:01", "k1", stream=(5, 500), batch=(5, 500), late=(0, 0), status="MATCH"),
    ]
    graded = with_window_verdicts(frame(spark, RECONCILIATION_DDL, rows), rules, F.lit("USD"))
    got = S.gap_frame(graded, rules).collect()
    assert [r["date_severity"] for r in got] == [expected, expected]  # the date's, on each row


def test_validate_command_rejects_a_bad_date(capsys, tally_cli) -> None:
    assert tally_cli(["validate", "--date", "2026-13-01"]) == 2
    assert capsys.readouterr().err.strip() == (
        "tally: bad setting: date: expected YYYY-MM-DD, got '2026-13-01'"
    )


def test_results_table_schema() -> None:
    fields = {f.name: f.dataType.simpleString() for f in T.VALIDATION_RESULTS.schema().fields}
    assert fields["business_date"] == "date" and fields["run_time"] == "timestamp"
    assert fields["success"] == "boolean" and fields["observed_value"] == "string"
    assert T.VALIDATION_RESULTS.partition_by == ("business_date",)
    assert json.loads(json.dumps(sorted(fields)))  # plain names, no reserved words


def test_a_missing_data_docs_page_is_none_but_a_missing_site_is_an_error(tmp_path) -> None:
    """Only the unwritten page is tolerated (no link); a project without the Data Docs site
    used to give no link silently, now GX's own message says what is wrong."""
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier,
        ValidationResultIdentifier,
    )
    from great_expectations.exceptions import DataContextError

    from expectations.validate import data_docs_page, ensure_project, gx_context

    never_run = ValidationResultIdentifier(
        ExpectationSuiteIdentifier(S.GAP), RunIdentifier("never", NOW), "batch"
    )
    assert data_docs_page(gx_context(tmp_path / "ok"), never_run) is None
    ensure_project(tmp_path / "no-site")
    config = tmp_path / "no-site" / "gx" / "great_expectations.yml"
    config.write_text(config.read_text().replace("  local_site:", "  another_site:"))
    with pytest.raises(DataContextError, match="Could not find site named local_site"):
        data_docs_page(gx_context(tmp_path / "no-site"), never_run)


@pytest.mark.parametrize(
    ("share", "text"),
    [
        (0.05, "5 %"),  # a setting as people write it
        (7.000070000700007e-05, "0.007 %"),  # not 7.000070000700007e-05
        (1 / 3, "33.333 %"),  # three decimals at most
        (0.0, "0 %"),
        (1.0, "100 %"),
    ],
)
def test_a_rate_reads_as_a_percentage(share: float, text: str) -> None:
    assert S.percent(share) == text
