"""A small, independent reimplementation of docs/semantics.md in plain Python.

Nothing here imports the speed layer (`streaming/*`) or tally's code: the model is written
from the spec alone, so the property tests can hold the Spark job to it. It is deliberately
naive (a dict of windows, a dict of remembered event ids with their window ends): exact, and
bounded only as far as the spec bounds it (the dedup horizon).

Dedup horizon (`Params.dedup_horizon_ms`, H): the id of every non-duplicate event is
remembered with its `window_end`; after each batch, ids with `window_end + allowed lateness +
H <= watermark_after` are forgotten (nothing while there is no watermark), and the drain
forgets every id. A repeat of a forgotten id is classified like a new event (normally `late`,
so it also lands in `late_events`). `dedup_horizon_ms=None` remembers every id until the
drain: the exact, unbounded dedup of the spec before the horizon.

Usage::

    model = ReferenceModel(Params(window_ms=60_000, lateness_ms=10_000))
    model.process([Line('{"event_id": ...}', "b0.jsonl", 1, 30_000)])   # batch 0
    model.process(...)                                                  # batch 1
    model.drain()
    model.aggregates, model.late_events, model.quarantine, model.events, model.progress

or `run_model(batches, params, drain=True)`.

Session windows (`Params.session_gap_ms`, D > 0; docs/semantics.md, "Session windows"): an
event's span `[t, t + D)` is its one window for classification, late rows and the dedup horizon.
`windows` then holds the open sessions, keyed `(start, end, key, currency)`. After each batch
the spans of the counted events and the open sessions of each key and currency are merged
(sorted by (start, end), an interval starts a new session when its start is at or past every
earlier end): a merged session with exactly the bounds of one open session is that session; any
other is new, takes the largest revision it absorbed, and each absorbed session that had rows
gets a retraction row (`retracted=True`, final, its own bounds and last totals, the next
revision); a new session that retracted something emits at once (early if it cannot close yet).
A session stays open while `end + G + D > watermark_after`. `current()` rebuilds the current
sets from the rows (highest revision per identity, retracted ones dropped).

Adaptive lateness (`Params.lateness_auto`; docs/semantics.md, "Adaptive lateness"): each
valid event of a partition that had a high-water mark before the batch is measured, its delay
`max(0, F − t)`, F the largest high-water mark of any partition before the batch, put in the
bucket of the first edge at or above it (edges 0, then round(10 · 2^(k/4)) ms for k = 0, 1,
... up to the first at or past a day; past the last: an overflow bucket). A partition's counts
are kept per slot of 10 s of its own event time: the slot of its high-water mark after the
batch that measured them; a slot counts while the partition's mark is in it or in one of the
5 slots after it. Its bound: with no counts, its `lateness_by_partition` bound or else
`min_ms`; with fewer than `min_history` events ever measured, the edge of its largest counted
delay (clamped to [min_ms, max_ms]) but at least that start bound; otherwise the first edge
whose cumulative count is at least `target_pct` % of the total (the overflow bucket:
`max_ms`), clamped to [min_ms, max_ms]. The bound feeds the watermark rule like a
per-partition bound.

Interpretations where the spec leaves room (kept narrow; the tests avoid these corners):
* "blank" means only ASCII whitespace; a JSON `null` value counts as a missing field;
* `event_id`/`key` that are JSON scalars other than strings are taken as their JSON text;
* ISO times: `YYYY-MM-DD`, `T` (or a space), `hh:mm[:ss[.fraction]]`, zone `Z` or `±hh:mm`;
  fractions below a millisecond are floored; epoch-ms integers must fit in 64 bits;
* `partition` must fit the table's 32-bit INT column;
* the arrival clock reads the mtimes of the batch's *lines*: a batch without lines (or an
  empty file) keeps the previous processing time (0 before the first).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from fractions import Fraction
from typing import Any, NamedTuple

ON_TIME, ALLOWED_LATE, LATE, DUPLICATE = "on_time", "allowed_late", "late", "duplicate"
STATUSES = (ON_TIME, ALLOWED_LATE, LATE, DUPLICATE)
COUNTED = (ON_TIME, ALLOWED_LATE)

REASONS = (
    "empty_line",
    "invalid_json",
    "duplicate_field",
    "missing_event_id",
    "missing_key",
    "missing_amount",
    "amount_not_integer",
    "missing_event_time",
    "bad_event_time",
    "partition_not_integer",
    "bad_currency",
)
KNOWN_FIELDS = ("event_id", "key", "amount", "event_time", "partition", "currency")
# The currency of an event that names none (the setting default_currency's default).
DEFAULT_CURRENCY = "USD"


@functools.cache
def current_currencies() -> frozenset[str]:
    """The codes the contract accepts, from the spec (docs/semantics.md): ISO 4217 codes CLDR
    lists as in use today in some territory, but CNH (no ISO code), XTS and XXX."""
    from babel.core import get_global

    return frozenset(
        code
        for spans in get_global("territory_currencies").values()
        for code, _start, end, _tender in spans
        if end is None
    ) - {"CNH", "XTS", "XXX"}


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

INT64 = (-(2**63), 2**63 - 1)
# Event times the contract accepts: years 0001 to 9999, UTC.
EVENT_TIME_MIN_MS = (datetime(1, 1, 1, tzinfo=UTC) - EPOCH) // timedelta(milliseconds=1)
EVENT_TIME_MAX_MS = (datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC) - EPOCH) // timedelta(
    milliseconds=1
)
INT32 = (-(2**31), 2**31 - 1)

POLICIES = ("partition-min", "global-max")


# -- inputs ---------------------------------------------------------------------------------
class Line(NamedTuple):
    raw: str
    source_file: str
    source_line: int  # 1-based
    source_mtime_ms: int


@dataclass(frozen=True)
class AutoLateness:
    """`lateness = "auto"`: the completeness target (percent) and the clamp."""

    target_pct: float
    min_ms: int
    max_ms: int
    min_history: int = 1000


def _auto_edges() -> tuple[int, ...]:
    edges, k = [0], 0
    while edges[-1] < 86_400_000:
        edges.append(round(10 * 2 ** (k / 4)))
        k += 1
    return tuple(edges)


AUTO_EDGES = _auto_edges()
AUTO_SLOT_MS = 10_000
AUTO_SLOTS = 6


@dataclass(frozen=True)
class Params:
    window_ms: int
    lateness_ms: int
    allowed_lateness_ms: int = 0
    idle_timeout_ms: int = 60_000
    max_clock_skew_ms: int = 300_000
    policy: str = "partition-min"
    dedup_horizon_ms: int | None = None  # None: ids are never forgotten (until the drain)
    # Hopping windows: size window_ms sliding by this (None: tumbling, the slide is the size)
    window_slide_ms: int | None = None
    # Early results: changed open windows emitted (final = False) at most this often (0: off)
    early_firing_interval_ms: int = 0
    # Source watermarks: lines with this field and no event_id are control records (None: off)
    source_watermark_field: str | None = None
    # L_p for the partitions whose bound is not `lateness_ms` (per-source lateness)
    lateness_by_partition: Mapping[int, int] = field(default_factory=dict)
    # Session windows: each event spans [t, t + D) and a key's spans merge into sessions
    # (0: off, fixed windows). Excludes window_slide_ms.
    session_gap_ms: int = 0
    # Expected partitions: no watermark while one of these has reported nothing (unless it
    # has been unheard for the idle timeout)
    expected_partitions: frozenset[int] = frozenset()
    # Adaptive lateness: each partition's bound follows its delays (None: the fixed bounds)
    lateness_auto: AutoLateness | None = None

    @property
    def sessions(self) -> bool:
        return self.session_gap_ms > 0

    @property
    def slide(self) -> int:
        return self.window_slide_ms or self.window_ms

    def windows_of(self, event_time_ms: int) -> list[tuple[int, int]]:
        """Every window holding the time, ascending: [k*H, k*H + S) for each k with
        k*H <= t < k*H + S (spelled out, not the production arithmetic). With sessions, the
        event's span [t, t + D): its one window until the merge."""
        if self.sessions:
            return [(event_time_ms, event_time_ms + self.session_gap_ms)]
        size, slide = self.window_ms, self.slide
        last = event_time_ms - event_time_ms % slide  # floor modulo: pre-1970 times too
        starts = [s for s in range(last - size + slide, last + 1, slide) if s <= event_time_ms]
        return [(s, s + size) for s in starts if event_time_ms < s + size]

    def status_for(self, end: int, wm_before: int | None) -> str:
        """The status rule for one window end."""
        if wm_before is None or end > wm_before:
            return ON_TIME
        if end + self.allowed_lateness_ms > wm_before:
            return ALLOWED_LATE
        return LATE

    def lateness_of(self, partition: int) -> int:
        return self.lateness_by_partition.get(partition, self.lateness_ms)

    def __post_init__(self) -> None:
        if self.window_ms <= 0:
            raise ValueError("window_ms must be positive")
        if self.slide <= 0 or self.window_ms % self.slide:
            raise ValueError("window_ms must be a positive multiple of window_slide_ms")
        if self.dedup_horizon_ms is not None and self.dedup_horizon_ms < 0:
            raise ValueError("dedup_horizon_ms must be >= 0")
        if self.policy not in POLICIES:
            raise ValueError(f"unknown policy {self.policy!r}")
        if self.session_gap_ms < 0:
            raise ValueError("session_gap_ms must be >= 0")
        if self.session_gap_ms and self.window_slide_ms:
            raise ValueError("session_gap_ms and window_slide_ms: pick one window kind")


# -- outputs (plain tuples, comparable with what the Spark tables hold) ----------------------
class EventRow(NamedTuple):
    event_id: str
    key: str
    amount: int
    event_time_ms: int
    partition: int
    extra: tuple[tuple[str, str | None], ...]  # sorted (name, text) pairs
    arrival_status: str
    clock_skewed: bool
    source_file: str
    source_line: int
    batch_id: int
    currency: str = DEFAULT_CURRENCY


class QuarantineRow(NamedTuple):
    raw_line: str
    reason: str
    source_file: str
    source_line: int
    batch_id: int


class LateRow(NamedTuple):
    event_id: str
    key: str
    amount: int
    event_time_ms: int
    partition: int
    window_start_ms: int
    window_end_ms: int
    watermark_at_arrival_ms: int
    lateness_ms: int
    arrival_delay_ms: int
    reason: str
    source_file: str
    source_line: int
    batch_id: int
    currency: str = DEFAULT_CURRENCY


# A window's (or session's) identity: (start ms, end ms, key, currency).
Ident = tuple[int, int, str, str]


class AggregateRow(NamedTuple):
    window_start_ms: int
    window_end_ms: int
    key: str
    event_count: int
    amount_sum: int
    revision: int
    emit_time_ms: int
    watermark_at_emit_ms: int | None  # None: emitted by the drain (end of input)
    batch_id: int
    final: bool = True  # False: an early, speculative row of a window still open
    retracted: bool = False  # True: withdraws a session a new session absorbed (sessions)
    currency: str = DEFAULT_CURRENCY  # part of the window's identity (never summed across)


class ProgressRow(NamedTuple):
    batch_id: int
    now_ms: int
    watermark_before_ms: int | None
    watermark_after_ms: int | None  # None: no watermark yet, or the drain batch
    high_water: tuple[tuple[int, int], ...]  # sorted (partition, ms)
    last_seen: tuple[tuple[int, int], ...]
    idle: tuple[tuple[int, bool], ...]
    regression_ms: int | None  # candidate below the kept watermark by this much (ignored)
    input_lines: int
    valid_events: int
    on_time_events: int
    allowed_late_events: int
    late_events: int
    duplicate_events: int
    quarantined_lines: int
    clock_skewed_events: int
    windows_emitted: int
    open_windows: int
    drained: bool
    control_records: int = 0
    source_watermark: tuple[tuple[int, int], ...] = ()  # sorted (partition, ms)
    unheard: tuple[tuple[int, int], ...] = ()  # expected, not heard: (partition, since ms)
    # partitions with control records in the batch: how many fell below the partition's
    # source watermark before them, and (where any did) the largest gap
    source_regressions: tuple[tuple[int, int], ...] = ()
    source_regression_ms: tuple[tuple[int, int], ...] = ()
    # the lateness bound in force per known partition (fixed or auto), sorted (partition, ms)
    lateness: tuple[tuple[int, int], ...] = ()
    # per UTC event date (ISO text), the batch's non-duplicate events and their amount:
    # sorted (date, events, amount)
    new_by_date: tuple[tuple[str, int, int], ...] = ()


def _new_by_date(
    p: Params, valid: list[tuple[Parsed, Line, str]]
) -> tuple[tuple[str, int, int], ...]:
    """Per UTC date on which one of an event's windows can start (its windows' starts; for a
    session, the event time back to two gaps before it), the non-duplicate events and their
    amount."""
    out: dict[str, tuple[int, int]] = {}
    for parsed, _line, status in valid:
        if status == DUPLICATE:
            continue
        t = parsed.event_time_ms
        if p.sessions:
            lo, hi = t - 2 * p.session_gap_ms, t
        else:
            starts = [start for start, _end in p.windows_of(t)]
            lo, hi = min(starts), max(starts)
        day = datetime.fromtimestamp(lo / 1000, UTC).date()
        last = datetime.fromtimestamp(hi / 1000, UTC).date()
        while day <= last:
            events, amount = out.get(day.isoformat(), (0, 0))
            out[day.isoformat()] = (events + 1, amount + parsed.amount)
            day += timedelta(days=1)
    return tuple((day, n, a) for day, (n, a) in sorted(out.items()))


class DrainedError(RuntimeError):
    """A drained stream refuses further input."""


# -- validation -----------------------------------------------------------------------------
_ISO = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?"
    r"(Z|([+-])(\d{2}):(\d{2}))$",
    re.ASCII,  # ASCII digits only
)
_ASCII_SPACE = " \t\r\n\f\v"


class Parsed(NamedTuple):
    event_id: str
    key: str
    amount: int
    event_time_ms: int
    partition: int
    extra: tuple[tuple[str, str | None], ...]
    currency: str = DEFAULT_CURRENCY


def iso_to_ms(text: str) -> int | None:
    """Epoch ms of an ISO-8601 time with a zone, or None if it has none or does not parse."""
    m = _ISO.match(text)
    if not m:
        return None
    year, month, day, hh, mi, ss, frac, zone, sign, zh, zm = m.groups()
    try:
        if zone == "Z":
            tz = UTC
        else:
            if int(zm) > 59:
                return None
            offset = timedelta(hours=int(zh), minutes=int(zm))
            tz = timezone(-offset if sign == "-" else offset)
        value = datetime(int(year), int(month), int(day), int(hh), int(mi), int(ss or 0), tzinfo=tz)
    except ValueError:
        return None
    millis = int((frac or "").ljust(3, "0")[:3])
    return (value - EPOCH) // timedelta(milliseconds=1) + millis


def _text(value: Any) -> str:
    """A field's text: strings as they are, anything else as its compact JSON."""
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def _is_int(value: Any, bounds: tuple[int, int]) -> bool:
    return (
        isinstance(value, int) and not isinstance(value, bool) and bounds[0] <= value <= bounds[1]
    )


def _reject_constant(name: str) -> Any:
    raise ValueError(f"not JSON: {name}")


class _Fields(dict):  # type: ignore[type-arg]
    """A JSON object that remembers whether it named a field twice."""

    def __init__(self, pairs: list[tuple[str, Any]]):
        super().__init__(pairs)
        self.named_twice = len(self) < len(pairs)


def load_object(raw: str) -> dict[str, Any] | str:
    """The line's one JSON object, or the reason it is none: `invalid_json` (not JSON, not an
    object, or more after it), `duplicate_field` (a top-level name used twice)."""
    try:
        obj = json.loads(raw, parse_constant=_reject_constant, object_pairs_hook=_Fields)
    except ValueError:  # includes text after the object ("Extra data")
        return "invalid_json"
    if not isinstance(obj, dict):
        return "invalid_json"
    if isinstance(obj, _Fields) and obj.named_twice:
        return "duplicate_field"
    return obj


def parse_line(
    raw: str, default_currency: str = DEFAULT_CURRENCY
) -> tuple[Parsed | None, str | None]:
    """(event, None) for a valid line, (None, first matching reason) otherwise."""
    if raw.strip(_ASCII_SPACE) == "":
        return None, "empty_line"
    obj = load_object(raw)
    if isinstance(obj, str):
        return None, obj

    def present(name: str) -> bool:
        return obj.get(name) is not None

    if not present("event_id") or _text(obj["event_id"]).strip(_ASCII_SPACE) == "":
        return None, "missing_event_id"
    if not present("key") or _text(obj["key"]).strip(_ASCII_SPACE) == "":
        return None, "missing_key"
    if not present("amount"):
        return None, "missing_amount"
    if not _is_int(obj["amount"], INT64):
        return None, "amount_not_integer"
    if not present("event_time"):
        return None, "missing_event_time"
    when = obj["event_time"]
    event_ms: int | None
    if _is_int(when, INT64):
        event_ms = when
    elif isinstance(when, str):
        event_ms = iso_to_ms(when)
    else:
        event_ms = None
    # The contract's years 0001-9999 (UTC); beyond them even an integer is no event time.
    if event_ms is None or not EVENT_TIME_MIN_MS <= event_ms <= EVENT_TIME_MAX_MS:
        return None, "bad_event_time"
    partition = obj.get("partition")
    if partition is None:
        partition = 0
    elif not _is_int(partition, INT32):
        return None, "partition_not_integer"
    # a current ISO 4217 code as CLDR lists it (the codes are data, not a rule: tally's list)
    currency = obj.get("currency")
    if currency is None:
        currency = default_currency
    elif not isinstance(currency, str) or currency not in current_currencies():
        return None, "bad_currency"
    extra = tuple(
        sorted(
            (name, None if value is None else _text(value))
            for name, value in obj.items()
            if name not in KNOWN_FIELDS
        )
    )
    return (
        Parsed(
            _text(obj["event_id"]),
            _text(obj["key"]),
            obj["amount"],
            event_ms,
            partition,
            extra,
            currency,
        ),
        None,
    )


def parse_control(raw: str, field: str) -> tuple[tuple[int, int] | None, str | None] | None:
    """None when the line is no control record (a JSON object with `field` and no
    `event_id`); else ((partition, watermark ms), None), or (None, reason) when it is a
    control record the contract refuses."""
    obj = load_object(raw)
    if isinstance(obj, str) or obj.get(field) is None or obj.get("event_id") is not None:
        return None
    partition = obj.get("partition")
    if partition is None:
        partition = 0
    elif not _is_int(partition, INT32):
        return None, "partition_not_integer"
    value = obj[field]
    ms = value if _is_int(value, INT64) else iso_to_ms(value) if isinstance(value, str) else None
    if ms is None or not EVENT_TIME_MIN_MS <= ms <= EVENT_TIME_MAX_MS:
        return None, "bad_watermark"
    return (partition, ms), None


# -- windows --------------------------------------------------------------------------------
def window_of(event_time_ms: int, window_ms: int) -> tuple[int, int]:
    """`[start, end)` holding the time; Python's % is floor modulo, as the spec asks."""
    start = event_time_ms - event_time_ms % window_ms
    return start, start + window_ms


@dataclass
class _Window:
    count: int = 0
    total: int = 0
    emitted_revision: int = 0
    finalized: bool = False  # a final row was emitted
    pending: bool = False  # changed since its last row (early firings)
    last_emit_ms: int | None = None  # processing time of its last row


# -- the model ------------------------------------------------------------------------------
@dataclass
class ReferenceModel:
    params: Params
    batch_id: int = 0
    now_ms: int | None = None
    watermark_ms: int | None = None
    high_water: dict[int, int] = field(default_factory=dict)
    last_seen: dict[int, int] = field(default_factory=dict)
    source_watermark: dict[int, int] = field(default_factory=dict)
    unheard_since: dict[int, int] = field(default_factory=dict)
    # lateness auto: partition -> slot (of its event time) -> bucket -> events, and events
    # measured ever
    delay_slots: dict[int, dict[int, dict[int, int]]] = field(default_factory=dict)
    delays_measured: dict[int, int] = field(default_factory=dict)
    # The remembered ids of non-duplicate events -> their window_end (the dedup horizon).
    seen_ids: dict[str, int] = field(default_factory=dict)
    windows: dict[Ident, _Window] = field(default_factory=dict)
    drained: bool = False
    events: list[EventRow] = field(default_factory=list)
    quarantine: list[QuarantineRow] = field(default_factory=list)
    late_events: list[LateRow] = field(default_factory=list)
    aggregates: list[AggregateRow] = field(default_factory=list)
    progress: list[ProgressRow] = field(default_factory=list)

    def process(self, lines: Iterable[Line], now_ms: int | None = None) -> ProgressRow:
        """One micro-batch. `now_ms` None: the arrival clock (newest line mtime)."""
        if self.drained:
            raise DrainedError("the stream was drained; it refuses further input")
        p = self.params
        batch = self.batch_id
        ordered = sorted(lines, key=lambda ln: (ln.source_mtime_ms, ln.source_file, ln.source_line))
        if now_ms is None:
            if ordered:
                now_ms = max(ln.source_mtime_ms for ln in ordered)
            else:
                now_ms = self.now_ms if self.now_ms is not None else 0
        now = now_ms if self.now_ms is None else max(now_ms, self.now_ms)
        wm_before = self.watermark_ms
        skew_limit = now + p.max_clock_skew_ms

        # Validation and classification, in arrival order.
        valid: list[tuple[Parsed, Line, str]] = []
        controls: list[tuple[int, int]] = []  # (partition, watermark ms)
        for line in ordered:
            control = (
                parse_control(line.raw, p.source_watermark_field)
                if p.source_watermark_field
                else None
            )
            if control is not None:
                mark, reason = control
                if mark is not None:
                    controls.append(mark)
                    continue
                assert reason is not None
                self.quarantine.append(
                    QuarantineRow(line.raw, reason, line.source_file, line.source_line, batch)
                )
                continue
            parsed, reason = parse_line(line.raw)
            if parsed is None:
                assert reason is not None
                self.quarantine.append(
                    QuarantineRow(line.raw, reason, line.source_file, line.source_line, batch)
                )
                continue
            if parsed.event_id in self.seen_ids:
                status = DUPLICATE
            else:
                # An event's status is its best window's: the last one, which ends last.
                _, end = p.windows_of(parsed.event_time_ms)[-1]
                self.seen_ids[parsed.event_id] = end
                status = p.status_for(end, wm_before)
            valid.append((parsed, line, status))
            self.events.append(
                EventRow(
                    parsed.event_id,
                    parsed.key,
                    parsed.amount,
                    parsed.event_time_ms,
                    parsed.partition,
                    parsed.extra,
                    status,
                    parsed.event_time_ms > skew_limit,
                    line.source_file,
                    line.source_line,
                    batch,
                    parsed.currency,
                )
            )

        # Watermark.
        batch_max: dict[int, int] = {}
        for parsed, _, _ in valid:
            batch_max[parsed.partition] = max(
                batch_max.get(parsed.partition, parsed.event_time_ms), parsed.event_time_ms
            )
        measured: dict[int, dict[int, int]] = {}
        if p.lateness_auto is not None:  # measured against the front before the batch
            measured = self._measure_delays([v for v, _, _ in valid])
        for part, top in batch_max.items():
            clipped = min(top, skew_limit)
            self.high_water[part] = max(self.high_water.get(part, clipped), clipped)
            self.last_seen[part] = now
        self._fold_delays(measured)
        regressions: dict[int, int] = {}
        regression_gap: dict[int, int] = {}
        for part, mark in controls:  # a source watermark never moves back; clipped like hw
            clipped = min(mark, skew_limit)
            kept = self.source_watermark.get(part)
            regressions.setdefault(part, 0)
            if kept is not None and clipped < kept:  # the source broke its promise
                regressions[part] += 1
                regression_gap[part] = max(regression_gap.get(part, 0), kept - clipped)
            self.source_watermark[part] = max(self.source_watermark.get(part, clipped), clipped)
            self.last_seen[part] = now
        # An expected partition that never reported has no bound yet: no minimum exists
        # until it reports, or until it has been unheard for the idle timeout.
        self.unheard_since = {
            part: self.unheard_since.get(part, now)
            for part in sorted(p.expected_partitions)
            if part not in self.last_seen
        }
        idle = {
            part: p.idle_timeout_ms > 0 and now - since >= p.idle_timeout_ms
            for part, since in {**self.last_seen, **self.unheard_since}.items()
        }
        # Each partition bounds the watermark by its high-water mark minus its own lateness,
        # or by its source's watermark when that is further.
        lateness = {part: p.lateness_of(part) for part in self.high_water}
        if p.lateness_auto is not None:
            lateness = {part: self._auto_bound(part) for part in self.high_water}
        bound = {part: hw - lateness[part] for part, hw in self.high_water.items()}
        for part, mark in self.source_watermark.items():
            bound[part] = max(mark, bound.get(part, mark))
        candidate: int | None
        if p.policy == "partition-min":
            active = [b for part, b in bound.items() if not idle[part]]
            candidate = min(active) if active else None
        else:
            candidate = max(bound.values()) if bound else None
        if any(not idle[part] for part in self.unheard_since):
            candidate = None
        regression = None
        wm_after = wm_before
        if candidate is not None:
            if wm_before is not None and candidate < wm_before:
                regression = wm_before - candidate
            else:
                wm_after = candidate

        # Windows: fold, emit, evict.
        changed: set[Ident] = set()
        # sessions: ((key, currency), start, end, amount)
        spans: list[tuple[tuple[str, str], int, int, int]] = []
        for parsed, line, event_status in valid:
            if event_status == DUPLICATE:
                continue
            for start, end in p.windows_of(parsed.event_time_ms):
                status = p.status_for(end, wm_before)  # each window judged on its own
                if status in COUNTED and p.sessions:
                    spans.append(((parsed.key, parsed.currency), start, end, parsed.amount))
                    continue
                if status in COUNTED:
                    ident = (start, end, parsed.key, parsed.currency)
                    win = self.windows.setdefault(ident, _Window())
                    win.count += 1
                    win.total += parsed.amount
                    changed.add(ident)
                    continue
                assert wm_before is not None and status == LATE
                self.late_events.append(
                    LateRow(
                        parsed.event_id,
                        parsed.key,
                        parsed.amount,
                        parsed.event_time_ms,
                        parsed.partition,
                        start,
                        end,
                        wm_before,
                        wm_before - end,
                        now - parsed.event_time_ms,
                        "window_closed"
                        if p.allowed_lateness_ms == 0
                        else "beyond_allowed_lateness",
                        line.source_file,
                        line.source_line,
                        batch,
                        parsed.currency,
                    )
                )
        retractions: list[tuple[Ident, _Window]] = []
        forced: set[Ident] = set()
        if p.sessions:
            changed, retractions, forced = self._merge_sessions(spans)
        emitted = self._emit_and_evict(wm_after, now, batch, changed, retractions, forced)
        self._forget(wm_after)
        self.watermark_ms = wm_after
        self.now_ms = now
        counts = {s: sum(1 for _, _, st in valid if st == s) for s in STATUSES}
        row = ProgressRow(
            batch_id=batch,
            now_ms=now,
            watermark_before_ms=wm_before,
            watermark_after_ms=wm_after,
            high_water=tuple(sorted(self.high_water.items())),
            last_seen=tuple(sorted(self.last_seen.items())),
            idle=tuple(sorted(idle.items())),
            regression_ms=regression,
            input_lines=len(ordered),
            valid_events=len(valid),
            on_time_events=counts[ON_TIME],
            allowed_late_events=counts[ALLOWED_LATE],
            late_events=counts[LATE],
            duplicate_events=counts[DUPLICATE],
            quarantined_lines=len(ordered) - len(valid) - len(controls),
            clock_skewed_events=sum(1 for v, _, _ in valid if v.event_time_ms > skew_limit),
            windows_emitted=emitted,
            open_windows=len(self.windows),
            drained=False,
            control_records=len(controls),
            source_watermark=tuple(sorted(self.source_watermark.items())),
            unheard=tuple(sorted(self.unheard_since.items())),
            source_regressions=tuple(sorted(regressions.items())),
            source_regression_ms=tuple(sorted(regression_gap.items())),
            lateness=tuple(sorted(lateness.items())),
            new_by_date=_new_by_date(p, valid),
        )
        self.progress.append(row)
        self.batch_id += 1
        return row

    def _measure_delays(self, valid: list[Parsed]) -> dict[int, dict[int, int]]:
        """The batch's delay counts (partition -> bucket -> events), behind the front before it."""
        counts: dict[int, dict[int, int]] = {}
        if not self.high_water:
            return counts
        front = max(self.high_water.values())
        for event in valid:
            if event.partition not in self.high_water:
                continue  # no mark before the batch: no delay
            delay = max(0, front - event.event_time_ms)
            bucket = next((i for i, e in enumerate(AUTO_EDGES) if e >= delay), len(AUTO_EDGES))
            per = counts.setdefault(event.partition, {})
            per[bucket] = per.get(bucket, 0) + 1
        return counts

    def _fold_delays(self, counts: dict[int, dict[int, int]]) -> None:
        """Add the counts to the slot of each partition's mark after the batch; drop the slots
        that left its horizon."""
        for part, per in counts.items():
            slot = self.high_water[part] // AUTO_SLOT_MS
            slots = self.delay_slots.setdefault(part, {})
            for old in [s for s in slots if s <= slot - AUTO_SLOTS]:
                del slots[old]
            into = slots.setdefault(slot, {})
            for bucket, n in per.items():
                into[bucket] = into.get(bucket, 0) + n
            self.delays_measured[part] = self.delays_measured.get(part, 0) + sum(per.values())

    def _auto_bound(self, part: int) -> int:
        auto = self.params.lateness_auto
        assert auto is not None
        start = self.params.lateness_by_partition.get(part, auto.min_ms)
        counts: dict[int, int] = {}
        for per in self.delay_slots.get(part, {}).values():
            for bucket, n in per.items():
                counts[bucket] = counts.get(bucket, 0) + n
        if not counts:
            return start
        few = self.delays_measured.get(part, 0) < auto.min_history
        total = sum(counts.values())
        target = Fraction(100) if few else Fraction(repr(float(auto.target_pct)))
        cumulative = 0
        chosen = auto.max_ms
        for bucket, edge in enumerate(AUTO_EDGES):
            cumulative += counts.get(bucket, 0)
            if Fraction(100 * cumulative, total) >= target:
                chosen = edge
                break
        clamped = min(max(chosen, auto.min_ms), auto.max_ms)
        return max(clamped, start) if few else clamped

    def _merge_sessions(
        self, spans: list[tuple[tuple[str, str], int, int, int]]
    ) -> tuple[
        set[Ident],
        list[tuple[Ident, _Window]],
        set[Ident],
    ]:
        """Merge the batch's counted spans with the open sessions, per key and currency.
        Returns (the sessions that changed, the absorbed sessions that had rows (to
        retract), the new sessions that absorbed one of those)."""
        changed: set[Ident] = set()
        retractions: list[tuple[Ident, _Window]] = []
        forced: set[Ident] = set()
        keys = {(i[2], i[3]) for i in self.windows} | {owner for owner, _, _, _ in spans}
        for key, currency in sorted(keys):
            # (start, end, open session or None for a span, amount of a span)
            items: list[tuple[int, int, Ident | None, int]] = [
                (ident[0], ident[1], ident, 0)
                for ident in self.windows
                if (ident[2], ident[3]) == (key, currency)
            ]
            items += [
                (start, end, None, amount)
                for owner, start, end, amount in spans
                if owner == (key, currency)
            ]
            items.sort(key=lambda item: (item[0], item[1]))
            groups: list[list[tuple[int, int, Ident | None, int]]] = []
            reach: int | None = None  # the largest end of every interval so far
            for item in items:
                if reach is None or item[0] >= reach:
                    groups.append([])
                groups[-1].append(item)
                reach = item[1] if reach is None else max(reach, item[1])
            for group in groups:
                start = min(item[0] for item in group)
                end = max(item[1] for item in group)
                ident = (start, end, key, currency)
                pieces = [item[2] for item in group if item[2] is not None]
                added = [item[3] for item in group if item[2] is None]
                if pieces == [ident]:  # the open session itself, perhaps grown
                    win = self.windows[ident]
                    win.count += len(added)
                    win.total += sum(added)
                    if added:
                        changed.add(ident)
                    continue
                olds = [(piece, self.windows.pop(piece)) for piece in pieces]
                win = _Window(
                    count=sum(old.count for _, old in olds) + len(added),
                    total=sum(old.total for _, old in olds) + sum(added),
                    emitted_revision=max((old.emitted_revision for _, old in olds), default=0),
                )
                self.windows[ident] = win
                changed.add(ident)
                gone = [(piece, old) for piece, old in olds if old.emitted_revision > 0]
                retractions += gone
                if gone:
                    forced.add(ident)
        return changed, retractions, forced

    def _emit_and_evict(
        self,
        wm_after: int | None,
        now: int,
        batch: int,
        changed: set[Ident],
        retractions: Sequence[tuple[Ident, _Window]] = (),
        forced: set[Ident] | None = None,
        drain: bool = False,
    ) -> int:
        """Emit closed windows (and, with early firings, changed open ones), evict those that
        can no longer change. The drain closes and evicts every window and emits with no
        watermark (`watermark_at_emit_ms` None).

        Sessions: `retractions` (absorbed sessions that had rows) get their retraction rows,
        and the new sessions in `forced` emit even when the early rule would not (early if
        still open). A session stays open one gap longer than a window."""
        interval = self.params.early_firing_interval_ms
        emit_watermark = None if drain else wm_after
        emitted = 0
        for (start, end, key, currency), old in sorted(retractions, key=lambda r: r[0]):
            emitted += 1
            self.aggregates.append(
                AggregateRow(
                    start,
                    end,
                    key,
                    old.count,
                    old.total,
                    old.emitted_revision + 1,
                    now,
                    emit_watermark,
                    batch,
                    True,
                    True,
                    currency,
                )
            )
        for ident in sorted(self.windows):
            start, end, key, currency = ident
            win = self.windows[ident]
            closed = drain or (wm_after is not None and end <= wm_after)
            dirty = ident in changed or win.pending
            final = closed and (not win.finalized or ident in changed)
            early = (
                interval > 0
                and not drain
                and not closed
                and dirty
                and (win.last_emit_ms is None or now - win.last_emit_ms >= interval)
            ) or (not closed and forced is not None and ident in forced)
            win.pending = dirty and not (final or early)
            if final or early:
                win.emitted_revision += 1
                win.finalized = win.finalized or final
                win.last_emit_ms = now
                emitted += 1
                self.aggregates.append(
                    AggregateRow(
                        start,
                        end,
                        key,
                        win.count,
                        win.total,
                        win.emitted_revision,
                        now,
                        emit_watermark,
                        batch,
                        final,
                        False,
                        currency,
                    )
                )
        # A window stays while it can change (end + G > WM); a session one gap longer.
        slack = self.params.allowed_lateness_ms + self.params.session_gap_ms
        for ident in [
            i for i in self.windows if drain or (wm_after is not None and i[1] + slack <= wm_after)
        ]:
            del self.windows[ident]
        return emitted

    def _forget(self, wm_after: int | None) -> None:
        """The dedup horizon: forget the ids with `window_end + G + H <= wm_after` (none
        without a watermark, or with no horizon)."""
        horizon = self.params.dedup_horizon_ms
        if horizon is None or wm_after is None:
            return
        keep = self.params.allowed_lateness_ms + horizon
        self.seen_ids = {i: end for i, end in self.seen_ids.items() if end + keep > wm_after}

    def drain(self) -> ProgressRow | None:
        """End of input: one more batch that closes every window (as if the watermark were
        +infinity) and stores no watermark: `watermark_after_ms` None, `drained` True. None if
        nothing ran."""
        if self.drained:
            return None
        if self.batch_id == 0:
            return None
        batch = self.batch_id
        now = self.now_ms if self.now_ms is not None else 0
        wm_before = self.watermark_ms
        emitted = self._emit_and_evict(None, now, batch, set(), drain=True)
        assert not self.windows
        self.seen_ids.clear()  # the end of input forgets every id
        self.watermark_ms = None  # no watermark after the end of input; it refuses input
        self.drained = True
        row = ProgressRow(
            batch_id=batch,
            now_ms=now,
            watermark_before_ms=wm_before,
            watermark_after_ms=None,
            high_water=tuple(sorted(self.high_water.items())),
            last_seen=tuple(sorted(self.last_seen.items())),
            idle=(),
            regression_ms=None,
            input_lines=0,
            valid_events=0,
            on_time_events=0,
            allowed_late_events=0,
            late_events=0,
            duplicate_events=0,
            quarantined_lines=0,
            clock_skewed_events=0,
            windows_emitted=emitted,
            open_windows=0,
            drained=True,
            source_watermark=tuple(sorted(self.source_watermark.items())),
            unheard=tuple(sorted(self.unheard_since.items())),
        )
        self.progress.append(row)
        self.batch_id += 1
        return row

    # -- views ----------------------------------------------------------------------------
    def current(self, final_only: bool = False) -> dict[Ident, AggregateRow]:
        """The current windows (or sessions) rebuilt from the rows: the highest revision per
        (start, end, key, currency) (of the final rows only, if asked), dropped when it is a
        retraction."""
        return current_set(self.aggregates, final_only)

    def answer(self) -> dict[Ident, AggregateRow]:
        """The stream's answer per window (or session): its highest final revision, minus the
        retracted sessions."""
        return self.current(final_only=True)


def current_set(
    rows: Iterable[AggregateRow], final_only: bool = False
) -> dict[Ident, AggregateRow]:
    """Highest revision per (start, end, key, currency) of `rows` (final rows only, if
    asked), without the identities whose highest row is a retraction."""
    best: dict[Ident, AggregateRow] = {}
    for row in rows:
        if final_only and not row.final:
            continue
        ident = (row.window_start_ms, row.window_end_ms, row.key, row.currency)
        if ident not in best or row.revision > best[ident].revision:
            best[ident] = row
    return {ident: row for ident, row in best.items() if not row.retracted}


class Batch(NamedTuple):
    lines: Sequence[Line]
    now_ms: int | None = None  # None: the arrival clock (newest mtime among the lines)


def run_model(
    batches: Iterable[Batch | Sequence[Line]], params: Params, drain: bool = False
) -> ReferenceModel:
    model = ReferenceModel(params)
    for batch in batches:
        if isinstance(batch, Batch):
            model.process(batch.lines, batch.now_ms)
        else:
            model.process(batch)
    if drain:
        model.drain()
    return model


def sorted_items(mapping: Mapping[Any, Any]) -> tuple[tuple[Any, Any], ...]:
    return tuple(sorted(mapping.items()))
