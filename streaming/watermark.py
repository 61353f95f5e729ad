"""The watermark: how it advances at micro-batch boundaries, and what it means for a window
and for a business date (pure Python, table-tested).

`advance_watermark` runs on the driver over one number per source partition, never over
events. `closed`, `revisable`, `final_after_ms` and `final_through_ms` are the one statement
of what the watermark decides for a window; their Column twins (`closed_col`,
`revisable_col`) are the same comparisons in the JVM for the micro-batch's steps
(`streaming.logic`); `date_closed_at` / `closed_through` apply them to a business date.
Pure stdlib: the Column twins import pyspark when they are called.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING

from tally.dates import business_date_of, business_day_end, epoch_ms, from_epoch_ms
from tally.jvm_functions import batch_long, batch_timestamp

if TYPE_CHECKING:
    from pyspark.sql import Column

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WatermarkState:
    """`watermark_ms` None means no watermark yet (nothing is late)."""

    watermark_ms: int | None = None
    high_water_ms: Mapping[int, int] = field(default_factory=dict)
    last_seen_ms: Mapping[int, int] = field(default_factory=dict)
    # the newest watermark each partition's source sent in a control record
    source_watermark_ms: Mapping[int, int] = field(default_factory=dict)
    # expected partitions that have reported nothing yet -> since when they are expected
    unheard_since_ms: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class WatermarkAdvance:
    state: WatermarkState
    idle: dict[int, bool]
    regression_ms: int | None  # how far the computed value fell below the kept one, if it did


def fixed_bounds(
    partitions: list[int], lateness_ms: int, lateness_by_partition: Mapping[int, int]
) -> dict[int, int]:
    """Each partition's fixed bound L_p: its `lateness_by_partition` entry, else `lateness_ms`."""
    return {part: lateness_by_partition.get(part, lateness_ms) for part in partitions}


def advance_watermark(
    prev: WatermarkState,
    batch_high_water_ms: Mapping[int, int],
    now_ms: int,
    lateness_ms: int,
    idle_timeout_ms: int,
    policy: str = "partition-min",
    lateness_by_partition: Mapping[int, int] | None = None,
    batch_source_watermark_ms: Mapping[int, int] | None = None,
    expected_partitions: frozenset[int] = frozenset(),
) -> WatermarkAdvance:
    """The watermark after a batch whose partitions reached `batch_high_water_ms`.

    Each partition's bound is `hw_p − L_p`, L_p from `lateness_by_partition`, else
    `lateness_ms`. partition-min: the minimum over active partitions of their bound. A
    partition is active if it sent data within `idle_timeout_ms` of processing time (0
    disables idleness). global-max: the maximum over all partitions (Spark's own rule when
    every L_p is the same). Never moves backwards; with no active partition it stays put.

    Expected partitions (`expected_partitions`, either policy): while one has reported
    nothing (no event, no control record), the watermark stays put (undefined at the start);
    with idleness on, one unheard for `idle_timeout_ms` since it was first expected is idle
    (excluded) like a silent partition.

    Source watermarks (`batch_source_watermark_ms`, from control records, already clipped to
    now + max clock skew): a partition's own never moves back, a control record makes its
    partition active like an event, and the partition's bound is the larger of the two rules.
    """
    bounds = lateness_by_partition or {}
    high_water = dict(prev.high_water_ms)
    last_seen = dict(prev.last_seen_ms)
    source = dict(prev.source_watermark_ms)
    for partition, hw in batch_high_water_ms.items():
        high_water[partition] = max(hw, high_water.get(partition, hw))
        last_seen[partition] = now_ms
    for partition, wm in (batch_source_watermark_ms or {}).items():
        source[partition] = max(wm, source.get(partition, wm))
        last_seen[partition] = now_ms
    unheard = unheard_partitions(prev.unheard_since_ms, expected_partitions, last_seen, now_ms)
    since = {**last_seen, **unheard}
    idle = {p: idle_timeout_ms > 0 and now_ms - t >= idle_timeout_ms for p, t in since.items()}
    lateness_of = fixed_bounds(list(high_water), lateness_ms, bounds)
    bound = {p: hw - lateness_of[p] for p, hw in high_water.items()}
    for partition, wm in source.items():
        bound[partition] = max(wm, bound.get(partition, wm))
    if policy == "partition-min":
        active = [b for p, b in bound.items() if not idle[p]]
        candidate = min(active) if active else None
    elif policy == "global-max":
        candidate = max(bound.values()) if bound else None
    else:
        raise ValueError(f"watermark_policy: unknown policy {policy!r}")
    if any(not idle[p] for p in unheard):  # an input with no upper bound yet: no minimum
        candidate = None
    watermark = prev.watermark_ms
    regression = None
    if candidate is not None:
        if watermark is not None and candidate < watermark:
            regression = watermark - candidate
            log.info("watermark regression of %d ms ignored (kept %d)", regression, watermark)
        else:
            watermark = candidate
    return WatermarkAdvance(
        WatermarkState(watermark, high_water, last_seen, source, unheard), idle, regression
    )


def unheard_partitions(
    unheard_since_ms: Mapping[int, int],
    expected_partitions: frozenset[int],
    heard: Mapping[int, int],
    now_ms: int,
) -> dict[int, int]:
    """The expected partitions not `heard` from yet, each with the processing time since
    which it is expected (kept from before; now for one expected from this batch on)."""
    return {
        p: unheard_since_ms.get(p, now_ms) for p in sorted(expected_partitions) if p not in heard
    }


# -- what the watermark means for a window ------------------------------------------------------
# A window `[start, end)` (epoch ms) against the watermark WM, None while there is none yet
# (nothing has closed). `slack_ms` is how long past its end a window still counts: the allowed
# lateness, plus a session gap for a session's state, plus the dedup horizon for remembered
# ids (docs/semantics.md, "Classification", "Dedup horizon", "Window state").


def closed(end_ms: int, watermark_ms: int | None) -> bool:
    """The watermark reached the window's end (`end <= WM`): it emits its final row, and an
    event for it is no longer on time."""
    return watermark_ms is not None and end_ms <= watermark_ms


def final_after_ms(end_ms: int, slack_ms: int) -> int:
    """The watermark from which (inclusive) a window ending at `end_ms` is past changing."""
    return end_ms + slack_ms


def final_through_ms(watermark_ms: int, slack_ms: int) -> int:
    """The latest window end that is past changing at `watermark_ms` (`final_after_ms`
    turned round): a window ending at or before it is late for an event, evicted, forgotten."""
    return watermark_ms - slack_ms


def revisable(end_ms: int, watermark_ms: int | None, slack_ms: int) -> bool:
    """The window can still change (`end + slack > WM`): an event for it still counts, it stays
    in state, its ids stay remembered. A closed window that is revisable takes allowed-late
    events; one that is not takes only late ones."""
    return watermark_ms is None or watermark_ms < final_after_ms(end_ms, slack_ms)


def closed_col(end: Column, watermark_ms: int | None) -> Column:
    """`closed` over a TIMESTAMP column, the watermark a batch value (`batch_timestamp`: the
    stages holding it are not compiled again every batch)."""
    from pyspark.sql import functions as F

    if watermark_ms is None:
        return F.lit(False)
    return end <= batch_timestamp(watermark_ms)


def revisable_col(end: Column, watermark_ms: int | None, slack_ms: int) -> Column:
    """`revisable` over a TIMESTAMP column, the watermark a batch value (`batch_long`)."""
    from pyspark.sql import functions as F

    if watermark_ms is None:
        return F.lit(True)
    return F.unix_millis(end) + F.lit(slack_ms) > batch_long(watermark_ms)


# -- what the watermark means for a business date -----------------------------------------------


def date_closed_at(
    day: date, report_timezone: str, reach_ms: int, allowed_lateness_ms: int
) -> datetime:
    """The rule "this date is closed": the watermark after which no on-time or allowed-late
    event can change one of the date's windows (`final_after_ms` of its last window end: the
    date's end + the windows' reach, `tally.dates.window_reach_ms`). The nightly waits for it;
    the stream compacts a closed `event_date` to a few files. A late event can still arrive
    for a closed date (into the late side output)."""
    last_end_ms = epoch_ms(business_day_end(day, report_timezone)) + reach_ms
    return from_epoch_ms(final_after_ms(last_end_ms, allowed_lateness_ms))


def closed_through(
    watermark_ms: int, report_timezone: str, reach_ms: int, allowed_lateness_ms: int
) -> date:
    """The newest date closed at this watermark (`date_closed_at` <= watermark): every
    earlier date is closed too."""
    moment = from_epoch_ms(final_through_ms(watermark_ms, allowed_lateness_ms) - reach_ms)
    return business_date_of(moment, report_timezone) - timedelta(days=1)
