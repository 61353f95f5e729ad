"""Sign-off of a business date: whether it needs a person, and the `signoffs` table (append-only).

A date whose reconciliation balanced, or whose residual the materiality tolerances grade `ok`,
and whose critical expectations passed is signed off automatically (`auto`); any other needs a
person's decision (`tally.ledger.needs_person`): `accepted` (with a reason), `rejected` (the
date stays open), or `timed_out` when nobody answered.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime
from typing import Any

from tally import tables
from tally.dates import epoch_ms
from tally.ledger import needs_person, status_of
from tally.money import DEFAULT_CURRENCY, format_amounts
from tally.open_items import ASKED, Step, item_after

__all__ = [
    "DECISIONS",
    "SignOff",
    "date_status",
    "needs_person",
    "record_signoff",
    "within_tolerance_reason",
]

DECISIONS = (
    "auto",
    "accepted",
    "rejected",
    "timed_out",
    "prepared",
    "sent_back",
    "self_approval_refused",
)
STEPS = ("decide", "prepare", "approve")


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
    tier: int = 1  # 0 automatic, 1 one person, 2 two people (`tally.ledger.signoff_tier`)
    step: str = "decide"  # decide (tiers 0 and 1), prepare or approve (tier 2)
    proposed: str = ""  # a prepare step's proposal (accepted or rejected)
    prepared_by: str = ""
    approved_by: str = ""

    def __post_init__(self) -> None:
        if self.decision not in DECISIONS:
            raise ValueError(f"decision: expected one of {', '.join(DECISIONS)}")
        if self.step not in STEPS:
            raise ValueError(f"step: expected one of {', '.join(STEPS)}")
        if self.decided_at.tzinfo is None:
            raise ValueError("decided_at: needs a time zone")
        needs_reason = self.decision == "accepted" or self.proposed == "accepted"
        if needs_reason and self.step != "approve" and not self.reason.strip():
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


# Who prepares and who approves, in words, when the settings name nobody.
DEFAULT_PEOPLE = ("any reviewer", "any other reviewer")


def record_signoff(
    spark: Any,
    warehouse: str,
    signoff: SignOff,
    people: tuple[str, str] = DEFAULT_PEOPLE,
    recorded_at: datetime | None = None,
) -> None:
    """Append the decision to `signoffs` (created on first use) and move the date's open item
    (`record_item`; `people`: `Settings.signoff_people`, who must act next). The item changes
    when it is recorded (`recorded_at`, the wall clock by default), not at `decided_at`: an
    automatic decision is dated by its run's interval, which can be before the item's last
    change."""
    from pyspark.sql import functions as F

    if tables.exists(spark, warehouse, tables.SIGNOFFS.name):
        tables.add_missing_columns(spark, warehouse, tables.SIGNOFFS)  # the four-eyes columns
    else:
        tables.ensure_table(spark, warehouse, tables.SIGNOFFS)
    run_ms = None if signoff.run_time is None else epoch_ms(signoff.run_time)
    row = tables.literal_row(
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
            "tier": F.lit(signoff.tier),
            "step": F.lit(signoff.step),
            "proposed": F.lit(signoff.proposed or None).cast("string"),
            "prepared_by": F.lit(signoff.prepared_by or None).cast("string"),
            "approved_by": F.lit(signoff.approved_by or None).cast("string"),
        },
    )
    tables.write_table(row, warehouse, tables.SIGNOFFS)
    step = Step(
        decision=signoff.decision,
        by=signoff.decided_by,
        at=recorded_at or datetime.now(UTC),
        reason=signoff.reason,
        step=signoff.step,
        preparers=people[0],
        approvers=people[1],
        run_time=signoff.run_time,
    )
    record_item(spark, warehouse, signoff.business_date, step)


def record_asked(
    spark: Any,
    warehouse: str,
    business_date: date,
    status: str,
    at: datetime,
    run_time: datetime | None,
    people: tuple[str, str] = DEFAULT_PEOPLE,
) -> None:
    """The nightly asks a person about the date: its open item opens (or takes the status)."""
    step = Step(ASKED, "tally", at, kind=status, preparers=people[0], approvers=people[1])
    record_item(spark, warehouse, business_date, replace(step, run_time=run_time))


def latest_item(spark: Any, warehouse: str, business_date: date) -> dict[str, Any] | None:
    """The date's open item (its newest `open_items` row), or None."""
    from pyspark.sql import functions as F

    if not tables.exists(spark, warehouse, tables.OPEN_ITEMS.name):
        return None
    rows = (
        tables.read_table(spark, warehouse, tables.OPEN_ITEMS.name)
        .where(F.col("business_date") == F.lit(business_date))
        .orderBy(F.col("changed_at").desc())
        .limit(1)
        .collect()
    )
    return aware_row(rows[0].asDict()) if rows else None


def aware_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A collected row with its timestamps zone-aware (`batch.reconcile.aware`: PySpark gives
    them naive, in the process's local time)."""
    from batch.reconcile import aware

    return {k: aware(v) if isinstance(v, datetime) else v for k, v in row.items()}


def record_item(spark: Any, warehouse: str, business_date: date, step: Step) -> None:
    """Append the date's open item after `step` (`tally.open_items.item_after`), if it
    changes."""
    item = item_after(latest_item(spark, warehouse, business_date), step)
    if item is not None:
        write_item(spark, warehouse, business_date, item)


def write_item(spark: Any, warehouse: str, business_date: date, item: Mapping[str, Any]) -> None:
    """Append a row of the date's open item (`open_items`, created on first use)."""
    from pyspark.sql import functions as F

    values = {"business_date": F.lit(business_date).cast("date")}
    for column in ("opened_at", "changed_at", "run_time"):
        moment = item.get(column)
        values[column] = F.timestamp_millis(
            F.lit(None if moment is None else epoch_ms(moment)).cast("bigint")
        )
    for column in ("status", "kind", "owner", "resolution", "resolved_by"):
        values[column] = F.lit(item.get(column)).cast("string")
    values["alerted_periods"] = F.lit(int(item.get("alerted_periods") or 0))
    tables.write_table(tables.literal_row(spark, values), warehouse, tables.OPEN_ITEMS)


# The sign-off request links at most this many UNEXPLAINED windows (the date page lists more).
WINDOWS_LINKED = 5


def window_links(settings: Any, business_date: date) -> str:
    """Markdown lines linking the date's largest UNEXPLAINED windows to their records in the
    desk (empty when it has none or the warehouse cannot be read: the date page lists them)."""
    from tally import ledger_reads
    from tally.money import format_money
    from tally.window_evidence import window_path

    location = ledger_reads.Location(
        settings.warehouse, settings.s3_endpoint, settings.s3_region, settings.s3_path_style
    )
    try:
        rows = ledger_reads.read_unexplained(location, business_date)
    except ledger_reads.WarehouseUnavailable:
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
