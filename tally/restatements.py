"""Restatements: a reconciled date that gained first arrivals after its run (pure logic).

A run of date D read the event log up to its batch frontier (`reconciliation_runs.
pin_frontiers['events']`, `tally.pins`). Each micro-batch records, per business date whose
windows can hold them (`tally.dates.counted_dates`, in the stream's `report_timezone`), its
events that are not duplicates and their amount (`stream_progress.new_events_by_date`,
`new_amount_by_date`). D's **signal** is their sum for D over the micro-batches above D's
**baseline** (the frontier of its latest run, raised by every later check of that run).
Zero: nothing that could change D arrived. Non-zero: the check recomputes D exactly
(`batch.restatements`), because an event the stream no longer remembers (beyond its dedup
horizon) is not a duplicate to it and may be one to the nightly. The result is a `Change`
and, with the policy, a status.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from tally.frontier import Frontier, is_within, merged

PENDING = "pending"  # flagged, nobody has re-run it (policy flag)
AUTO_ACCEPTED = "auto_accepted"  # re-run and signed off: within the tolerance
RERUN = "rerun"  # re-run, awaiting sign-off again: beyond the tolerance
ACCEPTED = "accepted"
REJECTED = "rejected"
UNCHANGED = "unchanged"  # checked: the signal held no new first arrival (no restatement)
STATUSES = (PENDING, AUTO_ACCEPTED, RERUN, ACCEPTED, REJECTED, UNCHANGED)


@dataclass(frozen=True)
class Change:
    """What the date's first arrivals gained since the run: events, amount (minor units) and
    (window, key) totals that differ."""

    events: int
    amount: int
    windows: int

    @property
    def changed(self) -> bool:
        return bool(self.events or self.amount or self.windows)

    def describe(self) -> str:
        return f"{self.events:+,} events, {self.amount:+,} amount, {self.windows:,} windows"


def baseline(run_frontier: Mapping[str, int], checked: Iterable[Mapping[str, int]]) -> Frontier:
    """The frontier a date's signal counts from: its latest run's, raised by each check of
    that run (what they saw is recorded, changed or not)."""
    out = dict(run_frontier)
    for frontier in checked:
        out = merged(out, frontier)
    return out


def signal(
    progress: Iterable[Mapping[str, Any]],
    frontier: Mapping[str, int],
    business_date: date,
    report_timezone: str,
) -> tuple[int, int]:
    """(events, amount) the micro-batches above `frontier` added, not as duplicates, to the
    date's windows: rows with `app_id`, `batch_id`, `new_events_by_date`,
    `new_amount_by_date` (business date -> int) and their `report_timezone`. A row keyed in
    another zone counts the dates around (any day there overlaps at most those three); a row
    from before the signal has no maps: nothing."""
    around = {business_date + timedelta(days=d) for d in (-1, 0, 1)}
    events = amount = 0
    for row in progress:
        app, batch = row.get("app_id"), row.get("batch_id")
        if not isinstance(batch, int) or is_within(str(app or ""), batch, frontier):
            continue
        days = {business_date} if row.get("report_timezone") == report_timezone else around
        counts = as_mapping(row.get("new_events_by_date"))
        amounts = as_mapping(row.get("new_amount_by_date"))
        for day, n in counts.items():
            if day in days:
                events += int(n)
                amount += int(amounts.get(day) or 0)
    return events, amount


def decide(change: Change, policy: str, tolerance: tuple[int, int]) -> str:
    """The status a checked change gets: `unchanged` (no restatement); under policy `flag`,
    `pending`; under `rerun`, `auto_accepted` within the tolerance (events, amount: absolute
    values at most these), else `rerun`."""
    if not change.changed:
        return UNCHANGED
    if policy == "flag":
        return PENDING
    within = abs(change.events) <= tolerance[0] and abs(change.amount) <= tolerance[1]
    return AUTO_ACCEPTED if within else RERUN


def run_frontier(run: Mapping[str, Any]) -> Frontier | None:
    """The events frontier a `reconciliation_runs` row recorded (None: a run from before
    frontiers, which the signal cannot place)."""
    events = as_mapping(run.get("pin_frontiers")).get("events")
    if events is None:
        return None
    return {str(a): int(b) for a, b in as_mapping(events).items()}


def as_mapping(value: Any) -> Mapping[Any, Any]:
    """A MAP value as Spark reads it (a dict) or as Arrow does (a list of pairs); None: {}."""
    if value is None:
        return {}
    return value if isinstance(value, Mapping) else dict(value)


@dataclass(frozen=True)
class OpenRun:
    """A date's latest run as the signal sees it: its baseline, its zone, and the newest
    `restatements` row of that run if it is still `pending` (None otherwise)."""

    business_date: date
    baseline: Frontier
    report_timezone: str
    pending: Mapping[str, Any] | None


def open_run(
    run: Mapping[str, Any],
    rows: Iterable[Mapping[str, Any]],
    swept: Iterable[Mapping[str, Any]] = (),
) -> OpenRun | None:
    """The date's latest run `run` with its `restatements` rows `rows` and its
    `restatement_sweep` rows `swept` (of the date); None: a run from before frontiers (no
    signal). A sweep row of the same run raises the baseline as a check's row does: the
    full check found no signal for the run up to its frontier."""
    frontier = run_frontier(run)
    if frontier is None:
        return None
    own = sorted(
        (r for r in rows if _same_time(r.get("run_time"), run.get("run_time"))),
        key=lambda r: _sortable(r.get("detected_at")),
    )
    seen = [*own, *(r for r in swept if _same_time(r.get("run_time"), run.get("run_time")))]
    checked = [
        {str(a): int(b) for a, b in as_mapping(r.get("events_frontier")).items()} for r in seen
    ]
    pending = own[-1] if own and own[-1].get("status") == PENDING else None
    zone = str(run.get("report_timezone") or "UTC")
    return OpenRun(run["business_date"], baseline(frontier, checked), zone, pending)


def reopened_change(opened: OpenRun, signalled: tuple[int, int]) -> dict[str, Any] | None:
    """What the ledger shows of a reopened date (None: not reopened): the pending
    restatement's checked change, else the stream's `signalled` (events, amount) when
    non-zero (`verified` false: not checked yet)."""
    if opened.pending is not None:
        last = opened.pending
        return {
            "events": last.get("new_events"),
            "amount": last.get("new_amount"),
            "windows": last.get("windows_affected"),
            "verified": True,
            "detected_at": last.get("detected_at"),
        }
    events, amount = signalled
    if not events and not amount:
        return None
    return {"events": events, "amount": amount, "windows": None, "verified": False}


def reopened(
    run: Mapping[str, Any],
    rows: Iterable[Mapping[str, Any]],
    progress: Iterable[Mapping[str, Any]],
    swept: Iterable[Mapping[str, Any]] = (),
) -> dict[str, Any] | None:
    """Whether a date whose latest run is `run` is reopened, computed when asked: the newest
    `restatements` row of that run says pending, or the stream's signal above the baseline
    is non-zero (not checked yet: `verified` false). `rows`: the date's `restatements` rows;
    `progress`: `stream_progress` rows (at least those above the baseline); `swept`: the
    date's `restatement_sweep` rows. None: not reopened (or a run from before frontiers). The
    desk computes the signal of every date at once (`tally.ledger_reads`, the same rule over
    Arrow columns)."""
    opened = open_run(run, rows, swept)
    if opened is None:
        return None
    counted = signal(progress, opened.baseline, opened.business_date, opened.report_timezone)
    return reopened_change(opened, counted)


def _sortable(value: Any) -> float:
    return value.timestamp() if isinstance(value, datetime) else float("-inf")


def _same_time(a: Any, b: Any) -> bool:
    return isinstance(a, datetime) and isinstance(b, datetime) and a.timestamp() == b.timestamp()
