"""Sign-off of a business date: whether it needs a person, and the `signoffs` table (append-only).

A date whose reconciliation balanced, or whose residual the materiality tolerances grade `ok`,
and whose critical expectations passed is signed off automatically (`auto`); any other needs a
person's decision (`tally.ledger.needs_person`): `accepted` (with a reason), `rejected` (the
date stays open), or `timed_out` when nobody answered.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from tally import tables as T
from tally.dates import epoch_ms
from tally.ledger import needs_person, status_of
from tally.money import DEFAULT_CURRENCY, format_amounts

__all__ = [
    "DECISIONS",
    "SignOff",
    "date_status",
    "needs_person",
    "record_signoff",
    "within_tolerance_reason",
]

DECISIONS = ("auto", "accepted", "rejected", "timed_out")


@dataclass(frozen=True)
class SignOff:
    business_date: date
    decision: str
    decided_by: str
    decided_at: datetime
    reason: str = ""
    status: str = ""  # the date's status when asked (tally.ledger.STATUSES)
    run_time: datetime | None = None  # the reconciliation run (reconciliation_runs.run_time)
    dag_id: str = ""
    run_id: str = ""

    def __post_init__(self) -> None:
        if self.decision not in DECISIONS:
            raise ValueError(f"decision: expected one of {', '.join(DECISIONS)}")
        if self.decided_at.tzinfo is None:
            raise ValueError("decided_at: needs a time zone")
        if self.decision == "accepted" and not self.reason.strip():
            raise ValueError("an accepted sign-off needs a reason")


def date_status(reconciliation: Mapping[str, Any], validation: Mapping[str, Any]) -> str:
    """The date's status from the reaggregate and validate stages' results (`status_of`)."""
    return status_of(reconciliation, not validation.get("success", True))


def money_of(reconciliation: Mapping[str, Any], column: str) -> str:
    """An amount of the nightly's reconciliation result, in its currency, or each of its
    currencies' (`by_currency`; a result from before currencies: the default's)."""
    currency = reconciliation.get("currency") or DEFAULT_CURRENCY
    return format_amounts(reconciliation.get("by_currency") or [reconciliation], column, currency)


def within_tolerance_reason(reconciliation: Mapping[str, Any]) -> str:
    """Why a date with a residual signed itself off: the residual, and the rule that graded
    the date `ok` (the run's settings hold every rule in force)."""
    return (
        f"within the materiality tolerance: {reconciliation.get('unexplained_windows', 0):,} "
        f"UNEXPLAINED window(s), residual {money_of(reconciliation, 'unexplained_amount')}, "
        f"graded ok by rule {reconciliation.get('tolerance_rule')!r} (the rules in "
        "force are in the run's settings)"
    )


def record_signoff(spark: Any, warehouse: str, signoff: SignOff) -> None:
    """Append the decision to `signoffs` (created on first use)."""
    from pyspark.sql import functions as F

    T.ensure_table(spark, warehouse, T.SIGNOFFS)
    run_ms = None if signoff.run_time is None else epoch_ms(signoff.run_time)
    row = T.literal_row(
        spark,
        {
            "business_date": F.lit(signoff.business_date).cast("date"),
            "decision": F.lit(signoff.decision),
            "decided_by": F.lit(signoff.decided_by),
            "decided_at": F.timestamp_millis(F.lit(epoch_ms(signoff.decided_at))),
            "reason": F.lit(signoff.reason),
            "status": F.lit(signoff.status),
            "run_time": F.timestamp_millis(F.lit(run_ms).cast("bigint")),
            "dag_id": F.lit(signoff.dag_id),
            "run_id": F.lit(signoff.run_id),
        },
    )
    T.write_table(row, warehouse, T.SIGNOFFS)


# The sign-off request links at most this many UNEXPLAINED windows (the date page lists more).
WINDOWS_LINKED = 5


def window_links(settings: Any, business_date: date) -> str:
    """Markdown lines linking the date's largest UNEXPLAINED windows to their records in the
    desk (empty when it has none or the warehouse cannot be read: the date page lists them)."""
    from tally import ledger_reads as W
    from tally.money import format_money
    from tally.window_evidence import window_path

    location = W.Location(
        settings.warehouse, settings.s3_endpoint, settings.s3_region, settings.s3_path_style
    )
    try:
        rows = W.read_unexplained(location, business_date)
    except W.WarehouseUnavailable:
        return ""
    lines = []
    for row in rows[:WINDOWS_LINKED]:
        currency = row.get("currency") or settings.default_currency
        path = window_path(business_date, row["window_start"], row["key"], currency)
        amount = format_money(int(row.get("residual_amount") or 0), currency)
        start = row["window_start"].strftime("%Y-%m-%d %H:%M:%S")
        lines.append(f"- [{start} UTC, key `{row['key']}`: {amount} unexplained](/tally/{path})")
    if len(rows) > WINDOWS_LINKED:
        lines.append(f"- … {len(rows) - WINDOWS_LINKED:,} more on the date's page")
    return "\n".join(lines)
