"""The batch layer: re-aggregation, the diff and its statuses, idempotence, reproducibility.

One hand-built scenario (module fixture, reconciled once) holds every case; tests that
change tables build their own small warehouse.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from batch_fixtures import (
    append,
    event,
    late,
    ms,
    stream_row,
    table_rows,
    write_inputs,
)

from batch.diff import batch_aggregates
from batch.reconcile import (
    ReconcileError,
    ReconcileResult,
    reconcile,
    recorded_run,
    reproduce,
    rerun_arguments,
)
from tally import tables as T
from tally.dates import business_day_bounds, parse_business_date
from tally.tables import (
    BATCH_AGGREGATES,
    RECONCILIATION,
    RECONCILIATION_RUNS,
    RECONCILIATION_SUMMARY,
)
from tally.vocabulary import EXPLAINED_BY_LATE, MATCH, MISSING_IN_STREAM, UNEXPLAINED
from tally.windows import window_start_ms

pytestmark = pytest.mark.usefixtures("small_delta_snapshots")

# 7-minute windows do not divide the day: windows straddle midnight.
W = 7 * 60_000
DAY = date(2026, 11, 20)
NOW = datetime(2026, 11, 22, 3, 0, tzinfo=UTC)
DAY_MS = 86_400_000
BIG = 4_000_000_000_000_000  # 3 of them sum past 2^53 (9_007_199_254_740_992)


def collected(epoch_ms: int) -> datetime:
    """A timestamp as `collect()` returns it: naive, in this process's local time."""
    return datetime.fromtimestamp(epoch_ms / 1000)  # noqa: DTZ006


def win(text: str) -> int:
    """Start of the window holding the instant `text`."""
    return window_start_ms(ms(text), W)


# Window starts of the scenario (each is the window of the time given).
WIN = {
    "match": win("2026-11-20T10:00:00Z"),
    "rev": win("2026-11-20T10:30:00Z"),
    "late": win("2026-11-20T11:00:00Z"),
    "miss": win("2026-11-20T12:00:00Z"),
    "batch_only": win("2026-11-20T13:00:00Z"),
    "stream_only": win("2026-11-20T13:30:00Z"),
    "big": win("2026-11-20T14:00:00Z"),
    "daylate": win("2026-11-20T15:00:00Z"),
    "straddle": win("2026-11-20T23:59:50Z"),  # starts on the 20th, ends on the 21st
    "before": win("2026-11-20T00:00:10Z"),  # starts on the 19th, ends on the 20th
}
DAYLATE_LATENESS = DAY_MS + 3_600_000


def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(events, stream_aggregates, late_events) covering every case."""
    w = WIN
    ev: list[dict[str, Any]] = []
    st: list[dict[str, Any]] = []
    lt: list[dict[str, Any]] = []
    # MATCH, with duplicates: m2 replayed verbatim; m1 replayed with another amount, on an
    # *earlier* line and file time but a later ingest: ingest_time decides, the original wins.
    m1 = event("m1", "k-match", 100, w["match"] + 1000, source_line=50, source_mtime=w["match"])
    m2 = event("m2", "k-match", 250, w["match"] + 2000)
    ev += [m1, m2]
    ev.append({**m2, "arrival_status": "duplicate", "ingest_time": m2["ingest_time"] + 60_000})
    ev.append(
        {
            **m1,
            "amount": 999,
            "arrival_status": "duplicate",
            "ingest_time": m1["ingest_time"] + 5_000,
            "source_line": 1,
            "source_mtime": w["match"] - 10 * DAY_MS,
        }
    )
    st.append(stream_row(w["match"], W, "k-match", 2, 350))
    # MATCH only with the highest revision.
    ev += [event("r1", "k-rev", 10, w["rev"] + 1000), event("r2", "k-rev", 20, w["rev"] + 2000)]
    st += [stream_row(w["rev"], W, "k-rev", 1, 10, 1), stream_row(w["rev"], W, "k-rev", 2, 30, 2)]
    # EXPLAINED_BY_LATE: b arrived after the window closed.
    b = event("b", "k-late", 700, w["late"] + 2000, status="late")
    ev += [event("a", "k-late", 500, w["late"] + 1000), b]
    st.append(stream_row(w["late"], W, "k-late", 1, 500))
    lt.append(late(b, W, 4000))
    # MISSING_IN_STREAM: the window's only event was late; its late row is written twice.
    c = event("c", "k-miss", 900, w["miss"] + 1000, status="late")
    ev.append(c)
    lt += [late(c, W, 2000), {**late(c, W, 2000), "batch_id": 7}]
    # Keys on one side only.
    ev.append(event("x", "k-batch-only", 42, w["batch_only"] + 1000))
    st.append(stream_row(w["stream_only"], W, "k-stream-only", 1, 77))
    # Past 2^53, exact: 12_000_000_000_000_001 (a double cannot hold it).
    for i, amount in enumerate((BIG, BIG, BIG + 1)):
        ev.append(event(f"big{i}", "k-big", amount, w["big"] + 1000 * (i + 1)))
        ev.append(event(f"off{i}", "k-big-off", amount, w["big"] + 1000 * (i + 1)))
    st.append(stream_row(w["big"], W, "k-big", 3, 3 * BIG + 1))
    st.append(stream_row(w["big"], W, "k-big-off", 3, 3 * BIG))  # off by exactly 1
    # A day late: event time on the 20th, arrived on the 21st.
    e2 = event(
        "e2",
        "k-daylate",
        2000,
        w["daylate"] + 30_000,
        status="late",
        ingest=w["daylate"] + W + DAYLATE_LATENESS,
        batch_id=40,
    )
    ev += [event("e1", "k-daylate", 1000, w["daylate"] + 1000), e2]
    st.append(stream_row(w["daylate"], W, "k-daylate", 1, 1000))
    lt.append(late(e2, W, DAYLATE_LATENESS))
    # Midnight: s2 is timed on the 21st but its window started on the 20th.
    s1 = event("s1", "k-straddle", 5, ms("2026-11-20T23:59:50Z"))
    s2 = event("s2", "k-straddle", 6, w["straddle"] + W - 1000)
    ev += [s1, s2]
    st.append(stream_row(w["straddle"], W, "k-straddle", 2, 11))
    # The window straddling the previous midnight belongs to the 19th, not to this date.
    ev.append(event("p1", "k-before", 3, ms("2026-11-20T00:00:10Z")))
    st.append(stream_row(w["before"], W, "k-before", 1, 3))
    # The same event_id first arrived on the 19th; a later copy timed on the 20th (another
    # key) is a duplicate: the first arrival wins, so it is not counted on the 20th.
    ghost = event("g", "k-ghost-19", 8, ms("2026-11-19T12:00:00Z"))
    ev.append(ghost)
    ev.append(
        event(
            "g",
            "k-ghost",
            8,
            w["match"] + 3000,
            ingest=ghost["ingest_time"] + 1000,
            status="duplicate",
        )
    )
    return ev, st, lt


EXPECTED_STATUS = {
    "k-match": MATCH,
    "k-rev": MATCH,
    "k-big": MATCH,
    "k-straddle": MATCH,
    "k-late": EXPLAINED_BY_LATE,
    "k-daylate": EXPLAINED_BY_LATE,
    "k-miss": MISSING_IN_STREAM,
    "k-batch-only": UNEXPLAINED,
    "k-stream-only": UNEXPLAINED,
    "k-big-off": UNEXPLAINED,
}
OUTPUTS = (BATCH_AGGREGATES, RECONCILIATION, RECONCILIATION_SUMMARY, RECONCILIATION_RUNS)


@pytest.fixture(scope="module")
def reconciled(spark, tmp_path_factory) -> tuple[str, ReconcileResult, dict[str, dict[str, Any]]]:
    warehouse = str(tmp_path_factory.mktemp("reconcile") / "warehouse")
    assert WIN["straddle"] + W > ms("2026-11-21T00:00:00Z")  # the preconditions of the scenario
    assert WIN["before"] < ms("2026-11-20T00:00:00Z") < WIN["before"] + W
    events, stream, late_rows = scenario()
    write_inputs(spark, warehouse, W, events, stream, late_rows)
    result = reconcile(spark, warehouse, DAY, W, now=NOW, settings={"window": "7m"})
    rows = {
        r["key"]: r.asDict() for r in T.read_table(spark, warehouse, "reconciliation").collect()
    }
    return warehouse, result, rows


def test_every_status(reconciled):
    _, result, rows = reconciled
    assert {k: r["status"] for k, r in rows.items()} == EXPECTED_STATUS
    assert all(r["business_date"] == DAY for r in rows.values())
    # no tolerance rules: every residual fails, under no rule, and so does the date
    assert {k: (r["severity"], r["tolerance_rule"]) for k, r in rows.items()} == {
        k: ("fail" if status == UNEXPLAINED else "ok", "none")
        for k, status in EXPECTED_STATUS.items()
    }
    assert (result.summary["severity"], result.summary["tolerance_rule"]) == ("fail", "none")


# The scenario's UNEXPLAINED residuals: k-batch-only (1, 42), k-stream-only (-1, -77),
# k-big-off (0, 1).
SCENARIO_RULES = [
    {"name": "big", "key": "k-big*", "window": {"warn_abs": 0}, "date": {"warn_abs": 0}},
    {"name": "one side", "key": "k-*-only", "currency": "JPY", "window": {"fail_abs": 100}},
    {"name": "batch", "key": "k-batch-*", "window": {"fail_abs": 41}},
]


def test_tolerance_rules_grade_each_window_and_the_date(reconciled, spark):
    """The rows in JPY: "one side" (JPY) governs both one-sided keys (|-77|, 42 <= 100: ok)
    and has no date limits; k-big-off's 1 is above "big"'s warn (0); the date is "big"'s warn
    (its sums, 1 > 0, tie the window's warn: the date scope's verdict). The first match
    wins: "batch" would fail k-batch-only. In USD "one side" would govern nothing (held by
    tests/test_tolerance_columns.py)."""
    from tally.tolerances import parse_rules

    warehouse, _, _ = reconciled
    result = reconcile(
        spark,
        warehouse,
        DAY,
        W,
        now=NOW,
        keep_frames=True,
        write=False,
        tolerance=parse_rules(SCENARIO_RULES),
        currency="JPY",
    )
    assert result.frames is not None
    try:
        rows = {r["key"]: r for r in result.frames.reconciliation.collect()}
    finally:
        result.frames.release()
    graded = {k: (r["severity"], r["tolerance_rule"]) for k, r in rows.items()}
    assert graded == {
        **{k: ("ok", "big" if k.startswith("k-big") else "none") for k in EXPECTED_STATUS},
        "k-big-off": ("warn", "big"),
        "k-batch-only": ("ok", "one side"),
        "k-stream-only": ("ok", "one side"),
    }
    assert {k: r["status"] for k, r in rows.items()} == EXPECTED_STATUS  # the exact status
    assert (result.summary["severity"], result.summary["tolerance_rule"]) == ("warn", "big")
    assert "Severity warn (rule 'big'). UNEXPLAINED DIFFERENCES." in result.describe()


def test_diff_columns_are_exact_and_null_safe(reconciled):
    _, _, rows = reconciled
    for r in rows.values():
        assert r["diff_count"] == r["batch_count"] - r["stream_count"]
        assert r["diff_amount"] == r["batch_amount"] - r["stream_amount"]
        assert r["residual_count"] == r["diff_count"] - r["late_count"]
        assert r["residual_amount"] == r["diff_amount"] - r["late_amount"]
        # UNEXPLAINED exactly when something is left over.
        left_over = (r["residual_count"], r["residual_amount"]) != (0, 0)
        assert left_over == (r["status"] == UNEXPLAINED)
    late_row = rows["k-late"]
    assert (late_row["stream_count"], late_row["stream_amount"]) == (1, 500)
    assert (late_row["batch_count"], late_row["batch_amount"]) == (2, 1200)
    assert (late_row["late_count"], late_row["late_amount"]) == (1, 700)
    assert late_row["window_start"] == collected(WIN["late"])


def test_duplicates_counted_once_first_arrival_wins(reconciled):
    _, _, rows = reconciled
    assert (rows["k-match"]["batch_count"], rows["k-match"]["batch_amount"]) == (2, 350)
    assert "k-ghost" not in rows  # first copy is on the 19th: nothing of it on the 20th
    miss = rows["k-miss"]  # its late_events row was written twice
    assert (miss["late_count"], miss["late_amount"], miss["stream_count"]) == (1, 900, 0)


def test_sums_past_2_53_are_exact(reconciled):
    _, _, rows = reconciled
    assert rows["k-big"]["batch_amount"] == 12_000_000_000_000_001
    assert rows["k-big"]["residual_amount"] == 0
    off = rows["k-big-off"]
    assert (off["diff_count"], off["diff_amount"]) == (0, 1)
    assert (off["residual_count"], off["residual_amount"]) == (0, 1)
    assert float(off["batch_amount"]) == float(off["stream_amount"])  # a float would miss it


def test_keys_on_one_side_only(reconciled):
    _, _, rows = reconciled
    only_batch, only_stream = rows["k-batch-only"], rows["k-stream-only"]
    assert (only_batch["stream_count"], only_batch["stream_amount"]) == (0, 0)
    assert (only_batch["residual_count"], only_batch["residual_amount"]) == (1, 42)
    assert (only_stream["batch_count"], only_stream["batch_amount"]) == (0, 0)
    assert (only_stream["residual_count"], only_stream["residual_amount"]) == (-1, -77)


def test_window_straddling_midnight_belongs_to_the_earlier_date(reconciled, spark):
    warehouse, _, rows = reconciled
    straddle = rows["k-straddle"]
    assert (straddle["batch_count"], straddle["batch_amount"]) == (2, 11)  # s2 is on the 21st
    assert "k-before" not in rows  # its window started on the 19th
    events = T.read_table(spark, warehouse, "events")
    next_day = {r["key"] for r in batch_aggregates(events, DAY + timedelta(days=1), W).collect()}
    assert "k-straddle" not in next_day
    previous = batch_aggregates(events, DAY - timedelta(days=1), W).collect()
    assert {(r["key"], r["event_count"]) for r in previous} == {("k-before", 1), ("k-ghost-19", 1)}


def test_day_late_event_explained_on_its_own_date(reconciled):
    _, result, rows = reconciled
    daylate = rows["k-daylate"]
    assert daylate["status"] == EXPLAINED_BY_LATE
    assert (daylate["late_count"], daylate["late_amount"]) == (1, 2000)
    assert daylate["max_lateness_ms"] == DAYLATE_LATENESS > DAY_MS
    assert result.summary["max_lateness_ms"] == DAYLATE_LATENESS


def test_summary(reconciled, spark):
    warehouse, result, rows = reconciled
    s = result.summary
    batch = sum(r["batch_amount"] for r in rows.values())
    stream = sum(r["stream_amount"] for r in rows.values())
    assert s["windows"] == len(EXPECTED_STATUS) == 10
    assert (s["batch_amount"], s["stream_amount"]) == (batch, stream)
    assert s["batch_count"] == 2 + 2 + 2 + 1 + 1 + 3 + 3 + 2 + 2 == 18
    assert (s["explained_count"], s["explained_amount"]) == (3, 700 + 900 + 2000)
    assert (s["unexplained_windows"], s["unexplained_count"]) == (3, 0)
    assert s["unexplained_amount"] == 42 - 77 + 1
    assert s["unexplained_abs_amount"] == 42 + 77 + 1
    assert s["gap_amount"] == batch - stream == s["explained_amount"] + s["unexplained_amount"]
    assert (s["late_events"], s["late_amount"]) == (3, 3600)
    assert s["late_event_rate"] == pytest.approx(3 / 18)
    assert (s["match_windows"], s["explained_by_late_windows"]) == (4, 2)
    assert s["missing_in_stream_windows"] == 1
    assert s["worst_keys"] == ["k-stream-only", "k-batch-only", "k-big-off", "k-daylate", "k-miss"]
    assert not result.balanced
    text = result.describe()
    assert "3 windows" in text and "UNEXPLAINED" in text and "2026-11-20" in text
    run = recorded_run(spark, warehouse, DAY)
    assert run is not None
    assert run["events_version"] == result.events_version
    assert run["run_time"] == collected(ms(NOW.isoformat()))
    assert json.loads(run["settings"]) == {
        "window": "7m",
        "window_ms": W,
        "window_slide_ms": W,  # tumbling: the slide is the size
        "window_kind": "tumbling",
        "report_timezone": "UTC",
    }
    assert (run["unexplained_windows"], run["balanced"]) == (3, False)


def test_rerun_is_idempotent(reconciled, spark):
    warehouse, result, _ = reconciled
    before = {t.name: table_rows(spark, warehouse, t.name) for t in OUTPUTS}
    assert len(before["reconciliation"]) == 10 and len(before["batch_aggregates"]) == 9
    for _ in range(2):
        again = reconcile(spark, warehouse, DAY, W, now=NOW, settings={"window": "7m"})
        assert again == result
    after = {t.name: table_rows(spark, warehouse, t.name) for t in OUTPUTS}
    assert after == before
    assert all(len(set(rows)) == len(rows) for rows in after.values())
    assert len(after["reconciliation_summary"]) == len(after["reconciliation_runs"]) == 1


# -- tables that change -----------------------------------------------------------------------


def balanced_day() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Three windows, three keys, everything matching."""
    ev, st = [], []
    for i, (key, amounts) in enumerate((("a", (5, 7)), ("b", (11,)), ("c", (13, 17, 19)))):
        start = win(f"2026-11-20T0{i + 1}:00:00Z")
        ev += [event(f"{key}{j}", key, x, start + 1000 * (j + 1)) for j, x in enumerate(amounts)]
        st.append(stream_row(start, W, key, len(amounts), sum(amounts)))
    return ev, st


def statuses(spark, warehouse: str) -> dict[str, tuple[str, int, int]]:
    rows = T.read_table(spark, warehouse, "reconciliation").collect()
    return {r["key"]: (r["status"], r["residual_count"], r["residual_amount"]) for r in rows}


def test_recorded_versions_reproduce_after_appends(spark, warehouse):
    ev, st = balanced_day()
    write_inputs(spark, warehouse, W, ev, st)
    first = reconcile(spark, warehouse, DAY, W, now=NOW)
    assert first.balanced and first.summary["windows"] == 3
    snapshot = {t.name: table_rows(spark, warehouse, t.name) for t in OUTPUTS[:3]}

    # A day later, two late events of the 20th arrive: one in window "b" (which the stream
    # emitted), one in a window nobody emitted. The 20th is reopened.
    start_b = win("2026-11-20T02:00:00Z")
    start_d = win("2026-11-20T04:00:00Z")
    arrived = ms("2026-11-21T09:00:00Z")
    late_b = event("b9", "b", 1000, start_b + 5000, status="late", ingest=arrived, batch_id=9)
    late_d = event("d1", "d", 3000, start_d + 5000, status="late", ingest=arrived, batch_id=9)
    append(spark, warehouse, T.EVENTS, [late_b, late_d])
    append(
        spark,
        warehouse,
        T.LATE_EVENTS,
        [late(late_b, W, arrived - start_b - W), late(late_d, W, arrived - start_d - W)],
    )
    later = reconcile(spark, warehouse, DAY, W, now=NOW + timedelta(days=1))
    assert later.events_version > first.events_version
    assert statuses(spark, warehouse) == {
        "a": (MATCH, 0, 0),
        "b": (EXPLAINED_BY_LATE, 0, 0),
        "c": (MATCH, 0, 0),
        "d": (MISSING_IN_STREAM, 0, 0),
    }
    assert later.balanced and later.summary["gap_amount"] == 4000

    # The recorded versions of the first run give back exactly its rows.
    again = reconcile(
        spark,
        warehouse,
        DAY,
        W,
        events_version=first.events_version,
        stream_versions=first.stream_versions,
        now=NOW,
    )
    assert again == first
    assert {t.name: table_rows(spark, warehouse, t.name) for t in OUTPUTS[:3]} == snapshot
    # ...and `reproduce` re-runs at whatever the last run recorded (now: the first run's).
    assert reproduce(spark, warehouse, DAY, now=NOW) == first


def progress(
    batch_id: int, before: str | None, after: str | None, bounds: dict[int, int], app: str = "a1"
) -> dict[str, Any]:
    """A stream_progress row: its watermark before/after (None: none yet) and bounds in force;
    processed in batch order (a later app id restarts after the earlier one)."""
    return {
        "batch_id": batch_id,
        "app_id": app,
        "processing_time": ms("2026-11-20T00:00:00Z") + 60_000 * (batch_id + 100 * (app != "a1")),
        "watermark_before": None if before is None else ms(before),
        "watermark_after": None if after is None else ms(after),
        "partition_lateness_ms": bounds,
    }


def bounds_recorded(spark, warehouse: str) -> tuple[Any, ...]:
    run = recorded_run(spark, warehouse, DAY)
    assert run is not None
    return tuple(
        run[c]
        for c in (
            "stream_progress_version",
            "partition_lateness_min_ms",
            "partition_lateness_max_ms",
            "partition_lateness_last_ms",
        )
    )


def test_provenance_records_the_bounds_in_force_of_the_date(spark, warehouse):
    """reconciliation_runs records, per partition, the smallest, largest and last lateness
    bound in force over the micro-batches that carried the date (watermark across the day, or
    none yet), at the stream_progress version it pinned; `reproduce` reads that version."""
    ev, st = balanced_day()
    write_inputs(spark, warehouse, W, ev, st)
    reconcile(spark, warehouse, DAY, W, now=NOW)
    assert bounds_recorded(spark, warehouse) == (None, None, None, None)  # no stream_progress

    rows = [
        progress(0, "2026-11-19T10:00:00Z", "2026-11-19T20:00:00Z", {0: 7}),  # the day before
        progress(1, "2026-11-19T20:00:00Z", None, {0: 60_000, 1: 60_000}),  # none yet: carried
        progress(2, None, "2026-11-20T01:00:00Z", {0: 1_000, 1: 17_222}),
        progress(3, "2026-11-20T01:00:00Z", "2026-11-20T12:00:00Z", {0: 1_000, 1: 5_000}),
        # restarted (another app id), a third partition joins; crosses midnight
        progress(
            0, "2026-11-20T12:00:00Z", "2026-11-21T00:10:00Z", {0: 2_000, 1: 5_000, 2: 30_000}, "a2"
        ),
        progress(1, "2026-11-21T00:10:00Z", "2026-11-21T06:00:00Z", {0: 999_999}, "a2"),  # next day
    ]
    version = append(spark, warehouse, T.STREAM_PROGRESS, rows)
    first = reconcile(spark, warehouse, DAY, W, now=NOW)
    expected = (
        version,
        {0: 1_000, 1: 5_000, 2: 30_000},
        {0: 60_000, 1: 60_000, 2: 30_000},
        {0: 2_000, 1: 5_000, 2: 30_000},
    )
    assert first.stream_versions["stream_progress"] == version
    assert bounds_recorded(spark, warehouse) == expected

    # A late batch that still carried the date: a new run sees it, `reproduce` of the first
    # run's versions does not.
    append(
        spark,
        warehouse,
        T.STREAM_PROGRESS,
        [progress(2, "2026-11-20T23:00:00Z", "2026-11-20T23:30:00Z", {0: 500}, "a3")],
    )
    reconcile(spark, warehouse, DAY, W, now=NOW)
    assert bounds_recorded(spark, warehouse)[1][0] == 500
    again = reconcile(
        spark,
        warehouse,
        DAY,
        W,
        events_version=first.events_version,
        stream_versions=first.stream_versions,
        now=NOW,
    )
    assert again == first and bounds_recorded(spark, warehouse) == expected
    assert reproduce(spark, warehouse, DAY, now=NOW) == first
    assert bounds_recorded(spark, warehouse) == expected


def test_deleted_stream_row_is_exactly_one_unexplained_window(spark, warehouse):
    from delta.tables import DeltaTable

    ev, st = balanced_day()
    write_inputs(spark, warehouse, W, ev, st)
    path = T.table_path(warehouse, "stream_aggregates")
    # a defect from outside the stream: its tables refuse deletes (delta.appendOnly)
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.appendOnly' = 'false')")
    DeltaTable.forPath(spark, path).delete("key = 'c'")
    result = reconcile(spark, warehouse, DAY, W, now=NOW)
    assert statuses(spark, warehouse) == {
        "a": (MATCH, 0, 0),
        "b": (MATCH, 0, 0),
        "c": (UNEXPLAINED, 3, 13 + 17 + 19),
    }
    assert result.summary["unexplained_amount"] == 49
    assert result.summary["worst_keys"] == ["c"]


def test_tolerances_on_the_tables_of_a_tally_from_before_them(spark, warehouse):
    """`reconciliation` and its summary as a tally before tolerances created them (no
    severity columns) gain the columns and take the graded rows."""
    import dataclasses

    from tally.tolerances import parse_rules, rules_as_json

    ev, st = balanced_day()
    write_inputs(spark, warehouse, W, ev, [r for r in st if r["key"] != "c"])
    for table in (RECONCILIATION, RECONCILIATION_SUMMARY):
        # nor currencies, which came after
        earlier = table.ddl.replace(", severity STRING, tolerance_rule STRING", "")
        earlier = earlier.replace(", currency STRING", "")
        assert earlier != table.ddl
        T.ensure_table(spark, warehouse, dataclasses.replace(table, ddl=earlier))
    rules = parse_rules(
        [
            {
                "name": "c",
                "key": "c",
                "window": {"warn_abs": 40, "fail_abs": 60},
                "date": {"fail_count": 2},
            }
        ]
    )
    recorded = {"tolerance": rules_as_json(rules)}  # as the nightly records its settings
    result = reconcile(spark, warehouse, DAY, W, now=NOW, tolerance=rules, settings=recorded)
    rows = T.read_table(spark, warehouse, "reconciliation").collect()
    assert {r["key"]: (r["status"], r["severity"], r["tolerance_rule"]) for r in rows} == {
        "a": (MATCH, "ok", "none"),
        "b": (MATCH, "ok", "none"),
        "c": (UNEXPLAINED, "warn", "c"),  # 49 minor units: above warn (40), within fail (60)
    }
    # the date: c's 3 events exceed the date's fail_count of 2
    (summary,) = T.read_table(spark, warehouse, "reconciliation_summary").collect()
    assert (summary["severity"], summary["tolerance_rule"]) == ("fail", "c")
    assert summary["severity"] == result.summary["severity"]
    (run,) = T.read_table(spark, warehouse, "reconciliation_runs").collect()
    assert run["balanced"] is False  # the books: a residual is a residual, whatever its grade
    # A reproduction (`reconcile(**rerun_arguments(run))`) grades with the rules the run
    # recorded, not with none.
    assert rerun_arguments(recorded_run(spark, warehouse, DAY))["tolerance"] == rules


def test_repeat_beyond_the_dedup_horizon_explains_nothing(spark, warehouse):
    """The stream forgets an id after its dedup horizon: a later repeat is classified like a
    new event, `late`, in `events` and in `late_events`. The batch counts the first arrival
    only, so the late row of a repeat must not count as explaining a gap."""
    start, other = win("2026-11-20T05:00:00Z"), win("2026-11-20T06:00:00Z")
    replayed_at = ms("2026-11-21T09:00:00Z")  # a day later: far beyond the horizon

    def repeat(row: dict[str, Any]) -> dict[str, Any]:
        return event(
            row["event_id"],
            row["key"],
            row["amount"],
            row["event_time"],
            status="late",
            ingest=replayed_at,
            batch_id=9,
        )

    counted = event("o1", "k", 40, start + 1000)  # counted on time by the stream
    late_first = event("l1", "k2", 5, other + 1000, status="late")  # its first arrival was late
    events = [counted, repeat(counted), late_first, repeat(late_first)]
    # late_events: the rows of the events marked late (both copies of l1, the copy of o1).
    write_inputs(spark, warehouse, W, events, [stream_row(start, W, "k", 1, 40)])
    first = reconcile(spark, warehouse, DAY, W, now=NOW)
    assert statuses(spark, warehouse) == {
        "k": (MATCH, 0, 0),  # not UNEXPLAINED with a residual of -1 / -40
        "k2": (MISSING_IN_STREAM, 0, 0),  # l1 counted once, by its first (late) arrival
    }
    rows = {r["key"]: r for r in T.read_table(spark, warehouse, "reconciliation").collect()}
    assert (rows["k"]["late_count"], rows["k"]["late_amount"]) == (0, 0)
    assert (rows["k"]["batch_count"], rows["k"]["stream_count"]) == (1, 1)
    assert (rows["k2"]["late_count"], rows["k2"]["late_amount"]) == (1, 5)
    assert first.balanced and first.late_repeats == 2
    assert (first.summary["late_events"], first.summary["explained_amount"]) == (1, 5)
    assert "2 late rows repeat an earlier event" in first.describe()

    # A genuine late event of the same window and key (same replayed batch) still explains
    # its part of the gap; the repeat still does not.
    genuine = event("g1", "k", 7, start + 2000, status="late", ingest=replayed_at, batch_id=9)
    append(spark, warehouse, T.EVENTS, [genuine])
    append(spark, warehouse, T.LATE_EVENTS, [late(genuine, W, replayed_at - start - W)])
    later = reconcile(spark, warehouse, DAY, W, now=NOW)
    assert statuses(spark, warehouse)["k"] == (EXPLAINED_BY_LATE, 0, 0)
    k = T.read_table(spark, warehouse, "reconciliation").where("key = 'k'").first()
    assert (k["batch_count"], k["batch_amount"], k["stream_amount"]) == (2, 47, 40)
    assert (k["late_count"], k["late_amount"]) == (1, 7)
    assert later.balanced and later.late_repeats == 2


def test_a_late_row_beyond_the_pinned_log_explains_nothing(spark, warehouse):
    """A run pins `events` before `late_events`: a batch the stream commits in between has
    late rows whose lines the pinned log lacks. A late row of an id with no other line is
    marked from the log's batch frontier, not ranked: at an older pin of the log it is no
    first arrival (the batch does not count it, so it explains nothing); at the newer pin
    it is one."""
    ev, st = balanced_day()
    write_inputs(spark, warehouse, W, ev, st)
    before = reconcile(spark, warehouse, DAY, W, now=NOW)
    start_b, arrived = win("2026-11-20T02:00:00Z"), ms("2026-11-21T09:00:00Z")
    late_b = event("b9", "b", 1000, start_b + 5000, status="late", ingest=arrived, batch_id=9)
    append(spark, warehouse, T.EVENTS, [late_b])
    append(spark, warehouse, T.LATE_EVENTS, [late(late_b, W, arrived - start_b - W)])

    older_log = reconcile(spark, warehouse, DAY, W, events_version=before.events_version, now=NOW)
    assert statuses(spark, warehouse)["b"] == (MATCH, 0, 0)
    assert older_log.balanced and older_log.late_repeats == 1
    assert older_log.summary["late_events"] == 0

    newer_log = reconcile(spark, warehouse, DAY, W, now=NOW)
    assert statuses(spark, warehouse)["b"] == (EXPLAINED_BY_LATE, 0, 0)
    assert newer_log.balanced and newer_log.late_repeats == 0
    assert (newer_log.summary["late_events"], newer_log.summary["gap_amount"]) == (1, 1000)


def test_errors_name_the_problem(reconciled, spark, tmp_path):
    warehouse, _, _ = reconciled
    with pytest.raises(ReconcileError, match="events: no Delta table"):
        reconcile(spark, str(tmp_path / "empty"), DAY, W, now=NOW)
    with pytest.raises(ReconcileError, match="does not exist"):
        reconcile(spark, warehouse, DAY, W, events_version=99, now=NOW)
    with pytest.raises(ReconcileError, match="60000 ms"):
        reconcile(spark, warehouse, DAY, 60_000, now=NOW)
    with pytest.raises(ReconcileError, match="unknown table"):
        reconcile(spark, warehouse, DAY, W, stream_versions={"events": 0}, now=NOW)
    with pytest.raises(ReconcileError, match="unknown time zone"):
        reconcile(spark, warehouse, DAY, W, "Mars/Olympus", now=NOW)
    with pytest.raises(ReconcileError, match="unknown time zone 'Europe'"):  # a directory
        reconcile(spark, warehouse, DAY, W, "Europe", now=NOW)
    # A valid zone with a date that has no end is not "an unknown time zone".
    with pytest.raises(ReconcileError, match=r"business_date: 9999-12-31 has no end"):
        reconcile(spark, warehouse, date.max, W, "UTC", now=NOW)
    with pytest.raises(ReconcileError, match="never reconciled"):
        reproduce(spark, warehouse, DAY - timedelta(days=3), now=NOW)


def test_business_day_bounds():
    assert business_day_bounds(DAY) == (ms("2026-11-20T00:00:00Z"), ms("2026-11-21T00:00:00Z"))
    assert business_day_bounds(DAY, "Asia/Kolkata") == (
        ms("2026-11-19T18:30:00Z"),
        ms("2026-11-20T18:30:00Z"),
    )
    start, end = business_day_bounds(date(2026, 11, 1), "America/New_York")  # DST ends
    assert end - start == 25 * 3_600_000


def test_report_timezone_moves_windows_between_dates(reconciled, spark):
    """In Asia/Kolkata (+05:30) the 20th starts at 18:30Z on the 19th."""
    warehouse, _, _ = reconciled
    events = T.read_table(spark, warehouse, "events")
    keys = {r["key"] for r in batch_aggregates(events, DAY, W, "Asia/Kolkata").collect()}
    # k-straddle (23:59Z on the 20th = 05:29 IST on the 21st) moves to the 21st; the
    # 19th's 12:00Z ghost (17:30 IST on the 19th) stays on the 19th.
    assert "k-straddle" not in keys and "k-ghost-19" not in keys
    assert {"k-before", "k-match", "k-daylate"} <= keys


def test_cli(reconciled, spark, capsys, tally_cli):
    """`tally reconcile --reproduce` on the scenario: the run recomputed at its pins matches
    what it recorded (exit 0, whatever its windows' statuses); `--write` also writes it again,
    with the unexplained windows it has."""
    warehouse, result, _ = reconciled
    again = ["reconcile", "--date", "2026-11-20", "--reproduce", "--warehouse", warehouse]
    window = {"TALLY_AUDIT_WINDOW": "3650d"}  # the run's time is fixed; the test runs later
    assert tally_cli(again, **window) == 0
    assert capsys.readouterr().out.endswith("10 windows and the run's figures): MATCH\n")
    assert tally_cli([*again, "--write"], **window) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 2 and out.split("\n")[0].endswith("MATCH")
    assert "UNEXPLAINED DIFFERENCES" in out
    assert f"events v{result.events_version}," in out and "3 windows" in out
    assert "late rate 16.6667%" in out

    assert tally_cli(["reconcile", "--date", "20-11-2026", "--warehouse", warehouse]) == 2
    assert capsys.readouterr().err == (
        "tally: bad setting: date: expected YYYY-MM-DD, got '20-11-2026'\n"
    )
    with pytest.raises(ValueError):
        parse_business_date("20261120")


def test_reconcile_uses_the_window_the_stream_recorded(
    reconciled, spark, tmp_path, capsys, tally_cli
):
    """No --window: the stream's 7-minute windows, not the 60 s default; a different explicit
    window is refused before anything is written."""
    warehouse, _, _ = reconciled
    run = ["reconcile", "--date", "2026-11-20", "--warehouse", warehouse]
    out = {"TALLY_GX_ROOT": str(tmp_path), "TALLY_REPORT_DIR": str(tmp_path / "reports")}
    assert tally_cli([*run, "--window", "60s"], **out) == 2
    assert capsys.readouterr().err == (
        "tally: bad setting: window: the stream recorded 420000 ms windows, but the window is "
        "60000 ms (omit --window to use the stream's)\n"
    )
    assert not (tmp_path / "reports").exists()
    assert tally_cli(run, **out) == 1  # the scenario has UNEXPLAINED windows
    assert "windows: tumbling 7m;" in capsys.readouterr().out
    assert recorded_run(spark, warehouse, DAY)["window_ms"] == W
    assert (tmp_path / "reports" / "report-2026-11-20.html").exists()


@pytest.mark.parametrize(
    ("settings", "currency"),
    [
        ("{}", "USD"),  # a run from before currencies counted in USD
        ('{"default_currency": "JPY"}', "JPY"),  # its rows from before currencies: yen
    ],
)
def test_a_rerun_reads_old_rows_in_the_runs_currency(settings: str, currency: str) -> None:
    run = {
        "settings": settings,
        "window_ms": W,
        "report_timezone": "UTC",
        "events_version": 1,
        "stream_aggregates_version": 1,
        "late_events_version": 1,
    }
    assert rerun_arguments(run)["currency"] == currency


def test_a_recorded_currency_that_is_no_code_is_one_line() -> None:
    run = {
        "settings": '{"default_currency": "usd"}',
        "window_ms": W,
        "report_timezone": "UTC",
        "events_version": 1,
        "stream_aggregates_version": 1,
        "late_events_version": 1,
    }
    with pytest.raises(ReconcileError, match=r"^reconciliation_runs.settings: default_currency: "):
        rerun_arguments(run)
