"""A window's page in the desk (`/tally/dates/DAY/windows/START?key=K&currency=C`): which
window a request names, and what the page shows of its `reconciliation` row and its
`reconciliation_evidence` rows. Pure: the desk reads the rows (tally.ledger_reads) and renders
(tally_desk.pages).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any
from urllib.parse import quote, urlencode

from tally.dates import parse_business_date
from tally.ledger import parse_page
from tally.money import CurrencyError, check_currency
from tally.outputs import csv_safe_cell

EVENT, LATE, REVISION = "event", "late", "revision"
KINDS = (EVENT, LATE, REVISION)
# What each kind of evidence row shows (`reconciliation_evidence` columns), in order.
KIND_COLUMNS = {
    EVENT: (
        "rank",
        "event_id",
        "event_time",
        "amount",
        "arrival_status",
        "counted",
        "partition",
        "batch_id",
        "source_file",
        "source_line",
        "ingest_time",
        "app_id",
    ),
    LATE: (
        "rank",
        "event_id",
        "event_time",
        "amount",
        "lateness_ms",
        "first_arrival",
        "partition",
        "batch_id",
        "source_file",
        "source_line",
        "ingest_time",
    ),
    REVISION: (
        "rank",
        "stream_window_start",
        "stream_window_end",
        "revision",
        "event_count",
        "amount_sum",
        "final",
        "retracted",
        "emit_time",
        "watermark_at_emit",
        "batch_id",
        "app_id",
    ),
}
# The window's figures the page shows, from its `reconciliation` row.
FIGURES = (
    "batch_count",
    "stream_count",
    "late_count",
    "copies_count",
    "residual_count",
    "batch_amount",
    "stream_amount",
    "late_amount",
    "copies_amount",
    "residual_amount",
)
MAX_PAGE_SIZE = 500
# The windows the nightly keeps evidence of (`batch.evidence.unexplained_windows`).
WITH_EVIDENCE = "UNEXPLAINED"


@dataclass(frozen=True)
class WindowRef:
    """One window of a business date: its start (UTC), key and currency."""

    business_date: date
    start: datetime
    key: str
    currency: str

    @classmethod
    def parse(cls, day: str, start: str, key: str | None, currency: str | None) -> WindowRef:
        """Raises ValueError (one line) on a bad date, start, key or currency."""
        business_date = parse_business_date(day)
        try:
            moment = datetime.fromisoformat(start.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(
                f"window start: expected an ISO time like 2026-11-20T10:15:00Z, got {start!r}"
            ) from None
        if moment.tzinfo is None:
            raise ValueError(f"window start: needs a time zone (Z for UTC), got {start!r}")
        if not key:
            raise ValueError("key: required (the window's key)")
        try:
            code = check_currency(currency or "")
        except CurrencyError as exc:
            raise ValueError(f"currency: {exc}") from None
        return cls(business_date, moment.astimezone(UTC), key, code)

    def start_text(self) -> str:
        return self.start.strftime("%Y-%m-%dT%H:%M:%S") + _fraction(self.start) + "Z"

    def path(self, suffix: str = "", **query: Any) -> str:
        """The window's page relative to the desk's prefix (`suffix`: e.g. `/evidence.csv`)."""
        params = {"key": self.key, "currency": self.currency, **query}
        return (
            f"dates/{self.business_date.isoformat()}/windows/{quote(self.start_text(), safe='')}"
            f"{suffix}?{urlencode(params)}"
        )


def _fraction(moment: datetime) -> str:
    return f".{moment.microsecond:06d}".rstrip("0") if moment.microsecond else ""


def window_path(business_date: date, start: datetime, key: str, currency: str) -> str:
    """The desk's page of a window, relative to its prefix (reports and sign-off link it);
    a naive `start` is the process's local time, as PySpark collects timestamps."""
    return WindowRef(business_date, start.astimezone(UTC), key, currency).path()


@dataclass(frozen=True)
class EvidenceQuery:
    """Which kind of rows, and which page of them; `parse` validates a request's."""

    kind: str = EVENT
    page: int = 1
    page_size: int = 100

    @classmethod
    def parse(cls, kind: str | None, page: int | str, page_size: int | str) -> EvidenceQuery:
        kind = kind or EVENT
        if kind not in KINDS:
            raise ValueError(f"kind: expected one of {', '.join(KINDS)}, got {kind!r}")
        page, page_size = parse_page(page, page_size, MAX_PAGE_SIZE)
        return cls(kind, page, page_size)


def matching_row(
    rows: Iterable[Mapping[str, Any]], ref: WindowRef, default_currency: str | None
) -> Mapping[str, Any] | None:
    """The window's `reconciliation` row among the date's rows of its start and key (a row
    from before currencies, null, is in the run's `default_currency`)."""
    for row in rows:
        if (row.get("currency") or default_currency) == ref.currency:
            return row
    return None


def _counted(row: Mapping[str, Any]) -> str:
    """What the stream did with an event of the window, in words."""
    if row.get("in_late"):
        return "late"
    return "counted" if row.get("counted_by_stream") else "never counted"


def _shown(row: Mapping[str, Any], kind: str) -> dict[str, Any]:
    out = {c: row.get(c) for c in KIND_COLUMNS[kind] if c != "counted"}
    if kind == EVENT:
        out["counted"] = _counted(row)
    return out


def kind_totals(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Per kind: how many rows the window has (`total`), how many are stored (`stored`) and,
    for events, how many the stream never counted."""
    out = {}
    for kind in KINDS:
        of_kind = [r for r in rows if r.get("kind") == kind]
        total = max((int(r.get("kind_rows") or 0) for r in of_kind), default=0)
        totals = {"total": total, "stored": len(of_kind)}
        if kind == EVENT:
            never = max((int(r.get("never_counted_rows") or 0) for r in of_kind), default=0)
            totals["never_counted"] = never
        out[kind] = totals
    return out


def window_detail(
    ref: WindowRef,
    recon: Mapping[str, Any] | None,
    evidence: Sequence[Mapping[str, Any]],
    query: EvidenceQuery,
) -> dict[str, Any]:
    """The window's page: its figures and status, and the query's page of its evidence
    (`evidence`: the window's `reconciliation_evidence` rows, any order)."""
    status = None if recon is None else recon.get("status")
    if recon is None:
        state = "no_such_window"
    elif status != WITH_EVIDENCE:
        state = "no_evidence_needed"
    elif not evidence:
        state = "not_recorded"  # a run from before evidence, or none kept
    else:
        state = "recorded"
    of_kind = sorted(
        (r for r in evidence if r.get("kind") == query.kind), key=lambda r: r.get("rank") or 0
    )
    start = (query.page - 1) * query.page_size
    return {
        "business_date": ref.business_date.isoformat(),
        "window_start": ref.start_text(),
        "window_end": _iso(None if recon is None else recon.get("window_end")),
        "key": ref.key,
        "currency": ref.currency,
        "status": status,
        "severity": None if recon is None else recon.get("severity"),
        "figures": {c: (None if recon is None else recon.get(c)) for c in FIGURES},
        "evidence": state,
        "run_time": _iso(next((r.get("run_time") for r in evidence), None)),
        "kinds": kind_totals(evidence),
        "kind": query.kind,
        "page": query.page,
        "page_size": query.page_size,
        "columns": list(KIND_COLUMNS[query.kind]),
        "rows": [
            {k: _iso(v) for k, v in _shown(r, query.kind).items()}
            for r in of_kind[start : start + query.page_size]
        ],
    }


def _iso(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime | date) else value


def evidence_csv(evidence: Sequence[Mapping[str, Any]]) -> str:
    """Every stored row of the window, kind by kind, as CSV (text cells quoted and safe from
    spreadsheet formulas: `tally.outputs.csv_safe_cell`)."""
    columns = ["kind", *dict.fromkeys(c for kind in KINDS for c in KIND_COLUMNS[kind])]
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_NONNUMERIC)
    writer.writerow(columns)
    for kind in KINDS:
        rows = sorted((r for r in evidence if r.get("kind") == kind), key=lambda r: r["rank"])
        for row in rows:
            shown = {"kind": kind, **_shown(row, kind)}
            writer.writerow([csv_safe_cell(_csv_value(shown.get(c))) for c in columns])
    return out.getvalue()


def _csv_value(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    return _iso(value)
