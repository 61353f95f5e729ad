"""Adaptive lateness (streaming/lateness.py), table-tested against hand-computed values."""

from __future__ import annotations

from itertools import pairwise
from typing import NamedTuple

import pytest

from streaming.lateness import (
    BUCKET_EDGES_MS,
    OVERFLOW_BUCKET,
    SLOT_MS,
    SLOT_STRIDE,
    SLOTS,
    DelayHistogram,
    advance_histograms,
    auto_lateness,
    batch_delay_counts,
    delay_bucket,
    fold_delays,
    quantile_edge,
)

R = SLOT_STRIDE  # a key is ring position * R + bucket


def test_bucket_edges_are_fixed_and_increasing() -> None:
    # the edges are part of the checkpointed state's meaning: a change here is a format change
    assert BUCKET_EDGES_MS[:8] == (0, 10, 12, 14, 17, 20, 24, 28)
    assert all(a < b for a, b in pairwise(BUCKET_EDGES_MS))
    assert BUCKET_EDGES_MS[-2] < 86_400_000 <= BUCKET_EDGES_MS[-1]


@pytest.mark.parametrize(
    ("delay_ms", "bucket"),
    [
        (0, 0),  # in order (at or above the high-water mark): the zero bucket
        (-5, 0),  # negative never reaches here in the stream, but clamps to zero all the same
        (1, 1),  # (0, 10] is bucket 1
        (10, 1),  # an edge belongs to the bucket it closes
        (11, 2),
        (20_000, 45),  # edge 45 is 20 480 ms: 20 s rounds up to it
        (10**9, OVERFLOW_BUCKET),  # past a day: the overflow bucket
    ],
)
def test_delay_bucket(delay_ms: int, bucket: int) -> None:
    assert delay_bucket(delay_ms) == bucket


class FoldCase(NamedTuple):
    why: str
    prev: DelayHistogram | None
    batch: dict[int, int]
    marks: tuple[int, int]  # the partition's high-water mark before and after the batch (ms)
    weights: dict[int, int]
    measured: int


FOLD_CASES = [
    FoldCase("first batch: counts in the mark's slot", None, {0: 3, 5: 1}, (0, 1), {0: 3, 5: 1}, 4),
    FoldCase(
        "same slot: the counts add up",
        DelayHistogram({2 * R: 8, 2 * R + 5: 1}, 9),
        {0: 1},
        (20_000, 29_999),
        {2 * R: 9, 2 * R + 5: 1},
        10,
    ),
    FoldCase(
        "the mark enters slot 8: ring position 2 held slot 2, now past the horizon, emptied",
        DelayHistogram({2 * R + 44: 5, 3 * R: 4, 5 * R: 2}, 11),
        {0: 1},
        (75_000, 85_000),
        {2 * R: 1, 3 * R: 4, 5 * R: 2},
        12,
    ),
    FoldCase(
        "a jump of the whole horizon or more empties every slot",
        DelayHistogram({0: 5, R: 4, 5 * R + 1: 2}, 11),
        {3: 1},
        (5_000, 5_000 + SLOTS * SLOT_MS),
        {0 * R + 3: 1},
        12,
    ),
    FoldCase(
        "a batch measuring nothing leaves it (a quiet partition keeps its picture)",
        DelayHistogram({3: 5}, 5),
        {},
        (0, 100_000),
        {3: 5},
        5,
    ),
]


@pytest.mark.parametrize("case", FOLD_CASES, ids=[c.why for c in FOLD_CASES])
def test_fold_delays(case: FoldCase) -> None:
    after = fold_delays(case.prev, case.batch, *case.marks)
    assert (dict(after.weights), after.measured) == (case.weights, case.measured)


class QuantileCase(NamedTuple):
    why: str
    weights: dict[int, int]
    target: float
    edge: int | None


QUANTILE_CASES = [
    QuantileCase("all in order: bound 0", {0: 1000}, 99.9, 0),
    QuantileCase("999 of 1000 in order reaches 99.9 % exactly", {0: 999, 3: 1}, 99.9, 0),
    QuantileCase("998 of 1000 does not: the next edge", {0: 998, 3: 2}, 99.9, BUCKET_EDGES_MS[3]),
    QuantileCase("a lower target ignores a bigger tail", {0: 95, 3: 5}, 95.0, 0),
    QuantileCase("target 100: the largest delay's edge", {0: 999, 45: 1}, 100.0, 20_480),
    QuantileCase("the tail past the last edge: None", {0: 9, OVERFLOW_BUCKET: 1}, 99.0, None),
    QuantileCase("slots sum up: 999 + 1 in two slots", {0: 500, R: 499, 3 * R + 3: 1}, 99.9, 0),
]


@pytest.mark.parametrize("case", QUANTILE_CASES, ids=[c.why for c in QUANTILE_CASES])
def test_quantile_edge(case: QuantileCase) -> None:
    assert quantile_edge(DelayHistogram(case.weights, 10**6), case.target) == case.edge


class BoundCase(NamedTuple):
    why: str
    histograms: dict[int, DelayHistogram]
    fallback: dict[int, int]
    bound: dict[int, int]


MIN, MAX = 500, 60_000
ENOUGH = 1000
BOUND_CASES = [
    BoundCase(
        "the quantile inside [min, max] is the bound",
        {0: DelayHistogram({0: 500, 45: 500}, ENOUGH)},
        {},
        {0: 20_480},
    ),
    BoundCase("below min: clamped up", {0: DelayHistogram({1: 10}, ENOUGH)}, {}, {0: MIN}),
    BoundCase(
        "past max (and past the last edge): clamped down",
        {0: DelayHistogram({OVERFLOW_BUCKET: 10}, ENOUGH)},
        {},
        {0: MAX},
    ),
    BoundCase(
        "too little history: the largest delay, not below the partition's fixed bound",
        {0: DelayHistogram({0: 10}, ENOUGH - 1)},
        {0: 2_000},
        {0: 2_000},
    ),
    BoundCase(
        "too little history: the largest delay (100 %), not the target's quantile",
        {0: DelayHistogram({0: 998, 45: 1}, ENOUGH - 1)},
        {},
        {0: 20_480},
    ),
    BoundCase("no history and no fixed bound: lateness_min", {}, {}, {0: MIN}),
    BoundCase("no history: the partition's fixed bound", {}, {0: 90_000}, {0: 90_000}),
]


@pytest.mark.parametrize("case", BOUND_CASES, ids=[c.why for c in BOUND_CASES])
def test_auto_lateness(case: BoundCase) -> None:
    bounds = auto_lateness(case.histograms, [0], 99.9, MIN, MAX, case.fallback, ENOUGH)
    assert bounds == case.bound


def test_batch_delay_counts_measure_against_the_front_before() -> None:
    events = [(0, 100_000), (0, 99_990), (0, 120_000), (1, 80_000), (2, 1)]
    # the front stood at 100 s (partition 0): delays 0, 10 ms, 0 (ahead); partition 1 (its own
    # mark 25 s) 20 s behind the front; 2 has no mark: unmeasured
    counts = batch_delay_counts(events, {0: 100_000, 1: 25_000})
    assert counts == {0: {0: 2, 1: 1}, 1: {45: 1}}
    assert batch_delay_counts(events, {}) == {}


def test_advance_histograms_only_touches_measured_partitions() -> None:
    quiet = DelayHistogram({0: 4}, 4)
    after = advance_histograms({0: quiet, 1: quiet}, {1: {0: 1}}, {0: 0, 1: 500}, {1: 900})
    assert after[0] is quiet
    assert dict(after[1].weights) == {0: 5}
