"""Adaptive lateness (`lateness = "auto"`): each partition's bound follows its delays (pure
Python over a few numbers per partition, table-tested; docs/semantics.md "Adaptive lateness").

An event's delay is how far its event time is behind its partition's high-water mark as it
stood before the batch: `max(0, hw_before_p − event_ms)` (events of a partition with no
high-water mark yet are not measured). Each partition keeps a fixed-bucket histogram of its
delays, decayed by a fixed factor each batch that measures some of its events; its bound is
the smallest bucket edge whose cumulative share reaches the completeness target, clamped to
`[lateness_min, lateness_max]`. The bounds then feed `advance_watermark` as per-partition
bounds, so the watermark rule (and its never-moves-back) stays in one place.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass, field

from tally.settings import meets_target


def _bucket_edges() -> tuple[int, ...]:
    """0, then 10 ms growing by 2^(1/4) (about 19 %) per bucket up to the first edge at or
    past one day, rounded to whole ms: fixed for every run, so a checkpointed histogram means
    the same after a restart with other settings."""
    edges = [0]
    k = 0
    while edges[-1] < 86_400_000:
        edges.append(round(10 * 2 ** (k / 4)))
        k += 1
    return tuple(edges)


# Bucket i holds the delays in (BUCKET_EDGES_MS[i-1], BUCKET_EDGES_MS[i]] (bucket 0: delay 0);
# bucket len(BUCKET_EDGES_MS) holds those past the last edge.
BUCKET_EDGES_MS = _bucket_edges()
OVERFLOW_BUCKET = len(BUCKET_EDGES_MS)
# One event weighs this much; the weights are integers so a replay computes them exactly.
EVENT_WEIGHT = 1024
# Each batch that measures a partition's events keeps 7/8 of its older weights (floored): the
# histogram mostly reflects the partition's last ~8 such batches, so a burst widens the bound
# at once and ~50 calm batches after it the burst's share of a 99.9 % target has gone.
DECAY = (7, 8)
# A partition with fewer measured events than this uses its fixed bound: the tail of a
# 99.9 % quantile is not seen in fewer than 1000 events.
MIN_HISTORY_EVENTS = 1000


@dataclass(frozen=True)
class DelayHistogram:
    """One partition's delay estimate: bucket -> decayed weight (zero buckets absent), and how
    many events were measured in all (not decayed: the history threshold)."""

    weights: Mapping[int, int] = field(default_factory=dict)
    measured: int = 0


def delay_bucket(delay_ms: int) -> int:
    """The bucket of a delay: the index of the first edge at or above it."""
    return bisect_left(BUCKET_EDGES_MS, max(0, delay_ms))


def fold_delays(
    prev: DelayHistogram | None, batch_counts: Mapping[int, int], decay: tuple[int, int] = DECAY
) -> DelayHistogram:
    """The histogram after a batch that measured `batch_counts` (bucket -> events). A batch
    measuring nothing leaves it unchanged: a quiet partition keeps its picture."""
    before = prev or DelayHistogram()
    added = sum(batch_counts.values())
    if added == 0:
        return before
    num, den = decay
    weights = {b: w * num // den for b, w in before.weights.items()}
    for bucket, count in batch_counts.items():
        weights[bucket] = weights.get(bucket, 0) + count * EVENT_WEIGHT
    kept = {b: w for b, w in sorted(weights.items()) if w > 0}
    return DelayHistogram(kept, before.measured + added)


def quantile_edge(histogram: DelayHistogram, target: float) -> int | None:
    """The smallest bucket edge whose cumulative weight reaches `target` percent of the total
    (`meets_target`, the one comparison of the target); None when only the overflow bucket
    reaches it (past the last edge)."""
    total = sum(histogram.weights.values())
    cumulative = 0
    for bucket in range(OVERFLOW_BUCKET):
        cumulative += histogram.weights.get(bucket, 0)
        if meets_target(cumulative, total, target):
            return BUCKET_EDGES_MS[bucket]
    return None


def auto_lateness(
    histograms: Mapping[int, DelayHistogram],
    partitions: list[int],
    target: float,
    lateness_min_ms: int,
    lateness_max_ms: int,
    fallback_ms: Mapping[int, int],
    min_history: int = MIN_HISTORY_EVENTS,
) -> dict[int, int]:
    """The bound in force for each of `partitions`: the target quantile of its delays clamped
    to [min, max]; with fewer than `min_history` measured events its fixed bound
    (`fallback_ms`, i.e. lateness_by_partition) or else `lateness_max` (no history: the safe
    side)."""
    bounds = {}
    for partition in sorted(partitions):
        histogram = histograms.get(partition)
        if histogram is None or histogram.measured < min_history:
            bounds[partition] = fallback_ms.get(partition, lateness_max_ms)
            continue
        edge = quantile_edge(histogram, target)
        chosen = lateness_max_ms if edge is None else edge
        bounds[partition] = min(max(chosen, lateness_min_ms), lateness_max_ms)
    return bounds


def advance_histograms(
    prev: Mapping[int, DelayHistogram],
    batch_counts: Mapping[int, Mapping[int, int]],
    decay: tuple[int, int] = DECAY,
) -> dict[int, DelayHistogram]:
    """Every partition's histogram after a batch (`batch_counts`: partition -> bucket ->
    events measured in it)."""
    after = dict(prev)
    for partition, counts in batch_counts.items():
        after[partition] = fold_delays(prev.get(partition), counts, decay)
    return dict(sorted(after.items()))


def batch_delay_counts(
    events: list[tuple[int, int]], high_water_before_ms: Mapping[int, int]
) -> dict[int, dict[int, int]]:
    """partition -> bucket -> count of a batch's `(partition, event_ms)` events, each measured
    against its partition's high-water mark before the batch (unmeasured without one). The
    per-row rule the stream computes as one aggregate (streaming/logic.py)."""
    counts: dict[int, dict[int, int]] = {}
    for partition, event_ms in events:
        hw = high_water_before_ms.get(partition)
        if hw is None:
            continue
        bucket = delay_bucket(hw - event_ms)
        per = counts.setdefault(partition, {})
        per[bucket] = per.get(bucket, 0) + 1
    return counts
