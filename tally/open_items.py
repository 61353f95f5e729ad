"""Open items: a business date someone must act on, from the moment it needs a person until it
is accepted or resolved, and how old it is. Pure rules; `tally_app.signoffs` appends the rows
(`open_items`, append-only: a date's newest row is its item), the desk and `tally ledger` read
them.

An item opens when the nightly asks a person about a date (unexplained, validation failed),
or when a reconciled date changed after its run and waits for someone (reopened: flagged,
or re-run and awaiting sign-off);
each sign-off step moves it (prepared: the approvers must act; sent back, rejected, timed out:
it stays open with a new owner); it closes as `accepted` (a person accepted the date) or
`resolved` (a later run signed the date off by itself). Its age counts from when it opened,
in whole days, and an alert fires each time it passes another `aging_max`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

OPEN, ACCEPTED, RESOLVED = "open", "accepted", "resolved"
ITEM_STATUSES = (OPEN, ACCEPTED, RESOLVED)
# What keeps an item open (`kind`): the date's status when asked, or the last step.
KINDS = (
    "unexplained",
    "unexplained_warn",
    "validation_failed",
    "awaiting_approval",
    "sent_back",
    "rejected",
    "timed_out",
    "reopened",  # changed after its run: flagged, or re-run and awaiting sign-off
)
# The ledger's aging buckets: (label, smallest age in days, largest or None).
BUCKETS = (("0-1", 0, 1), ("2-7", 2, 7), ("8-30", 8, 30), (">30", 31, None))
DAY_MS = 86_400_000
# Who must act on a rejected date: the cause is fixed and the date re-run, then asked again.
OPERATORS = "operators (fix the cause, re-run the date)"


@dataclass(frozen=True)
class Step:
    """A sign-off step of a date, as `signoffs` records it (`decision` and who), with who
    must act next on each side (`preparers`, `approvers`: the settings' ids, or words)."""

    decision: str  # auto, accepted, rejected, timed_out, prepared, sent_back, ...; or asked
    by: str
    at: datetime
    reason: str = ""
    kind: str = ""  # for `asked`: the date's status
    step: str = "decide"  # decide, prepare or approve
    preparers: str = "any reviewer"
    approvers: str = "any other reviewer"
    run_time: datetime | None = None


ASKED = "asked"  # the nightly asked a person (`Step.decision`), before any answer


def item_after(previous: Mapping[str, Any] | None, step: Step) -> dict[str, Any] | None:
    """The date's item after `step` (None: no row to write: nothing opens or changes)."""
    if previous is None or previous.get("status") != OPEN:
        previous = None  # no item, or a closed one: the next to open is a new one
    if step.decision in ("auto", "self_approval_refused"):
        if step.decision == "auto" and previous is not None:
            return _row(previous, step, RESOLVED, resolution=step.reason or "signed off by itself")
        return None  # a date that signs itself off never opened; a refusal changes nothing
    if step.decision == "accepted":
        opened = previous or _opened(step, "unexplained", step.preparers)
        return _row(opened, step, ACCEPTED, resolution=step.reason, resolved_by=step.by)
    kind, owner = _open_state(step)
    if previous is None:
        return _opened(step, kind, owner)
    if (previous.get("kind"), previous.get("owner")) == (kind, owner):
        return None
    return _row(previous, step, OPEN, kind=kind, owner=owner)


def _open_state(step: Step) -> tuple[str, str]:
    """(kind, owner) of an item a step leaves open."""
    if step.decision == ASKED:
        return step.kind, step.preparers
    if step.decision == "prepared":
        return "awaiting_approval", step.approvers
    if step.decision == "timed_out":
        return "timed_out", step.approvers if step.step == "approve" else step.preparers
    if step.decision == "sent_back":
        return "sent_back", step.preparers
    if step.decision == "rejected":
        return "rejected", OPERATORS
    raise ValueError(f"open item: no rule for the decision {step.decision!r}")


def _opened(step: Step, kind: str, owner: str) -> dict[str, Any]:
    return {
        "status": OPEN,
        "kind": kind,
        "owner": owner,
        "opened_at": step.at,
        "changed_at": step.at,
        "resolution": None,
        "resolved_by": None,
        "alerted_periods": 0,
        "run_time": step.run_time,
    }


def _row(previous: Mapping[str, Any], step: Step, status: str, **changes: Any) -> dict[str, Any]:
    row = {k: previous.get(k) for k in ("kind", "owner", "opened_at", "alerted_periods")}
    row.update(
        status=status,
        changed_at=step.at,
        resolution=None,
        resolved_by=None,
        run_time=step.run_time or previous.get("run_time"),
    )
    row.update(changes)
    if status != OPEN:
        row["owner"] = None  # nobody must act any more
    return row


def latest_items(rows: Iterable[Mapping[str, Any]]) -> dict[date, dict[str, Any]]:
    """Per date, its newest `open_items` row (by when it changed)."""
    out: dict[date, dict[str, Any]] = {}
    for r in rows:
        day = r.get("business_date")
        if day is None:
            continue
        seen = out.get(day)
        if seen is None or r["changed_at"] >= seen["changed_at"]:
            out[day] = dict(r)
    return out


def age_days(opened_at: datetime, now: datetime) -> int:
    """Whole days an item has been open (0 on its first day)."""
    return max(0, int((now - opened_at).total_seconds() * 1000) // DAY_MS)


def bucket_of(age: int) -> str:
    """The aging bucket of an age in days (`BUCKETS`)."""
    for label, low, high in BUCKETS:
        if age >= low and (high is None or age <= high):
            return label
    raise ValueError(f"age: expected 0 days or more, got {age}")


def bucket_counts(items: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """How many open items each aging bucket holds (`age_days` already computed)."""
    counts = {label: 0 for label, _, _ in BUCKETS}
    for item in items:
        if item.get("status") == OPEN:
            counts[bucket_of(int(item["age_days"]))] += 1
    return counts


def periods_passed(age_ms: int, aging_max_ms: int) -> int:
    """How many whole `aging_max` periods an item has been open: its alert count so far."""
    return max(0, age_ms) // aging_max_ms


def due_alert(item: Mapping[str, Any], now: datetime, aging_max_ms: int) -> int | None:
    """The period an open item's aging alert is due for (it passed `aging_max` again since its
    last alert), or None."""
    if item.get("status") != OPEN:
        return None
    age_ms = int((now - item["opened_at"]).total_seconds() * 1000)
    periods = periods_passed(age_ms, aging_max_ms)
    return periods if periods > int(item.get("alerted_periods") or 0) else None
