"""The ledger of business dates and one date's detail, from the tables' rows (pure logic).

A date's status, first match wins: `reopened` (the stream committed first arrivals for it
after its latest run, `tally.restatements.reopened`: computed when asked, until a new run
settles it), `unexplained` (a residual the late side output does not explain, graded `fail`
by the materiality tolerances, or by a run from before them), `unexplained_warn` (graded
`warn`), `validation_failed` (a critical expectation failed), `within_tolerance` (a residual
graded `ok`), `explained_by_copies`, `explained_by_late` (a gap, all of it late events),
`balanced`, or `not_run` (events but no reconciliation yet). A person signs off exactly the
`unexplained`, `unexplained_warn` and `validation_failed` dates (`needs_person`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from tally.dates import parse_business_date
from tally.money import CurrencyError, check_currency, format_money, recorded_currency
from tally.open_items import OPEN, age_days, bucket_counts, bucket_of
from tally.tolerances import OK, SEVERITIES, WARN

STATUSES = (
    "balanced",
    "explained_by_late",
    "explained_by_copies",
    "unexplained",
    "validation_failed",
    "not_run",
    "reopened",
    "within_tolerance",
    "unexplained_warn",
)
STATUS_LABELS = {
    "reopened": "reopened (changed after its run)",
    "balanced": "balanced",
    "explained_by_late": "explained by late events",
    "explained_by_copies": "explained by copies the stream counted",
    "unexplained": "unexplained",
    "validation_failed": "validation failed",
    "not_run": "not yet run",
    "within_tolerance": "unexplained, within the materiality tolerance",
    "unexplained_warn": "unexplained, above a warn limit",
}
# The statuses a person signs off (the others sign themselves off).
NEEDS_PERSON = ("unexplained", "unexplained_warn", "validation_failed")
# What a sign-off request says such a date has (beside `STATUS_LABELS`).
NEEDS_PERSON_TEXT = {
    "unexplained": "an UNEXPLAINED gap",
    "unexplained_warn": "an UNEXPLAINED gap above a materiality warn limit",
    "validation_failed": "a failed critical expectation",
}
# A date's stream, batch and gap totals, as `reconciliation_summary` names them: the ledger's,
# the desk's and the run's recorded figures (batch.reconcile.FIGURES) all start from these.
TOTALS = (
    "stream_count",
    "stream_amount",
    "batch_count",
    "batch_amount",
    "gap_count",
    "gap_amount",
)
SUMMARY_COLUMNS = (
    "business_date",
    *TOTALS,
    "explained_amount",
    "unexplained_windows",
    "unexplained_amount",
    "late_event_rate",
    "copies_count",
    # what the date's status follows (`status_of`), and whose amounts these are
    "severity",
    "tolerance_rule",
    "currency",
)
# What the desk shows of a date's `reconciliation_copies` (the evidence of EXPLAINED_BY_COPIES),
# and at most how many of its rows (the page says how many there are).
COPY_COLUMNS = (
    "window_start",
    "key",
    "event_id",
    "amount",
    "currency",
    "event_time",
    "arrival_status",
    "ingest_time",
    "source_file",
    "source_line",
    "first_event_date",
    "first_event_time",
    "first_key",
    "first_amount",
    "first_currency",
    "first_ingest_time",
    "first_source_file",
    "first_source_line",
)
COPIES_SHOWN = 100
RUN_COLUMNS = (
    "business_date",
    "run_time",
    "balanced",
    # what places a run for the restatement signal (`tally.restatements.reopened`)
    "pin_frontiers",
    "window_ms",
    "report_timezone",
    "settings",
)
RESTATEMENT_COLUMNS = (
    "business_date",
    "detected_at",
    "run_time",
    "events_frontier",
    "new_events",
    "new_amount",
    "windows_affected",
    "status",
    "rerun_time",
    "reason",
)
SIGNOFF_COLUMNS = (
    "business_date",
    "decision",
    "decided_by",
    "decided_at",
    "reason",
    "status",
    "run_time",
    "dag_id",
    "run_id",
    "tier",
    "step",
    "proposed",
    "prepared_by",
    "approved_by",
)
# The status whose dates need two people under `signoff_two_person = fail`: an unexplained
# gap graded fail (any, without materiality tolerance rules).
MATERIAL_STATUS = "unexplained"
MAX_PAGE_SIZE = 200
# At most how many worst keys a date over several currencies names (as the summary's rows).
WORST_KEYS_SHOWN = 5
_EARLIEST = datetime.min.replace(tzinfo=UTC)


def when(value: Any) -> datetime:
    """A timestamp for ordering (missing ones first)."""
    return value if isinstance(value, datetime) else _EARLIEST


@dataclass(frozen=True)
class LedgerQuery:
    """The ledger's filters and page; `parse` validates what a request sends."""

    status: str | None = None
    date_from: date | None = None
    date_to: date | None = None
    page: int = 1
    page_size: int = 50
    # only dates with an open item open this many days or more (0: every open item)
    older_than: int | None = None

    @classmethod
    def parse(
        cls,
        status: str | None = None,
        date_from: str | None = None,
        date_to: str | None = None,
        page: int | str = 1,
        page_size: int | str = 50,
        older_than: int | str | None = None,
    ) -> LedgerQuery:
        """Raises ValueError (one line) on a bad filter."""
        days = None
        if older_than not in (None, ""):
            try:
                days = int(older_than)  # type: ignore[arg-type]
            except ValueError:
                raise ValueError(
                    f"older_than: expected a number of days, got {older_than!r}"
                ) from None
            if days < 0:
                raise ValueError(f"older_than: expected 0 days or more, got {days}")
        status = status or None
        if status is not None and status not in STATUSES:
            raise ValueError(f"status: expected one of {', '.join(STATUSES)}, got {status!r}")
        first = parse_business_date(date_from) if date_from else None
        last = parse_business_date(date_to) if date_to else None
        if first and last and first > last:
            raise ValueError(f"date range: from {first} is after to {last}")
        page, page_size = parse_page(page, page_size, MAX_PAGE_SIZE)
        return cls(status, first, last, page, page_size, days)


def parse_page(page: int | str, page_size: int | str, largest: int) -> tuple[int, int]:
    """A request's page (from 1) and page size (1..`largest`); ValueError (one line) else."""
    try:
        page, page_size = int(page), int(page_size)
    except (TypeError, ValueError):
        raise ValueError("page, page_size: expected integers") from None
    if page < 1 or not 1 <= page_size <= largest:
        raise ValueError(f"page: expected >= 1; page_size: expected 1..{largest}")
    return page, page_size


def date_rollup(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """A date's figures from its `reconciliation_summary` rows, one per currency (None: no
    rows). Counts are summed; each amount is the date's only when it has one currency, None
    with several (two currencies are never added: each row is in `by_currency`, by currency);
    the late-event rate is over all events, the largest lateness the largest; the severity
    is the worst row's, with its rule (None when a row is from before tolerances); worst keys
    are the one currency's, else each key with its currency in parentheses."""
    if not rows:
        return None
    rows = sorted(rows, key=lambda r: str(r.get("currency") or ""))
    one = len(rows) == 1
    out: dict[str, Any] = {}
    for column, value in rows[0].items():
        values = [r.get(column) for r in rows]
        if column.endswith("_amount"):
            out[column] = value if one else None
        elif isinstance(value, int) and not isinstance(value, bool):
            out[column] = sum(v or 0 for v in values)
        else:
            out[column] = value
    if not one:  # over every currency's events (a row read without `late_events`: its rate's)
        late = sum(_late_events(r) for r in rows)
        batch = sum(r.get("batch_count") or 0 for r in rows)
        out["late_event_rate"] = late / batch if batch else None
    lateness = [r["max_lateness_ms"] for r in rows if r.get("max_lateness_ms") is not None]
    out["max_lateness_ms"] = max(lateness, default=None)
    if not one:
        out["worst_keys"] = [
            f"{k} ({r.get('currency')})" for r in rows for k in (r.get("worst_keys") or [])
        ][:WORST_KEYS_SHOWN]
    severities = [r.get("severity") for r in rows]
    if None in severities:
        out["severity"] = out["tolerance_rule"] = None
    else:
        worst = max(rows, key=lambda r: SEVERITIES.index(r["severity"]))
        out["severity"], out["tolerance_rule"] = worst["severity"], worst.get("tolerance_rule")
    out["currency"] = rows[0].get("currency") if one else None
    out["currencies"] = [r.get("currency") for r in rows]
    out["by_currency"] = [dict(r) for r in rows]
    return out


def _late_events(row: Mapping[str, Any]) -> float:
    """A summary row's late events: the figure, or (a row read without it, as the desk reads
    them) its late-event rate times its batch events."""
    if row.get("late_events") is not None:
        return float(row["late_events"])
    return float(row.get("late_event_rate") or 0.0) * (row.get("batch_count") or 0)


def _any(summary: Mapping[str, Any], column: str) -> bool:
    """Whether the figure is nonzero on the date, or on any of its currencies."""
    rows = summary.get("by_currency") or [summary]
    return bool(summary.get(column)) or any(r.get(column) for r in rows)


def status_of(summary: Mapping[str, Any] | None, validation_failed: bool) -> str:
    """A reconciled date's status (the module docstring) from its summary's figures and
    severity (`date_rollup` of `reconciliation_summary`, or the nightly's reaggregate result)
    and whether a critical expectation failed."""
    if summary is None:
        return "not_run"
    unexplained = (summary.get("unexplained_windows") or 0) > 0 or _any(
        summary, "unexplained_amount"
    )
    severity = summary.get("severity")  # null: a run from before tolerances (any residual fails)
    if unexplained and severity not in (OK, WARN):
        return "unexplained"
    if unexplained and severity == WARN:
        return "unexplained_warn"
    if validation_failed:
        return "validation_failed"
    if unexplained:
        return "within_tolerance"
    if summary.get("copies_count"):  # the stream counted copies of earlier events
        return "explained_by_copies"
    if summary.get("gap_count") or _any(summary, "gap_amount"):
        return "explained_by_late"
    return "balanced"


def needs_person(status: str) -> bool:
    """Whether a date of this status waits for a person's sign-off."""
    return status in NEEDS_PERSON


def signoff_tier(status: str, two_person: str) -> int:
    """How many people sign a date of this status off: 0 (it signs itself off), 1, or 2 (a
    material gap under `signoff_two_person = fail`: one prepares, another approves)."""
    if not needs_person(status):
        return 0
    return 2 if two_person == "fail" and status == MATERIAL_STATUS else 1


def decision_words(signoff: Mapping[str, Any]) -> tuple[str, str]:
    """A `signoffs` row as a person reads it: (the decision, who and what follows), e.g.
    ("accepted", "by ana, approved by ben") or ("prepared", "by ana (proposes accepted):
    awaiting approval")."""
    decision = str(signoff.get("decision"))
    who = signoff.get("decided_by") or "nobody"
    if decision == "prepared":
        return decision, f"by {who} (proposes {signoff.get('proposed')}): awaiting approval"
    if decision == "sent_back":
        return decision, f"by {who} (prepared by {signoff.get('prepared_by')}): to prepare again"
    if decision == "self_approval_refused":
        return decision, f"{who} may not approve what {who} prepared: awaiting approval"
    approved = signoff.get("approved_by")
    if approved and signoff.get("prepared_by"):
        return decision, f"by {signoff['prepared_by']}, approved by {approved}"
    return decision, f"by {who}"


def _iso(value: Any) -> Any:
    return value.isoformat() if isinstance(value, date | datetime) else value


def latest_signoffs(rows: Iterable[Mapping[str, Any]]) -> dict[date, dict[str, Any]]:
    """Per date, its newest decision."""
    out: dict[date, dict[str, Any]] = {}
    for r in rows:
        day = r["business_date"]
        if day is None:
            continue
        seen = out.get(day)
        if seen is None or when(r["decided_at"]) >= when(seen["decided_at"]):
            out[day] = dict(r)
    return out


def failed_critical_dates(rows: Iterable[Mapping[str, Any]]) -> set[date]:
    return {
        r["business_date"]
        for r in rows
        if r.get("severity") == "critical" and r.get("success") is False
    }


def ledger_rows(
    summaries: Sequence[Mapping[str, Any]],
    runs: Sequence[Mapping[str, Any]],
    validation: Sequence[Mapping[str, Any]],
    signoffs: Sequence[Mapping[str, Any]],
    event_dates: Sequence[date],
    restated: Mapping[date, Mapping[str, Any]] | None = None,
    items: Mapping[date, Mapping[str, Any]] | None = None,
    now: datetime | None = None,
) -> list[dict[str, Any]]:
    """Every known business date, newest first, with its status, totals and sign-off.
    `restated`: the reopened dates (`tally.restatements.reopened`) and what they gained;
    `items`: each date's open item (`tally.open_items.latest_items`), aged at `now`."""
    per_date: dict[date, list[Mapping[str, Any]]] = {}
    for r in summaries:
        per_date.setdefault(r["business_date"], []).append(r)
    by_date = {day: date_rollup(rows) for day, rows in per_date.items()}
    last_run = {r["business_date"]: r.get("run_time") for r in runs}
    currency = {r["business_date"]: run_currency(r) for r in runs}
    failed = failed_critical_dates(validation)
    decisions = latest_signoffs(signoffs)
    restated = restated or {}
    days = sorted(set(by_date) | set(last_run) | set(event_dates), reverse=True)
    out = []
    for day in days:
        s = by_date.get(day)
        signoff = decisions.get(day)
        change = restated.get(day)
        row: dict[str, Any] = {
            "business_date": day.isoformat(),
            "status": "reopened" if change else status_of(s, day in failed),
            "last_run": _iso(last_run.get(day)),
            # the currency of the date's amounts (its summary's; rows from before currencies:
            # its latest run's); None: never run, or several (each in `by_currency`)
            "currency": _currency_of(s, currency.get(day)),
            "by_currency": _by_currency(s, currency.get(day)),
            "signoff": _signoff_of(signoff, last_run.get(day)),
            "reopened": None if not change else {k: _iso(v) for k, v in change.items()},
            "open_item": item_view((items or {}).get(day), now),
        }
        for column in SUMMARY_COLUMNS[1:]:
            if column != "currency":  # the date's (above)
                row[column] = None if s is None else s.get(column)
        out.append(row)
    return out


def _currency_of(rollup: Mapping[str, Any] | None, run: str | None) -> str | None:
    if rollup is None or len(rollup["currencies"]) == 1:
        # one currency: the summary's, else (a row from before currencies) the run's
        return (rollup or {}).get("currency") or run
    return None


def _by_currency(rollup: Mapping[str, Any] | None, run: str | None) -> list[dict[str, Any]]:
    """Each currency's amounts of the date (`SUMMARY_COLUMNS`' amounts), by currency."""
    if rollup is None:
        return []
    return [
        {
            "currency": r.get("currency") or run,
            **{c: r.get(c) for c in SUMMARY_COLUMNS if c.endswith("_amount")},
        }
        for r in rollup["by_currency"]
    ]


def change_text(change: Mapping[str, Any], currency: str | None, separator: str = ", ") -> str:
    """What a reopened date gained (`reopened` of a ledger row) as a person reads it: its
    events and its amount in the date's `currency` ("+3 events, +$12.34"). A date in several
    currencies (None) shows events only: the stream's count adds its currencies' amounts, and
    a checked change keeps only the largest of them."""
    events = f"{change['events']:+,} events"
    amount = change.get("amount")
    if currency is None or amount is None:
        return events
    sign = "+" if amount >= 0 else ""
    return f"{events}{separator}{sign}{format_money(int(amount), currency)}"


def _signoff_of(signoff: Mapping[str, Any] | None, last_run: Any) -> dict[str, Any] | None:
    """The date's newest decision, `superseded` when it names a run older than the date's
    latest (a date re-run after its sign-off, a restatement: awaiting sign-off again)."""
    if signoff is None:
        return None
    run = signoff.get("run_time")
    older = run is not None and last_run is not None and when(run) < when(last_run)
    return {**{k: _iso(v) for k, v in signoff.items()}, "superseded": older}


def item_view(item: Mapping[str, Any] | None, now: datetime | None) -> dict[str, Any] | None:
    """A date's open item as the ledger shows it: its row with its age in days and aging
    bucket at `now` (None: the date has none)."""
    if item is None or now is None:
        return None
    age = age_days(item["opened_at"], now)
    return {
        **{k: _iso(v) for k, v in item.items() if k != "business_date"},
        "age_days": age,
        "bucket": bucket_of(age),
    }


def _aged(r: Mapping[str, Any], older_than: int | None) -> bool:
    """Whether the row passes the `older_than` filter (an open item that old, or no filter)."""
    if older_than is None:
        return True
    item = r.get("open_item")
    return item is not None and item["status"] == OPEN and item["age_days"] >= older_than


def matching(rows: Sequence[dict[str, Any]], query: LedgerQuery) -> list[dict[str, Any]]:
    """The ledger's rows the query's filters keep (status, dates, age), in their order."""

    def keep(r: Mapping[str, Any]) -> bool:
        day = date.fromisoformat(r["business_date"])
        return (
            _aged(r, query.older_than)
            and (query.status is None or r["status"] == query.status)
            and (query.date_from is None or day >= query.date_from)
            and (query.date_to is None or day <= query.date_to)
        )

    return [r for r in rows if keep(r)]


def select_page(rows: Sequence[dict[str, Any]], query: LedgerQuery) -> dict[str, Any]:
    """The query's page of the (newest first) ledger, with the total that matched."""
    matched = matching(rows, query)
    start = (query.page - 1) * query.page_size
    return {
        # every open item of the ledger by age, whatever the filters
        "aging": bucket_counts([r["open_item"] for r in rows if r.get("open_item")]),
        "total": len(matched),
        "page": query.page,
        "page_size": query.page_size,
        "dates": matched[start : start + query.page_size],
    }


def _settings_of(run: Mapping[str, Any]) -> Any:
    """The settings the run recorded: the JSON object, or the text as it is if it is none."""
    settings: Any = run.get("settings")
    with contextlib.suppress(ValueError):
        settings = json.loads(settings) if isinstance(settings, str) else settings
    return settings


def run_currency(run: Mapping[str, Any]) -> str | None:
    """The currency of a run's amounts (`tally.money.recorded_currency`); None when what the
    run recorded is no currency code (its amounts are then shown as minor units, not a
    page that fails)."""
    settings = _settings_of(run)
    try:
        return check_currency(recorded_currency(settings if isinstance(settings, Mapping) else {}))
    except CurrencyError:
        return None


def provenance(run: Mapping[str, Any] | None) -> dict[str, Any]:
    """The pinned versions and settings of the date's reconciliation run."""
    if run is None:
        return {}
    settings = _settings_of(run)
    keys = (
        "run_time",
        "events_version",
        "stream_aggregates_version",
        "late_events_version",
        "window_ms",
        "report_timezone",
    )
    return {**{k: _iso(run.get(k)) for k in keys}, "settings": settings}


def plain_rows(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{k: _iso(v) for k, v in r.items()} for r in rows]
