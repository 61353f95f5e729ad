"""The report's data: the business date's tables read and reduced to what the report shows
(small, local Python values in `ReportData`), and the exact formatting of its figures.

Reading the recorded run and its settings is `expectations.report_read`; the figures of the
event log (histogram, late events per partition, completeness curve, recommended bound) are
`expectations.report_figures`, from the run's `reconciliation_partitions` rows. Here: the
figures of the reconciliation rows (headline, per window, worst keys), the provenance text and
the `ReportData` they make.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from expectations.report_figures import (
    LogFigures,
    completeness_curve,
    curve_allowed_ms,
    figure_columns,
    log_figures,
    recommended_bound,
)
from expectations.report_read import (
    Reconciliation,
    ReportError,
    ReportInputs,
    ReportOptions,
    completeness_target,
    current_bound,
    date_copies,
    latest_signoff,
    no_log_figures,
    of_date,
    read_reconciliation,
    report_currency,
    run_partition_rows,
)
from tally import tables
from tally.durations import format_duration
from tally.ledger import date_rollup
from tally.money import DEFAULT_CURRENCY, recorded_currency
from tally.money_columns import with_currency
from tally.spark import without_adaptive_execution
from tally.vocabulary import UNEXPLAINED
from tally.windows import describe_windowing as windowing_text

WORST_KEYS = 10


def format_count(count: int) -> str:
    return f"{count:,}"


def format_rate(rate: float | None) -> str:
    return "n/a" if rate is None else f"{rate * 100:.3f} %"


# -- data ------------------------------------------------------------------------------------


@dataclass
class ReportData:
    """Everything the HTML shows, already small and local (collected from Spark)."""

    business_date: date
    now: datetime
    report_timezone: str
    headline: dict[str, int]
    late_event_rate: float | None
    max_lateness_ms: int | None
    # (window_start ms, stream amount, batch amount, late amount, residual amount), all keys
    per_window: list[tuple[int, int, int, int, int]]
    lateness_hist: list[tuple[str, int]]  # (bin label, late events)
    curve: list[dict[str, Any]] | None
    curve_source: str
    current_bound_ms: int | None
    recommended_bound_ms: int | None
    completeness_target: float | None
    worst_keys: list[dict[str, Any]]
    partitions: list[dict[str, Any]]  # partition, events, late, rate
    validation: list[dict[str, Any]]
    data_docs_index: str | None
    provenance: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    # per partition: the lateness bounds in force over the date's micro-batches (`bounds_in_force`)
    bounds: list[dict[str, Any]] = field(default_factory=list)
    window_ms: int | None = None
    signoff: dict[str, Any] | None = None  # the date's newest `signoffs` row (None: pending)
    run_time: datetime | None = None  # the reconciliation run the report shows
    # the first `tally.ledger.COPIES_SHOWN` copies of earlier events the stream counted,
    # beside their first arrivals (`reconciliation_copies` of the run; empty: none counted)
    copies: list[dict[str, Any]] = field(default_factory=list)
    # the date's severity under the materiality tolerances and the rule that decided it
    severity: tuple[str, str] | None = None
    # the currency of `headline`, `per_window` and `worst_keys` (the date's first; the run's
    # `default_currency` for rows from before currencies): how each amount is written
    currency: str = DEFAULT_CURRENCY
    # the same three for each currency of the date, by currency (amounts of two currencies are
    # never added: a date in several has a section for each)
    by_currency: tuple[CurrencyFigures, ...] = ()
    # the first `UNEXPLAINED_SHOWN` UNEXPLAINED windows, largest |residual amount| first, over
    # every currency (each links its records in the desk), and how many there are
    unexplained: list[dict[str, Any]] = field(default_factory=list)
    unexplained_total: int = 0


# The report lists at most this many UNEXPLAINED windows (the CSV has every window).
UNEXPLAINED_SHOWN = 50
UNEXPLAINED_COLUMNS = (
    "window_start",
    "key",
    "currency",
    "batch_count",
    "stream_count",
    "late_count",
    "residual_count",
    "residual_amount",
)


@dataclass(frozen=True)
class CurrencyFigures:
    """One currency's part of the report: its headline, amounts per window and worst keys."""

    currency: str
    headline: dict[str, int]
    per_window: list[tuple[int, int, int, int, int]]
    worst_keys: list[dict[str, Any]]
    late_event_rate: float | None = None  # of this currency's events
    max_lateness_ms: int | None = None


def _ms(column: str) -> Any:
    return F.unix_millis(F.col(column))


# -- the reconciliation rows ---------------------------------------------------------------------


def _headline(recon: DataFrame, summary: dict[str, Any] | None) -> dict[str, int]:
    """Counts and amounts (exact BIGINT sums): the summary's when the batch layer wrote one,
    else summed from the reconciliation rows."""
    names = {
        "stream_count": F.col("stream_count"),
        "stream_amount": F.col("stream_amount"),
        "batch_count": F.col("batch_count"),
        "batch_amount": F.col("batch_amount"),
        "gap_count": F.col("diff_count"),
        "gap_amount": F.col("diff_amount"),
        # explained: the late rows less the copies the stream counted (none in older rows)
        "explained_count": F.col("late_count") - tables.zero_if_absent(recon, "copies_count"),
        "explained_amount": F.col("late_amount") - tables.zero_if_absent(recon, "copies_amount"),
        "unexplained_count": F.col("residual_count"),
        "unexplained_amount": F.col("residual_amount"),
        "copies_count": tables.zero_if_absent(recon, "copies_count"),
        "copies_amount": tables.zero_if_absent(recon, "copies_amount"),
    }
    keys = (*names, "unexplained_windows", "windows")
    recorded = {k: int(summary[k]) for k in keys if summary and summary.get(k) is not None}
    if len(recorded) == len(keys):  # the summary has them all: no pass over the rows
        return recorded
    row = recon.agg(
        *[F.coalesce(F.sum(col), F.lit(0)).cast("long").alias(k) for k, col in names.items()],
        F.count_if(F.col("status") == UNEXPLAINED).cast("long").alias("unexplained_windows"),
        F.count(F.lit(1)).cast("long").alias("windows"),
    ).first()
    assert row is not None
    return {**{k: int(v) for k, v in row.asDict().items()}, **recorded}


def _per_window(recon: DataFrame) -> list[tuple[int, int, int, int, int]]:
    """(window_start ms, stream, batch, late, residual amount) per window, all keys summed."""
    amounts = (
        ("stream_amount", "s"),
        ("batch_amount", "b"),
        ("late_amount", "l"),
        ("residual_amount", "r"),
    )
    return [
        (int(r["w"]), int(r["s"]), int(r["b"]), int(r["l"]), int(r["r"]))
        for r in recon.groupBy(_ms("window_start").alias("w"))
        .agg(*[F.coalesce(F.sum(col), F.lit(0)).cast("long").alias(a) for col, a in amounts])
        .orderBy("w")
        .collect()
    ]


def _worst_keys(recon: DataFrame) -> list[dict[str, Any]]:
    """Up to WORST_KEYS keys with a gap, by |unexplained| desc, then |gap| desc, then key."""
    return [
        r.asDict()
        for r in recon.groupBy("key")
        .agg(
            F.sum("diff_amount").cast("long").alias("gap_amount"),
            F.sum(F.col("late_amount") - tables.zero_if_absent(recon, "copies_amount"))
            .cast("long")
            .alias("explained_amount"),
            F.sum("residual_amount").cast("long").alias("unexplained_amount"),
            F.sum(F.abs("residual_amount")).cast("long").alias("abs_unexplained"),
            F.sum(F.abs("diff_amount")).cast("long").alias("abs_gap"),
            F.count_if(F.col("status") == UNEXPLAINED).alias("unexplained_windows"),
        )
        .where((F.col("abs_gap") != 0) | (F.col("abs_unexplained") != 0))
        .orderBy(F.col("abs_unexplained").desc(), F.col("abs_gap").desc(), "key")
        .limit(WORST_KEYS)
        .collect()
    ]


def _unexplained(recon: DataFrame, count: int) -> list[dict[str, Any]]:
    """The first `UNEXPLAINED_SHOWN` of the date's `count` UNEXPLAINED windows (window rows,
    not events), largest |residual amount| first."""
    if not count:
        return []
    rows = recon.where(F.col("status") == UNEXPLAINED).orderBy(
        F.abs("residual_amount").desc(), "window_start", "key", "currency"
    )
    return [
        r.asDict() for r in rows.select(*UNEXPLAINED_COLUMNS).limit(UNEXPLAINED_SHOWN).collect()
    ]


def _reconciliation_figures(
    recon: DataFrame, summaries: Sequence[dict[str, Any]], business_date: date
) -> tuple[CurrencyFigures, ...]:
    """Per currency of `recon` (its rows with a `currency`, cached by the caller: one read
    for these and the CSV), the headline, the amounts per window and the worst keys."""
    currencies = sorted(r[0] for r in recon.select("currency").distinct().collect())
    if not currencies:
        raise ReportError(
            f"date: {business_date.isoformat()} has no reconciliation rows "
            "(run tally reconcile first)"
        )
    recorded = {s.get("currency"): s for s in summaries}
    sections = []
    for currency in currencies:
        rows = recon.where(F.col("currency") == F.lit(currency))
        # a summary row from before currencies (null) is the date's only one
        summary = recorded.get(currency) or (recorded.get(None) if len(currencies) == 1 else None)
        headline = _headline(rows, summary)
        lateness = (summary or {}).get("max_lateness_ms")
        if summary is None:  # rows of a run without a summary row of this currency
            lateness = rows.agg(F.max("max_lateness_ms")).first()[0]  # type: ignore[index]
        sections.append(
            CurrencyFigures(
                currency,
                headline,
                _per_window(rows),
                _worst_keys(rows),
                _late_event_rate(summary, headline),
                None if lateness is None else int(lateness),
            )
        )
    return tuple(sections)


def _counts_of(sections: Sequence[CurrencyFigures]) -> dict[str, int]:
    """The counts of every currency's headline summed (events are events in any currency)."""
    keys = [k for k in sections[0].headline if not k.endswith("_amount")]
    return {k: sum(s.headline[k] for s in sections) for k in keys}


def _late_event_rate(summary: dict[str, Any] | None, headline: dict[str, int]) -> float | None:
    rate = summary.get("late_event_rate") if summary else None
    if rate is None and headline["batch_count"]:
        rate = headline["explained_count"] / headline["batch_count"]
    return None if rate is None else float(rate)


# -- validation, provenance ---------------------------------------------------------------------


def _data_docs_uri(gx_root: str | None) -> str | None:
    from expectations.validate import data_docs_index

    if gx_root is None:
        return None
    index = data_docs_index(gx_root)
    return index.resolve().as_uri() if index.is_file() else None


def _fmt_ts(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        # Spark returns session-time (UTC) naive datetimes.
        value = value if value.tzinfo else value.replace(tzinfo=UTC)
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return str(value)


def describe_windowing(window_ms: Any, settings: Mapping[str, Any]) -> str | None:
    """The window kind and its parameters, as the run recorded them: `tumbling 1m`,
    `hopping 5m every 1m` or `session, gap 10s` (a run from before hopping windows recorded
    no slide: tumbling; one from before session windows no gap: fixed windows)."""
    gap = int(settings.get("session_gap_ms") or 0)
    if not window_ms and not gap:
        return None
    size = int(window_ms or gap)  # a session run's curve window is not part of its windowing
    slide = settings.get("window_slide_ms")
    return windowing_text(size, int(slide) if slide else None, gap)


def bounds_in_force(run: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Per partition, the lateness bounds in force the reconciliation recorded (over the
    micro-batches that carried the date): `partition`, `min_ms`, `max_ms`, `last_ms`, by
    partition; [] when it recorded none (no stream_progress, or a run from before)."""
    run = run or {}
    lows, highs, lasts = (
        run.get(c) or {}
        for c in (
            "partition_lateness_min_ms",
            "partition_lateness_max_ms",
            "partition_lateness_last_ms",
        )
    )
    return [
        {"partition": p, "min_ms": lows[p], "max_ms": highs[p], "last_ms": lasts[p]}
        for p in sorted(lows)
        if p in highs and p in lasts
    ]


def describe_bound(b: Mapping[str, Any]) -> str:
    """One partition's bounds in force: `30s` when it never changed, else the range and the
    last one, `1s–17222ms, last 1s`."""
    if b["min_ms"] == b["max_ms"]:
        return format_duration(int(b["min_ms"]))
    return (
        f"{format_duration(int(b['min_ms']))}–{format_duration(int(b['max_ms']))}, "
        f"last {format_duration(int(b['last_ms']))}"
    )


def describe_bounds(bounds: Sequence[Mapping[str, Any]]) -> str | None:
    """All partitions' bounds in force in one line, consecutive partitions with the same
    bounds together: `partitions 0-2: 30s` or `partition 0: 1s–17222ms, last 1s; ...`."""
    groups: list[tuple[int, int, str]] = []  # (first partition, last partition, text)
    for b in bounds:
        text, p = describe_bound(b), int(b["partition"])
        if groups and groups[-1][2] == text and groups[-1][1] == p - 1:
            groups[-1] = (groups[-1][0], p, text)
        else:
            groups.append((p, p, text))
    parts = [
        f"partition {lo}: {text}" if lo == hi else f"partitions {lo}-{hi}: {text}"
        for lo, hi, text in groups
    ]
    return "; ".join(parts) or None


def _provenance(
    now: datetime, rec: Reconciliation, window_ms: Any, validation: list[dict[str, Any]]
) -> dict[str, Any]:
    """The Delta versions the reconciliation pinned, the run times, the window and zone."""
    provenance: dict[str, Any] = {
        "report generated": now.astimezone(UTC).isoformat(),
        "reconciliation read": f"v{rec.version}",
    }
    if rec.run:
        provenance.update(
            {
                "reconciliation run": _fmt_ts(rec.run.get("run_time")),
                "events version (pinned)": rec.run.get("events_version"),
                "stream_aggregates version (pinned)": rec.run.get("stream_aggregates_version"),
                "late_events version (pinned)": rec.run.get("late_events_version"),
                "window": format_duration(int(window_ms)) if window_ms else None,
                "windows": describe_windowing(window_ms, rec.settings),
                "report time zone": rec.zone,
                "stream_progress version (pinned)": rec.run.get("stream_progress_version"),
                "lateness bounds in force": describe_bounds(bounds_in_force(rec.run)),
            }
        )
    else:
        provenance["reconciliation run"] = "not recorded (no reconciliation_runs row)"
    if validation:
        provenance["validation run"] = _fmt_ts(max(r["run_time"] for r in validation))
    return provenance


# -- all of it -----------------------------------------------------------------------------------


def collect_report_data(
    spark: SparkSession,
    warehouse: str,
    business_date: date,
    now: datetime,
    options: ReportOptions | None = None,
    inputs: ReportInputs | None = None,
) -> tuple[ReportData, DataFrame]:
    """Read the date's tables (or take the caller's `inputs`) and reduce them to what the
    report shows; also returns the reconciliation rows of the date (for the CSV), persisted:
    the caller unpersists them (unless they are the `inputs`')."""
    options = options or ReportOptions()
    with without_adaptive_execution(spark):  # small tables: AQE would only add jobs
        rec = read_reconciliation(spark, warehouse, business_date, options.report_timezone, inputs)
    report_currency(rec.run, business_date)  # a recorded default_currency that is no code
    when = (business_date, now)
    if inputs is not None:
        return _assemble(spark, warehouse, when, options, rec, inputs.reconciliation), (
            inputs.reconciliation
        )
    # Read once for the figures and the CSV.
    recorded = of_date(spark, warehouse, "reconciliation", business_date, rec.version)
    # rows of a run from before currencies are in that run's currency
    recon = with_currency(recorded, recorded_currency(rec.settings)).persist()
    with contextlib.ExitStack() as on_failure:
        on_failure.callback(recon.unpersist)
        data = _assemble(spark, warehouse, when, options, rec, recon)
        on_failure.pop_all()  # built: the rows are the caller's
    return data, recon


def _nothing_logged(totals: Mapping[str, int]) -> bool:
    """The reconciliation counted no batch event and no late row: a run of such a date writes
    no `reconciliation_partitions` rows (the log holds nothing of it), and its figures of the
    log are all 0."""
    late_rows = totals["explained_count"] + totals["copies_count"]
    return totals["batch_count"] == 0 and late_rows == 0


def _log_figures(
    spark: SparkSession,
    warehouse: str,
    business_date: date,
    rec: Reconciliation,
    options: ReportOptions,
    totals: Mapping[str, int],
) -> LogFigures:
    """The event log's figures from the run's `reconciliation_partitions` rows
    (`batch.partitions`, their one source); a run that recorded none for a date with events
    or late rows (a run of an earlier version) is a ReportError naming the command to run."""
    allowed_ms = curve_allowed_ms(options.curve, current_bound(options, rec.settings), rec.settings)
    rows = run_partition_rows(spark, warehouse, business_date, rec, figure_columns(allowed_ms))
    if not rows and not _nothing_logged(totals):
        raise no_log_figures(business_date, rec.run)
    return log_figures(rows, allowed_ms)


def _assemble(
    spark: SparkSession,
    warehouse: str,
    when: tuple[date, datetime],
    options: ReportOptions,
    rec: Reconciliation,
    recon: DataFrame,
) -> ReportData:
    """The report's figures from the read tables and the date's rows (`recon`, cached);
    `when` is (business date, now)."""
    from expectations.validate import read_results

    business_date, now = when
    with without_adaptive_execution(spark):  # the date's rows, cached, and validation_results
        sections = _reconciliation_figures(recon, rec.summaries, business_date)
        validation = (
            rec.inputs.validation
            if rec.inputs is not None
            else read_results(spark, warehouse, business_date)
        )
    first, totals = sections[0], _counts_of(sections)
    figures = _log_figures(spark, warehouse, business_date, rec, options, totals)
    summary = date_rollup(rec.summaries)
    current_bound_ms = current_bound(options, rec.settings)
    target = completeness_target(options, rec.settings)
    curve, curve_source = completeness_curve(
        options.curve, figures.counts, totals["batch_count"], current_bound_ms
    )
    window_ms = (rec.run or {}).get("window_ms") or rec.settings.get("window_ms")
    return ReportData(
        business_date=business_date,
        now=now,
        report_timezone=rec.zone,
        headline=first.headline,
        late_event_rate=_late_event_rate(summary, totals),
        max_lateness_ms=(summary or {}).get("max_lateness_ms"),
        per_window=first.per_window,
        lateness_hist=figures.counts.hist,
        curve=curve,
        curve_source=curve_source,
        current_bound_ms=current_bound_ms,
        recommended_bound_ms=recommended_bound(options.recommended_bound_ms, curve, target),
        completeness_target=target,
        worst_keys=first.worst_keys,
        partitions=figures.partitions,
        validation=validation,
        data_docs_index=_data_docs_uri(options.gx_root),
        provenance=_provenance(now, rec, window_ms, validation),
        settings=rec.settings,
        bounds=bounds_in_force(rec.run),
        # sessions have no one width: the per-window chart draws its narrowest bars
        window_ms=int(window_ms) if window_ms and not rec.is_sessions else None,
        signoff=latest_signoff(spark, warehouse, business_date),
        run_time=(rec.run or {}).get("run_time"),
        copies=date_copies(spark, warehouse, business_date) if totals.get("copies_count") else [],
        severity=_severity(summary),
        currency=first.currency,
        by_currency=sections,
        unexplained=_unexplained(recon, totals["unexplained_windows"]),
        unexplained_total=totals["unexplained_windows"],
    )


def _severity(summary: dict[str, Any] | None) -> tuple[str, str] | None:
    """The date's severity under the materiality tolerances and its rule (None: a run from
    before them)."""
    if not summary or summary.get("severity") is None:
        return None
    return str(summary["severity"]), str(summary["tolerance_rule"])
