"""Adaptive lateness replayed: the reference model (written from the spec) against the pure
rule (streaming/lateness.py feeding streaming/watermark.py), on a hand-computed delay burst
and on random streams."""

from __future__ import annotations

import json

import reference_model as M
import stream_helpers as H
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streaming.lateness import (
    DelayHistogram,
    advance_histograms,
    auto_lateness,
    batch_delay_counts,
)
from streaming.watermark import WatermarkState, advance_watermark

S = 1_000
T0 = H.T0_MS  # event times are epoch ms from here
IDLE = 600 * S


def line(batch: int, index: int, partition: int, event_ms: int, now_ms: int) -> M.Line:
    raw = json.dumps(
        {
            "event_id": f"b{batch}-{index}",
            "key": "k",
            "amount": 1,
            "event_time": T0 + event_ms,
            "partition": partition,
        }
    )
    return M.Line(raw, f"b{batch}.jsonl", index + 1, T0 + now_ms)


def pure_replay(
    batches: list[list[tuple[int, int]]], auto: M.AutoLateness, fallback: dict[int, int]
) -> list[tuple[dict[int, int], int | None]]:
    """(bounds, watermark after) per batch from the pure modules, batch i at now = i * 10 s."""
    state = WatermarkState()
    histograms: dict[int, DelayHistogram] = {}
    out = []
    for number, events in enumerate(batches):
        shifted = [(p, T0 + ms) for p, ms in events]
        counts = batch_delay_counts(shifted, state.high_water_ms)
        batch_hw: dict[int, int] = {}
        for p, ms in shifted:
            batch_hw[p] = max(ms, batch_hw.get(p, ms))
        histograms = advance_histograms(histograms, counts, state.high_water_ms, batch_hw)
        known = sorted({*state.high_water_ms, *batch_hw})
        bounds = auto_lateness(
            histograms, known, auto.target_pct, auto.min_ms, auto.max_ms, fallback,
            auto.min_history,
        )  # fmt: skip
        advance = advance_watermark(
            state, batch_hw, T0 + number * 10 * S, 0, IDLE, lateness_by_partition=bounds
        )
        state = advance.state
        wm = None if state.watermark_ms is None else state.watermark_ms - T0
        out.append((bounds, wm))
    return out


def model_replay(
    batches: list[list[tuple[int, int]]], auto: M.AutoLateness, fallback: dict[int, int]
) -> list[tuple[dict[int, int], int | None]]:
    params = M.Params(
        window_ms=60 * S,
        lateness_ms=0,
        idle_timeout_ms=IDLE,
        max_clock_skew_ms=10**9,  # no clipping: the pure replay does not clip
        lateness_by_partition=fallback,
        lateness_auto=auto,
    )
    model = M.ReferenceModel(params)
    out = []
    for number, events in enumerate(batches):
        now = number * 10 * S
        row = model.process(
            [line(number, i, p, ms, now) for i, (p, ms) in enumerate(events)], T0 + now
        )
        wm = None if row.watermark_after_ms is None else row.watermark_after_ms - T0
        out.append((dict(row.lateness), wm))
    return out


def calm(start_s: int) -> list[tuple[int, int]]:
    """Ten in-order events of partition 0, one a second from `start_s`."""
    return [(0, (start_s + i) * S) for i in range(10)]


# target 90 %, clamp [100 ms, 60 s], 10 measured events make enough history
BURST_AUTO = M.AutoLateness(target_pct=90.0, min_ms=100, max_ms=60 * S, min_history=10)
BURST = [(0, (21 + i) * S) for i in range(5)] + [(0, 5 * S)] * 5  # 5 in order, 5 15 s behind


def test_a_delay_burst_widens_the_bound_and_calm_tightens_it() -> None:
    auto = BURST_AUTO
    batches = [calm(1), calm(11), BURST, calm(26), calm(36), calm(46)]
    expected = [
        # b0: nothing measured (no mark before): the start bound, lateness_min; wm = 10 s - 100
        ({0: 100}, 10 * S - 100),
        # b1: 10 delays of 0 behind the front (10 s) in slot 2 (mark 20 s): 100 % at edge 0,
        # clamped up to 100 ms
        ({0: 100}, 20 * S - 100),
        # b2: front 20 s; 5 delays of 0, 5 of 15 s (edge 17 222); slot 2 (mark 25 s) holds
        # {0: 15, 17 222: 5}: 75 % < 90 %: the bound widens in this batch; 25 s - 17.222 s is
        # below 19.9 s: held (the 5 s events were behind the watermark: late)
        ({0: 17_222}, 20 * S - 100),
        # b3: slot 3 (mark 35 s) gets {0: 10}: 25 of 30 = 83 %, still wide; 35 - 17.222 = 17.778 s
        ({0: 17_222}, 20 * S - 100),
        # b4: slot 4 {0: 10}: 35 of 40 = 87.5 %; 45 - 17.222 = 27.778 s
        ({0: 17_222}, 45 * S - 17_222),
        # b5: slot 5 {0: 10}: 45 of 50 = 90 % >= 90 %: tight again
        ({0: 100}, 55 * S - 100),
    ]
    assert model_replay(batches, auto, {}) == expected
    assert pure_replay(batches, auto, {}) == expected


def test_the_horizon_forgets_a_burst_six_slots_later() -> None:
    # target 100 %: only the horizon (6 slots of 10 s of the partition's event time) can
    # tighten the bound again
    auto = M.AutoLateness(target_pct=100.0, min_ms=100, max_ms=60 * S, min_history=10)
    batches = [calm(1), calm(11), BURST] + [calm(s) for s in range(26, 86, 10)]
    wide = 17_222
    expected = [
        ({0: 100}, 10 * S - 100),
        ({0: 100}, 20 * S - 100),
        ({0: wide}, 20 * S - 100),  # the burst's 15 s delays counted in slot 2 (mark 25 s)
        ({0: wide}, 20 * S - 100),  # mark 35 s: 35 - 17.222 = 17.778 s, held
        ({0: wide}, 45 * S - wide),
        ({0: wide}, 55 * S - wide),
        ({0: wide}, 65 * S - wide),
        ({0: wide}, 75 * S - wide),  # mark in slot 7: slot 2 is still within the horizon
        ({0: 100}, 85 * S - 100),  # mark in slot 8: slot 2 has left it
    ]
    assert model_replay(batches, auto, {}) == expected
    assert pure_replay(batches, auto, {}) == expected


def test_a_partition_behind_the_front_is_measured_by_how_far_behind() -> None:
    # partition 1 stops at 10 s while partition 0 runs on, then delivers late: measured behind
    # the front (not its own mark, which its late events are ahead of), its bound widens in
    # the first batch that carries them, so the watermark holds and its stragglers are on time
    auto = M.AutoLateness(target_pct=90.0, min_ms=100, max_ms=60 * S, min_history=1)
    b0 = [(0, 1 * S), (1, 1 * S)]  # no marks before: nothing measured, lateness_min
    b1 = [(0, 10 * S), (1, 10 * S)]  # 0 behind the front (1 s)
    b2 = [(0, 20 * S)]  # partition 1 silent: its mark (10 s) holds the watermark
    # front 20 s: 12 s and 14 s are 8 s (edge 8 611) and 6 s behind; 3 counted, 90 % needs
    # all 3: 8 611 ms; 14 s - 8.611 s is below 9.9 s: held
    b3 = [(0, 30 * S), (1, 12 * S), (1, 14 * S)]
    # front 30 s: 11 s is 19 s behind (edge 20 480), 20 s is 10 s behind; 5 counted in slots
    # 1 and 2: 20 480 ms; the 11 s event is on time (watermark 9.9 s). Measured against its
    # own mark (10 s, then 14 s) batch 3 would have measured nothing, the watermark would
    # have moved to 13.9 s, and the 11 s event would have been late.
    b4 = [(0, 40 * S), (1, 11 * S), (1, 20 * S)]
    expected = [
        ({0: 100, 1: 100}, 1 * S - 100),
        ({0: 100, 1: 100}, 10 * S - 100),
        ({0: 100, 1: 100}, 10 * S - 100),
        ({0: 100, 1: 8_611}, 10 * S - 100),
        ({0: 100, 1: 20_480}, 10 * S - 100),
    ]
    assert model_replay([b0, b1, b2, b3, b4], auto, {}) == expected
    assert pure_replay([b0, b1, b2, b3, b4], auto, {}) == expected


def test_too_little_history_starts_from_the_partition_bound() -> None:
    auto = M.AutoLateness(target_pct=99.9, min_ms=100, max_ms=60 * S, min_history=15)
    batches = [calm(1), calm(11), calm(21)]
    # b0: nothing measured: partition 0's fixed 2 s; b1: 10 measured (< 15): the largest delay
    # (0 -> 100 ms) but not below 2 s; b2: 20 measured: the quantile, 0 -> 100 ms
    expected = [({0: 2 * S}, 8 * S), ({0: 2 * S}, 18 * S), ({0: 100}, 30 * S - 100)]
    assert model_replay(batches, auto, {0: 2 * S}) == expected
    assert pure_replay(batches, auto, {0: 2 * S}) == expected


def test_too_little_history_takes_the_largest_delay_over_lateness_min() -> None:
    auto = M.AutoLateness(target_pct=99.9, min_ms=100, max_ms=60 * S, min_history=100)
    batches = [calm(1), [*calm(11), (0, 4 * S)], calm(21)]
    # b1: one event 6 s behind the front (10 s): edge 6 089 ms is the bound (few events: the
    # largest delay, not the 99.9 % quantile); it stays while the delay is within the horizon
    assert [b for b, _ in model_replay(batches, auto, {})] == [{0: 100}, {0: 6_089}, {0: 6_089}]
    assert model_replay(batches, auto, {}) == pure_replay(batches, auto, {})


# Random streams: three partitions whose events run 0-40 s behind a clock moving 10 s a batch.
EVENTS = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 40 * S)), min_size=0, max_size=12
).map(lambda evs: [(p, back) for p, back in evs])
STREAMS = st.lists(EVENTS, min_size=1, max_size=8)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    streams=STREAMS,
    target=st.sampled_from([50.0, 90.0, 99.9, 100.0]),
    min_history=st.integers(1, 20),
)
def test_the_model_and_the_pure_rule_agree(
    streams: list[list[tuple[int, int]]], target: float, min_history: int
) -> None:
    batches = [[(p, n * 10 * S - back) for p, back in evs] for n, evs in enumerate(streams)]
    auto = M.AutoLateness(target, min_ms=500, max_ms=30 * S, min_history=min_history)
    fallback = {2: 3 * S}
    model, pure = model_replay(batches, auto, fallback), pure_replay(batches, auto, fallback)
    assert model == pure
    marks = [wm for _, wm in model if wm is not None]
    assert marks == sorted(marks)  # a widening bound holds the watermark, never moves it back
    for bounds, _ in model:
        for partition, bound in bounds.items():
            assert 500 <= bound <= 30 * S or bound == fallback.get(partition)


# -- the same burst through the Spark job (BatchProcessor), held to the model -----------------
def burst_files() -> list[list[H.InputFile]]:
    """The hand-computed burst above as input files, batch i arriving at i * 10 s."""
    auto_batches = [calm(1), calm(11), BURST, calm(26), calm(36), calm(46)]
    return [
        [
            H.InputFile(
                f"b{n:03d}-0.jsonl",
                T0 + n * 10 * S,
                [
                    H.event_line(f"b{n}-{i}", "k", 1, T0 + ms, p, time_style="epoch")
                    for i, (p, ms) in enumerate(events)
                ],
            )
        ]
        for n, events in enumerate(auto_batches)
    ]


def test_the_stream_widens_and_tightens_the_bound_like_the_model(spark, tmp_path) -> None:
    params = M.Params(
        window_ms=60 * S,
        lateness_ms=0,
        idle_timeout_ms=IDLE,
        max_clock_skew_ms=10**9,
        lateness_auto=BURST_AUTO,
    )
    files = burst_files()
    warehouse = str(tmp_path / "warehouse")
    # two processes: the second reads the histograms back from stream_progress mid-burst
    H.run_processor(spark, warehouse, tmp_path / "input", files[:3], params)
    H.run_processor(spark, warehouse, tmp_path / "input", files[3:], params, True, first_batch=3)
    out = H.read_outputs(spark, warehouse)
    model = H.model_outputs(M.run_model([H.model_lines(f) for f in files], params, drain=True))
    assert out.progress == model.progress
    assert H.sort_rows(out.late_events) == H.sort_rows(model.late_events)
    assert H.sort_rows(out.aggregates) == H.sort_rows(model.aggregates)
    # the bound in force per batch (the drain records none): calm, burst, calm again
    assert [dict(p.lateness).get(0) for p in out.progress] == [
        100,
        100,
        17_222,
        17_222,
        17_222,
        100,
        None,
    ]
    # the histograms are in stream_progress: a restart reads them back (same bounds)
    row = (
        spark.read.format("delta")
        .load(f"{warehouse}/stream_progress")
        .where("batch_id = 2")
        .first()
    )
    assert row is not None and row["partition_delays_measured"] == {0: 20}
    # slot 2 (the mark at 25 s), ring position 2: keys 2 * 128 + bucket; bucket 44, edge
    # round(10 ms · 2^(43/4)) = 17 222 ms, holds the 15 s delays
    assert row["partition_delay_weights"] == {0: {256: 15, 256 + 44: 5}}
