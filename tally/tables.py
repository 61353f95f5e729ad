"""The Delta table catalog: names, schemas and locations under the warehouse.

The warehouse is any Hadoop-compatible URI (a local directory, `s3a://bucket/prefix`, ...):
locations are joined as strings, never with local path functions.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType


@dataclass(frozen=True)
class Table:
    name: str
    ddl: str
    description: str
    partition_by: tuple[str, ...] = ()
    internal: bool = False
    # The natural key, in the order people read the table (`tally show` sorts by it).
    order_by: tuple[str, ...] = ()
    # Delta table properties set when the table is created.
    properties: tuple[tuple[str, str], ...] = ()

    def schema(self) -> StructType:
        return schema_of(self.ddl)


def schema_of(ddl: str) -> StructType:
    """The struct type of a DDL column list (a new object each call)."""
    return StructType.fromJson(_schema_json(ddl))


@functools.cache
def _schema_json(ddl: str) -> dict[str, Any]:
    # PySpark parses DDL in the JVM (a Py4J call, ~3 ms for `events`); a stream asks for the
    # same few schemas every micro-batch.
    schema = StructType.fromDDL(ddl)
    assert isinstance(schema, StructType)
    return schema.jsonValue()


# Tables the stream commits to every micro-batch: a Delta checkpoint every 100 commits instead
# of 10 (a checkpoint of a growing table costs more than the small commit that triggers it).
_EVERY_BATCH = (("delta.checkpointInterval", "100"),)


# The stream's tables are an append-only log: Delta refuses a delete or update of them, so a
# reconciliation's pin of them survives compaction, VACUUM and log cleanup as a batch frontier
# (tally/pins.py; NOT row tracking, which made each small append 3-4x slower: measured there).
APPEND_ONLY_LOG = (("delta.appendOnly", "true"),)


def _stats_on(*columns: str) -> tuple[tuple[str, str], ...]:
    """A stream table's properties with file statistics only on `columns`: the stream's replay
    check (app_id, batch_id) and the time ranges readers select by. Statistics on every column
    (Delta's default: the first 32) cost a small append ~0.06 s more (measured: median of 20
    appends of 40 rows 0.28 -> 0.22 s); a micro-batch makes up to five."""
    return (
        *_EVERY_BATCH,
        *APPEND_ONLY_LOG,
        ("delta.dataSkippingStatsColumns", ",".join(columns)),
    )


_SOURCE = (
    "source_file STRING, source_line BIGINT, batch_id BIGINT, ingest_time TIMESTAMP, app_id STRING"
)
# `currency`: the event's, or `default_currency` when it named none; null in rows written before
# events carried one (read as the `default_currency` of the run that reads them).
_PAYLOAD = (
    "event_id STRING, key STRING, amount BIGINT, event_time TIMESTAMP, partition INT, "
    "extra MAP<STRING, STRING>, currency STRING"
)

EVENTS = Table(
    "events",
    f"{_PAYLOAD}, arrival_status STRING, clock_skewed BOOLEAN, source_mtime TIMESTAMP, "
    f"{_SOURCE}, event_date DATE",
    "Every valid event (on time, late or duplicate): the event-sourced log the nightly job "
    "re-aggregates. arrival_status is on_time, allowed_late, late or duplicate.",
    partition_by=("event_date",),
    # File statistics only where a reader skips files with them: the stream's replay check
    # (app_id, batch_id) and time ranges. Stats on every column cost ~40 % of an append of
    # 200k events (measured; see docs/benchmarks.md); dates prune by partition anyway.
    properties=_stats_on("app_id", "batch_id", "event_time"),
    order_by=("event_date", "event_time", "event_id", "batch_id"),
)
QUARANTINE = Table(
    "quarantine",
    f"raw_line STRING, reason STRING, {_SOURCE}",
    "Input lines that are not valid events, with the raw line and the reason.",
    properties=_stats_on("app_id", "batch_id"),
    order_by=("batch_id", "source_file", "source_line"),
)
LATE_EVENTS = Table(
    "late_events",
    f"{_PAYLOAD}, window_start TIMESTAMP, window_end TIMESTAMP, watermark_at_arrival TIMESTAMP, "
    f"lateness_ms BIGINT, arrival_delay_ms BIGINT, reason STRING, {_SOURCE}",
    "The late side output: events whose window had closed (beyond allowed lateness) when "
    "they arrived, with the watermark at arrival and how late they were; one row per late "
    "(event, window), so a hopping event can have a row for each of its closed windows.",
    properties=_stats_on("app_id", "batch_id", "window_start", "event_time"),
    order_by=("window_start", "key", "event_time", "event_id"),
)
STREAM_AGGREGATES = Table(
    "stream_aggregates",
    "window_start TIMESTAMP, window_end TIMESTAMP, key STRING, event_count BIGINT, "
    "amount_sum BIGINT, revision INT, emit_time TIMESTAMP, watermark_at_emit TIMESTAMP, "
    "batch_id BIGINT, app_id STRING, final BOOLEAN, retracted BOOLEAN, currency STRING",
    "Provisional window totals per window, key and currency, emitted when the watermark passes "
    "the window end; allowed-lateness updates append a higher revision. With early firings, "
    "rows with final = false are early, speculative totals of a window still open; the final "
    "rows supersede them (final is null in rows from before early firings: they are final). "
    "Session windows: retracted = true withdraws a session another one absorbed (the current "
    "sessions are the highest revision per window, key and currency, minus the retracted). "
    "currency: null in rows from before amounts carried one (read as the default_currency).",
    properties=_stats_on("app_id", "batch_id", "window_start"),
    order_by=("window_start", "key", "revision"),
)
STREAM_PROGRESS = Table(
    "stream_progress",
    "batch_id BIGINT, app_id STRING, processing_time TIMESTAMP, watermark_before TIMESTAMP, "
    "watermark_after TIMESTAMP, partition_high_water MAP<INT, TIMESTAMP>, "
    "partition_last_seen MAP<INT, TIMESTAMP>, partition_idle MAP<INT, BOOLEAN>, "
    "input_lines BIGINT, valid_events BIGINT, on_time_events BIGINT, allowed_late_events BIGINT, "
    "late_events BIGINT, duplicate_events BIGINT, quarantined_lines BIGINT, "
    "clock_skewed_events BIGINT, windows_emitted BIGINT, open_windows BIGINT, "
    "watermark_lag_ms BIGINT, partition_spread_ms BIGINT, batch_duration_ms BIGINT, "
    "drained BOOLEAN, window_state_version BIGINT, dedup_state_version BIGINT, "
    "events_version BIGINT, control_records BIGINT, "
    "partition_source_watermark MAP<INT, TIMESTAMP>, partition_unheard MAP<INT, TIMESTAMP>, "
    "source_watermark_regressions MAP<INT, BIGINT>, "
    "source_watermark_regression_ms MAP<INT, BIGINT>, partition_lateness_ms MAP<INT, BIGINT>, "
    "partition_delay_weights MAP<INT, MAP<INT, BIGINT>>, partition_delays_measured "
    "MAP<INT, BIGINT>, new_events_by_date MAP<DATE, BIGINT>, "
    "new_amount_by_date MAP<DATE, BIGINT>, report_timezone STRING",
    "One row per micro-batch: watermark before/after, per-partition high-water marks and "
    "idle flags, counts, lag, spread, duration; window_state_version and dedup_state_version "
    "name the batch whose state files (in the checkpoint) hold the state after it; "
    "control_records and partition_source_watermark: the batch's control records and each "
    "partition's source watermark after it (null in rows from before source watermarks); "
    "source_watermark_regressions and source_watermark_regression_ms: per partition, the "
    "batch's control records below the partition's source watermark and the largest such gap; "
    "partition_unheard: expected partitions that have reported nothing yet, and since when "
    "they are expected (the watermark waits for them); partition_lateness_ms: the lateness "
    "bound in force per known partition after the batch (fixed, or chosen by lateness auto); "
    "partition_delay_weights and partition_delays_measured: lateness auto's delay histogram "
    "per partition ((event-time slot mod 6) * 128 + bucket -> events over its one-minute "
    "horizon) and events measured (its checkpointed state); new_events_by_date and "
    "new_amount_by_date: per business date (in report_timezone) whose windows can hold "
    "them, the batch's events that are not duplicates (on_time, allowed_late, late) and their "
    "amount: what a reconciled date can have gained since its run (restatements; null in rows "
    "from before).",
    properties=_stats_on("app_id", "batch_id", "processing_time"),
    order_by=("processing_time", "app_id", "batch_id"),
)
# -- the nightly layer's tables (batch/, expectations/, the DAGs) ------------------------------

BATCH_AGGREGATES = Table(
    "batch_aggregates",
    "business_date DATE, window_start TIMESTAMP, window_end TIMESTAMP, key STRING, "
    "event_count BIGINT, amount_sum BIGINT, currency STRING",
    "The nightly re-aggregation of the event log (deduplicated by event_id, first "
    "arrival wins): the true window totals of a business date, per window, key and "
    "currency (currency null in rows of runs from before currencies).",
    partition_by=("business_date",),
    order_by=("business_date", "window_start", "key"),
)
RECONCILIATION = Table(
    "reconciliation",
    "business_date DATE, window_start TIMESTAMP, window_end TIMESTAMP, key STRING, "
    "stream_count BIGINT, stream_amount BIGINT, batch_count BIGINT, batch_amount BIGINT, "
    "diff_count BIGINT, diff_amount BIGINT, late_count BIGINT, late_amount BIGINT, "
    "residual_count BIGINT, residual_amount BIGINT, max_lateness_ms BIGINT, status STRING, "
    "run_time TIMESTAMP, copies_count BIGINT, copies_amount BIGINT, severity STRING, "
    "tolerance_rule STRING, currency STRING",
    "Per window, key and currency of a business date: stream answer vs batch truth vs late side "
    "output vs copies of earlier events the stream counted (beyond its dedup horizon); "
    "diff = batch - stream, residual = diff - late + copies; status MATCH, "
    "EXPLAINED_BY_LATE, EXPLAINED_BY_COPIES, MISSING_IN_STREAM or UNEXPLAINED; run_time: the "
    "reconciliation_runs row of the run that wrote them (null in rows of earlier runs); "
    "copies_*: null in rows of runs from before copies were counted; severity (ok, warn, "
    "fail) of the residual under the materiality tolerance rule named in tolerance_rule "
    "(none: no rule matched; both null in rows of runs from before tolerances); currency: "
    "the amounts' (null in rows of runs from before currencies).",
    partition_by=("business_date",),
    order_by=("business_date", "window_start", "key"),
)
RECONCILIATION_SUMMARY = Table(
    "reconciliation_summary",
    "business_date DATE, windows BIGINT, stream_count BIGINT, stream_amount BIGINT, "
    "batch_count BIGINT, batch_amount BIGINT, gap_count BIGINT, gap_amount BIGINT, "
    "explained_count BIGINT, explained_amount BIGINT, unexplained_windows BIGINT, "
    "unexplained_count BIGINT, unexplained_amount BIGINT, unexplained_abs_amount BIGINT, "
    "late_events BIGINT, late_amount BIGINT, late_event_rate DOUBLE, "
    "max_lateness_ms BIGINT, worst_keys ARRAY<STRING>, match_windows BIGINT, "
    "explained_by_late_windows BIGINT, missing_in_stream_windows BIGINT, "
    "copies_count BIGINT, copies_amount BIGINT, explained_by_copies_windows BIGINT, "
    "severity STRING, tolerance_rule STRING, currency STRING",
    "One row per business date and currency (amounts of two currencies are never added; a "
    "date without windows: one row in the run's default_currency; currency null in rows of "
    "runs from before currencies): totals, gap = batch - stream, explained = late side "
    "output totals less the copies the stream counted (copies_*), unexplained = sum of "
    "residuals (gap = explained + unexplained), late rate, worst keys and status counts; "
    "the (date, currency)'s severity under the materiality tolerances and the rule that "
    "decided it (null in rows of runs from before tolerances).",
    partition_by=("business_date",),
    order_by=("business_date",),
)
RECONCILIATION_RUNS = Table(
    "reconciliation_runs",
    "business_date DATE, run_time TIMESTAMP, events_version BIGINT, "
    "stream_aggregates_version BIGINT, late_events_version BIGINT, window_ms BIGINT, "
    "report_timezone STRING, settings STRING, windows BIGINT, stream_count BIGINT, "
    "stream_amount BIGINT, batch_count BIGINT, batch_amount BIGINT, gap_count BIGINT, "
    "gap_amount BIGINT, late_events BIGINT, unexplained_windows BIGINT, "
    "unexplained_amount BIGINT, balanced BOOLEAN, stream_progress_version BIGINT, "
    "partition_lateness_min_ms MAP<INT, BIGINT>, partition_lateness_max_ms MAP<INT, BIGINT>, "
    "partition_lateness_last_ms MAP<INT, BIGINT>, "
    "pin_frontiers MAP<STRING, MAP<STRING, BIGINT>>, run_number BIGINT, "
    "currencies ARRAY<STRING>",
    "Every reconciliation run of each business date (append-only, keyed by business_date "
    "and run_time; a date's latest run is its answer): the Delta versions it read, its "
    "settings (JSON) and headline numbers; re-running at these pins reproduces it. "
    "stream_progress_version and partition_lateness_*_ms: the stream_progress version read "
    "and, per partition, the smallest, largest and last lateness bound in force (fixed or "
    "chosen by lateness auto) over the micro-batches that carried the date (null in rows "
    "of earlier runs and without a stream_progress table). pin_frontiers: per stream table "
    "read, its batch frontier at the version read (app_id -> newest batch_id; tally.pins), "
    "which reads the same rows after compaction, VACUUM and log cleanup (null in rows of "
    "earlier runs: their pins are read by version). run_number: the run's number among its "
    "date's runs in the order recorded (null in a row from before run history). currencies: "
    "the currencies of the date's summary rows; with more than one, the amount columns are "
    "null (each currency's are in reconciliation_summary; null in rows from before "
    "currencies: one currency, the settings' default_currency).",
    partition_by=("business_date",),
    order_by=("business_date",),
)
RECONCILIATION_COPIES = Table(
    "reconciliation_copies",
    "business_date DATE, window_start TIMESTAMP, window_end TIMESTAMP, key STRING, "
    "event_id STRING, amount BIGINT, event_time TIMESTAMP, arrival_status STRING, "
    "ingest_time TIMESTAMP, batch_id BIGINT, app_id STRING, source_file STRING, "
    "source_line BIGINT, first_event_date DATE, first_event_time TIMESTAMP, first_key STRING, "
    "first_amount BIGINT, first_ingest_time TIMESTAMP, first_source_file STRING, "
    "first_source_line BIGINT, run_time TIMESTAMP, currency STRING, first_currency STRING",
    "The evidence of EXPLAINED_BY_COPIES: per business date, each copy of an earlier event "
    "that the stream counted into one of the date's windows (its id forgotten beyond the "
    "dedup horizon), one row per (line, window), beside its event_id's first arrival "
    "(first_*: the line the batch counts, under its own date). run_time: the "
    "reconciliation_runs row of the run that wrote them.",
    partition_by=("business_date",),
    order_by=("business_date", "window_start", "key", "event_id"),
)
RECONCILIATION_EVIDENCE = Table(
    "reconciliation_evidence",
    "business_date DATE, window_start TIMESTAMP, window_end TIMESTAMP, key STRING, "
    "currency STRING, kind STRING, rank BIGINT, kind_rows BIGINT, never_counted_rows BIGINT, "
    "event_id STRING, event_time TIMESTAMP, amount BIGINT, arrival_status STRING, "
    "partition INT, app_id STRING, batch_id BIGINT, source_file STRING, source_line BIGINT, "
    "ingest_time TIMESTAMP, in_late BOOLEAN, counted_by_stream BOOLEAN, "
    "first_arrival BOOLEAN, lateness_ms BIGINT, revision INT, event_count BIGINT, "
    "amount_sum BIGINT, emit_time TIMESTAMP, watermark_at_emit TIMESTAMP, final BOOLEAN, "
    "retracted BOOLEAN, stream_window_start TIMESTAMP, stream_window_end TIMESTAMP, "
    "run_time TIMESTAMP",
    "The records behind each UNEXPLAINED window of a business date (docs/semantics.md, "
    '"Evidence of an unexplained window"), replaced with the date\'s run: per window, key '
    "and currency, kind event (its first arrivals in the pinned log: arrival status, batch, "
    "source file and line or Kafka topic/partition and offset; in_late: it has a late row "
    "there; counted_by_stream: the window's answer (sessions: the stream session holding it) "
    "was emitted by its stream at or after its micro-batch; neither: the stream never counted "
    "it), kind late (its late side-output rows; first_arrival: the row can explain) and kind "
    "revision (every stream_aggregates row of it, its own span in stream_window_start/_end: "
    "session windows place the stream's sessions in the batch session holding them); at most "
    "evidence_rows rows of each kind (rank: 1 first, never-counted events before the others), "
    "kind_rows: how many it has in all, never_counted_rows: its first "
    "arrivals the stream never counted. run_time: the reconciliation_runs row of the run.",
    partition_by=("business_date",),
    order_by=("business_date", "window_start", "key", "currency", "kind", "rank"),
)
RECONCILIATION_PARTITIONS = Table(
    "reconciliation_partitions",
    "business_date DATE, run_time TIMESTAMP, partition INT, events BIGINT, late_events BIGINT, "
    "lateness ARRAY<STRUCT<lateness_ms: BIGINT, late_rows: BIGINT>>",
    "Per business date and source partition, what the report shows of the event log, "
    "written by the reconciliation (run_time: its reconciliation_runs row's): the date's "
    "events and late events on the partition (event time in the day; duplicates and late "
    "rows repeating an earlier event left out), and the late side-output rows explaining "
    "the date's windows (first arrivals) counted per lateness_ms.",
    partition_by=("business_date",),
    order_by=("business_date", "partition"),
)
VALIDATION_RESULTS = Table(
    "validation_results",
    "business_date DATE, suite STRING, check_name STRING, expectation STRING, "
    "column_name STRING, kwargs STRING, success BOOLEAN, severity STRING, "
    "observed_value STRING, unexpected_count BIGINT, element_count BIGINT, "
    "description STRING, exception STRING, source_table STRING, source_version BIGINT, "
    "data_docs_page STRING, run_time TIMESTAMP",
    "One row per expectation per suite run of a business date (Great Expectations): "
    "what was checked, success, severity, the observed value as text, the Delta version "
    "of the table validated and the Data Docs page; a re-run replaces the date's suite.",
    partition_by=("business_date",),
    order_by=("business_date", "suite", "check_name"),
)
ALERTS = Table(
    "alerts",
    "alert_time TIMESTAMP, dag_id STRING, task_id STRING, run_id STRING, business_date DATE, "
    "severity STRING, what STRING, observed STRING, threshold STRING, report_link STRING, "
    "log_link STRING",
    "One row per alert: when, which DAG/task/run and business date, severity, what failed, "
    "the observed value and the threshold, links to the report and the task log.",
    order_by=("alert_time", "dag_id", "task_id"),
)
SIGNOFFS = Table(
    "signoffs",
    "business_date DATE, decision STRING, decided_by STRING, decided_at TIMESTAMP, "
    "reason STRING, status STRING, run_time TIMESTAMP, dag_id STRING, run_id STRING, "
    "tier INT, step STRING, proposed STRING, prepared_by STRING, approved_by STRING",
    "Append-only: every step of the sign-off of a business date, who decided what, when and "
    "why: decision auto (a balanced date), accepted (a person accepted an unbalanced date, "
    "with a reason), rejected (the date stays open), timed_out (nobody answered in time), "
    "and with two people (tier 2: a material gap) prepared (the first person's proposal, in "
    "proposed: accepted or rejected), sent_back (the second person returned it) or "
    "self_approval_refused (the preparer tried to approve); status is the date's status when "
    "asked; run_time, dag_id and run_id name the reconciliation run it refers to "
    "(reconciliation_runs.run_time and the Airflow run); tier 0 automatic, 1 one person, 2 "
    "two people; step decide (tier 0 and 1), prepare or approve; prepared_by and approved_by "
    "the two people of a tier-2 decision (tier, step, proposed, prepared_by and approved_by "
    "null in rows from before four eyes).",
    order_by=("business_date", "decided_at"),
)
OPEN_ITEMS = Table(
    "open_items",
    "business_date DATE, status STRING, kind STRING, owner STRING, opened_at TIMESTAMP, "
    "changed_at TIMESTAMP, resolution STRING, resolved_by STRING, alerted_periods INT, "
    "run_time TIMESTAMP",
    "Append-only: every change of a business date someone must act on (tally/open_items.py): "
    "a date's newest row (by changed_at) is its item. status open (kind: unexplained, "
    "unexplained_warn, validation_failed, awaiting_approval, sent_back, rejected or timed_out; "
    "owner: who must act), accepted (a person accepted it: resolution is the reason, "
    "resolved_by who) or resolved (a later run signed it off by itself); opened_at: when it "
    "opened (its age counts from there); alerted_periods: how many aging_max periods an "
    "aging alert has been sent for; run_time: the reconciliation run it is about.",
    order_by=("business_date", "changed_at"),
)
RESTATEMENTS = Table(
    "restatements",
    "business_date DATE, detected_at TIMESTAMP, run_time TIMESTAMP, "
    "events_frontier MAP<STRING, BIGINT>, signal_events BIGINT, signal_amount BIGINT, "
    "new_events BIGINT, new_amount BIGINT, windows_affected BIGINT, status STRING, "
    "policy STRING, rerun_time TIMESTAMP, decided_by STRING, reason STRING",
    "Append-only: every check of a reconciled date that the stream's later micro-batches "
    'touched (docs/semantics.md, "Dates that change after their run"): the run it '
    "restates (run_time), the event log's batch frontier checked (events_frontier), the "
    "stream's count of non-duplicate events since (signal_*), what the date's first arrivals "
    "gained against the run, exactly (new_events, new_amount: of a date in several "
    "currencies the largest change of one, windows_affected: (window, key, currency) totals "
    "that differ), and the status: unchanged (no restatement), pending (policy "
    "flag), auto_accepted (re-run and signed off within the tolerance), rerun (re-run, "
    "awaiting sign-off), accepted or rejected (by a person); rerun_time: the run that "
    "settled it. A date and run's newest row is its state.",
    order_by=("business_date", "detected_at"),
)
RESTATEMENT_SWEEP = Table(
    "restatement_sweep",
    "business_date DATE, run_time TIMESTAMP, events_frontier MAP<STRING, BIGINT>, "
    "swept_at TIMESTAMP",
    "The newest sweep of a full restatement check, replaced at most every 6 hours "
    '(docs/semantics.md, "Dates that '
    'change after their run"): per reconciled date whose latest run (run_time) it found '
    "no signal for, the event log's batch frontier it read (events_frontier). That run's "
    "signal counts from there on: the next check and the desk read only the stream_progress "
    "rows after it, not every row since the date's run.",
    order_by=("business_date",),
)
LATENESS_RECOMMENDATIONS = Table(
    "lateness_recommendations",
    "period_start DATE, period_end DATE, run_time TIMESTAMP, window_ms BIGINT, "
    "events BIGINT, events_version BIGINT, target_pct DOUBLE, configured_lateness_ms BIGINT, "
    "configured_completeness_pct DOUBLE, configured_meets_target BOOLEAN, "
    "recommended_lateness_ms BIGINT, recommended_completeness_pct DOUBLE, curve STRING, "
    # Added with per-source lateness: null in rows of earlier runs (add_missing_columns).
    "recommended_by_partition MAP<INT, BIGINT>, configured_by_partition MAP<INT, BIGINT>, "
    "configured_completeness_by_partition MAP<INT, DOUBLE>, "
    "partitions_missing_target ARRAY<INT>, curve_by_partition STRING, "
    # Added with lateness auto: null in rows of earlier runs.
    "in_force_min_by_partition MAP<INT, BIGINT>, in_force_max_by_partition MAP<INT, BIGINT>, "
    "in_force_last_by_partition MAP<INT, BIGINT>, "
    "in_force_completeness_by_partition MAP<INT, DOUBLE>, partitions_short_of_curve ARRAY<INT>",
    "One row per tuning period: the lateness curve over its days' events, the smallest "
    "lateness bound reaching the completeness target, and how the configured bound does; "
    "the same per source partition with events (each replayed alone): the smallest bound "
    "of each (null: none reaches the target), its configured bound and completeness there, "
    "those missing the target, and that curve (JSON); against it, the bounds the stream had "
    "in force (stream_progress: fixed, or chosen by lateness auto) per partition over the "
    "period's micro-batches (smallest, largest, last), the curve's completeness at the last, "
    "and the partitions whose smallest bound reaching the target is wider than any in force.",
    partition_by=("period_start",),
    order_by=("period_start",),
)

# -- the nightly's index of event ids (batch/firsts.py) -----------------------------------

EVENT_INDEX = Table(
    "event_index",
    "id_hash BIGINT, event_date DATE",
    "Internal, written by the nightly: where each event_id has lines in the event log, one "
    "row per line (id_hash: the 64-bit hash of its event_id; event_date: the line's "
    "partition). The nightly probes it with the day's ids to find their copies in other "
    'dates without reading them (docs/semantics.md, "First arrival over the whole log").',
    partition_by=("event_date",),
    internal=True,
    order_by=("event_date", "id_hash"),
)
EVENT_INDEX_CATCHUPS = Table(
    "event_index_catchups",
    "caught_up_at TIMESTAMP, events_version BIGINT, frontier MAP<STRING, BIGINT>, "
    "kind STRING, entries BIGINT, seconds DOUBLE",
    "Internal, written by the nightly: one row per catch-up of event_index (kind build: "
    "the first, over the whole log; catch_up: the lines above the previous frontier): the "
    "events version and batch frontier it reached, rows appended and seconds taken. The "
    "index covers, per app_id, every batch up to the largest frontier recorded here.",
    internal=True,
    order_by=("caught_up_at",),
)

_MAINTENANCE_DDL = (
    "action_time TIMESTAMP, processing_time TIMESTAMP, table_name STRING, action STRING, "
    "partition STRING, predicate STRING, files_before BIGINT, files_after BIGINT, "
    "bytes_before BIGINT, bytes_after BIGINT, seconds DOUBLE, outcome STRING, detail STRING, "
    "run_by STRING"
)
_MAINTENANCE_DESCRIPTION = (
    "action is compact (an open partition or a whole table), compact_closed (a closed "
    "event_date) or vacuum; partition the compacted partition (null: the "
    "whole table); files and bytes of that scope before and after (vacuum: the files it "
    "deleted are files_before - files_after of the table's directory); outcome done or "
    "failed (detail: the one-line error); processing_time: the clock the action was "
    "scheduled by (the stream's processing time); run_by: stream, maintain or nightly."
)
MAINTENANCE_LOG = Table(
    "maintenance_log",
    _MAINTENANCE_DDL,
    "One row per maintenance action on a stream table (compaction, VACUUM, retention "
    "properties), written by the process holding the warehouse's lease (the stream, or "
    f"`tally maintain` while no stream runs): {_MAINTENANCE_DESCRIPTION}",
    order_by=("action_time", "table_name", "partition"),
)
NIGHTLY_MAINTENANCE_LOG = Table(
    "nightly_maintenance_log",
    _MAINTENANCE_DDL,
    "One row per maintenance action on a table the nightly writes, by the nightly (one "
    f"writer per table, so not in maintenance_log): {_MAINTENANCE_DESCRIPTION}",
    order_by=("action_time", "table_name", "partition"),
)

STREAMING_TABLES = (
    EVENTS,
    QUARANTINE,
    LATE_EVENTS,
    STREAM_AGGREGATES,
    STREAM_PROGRESS,
)
RECONCILE_TABLES = (
    BATCH_AGGREGATES,
    RECONCILIATION,
    RECONCILIATION_SUMMARY,
    RECONCILIATION_RUNS,
    RECONCILIATION_PARTITIONS,
    RECONCILIATION_COPIES,
    RECONCILIATION_EVIDENCE,
)
ALL_TABLES = (
    *STREAMING_TABLES,
    *RECONCILE_TABLES,
    VALIDATION_RESULTS,
    ALERTS,
    SIGNOFFS,
    OPEN_ITEMS,
    RESTATEMENTS,
    RESTATEMENT_SWEEP,
    LATENESS_RECOMMENDATIONS,
    MAINTENANCE_LOG,
    NIGHTLY_MAINTENANCE_LOG,
    EVENT_INDEX,
    EVENT_INDEX_CATCHUPS,
)
# Every table tally writes, by name: declared here, never registered at run time.
CATALOG: dict[str, Table] = {t.name: t for t in ALL_TABLES}


def table_path(warehouse: str, name: str) -> str:
    """The table's location. A relative local warehouse is made absolute: Delta's table
    builder reads a bare relative path as a table name."""
    if "://" not in warehouse and not warehouse.startswith("file:"):
        warehouse = os.path.abspath(warehouse)
    return f"{warehouse.rstrip('/')}/{name}"


def ensure_table(
    spark: SparkSession,
    warehouse: str,
    table: Table,
    properties: Mapping[str, str] | None = None,
) -> None:
    """Create the table empty if it does not exist yet (idempotent), with its declared
    properties and `properties` (settings made table properties: retention)."""
    from delta.tables import DeltaTable

    builder = DeltaTable.createIfNotExists(spark).location(table_path(warehouse, table.name))
    builder = builder.addColumns(table.schema())
    if table.partition_by:
        builder = builder.partitionedBy(*table.partition_by)
    for key, value in {**dict(table.properties), **(properties or {})}.items():
        builder = builder.property(key, value)
    builder.execute()


def add_missing_columns(spark: SparkSession, warehouse: str, table: Table) -> None:
    """Add the declared columns an existing table lacks (ALTER TABLE ADD COLUMNS, nullable,
    at the end), so a table an earlier tally created takes the new rows; its old rows read
    null there. Writes do not merge schemas (autoMerge is off): a table whose DDL grows calls
    this before writing."""
    path = table_path(warehouse, table.name)
    present = {c.lower() for c in read_table(spark, warehouse, table.name).columns}
    missing = [f for f in table.schema().fields if f.name.lower() not in present]
    if missing:
        columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in missing)
        spark.sql(f"ALTER TABLE delta.`{path.replace('`', '``')}` ADD COLUMNS ({columns})")


def zero_if_absent(rows: DataFrame, name: str) -> Column:
    """A BIGINT column a table gained (`add_missing_columns`), 0 where it is null (rows of
    earlier runs) or absent (a table no run of this version wrote yet)."""
    if name not in rows.columns:
        return F.lit(0).cast("long")
    return F.coalesce(F.col(name), F.lit(0)).cast("long")


def exists(spark: SparkSession, warehouse: str, name: str) -> bool:
    """Whether the warehouse holds the Delta table `name` (a file-system check)."""
    from delta.tables import DeltaTable

    return bool(DeltaTable.isDeltaTable(spark, table_path(warehouse, name)))


def conform(df: DataFrame, table: Table) -> DataFrame:
    """`df`'s columns in the table's order, cast to its types (the one place writes conform)."""
    # One projection in one Py4J call: a Column and a cast per column took ~55 ms for `events`
    # (three round trips each), ~8 ms this way; a micro-batch conforms five appends.
    return df.selectExpr(*_conform_expressions(table.ddl))


@functools.cache
def _conform_expressions(ddl: str) -> tuple[str, ...]:
    return tuple(
        f"CAST({_quoted(f.name)} AS {f.dataType.simpleString()}) AS {_quoted(f.name)}"
        for f in schema_of(ddl).fields
    )


def _quoted(name: str) -> str:
    """A column name as a SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def write_table(
    df: DataFrame, warehouse: str, table: Table, *, replace_where: str | None = None
) -> None:
    """Append `df` to the table, or with `replace_where` atomically replace exactly the rows
    matching that predicate (Delta `replaceWhere`): re-running a date replaces that date."""
    writer = conform(df, table).write.format("delta")
    if table.partition_by:  # a first write creates the table partitioned as declared
        writer = writer.partitionBy(*table.partition_by)
    if replace_where is None:
        writer = writer.mode("append")
    else:
        writer = writer.mode("overwrite").option("replaceWhere", replace_where)
    writer.save(table_path(warehouse, table.name))


def creates_on_write(table: Table) -> bool:
    """Whether the table's first `write_table` creates it exactly as `ensure_table` would: the
    declared columns (conformed; Delta stores every column nullable) and partitioning, and no
    table properties (a write cannot set those)."""
    return not table.properties


def ensure_tables(spark: SparkSession, warehouse: str, tables: tuple[Table, ...]) -> None:
    for table in tables:
        ensure_table(spark, warehouse, table)


def read_table(
    spark: SparkSession, warehouse: str, name: str, version: int | None = None
) -> DataFrame:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(table_path(warehouse, name))


def latest_version(spark: SparkSession, warehouse: str, name: str) -> int:
    """The table's latest committed version: Delta's own snapshot update (a listing of the
    log, the same `DeltaLog` a read of the table then uses). `history(1)` ran a Spark job for
    it (~0.1-0.3 s each; the nightly asks about ten times)."""
    from tally.spark import jvm_class

    delta_log = jvm_class(spark, "org.apache.spark.sql.delta.DeltaLog")
    log = delta_log.forTable(spark._jsparkSession, table_path(warehouse, name))
    defaults = [getattr(log, f"update$default${i}")() for i in (1, 2, 3)]
    return int(log.update(*defaults).version())


def empty_frame(spark: SparkSession, table: Table) -> DataFrame:
    """An empty DataFrame of the table's schema, built in the JVM (no Python workers)."""
    return empty_of(spark, table.ddl)


def empty_of(spark: SparkSession, ddl: str) -> DataFrame:
    """An empty DataFrame of a DDL column list, built in the JVM (no Python workers)."""
    return spark.range(0).select(
        *[F.lit(None).cast(f.dataType).alias(f.name) for f in schema_of(ddl).fields]
    )


def literal_row(spark: SparkSession, values: dict[str, Column]) -> DataFrame:
    """One row of literal columns, built in the JVM: createDataFrame would start Python
    workers to deserialize the row, which costs seconds per micro-batch. One partition: a
    task (and a file when written) for the row, none for empty ones."""
    return spark.range(0, 1, 1, numPartitions=1).select(
        *[col.alias(name) for name, col in values.items()]
    )


def literal_map(entries: dict[Any, Any], key_type: str, value_type: str) -> Column:
    if not entries:
        return F.create_map().cast(f"map<{key_type},{value_type}>")
    pairs = [F.lit(x) for item in sorted(entries.items()) for x in item]
    return F.create_map(*pairs).cast(f"map<{key_type},{value_type}>")
