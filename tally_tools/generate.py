"""Synthetic event stream: JSONL files in arrival order, with the disorder a real feed has.

    generate(out, events, partitions, seed, start, duration_ms, files, keys, progress) -> manifest

Event times are spread over ``[start, start + duration_ms)``; each event then *arrives*
(``arrival = event_time + delay``) and lands in the arrival slice (file) of its arrival time.
Files are ``arrival-000000.jsonl``, ``arrival-000001.jsonl``, ...; each file's mtime is the
simulated arrival time of the end of its slice, so names and mtimes are both in arrival order.

What makes the stream hard (all counted in the manifest):

* delays: exponential, mean ~500 ms; ~2 % heavy tail of 1-30 minutes;
* bursts: ``region: ap-south`` events (~5 %) are held back during 3-5 burst periods of
  ~10 minutes and released together at the end of each period;
* skew: partition 0 carries ~35 % of the events; partition ``partitions - 1`` (when
  ``partitions > 2``) lags: every event on it arrives 45 s late (a slow consumer);
* idle: partition 1 (when ``partitions >= 3``) produces nothing for the middle ~10 % of the span;
* duplicates: ~0.5 % of events are replayed verbatim seconds to minutes after the original;
* malformed lines: ~0.2 % of lines, of every kind in ``MALFORMED_KINDS``;
* clocks ahead: ~0.05 % of events carry an event time 10-60 minutes ahead of their arrival;
* contract variety: ~3 % epoch-millisecond event times, ~10 % omit ``partition`` (only events
  of partition 0), ~10 % carry unknown extra fields.

Deterministic: everything comes from ``random.Random(seed)``; the same arguments give
byte-identical files, names, mtimes and manifest. Re-running into the same directory replaces
the generator's own files (``arrival-NNNNNN.jsonl`` and ``_manifest.json``) and nothing else.
"""

from __future__ import annotations

import bisect
import json
import math
import os
import random
import re
import sys
from array import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from tally.dates import epoch_ms, iso_ms
from tally.money import CurrencyError, check_currency

__all__ = ["MALFORMED_KINDS", "generate"]

MALFORMED_KINDS = (
    "invalid_json",
    "amount_not_integer",
    "missing_key",
    "missing_event_id",
    "bad_event_time",
    "empty_line",
    "non_object",
)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_FILE_RE = re.compile(r"^arrival-\d{6,}\.jsonl$")
MANIFEST_NAME = "_manifest.json"

# Shape of the stream (fractions of events unless stated otherwise).
_MEAN_DELAY_MS = 500.0
_HEAVY_TAIL_SHARE = 0.02
_HEAVY_TAIL_ALPHA = 1.2  # Pareto shape; minutes = min(30, pareto) -> 1..30 min
_MAX_TAIL_MINUTES = 30.0
_SKEW_SHARE = 0.35
_LAG_MS = 45_000
_IDLE_FROM, _IDLE_UNTIL = 0.45, 0.55  # fractions of the event-time span
_BURST_MS = 600_000
_OMIT_PARTITION_SHARE = 0.10
_EPOCH_TIME_SHARE = 0.03
_BURST_REGION_SHARE = 0.05
_OTHER_EXTRA_SHARE = 0.05
_REFUND_SHARE = 0.05
_DUPLICATE_SHARE = 0.005
_MALFORMED_SHARE = 0.002
_CLOCK_AHEAD_SHARE = 0.0005
_CLOCK_AHEAD_MS = (600_000, 3_600_000)
_MIN_EVENTS_FOR_EVERY_KIND = 2000
_ZIPF_S = 1.1
_AMOUNT_MEDIAN, _AMOUNT_SIGMA, _AMOUNT_MIN, _AMOUNT_MAX = 2500.0, 1.3, 100, 500_000
_AMOUNT_MU = math.log(_AMOUNT_MEDIAN)

# Per-event flags (bits of `_Originals.flags`).
_EPOCH_MS_TIME = 1  # the line writes epoch milliseconds, not ISO text
_OMIT_PARTITION = 2  # the line omits `partition` (only partition-0 events)
_HELD_BY_BURST = 4  # held back until the end of a burst period
_HEAVY_TAIL = 8  # delayed by the heavy tail

_BURST_EXTRAS = (',"region":"ap-south"', ',"region":"ap-south","device":"pos"')
_OTHER_EXTRAS = (
    ',"region":"eu-west"',
    ',"region":"us-east"',
    ',"device":"pos"',
    ',"device":"web","region":"eu-west"',
    ',"channel":"mobile"',
)
_NON_OBJECTS = ("[1,2]", '["e-1","merchant-1"]', '"event"', "42", "null")
_BAD_TIMES = ("yesterday", "not-a-time", "2026-13-45 25:61")


def start_epoch_ms(value: datetime) -> int:
    """A generator's `start` as epoch ms (`tally.dates.epoch_ms`); a naive one is refused."""
    if value.tzinfo is None:
        raise ValueError("start must be timezone-aware (UTC)")
    return epoch_ms(value)


def _iso_formatter() -> Callable[[int], str]:
    """A fast ``iso_ms`` for millions of calls: the date part is cached per day."""
    days: dict[int, str] = {}

    def fmt(ms: int) -> str:
        day, rest = divmod(ms, 86_400_000)
        prefix = days.get(day)
        if prefix is None:
            d = _EPOCH + timedelta(days=day)
            prefix = days[day] = f"{d.year:04d}-{d.month:02d}-{d.day:02d}T"
        sec, milli = divmod(rest, 1000)
        hour, sec = divmod(sec, 3600)
        minute, sec = divmod(sec, 60)
        return f"{prefix}{hour:02d}:{minute:02d}:{sec:02d}.{milli:03d}Z"

    return fmt


class _Progress:
    def __init__(self, enabled: bool, label: str, total: int) -> None:
        self.enabled = enabled and total > 0
        self.label = label
        self.total = total
        self.step = max(1, total // 10)
        self.next = self.step

    def tick(self, done: int) -> None:
        if self.enabled and done >= self.next:
            while self.next <= done:
                self.next += self.step
            pct = min(100, done * 100 // self.total)
            print(f"generate: {self.label} {pct}% ({done}/{self.total})", file=sys.stderr)
            sys.stderr.flush()


def _check(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def _checked_files(
    events: int, partitions: int, duration_ms: int, keys: int, files: int | None
) -> int:
    """Validate the sizes; return ``files``, defaulting to one file per ~2000 events."""
    _check("events", events, 0)
    _check("partitions", partitions, 1)
    _check("duration_ms", duration_ms, 1)
    _check("keys", keys, 1)
    if files is None:
        files = max(1, min(500, events // 2000))
    _check("files", files, 1)
    if files > 999_999:
        raise ValueError(f"files must be at most 999999, got {files}")
    return files


@dataclass(frozen=True)
class _Shape:
    """Where the stream is skewed, lagging, idle and bursty; times are ms after ``start``."""

    partitions: int
    duration_ms: int
    skewed: int | None
    lagging: int | None
    idle: int | None
    idle_lo: int
    idle_hi: int
    share0: float  # share of events on partition 0
    omit_prob: float  # chance that a partition-0 event omits ``partition``
    bursts: tuple[tuple[int, int], ...]
    burst_starts: tuple[int, ...]
    key_names: tuple[str, ...]
    key_cum_weights: tuple[float, ...]  # Zipf

    def burst_end(self, t: int) -> int | None:
        """End of the burst period holding time ``t``, or None outside every burst."""
        b = bisect.bisect_right(self.burst_starts, t) - 1
        if b >= 0 and t < self.bursts[b][1]:
            return self.bursts[b][1]
        return None


def _plan_shape(rng: random.Random, partitions: int, duration_ms: int, keys: int) -> _Shape:
    """Decide the stream's shape; draws the burst periods from ``rng``."""
    idle = 1 if partitions >= 3 else None
    idle_lo = duration_ms * 45 // 100
    idle_hi = duration_ms * 55 // 100
    if idle is not None and idle_hi <= idle_lo:
        idle = None
    share0 = max(_SKEW_SHARE, 1.0 / partitions)

    bursts: list[tuple[int, int]] = []
    burst_len = min(_BURST_MS, duration_ms // 20)
    n_bursts = rng.randint(3, 5)  # drawn even when the span is too short for bursts
    if burst_len >= 1:
        segment = duration_ms // n_bursts
        for b in range(n_bursts):
            lo = b * segment + rng.randrange(segment - burst_len + 1)
            bursts.append((lo, lo + burst_len))

    cum_weights: list[float] = []
    acc = 0.0
    for k in range(1, keys + 1):
        acc += 1.0 / k**_ZIPF_S
        cum_weights.append(acc)

    return _Shape(
        partitions=partitions,
        duration_ms=duration_ms,
        skewed=0 if partitions >= 3 else None,
        lagging=partitions - 1 if partitions > 2 else None,
        idle=idle,
        idle_lo=idle_lo,
        idle_hi=idle_hi,
        share0=share0,
        omit_prob=min(1.0, _OMIT_PARTITION_SHARE / share0),
        bursts=tuple(bursts),
        burst_starts=tuple(lo for lo, _ in bursts),
        key_names=tuple(f"merchant-{k}" for k in range(1, keys + 1)),
        key_cum_weights=tuple(cum_weights),
    )


@dataclass
class _Originals:
    """The original events in event-time order: index ``i`` is event ``e-{i + 1:08d}``."""

    key_of: list[str]
    part_of: array[int]
    amount_of: array[int]
    stamp_of: array[int]  # event time written on the line, ms after start
    arrival_of: array[int]  # ms after start
    flags: bytearray  # _EPOCH_MS_TIME | _OMIT_PARTITION | _HELD_BY_BURST | _HEAVY_TAIL
    extra_of: list[str]  # unknown extra fields, as JSON text starting with a comma

    def flagged(self, flag: int) -> int:
        """How many events carry ``flag``."""
        return sum(1 for f in self.flags if f & flag)

    def by_partition(self, partitions: int) -> list[int]:
        """Event count of each partition."""
        counts = [0] * partitions
        for p in self.part_of:
            counts[p] += 1
        return counts


def _draw_originals(rng: random.Random, shape: _Shape, events: int, show: bool) -> _Originals:
    """Draw every original event; event ids follow event time."""
    times = sorted(rng.randrange(shape.duration_ms) for _ in range(events))
    key_of = rng.choices(shape.key_names, cum_weights=shape.key_cum_weights, k=events)
    part_of = array("i", bytes(4 * events))
    amount_of = array("q", bytes(8 * events))
    arrival_of = array("q", bytes(8 * events))
    flags = bytearray(events)
    extra_of: list[str] = [""] * events
    progress_events = _Progress(show, "events", events)
    for i, t in enumerate(times):
        part_of[i], amount_of[i], arrival_of[i], extra_of[i], flags[i] = _draw_event(rng, shape, t)
        progress_events.tick(i + 1)
    return _Originals(
        key_of=key_of,
        part_of=part_of,
        amount_of=amount_of,
        stamp_of=array("q", times),
        arrival_of=arrival_of,
        flags=flags,
        extra_of=extra_of,
    )


def _draw_event(rng: random.Random, shape: _Shape, t: int) -> tuple[int, int, int, str, int]:
    """One original event at time ``t``: (partition, amount, arrival, extra fields, flags)."""
    p = _draw_partition(rng, shape, t)
    amount = _draw_amount(rng)
    delay, flags = _draw_delay(rng)
    arrival = t + delay
    if p == shape.lagging:
        arrival += _LAG_MS
    u = rng.random()
    extra = _extra_fields(u)
    if u < _BURST_REGION_SHARE:
        # Burst-region events occurring in a burst period are held back until its end.
        burst_end = shape.burst_end(t)
        if burst_end is not None:
            arrival = max(arrival, burst_end)
            flags |= _HELD_BY_BURST
    if rng.random() < _EPOCH_TIME_SHARE:
        flags |= _EPOCH_MS_TIME
    if p == 0 and rng.random() < shape.omit_prob:
        flags |= _OMIT_PARTITION
    return p, amount, arrival, extra, flags


def _draw_partition(rng: random.Random, shape: _Shape, t: int) -> int:
    """Partition 0 is skewed; the idle partition is silent in the middle of the span."""
    rest_parts = shape.partitions - 1
    share0 = shape.share0
    while True:
        u = rng.random()
        if rest_parts == 0 or u < share0:
            p = 0
        else:
            p = 1 + min(rest_parts - 1, int((u - share0) / (1.0 - share0) * rest_parts))
        if p != shape.idle or not (shape.idle_lo <= t < shape.idle_hi):
            return p


def _draw_amount(rng: random.Random) -> int:
    """Log-normal cents, clamped; a few are refunds (negative)."""
    amount = min(_AMOUNT_MAX, max(_AMOUNT_MIN, int(rng.lognormvariate(_AMOUNT_MU, _AMOUNT_SIGMA))))
    if rng.random() < _REFUND_SHARE:
        amount = -amount
    return amount


def _draw_delay(rng: random.Random) -> tuple[int, int]:
    """Arrival delay in ms, and ``_HEAVY_TAIL`` if it came from the heavy tail (else 0)."""
    delay = rng.expovariate(1.0 / _MEAN_DELAY_MS)
    if rng.random() < _HEAVY_TAIL_SHARE:
        delay = 60_000.0 * min(_MAX_TAIL_MINUTES, rng.paretovariate(_HEAVY_TAIL_ALPHA))
        return int(delay), _HEAVY_TAIL
    return int(delay), 0


def _extra_fields(u: float) -> str:
    """The extra fields picked by the uniform draw ``u`` ("" for most events)."""
    if u < _BURST_REGION_SHARE:
        return _BURST_EXTRAS[int(u / _BURST_REGION_SHARE * len(_BURST_EXTRAS))]
    if u < _BURST_REGION_SHARE + _OTHER_EXTRA_SHARE:
        frac = (u - _BURST_REGION_SHARE) / _OTHER_EXTRA_SHARE
        return _OTHER_EXTRAS[int(frac * len(_OTHER_EXTRAS))]
    return ""


def _push_clocks_ahead(rng: random.Random, shape: _Shape, originals: _Originals) -> list[int]:
    """Move a few written event times 10-60 min past their arrival; return their indices."""
    events = len(originals.flags)
    n_ahead = round(events * _CLOCK_AHEAD_SHARE)
    if events >= _MIN_EVENTS_FOR_EVERY_KIND:
        n_ahead = max(1, n_ahead)
    # Not on the idle partition (its silence must hold for written times too), and not an event
    # held back by a burst (a burst event is identified by its event time).
    candidates = [
        i
        for i in range(events)
        if originals.part_of[i] != shape.idle and not originals.flags[i] & _HELD_BY_BURST
    ]
    n_ahead = min(n_ahead, len(candidates))
    ahead = sorted(rng.sample(candidates, n_ahead))
    del candidates
    for i in ahead:
        originals.stamp_of[i] = originals.arrival_of[i] + rng.randint(*_CLOCK_AHEAD_MS)
    return ahead


@dataclass(frozen=True)
class _Malformed:
    """The malformed lines, their arrivals (ms after start) and their count per kind."""

    lines: list[str]
    arrivals: list[int]
    by_kind: dict[str, int]


def _draw_malformed(
    rng: random.Random, shape: _Shape, events: int, start_ms: int, fmt: Callable[[int], str]
) -> _Malformed:
    """Draw the malformed lines; from 2000 events on, every kind and variant appears."""
    forced: tuple[str, ...] = ()
    if events >= _MIN_EVENTS_FOR_EVERY_KIND:
        # Both variants of the two kinds that have variants.
        forced = (*MALFORMED_KINDS, "amount_not_integer", "bad_event_time")
    malformed = _Malformed([], [], dict.fromkeys(MALFORMED_KINDS, 0))
    for m in range(max(len(forced), round(events * _MALFORMED_SHARE))):
        if m < len(forced):
            kind = forced[m]
        else:
            kind = MALFORMED_KINDS[rng.randrange(len(MALFORMED_KINDS))]
        variant = malformed.by_kind[kind] % 2  # alternate the variants of a kind
        t = rng.randrange(shape.duration_ms)
        malformed.arrivals.append(t + int(rng.expovariate(1.0 / _MEAN_DELAY_MS)))
        text = _malformed_line(rng, shape, kind, variant, m + 1, fmt(start_ms + t))
        malformed.by_kind[kind] += 1
        malformed.lines.append(text)
    return malformed


def _malformed_line(
    rng: random.Random, shape: _Shape, kind: str, variant: int, number: int, when_iso: str
) -> str:
    """The text of malformed line ``bad-{number}`` of ``kind``, written at ``when_iso``."""
    eid = f'"event_id":"bad-{number:06d}"'
    key = f'"key":"{shape.key_names[rng.randrange(len(shape.key_names))]}"'
    cents = rng.randint(_AMOUNT_MIN, 50_000)
    when = f'"event_time":"{when_iso}"'
    part = f'"partition":{rng.randrange(shape.partitions)}'
    if kind == "invalid_json":
        whole = f'{{{eid},{key},"amount":{cents},{when},{part}}}'
        return whole[: rng.randrange(len(whole) // 3, len(whole) - 1)]
    if kind == "amount_not_integer":
        amt = f"{cents / 100:.2f}" if variant == 0 else f'"{cents}"'
        return f'{{{eid},{key},"amount":{amt},{when},{part}}}'
    if kind == "missing_key":
        return f'{{{eid},"amount":{cents},{when},{part}}}'
    if kind == "missing_event_id":
        return f'{{{key},"amount":{cents},{when},{part}}}'
    if kind == "bad_event_time":
        # Variant 0 is a local time without a zone: ambiguous, so invalid.
        bad = when_iso[:19] if variant == 0 else _BAD_TIMES[rng.randrange(len(_BAD_TIMES))]
        return f'{{{eid},{key},"amount":{cents},"event_time":"{bad}",{part}}}'
    if kind == "empty_line":
        return ""
    return _NON_OBJECTS[rng.randrange(len(_NON_OBJECTS))]  # non_object


@dataclass(frozen=True)
class _Lines:
    """Every line as (arrival, ref), and the line indices in arrival order.

    ``ref >= 0`` is an original event index (replays repeat it); ``ref < 0`` is
    ``-1 - index`` into the malformed lines.
    """

    arrival: array[int]
    ref: array[int]
    order: list[int]


def _queue_lines(
    rng: random.Random, originals: _Originals, replayed: list[int], malformed: _Malformed
) -> _Lines:
    """Queue originals, replays (drawing their delays) and malformed lines by arrival."""
    arrival = array("q", originals.arrival_of)
    ref = array("q", range(len(originals.arrival_of)))
    for i in replayed:
        replay_delay = 1000 + int(min(rng.expovariate(1.0 / 30_000), 270_000.0))
        arrival.append(originals.arrival_of[i] + replay_delay)
        ref.append(i)
    for m, a in enumerate(malformed.arrivals):
        arrival.append(a)
        ref.append(-1 - m)
    # Stable sort: ties in arrival keep generation order (originals, replays, malformed).
    order = sorted(range(len(arrival)), key=arrival.__getitem__)
    return _Lines(arrival, ref, order)


@dataclass(frozen=True)
class _Slices:
    """Arrival slices, one per file: slice ``s`` is ``[bounds[s], bounds[s + 1])``."""

    first: int  # first arrival (0 without lines)
    last: int  # last arrival (0 without lines)
    span: int
    bounds: list[int]


def _slice_arrivals(lines: _Lines, files: int) -> _Slices:
    """Cut the arrival span into ``files`` equal slices (at least 1 ms each)."""
    if lines.order:
        first, last = lines.arrival[lines.order[0]], lines.arrival[lines.order[-1]]
    else:
        first = last = 0
    span = max(last - first + 1, files)
    return _Slices(first, last, span, [first + span * s // files for s in range(files + 1)])


def parse_currencies(text: str) -> dict[str, int]:
    """`--currencies`: comma-separated ISO 4217 codes, each with an optional positive integer
    weight after a colon ("USD:3,EUR,JPY" = 3:1:1); ValueError with a one-line message."""
    weights: dict[str, int] = {}
    for item in text.split(","):
        code, _, weight = item.strip().partition(":")
        try:
            check_currency(code)
        except CurrencyError as exc:
            raise ValueError(f"currencies: {exc}") from None
        if code in weights:
            raise ValueError(f"currencies: {code} is named twice")
        if weight and not (weight.isdigit() and int(weight) > 0):
            raise ValueError(
                f"currencies: {code}'s weight must be a positive integer, got {weight!r}"
            )
        weights[code] = int(weight) if weight else 1
    return weights


def key_currencies(
    seed: int, key_names: Sequence[str], currencies: Mapping[str, int]
) -> dict[str, str]:
    """Each key's currency (a merchant books one), drawn by weight from a generator of its own:
    the rest of the feed is the same with or without currencies."""
    rng = random.Random(f"{seed}/currencies")
    codes = sorted(currencies)
    drawn = rng.choices(codes, weights=[currencies[c] for c in codes], k=len(key_names))
    return dict(zip(key_names, drawn, strict=True))


def _line_renderer(
    originals: _Originals,
    malformed: _Malformed,
    start_ms: int,
    fmt: Callable[[int], str],
    currency_of: Mapping[str, str],
) -> Callable[[int], str]:
    """A function from a line's ref (see ``_Lines``) to its text; `currency_of` the currency
    field per key (none: the lines name no currency)."""
    money = {key: f',"currency":"{code}"' for key, code in currency_of.items()}
    key_of, part_of, amount_of = originals.key_of, originals.part_of, originals.amount_of
    stamp_of, flags, extra_of = originals.stamp_of, originals.flags, originals.extra_of
    malformed_lines = malformed.lines

    def line_text(ref: int) -> str:
        if ref < 0:
            return malformed_lines[-1 - ref]
        f = flags[ref]
        stamp = start_ms + stamp_of[ref]
        when = str(stamp) if f & _EPOCH_MS_TIME else f'"{fmt(stamp)}"'
        part = "" if f & _OMIT_PARTITION else f',"partition":{part_of[ref]}'
        key = key_of[ref]
        return (
            f'{{"event_id":"e-{ref + 1:08d}","key":"{key}","amount":{amount_of[ref]}'
            f'{money.get(key, "")},"event_time":{when}{part}{extra_of[ref]}}}'
        )

    return line_text


def remove_previous_output(out: str) -> None:
    """Create ``out``; remove the generator's own files from an earlier run, nothing else."""
    os.makedirs(out, exist_ok=True)
    for name in sorted(os.listdir(out)):
        if _FILE_RE.match(name) or name == MANIFEST_NAME:
            os.remove(os.path.join(out, name))


def _write_slices(
    out: str,
    lines: _Lines,
    slices: _Slices,
    line_text: Callable[[int], str],
    start_ms: int,
    show: bool,
) -> None:
    """Write one file per slice; its mtime is the arrival time of the slice's end."""
    files = len(slices.bounds) - 1
    progress_files = _Progress(show, "files", files)
    n_lines = len(lines.order)
    pos = 0
    for s in range(files):
        end = slices.bounds[s + 1]
        chunk: list[str] = []
        while pos < n_lines and lines.arrival[lines.order[pos]] < end:
            chunk.append(line_text(lines.ref[lines.order[pos]]))
            chunk.append("\n")
            pos += 1
        path = os.path.join(out, f"arrival-{s:06d}.jsonl")
        with open(path, "w", encoding="utf-8", newline="\n") as fh:
            fh.write("".join(chunk))
        mtime_ns = (start_ms + end) * 1_000_000
        os.utime(path, ns=(mtime_ns, mtime_ns))
        progress_files.tick(s + 1)
    assert pos == n_lines


def _manifest(
    seed: int,
    start_ms: int,
    shape: _Shape,
    originals: _Originals,
    ahead: list[int],
    n_duplicates: int,
    malformed: _Malformed,
    slices: _Slices,
    currency_of: Mapping[str, str],
) -> dict[str, Any]:
    """Everything that makes the stream hard, counted."""
    events = len(originals.flags)
    n_lines = events + n_duplicates + len(malformed.lines)
    idle = shape.idle
    counts = originals.by_partition(shape.partitions)
    return {
        "seed": seed,
        "events": events,
        "valid_events": events,
        "partitions": shape.partitions,
        "keys": len(shape.key_names),
        "start": iso_ms(start_ms),
        "duration_ms": shape.duration_ms,
        "files": len(slices.bounds) - 1,
        "slice_ms": slices.span / (len(slices.bounds) - 1),
        "lines": n_lines,
        "duplicates": n_duplicates,
        "malformed_lines": len(malformed.lines),
        "malformed_by_kind": malformed.by_kind,
        "clock_ahead_events": len(ahead),
        "clock_ahead_event_ids": [f"e-{i + 1:08d}" for i in ahead],
        "heavy_tail_events": originals.flagged(_HEAVY_TAIL),
        "burst_events": originals.flagged(_HELD_BY_BURST),
        "burst_region": "ap-south",
        "bursts": [[iso_ms(start_ms + lo), iso_ms(start_ms + hi)] for lo, hi in shape.bursts],
        "lagging_partition": shape.lagging,
        "lag_ms": _LAG_MS if shape.lagging is not None else 0,
        "skewed_partition": shape.skewed,
        "idle_partition": idle,
        "idle_from": iso_ms(start_ms + shape.idle_lo) if idle is not None else None,
        "idle_until": iso_ms(start_ms + shape.idle_hi) if idle is not None else None,
        "events_by_partition": {str(p): counts[p] for p in range(shape.partitions)},
        "omitted_partition_events": originals.flagged(_OMIT_PARTITION),
        "epoch_ms_time_events": originals.flagged(_EPOCH_MS_TIME),
        "extra_field_events": sum(1 for extra in originals.extra_of if extra),
        "amount_total": sum(originals.amount_of),
        # per currency the lines name (none: {}): events and amount, never summed across them
        "currencies": _by_currency(originals, currency_of),
        "first_arrival": iso_ms(start_ms + slices.first) if n_lines else None,
        "last_arrival": iso_ms(start_ms + slices.last) if n_lines else None,
    }


def _by_currency(originals: _Originals, currency_of: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, dict[str, int]] = {}
    for key, amount in zip(originals.key_of, originals.amount_of, strict=True):
        code = currency_of.get(key)
        if code is not None:
            totals = out.setdefault(code, {"events": 0, "amount_total": 0})
            totals["events"] += 1
            totals["amount_total"] += amount
    return dict(sorted(out.items()))


def write_manifest(out: str, manifest: dict[str, Any], mtime_ms: int) -> None:
    """Write ``_manifest.json`` with the given mtime (epoch ms)."""
    manifest_path = os.path.join(out, MANIFEST_NAME)
    with open(manifest_path, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(json.dumps(manifest, sort_keys=True, indent=2) + "\n")
    mtime_ns = mtime_ms * 1_000_000
    os.utime(manifest_path, ns=(mtime_ns, mtime_ns))


def generate(
    out: str,
    events: int,
    partitions: int,
    seed: int,
    start: datetime,
    duration_ms: int,
    files: int | None = None,
    keys: int = 1000,
    progress: bool = False,
    currencies: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """Write the stream into ``out``; return the manifest (also written as ``_manifest.json``).
    `currencies`: ISO 4217 codes with their weights, drawn per key (`key_currencies`); none:
    the lines name no currency (the reader's default_currency)."""
    files = _checked_files(events, partitions, duration_ms, keys, files)
    start_ms = start_epoch_ms(start)
    rng = random.Random(seed)
    show = progress and events >= 100_000
    fmt = _iso_formatter()

    # The phases draw from `rng` in this order; any reordering changes every file.
    shape = _plan_shape(rng, partitions, duration_ms, keys)
    originals = _draw_originals(rng, shape, events, show)
    ahead = _push_clocks_ahead(rng, shape, originals)
    replayed = sorted(rng.sample(range(events), round(events * _DUPLICATE_SHARE)))
    malformed = _draw_malformed(rng, shape, events, start_ms, fmt)
    lines = _queue_lines(rng, originals, replayed, malformed)

    slices = _slice_arrivals(lines, files)
    currency_of = key_currencies(seed, shape.key_names, currencies) if currencies else {}
    remove_previous_output(out)
    line_text = _line_renderer(originals, malformed, start_ms, fmt, currency_of)
    _write_slices(out, lines, slices, line_text, start_ms, show)
    manifest = _manifest(
        seed, start_ms, shape, originals, ahead, len(replayed), malformed, slices, currency_of
    )
    write_manifest(out, manifest, start_ms + slices.bounds[-1])
    return manifest
