"""Adaptive lateness (streaming/lateness.py), table-tested against hand-computed values."""

from __future__ import annotations

from itertools import pairwise
from typing import NamedTuple

import pytest

from streaming.lateness import (
    BUCKET_EDGES_MS,
    EVENT_WEIGHT,
    OVERFLOW_BUCKET,
    DelayHistogram,
    advance_histograms,
    auto_lateness,
    batch_delay_counts,
    delay_bucket,
    fold_delays,
    quantile_edge,
)

W = EVENT_WEIGHT


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
    weights: dict[int, int]
    measured: int


FOLD_CASES = [
    FoldCase("first batch: one weight per event", None, {0: 3, 5: 1}, {0: 3 * W, 5: W}, 4),
    FoldCase(
        "older weights keep 7/8 (floored) before the batch is added",
        DelayHistogram({0: 8 * W, 5: 1}, 9),
        {0: 1},
        {0: 7 * W + W},  # 1 * 7 // 8 == 0: the bucket is dropped
        10,
    ),
    FoldCase(
        "a batch measuring nothing decays nothing (a quiet partition keeps its picture)",
        DelayHistogram({3: 5 * W}, 5),
        {},
        {3: 5 * W},
        5,
    ),
]


@pytest.mark.parametrize("case", FOLD_CASES, ids=[c.why for c in FOLD_CASES])
def test_fold_delays(case: FoldCase) -> None:
    after = fold_delays(case.prev, case.batch)
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
        "too little history: the partition's fixed bound",
        {0: DelayHistogram({0: 10}, ENOUGH - 1)},
        {0: 2_000},
        {0: 2_000},
    ),
    BoundCase("no history and no fixed bound: lateness_max", {}, {}, {0: MAX}),
]


@pytest.mark.parametrize("case", BOUND_CASES, ids=[c.why for c in BOUND_CASES])
def test_auto_lateness(case: BoundCase) -> None:
    bounds = auto_lateness(case.histograms, [0], 99.9, MIN, MAX, case.fallback, ENOUGH)
    assert bounds == case.bound


def test_batch_delay_counts_measure_against_the_high_water_mark_before() -> None:
    events = [(0, 100_000), (0, 99_990), (0, 120_000), (1, 5_000), (2, 1)]
    # partition 0 stood at 100 s: delays 0, 10 ms, 0 (ahead); 1 at 25 s: 20 s; 2 unknown
    counts = batch_delay_counts(events, {0: 100_000, 1: 25_000})
    assert counts == {0: {0: 2, 1: 1}, 1: {45: 1}}


def test_advance_histograms_only_touches_measured_partitions() -> None:
    quiet = DelayHistogram({0: 4 * W}, 4)
    after = advance_histograms({0: quiet, 1: quiet}, {1: {0: 1}})
    assert after[0] is quiet
    assert dict(after[1].weights) == {0: 4 * W * 7 // 8 + W}
