"""`tally ledger`: the reconciliation desk's ledger on the command line, one row per business
date (status, totals, gap, unexplained residual, late rate, last run, sign-off), read as the
desk reads it (`tally.ledger_reads`, delta-rs, no Spark): the same rows as its API."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

from tally import ledger, ledger_reads
from tally.money import format_amounts, format_money
from tally.outputs import one_line
from tally.settings import Settings

# The grid's columns: (heading, the row's value as text).
COLUMNS: tuple[tuple[str, Any], ...] = (
    ("date", lambda r: r["business_date"]),
    ("status", lambda r: r["status"]),
    ("batch events", lambda r: _number(r["batch_count"])),
    ("batch amount", lambda r: _money(r, "batch_amount")),
    ("gap events", lambda r: _number(r["gap_count"])),
    ("gap amount", lambda r: _money(r, "gap_amount")),
    ("unexplained windows", lambda r: _number(r["unexplained_windows"])),
    ("unexplained amount", lambda r: _money(r, "unexplained_amount")),
    ("late rate", lambda r: "" if r["late_event_rate"] is None else f"{r['late_event_rate']:.3%}"),
    ("last run", lambda r: r["last_run"] or ""),
    ("sign-off", lambda r: _signoff(r["signoff"])),
    ("open item", lambda r: _open_item(r.get("open_item"))),
    ("since the run", lambda r: _reopened(r["reopened"], r.get("currency"))),
)


def _number(value: Any) -> str:
    return "" if value is None else f"{value:,}"


def _money(row: Mapping[str, Any], column: str) -> str:
    """An amount in the date's currency, or in each of its currencies ("$1.00 and ¥100"; minor
    units as they are for a date never run)."""
    value, currency = row[column], row.get("currency")
    several = row.get("by_currency") or []
    if value is None and len(several) > 1:
        return format_amounts(several, column, str(currency))
    return format_money(value, currency) if value is not None and currency else _number(value)


def _reopened(change: Mapping[str, Any] | None, currency: str | None) -> str:
    """What a reopened date gained since its run (`unchecked`: the stream's count, before the
    exact check of `tally restatements`)."""
    if not change:
        return ""
    text = ledger.change_text(change, currency, " / ")
    return text if change.get("verified") else f"{text} (unchecked)"


def _signoff(signoff: Mapping[str, Any] | None) -> str:
    if not signoff:
        return ""
    text = one_line(" ".join(ledger.decision_words(signoff)))
    return f"awaiting (was {text})" if signoff.get("superseded") else text


def _open_item(item: Mapping[str, Any] | None) -> str:
    """An open item's age, kind and owner ("open 3d awaiting_approval: ben")."""
    if not item or item["status"] != "open":
        return ""
    return one_line(f"open {item['age_days']}d {item['kind']}: {item.get('owner')}")


def grid(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The rows as aligned text lines under a heading (numbers right-aligned)."""
    cells = [[show(r) for _, show in COLUMNS] for r in rows]
    headings = [heading for heading, _ in COLUMNS]
    widths = [max([len(h), *(len(c[i]) for c in cells)]) for i, h in enumerate(headings)]
    left = ("date", "status", "sign-off", "open item")
    right = {i for i, (h, _) in enumerate(COLUMNS) if h not in left}

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if i in right else v.ljust(w)
            for i, (v, w) in enumerate(zip(values, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    return [line(headings), *(line(c) for c in cells)]


def print_ledger(
    settings: Settings,
    as_json: bool,
    status: str | None,
    date_from: str | None,
    date_to: str | None,
    older_than: str | None = None,
    out: TextIO | None = None,
) -> int:
    out = out or sys.stdout
    try:
        query = ledger.LedgerQuery.parse(status, date_from, date_to, older_than=older_than)
    except ValueError as exc:
        print(f"tally: ledger: {exc}", file=sys.stderr)
        return 2
    location = ledger_reads.Location(
        settings.warehouse, settings.s3_endpoint, settings.s3_region, settings.s3_path_style
    )
    try:
        if not ledger_reads.holds_ledger(location):
            print(
                f"tally: ledger: no events or reconciliation in {settings.warehouse}",
                file=sys.stderr,
            )
            return 2
        rows = ledger.matching(ledger_reads.read_ledger(location, datetime.now(UTC)), query)
    except ledger_reads.WarehouseUnavailable as exc:
        print(f"tally: {exc}", file=sys.stderr)
        return 2
    if as_json:
        out.write(json.dumps(rows, indent=1) + "\n")
    else:
        out.write("\n".join(grid(rows)) + "\n")
    return 0
