"""The data-quality suites, written as code: each a function from plain values (thresholds) to a
Great Expectations `ExpectationSuite`, paired with the Spark step that prepares the DataFrame
it validates (derived columns are computed in Spark, so every check is a stock expectation).

    gap_suite(...)               on gap_frame(reconciliation rows of the date)
    events_suite(...)            on events_frame(events of the date's event_date partition)
    stream_aggregates_suite()    on stream_aggregates_frame(stream rows of the date's windows)
    stream_progress_suite(...)   on stream_progress_frame(micro-batches that carried the date)

The suites' thresholds have no defaults of their own: they are the settings of the same names
(`Thresholds.from_settings`), whose defaults live in `tally.settings.Settings`.

Every expectation carries `meta.check` (a stable name: what `validation_results.check` and the
report show), `description` and a `severity`. A suite passes when no *critical* expectation
fails; a failed *warning* expectation is flagged but does not fail the date. The late-event
rate is checked twice on purpose: `late_rate_warn` (warning, rate <= late_rate_warn) and
`late_rate_fail` (critical, rate <= late_rate_fail). A rate between the two thresholds is a
success with a flagged warning; above the failure threshold both fail. Likewise the UNEXPLAINED
windows: `no_unexplained_windows` / `no_material_gap` (critical) give the verdict, and
`unexplained_windows_named` (warning) names the windows in Data Docs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import MapType

from tally.dates import DayBounds, business_day_bounds, carried_day, window_in_day
from tally.settings import Settings
from tally.tables import zero_if_absent
from tally.tolerance_columns import SEVERITY_COLUMN, date_verdicts
from tally.tolerances import FAIL, OK, WARN, ToleranceRule
from tally.vocabulary import (
    CRITICAL,
    EXPLAINED_BY_COPIES,
    EXPLAINED_STATUSES,
    STATUSES,
    UNEXPLAINED,
    WARNING,
)
from tally.windows import WINDOW_KEY

if TYPE_CHECKING:
    from great_expectations.core import ExpectationSuite

GAP = "gap"
EVENTS = "events"
STREAM_AGGREGATES = "stream_aggregates"
STREAM_PROGRESS = "stream_progress"
SUITES = (GAP, EVENTS, STREAM_AGGREGATES, STREAM_PROGRESS)
# The Delta table each suite reads.
SOURCE_TABLE = {
    GAP: "reconciliation",
    EVENTS: "events",
    STREAM_AGGREGATES: "stream_aggregates",
    STREAM_PROGRESS: "stream_progress",
}


@dataclass(frozen=True)
class Thresholds:
    """The plain values the suites are built from (the settings of the same names, validated
    there; `from_settings` is the only way in, so no default is written twice).

    Counts are windows, rates are fractions (0.001 = 0.1 %), amounts are integer minor units,
    durations are milliseconds. Bounds are inclusive (a late rate equal to the threshold
    passes).
    """

    unexplained_tolerance: int  # UNEXPLAINED windows tolerated per date
    late_rate_warn: float  # late events / batch events: warning above this
    late_rate_fail: float  # ... failure above this
    amount_min: int
    amount_max: int
    max_clock_skew_ms: int  # event_time may be at most this far ahead of ingest_time
    clock_skew_tolerance: float  # share of events allowed beyond max_clock_skew_ms
    duplicate_rate_max: float  # share of arrival_status = 'duplicate' in events
    watermark_lag_max_ms: int  # watermark lag of the last non-drained micro-batch
    # the materiality tolerance rules (none: the count of UNEXPLAINED windows is checked)
    tolerance: tuple[ToleranceRule, ...]

    @classmethod
    def from_settings(cls, settings: Settings) -> Thresholds:
        """The thresholds in force, from the settings."""
        return cls(
            unexplained_tolerance=settings.unexplained_tolerance,
            late_rate_warn=settings.late_rate_warn,
            late_rate_fail=settings.late_rate_fail,
            max_clock_skew_ms=settings.max_clock_skew,
            amount_min=settings.amount_min,
            amount_max=settings.amount_max,
            clock_skew_tolerance=settings.clock_skew_tolerance,
            duplicate_rate_max=settings.duplicate_rate_max,
            watermark_lag_max_ms=settings.watermark_lag_max,
            tolerance=settings.tolerance_rules,
        )

    @classmethod
    def defaults(cls) -> Thresholds:
        return cls.from_settings(Settings())


# The UNEXPLAINED windows `unexplained_windows_named` names in Data Docs and the stored result:
# at most this many of a date, the first Spark finds (a date may have thousands; the count is
# the verdict check's observed value; validation_results' observed value shows five).
NAMED_WINDOWS = 20
# What names such a window: its label (`window_name`), the value Data Docs show (they show a
# SUMMARY result's values, its index columns only in a COMPLETE one), and these columns of it
# in the stored result (`partial_unexpected_index_list`).
WINDOW_NAME = ("window_start", "key", "currency")
# The result format that check's unexpected rows are looked up with (`validate._add_examples`):
# SUMMARY, so Spark stops at NAMED_WINDOWS rows (COMPLETE reads every one), with WINDOW_NAME.
NAMED_WINDOWS_FORMAT = {
    "result_format": "SUMMARY",
    "partial_unexpected_count": NAMED_WINDOWS,
    "unexpected_index_column_names": list(WINDOW_NAME),
}


# -- helpers ----------------------------------------------------------------------------------


# An expectation whose observed value is a share (0.25: a quarter), written as a percentage.
RATE = "rate"


def percent(share: float) -> str:
    """A share as people read it: 0.05 is "5 %", 7.00007e-05 "0.007 %" (3 decimals at most)."""
    return f"{float(f'{share * 100:.3f}'):g} %"


def _meta(
    check: str,
    severity: str,
    description: str,
    unit: str | None = None,
    result_format: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Keyword arguments every expectation gets (GX records `description` and `severity`;
    `catch_exceptions` turns a broken metric into a failed result instead of an abort);
    `unit`: how its observed value reads (`RATE`: a percentage; None: as it is);
    `result_format`: what its unexpected rows are looked up with (None: `RESULT_FORMAT`)."""
    meta: dict[str, Any] = {"check": check}
    if unit:
        meta["unit"] = unit
    if result_format:
        meta["result_format"] = result_format
    return {
        "meta": meta,
        "description": description,
        "severity": severity,
        "catch_exceptions": True,
    }


def _suite(name: str, expectations: list[Any]) -> ExpectationSuite:
    import great_expectations as gx

    # Expectations passed to the constructor: add_expectation() would try to save the suite
    # through the current GX context, and a suite is built before any context is involved.
    return gx.ExpectationSuite(
        name=name,
        expectations=expectations,
        meta={"generated_by": f"expectations.suites.{name}_suite"},
    )


# -- gap: reconciliation ------------------------------------------------------------------------


def _unexplained_checks(unexplained_tolerance: int, graded: bool) -> list[Any]:
    """The unexplained gap's checks: without materiality tolerances, a count of UNEXPLAINED
    windows; with them, the date's severity (`date_severity`: critical unless `fail`, a
    warning unless `ok`)."""
    import great_expectations.expectations as gxe

    if not graded:
        return [
            gxe.ExpectColumnSumToBeBetween(
                column="unexplained",
                min_value=0,
                max_value=unexplained_tolerance,
                **_meta(
                    "no_unexplained_windows",
                    CRITICAL,
                    f"At most {unexplained_tolerance} window(s) with status UNEXPLAINED "
                    "(observed: the number of UNEXPLAINED windows).",
                ),
            )
        ]
    return [
        gxe.ExpectColumnValuesToBeInSet(
            column="date_severity",
            value_set=[OK, WARN],
            **_meta(
                "no_material_gap",
                CRITICAL,
                f"The date's unexplained residual is not graded {FAIL} by the materiality "
                "tolerances (observed: the date's severity, the worse of its sums and its "
                "worst window).",
            ),
        ),
        gxe.ExpectColumnValuesToBeInSet(
            column="date_severity",
            value_set=[OK],
            **_meta(
                "no_gap_above_warn",
                WARNING,
                f"The date's unexplained residual is graded {OK} by the materiality "
                f"tolerances, not {WARN} (warning).",
            ),
        ),
    ]


def _named_windows_check() -> Any:
    """The UNEXPLAINED windows by name: a warning, so the date's verdict stays the critical
    checks' (`_unexplained_checks`), which give only a count or a severity. It flags every
    UNEXPLAINED window, also those the verdict tolerates (`unexplained_tolerance`, a date
    graded ok): the date passes, with a warning naming them."""
    import great_expectations.expectations as gxe

    return gxe.ExpectColumnValuesToBeNull(
        column="unexplained_window",
        **_meta(
            "unexplained_windows_named",
            WARNING,
            "Every window is explained; the UNEXPLAINED ones are named "
            f"(window_start|key|currency, at most {NAMED_WINDOWS} of them) (warning: "
            "no_unexplained_windows or no_material_gap gives the verdict).",
            result_format=NAMED_WINDOWS_FORMAT,
        ),
    )


def gap_suite(
    *,
    unexplained_tolerance: int,
    late_rate_warn: float,
    late_rate_fail: float,
    graded: bool,
) -> ExpectationSuite:
    """The date's reconciliation: no unexplained gap (`graded`: none above the materiality
    tolerances), the explained gap is exactly the late side output less the copies the stream
    counted (a warning when there are any), the late-event rate is under its thresholds,
    every window has a batch side."""
    import great_expectations.expectations as gxe

    return _suite(
        GAP,
        [
            gxe.ExpectTableRowCountToBeBetween(
                min_value=1,
                **_meta("reconciled", CRITICAL, "The date has been reconciled (at least one row)."),
            ),
            gxe.ExpectColumnValuesToBeInSet(
                column="status",
                value_set=list(STATUSES),
                **_meta("known_status", CRITICAL, "Every status is one the batch layer defines."),
            ),
            *_unexplained_checks(unexplained_tolerance, graded),
            _named_windows_check(),
            gxe.ExpectColumnValuesToBeInSet(
                column="gap_is_explained",
                value_set=[True],
                **_meta(
                    "explained_gap_is_late_output",
                    CRITICAL,
                    "On every window the batch layer calls explained (MATCH, EXPLAINED_BY_LATE, "
                    "EXPLAINED_BY_COPIES, MISSING_IN_STREAM), batch - stream equals the late "
                    "side output less the copies the stream counted, exactly (count and "
                    "amount).",
                ),
            ),
            gxe.ExpectColumnSumToBeBetween(
                column="copies_counted",
                min_value=0,
                max_value=0,
                **_meta(
                    "no_copies_counted",
                    WARNING,
                    "No window holds a copy of an earlier event that the stream counted again "
                    "(observed: how many; explained, EXPLAINED_BY_COPIES, but a sign that the "
                    "source reuses event_ids beyond the stream's dedup_horizon) (warning).",
                ),
            ),
            *_late_rate_checks(late_rate_warn, late_rate_fail),
            gxe.ExpectColumnValuesToNotBeNull(
                column="batch_window_count",
                **_meta(
                    "batch_side_present",
                    CRITICAL,
                    "Every window of the day is present on the batch side (batch_count not null "
                    "and not 0), but one whose stream events are copies of earlier events "
                    "(EXPLAINED_BY_COPIES).",
                ),
            ),
        ],
    )


def _late_rate_checks(warn: float, fail: float) -> list[Any]:
    """The late-event rate under its two thresholds: a warning, then critical."""
    import great_expectations.expectations as gxe

    return [
        gxe.ExpectColumnMaxToBeBetween(
            column="late_event_rate",
            max_value=warn,
            **_meta(
                "late_rate_warn",
                WARNING,
                f"Late-event rate (late events / batch events) at most {percent(warn)} (warning).",
                RATE,
            ),
        ),
        gxe.ExpectColumnMaxToBeBetween(
            column="late_event_rate",
            max_value=fail,
            **_meta(
                "late_rate_fail",
                CRITICAL,
                f"Late-event rate (late events / batch events) at most {percent(fail)}.",
                RATE,
            ),
        ),
    ]


def window_name() -> Column:
    """A window's label "window_start|key|currency" (`WINDOW_NAME`): the start as
    "2026-11-20T10:00:00.000Z" (the session's time zone is UTC), a null key or currency (rows
    from before currencies) as ""."""
    stamp = "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"
    parts = [F.date_format(c, stamp) if c == "window_start" else F.col(c) for c in WINDOW_NAME]
    return F.concat_ws("|", *[F.coalesce(part, F.lit("")) for part in parts])


def gap_frame(reconciliation: DataFrame, tolerance: tuple[ToleranceRule, ...] = ()) -> DataFrame:
    """The date's reconciliation rows with the derived columns the gap suite checks:

    * `unexplained`: 1 for an UNEXPLAINED window, else 0 (their sum is the count);
    * `unexplained_window`: an UNEXPLAINED window's label (`window_name`), null on the others;
    * `copies_counted`: the window's copies the stream counted (0 in rows of earlier runs);
    * `gap_is_explained`: on explained rows, diff == late − copies (count and amount; copies:
      those the stream counted, none in rows of earlier runs); null otherwise;
    * `late_event_rate`: sum(late_count) / sum(batch_count) of the date (the summary's
      `late_event_rate`), on every row; 0.0 when the date has no batch events;
    * `batch_window_count`: batch_count, null when it is null or 0 (reconcile writes 0 for a
      window with no batch row), except in an EXPLAINED_BY_COPIES window (its stream events
      may all be copies of earlier events, which the batch counts under their own windows);
    * `date_severity` (with `tolerance` rules only): the severity under them of the row's
      (date, currency), on every row (`date_verdicts` of the graded rows per currency: what
      the summary records).
    """
    if "currency" not in reconciliation.columns:  # rows of a tally from before currencies
        reconciliation = reconciliation.withColumn("currency", F.lit(None).cast("string"))
    totals = reconciliation.agg(
        F.coalesce(F.sum("late_count"), F.lit(0)).cast("double").alias("_late"),
        F.coalesce(F.sum("batch_count"), F.lit(0)).cast("double").alias("_batch"),
    ).select(
        F.when(F.col("_batch") > 0, F.col("_late") / F.col("_batch"))
        .otherwise(F.lit(0.0))
        .alias("late_event_rate")
    )
    explained = F.col("status").isin(*EXPLAINED_STATUSES)
    copies_count = zero_if_absent(reconciliation, "copies_count")
    copies_amount = zero_if_absent(reconciliation, "copies_amount")
    late_is_diff = (F.col("diff_count") == F.col("late_count") - copies_count) & (
        F.col("diff_amount") == F.col("late_amount") - copies_amount
    )
    rows = reconciliation.crossJoin(F.broadcast(totals))
    if tolerance:
        verdicts = date_verdicts(reconciliation, tolerance, by=["currency"]).select(
            F.col("currency").alias("_currency"), F.col(SEVERITY_COLUMN).alias("date_severity")
        )
        same = F.col("currency").eqNullSafe(F.col("_currency"))
        rows = rows.join(F.broadcast(verdicts), same, "left").drop("_currency")
    return rows.select(
        "*",
        F.when(F.col("status") == UNEXPLAINED, 1).otherwise(0).alias("unexplained"),
        F.when(F.col("status") == UNEXPLAINED, window_name()).alias("unexplained_window"),
        copies_count.alias("copies_counted"),
        F.when(explained, F.coalesce(late_is_diff, F.lit(False))).alias("gap_is_explained"),
        # a window whose only stream events are copies of earlier events has no batch side
        F.when(
            (F.col("batch_count") != 0) | (F.col("status") == EXPLAINED_BY_COPIES),
            F.col("batch_count"),
        ).alias("batch_window_count"),
    )


# -- events ---------------------------------------------------------------------------------------


def events_suite(
    *,
    amount_min: int,
    amount_max: int,
    max_clock_skew_ms: int,
    clock_skew_tolerance: float,
    duplicate_rate_max: float,
) -> ExpectationSuite:
    """The event log of the date's `event_date` partition: identity columns present, amounts
    integral and within bounds, event times not from the future, few duplicates."""
    import great_expectations.expectations as gxe

    not_null = [
        gxe.ExpectColumnValuesToNotBeNull(
            column=column,
            **_meta(f"{column}_not_null", CRITICAL, f"Every event has a {column}."),
        )
        for column in ("event_id", "key", "event_time")
    ]
    return _suite(
        EVENTS,
        [
            gxe.ExpectTableRowCountToBeBetween(
                min_value=1,
                **_meta("events_present", CRITICAL, "The date's partition holds events."),
            ),
            *not_null,
            gxe.ExpectColumnValuesToBeOfType(
                column="amount",
                type_="LongType",
                **_meta(
                    "amount_is_integer",
                    CRITICAL,
                    "Amounts are integer minor units (BIGINT), never floating point.",
                ),
            ),
            gxe.ExpectColumnValuesToBeBetween(
                column="amount",
                min_value=amount_min,
                max_value=amount_max,
                **_meta(
                    "amount_within_bounds",
                    CRITICAL,
                    f"Every amount is within [{amount_min}, {amount_max}] minor units.",
                ),
            ),
            gxe.ExpectColumnValuesToBeBetween(
                column="ahead_ms",
                max_value=max_clock_skew_ms,
                mostly=1.0 - clock_skew_tolerance,
                **_meta(
                    "event_time_not_ahead_of_ingest",
                    CRITICAL,
                    f"No event_time is more than {max_clock_skew_ms} ms ahead of its ingest_time "
                    f"(ahead_ms = event_time - ingest_time; tolerated share "
                    f"{clock_skew_tolerance:g}).",
                ),
            ),
            gxe.ExpectColumnMeanToBeBetween(
                column="is_duplicate",
                min_value=0.0,
                max_value=duplicate_rate_max,
                **_meta(
                    "duplicate_rate",
                    CRITICAL,
                    f"Share of duplicate arrivals at most {percent(duplicate_rate_max)}.",
                    RATE,
                ),
            ),
        ],
    )


# The columns of `events` the events suite checks (besides the derived ones).
EVENTS_CHECKED = ("event_id", "key", "event_time", "amount")


def events_frame(events: DataFrame) -> DataFrame:
    """The checked columns of events with `ahead_ms` (event_time - ingest_time, ms) and
    `is_duplicate` (1.0/0.0). Only those: the suite caches the frame (a day of events), and
    the `extra` map and the source columns would fill the cache for nothing."""
    return events.select(
        *EVENTS_CHECKED,
        (F.unix_millis("event_time") - F.unix_millis("ingest_time")).alias("ahead_ms"),
        F.when(F.col("arrival_status") == "duplicate", 1.0).otherwise(0.0).alias("is_duplicate"),
    )


# -- stream ------------------------------------------------------------------------------------


def stream_aggregates_suite() -> ExpectationSuite:
    """The stream's window rows of the date: one row per (window, key, currency, revision), and
    so one latest row per (window, key, currency), which is the stream's answer."""
    import great_expectations.expectations as gxe

    return _suite(
        STREAM_AGGREGATES,
        [
            gxe.ExpectCompoundColumnsToBeUnique(
                column_list=[*WINDOW_KEY, "revision"],
                **_meta(
                    "revision_unique",
                    CRITICAL,
                    "(window, key, currency, revision) is unique: each revision is emitted once.",
                ),
            ),
            gxe.ExpectColumnValuesToBeUnique(
                column="latest_window_key",
                **_meta(
                    "latest_revision_unique",
                    CRITICAL,
                    "Each (window, key, currency) has exactly one row with its highest revision.",
                ),
            ),
        ],
    )


def stream_aggregates_frame(stream_aggregates: DataFrame) -> DataFrame:
    """Rows with `latest_window_key` ("window_start|window_end|key|currency" on rows holding
    the highest revision of their window, key and currency, null on older revisions). The end
    is part of the identity: sessions of one key may share a start (a session and the one
    that absorbed it; fixed windows of one start all have one end). A row from before
    currencies (null) is in the one default currency."""
    if "currency" not in stream_aggregates.columns:  # a version from before currencies
        stream_aggregates = stream_aggregates.withColumn("currency", F.lit(None).cast("string"))
    window = Window.partitionBy(*WINDOW_KEY)
    latest = F.col("revision") == F.max("revision").over(window)
    stamp = "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"
    label = F.concat_ws(
        "|",
        F.date_format("window_start", stamp),
        F.date_format("window_end", stamp),
        F.col("key"),
        F.coalesce(F.col("currency"), F.lit("")),
    )
    return stream_aggregates.select("*", F.when(latest, label).alias("latest_window_key"))


def stream_progress_suite(*, watermark_lag_max_ms: int) -> ExpectationSuite:
    """The micro-batches that carried the date: the watermark never moves backwards, and the
    watermark lag of the last non-drained batch is within bound."""
    import great_expectations.expectations as gxe

    return _suite(
        STREAM_PROGRESS,
        [
            gxe.ExpectTableRowCountToBeBetween(
                min_value=1,
                **_meta("batches_present", CRITICAL, "At least one micro-batch carried the date."),
            ),
            gxe.ExpectColumnValuesToBeBetween(
                column="wm_step_ms",
                min_value=0,
                **_meta(
                    "watermark_monotonic",
                    CRITICAL,
                    "The watermark never decreases from one micro-batch to the next "
                    "(wm_step_ms = watermark_after - previous batch's watermark_after >= 0).",
                ),
            ),
            gxe.ExpectColumnMaxToBeBetween(
                column="last_watermark_lag_ms",
                max_value=watermark_lag_max_ms,
                **_meta(
                    "watermark_lag",
                    CRITICAL,
                    f"The watermark lag of the last non-drained micro-batch is at most "
                    f"{watermark_lag_max_ms} ms.",
                ),
            ),
        ],
    )


def stream_progress_frame(stream_progress: DataFrame, bounds: DayBounds) -> DataFrame:
    """The micro-batches whose watermark moved across the day `bounds` (or had none yet), with:

    * `wm_step_ms`: watermark_after minus the previous batch's (same app_id, by batch_id);
      null for the first batch, while there is no watermark, and for the drain batch (it
      stores none: every window is closed); -1 if a watermark disappears;
    * `last_watermark_lag_ms`: watermark_lag_ms of the app's last non-drained batch (the
      whole table decides which batch is last), on every row of that app.
    """
    by_batch = Window.partitionBy("app_id").orderBy("batch_id")
    by_app = Window.partitionBy("app_id")
    previous = F.lag("watermark_after").over(by_batch)
    step = (
        F.when(previous.isNull(), F.lit(None).cast("long"))
        .when(F.coalesce(F.col("drained"), F.lit(False)), F.lit(None).cast("long"))
        .when(F.col("watermark_after").isNull(), F.lit(-1).cast("long"))
        .otherwise(F.unix_millis("watermark_after") - F.unix_millis(previous))
    )
    not_drained = ~F.coalesce(F.col("drained"), F.lit(False))
    last_live = F.max(F.when(not_drained, F.col("batch_id"))).over(by_app)
    last_lag = F.max(F.when(F.col("batch_id") == last_live, F.col("watermark_lag_ms"))).over(by_app)
    return (
        stream_progress.select(
            "*", step.alias("wm_step_ms"), last_lag.alias("last_watermark_lag_ms")
        )
        .where(carried_day(bounds))
        # maps (per-partition marks, flags, counts): GX cannot profile them, none is checked
        .drop(*[f.name for f in stream_progress.schema.fields if isinstance(f.dataType, MapType)])
    )


def build_suite(name: str, thresholds: Thresholds) -> ExpectationSuite:
    """The suite `name` built from `thresholds`."""
    t = thresholds
    if name == GAP:
        return gap_suite(
            unexplained_tolerance=t.unexplained_tolerance,
            late_rate_warn=t.late_rate_warn,
            late_rate_fail=t.late_rate_fail,
            graded=bool(t.tolerance),
        )
    if name == EVENTS:
        return events_suite(
            amount_min=t.amount_min,
            amount_max=t.amount_max,
            max_clock_skew_ms=t.max_clock_skew_ms,
            clock_skew_tolerance=t.clock_skew_tolerance,
            duplicate_rate_max=t.duplicate_rate_max,
        )
    if name == STREAM_AGGREGATES:
        return stream_aggregates_suite()
    if name == STREAM_PROGRESS:
        return stream_progress_suite(watermark_lag_max_ms=t.watermark_lag_max_ms)
    raise ValueError(f"suite: unknown suite {name!r} (known: {', '.join(SUITES)})")


def select_for_date(
    name: str,
    table: DataFrame,
    business_date: date,
    report_timezone: str = "UTC",
    tolerance: tuple[ToleranceRule, ...] = (),
) -> DataFrame:
    """The rows of the suite's source table that belong to `business_date`, prepared (derived
    columns added) for the suite: reconciliation rows of the date, events of the date's
    `event_date` partition, stream rows of the date's windows (by window_start in
    `report_timezone`), micro-batches whose watermark crossed the day. `tolerance`: the
    materiality rules the gap suite grades the date with (`gap_frame`)."""
    bounds = business_day_bounds(business_date, report_timezone)
    if name == GAP:
        table = table.where(F.col("business_date") == F.lit(business_date))
    elif name == EVENTS:
        table = table.where(F.col("event_date") == F.lit(business_date))
    elif name == STREAM_AGGREGATES:
        table = table.where(window_in_day(bounds))
    return prepare(name, table, bounds, tolerance)


def prepare(
    name: str,
    frame: DataFrame,
    bounds: DayBounds | None = None,
    tolerance: tuple[ToleranceRule, ...] = (),
) -> DataFrame:
    """Add the suite's derived columns to an already selected frame (tests feed hand-built
    frames, e.g. events with a DOUBLE amount, through this). `bounds` (the day, epoch ms)
    selects the micro-batches of stream_progress; None keeps them all."""
    if name == GAP:
        return gap_frame(frame, tolerance)
    if name == EVENTS:
        return events_frame(frame)
    if name == STREAM_AGGREGATES:
        return stream_aggregates_frame(frame)
    if name == STREAM_PROGRESS:
        return stream_progress_frame(frame, bounds or (-(2**62), 2**62))
    raise ValueError(f"suite: unknown suite {name!r} (known: {', '.join(SUITES)})")
