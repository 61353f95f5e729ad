"""Restatements in the batch layer: which reconciled dates the stream touched after their
latest run, and exactly what they gained (docs/semantics.md, "Dates that change after their
run"; the rules are `tally.restatements`).

    check(spark, warehouse, *, now, policy, tolerance, dedup) -> list[Restatement]

1. **Signal** (`signals`): the stream's own per-date counts of non-duplicate events
   (`stream_progress.new_events_by_date`), summed per date over the micro-batches above the
   date's baseline for its partitions' dates: one small aggregate of `stream_progress`, read
   from the oldest baseline on (its files skipped by their batch_id statistics), whatever the
   number of dates. No scan of the log.
2. **Exact change** (`exact_change`), only for the dates with a signal: the date recomputed
   at the log's latest pin, writing nothing (`reconcile(write=False)`, the run's windowing and
   zone), against the `reconciliation` rows of its latest run: the first arrivals it gained
   (count, amount) and the (window, key) batch totals that differ. A re-delivery the stream
   no longer remembered gives no change: recorded `unchanged`, never a restatement.
3. **Record**: one `restatements` row per date checked (append-only), with the status
   `tally.restatements.decide` gives it. Acting on it (re-running, signing off) is the
   nightly sequence's (`tally_app.restatements`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from batch.reconcile import aware, reconcile, recorded_frontiers, rerun_arguments
from tally import restatements, tables
from tally.dates import epoch_ms
from tally.frontier import NO_APP, Frontier, merged
from tally.money_columns import with_currency
from tally.pins import within
from tally.windows import WINDOW_KEY


@dataclass(frozen=True)
class Candidate:
    """A reconciled date: its latest run, the frontier its signal counts from, its zone."""

    business_date: date
    run: dict[str, Any]
    baseline: Frontier
    report_timezone: str
    # the newest `restatements` row of this run (None: never checked)
    last_check: dict[str, Any] | None = None


@dataclass(frozen=True)
class Restatement:
    """One date checked: the run it restates, the signal, the exact change, the status and the
    log's frontier the check read."""

    business_date: date
    run_time: datetime
    signal: tuple[int, int]
    change: restatements.Change
    status: str
    frontier: Frontier
    run: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # found by an earlier check and still open (`pending`): already announced
    repeated: bool = field(default=False, compare=False)


def candidates(spark: SparkSession, warehouse: str) -> list[Candidate]:
    """Every reconciled date whose latest run recorded its frontiers (a run from before them
    is read by version and not checked), with its baseline."""
    if not tables.exists(spark, warehouse, tables.RECONCILIATION_RUNS.name):
        return []
    runs = _latest_runs(spark, warehouse)
    checked = _checks(spark, warehouse)
    swept = _swept(spark, warehouse)
    out = []
    for run in runs:
        frontiers = recorded_frontiers(run)
        if frontiers is None or tables.EVENTS.name not in frontiers:
            continue
        day = run["business_date"]
        key = (day, epoch_ms(aware(run["run_time"])))
        seen = checked.get(key, [])
        raised = [_frontier(r) for r in (*seen, *swept.get(key, []))]
        baseline = restatements.baseline(frontiers[tables.EVENTS.name], raised)
        zone = str(run["report_timezone"] or "UTC")
        out.append(Candidate(day, run, baseline, zone, seen[-1] if seen else None))
    return out


def _latest_runs(spark: SparkSession, warehouse: str) -> list[dict[str, Any]]:
    """Each date's latest `reconciliation_runs` row (one row a run: a small table)."""
    from tally.ledger_reads import latest_runs

    rows = [
        r.asDict()
        for r in tables.read_table(spark, warehouse, tables.RECONCILIATION_RUNS.name).collect()
    ]
    return latest_runs(rows)


def _checks(spark: SparkSession, warehouse: str) -> dict[tuple[date, int], list[dict[str, Any]]]:
    """Per (date, run time in epoch ms), its `restatements` rows, oldest first (few: one per
    check of a touched date)."""
    if not tables.exists(spark, warehouse, tables.RESTATEMENTS.name):
        return {}
    rows = (
        tables.read_table(spark, warehouse, tables.RESTATEMENTS.name)
        .orderBy("detected_at")
        .collect()
    )
    out: dict[tuple[date, int], list[dict[str, Any]]] = {}
    for r in rows:
        key = (r["business_date"], epoch_ms(aware(r["run_time"])))
        out.setdefault(key, []).append(r.asDict())
    return out


def _swept(spark: SparkSession, warehouse: str) -> dict[tuple[date, int], list[dict[str, Any]]]:
    """Per (date, run time in epoch ms), its `restatement_sweep` row (one per date at most)."""
    if not tables.exists(spark, warehouse, tables.RESTATEMENT_SWEEP.name):
        return {}
    return {
        (r["business_date"], epoch_ms(aware(r["run_time"]))): [r.asDict()]
        for r in tables.read_table(spark, warehouse, tables.RESTATEMENT_SWEEP.name).collect()
    }


def _frontier(row: Mapping[str, Any]) -> Frontier:
    return {str(a): int(b) for a, b in (row["events_frontier"] or {}).items()}


@dataclass(frozen=True)
class Signals:
    """What one read of `stream_progress` gave: per date with any, (events, amount) above its
    baseline; and the frontier of the rows read (None: no table with the signal)."""

    by_date: dict[date, tuple[int, int]]
    frontier: Frontier | None


def signals(spark: SparkSession, warehouse: str, dates: Sequence[Candidate]) -> Signals:
    """Per candidate date, (events, amount) of the stream's non-duplicate events for it above
    its baseline (`tally.restatements.signal`, as one aggregate; dates without any are left
    out), from one version of `stream_progress`, and the batch frontier of that version."""
    if not dates or not tables.exists(spark, warehouse, tables.STREAM_PROGRESS.name):
        return Signals({}, None)
    version = tables.latest_version(spark, warehouse, tables.STREAM_PROGRESS.name)
    progress = tables.read_table(spark, warehouse, tables.STREAM_PROGRESS.name, version)
    if "new_events_by_date" not in progress.columns:  # a table from before the signal
        return Signals({}, None)
    oldest = _oldest(dates)
    above_oldest = progress.where(~F.coalesce(within(oldest), F.lit(False)))
    touched = above_oldest.select(
        F.coalesce("app_id", F.lit("")).alias("app"),
        "batch_id",
        F.col("report_timezone").alias("zone"),
        F.explode("new_events_by_date").alias("day", "events"),
        "new_amount_by_date",
    ).select(
        "app",
        "batch_id",
        "zone",
        "day",
        "events",
        F.coalesce(F.col("new_amount_by_date")[F.col("day")], F.lit(0)).alias("amount"),
    )
    # a row keyed in another zone counts the dates around (tally.restatements.signal)
    same_zone = F.col("zone") == F.col("report_timezone")
    date_matches = F.when(same_zone, F.col("day") == F.col("business_date")).otherwise(
        F.col("day").between(F.date_sub("business_date", 1), F.date_add("business_date", 1))
    )
    above = F.col("batch_id") > F.coalesce(F.col("baseline")[F.col("app")], F.lit(-1))
    matched = touched.join(F.broadcast(_candidate_frame(spark, dates)), date_matches & above)
    rows = (
        matched.groupBy("business_date")
        .agg(F.sum("events").alias("events"), F.sum("amount").alias("amount"))
        .collect()
    )
    by_date = {
        r["business_date"]: (int(r["events"]), int(r["amount"]))
        for r in rows
        if r["events"] or r["amount"]
    }
    return Signals(by_date, merged(oldest, _newest_batches(above_oldest)))


def _newest_batches(progress: DataFrame) -> Frontier:
    """The newest batch per app_id among `progress` rows (a few rows: one per query)."""
    app = F.coalesce("app_id", F.lit(NO_APP)).alias("app")
    rows = progress.groupBy(app).agg(F.max("batch_id").alias("batch")).collect()
    return {str(r["app"]): int(r["batch"]) for r in rows}


def _oldest(dates: Sequence[Candidate]) -> Frontier:
    """The frontier below every candidate's baseline: per app_id named by all of them, the
    smallest batch (an app one of them does not name is above it for that date)."""
    apps = set.intersection(*(set(c.baseline) for c in dates))
    return {app: min(c.baseline[app] for c in dates) for app in sorted(apps)}


def _candidate_frame(spark: SparkSession, dates: Sequence[Candidate]) -> DataFrame:
    rows = [
        (c.business_date, c.report_timezone, {a: int(b) for a, b in c.baseline.items()})
        for c in dates
    ]
    return spark.createDataFrame(
        rows, "business_date DATE, report_timezone STRING, baseline MAP<STRING, BIGINT>"
    )


def exact_change(
    spark: SparkSession, warehouse: str, candidate: Candidate, *, now: datetime, dedup: str
) -> tuple[restatements.Change, Frontier]:
    """The date recomputed at the log's latest pin (writing nothing) against its latest run's
    `reconciliation` rows: the change, and the events frontier read."""
    arguments = rerun_arguments(candidate.run)
    result = reconcile(
        spark,
        warehouse,
        candidate.business_date,
        arguments["window_ms"],
        arguments["report_timezone"],
        now=now,
        settings=arguments["settings"],
        window_slide_ms=arguments["window_slide_ms"],
        session_gap_ms=arguments["session_gap_ms"],
        keep_frames=True,
        write=False,
        dedup=dedup,
        tolerance=arguments["tolerance"],
        currency=arguments["currency"],
    )
    assert result.frames is not None
    try:
        recorded = tables.read_table(spark, warehouse, tables.RECONCILIATION.name).where(
            F.col("business_date") == F.lit(candidate.business_date)
        )
        recorded = with_currency(recorded, arguments["currency"])
        row = gained(result.frames.reconciliation, recorded).first()
        frontiers = recorded_frontiers(result.frames.run) or {}
    finally:
        result.frames.release()
    assert row is not None
    change = restatements.Change(int(row["events"]), int(row["amount"]), int(row["windows"]))
    return change, frontiers.get(tables.EVENTS.name, {})


def gained(recomputed: DataFrame, recorded: DataFrame) -> DataFrame:
    """One row: what the batch side of `recomputed` holds beyond `recorded` (`reconciliation`
    rows of one date): events, the amount, and the (window, key, currency) rows whose batch
    totals differ. Two currencies' amounts are never added: `amount` is the largest change of
    one currency's amount (in its minor units, signed), so the restatement tolerance holds for
    every currency when it holds for it; a date in one currency: its change."""

    def side(rows: DataFrame, name: str) -> DataFrame:
        return rows.select(
            *WINDOW_KEY,
            F.col("batch_count").alias(f"{name}_count"),
            F.col("batch_amount").alias(f"{name}_amount"),
        )

    joined = side(recomputed, "new").join(side(recorded, "old"), list(WINDOW_KEY), "full_outer")
    zero = F.lit(0).cast("long")
    count = F.coalesce("new_count", zero) - F.coalesce("old_count", zero)
    amount = F.coalesce("new_amount", zero) - F.coalesce("old_amount", zero)
    per_currency = joined.groupBy("currency").agg(
        F.coalesce(F.sum(count), zero).alias("events"),
        F.coalesce(F.sum(amount), zero).alias("amount"),
        F.count_if((count != 0) | (amount != 0)).alias("windows"),
    )
    return per_currency.agg(
        F.coalesce(F.sum("events"), zero).alias("events"),
        F.coalesce(F.max_by("amount", F.abs("amount")), zero).alias("amount"),
        F.coalesce(F.sum("windows"), zero).cast("long").alias("windows"),
    )


def check(
    spark: SparkSession,
    warehouse: str,
    *,
    now: datetime,
    policy: str,
    tolerance: tuple[int, int],
    dedup: str = "index",
    only: Sequence[date] | None = None,
) -> list[Restatement]:
    """Check every reconciled date (or those in `only`) and return each one with a signal, and
    each still `pending` from an earlier check (decided again: the policy may have changed).
    The final ones are recorded here (`unchanged`, and `pending` under policy flag); those to
    re-run (`auto_accepted`, `rerun`) are recorded by the caller once re-run (`record`), so a
    re-run that never happened leaves no row and the next check finds the date again."""
    found = candidates(spark, warehouse)
    if only is not None:
        found = [c for c in found if c.business_date in set(only)]
    read = signals(spark, warehouse, found)
    signalled = read.by_date
    out = []
    for candidate in found:
        if candidate.business_date not in signalled:
            last = candidate.last_check
            if (
                last is not None and last["status"] == restatements.PENDING
            ):  # still open: decided again
                earlier = _recorded(candidate, last)  # (the policy may have changed since)
                status = restatements.decide(earlier.change, policy, tolerance)
                out.append(dataclasses.replace(earlier, status=status, repeated=True))
            continue
        change, frontier = exact_change(spark, warehouse, candidate, now=now, dedup=dedup)
        status = restatements.decide(change, policy, tolerance)
        restatement = Restatement(
            candidate.business_date,
            aware(candidate.run["run_time"]),
            signalled[candidate.business_date],
            change,
            status,
            frontier,
            candidate.run,
        )
        if status in (restatements.UNCHANGED, restatements.PENDING):
            record(spark, warehouse, restatement, now=now, policy=policy)
        out.append(restatement)
    if only is None and read.frontier is not None:  # a full check: the dates it found quiet
        quiet = [c for c in found if c.business_date not in signalled]
        sweep(spark, warehouse, quiet, read.frontier, now=now)
    return out


# How often a full check replaces `restatement_sweep`: what a check and the desk read is then
# at most this much of the stream's batches (at the 5 s trigger, ~4,300 rows) past the last
# sweep, at four small Delta commits a day (a check every 5 minutes would make 288).
SWEEP_EVERY = timedelta(hours=6)


def _swept_since(spark: SparkSession, warehouse: str, since: datetime) -> bool:
    """Whether the table holds a sweep from `since` on."""
    if not tables.exists(spark, warehouse, tables.RESTATEMENT_SWEEP.name):
        return False
    newest = (
        tables.read_table(spark, warehouse, tables.RESTATEMENT_SWEEP.name)
        .agg(F.max("swept_at"))
        .first()
    )
    return newest is not None and newest[0] is not None and aware(newest[0]) >= since


def sweep(
    spark: SparkSession,
    warehouse: str,
    quiet: Sequence[Candidate],
    frontier: Frontier,
    *,
    now: datetime,
) -> None:
    """Replace `restatement_sweep` with a row per `quiet` date (its latest run had no signal
    up to `frontier`, the batch frontier the check read): their baselines move up to it, so
    what reads the signal next starts there, not at the run. Nothing quiet, or a sweep
    within `SWEEP_EVERY`: the rows stand (a row stays true for its run: the batches below
    its frontier do not change)."""
    if not quiet or _swept_since(spark, warehouse, now - SWEEP_EVERY):
        return
    rows = [(c.business_date, aware(c.run["run_time"])) for c in quiet]
    frame = spark.createDataFrame(rows, "business_date DATE, run_time TIMESTAMP").select(
        "business_date",
        "run_time",
        tables.literal_map(dict(frontier), "string", "bigint").alias("events_frontier"),
        F.timestamp_millis(F.lit(epoch_ms(now))).alias("swept_at"),
    )
    tables.ensure_table(spark, warehouse, tables.RESTATEMENT_SWEEP)
    tables.write_table(frame, warehouse, tables.RESTATEMENT_SWEEP, replace_where="true")


def _recorded(candidate: Candidate, row: Mapping[str, Any]) -> Restatement:
    """A restatement as an earlier check recorded it."""
    return dataclasses.replace(_restatement_of(row), run=candidate.run)


def _restatement_of(row: Mapping[str, Any]) -> Restatement:
    """A `restatements` row as the restatement it records."""
    change = restatements.Change(
        int(row["new_events"]), int(row["new_amount"]), int(row["windows_affected"])
    )
    return Restatement(
        row["business_date"],
        aware(row["run_time"]),
        (int(row["signal_events"]), int(row["signal_amount"])),
        change,
        str(row["status"]),
        _frontier(row),
    )


def record(
    spark: SparkSession,
    warehouse: str,
    restatement: Restatement,
    *,
    now: datetime,
    policy: str,
    settled: tuple[datetime | None, str, str] = (None, "", ""),
) -> None:
    """Append the restatement's row (`settled`: the run that settled it, who decided and
    why; a later row of the same date and run supersedes it)."""
    rerun_time, decided_by, reason = settled
    row = tables.literal_row(
        spark,
        {
            "business_date": F.lit(restatement.business_date).cast("date"),
            "detected_at": F.timestamp_millis(F.lit(epoch_ms(now))),
            "run_time": F.timestamp_millis(F.lit(epoch_ms(restatement.run_time))),
            "events_frontier": tables.literal_map(dict(restatement.frontier), "string", "bigint"),
            "signal_events": F.lit(restatement.signal[0]).cast("long"),
            "signal_amount": F.lit(restatement.signal[1]).cast("long"),
            "new_events": F.lit(restatement.change.events).cast("long"),
            "new_amount": F.lit(restatement.change.amount).cast("long"),
            "windows_affected": F.lit(restatement.change.windows).cast("long"),
            "status": F.lit(restatement.status),
            "policy": F.lit(policy),
            "rerun_time": F.timestamp_millis(
                F.lit(None if rerun_time is None else epoch_ms(rerun_time)).cast("long")
            ),
            "decided_by": F.lit(decided_by),
            "reason": F.lit(reason),
        },
    )
    tables.ensure_table(spark, warehouse, tables.RESTATEMENTS)
    tables.write_table(row, warehouse, tables.RESTATEMENTS)


def awaiting(spark: SparkSession, warehouse: str) -> list[dict[str, Any]]:
    """The dates re-run beyond the tolerance and not yet decided: each date's newest
    `restatements` row, where its status is `rerun` and its run is still the date's latest
    re-run (a later run of the date settles it otherwise)."""
    if not tables.exists(spark, warehouse, tables.RESTATEMENTS.name):
        return []
    newest: dict[date, dict[str, Any]] = {}
    for runs in _checks(spark, warehouse).values():
        row = runs[-1]
        seen = newest.get(row["business_date"])
        if seen is None or aware(row["detected_at"]) >= aware(seen["detected_at"]):
            newest[row["business_date"]] = row
    latest = {r["business_date"]: aware(r["run_time"]) for r in _latest_runs(spark, warehouse)}
    return [
        row
        for day, row in sorted(newest.items())
        if row["status"] == restatements.RERUN
        and row["rerun_time"] is not None
        and latest.get(day) == aware(row["rerun_time"])
    ]


def decided(
    spark: SparkSession,
    warehouse: str,
    row: Mapping[str, Any],
    *,
    status: str,
    now: datetime,
    decided_by: str,
    reason: str,
) -> None:
    """Append a person's decision on a re-run restatement (`row`: its `rerun` row, from
    `awaiting`): the same restatement, `accepted` or `rejected`, with who and why."""
    if status not in (restatements.ACCEPTED, restatements.REJECTED):
        raise ValueError(f"restatement decision: expected accepted or rejected, got {status!r}")
    restatement = dataclasses.replace(_restatement_of(row), status=status)
    settled = (aware(row["rerun_time"]), decided_by, reason)
    record(spark, warehouse, restatement, now=now, policy=str(row["policy"]), settled=settled)
