"""Hopping windows end to end, hand-computed: stream (BatchProcessor), drain, reconcile,
validate and report, with an event counted in some of its windows and late for others.

S = 30 s sliding by H = 10 s (3 windows per event), L = 0, G = 0, one partition; times are
seconds after B = T0 + 1 h (all windows start on the business date of T0).

| batch | now | lines (id: time, amount)   | windows (start s) and their status        | WM after |
|-------|-----|----------------------------|-------------------------------------------|----------|
| 0     | 60  | a: 5 1 · b: 25 10          | a: -20 -10 0 · b: 0 10 20, all on time     | 25       |
| 1     | 70  | c: 12 100 · d: 41 1000     | c: -10 LATE (end 20 <= 25), 0 10 on time  | 41       |
| 2     | 80  | e: 15 10000                | e: -10 0 10, all LATE (ends 20 30 40 <= 41) | 41      |
| 3     | 80  | drain                      |                                           | none     |

c is `on_time` (its last window [10, 40) is open) yet has one late_events row, for [-10, 20);
e is `late`: three rows, one per window, each with its own lateness (21, 11, 1 s).
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

import pytest
import reference_model as M
import stream_helpers as H

S = 1_000
B = H.T0_MS + 3_600 * S
DAY = date(2026, 11, 21)
NOW = datetime(2026, 11, 22, 6, 0, tzinfo=UTC)


def t(seconds: int) -> int:
    return B + seconds * S


def ev(event_id: str, seconds: int, amount: int) -> str:
    return H.event_line(event_id, "k", amount, t(seconds), 0)


BATCHES = [
    [H.InputFile("b0.jsonl", t(60), [ev("a", 5, 1), ev("b", 25, 10)])],
    [H.InputFile("b1.jsonl", t(70), [ev("c", 12, 100), ev("d", 41, 1000)])],
    [H.InputFile("b2.jsonl", t(80), [ev("e", 15, 10_000)])],
]
PARAMS = M.Params(
    window_ms=30 * S,
    window_slide_ms=10 * S,
    lateness_ms=0,
    idle_timeout_ms=0,
    max_clock_skew_ms=300 * S,
)

# -- hand-computed expectations -----------------------------------------------------------
WATERMARK_AFTER = [t(25), t(41), t(41), None]
# window start s: (count, sum, batch emitted); one revision each
AGGREGATES = {
    -20: (1, 1, 0),  # a
    -10: (1, 1, 0),  # a (c and e came late for it)
    0: (3, 111, 1),  # a, b, c
    10: (2, 110, 1),  # b, c
    20: (2, 1010, 3),  # b, d: the drain
    30: (1, 1000, 3),  # d
    40: (1, 1000, 3),  # d
}
# (id, window start s): lateness ms, watermark at arrival
LATE = {
    ("c", -10): (5_000, t(25)),
    ("e", -10): (21_000, t(41)),
    ("e", 0): (11_000, t(41)),
    ("e", 10): (1_000, t(41)),
}
STATUSES = {"a": "on_time", "b": "on_time", "c": "on_time", "d": "on_time", "e": "late"}
# per batch: (valid, on time, late events, windows emitted, open windows after)
COUNTERS = [(2, 2, 0, 2, 3), (2, 2, 0, 2, 3), (1, 0, 1, 0, 3), (0, 0, 0, 3, 0)]
# reconciliation, window start s: (status, batch count, stream count, late count)
RECONCILIATION = {
    -20: ("MATCH", 1, 1, 0),
    -10: ("EXPLAINED_BY_LATE", 3, 1, 2),
    0: ("EXPLAINED_BY_LATE", 4, 3, 1),
    10: ("EXPLAINED_BY_LATE", 3, 2, 1),
    20: ("MATCH", 2, 2, 0),
    30: ("MATCH", 1, 1, 0),
    40: ("MATCH", 1, 1, 0),
}


def check_stream(out: H.Outputs) -> None:
    assert [p.watermark_after_ms for p in out.progress] == WATERMARK_AFTER
    got = {
        (a.window_start_ms - B) // S: (a.event_count, a.amount_sum, a.batch_id)
        for a in out.aggregates
    }
    assert got == AGGREGATES and len(out.aggregates) == len(AGGREGATES)
    assert all(a.window_end_ms - a.window_start_ms == 30 * S for a in out.aggregates)
    late = {
        (e.event_id, (e.window_start_ms - B) // S): (e.lateness_ms, e.watermark_at_arrival_ms)
        for e in out.late_events
    }
    assert late == LATE and len(out.late_events) == len(LATE)
    assert {e.event_id: e.arrival_status for e in out.events} == STATUSES
    counters = [
        (p.valid_events, p.on_time_events, p.late_events, p.windows_emitted, p.open_windows)
        for p in out.progress
    ]
    assert counters == COUNTERS


def test_the_model_computes_the_hand_expectations() -> None:
    batches = [H.model_lines(files) for files in BATCHES]
    check_stream(H.model_outputs(M.run_model(batches, PARAMS, drain=True)))


@pytest.fixture(scope="module")
def hopping(spark, tmp_path_factory) -> dict[str, Any]:
    """The stream, then the nightly's reconcile, validate and report data for the date."""
    from batch.reconcile import reconcile
    from expectations.report_data import collect_report_data
    from expectations.validate import validate_date

    root = tmp_path_factory.mktemp("hopping")
    warehouse = str(root / "warehouse")
    H.run_processor(spark, warehouse, root / "input", BATCHES, PARAMS, drain=True)
    result = reconcile(spark, warehouse, DAY, 30 * S, now=NOW, settings={}, window_slide_ms=10 * S)
    outcome = validate_date(spark, warehouse, DAY, now=NOW, gx_root=str(root / "gx"))
    report, _ = collect_report_data(spark, warehouse, DAY, NOW)
    recon = spark.read.format("delta").load(f"{warehouse}/reconciliation").collect()
    return {
        "warehouse": warehouse,
        "out": H.read_outputs(spark, warehouse),
        "result": result,
        "recon": recon,
        "outcome": outcome,
        "report": report,
    }


def test_stream_counts_an_event_in_some_windows_and_late_for_others(
    hopping: dict[str, Any],
) -> None:
    check_stream(hopping["out"])


def test_reconciliation_explains_each_window_by_its_own_late_rows(
    hopping: dict[str, Any],
) -> None:
    got = {
        (r["window_start"].replace(tzinfo=UTC).timestamp() * S - B) // S: (
            r["status"],
            r["batch_count"],
            r["stream_count"],
            r["late_count"],
        )
        for r in hopping["recon"]
    }
    assert got == RECONCILIATION
    result = hopping["result"]
    assert result.balanced
    # every event counted once per window: 5 events x 3 windows = 15 (window, event) pairs
    assert (result.summary["batch_count"], result.summary["stream_count"]) == (15, 11)
    assert result.summary["explained_count"] == len(LATE)
    assert result.windowing == "hopping 30s every 10s"
    assert "windows: hopping 30s every 10s;" in result.describe()  # as the report says


def test_validation_passes_and_the_report_names_the_windowing(hopping: dict[str, Any]) -> None:
    outcome = hopping["outcome"]
    # Every check holds but the late rate, which this replay makes high on purpose: 4 late
    # (event, window) rows of 15 in the batch truth.
    assert outcome.failed_checks() == {("gap", "late_rate_fail"), ("gap", "late_rate_warn")}
    assert hopping["result"].summary["late_event_rate"] == pytest.approx(4 / 15)
    assert hopping["report"].provenance["windows"] == "hopping 30s every 10s"


def test_reconciling_a_hopping_stream_as_tumbling_stops_with_one_line(
    spark, hopping: dict[str, Any]
) -> None:
    from batch.reconcile import ReconcileError, reconcile

    # the check runs before anything is written
    with pytest.raises(ReconcileError, match=r"^window_slide: .* off the 30000 ms slide"):
        reconcile(spark, hopping["warehouse"], DAY, 30 * S, now=NOW, settings={})
