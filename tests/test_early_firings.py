"""Early results: provisional rows (final = false) of open windows, superseded by the final row.

A hand-computed replay through BatchProcessor, then the nightly's reconcile (which compares the
final rows only). W = 60 s, L = 10 s, G = 0, early firing interval 20 s, one partition; times
are seconds after T0.

| batch | now | lines    | WM after | rows (window start: revision (count, sum), kind)          |
|-------|-----|----------|----------|-----------------------------------------------------------|
| 0     | 10  | a 5 1    | -5       | 0: r1 (1, 1) early: changed, never emitted                |
| 1     | 20  | b 15 10  | 5        | none: changed, but its last row is 10 s old (< 20)        |
| 2     | 30  | garbage  | 5        | 0: r2 (2, 11) early: changed since r1, now 20 s old       |
| 3     | 75  | c 70 100 | 60       | 0: r3 (2, 11) FINAL (closed, never final); 60: r1 early   |
| 4     | 75  | drain    | none     | 60: r2 (1, 100) FINAL                                     |
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

import pytest
import reference_model as M
import stream_helpers as H

S = 1_000
T0 = H.T0_MS


def t(seconds: int) -> int:
    return T0 + seconds * S


def ev(event_id: str, seconds: int, amount: int) -> str:
    return H.event_line(event_id, "k", amount, t(seconds), 0)


BATCHES = [
    [H.InputFile("b0.jsonl", t(10), [ev("a", 5, 1)])],
    [H.InputFile("b1.jsonl", t(20), [ev("b", 15, 10)])],
    [H.InputFile("b2.jsonl", t(30), ["garbage"])],
    [H.InputFile("b3.jsonl", t(75), [ev("c", 70, 100)])],
]
PARAMS = M.Params(
    window_ms=60 * S,
    lateness_ms=10 * S,
    idle_timeout_ms=0,
    max_clock_skew_ms=300 * S,
    early_firing_interval_ms=20 * S,
)
# (window start s, revision): (count, sum, final, batch, emit time, watermark at emit)
ROWS = {
    (0, 1): (1, 1, False, 0, t(10), t(-5)),
    (0, 2): (2, 11, False, 2, t(30), t(5)),
    (0, 3): (2, 11, True, 3, t(75), t(60)),
    (60, 1): (1, 100, False, 3, t(75), t(60)),
    (60, 2): (1, 100, True, 4, t(75), None),
}


def rows(out: H.Outputs) -> dict[tuple[int, int], tuple[Any, ...]]:
    return {
        ((a.window_start_ms - T0) // S, a.revision): (
            a.event_count,
            a.amount_sum,
            a.final,
            a.batch_id,
            a.emit_time_ms,
            a.watermark_at_emit_ms,
        )
        for a in out.aggregates
    }


def model(params: M.Params = PARAMS) -> M.ReferenceModel:
    return M.run_model([H.model_lines(files) for files in BATCHES], params, drain=True)


def test_the_model_computes_the_hand_expectations() -> None:
    out = model()
    assert rows(H.model_outputs(out)) == ROWS and len(out.aggregates) == len(ROWS)
    # without early firings: the final rows alone, revision 1 each, with the same totals
    off = model(M.Params(**{**PARAMS.__dict__, "early_firing_interval_ms": 0}))
    assert [(a.revision, a.event_count, a.amount_sum, a.final) for a in off.aggregates] == [
        (1, 2, 11, True),
        (1, 1, 100, True),
    ]
    assert {k: (a.event_count, a.amount_sum) for k, a in out.answer().items()} == {
        k: (a.event_count, a.amount_sum) for k, a in off.answer().items()
    }


@pytest.fixture(scope="module")
def early(spark, tmp_path_factory) -> dict[str, Any]:
    from batch.reconcile import reconcile

    root = tmp_path_factory.mktemp("early")
    warehouse = str(root / "warehouse")
    H.run_processor(spark, warehouse, root / "input", BATCHES, PARAMS, drain=True)
    now = datetime(2026, 11, 22, 6, 0, tzinfo=UTC)
    result = reconcile(spark, warehouse, date(2026, 11, 21), 60 * S, now=now, settings={})
    return {"out": H.read_outputs(spark, warehouse), "result": result}


def test_early_rows_are_superseded_by_the_final_row(early: dict[str, Any]) -> None:
    assert rows(early["out"]) == ROWS and len(early["out"].aggregates) == len(ROWS)
    assert [p.windows_emitted for p in early["out"].progress] == [1, 0, 1, 2, 1]


def test_the_nightly_compares_the_final_rows_only(early: dict[str, Any]) -> None:
    result = early["result"]
    assert result.balanced
    # the early rows (1 + 2 + 1 events) would have counted 4 more
    assert (result.summary["stream_count"], result.summary["stream_amount"]) == (3, 111)
    assert result.summary["match_windows"] == 2
