"""Per-source lateness: a hand-computed replay where a radar (L = 100 ms) and an HTTP poller
(L = 30 s) feed one watermark, through BatchProcessor (the stream's real per-batch code).

W = 10 s, G = 0, idle timeout 60 s, partition-min; p0 is the radar, p1 the poller; times are
seconds after T0. Each partition bounds the watermark by `b_p = hw_p - L_p`; the watermark is
the minimum (docs/semantics.md, "Per-source lateness").

| batch | now | lines (id: partition, time, amount)       | b_0     | b_1  | WM after |
|-------|-----|-------------------------------------------|---------|------|----------|
| 0     | 60  | r1: p0 50 1 · q1: p1 40 10                | 49.9    | 10   | 10       |
| 1     | 70  | r2: p0 69.95 2 · q2: p1 75 20             | 69.85   | 45   | 45       |
| 2     | 110 | r3: p0 109.9 4 · q3: p1 50 40 · q4: p1 112 80 | 109.8 | 82 | 82     |
| 3     | 120 | r4: p0 111 8 · q5: p1 150 160 · q6: p1 79 320 | 110.9 | 120 | 110.9 |
| 4     | 120 | drain                                     |         |      | none     |

q3 arrives 25 s behind the poller's high-water mark (75 s): within the poller's 30 s, so its
window [50, 60) (end 60 > WM 45) still counts it. One bound of 100 ms for everyone would have
made it late (WM 69.85 after batch 1); one bound of 30 s for everyone would have kept
[100, 110) open in batch 3 (WM 81). q6 is 33 s behind the poller (112 s): late. In batch 3
the radar's tight bound is the minimum: the watermark follows the radar 100 ms behind it.
"""

from __future__ import annotations

from typing import Any

import pytest
import reference_model as M
import stream_helpers as H

S = 1_000
T0 = H.T0_MS


def t(seconds: float) -> int:
    return T0 + round(seconds * S)


def ev(event_id: str, partition: int, seconds: float, amount: int) -> str:
    return H.event_line(event_id, "k", amount, t(seconds), partition)


BATCHES = [
    [H.InputFile("b0.jsonl", t(60), [ev("r1", 0, 50, 1), ev("q1", 1, 40, 10)])],
    [H.InputFile("b1.jsonl", t(70), [ev("r2", 0, 69.95, 2), ev("q2", 1, 75, 20)])],
    [
        H.InputFile(
            "b2.jsonl", t(110), [ev("r3", 0, 109.9, 4), ev("q3", 1, 50, 40), ev("q4", 1, 112, 80)]
        )
    ],
    [
        H.InputFile(
            "b3.jsonl", t(120), [ev("r4", 0, 111, 8), ev("q5", 1, 150, 160), ev("q6", 1, 79, 320)]
        )
    ],
]
PARAMS = M.Params(
    window_ms=10 * S,
    lateness_ms=10 * S,
    lateness_by_partition={0: 100, 1: 30 * S},
    idle_timeout_ms=60 * S,
    max_clock_skew_ms=300 * S,
)

# -- hand-computed expectations -----------------------------------------------------------
WATERMARK_AFTER = [t(10), t(45), t(82), t(110.9), None]
# (window start s): (count, sum, batch, watermark at emit); key k throughout
AGGREGATES = {
    40: (1, 10, 2, t(82)),  # q1 (end 50 > WM 45 after batch 1)
    50: (2, 41, 2, t(82)),  # r1, q3 (25 s behind the poller, within its 30 s)
    60: (1, 2, 2, t(82)),  # r2
    70: (1, 20, 2, t(82)),  # q2 (q6 came 33 s behind: late)
    100: (1, 4, 3, t(110.9)),  # r3: closed by the radar's bound
    110: (2, 88, 4, None),  # q4, r4: the drain
    150: (1, 160, 4, None),  # q5: the drain
}
# id: (window start s, watermark at arrival, lateness ms, batch)
LATE = {"q6": (70, t(82), 2_000, 3)}


def aggregates(rows: list[M.AggregateRow]) -> dict[int, tuple[Any, ...]]:
    return {
        (a.window_start_ms - T0) // S: (
            a.event_count,
            a.amount_sum,
            a.batch_id,
            a.watermark_at_emit_ms,
        )
        for a in rows
    }


def late(rows: list[M.LateRow]) -> dict[str, tuple[Any, ...]]:
    return {
        e.event_id: (
            (e.window_start_ms - T0) // S,
            e.watermark_at_arrival_ms,
            e.lateness_ms,
            e.batch_id,
        )
        for e in rows
    }


@pytest.fixture(scope="module")
def spark_out(spark, tmp_path_factory) -> H.Outputs:
    root = tmp_path_factory.mktemp("per-source")
    warehouse = str(root / "warehouse")
    H.run_processor(spark, warehouse, root / "input", BATCHES, PARAMS, drain=True)
    return H.read_outputs(spark, warehouse)


def model_out(params: M.Params = PARAMS) -> H.Outputs:
    batches = [H.model_lines(files) for files in BATCHES]
    return H.model_outputs(M.run_model(batches, params, drain=True))


@pytest.mark.parametrize("source", ["spark", "model"])
def test_per_source_bounds_feed_one_watermark(spark_out: H.Outputs, source: str) -> None:
    out = spark_out if source == "spark" else model_out()
    assert [p.watermark_after_ms for p in out.progress] == WATERMARK_AFTER
    assert aggregates(out.aggregates) == AGGREGATES
    assert len(out.aggregates) == len(AGGREGATES)  # one revision each
    assert late(out.late_events) == LATE
    assert sorted(e.event_id for e in out.events if e.arrival_status == "on_time") == sorted(
        ["r1", "q1", "r2", "q2", "r3", "q3", "q4", "r4", "q5"]
    )


def test_spark_and_model_agree_row_for_row(spark_out: H.Outputs) -> None:
    want = model_out()
    for name in ("aggregates", "late_events", "events"):
        assert sorted(getattr(spark_out, name)) == sorted(getattr(want, name)), name


def test_one_bound_for_every_source_is_worse_either_way() -> None:
    """The same input under a single bound: the radar's 100 ms makes q3 late; the poller's
    30 s keeps [100, 110) open in batch 3 (the minimum rule with per-source bounds does both)."""
    tight = model_out(
        M.Params(**{**PARAMS.__dict__, "lateness_by_partition": {}, "lateness_ms": 100})
    )
    assert "q3" in late(tight.late_events)
    loose = model_out(
        M.Params(**{**PARAMS.__dict__, "lateness_by_partition": {}, "lateness_ms": 30 * S})
    )
    assert loose.progress[3].watermark_after_ms == t(81)
    assert [a.batch_id for a in loose.aggregates if a.window_start_ms == t(100)] == [4]
