"""Three sources, three lateness bounds: a deterministic feed for per-source lateness.

    generate(out, seed, start, duration_ms=180_000) -> manifest

The seed scenario of `lateness_by_partition` (docs/semantics.md, "Per-source lateness";
stream it with ``--lateness-by-partition 0=100ms,1=30s,2=10s``):

* **radar** (partition 0, bound 100 ms): an event every 50-200 ms, each arriving 0-100 ms
  after its event time (uniformly); the radar flushes a file every 5 s.
* **HTTP poller** (partition 1, bound 30 s): events happen about four a second; every 25-30 s
  the poller fetches everything since its previous poll, **newest first**, in pages of 40
  lines, one file per page (the pages 150-400 ms apart). The oldest event of a poll arrives
  after its newest: up to one poll interval (at most 30 s) of disorder. It polls first
  1-2 s after ``start``.
* **satellite beacon** (partition 2, bound 10 s): a beacon every 1-3 s, each arriving 0-10 s
  after its event time (uniformly); the ground station flushes a file every 10 s.

**Disorder** of an event: its partition's high-water mark when it arrives (the largest event
time among the partition's earlier lines, in arrival order: file mtime, name, line) minus its
event time. Every event is within its source's bound except a counted few per source, listed
in the manifest (``beyond_bound_event_ids``): the radar and the satellite each hold one event
back a little past the bound and two for 90-120 s (a link drop); the poller misses three
events and returns them two or three polls later. Only these may be late: the poller's first
page is the first file (the watermark stays below ``start`` until its second poll, 26 s or
more after ``start``), every source sends before that poll (by ``start + 22.5 s``), and none
goes silent for the default ``idle_timeout`` (60 s). Under the ``partition-min`` rule the
watermark then stays at or below ``hw_p - L_p <= t < window end`` for every within-bound event
``t`` of partition ``p``.

**Late-poller variant** (``late_poller``, ``tally generate --profile three-sources
--late-poller``): the poller polls first 25-28 s after ``start``, while the radar and the
satellite have sent from the start. The watermark over the partitions seen so far passes the
poller's first events before they arrive: without ``expected_partitions`` they are late
although within the poller's bound; with ``expected_partitions = 0-2`` the watermark waits for
the poller and again only the listed events may be late. The manifest's ``first_heard`` gives
each source's first arrival.

Also per source: two duplicates (a radar retransmission 0.2-3 s later, a poll that returns the
previous poll's newest event again, a beacon heard by a second ground station 2-20 s later)
and two malformed lines (their quarantine reasons, in the stream's vocabulary, in the
manifest).

Files are ``arrival-NNNNNN.jsonl`` in arrival order, with strictly increasing mtimes (the
simulated arrival time, as `tally_tools.generate` writes them), then ``_manifest.json``. Amounts
are integer minor units, event times ISO-8601 UTC with milliseconds; every line names its
source in an extra field ``source``. Deterministic: the same arguments give byte-identical
files, names, mtimes and manifest; re-running into a directory replaces the generator's own
files and nothing else.
"""

from __future__ import annotations

import bisect
import itertools
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tally.dates import iso_ms
from tally.durations import format_duration
from tally.settings import format_partition_durations
from tally_tools.generate import remove_previous_output, start_epoch_ms, write_manifest

__all__ = [
    "LATENESS_BY_PARTITION",
    "MIN_DURATION_MS",
    "PROFILE",
    "SOURCES",
    "Source",
    "generate",
]

PROFILE = "three-sources"


@dataclass(frozen=True)
class Source:
    name: str
    partition: int
    bound_ms: int  # the lateness bound L_p its disorder stays within
    keys: tuple[str, ...]


RADAR = Source("radar", 0, 100, tuple(f"radar-{k}" for k in range(1, 5)))
POLLER = Source("poller", 1, 30_000, tuple(f"merchant-{k}" for k in range(1, 7)))
SATELLITE = Source("satellite", 2, 10_000, tuple(f"beacon-{k}" for k in range(1, 4)))
SOURCES = (RADAR, POLLER, SATELLITE)
# "0=100ms,1=30s,2=10s": the setting that streams this feed with no within-bound event late
LATENESS_BY_PARTITION = format_partition_durations({s.partition: s.bound_ms for s in SOURCES})

# Shape (times in ms).
_RADAR_GAP = (50, 200)
_RADAR_DELAY = (0, 100)
_RADAR_FLUSH = 5_000
_POLLER_MEAN_GAP = 250.0
_POLLER_FIRST_EVENT = (0, 500)
_FIRST_POLL = (1_000, 2_000)
# The late-poller variant: the poller is first heard this long after start (its first poll
# returns everything since start: at most 28 s of disorder, within its 30 s bound), after the
# radar and the satellite have sent for ~25 s.
_LATE_FIRST_POLL = (25_000, 28_000)
_POLL_EVERY = (25_000, 30_000)
_PAGE_LINES = 40
_PAGE_LATENCY = (80, 300)  # the first page after the poll
_PAGE_GAP = (150, 400)  # each further page
_BEACON_GAP = (1_000, 3_000)
_BEACON_DELAY = (0, 10_000)
_SATELLITE_FLUSH = 10_000
_SATELLITE_FIRST_FLUSH = 2_500  # after start: between the poller's first page and the radar's
# Beyond the bound: one event a little past it, two by a link drop; the poller misses events.
_NEAR_BEYOND = {RADAR.name: (600, 900), SATELLITE.name: (25_000, 35_000)}
_FAR_BEYOND = (90_000, 120_000)
_FAR_BEYOND_PER_SOURCE = 2
_SPACING = {RADAR.name: 2_000, POLLER.name: 1_000, SATELLITE.name: 15_000}  # between picks
_MISSED_EVENTS = 3
_MISSED_BY_POLLS = (2, 3)
_WARMUP = 5_000  # no beyond-bound event, duplicate or malformed line before start + this
_RADAR_RETRANSMIT = (200, 3_000)
_SECOND_STATION = (2_000, 20_000)
_DUPLICATES_PER_SOURCE = 2
_DUPLICATE_SPACING = 1_000
_MALFORMED = {
    RADAR.name: ("invalid_json", "empty_line"),
    POLLER.name: ("amount_not_integer", "missing_key"),
    SATELLITE.name: ("bad_event_time", "missing_event_id"),
}
_REFUND_SHARE = 0.05
# The beyond-bound events arrive before start + duration, so the span must hold two of the
# longest hold-backs apart and the poller's missed events (three polls later).
MIN_DURATION_MS = 180_000


@dataclass
class _Event:
    event_id: str
    source: Source
    key: str
    amount: int
    time_ms: int  # epoch ms
    arrival_ms: int = 0
    beyond: bool = False

    def text(self) -> str:
        return (
            f'{{"event_id":"{self.event_id}","key":"{self.key}","amount":{self.amount},'
            f'"event_time":"{iso_ms(self.time_ms)}","partition":{self.source.partition},'
            f'"source":"{self.source.name}"}}'
        )


@dataclass(frozen=True)
class _Line:
    text: str
    arrival_ms: int
    event: _Event | None = None  # None: a malformed line
    copy: bool = False  # a duplicate: the event arrived before
    reason: str | None = None  # a malformed line's quarantine reason


@dataclass
class _File:
    source: Source
    mtime_ms: int
    lines: list[_Line]


@dataclass
class _Feed:
    """One source's output: its original events, duplicated events, malformed lines, files."""

    events: list[_Event]
    duplicated: list[_Event]
    malformed: list[_Line]
    files: list[_File]


def _amount(rng: random.Random, source: Source) -> int:
    if source is RADAR:
        return rng.randint(1, 5_000)
    if source is SATELLITE:
        return rng.randint(1_000, 9_999)
    amount = rng.randint(100, 250_000)
    return -amount if rng.random() < _REFUND_SHARE else amount


def _events(rng: random.Random, source: Source, times: Sequence[int]) -> list[_Event]:
    """Events at `times` (ascending), numbered in that order: `radar-000001`, ..."""
    return [
        _Event(
            f"{source.name}-{i + 1:06d}", source, rng.choice(source.keys), _amount(rng, source), t
        )
        for i, t in enumerate(times)
    ]


def _steady_times(
    rng: random.Random, start_ms: int, end_ms: int, gap: tuple[int, int]
) -> list[int]:
    times: list[int] = []
    t = start_ms + rng.randint(*gap)
    while t < end_ms:
        times.append(t)
        t += rng.randint(*gap)
    return times


def _pick(
    rng: random.Random,
    events: Sequence[_Event],
    candidates: Sequence[int],
    taken: list[int],
    spacing_ms: int,
) -> int:
    """A random candidate (index into `events`) whose event time is more than `spacing_ms`
    away from every taken one's."""
    times = [events[j].time_ms for j in taken]
    free = [i for i in candidates if all(abs(events[i].time_ms - t) > spacing_ms for t in times)]
    if not free:
        raise ValueError("duration is too short for this feed")
    choice = free[rng.randrange(len(free))]
    taken.append(choice)
    return choice


def _hold_back(rng: random.Random, events: list[_Event], start_ms: int, end_ms: int) -> None:
    """Two events held back 90-120 s and one a little beyond the source's bound, all arriving
    before the end, far apart in event time (the near one is then beyond for certain: the
    events of the next few gaps arrive on time, before it)."""
    source = events[0].source
    delays = [rng.randint(*_FAR_BEYOND) for _ in range(_FAR_BEYOND_PER_SOURCE)]
    delays.append(rng.randint(*_NEAR_BEYOND[source.name]))
    taken: list[int] = []
    for delay in delays:
        candidates = [
            i
            for i, e in enumerate(events)
            if start_ms + _WARMUP <= e.time_ms and e.time_ms + delay <= end_ms
        ]
        e = events[_pick(rng, events, candidates, taken, _SPACING[source.name])]
        e.arrival_ms = e.time_ms + delay
        e.beyond = True


def _copies(
    rng: random.Random, events: list[_Event], start_ms: int, later: tuple[int, int]
) -> tuple[list[_Event], list[_Line]]:
    """Duplicates of within-bound events, arriving `later` after the original."""
    candidates = [
        i for i, e in enumerate(events) if not e.beyond and e.time_ms >= start_ms + _WARMUP
    ]
    taken: list[int] = []
    chosen = sorted(
        _pick(rng, events, candidates, taken, _DUPLICATE_SPACING)
        for _ in range(_DUPLICATES_PER_SOURCE)
    )
    originals = [events[i] for i in chosen]
    lines = [_Line(e.text(), e.arrival_ms + rng.randint(*later), e, copy=True) for e in originals]
    return originals, lines


def _malformed(rng: random.Random, source: Source, start_ms: int, end_ms: int) -> list[_Line]:
    """The source's malformed lines, each of the reason it names, arriving within the span."""
    lines: list[_Line] = []
    for number, reason in enumerate(_MALFORMED[source.name], start=1):
        arrival = rng.randint(start_ms + _WARMUP, end_ms - 1)
        when = iso_ms(arrival - rng.randint(0, source.bound_ms))
        eid = f'"event_id":"bad-{source.name}-{number}"'
        key = f'"key":"{rng.choice(source.keys)}"'
        amount = rng.randint(100, 9_999)
        tail = f'"partition":{source.partition},"source":"{source.name}"'
        if reason == "invalid_json":  # cut short: no closing brace
            whole = f'{{{eid},{key},"amount":{amount},"event_time":"{when}",{tail}}}'
            text = whole[: rng.randrange(len(whole) // 3, len(whole) - 1)]
        elif reason == "empty_line":
            text = ""
        elif reason == "amount_not_integer":
            text = f'{{{eid},{key},"amount":{amount / 100:.2f},"event_time":"{when}",{tail}}}'
        elif reason == "missing_key":
            text = f'{{{eid},"amount":{amount},"event_time":"{when}",{tail}}}'
        elif reason == "bad_event_time":  # a local time without a zone
            text = f'{{{eid},{key},"amount":{amount},"event_time":"{when[:19]}",{tail}}}'
        else:  # missing_event_id
            text = f'{{{key},"amount":{amount},"event_time":"{when}",{tail}}}'
        lines.append(_Line(text, arrival, reason=reason))
    return lines


def _flushed(source: Source, lines: list[_Line], first_ms: int, every_ms: int) -> list[_File]:
    """Files flushed at `first_ms + k * every_ms`: each holds the lines that arrived since the
    previous flush (in arrival order; ties in the order given); empty files are not written."""
    by_flush: dict[int, list[_Line]] = {}
    for line in sorted(lines, key=lambda ln: ln.arrival_ms):
        k = 0 if line.arrival_ms < first_ms else (line.arrival_ms - first_ms) // every_ms + 1
        by_flush.setdefault(k, []).append(line)
    return [_File(source, first_ms + k * every_ms, chunk) for k, chunk in sorted(by_flush.items())]


def _steady_source(
    rng: random.Random,
    source: Source,
    start_ms: int,
    end_ms: int,
    gap: tuple[int, int],
    delay: tuple[int, int],
    duplicate_later: tuple[int, int],
    first_flush_ms: int,
    flush_every_ms: int,
) -> _Feed:
    """A source sending each event on its own after a random delay (radar, satellite)."""
    events = _events(rng, source, _steady_times(rng, start_ms, end_ms, gap))
    for e in events:
        e.arrival_ms = e.time_ms + rng.randint(*delay)
    _hold_back(rng, events, start_ms, end_ms)
    duplicated, copies = _copies(rng, events, start_ms, duplicate_later)
    malformed = _malformed(rng, source, start_ms, end_ms)
    lines = [_Line(e.text(), e.arrival_ms, e) for e in events] + copies + malformed
    files = _flushed(source, lines, first_flush_ms, flush_every_ms)
    return _Feed(events, duplicated, malformed, files)


def _poller(rng: random.Random, start_ms: int, end_ms: int, late: bool = False) -> _Feed:
    """Events fetched every 25-30 s, newest first, one file per page of 40 lines; `late`: the
    first poll comes 25-28 s after start instead of 1-2 s."""
    times: list[int] = []
    t = start_ms + rng.randint(*_POLLER_FIRST_EVENT)  # before the first poll: it is never empty
    while t < end_ms:
        times.append(t)
        t += int(rng.expovariate(1.0 / _POLLER_MEAN_GAP))
    events = _events(rng, POLLER, times)
    polls = [start_ms + rng.randint(*(_LATE_FIRST_POLL if late else _FIRST_POLL))]
    while polls[-1] < end_ms:
        polls.append(polls[-1] + rng.randint(*_POLL_EVERY))
    # Poll k returns the events of (polls[k-1], polls[k]].
    poll_of = [bisect.bisect_left(polls, e.time_ms) for e in events]
    last = len(polls) - 1
    taken: list[int] = []
    candidates = [
        i
        for i, e in enumerate(events)
        if e.time_ms >= start_ms + _WARMUP and 1 <= poll_of[i] <= last - max(_MISSED_BY_POLLS)
    ]
    for _ in range(_MISSED_EVENTS):  # missed by its poll, returned by a later one
        i = _pick(rng, events, candidates, taken, _SPACING[POLLER.name])
        poll_of[i] += rng.choice(_MISSED_BY_POLLS)
        events[i].beyond = True

    returned: list[list[tuple[_Event, bool]]] = [[] for _ in polls]
    for i, e in enumerate(events):
        returned[poll_of[i]].append((e, False))
    # A poll returns the previous poll's newest event again (an inclusive `since`).
    duplicated: list[_Event] = []

    def own(k: int) -> list[_Event]:
        return [e for e, copy in returned[k] if not copy and not e.beyond]

    with_events = [k for k in range(last) if own(k)]
    for k in sorted(rng.sample(with_events, _DUPLICATES_PER_SOURCE)):
        newest = max(own(k), key=lambda e: e.time_ms)
        returned[k + 1].append((newest, True))
        duplicated.append(newest)
    malformed = _malformed(rng, POLLER, start_ms, end_ms)
    malformed_in = [rng.randrange(len(polls)) for _ in malformed]

    files: list[_File] = []
    finished: list[_Line] = []
    for k, poll in enumerate(polls):
        newest_first = sorted(returned[k], key=lambda item: (-item[0].time_ms, item[0].event_id))
        page_items: list[tuple[_Event | None, bool, _Line | None]] = [
            (e, copy, None) for e, copy in newest_first
        ]
        for malformed_line, k_bad in zip(malformed, malformed_in, strict=True):
            if k_bad == k:
                where = rng.randrange(len(page_items) + 1)
                page_items.insert(where, (None, False, malformed_line))
        arrival = poll + rng.randint(*_PAGE_LATENCY)
        for first in range(0, len(page_items), _PAGE_LINES):
            if first:
                arrival += rng.randint(*_PAGE_GAP)
            page: list[_Line] = []
            for item, is_copy, bad in page_items[first : first + _PAGE_LINES]:
                if item is None:
                    assert bad is not None
                    page.append(_Line(bad.text, arrival, reason=bad.reason))
                    continue
                if not is_copy:
                    item.arrival_ms = arrival
                page.append(_Line(item.text(), arrival, item, copy=is_copy))
            files.append(_File(POLLER, arrival, page))
            finished.extend(page)
    placed = [line for line in finished if line.event is None]
    return _Feed(events, duplicated, placed, files)


def _in_arrival_order(feeds: Sequence[_Feed]) -> list[_File]:
    """Every file by arrival (mtime, then source); equal mtimes are pushed 1 ms apart so the
    stream's (mtime, name) order is the mtime order alone."""
    files = sorted(
        (f for feed in feeds for f in feed.files), key=lambda f: (f.mtime_ms, f.source.partition)
    )
    for before, after in itertools.pairwise(files):
        after.mtime_ms = max(after.mtime_ms, before.mtime_ms + 1)
    return files


def _disorder(files: Sequence[_File]) -> dict[str, int]:
    """Each original event's disorder (ms, 0 for an event that raises the high-water mark):
    its partition's high-water mark over earlier lines in arrival order minus its time."""
    high_water: dict[int, int] = {}
    out: dict[str, int] = {}
    for f in files:
        for line in f.lines:
            e = line.event
            if e is None:
                continue
            part = e.source.partition
            hw = high_water.get(part, e.time_ms)
            if not line.copy:
                out[e.event_id] = max(0, hw - e.time_ms)
            high_water[part] = max(hw, e.time_ms)
    return out


def _check_bounds(feeds: Sequence[_Feed], disorder: dict[str, int]) -> None:
    """The manifest's claim, checked: within the bound exactly except the listed events."""
    for feed in feeds:
        for e in feed.events:
            if (disorder[e.event_id] > e.source.bound_ms) != e.beyond:
                raise RuntimeError(
                    f"tally_tools.sources: {e.event_id} has disorder {disorder[e.event_id]} ms "
                    f"against a {e.source.bound_ms} ms bound (listed beyond: {e.beyond})"
                )


def _write_files(out: str, files: Sequence[_File]) -> None:
    for number, f in enumerate(files):
        path = os.path.join(out, f"arrival-{number:06d}.jsonl")
        with open(path, "w", encoding="utf-8", newline="\n") as fh:
            fh.write("".join(line.text + "\n" for line in f.lines))
        mtime_ns = f.mtime_ms * 1_000_000
        os.utime(path, ns=(mtime_ns, mtime_ns))


def _source_manifest(feed: _Feed, source: Source, disorder: dict[str, int]) -> dict[str, Any]:
    beyond = [e for e in feed.events if e.beyond]
    within = [disorder[e.event_id] for e in feed.events if not e.beyond]
    return {
        "partition": source.partition,
        "bound_ms": source.bound_ms,
        "keys": list(source.keys),
        "events": len(feed.events),
        "amount_total": sum(e.amount for e in feed.events),
        "max_disorder_ms": max(within, default=0),
        "beyond_bound": len(beyond),
        "beyond_bound_events": [
            {
                "event_id": e.event_id,
                "event_time": iso_ms(e.time_ms),
                "arrival": iso_ms(e.arrival_ms),
                "delay_ms": e.arrival_ms - e.time_ms,
                "disorder_ms": disorder[e.event_id],
            }
            for e in beyond
        ],
        "duplicates": len(feed.duplicated),
        "duplicate_event_ids": [e.event_id for e in feed.duplicated],
        "malformed_lines": len(feed.malformed),
        "files": len(feed.files),
    }


def generate(
    out: str, seed: int, start: datetime, duration_ms: int = 180_000, late_poller: bool = False
) -> dict[str, Any]:
    """Write the three-source feed into `out`; return the manifest (also `_manifest.json`).

    `late_poller`: the variant whose poller is first heard 25-28 s after start, when the
    other two sources have long been sending (docs/scenarios.md, "A source first heard late"):
    without `expected_partitions` its first poll's events, within its bound, are late.

    Event times are in ``[start, start + duration_ms)`` (at least `MIN_DURATION_MS`, 3 min);
    the last files arrive up to ~30 s later (the poller's final poll, the satellite's last
    delays). A naive `start` or a shorter span raises ValueError before anything is written."""
    if isinstance(duration_ms, bool) or not isinstance(duration_ms, int):
        raise ValueError(f"duration_ms must be an integer, got {duration_ms!r}")
    if duration_ms < MIN_DURATION_MS:
        raise ValueError(
            f"duration must be at least {format_duration(MIN_DURATION_MS)} for this feed, "
            f"got {format_duration(duration_ms)}"
        )
    start_ms = start_epoch_ms(start)
    end_ms = start_ms + duration_ms
    rng = random.Random(seed)
    # The sources draw from `rng` in this order; any reordering changes every file.
    radar = _steady_source(
        rng,
        RADAR,
        start_ms,
        end_ms,
        _RADAR_GAP,
        _RADAR_DELAY,
        _RADAR_RETRANSMIT,
        start_ms + _RADAR_FLUSH,
        _RADAR_FLUSH,
    )
    poller = _poller(rng, start_ms, end_ms, late_poller)
    satellite = _steady_source(
        rng,
        SATELLITE,
        start_ms,
        end_ms,
        _BEACON_GAP,
        _BEACON_DELAY,
        _SECOND_STATION,
        start_ms + _SATELLITE_FIRST_FLUSH,
        _SATELLITE_FLUSH,
    )
    feeds = (radar, poller, satellite)
    files = _in_arrival_order(feeds)
    disorder = _disorder(files)
    _check_bounds(feeds, disorder)

    remove_previous_output(out)
    _write_files(out, files)
    manifest = _manifest(seed, start_ms, duration_ms, feeds, files, disorder, late_poller)
    write_manifest(out, manifest, files[-1].mtime_ms)
    return manifest


def _manifest(
    seed: int,
    start_ms: int,
    duration_ms: int,
    feeds: Sequence[_Feed],
    files: Sequence[_File],
    disorder: dict[str, int],
    late_poller: bool,
) -> dict[str, Any]:
    events = [e for feed in feeds for e in feed.events]
    malformed = [line for feed in feeds for line in feed.malformed]
    by_reason: dict[str, int] = {}
    for line in malformed:
        assert line.reason is not None
        by_reason[line.reason] = by_reason.get(line.reason, 0) + 1
    duplicates = sum(len(feed.duplicated) for feed in feeds)
    return {
        "profile": PROFILE,
        "seed": seed,
        "start": iso_ms(start_ms),
        "duration_ms": duration_ms,
        "lateness_by_partition": LATENESS_BY_PARTITION,
        "late_poller": late_poller,
        # when each source was first heard: its first file's arrival
        "first_heard": {
            s.name: iso_ms(min(f.mtime_ms for f in files if f.source is s)) for s in SOURCES
        },
        "partitions": len(SOURCES),
        "events": len(events),
        "valid_events": len(events),
        "events_by_partition": {
            str(s.partition): len(feed.events) for s, feed in zip(SOURCES, feeds, strict=True)
        },
        "duplicates": duplicates,
        "malformed_lines": len(malformed),
        "malformed_by_reason": by_reason,
        "lines": len(events) + duplicates + len(malformed),
        "files": len(files),
        "amount_total": sum(e.amount for e in events),
        "first_event_time": iso_ms(min(e.time_ms for e in events)),
        "last_event_time": iso_ms(max(e.time_ms for e in events)),
        "first_arrival": iso_ms(files[0].mtime_ms),
        "last_arrival": iso_ms(files[-1].mtime_ms),
        "beyond_bound_event_ids": sorted(e.event_id for e in events if e.beyond),
        "duplicate_event_ids": sorted(e.event_id for feed in feeds for e in feed.duplicated),
        "sources": {
            s.name: _source_manifest(feed, s, disorder)
            for s, feed in zip(SOURCES, feeds, strict=True)
        },
    }
