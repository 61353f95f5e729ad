"""Adaptive lateness (`lateness = "auto"`): each partition's bound follows its delays (pure
Python over a few numbers per partition, table-tested; docs/semantics.md "Adaptive lateness").

An event's delay is how far its event time is behind the stream's front as it stood before
the batch: `max(0, F_before − event_ms)`, `F_before` the largest high-water mark of any
partition (events of a partition with no high-water mark yet are not measured). Measured
against the front rather than the partition's own mark, a partition that falls behind (a
delivery degradation) shows its delay in the first batch that carries its delayed events,
and the delay its stragglers would have behind its own mark if its delivery recovered at
once; with one partition the two are the same.

Each partition keeps the counts of its delays in fixed buckets over a sliding horizon of its
own event time: `SLOTS` slots of `SLOT_MS` by its high-water mark; a slot leaves the horizon
when the mark passes it by `SLOTS` slots. Its bound is the smallest bucket edge whose
cumulative share reaches the completeness target, clamped to `[lateness_min, lateness_max]`.
The bounds then feed `advance_watermark` as per-partition bounds, so the watermark rule (and
its never-moves-back) stays in one place.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass, field

from tally.completeness import meets_target


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
# The horizon: a partition's delays count while its high-water mark is within SLOTS slots of
# SLOT_MS of event time of the slot they were measured in (the mark's slot then): 50-60 s.
# Event time, not batches: the same horizon at any trigger interval, and a replay computes
# the same slots. Long enough to span a burst's stragglers and the gaps between them, short
# enough that the bound tightens within a minute of event time after the last large delay.
SLOT_MS = 10_000
SLOTS = 6
# A histogram key is `ring position * SLOT_STRIDE + bucket`, the ring position a slot's index
# modulo SLOTS (buckets < SLOT_STRIDE): one integer map per partition, as checkpointed.
SLOT_STRIDE = 128
# A partition with fewer measured events than this has too little history to see a 99.9 %
# tail: its bound is the largest delay it has shown, not below its start bound.
MIN_HISTORY_EVENTS = 1000


@dataclass(frozen=True)
class DelayHistogram:
    """One partition's delay counts over its horizon: `position * SLOT_STRIDE + bucket` ->
    events (zero counts absent), and how many events were measured in all (the history
    threshold; never forgotten)."""

    weights: Mapping[int, int] = field(default_factory=dict)
    measured: int = 0

    def buckets(self) -> dict[int, int]:
        """bucket -> events over the horizon (every slot summed)."""
        out: dict[int, int] = {}
        for key, n in self.weights.items():
            out[key % SLOT_STRIDE] = out.get(key % SLOT_STRIDE, 0) + n
        return out


def delay_bucket(delay_ms: int) -> int:
    """The bucket of a delay: the index of the first edge at or above it."""
    return bisect_left(BUCKET_EDGES_MS, max(0, delay_ms))


def fold_delays(
    prev: DelayHistogram | None,
    batch_counts: Mapping[int, int],
    high_water_before_ms: int,
    high_water_after_ms: int,
) -> DelayHistogram:
    """The histogram after a batch that measured `batch_counts` (bucket -> events) while the
    partition's mark moved from `high_water_before_ms` to `high_water_after_ms`: the slots the
    mark entered are emptied (their ring positions held slots that left the horizon), then the
    batch's counts go to the mark's slot. A batch measuring nothing leaves it unchanged: a
    quiet partition keeps its picture."""
    before = prev or DelayHistogram()
    added = sum(batch_counts.values())
    if added == 0:
        return before
    old_slot, new_slot = high_water_before_ms // SLOT_MS, high_water_after_ms // SLOT_MS
    entered = {s % SLOTS for s in range(old_slot + 1, min(new_slot, old_slot + SLOTS) + 1)}
    weights = {k: n for k, n in before.weights.items() if k // SLOT_STRIDE not in entered}
    base = (new_slot % SLOTS) * SLOT_STRIDE
    for bucket, count in batch_counts.items():
        weights[base + bucket] = weights.get(base + bucket, 0) + count
    kept = {k: n for k, n in sorted(weights.items()) if n > 0}
    return DelayHistogram(kept, before.measured + added)


def quantile_edge(histogram: DelayHistogram, target: float) -> int | None:
    """The smallest bucket edge whose cumulative count reaches `target` percent of the total
    (`meets_target`, the one comparison of the target); None when only the overflow bucket
    reaches it (past the last edge)."""
    buckets = histogram.buckets()
    total = sum(buckets.values())
    cumulative = 0
    for bucket in range(OVERFLOW_BUCKET):
        cumulative += buckets.get(bucket, 0)
        if meets_target(cumulative, total, target):
            return BUCKET_EDGES_MS[bucket]
    return None


def auto_lateness(
    histograms: Mapping[int, DelayHistogram],
    partitions: list[int],
    target: float,
    lateness_min_ms: int,
    lateness_max_ms: int,
    start_ms: Mapping[int, int],
    min_history: int = MIN_HISTORY_EVENTS,
) -> dict[int, int]:
    """The bound in force for each of `partitions`: the target quantile of its delays over
    its horizon, clamped to [min, max]. With fewer than `min_history` measured events, the
    largest delay it has shown (clamped alike), not below its start bound: its fixed bound
    (`start_ms`, i.e. lateness_by_partition, not clamped: you set it) or else `lateness_min`."""
    bounds = {}
    for partition in sorted(partitions):
        start = start_ms.get(partition, lateness_min_ms)
        histogram = histograms.get(partition)
        if histogram is None or not histogram.weights:
            bounds[partition] = start
            continue
        few = histogram.measured < min_history
        edge = quantile_edge(histogram, 100.0 if few else target)
        chosen = min(
            max(lateness_max_ms if edge is None else edge, lateness_min_ms), lateness_max_ms
        )
        bounds[partition] = max(chosen, start) if few else chosen
    return bounds


def front_ms(high_water_ms: Mapping[int, int]) -> int | None:
    """The stream's front: the largest high-water mark of any partition (None: no mark yet)."""
    return max(high_water_ms.values(), default=None)


def advance_histograms(
    prev: Mapping[int, DelayHistogram],
    batch_counts: Mapping[int, Mapping[int, int]],
    high_water_before_ms: Mapping[int, int],
    batch_high_water_ms: Mapping[int, int],
) -> dict[int, DelayHistogram]:
    """Every partition's histogram after a batch (`batch_counts`: partition -> bucket ->
    events measured in it; a measured partition has a mark before the batch, and its mark
    after is the larger of that and the batch's, `batch_high_water_ms`)."""
    after = dict(prev)
    for partition, counts in batch_counts.items():
        hw_before = high_water_before_ms[partition]
        hw_after = max(hw_before, batch_high_water_ms.get(partition, hw_before))
        after[partition] = fold_delays(prev.get(partition), counts, hw_before, hw_after)
    return dict(sorted(after.items()))


def batch_delay_counts(
    events: list[tuple[int, int]], high_water_before_ms: Mapping[int, int]
) -> dict[int, dict[int, int]]:
    """partition -> bucket -> count of a batch's `(partition, event_ms)` events, each measured
    against the front before the batch (unmeasured if its partition has no mark yet). The
    per-row rule the stream computes as one aggregate (streaming/logic.py)."""
    front = front_ms(high_water_before_ms)
    counts: dict[int, dict[int, int]] = {}
    for partition, event_ms in events:
        if front is None or partition not in high_water_before_ms:
            continue
        bucket = delay_bucket(front - event_ms)
        per = counts.setdefault(partition, {})
        per[bucket] = per.get(bucket, 0) + 1
    return counts
