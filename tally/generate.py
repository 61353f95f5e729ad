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
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

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


def _to_ms(value: datetime) -> int:
    if value.tzinfo is None:
        raise ValueError("start must be timezone-aware (UTC)")
    return (value - _EPOCH) // timedelta(milliseconds=1)


def _iso(ms: int) -> str:
    """Epoch milliseconds -> ``2026-11-21T09:42:17.125Z``."""
    moment = _EPOCH + timedelta(milliseconds=ms)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def _iso_formatter() -> Callable[[int], str]:
    """A fast ``_iso`` for millions of calls: the date part is cached per day."""
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
) -> dict[str, Any]:
    """Write the stream into ``out``; return the manifest (also written as ``_manifest.json``)."""
    _check("events", events, 0)
    _check("partitions", partitions, 1)
    _check("duration_ms", duration_ms, 1)
    _check("keys", keys, 1)
    if files is None:
        files = max(1, min(500, events // 2000))
    _check("files", files, 1)
    if files > 999_999:
        raise ValueError(f"files must be at most 999999, got {files}")
    start_ms = _to_ms(start)
    rng = random.Random(seed)
    show = progress and events >= 100_000
    fmt = _iso_formatter()

    # --- the stream's shape -------------------------------------------------------------------
    skewed = 0 if partitions >= 3 else None
    lagging = partitions - 1 if partitions > 2 else None
    idle = 1 if partitions >= 3 else None
    idle_lo = duration_ms * 45 // 100
    idle_hi = duration_ms * 55 // 100
    if idle is not None and idle_hi <= idle_lo:
        idle = None
    share0 = max(_SKEW_SHARE, 1.0 / partitions)
    omit_prob = min(1.0, _OMIT_PARTITION_SHARE / share0)

    bursts: list[tuple[int, int]] = []
    burst_len = min(_BURST_MS, duration_ms // 20)
    n_bursts = rng.randint(3, 5)
    if burst_len >= 1:
        segment = duration_ms // n_bursts
        for b in range(n_bursts):
            lo = b * segment + rng.randrange(segment - burst_len + 1)
            bursts.append((lo, lo + burst_len))
    burst_starts = [lo for lo, _ in bursts]

    key_names = [f"merchant-{k}" for k in range(1, keys + 1)]
    cum: list[float] = []
    acc = 0.0
    for k in range(1, keys + 1):
        acc += 1.0 / k**_ZIPF_S
        cum.append(acc)

    # --- original events, in event-time order (event_id follows event time) ------------------
    times = sorted(rng.randrange(duration_ms) for _ in range(events))
    key_of = rng.choices(key_names, cum_weights=cum, k=events)
    part_of = array("i", bytes(4 * events))
    amount_of = array("q", bytes(8 * events))
    stamp_of = array("q", bytes(8 * events))  # event time written to the line (relative ms)
    arrival_of = array("q", bytes(8 * events))  # relative ms
    flags = bytearray(events)  # 1: epoch-ms time, 2: omit partition, 4: held by a burst
    extra_of: list[str] = [""] * events
    counts = [0] * partitions
    amount_total = 0
    heavy_tail = burst_events = epoch_times = omitted = extra_events = 0

    rand = rng.random
    expo = rng.expovariate
    lognorm = rng.lognormvariate
    pareto = rng.paretovariate
    mu = math.log(_AMOUNT_MEDIAN)
    rest_parts = partitions - 1

    progress_events = _Progress(show, "events", events)
    for i in range(events):
        t = times[i]
        # partition: 0 is skewed; the idle partition is silent in the middle of the span
        while True:
            u = rand()
            if rest_parts == 0 or u < share0:
                p = 0
            else:
                p = 1 + min(rest_parts - 1, int((u - share0) / (1.0 - share0) * rest_parts))
            if p != idle or not (idle_lo <= t < idle_hi):
                break
        counts[p] += 1
        part_of[i] = p

        amount = min(_AMOUNT_MAX, max(_AMOUNT_MIN, int(lognorm(mu, _AMOUNT_SIGMA))))
        if rand() < _REFUND_SHARE:
            amount = -amount
        amount_of[i] = amount
        amount_total += amount

        delay = expo(1.0 / _MEAN_DELAY_MS)
        if rand() < _HEAVY_TAIL_SHARE:
            delay = 60_000.0 * min(_MAX_TAIL_MINUTES, pareto(_HEAVY_TAIL_ALPHA))
            heavy_tail += 1
        arrival = t + int(delay)
        if p == lagging:
            arrival += _LAG_MS

        held = False
        u = rand()
        if u < _BURST_REGION_SHARE:
            extra_of[i] = _BURST_EXTRAS[int(u / _BURST_REGION_SHARE * len(_BURST_EXTRAS))]
            extra_events += 1
            b = bisect.bisect_right(burst_starts, t) - 1
            if b >= 0 and t < bursts[b][1]:
                arrival = max(arrival, bursts[b][1])
                burst_events += 1
                held = True
        elif u < _BURST_REGION_SHARE + _OTHER_EXTRA_SHARE:
            frac = (u - _BURST_REGION_SHARE) / _OTHER_EXTRA_SHARE
            extra_of[i] = _OTHER_EXTRAS[int(frac * len(_OTHER_EXTRAS))]
            extra_events += 1
        arrival_of[i] = arrival
        stamp_of[i] = t

        f = 0
        if rand() < _EPOCH_TIME_SHARE:
            f |= 1
            epoch_times += 1
        if p == 0 and rand() < omit_prob:
            f |= 2
            omitted += 1
        if held:
            f |= 4
        flags[i] = f
        progress_events.tick(i + 1)

    # --- clocks running ahead: arrival stays, the written event time jumps 10-60 min ahead ----
    n_ahead = round(events * _CLOCK_AHEAD_SHARE)
    if events >= _MIN_EVENTS_FOR_EVERY_KIND:
        n_ahead = max(1, n_ahead)
    # Not on the idle partition (its silence must hold for written times too), and not an event
    # held back by a burst (a burst event is identified by its event time).
    candidates = [i for i in range(events) if part_of[i] != idle and not flags[i] & 4]
    n_ahead = min(n_ahead, len(candidates))
    ahead = sorted(rng.sample(candidates, n_ahead))
    del candidates
    for i in ahead:
        stamp_of[i] = arrival_of[i] + rng.randint(*_CLOCK_AHEAD_MS)

    # --- lines: originals, replays, malformed -------------------------------------------------
    # Each line is (arrival, ref): ref >= 0 is an original event index (replays repeat it),
    # ref < 0 is -1 - index into `malformed`.
    n_dup = round(events * _DUPLICATE_SHARE)
    dup_of = sorted(rng.sample(range(events), n_dup))
    # From 2000 events on, every kind appears, and both variants of the two that have variants.
    forced: tuple[str, ...] = ()
    if events >= _MIN_EVENTS_FOR_EVERY_KIND:
        forced = (*MALFORMED_KINDS, "amount_not_integer", "bad_event_time")
    n_mal = max(len(forced), round(events * _MALFORMED_SHARE))

    def event_line(i: int) -> str:
        f = flags[i]
        stamp = start_ms + stamp_of[i]
        when = str(stamp) if f & 1 else f'"{fmt(stamp)}"'
        part = "" if f & 2 else f',"partition":{part_of[i]}'
        return (
            f'{{"event_id":"e-{i + 1:08d}","key":"{key_of[i]}","amount":{amount_of[i]},'
            f'"event_time":{when}{part}{extra_of[i]}}}'
        )

    malformed: list[str] = []
    by_kind = dict.fromkeys(MALFORMED_KINDS, 0)
    mal_arrival: list[int] = []
    for m in range(n_mal):
        if m < len(forced):
            kind = forced[m]
        else:
            kind = MALFORMED_KINDS[rng.randrange(len(MALFORMED_KINDS))]
        variant = by_kind[kind] % 2  # alternate the variants of a kind
        t = rng.randrange(duration_ms)
        mal_arrival.append(t + int(expo(1.0 / _MEAN_DELAY_MS)))
        eid = f'"event_id":"bad-{m + 1:06d}"'
        key = f'"key":"{key_names[rng.randrange(keys)]}"'
        cents = rng.randint(_AMOUNT_MIN, 50_000)
        when = f'"event_time":"{fmt(start_ms + t)}"'
        part = f'"partition":{rng.randrange(partitions)}'
        if kind == "invalid_json":
            whole = f'{{{eid},{key},"amount":{cents},{when},{part}}}'
            text = whole[: rng.randrange(len(whole) // 3, len(whole) - 1)]
        elif kind == "amount_not_integer":
            amt = f"{cents / 100:.2f}" if variant == 0 else f'"{cents}"'
            text = f'{{{eid},{key},"amount":{amt},{when},{part}}}'
        elif kind == "missing_key":
            text = f'{{{eid},"amount":{cents},{when},{part}}}'
        elif kind == "missing_event_id":
            text = f'{{{key},"amount":{cents},{when},{part}}}'
        elif kind == "bad_event_time":
            if variant == 0:  # a local time without a zone: ambiguous, so invalid
                bad = fmt(start_ms + t)[:19]
            else:
                bad = _BAD_TIMES[rng.randrange(len(_BAD_TIMES))]
            text = f'{{{eid},{key},"amount":{cents},"event_time":"{bad}",{part}}}'
        elif kind == "empty_line":
            text = ""
        else:  # non_object
            text = _NON_OBJECTS[rng.randrange(len(_NON_OBJECTS))]
        by_kind[kind] += 1
        malformed.append(text)

    n_lines = events + n_dup + n_mal
    line_arrival = array("q", arrival_of)
    line_ref = array("q", range(events))
    for i in dup_of:
        replay_delay = 1000 + int(min(expo(1.0 / 30_000), 270_000.0))
        line_arrival.append(arrival_of[i] + replay_delay)
        line_ref.append(i)
    for m, a in enumerate(mal_arrival):
        line_arrival.append(a)
        line_ref.append(-1 - m)
    # Stable sort: ties in arrival keep generation order (originals, replays, malformed).
    order = sorted(range(n_lines), key=line_arrival.__getitem__)

    # --- arrival slices -> files --------------------------------------------------------------
    if n_lines:
        first, last = line_arrival[order[0]], line_arrival[order[-1]]
    else:
        first = last = 0
    span = max(last - first + 1, files)
    bounds = [first + span * s // files for s in range(files + 1)]

    os.makedirs(out, exist_ok=True)
    for name in sorted(os.listdir(out)):
        if _FILE_RE.match(name) or name == MANIFEST_NAME:
            os.remove(os.path.join(out, name))

    progress_files = _Progress(show, "files", files)
    pos = 0
    for s in range(files):
        end = bounds[s + 1]
        chunk: list[str] = []
        while pos < n_lines and line_arrival[order[pos]] < end:
            ref = line_ref[order[pos]]
            chunk.append(event_line(ref) if ref >= 0 else malformed[-1 - ref])
            chunk.append("\n")
            pos += 1
        path = os.path.join(out, f"arrival-{s:06d}.jsonl")
        with open(path, "w", encoding="utf-8", newline="\n") as fh:
            fh.write("".join(chunk))
        mtime_ns = (start_ms + end) * 1_000_000
        os.utime(path, ns=(mtime_ns, mtime_ns))
        progress_files.tick(s + 1)
    assert pos == n_lines

    manifest: dict[str, Any] = {
        "seed": seed,
        "events": events,
        "valid_events": events,
        "partitions": partitions,
        "keys": keys,
        "start": _iso(start_ms),
        "duration_ms": duration_ms,
        "files": files,
        "slice_ms": span / files,
        "lines": n_lines,
        "duplicates": n_dup,
        "malformed_lines": n_mal,
        "malformed_by_kind": by_kind,
        "clock_ahead_events": n_ahead,
        "clock_ahead_event_ids": [f"e-{i + 1:08d}" for i in ahead],
        "heavy_tail_events": heavy_tail,
        "burst_events": burst_events,
        "burst_region": "ap-south",
        "bursts": [[_iso(start_ms + lo), _iso(start_ms + hi)] for lo, hi in bursts],
        "lagging_partition": lagging,
        "lag_ms": _LAG_MS if lagging is not None else 0,
        "skewed_partition": skewed,
        "idle_partition": idle,
        "idle_from": _iso(start_ms + idle_lo) if idle is not None else None,
        "idle_until": _iso(start_ms + idle_hi) if idle is not None else None,
        "events_by_partition": {str(p): counts[p] for p in range(partitions)},
        "omitted_partition_events": omitted,
        "epoch_ms_time_events": epoch_times,
        "extra_field_events": extra_events,
        "amount_total": amount_total,
        "first_arrival": _iso(start_ms + first) if n_lines else None,
        "last_arrival": _iso(start_ms + last) if n_lines else None,
    }
    manifest_path = os.path.join(out, MANIFEST_NAME)
    with open(manifest_path, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(json.dumps(manifest, sort_keys=True, indent=2) + "\n")
    final_ns = (start_ms + bounds[-1]) * 1_000_000
    os.utime(manifest_path, ns=(final_ns, final_ns))
    return manifest
