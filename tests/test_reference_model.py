"""The reference model alone: the spec's worked example, then randomized properties.

This is where bulk randomized testing goes: the model is plain Python and fast, so hypothesis
runs hundreds of streams here; test_stream_properties then holds the Spark job to the model
on a few streams.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import pytest
import reference_model as M
import stream_helpers as H
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

S = 1_000  # the worked example is in seconds
T0 = H.T0_MS


def ev(event_id: str, partition: int, seconds: int, amount: int, key: str = "k") -> str:
    return json.dumps(
        {
            "event_id": event_id,
            "key": key,
            "amount": amount,
            "event_time": H.iso(T0 + seconds * S),
            "partition": partition,
        }
    )


def batch(number: int, now_s: int, *lines: str) -> list[M.Line]:
    return [M.Line(raw, f"b{number}.jsonl", i + 1, T0 + now_s * S) for i, raw in enumerate(lines)]


# The worked example of docs/semantics.md: W = 60 s, L = 10 s, G = 0, idle 60 s.
EXAMPLE = [
    batch(0, 30, ev("a", 0, 5, 100), ev("b", 1, 20, 50)),
    batch(1, 90, ev("c", 0, 90, 7), ev("d", 1, 75, 9)),
    batch(2, 100, ev("e", 0, 30, 1000), ev("f", 1, 110, 3), ev("c", 0, 90, 7)),
    batch(3, 200, ev("g", 1, 190, 4)),
]


def example_params(**changes: Any) -> M.Params:
    base = dict(window_ms=60 * S, lateness_ms=10 * S, allowed_lateness_ms=0, idle_timeout_ms=60 * S)
    return M.Params(**{**base, **changes})


def t(seconds: int) -> int:
    return T0 + seconds * S


def test_worked_example_table() -> None:
    model = M.run_model(EXAMPLE, example_params())
    statuses = [(e.event_id, e.batch_id, e.arrival_status) for e in model.events]
    assert statuses == [
        ("a", 0, "on_time"),
        ("b", 0, "on_time"),
        ("c", 1, "on_time"),
        ("d", 1, "on_time"),
        ("e", 2, "late"),
        ("f", 2, "on_time"),
        ("c", 2, "duplicate"),
        ("g", 3, "on_time"),
    ]
    assert [p.now_ms for p in model.progress] == [t(30), t(90), t(100), t(200)]
    assert [dict(p.high_water) for p in model.progress] == [
        {0: t(5), 1: t(20)},
        {0: t(90), 1: t(75)},
        {0: t(90), 1: t(110)},
        {0: t(90), 1: t(190)},
    ]
    assert [p.watermark_after_ms for p in model.progress] == [t(-5), t(65), t(80), t(180)]
    assert [p.watermark_before_ms for p in model.progress] == [None, t(-5), t(65), t(80)]
    assert dict(model.progress[3].idle) == {0: True, 1: False}  # 200 - 100 >= 60
    assert [
        (a.batch_id, a.window_start_ms, a.key, a.event_count, a.amount_sum, a.revision)
        for a in model.aggregates
    ] == [(1, t(0), "k", 2, 150, 1), (3, t(60), "k", 3, 19, 1)]
    assert [a.window_end_ms - a.window_start_ms for a in model.aggregates] == [60 * S] * 2
    assert [(a.emit_time_ms, a.watermark_at_emit_ms) for a in model.aggregates] == [
        (t(90), t(65)),
        (t(200), t(180)),
    ]
    [late] = model.late_events
    assert (late.event_id, late.amount, late.window_start_ms, late.window_end_ms) == (
        "e",
        1000,
        t(0),
        t(60),
    )
    assert late.watermark_at_arrival_ms == t(65)
    assert late.lateness_ms == 5_000
    assert late.arrival_delay_ms == 70_000  # now 100 s, event at 30 s
    assert late.reason == "window_closed"
    assert late.batch_id == 2


def test_worked_example_identity_and_drain() -> None:
    model = M.run_model(EXAMPLE, example_params(), drain=True)
    answer = model.answer()
    # [0, 60): a, b, e = 1150 = stream 150 + late 1000.
    assert answer[(t(0), t(60), "k", "USD")].amount_sum == 150
    assert sum(e.amount for e in model.late_events if e.window_start_ms == t(0)) == 1000
    # The drain emits the one window never emitted: [180, 240) with g.
    drained = [a for a in model.aggregates if a.batch_id == 4]
    assert [(a.window_start_ms, a.event_count, a.amount_sum, a.revision) for a in drained] == [
        (t(180), 1, 4, 1)
    ]
    assert drained[0].watermark_at_emit_ms is None  # closed by the drain: no watermark
    assert model.progress[-1].drained
    assert model.progress[-1].watermark_after_ms is None
    assert model.progress[-1].watermark_before_ms == t(180)
    assert model.progress[-1].now_ms == t(200)  # no input: the previous processing time
    with pytest.raises(M.DrainedError):
        model.process(batch(5, 300, ev("h", 0, 290, 1)))


def test_worked_example_allowed_lateness_revises() -> None:
    # "with G >= 6 s it would instead have revised [0, 60) to revision 2 (1150)"
    model = M.run_model(EXAMPLE, example_params(allowed_lateness_ms=6 * S))
    assert [e.arrival_status for e in model.events if e.event_id == "e"] == ["allowed_late"]
    assert not model.late_events
    revisions = [
        (a.batch_id, a.event_count, a.amount_sum, a.revision)
        for a in model.aggregates
        if a.window_start_ms == t(0)
    ]
    assert revisions == [(1, 2, 150, 1), (2, 3, 1150, 2)]


def test_worked_example_allowed_lateness_boundary() -> None:
    # end + G = 60 + 5 = 65 = WM_before: not revisable any more (end + G <= WM_before).
    model = M.run_model(EXAMPLE, example_params(allowed_lateness_ms=5 * S))
    [late] = model.late_events
    assert (late.event_id, late.lateness_ms, late.reason) == ("e", 5_000, "beyond_allowed_lateness")


def test_worked_example_global_max() -> None:
    # "Under global-max the watermark after batch 1 would have been max(90, 75) - 10 = 80"
    model = M.run_model(EXAMPLE, example_params(policy="global-max"))
    assert model.progress[1].watermark_after_ms == t(80)


def test_duplicate_within_a_batch_follows_arrival_order() -> None:
    # Same id twice in one batch: the copy in the older file is the original, whatever the
    # file names and line numbers say.
    older = M.Line(ev("x", 0, 10, 1), "z.jsonl", 9, t(20))
    newer = M.Line(ev("x", 0, 10, 2), "a.jsonl", 1, t(30))
    model = M.run_model([[newer, older]], example_params())
    status = {(e.source_file, e.amount): e.arrival_status for e in model.events}
    assert status == {("z.jsonl", 1): "on_time", ("a.jsonl", 2): "duplicate"}


def test_processing_time_never_decreases() -> None:
    model = M.run_model(
        [batch(0, 100, ev("a", 0, 95, 1)), batch(1, 50, ev("b", 0, 96, 1))], example_params()
    )
    assert [p.now_ms for p in model.progress] == [t(100), t(100)]


def test_clock_skew_clips_high_water_but_counts_money() -> None:
    params = example_params(max_clock_skew_ms=60 * S)
    model = M.run_model([batch(0, 100, ev("a", 0, 1_000, 5), ev("b", 0, 90, 1))], params)
    assert dict(model.progress[0].high_water) == {0: t(160)}  # now + S, not 1000 s
    assert [e.clock_skewed for e in model.events] == [True, False]
    model.drain()
    assert sum(a.amount_sum for a in model.answer().values()) == 6


# -- the dedup horizon (docs/semantics.md, "Dedup horizon") -----------------------------------
# x (t = 5 s, window [0, 60)) is counted on time in batch 0; batch 1 moves the watermark to
# y - 10 s (one partition, L = 10 s); batch 2 replays x verbatim. x is forgotten after batch 1
# when 60 s + G + H <= that watermark.
HORIZON_CASES = [
    # (G s, H s, y s, status of the replay)
    # Within the horizon: WM 85 < 60 + 0 + 30 = 90, still remembered: a duplicate.
    pytest.param(0, 30, 95, M.DUPLICATE, id="within-horizon"),
    # The boundary is inclusive: WM 90 = 60 + 0 + 30, forgotten; the replay is a new, late event.
    pytest.param(0, 30, 100, M.LATE, id="beyond-horizon-boundary"),
    # Well beyond the horizon: the same.
    pytest.param(0, 30, 400, M.LATE, id="beyond-horizon"),
    # H = 0 still covers allowed lateness: WM 75, window closed (60 <= 75) but revisable
    # (60 + 20 > 75); forgetting here would count the replay again as allowed_late.
    pytest.param(20, 0, 85, M.DUPLICATE, id="h0-within-allowed-lateness"),
    # H = 0: forgotten as soon as the window cannot change (60 + 20 <= WM 80): late, not counted.
    pytest.param(20, 0, 90, M.LATE, id="h0-after-allowed-lateness"),
    # No horizon (None): remembered whatever the watermark, the exact dedup.
    pytest.param(0, None, 10_000, M.DUPLICATE, id="no-horizon"),
]


@pytest.mark.parametrize(("g_s", "h_s", "y_s", "replay_status"), HORIZON_CASES)
def test_dedup_horizon(g_s: int, h_s: int | None, y_s: int, replay_status: str) -> None:
    params = example_params(
        allowed_lateness_ms=g_s * S, dedup_horizon_ms=None if h_s is None else h_s * S
    )
    batches = [
        batch(0, 30, ev("x", 0, 5, 100)),
        batch(1, y_s, ev("y", 0, y_s, 1)),
        batch(2, y_s + 5, ev("x", 0, 5, 100)),
    ]
    after_one = M.run_model(batches[:2], params)
    assert after_one.progress[1].watermark_after_ms == t(y_s - 10)
    assert ("x" in after_one.seen_ids) == (replay_status == M.DUPLICATE)

    model = M.run_model(batches, params)
    assert [(e.event_id, e.batch_id, e.arrival_status) for e in model.events] == [
        ("x", 0, M.ON_TIME),
        ("y", 1, M.ON_TIME),
        ("x", 2, replay_status),
    ]
    # x stays counted once in [0, 60), whatever the replay became.
    [first] = [a for a in model.aggregates if a.window_start_ms == t(0)]
    assert (first.event_count, first.amount_sum, first.revision) == (1, 100, 1)
    replays = [e for e in model.late_events if e.event_id == "x"]
    if replay_status == M.LATE:  # beyond the horizon: in the late side output too
        [late] = replays
        assert (late.batch_id, late.window_end_ms, late.watermark_at_arrival_ms) == (
            2,
            t(60),
            t(y_s - 10),
        )
        assert late.lateness_ms == (y_s - 10 - 60) * S >= g_s * S
    else:
        assert replays == []


def test_dedup_horizon_forgets_after_the_batch_that_moved_the_watermark() -> None:
    # The rule uses the batch's watermark_after: x is forgotten at the end of batch 1, not
    # while batch 1 is classified (its watermark_before, 95 - 10 = 85, is below 90).
    params = example_params(dedup_horizon_ms=30 * S)
    model = M.run_model(
        [batch(0, 95, ev("x", 0, 5, 100), ev("y", 0, 95, 1)), batch(1, 100, ev("x", 0, 5, 7))],
        params,
    )
    assert model.progress[0].watermark_after_ms == t(85)
    assert "x" in model.seen_ids
    assert [e.arrival_status for e in model.events] == [M.ON_TIME, M.ON_TIME, M.DUPLICATE]
    model.process(batch(2, 100, ev("z", 0, 100, 1)))  # WM 90: 60 + 0 + 30 <= 90
    assert "x" not in model.seen_ids


@pytest.mark.parametrize("horizon", [0, 30 * S, None])
def test_drain_forgets_every_id(horizon: int | None) -> None:
    # The drain ends the input: nothing is left to deduplicate against.
    model = M.run_model(
        [batch(0, 30, ev("x", 0, 5, 100), ev("y", 0, 25, 1))],
        example_params(dedup_horizon_ms=horizon),
    )
    assert set(model.seen_ids) == {"x", "y"}  # WM 15: nothing can be forgotten yet
    model.drain()
    assert model.seen_ids == {}


# -- randomized properties of the model -----------------------------------------------------
MODEL_SETTINGS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
random_streams = H.streams(
    max_batches=8,
    max_lines=12,
    replays_change_time=True,
    monotone_now=False,
    # none; the stream's partitions (2-3, some silent for a while); one that never reports
    expected=(frozenset(), frozenset(), frozenset({0, 1, 2}), frozenset({0, 3})),
)


def window_totals(rows: Iterable[tuple[tuple[int, int, str], int]]) -> dict[Any, list[int]]:
    totals: dict[Any, list[int]] = defaultdict(lambda: [0, 0])
    for ident, amount in rows:
        totals[ident][0] += 1
        totals[ident][1] += amount
    return totals


def check_identity(model: M.ReferenceModel, closed_before: int | None) -> None:
    """events (not duplicates) = latest revision + late, for windows ending <= closed_before
    (every window when None: after a drain)."""
    logged = window_totals(
        ((*window, e.key, e.currency), e.amount)
        for e in model.events
        if e.arrival_status != M.DUPLICATE
        for window in model.params.windows_of(e.event_time_ms)
    )
    late = window_totals(
        ((e.window_start_ms, e.window_end_ms, e.key, e.currency), e.amount)
        for e in model.late_events
    )
    answer = model.answer()
    for ident, (count, total) in logged.items():
        if closed_before is not None and ident[1] > closed_before:
            continue
        latest = answer.get(ident)
        stream = (latest.event_count, latest.amount_sum) if latest else (0, 0)
        late_count, late_total = late.get(ident, [0, 0])
        assert (count, total) == (stream[0] + late_count, stream[1] + late_total), ident


@MODEL_SETTINGS
@given(stream=random_streams)
def test_accounting_identity_after_drain(stream: H.Stream) -> None:
    model = M.run_model(stream.model_batches(), stream.params, drain=True)
    check_identity(model, None)
    assert not model.windows
    last = model.progress[-1]
    assert last.watermark_after_ms is None and last.drained
    assert not any(p.drained for p in model.progress[:-1])
    for a in model.aggregates:  # only the drain emits final rows without a watermark
        if a.final:  # (early rows may, before the first watermark)
            assert (a.watermark_at_emit_ms is None) == (a.batch_id == last.batch_id)


@MODEL_SETTINGS
@given(stream=random_streams)
def test_accounting_identity_for_closed_windows_without_drain(stream: H.Stream) -> None:
    model = M.run_model(stream.model_batches(), stream.params)
    wm = model.watermark_ms
    if wm is not None:
        check_identity(model, wm)
    # Open state holds exactly the windows that can still change.
    g = stream.params.allowed_lateness_ms
    assert all(wm is None or end + g > wm for _, end, _, _ in model.windows)


def remembering_every_id(stream: H.Stream) -> H.Stream:
    """The stream with the model's exact dedup (no horizon): the properties below hold for it;
    what a finite horizon changes is tested on its own (the horizon tests)."""
    return dataclasses.replace(
        stream, params=dataclasses.replace(stream.params, dedup_horizon_ms=None)
    )


@MODEL_SETTINGS
@given(stream=random_streams)
def test_no_event_is_both_late_and_counted(stream: H.Stream) -> None:
    stream = remembering_every_id(stream)
    model = stream.run_model()
    # Each (event, window) is late at most once; an event is `late` iff every one of its
    # windows is, and its late windows are its oldest ones (they close first).
    late = [(e.event_id, e.window_start_ms) for e in model.late_events]
    assert len(late) == len(set(late))
    late_starts: dict[str, set[int]] = defaultdict(set)
    for event_id, start in late:
        late_starts[event_id].add(start)
    for e in model.events:
        if e.arrival_status == M.DUPLICATE:
            continue
        starts = [start for start, _ in stream.params.windows_of(e.event_time_ms)]
        got = late_starts.pop(e.event_id, set())
        assert got == set(starts[: len(got)]), e  # a prefix: the oldest windows
        assert (got == set(starts)) == (e.arrival_status == M.LATE), e
    assert not late_starts  # no late row without its event
    g = stream.params.allowed_lateness_ms
    for row in model.late_events:
        assert row.lateness_ms == row.watermark_at_arrival_ms - row.window_end_ms >= g
        assert row.reason == ("window_closed" if g == 0 else "beyond_allowed_lateness")


@MODEL_SETTINGS
@given(stream=random_streams)
def test_watermark_and_processing_time_are_monotone(stream: H.Stream) -> None:
    model = stream.run_model()
    previous: M.ProgressRow | None = None
    for row in model.progress:
        if previous is not None:
            assert row.watermark_before_ms == previous.watermark_after_ms
            assert row.now_ms >= previous.now_ms
        if row.drained:  # the end of input stores no watermark
            assert row.watermark_after_ms is None
        elif row.watermark_before_ms is not None:
            assert row.watermark_after_ms is not None
            assert row.watermark_after_ms >= row.watermark_before_ms
        if row.regression_ms is not None:
            assert row.watermark_after_ms == row.watermark_before_ms
        # clipped high-water marks never run ahead of processing time + the skew bound
        assert all(hw <= row.now_ms + stream.params.max_clock_skew_ms for _, hw in row.high_water)
        previous = row


@MODEL_SETTINGS
@given(stream=random_streams)
def test_an_unheard_expected_partition_holds_the_watermark(stream: H.Stream) -> None:
    model = stream.run_model()
    expected = stream.params.expected_partitions
    heard: set[int] = set()
    for row in model.progress:
        if row.drained:
            continue
        heard |= {part for part, _ in row.last_seen}
        unheard = dict(row.unheard)
        assert set(unheard) == expected - heard  # exactly the expected not heard from yet
        idle = dict(row.idle)
        if any(not idle[part] for part in unheard):  # waiting: the watermark stays put
            assert row.watermark_after_ms == row.watermark_before_ms
        for part, since in unheard.items():  # since: when it was first expected, kept
            assert since == model.progress[0].now_ms
            assert idle[part] == (
                stream.params.idle_timeout_ms > 0
                and row.now_ms - since >= stream.params.idle_timeout_ms
            )


@MODEL_SETTINGS
@given(stream=random_streams)
def test_source_watermark_regressions_are_counted(stream: H.Stream) -> None:
    # Replays the control records of each batch in arrival order against the kept mark.
    model = stream.run_model()
    marks: dict[int, int] = {}
    for row in model.progress:
        if row.drained:
            assert row.source_regressions == ()
            continue
        assert set(dict(row.source_regression_ms)) == {
            part for part, count in row.source_regressions if count
        }
        assert all(gap > 0 for _, gap in row.source_regression_ms)
        for part, mark in row.source_watermark:  # never back, whatever regressed
            assert mark >= marks.get(part, mark)
            marks[part] = mark


@MODEL_SETTINGS
@given(stream=random_streams)
def test_duplicates_are_never_counted(stream: H.Stream) -> None:
    stream = remembering_every_id(stream)
    model = M.run_model(stream.model_batches(), stream.params, drain=True)
    # Independent of the statuses: the first copy of each id in arrival order is the event.
    arrival = sorted(
        model.events,
        key=lambda e: (e.batch_id, *_line_order(stream, e)),
    )
    first: dict[str, M.EventRow] = {}
    for e in arrival:
        first.setdefault(e.event_id, e)
    originals = [e for e in model.events if e.arrival_status != M.DUPLICATE]
    assert sorted(originals) == sorted(first.values())
    answer = model.answer().values()
    n = len(stream.params.windows_of(0))  # every event is in S/H windows
    assert sum(a.event_count for a in answer) + len(model.late_events) == n * len(first)
    assert sum(a.amount_sum for a in answer) + sum(e.amount for e in model.late_events) == n * sum(
        e.amount for e in first.values()
    )


def _line_order(stream: H.Stream, e: M.EventRow) -> tuple[int, str, int]:
    mtimes = {f.name: f.mtime_ms for files in stream.batches for f in files}
    return (mtimes[e.source_file], e.source_file, e.source_line)


@MODEL_SETTINGS
@given(stream=random_streams)
def test_every_line_is_an_event_or_quarantined(stream: H.Stream) -> None:
    model = stream.run_model()
    lines = [
        (b, ln.source_file, ln.source_line)
        for b, batch_lines in enumerate(stream.model_batches())
        for ln in batch_lines
    ]
    events = [(e.batch_id, e.source_file, e.source_line) for e in model.events]
    quarantined = [(q.batch_id, q.source_file, q.source_line) for q in model.quarantine]
    # the rest are control records (source watermarks), counted in stream_progress
    rest = sorted(set(lines) - set(events) - set(quarantined))
    assert sorted(events + quarantined + rest) == sorted(lines)
    assert len(rest) == sum(row.control_records for row in model.progress)
    if stream.params.source_watermark_field is None:
        assert rest == []
    for row in model.progress:
        assert row.input_lines == row.valid_events + row.quarantined_lines + row.control_records
        assert row.valid_events == (
            row.on_time_events + row.allowed_late_events + row.late_events + row.duplicate_events
        )


@MODEL_SETTINGS
@given(stream=random_streams)
def test_emitted_revisions_are_consecutive_and_closed(stream: H.Stream) -> None:
    model = M.run_model(stream.model_batches(), stream.params, drain=True)
    by_window: dict[Any, list[M.AggregateRow]] = defaultdict(list)
    wm_after = {p.batch_id: p.watermark_after_ms for p in model.progress}
    for row in model.aggregates:
        by_window[(row.window_start_ms, row.window_end_ms, row.key, row.currency)].append(row)
        assert row.watermark_at_emit_ms == wm_after[row.batch_id]
        if not row.final:  # an early row: its window was still open
            interval = stream.params.early_firing_interval_ms
            assert interval > 0
            assert row.watermark_at_emit_ms is None or row.window_end_ms > row.watermark_at_emit_ms
        elif row.watermark_at_emit_ms is None:  # closed by the drain, the last batch
            assert row.batch_id == model.progress[-1].batch_id and model.progress[-1].drained
        else:
            assert row.window_end_ms <= row.watermark_at_emit_ms
    for rows in by_window.values():
        assert [r.revision for r in rows] == list(range(1, len(rows) + 1))
        assert len({r.batch_id for r in rows}) == len(rows)
        finals = [r for r in rows if r.final]
        # early rows come first; every window ends with a final row (a drain closes all)
        assert rows[len(rows) - len(finals) :] == finals and finals
        assert [r.event_count for r in finals] == sorted({r.event_count for r in finals})
        counts = [r.event_count for r in rows]
        assert counts == sorted(counts)  # early rows never show more than what follows
        early = [r.emit_time_ms for r in rows if not r.final]
        assert all(
            b - a >= stream.params.early_firing_interval_ms for a, b in itertools.pairwise(early)
        )


HUGE_HORIZON_MS = 2**66  # more than any distance between int64 epoch-ms times


@settings(
    max_examples=500,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(stream=random_streams)
def test_a_huge_horizon_is_no_horizon(stream: H.Stream) -> None:
    # The horizon only forgets; one no watermark can reach forgets nothing before the drain.
    stream = remembering_every_id(stream)
    exact = stream.run_model()
    huge_params = dataclasses.replace(stream.params, dedup_horizon_ms=HUGE_HORIZON_MS)
    huge = M.run_model(stream.model_batches(), huge_params, drain=stream.drain)
    for table in ("events", "late_events", "aggregates", "quarantine", "progress"):
        assert getattr(huge, table) == getattr(exact, table), table
    assert huge.seen_ids == exact.seen_ids


# Replays keep their event time (the streams' default): a forgotten id comes back late.
same_time_streams = H.streams(max_batches=8, max_lines=12, monotone_now=False)


@MODEL_SETTINGS
@given(
    stream=same_time_streams,
    horizon=st.sampled_from([0, 500, 10_000, 60_000, 600_000, None]),
)
def test_first_arrivals_balance_whatever_the_horizon(stream: H.Stream, horizon: int | None) -> None:
    # The nightly's identity (batch/reconcile.py): first arrivals per window = stream answer +
    # late rows that are first arrivals; late rows of repeats (beyond the horizon) are neither.
    params = dataclasses.replace(stream.params, dedup_horizon_ms=horizon)
    model = M.run_model(stream.model_batches(), params, drain=True)
    first: dict[str, M.EventRow] = {}
    for e in sorted(model.events, key=lambda e: (e.batch_id, *_line_order(stream, e))):
        first.setdefault(e.event_id, e)
    first_lines = {(e.batch_id, e.source_file, e.source_line) for e in first.values()}
    truth = window_totals(
        ((*window, e.key, e.currency), e.amount)
        for e in first.values()
        for window in params.windows_of(e.event_time_ms)
    )
    explaining = [
        e for e in model.late_events if (e.batch_id, e.source_file, e.source_line) in first_lines
    ]
    late = window_totals(
        ((e.window_start_ms, e.window_end_ms, e.key, e.currency), e.amount) for e in explaining
    )
    answer = {i: [a.event_count, a.amount_sum] for i, a in model.answer().items()}
    for ident in {*truth, *late, *answer}:
        stream_side, late_side = answer.get(ident, [0, 0]), late.get(ident, [0, 0])
        expected = [stream_side[0] + late_side[0], stream_side[1] + late_side[1]]
        assert truth.get(ident, [0, 0]) == expected, ident
    repeats = [e for e in model.late_events if e not in explaining]
    assert all(e.event_id in first for e in repeats)
    if horizon is None:
        assert repeats == []


@settings(max_examples=300, deadline=None)
@given(
    amount=st.integers(-(2**63), 2**63 - 1),
    ms=st.integers(-(2**40), 2**42),
    offset=st.integers(-23 * 60, 23 * 60),
)
def test_model_parses_what_it_is_given(amount: int, ms: int, offset: int) -> None:
    # Round trip of the contract's valid forms through the model's validation.
    for when in (ms, H.iso(ms, offset)):
        line = json.dumps({"event_id": "e", "key": "k", "amount": amount, "event_time": when})
        parsed, reason = M.parse_line(line)
        assert reason is None and parsed is not None
        assert (parsed.amount, parsed.event_time_ms, parsed.partition) == (amount, ms, 0)
