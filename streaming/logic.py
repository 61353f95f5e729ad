"""The speed layer's per-batch logic: DataFrame in, DataFrames out, nothing read or written.

A micro-batch goes through two pure steps with one driver-side step between them:

1. `classify_events`: each valid event is `on_time`, `allowed_late`, `late` or `duplicate`,
   judged for its last window against the watermark after the previous batch.
2. (driver) the watermark advances from per-partition high-water marks (streaming.watermark).
3. `close_windows`: each non-duplicate event's windows (one, or S/H hopping windows) are
   judged the same way; on-time and allowed-late ones fold into the open-window state; windows
   whose end the watermark reached are emitted; late ones become the named side output;
   the ids of non-duplicate events are remembered until their window is past changing by the
   dedup horizon (they are what step 1 checks duplicates against).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from streaming.lateness import BUCKET_EDGES_MS, front_ms
from streaming.watermark import closed_col, final_through_ms, revisable_col
from tally.jvm_functions import batch_long, batch_long_sql, batch_timestamp
from tally.spark import jvm_cached
from tally.tables import literal_map
from tally.vocabulary import ALLOWED_LATE, COUNTED, DUPLICATE, LATE, LINE_ORDER, ON_TIME
from tally.windows import (
    SESSION_OWNER,
    WINDOW_KEY,
    aggregate_windows,
    explode_windows,
    last_window_columns,
    merge_sessions,
    slide_of,
    span_columns,
    windows_per_event,
)


@dataclass(frozen=True)
class WindowParams:
    window_ms: int
    allowed_lateness_ms: int
    # How long past the point its window stops changing an event id is still remembered
    # for duplicate detection (see docs/semantics.md, "Dedup horizon").
    dedup_horizon_ms: int = 0
    # Hopping windows slide by this (0: tumbling, the slide is the size): tally.windows.
    slide_ms: int = 0
    # Early results: an open window that changed is emitted provisionally (final = false) at
    # most once per this much processing time (0: only final rows).
    early_firing_interval_ms: int = 0
    # Session windows: an event spans [t, t + gap) and spans merge into sessions (0: off).
    session_gap_ms: int = 0

    @property
    def sessions(self) -> bool:
        return self.session_gap_ms > 0

    @property
    def windows_per_event(self) -> int:
        return 1 if self.sessions else windows_per_event(self.window_ms, self.slide_ms)

    @property
    def state_slack_ms(self) -> int:
        """How long past its end (in watermark progress) a window or session stays in state:
        the allowed lateness, plus one gap for a session (an event still counted may touch
        it; docs/semantics.md, "Session windows")."""
        return self.allowed_lateness_ms + self.session_gap_ms

    def with_windows(self, events: DataFrame) -> DataFrame:
        """Each event's window as `window_start`/`window_end`: its last window, or its span."""
        return events.withColumns(self.window_columns())

    def window_columns(self) -> dict[str, Column]:
        """`with_windows`' columns."""
        if self.sessions:
            return span_columns(self.session_gap_ms)
        return last_window_columns(self.window_ms, self.slide_ms)


def ts(ms: int) -> Column:
    """A batch's time (a watermark, the processing time) as a TIMESTAMP column: through
    `batch_timestamp`, so the stages holding it are not compiled again every batch."""
    return batch_timestamp(ms)


# A shuffle partition of the batch's events holds at most about this many lines: each task's
# sort (the duplicate check, the events append by date) then fits a 1 GiB driver heap whatever
# the batch size (measured: 2M lines a partition of 8M lines OOMs a 640 MiB heap).
LINES_PER_SHUFFLE_PARTITION = 500_000
# ...and at least about this many, up to Spark's shuffle partitions: a small batch's cost is
# its tasks, not its rows (every task of the classification, the windows and each append is
# scheduled, opens its writers and writes its own file), so a 20k-line batch is one task.
LINES_PER_TASK_MIN = 100_000


def event_partitions(input_lines: int, shuffle_partitions: int, cores: int = 1) -> int:
    """How many partitions the batch's events are shuffled into by event_id: one per
    `LINES_PER_TASK_MIN` lines up to Spark's `shuffle_partitions`, more only when the batch
    needs them to bound each task (`LINES_PER_SHUFFLE_PARTITION`).

    `cores` (the executors' task slots): more tasks than cores run in whole waves, every core
    busy in each; a count between two multiples is rounded down to one (the tasks get larger,
    never more than the upper bound allows). The throughput benchmark's batches of ~201,400
    lines on 2 cores were 3 tasks, the third running alone after the first two (the
    classification, and the events and late_events appends that keep its partitioning): 2."""
    needed = -(-input_lines // LINES_PER_SHUFFLE_PARTITION)
    if needed > shuffle_partitions:
        return needed
    n = max(1, min(shuffle_partitions, -(-input_lines // LINES_PER_TASK_MIN)))
    if n > cores > 0:
        n -= n % cores
    return n


# Spark sizes a Parquet input by its files, and broadcasts a join side below 10 MB of them
# (`spark.sql.autoBroadcastJoinThreshold`). The remembered ids are ~25x bigger as a broadcast
# hash relation (measured: 6.3 MB of state files, 1.2M ids, a relation over 166 MiB that a
# 512 MiB driver could not build: "Could not allocate memory to grow BytesToBytesMap"). They
# pile up when no window closes (a clock behind the events), so above this many bytes of
# files they are joined by a sort-merge join, which spills; a live stream's few minutes of
# ids stay far below it and keep the broadcast.
SEEN_IDS_BROADCAST_MAX_BYTES = 1 << 20


def seen_ids_join_hint(seen_ids_bytes: int) -> str | None:
    """The join strategy for the remembered ids of `seen_ids_bytes` bytes of state files:
    None (Spark's choice) while small, else a sort-merge join."""
    return "merge" if seen_ids_bytes > SEEN_IDS_BROADCAST_MAX_BYTES else None


def classify_events(
    events: DataFrame,
    watermark_before_ms: int | None,
    params: WindowParams,
    seen_ids: DataFrame,
    partitions: int | None = None,
    seen_ids_bytes: int = 0,
) -> DataFrame:
    """Add window bounds and `arrival_status` (before the exact log check for late events).

    The window is the event's last (latest-ending) one, so an event is `on_time` or
    `allowed_late` while any of its windows still is (see `window_memberships`).
    Duplicates: a later copy of an event_id in this batch (arrival order: file time, file,
    line), or an id in `seen_ids` (the remembered ids, one row per id: see `close_windows`).
    `partitions` (see `event_partitions`): the one shuffle by event_id gets that many.
    `seen_ids_bytes`: the size of `seen_ids`' files (see `seen_ids_join_hint`).
    """
    if partitions is not None:  # the window and the join reuse this partitioning
        events = events.repartition(partitions, "event_id")
    # The same every batch of a process: built once (`jvm_cached`), added in one step.
    added, seen_columns, duplicate = jvm_cached(
        events.sparkSession,
        ("classify_events", params.window_ms, params.slide_ms, params.session_gap_ms),
        lambda: _classify_columns(params),
    )
    seen = seen_ids.select(*seen_columns)
    hint = seen_ids_join_hint(seen_ids_bytes)
    if hint is not None:
        seen = seen.hint(hint)
    status = F.when(duplicate, F.lit(DUPLICATE))
    return (
        events.withColumns(added)
        .join(seen, "event_id", "left")
        .withColumn(
            "arrival_status", window_status(status, watermark_before_ms, params.allowed_lateness_ms)
        )
        .drop("_first", "_seen")
    )


def _classify_columns(params: WindowParams) -> tuple[dict[str, Column], list[Column], Column]:
    """`classify_events`' per-process columns: the window bounds and `_first` (the event_id's
    first copy in line order), the remembered ids' projection, and the duplicate test."""
    first_copy = F.row_number().over(Window.partitionBy("event_id").orderBy(*LINE_ORDER)) == F.lit(
        1
    )
    return (
        {**params.window_columns(), "_first": first_copy},
        [F.col("event_id"), F.lit(True).alias("_seen")],
        ~F.col("_first") | F.col("_seen").isNotNull(),
    )


def window_status(status: Column, watermark_before_ms: int | None, allowed_ms: int) -> Column:
    """`status` (a CASE WHEN so far) completed with the rule for the row's window
    (`streaming.watermark`): `allowed_late` when it is closed but still revisable within the
    allowed lateness, `late` when it is closed beyond it, `on_time` otherwise."""
    if watermark_before_ms is not None:
        end = F.col("window_end")
        closed = closed_col(end, watermark_before_ms)
        revisable = revisable_col(end, watermark_before_ms, allowed_ms)
        status = status.when(closed & revisable, F.lit(ALLOWED_LATE)).when(closed, F.lit(LATE))
    return status.otherwise(F.lit(ON_TIME))


WINDOW_STATUS = "window_status"


def window_memberships(
    classified: DataFrame, watermark_before_ms: int | None, params: WindowParams
) -> DataFrame:
    """One row per (non-duplicate event, window holding it) with `window_status`: the status
    rule applied to that window. Tumbling windows: the event's own status. Hopping windows:
    an event on time for its last window can be late for its earlier ones."""
    kept = classified.where(F.col("arrival_status") != DUPLICATE)
    if params.windows_per_event == 1:
        return kept.withColumn(WINDOW_STATUS, F.col("arrival_status"))
    exploded = explode_windows(kept, params.window_ms, params.slide_ms)
    none = F.when(F.lit(False), F.lit(None))
    return exploded.withColumn(
        WINDOW_STATUS, window_status(none, watermark_before_ms, params.allowed_lateness_ms)
    )


def late_window_count(watermark_before_ms: int | None, params: WindowParams) -> Column:
    """How many of a classified event's windows are late (`window_memberships` rows with
    status late), from its last window alone, without exploding: its k-th earlier window ends
    at `end - k*H` and is late iff that end is at or before `final_through_ms(WM, G)` (no
    longer revisable). Duplicates count 0."""
    if watermark_before_ms is None:
        return F.lit(0)
    if params.sessions:  # one span per event, judged by classify_events
        return F.when(F.col("arrival_status") == LATE, F.lit(1)).otherwise(F.lit(0))
    n = params.windows_per_event
    slide = slide_of(params.window_ms, params.slide_ms)
    threshold = final_through_ms(watermark_before_ms, params.allowed_lateness_ms)
    # late iff k >= ceil((end - threshold) / H) (a double quotient of integers below 2^53,
    # correctly rounded: its ceiling is exact at these magnitudes)
    first_late = F.ceil((F.unix_millis("window_end") - batch_long(threshold)) / F.lit(slide))
    count = F.lit(n) - F.greatest(F.lit(0), F.least(F.lit(n), first_late))
    return F.when(F.col("arrival_status") == DUPLICATE, F.lit(0)).otherwise(count)


def source_watermark_stats(
    controls: DataFrame, skew_limit_ms: int, kept_ms: Mapping[int, int]
) -> DataFrame:
    """One row per partition of the batch's control records (`partition`, `control_ms`, the
    line order): `wm` the newest source watermark (clipped to `skew_limit_ms` like a
    high-water mark), `n` the records, `regressions` those below the partition's source
    watermark before them (`kept_ms`, then the earlier records of the batch in arrival
    order) and `regression_ms` the largest such gap."""
    clipped = F.least(F.col("control_ms"), batch_long(skew_limit_ms))
    earlier = (
        Window.partitionBy("partition")
        .orderBy(*LINE_ORDER)
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    kept = F.element_at(literal_map(dict(kept_ms), "int", "bigint"), F.col("partition"))
    before = F.greatest(F.max(clipped).over(earlier), kept)  # greatest skips nulls
    gap = F.when(clipped < before, before - clipped)
    return (
        controls.select("partition", clipped.alias("mark"), gap.alias("gap"))
        .groupBy("partition")
        .agg(
            F.max("mark").alias("wm"),
            F.count(F.lit(1)).alias("n"),
            F.count("gap").alias("regressions"),
            F.max("gap").alias("regression_ms"),
        )
    )


# The delay histogram's edges as one SQL array literal (one JVM call, not one per edge).
_EDGES_SQL = "array(" + ", ".join(f"{e}L" for e in BUCKET_EDGES_MS) + ")"


def delay_counts(events: DataFrame, high_water_before_ms: Mapping[int, int]) -> DataFrame:
    """Lateness auto: per (`partition`, `bucket`) the `n` valid events whose delay behind
    the stream's front before the batch (the largest partition mark) falls in that histogram
    bucket (streaming/lateness.py). The bucket is the number of edges below the delay
    (bisect); events of a partition with no mark before the batch are not measured."""
    front = front_ms(high_water_before_ms)
    if front is None:  # nothing to be behind yet
        return events.where(F.lit(False)).select(
            "partition", F.lit(0).alias("bucket"), F.lit(0).cast("long").alias("n")
        )
    delay = F.greatest(
        F.lit(front).cast("long") - F.unix_millis("event_time"), F.lit(0).cast("long")
    )
    bucket = F.size(F.filter(F.expr(_EDGES_SQL), lambda edge: edge < delay))
    return (
        events.where(F.col("partition").isin(sorted(high_water_before_ms)))
        .select("partition", bucket.alias("bucket"))
        .groupBy("partition", "bucket")
        .agg(F.count(F.lit(1)).alias("n"))
    )


class WindowOut(NamedTuple):
    """What a batch produces, side by side: the entry point decides where each goes."""

    aggregates: DataFrame  # rows for stream_aggregates (emitted or revised windows)
    late_events: DataFrame  # the late side output
    window_state: DataFrame  # open windows after this batch
    dedup_state: DataFrame  # remembered ids (until window end + allowed lateness + horizon)


def _fold(window_state: DataFrame, counted: DataFrame) -> DataFrame:
    """Open windows plus this batch's counted events, one row per window and key;
    `_changed` says whether the batch added to it."""
    batch = aggregate_windows(counted).select(
        *WINDOW_KEY,
        F.col("event_count").alias("_batch_count"),
        F.col("amount_sum").alias("_batch_sum"),
    )
    return window_state.join(batch, list(WINDOW_KEY), "full_outer").selectExpr(
        *WINDOW_KEY,
        "CAST(coalesce(event_count, 0) + coalesce(_batch_count, 0) AS BIGINT) AS event_count",
        "CAST(coalesce(amount_sum, 0) + coalesce(_batch_sum, 0) AS BIGINT) AS amount_sum",
        "CAST(coalesce(emitted_revision, 0) AS INT) AS emitted_revision",
        # State files from before early firings lack the last three: a window was final once
        # it had been emitted at all.
        "coalesce(finalized, emitted_revision > 0, false) AS finalized",
        "coalesce(pending, false) AS pending",
        "CAST(last_emit_ms AS BIGINT) AS last_emit_ms",
        "_batch_count IS NOT NULL AS _changed",
    )


RETRACT = "_retract"  # the emitted sessions a merged session replaced (structs)


def _fold_sessions(window_state: DataFrame, counted: DataFrame) -> DataFrame:
    """Sessions in state merged with this batch's counted spans (`tally.windows.merge_sessions`),
    one row per resulting session, with `_fold`'s columns plus `RETRACT`.

    A session with exactly the bounds of one session in state is that session (its flags and
    revisions carry on; `_changed` if it absorbed a span). Any other one is new: its revisions
    continue from the largest it absorbed, and the absorbed sessions that had been emitted
    are in `RETRACT`, to be withdrawn."""
    state = window_state.select(
        *WINDOW_KEY,
        "event_count",
        "amount_sum",
        F.coalesce("emitted_revision", F.lit(0)).cast("int").alias("emitted_revision"),
        F.coalesce("finalized", F.col("emitted_revision") > 0, F.lit(False)).alias("finalized"),
        F.coalesce("pending", F.lit(False)).alias("pending"),
        F.col("last_emit_ms").cast("long").alias("last_emit_ms"),
        F.lit(True).alias("_from_state"),
    )
    spans = counted.select(
        *WINDOW_KEY,
        F.lit(1).cast("long").alias("event_count"),
        F.col("amount").cast("long").alias("amount_sum"),
        F.lit(0).alias("emitted_revision"),
        F.lit(False).alias("finalized"),
        F.lit(False).alias("pending"),
        F.lit(None).cast("long").alias("last_emit_ms"),
        F.lit(False).alias("_from_state"),
    )
    held = F.col("_from_state")

    def of_state(column: str) -> Column:
        return F.when(held, F.col(column))

    emitted_piece = F.when(
        held & (F.col("emitted_revision") > 0),
        F.struct("window_start", "window_end", "event_count", "amount_sum", "emitted_revision"),
    )
    grouped = merge_sessions(
        state.unionByName(spans),
        F.count_if(held).alias("_pieces"),
        F.count_if(~held).alias("_spans"),
        F.min(of_state("window_start")).alias("_piece_start"),
        F.max(of_state("window_end")).alias("_piece_end"),
        F.max(of_state("emitted_revision")).alias("_piece_revision"),
        F.bool_or(of_state("finalized")).alias("_piece_finalized"),
        F.bool_or(of_state("pending")).alias("_piece_pending"),
        F.max(of_state("last_emit_ms")).alias("_piece_last_emit"),
        F.collect_list(emitted_piece).alias("_emitted_pieces"),
    )
    same = (
        (F.col("_pieces") == 1)
        & (F.col("_piece_start") == F.col("window_start"))
        & (F.col("_piece_end") == F.col("window_end"))
    )
    return grouped.select(
        *WINDOW_KEY,
        "event_count",
        "amount_sum",
        F.coalesce("_piece_revision", F.lit(0)).cast("int").alias("emitted_revision"),
        F.when(same, F.col("_piece_finalized")).otherwise(F.lit(False)).alias("finalized"),
        F.when(same, F.col("_piece_pending")).otherwise(F.lit(False)).alias("pending"),
        F.when(same, F.col("_piece_last_emit")).cast("long").alias("last_emit_ms"),
        (~same | (F.col("_spans") > 0)).alias("_changed"),
        F.when(same, F.array()).otherwise(F.col("_emitted_pieces")).alias(RETRACT),
    )


def _retractions(merged: DataFrame, now_ms: int, emit_watermark: int | None) -> DataFrame:
    """Rows withdrawing the sessions merged sessions replaced: their own bounds and last
    totals, the next revision, final and `retracted`."""
    piece = F.explode(RETRACT).alias("_piece")
    return merged.select(*SESSION_OWNER, piece).select(
        "_piece.window_start",
        "_piece.window_end",
        *SESSION_OWNER,
        "_piece.event_count",
        "_piece.amount_sum",
        (F.col("_piece.emitted_revision") + 1).cast("int").alias("revision"),
        ts(now_ms).alias("emit_time"),
        _watermark_literal(emit_watermark).alias("watermark_at_emit"),
        F.lit(True).alias("final"),
        F.lit(True).alias("retracted"),
    )


def sql_ts(ms: int) -> str:
    """`ts(ms)` as SQL text."""
    return f"timestamp_millis({batch_long_sql(ms)})"


def _watermark_literal(emit_watermark: int | None) -> Column:
    return (ts(emit_watermark) if emit_watermark is not None else F.lit(None)).cast("timestamp")


def _emission(
    watermark_after_ms: int | None, now_ms: int, params: WindowParams, drain: bool
) -> dict[str, Column]:
    """Which folded windows emit a row (`_emit`) and whether it is final (`_final`).

    Final: the window is closable and was never final or changed in this batch (an
    allowed-late revision). Early (with an early firing interval, never in the drain): the
    window is still open, changed since its last row, and its last row is at least the
    interval of processing time old (or it has none)."""
    closable = _closable(watermark_after_ms, drain)
    final = closable & (F.col("_changed") | ~F.col("finalized"))
    early = F.lit(False)
    interval = params.early_firing_interval_ms
    if interval > 0 and not drain:
        due = F.col("last_emit_ms").isNull() | (
            batch_long(now_ms) - F.col("last_emit_ms") >= F.lit(interval)
        )
        early = ~closable & (F.col("_changed") | F.col("pending")) & due
    if params.sessions:  # a session that replaced emitted ones is shown at once
        early = early | (~closable & (F.size(RETRACT) > 0))
    return {"_emit": final | early, "_final": final}


def _next_state(now_ms: int) -> list[str]:
    """The state columns of a folded window after this batch's emission (SQL text)."""
    return [
        *WINDOW_KEY,
        "event_count",
        "amount_sum",
        "CAST(CASE WHEN _emit THEN emitted_revision + 1 ELSE emitted_revision END AS INT)"
        " AS emitted_revision",
        "finalized OR _final AS finalized",
        "(_changed OR pending) AND NOT _emit AS pending",
        f"CAST(CASE WHEN _emit THEN {batch_long_sql(now_ms)} ELSE last_emit_ms END AS BIGINT)"
        " AS last_emit_ms",
    ]


def _still_changeable(watermark_after_ms: int | None, slack_ms: int, drain: bool) -> Column:
    """Whether a row's window can still change (or, with a dedup horizon as extra slack,
    still be remembered) after this batch: revisable (`streaming.watermark`); after the drain
    nothing is."""
    if drain:
        return F.lit(False)
    return revisable_col(F.col("window_end"), watermark_after_ms, slack_ms)


def _closable(watermark_after_ms: int | None, drain: bool) -> Column:
    """Whether a row's window is closed after this batch (`streaming.watermark`); the drain
    closes every window."""
    if drain:
        return F.lit(True)
    return closed_col(F.col("window_end"), watermark_after_ms)


def fold_counts(params: WindowParams) -> list[Column]:
    """Aggregates over the frame `close_windows` hands to `materialize`: the windows open after
    the batch (`open_windows`) and the rows it emits, retractions included (`windows_emitted`).
    Observed while the fold materializes, they cost no pass of their own."""
    emitted = F.count_if(F.col("_emit"))
    if params.sessions:
        retracted = F.size(RETRACT)  # -1 for a NULL list: no retraction rows either
        emitted = emitted + F.coalesce(F.sum(F.greatest(retracted, F.lit(0))), F.lit(0))
    return [
        F.count_if(F.col("_open")).alias("open_windows"),
        emitted.cast("long").alias("windows_emitted"),
    ]


def close_windows(
    classified: DataFrame,
    window_state: DataFrame,
    dedup_state: DataFrame,
    watermark_before_ms: int | None,
    watermark_after_ms: int | None,
    now_ms: int,
    params: WindowParams,
    drain: bool = False,
    materialize: Callable[[DataFrame], DataFrame] = lambda df: df,
) -> WindowOut:
    """Fold counted events into state, emit closable windows, evict what can no longer change.

    `drain`: the end of input closes every window, with no watermark (`watermark_at_emit` is
    NULL on the rows it emits; `watermark_after_ms` is ignored). `materialize` is applied to
    the folded windows, from which both the emitted rows and the next state are taken (the
    entry point passes a checkpoint, so the fold runs once).
    """
    memberships = window_memberships(classified, watermark_before_ms, params)
    counted = memberships.where(F.col(WINDOW_STATUS).isin(*COUNTED))
    still_open = _still_changeable(watermark_after_ms, params.state_slack_ms, drain)
    folded = (
        _fold_sessions(window_state, counted) if params.sessions else _fold(window_state, counted)
    )
    merged = materialize(
        folded.withColumns(_emission(watermark_after_ms, now_ms, params, drain)).withColumn(
            "_open", still_open
        )
    )
    emit_watermark = None if drain else watermark_after_ms
    aggregates = merged.where("_emit").selectExpr(
        *WINDOW_KEY,
        "event_count",
        "amount_sum",
        "CAST(emitted_revision + 1 AS INT) AS revision",
        f"{sql_ts(now_ms)} AS emit_time",
        f"CAST({'NULL' if emit_watermark is None else sql_ts(emit_watermark)} AS TIMESTAMP)"
        " AS watermark_at_emit",
        "_final AS `final`",
        "false AS retracted",
    )
    if params.sessions:
        aggregates = aggregates.unionByName(_retractions(merged, now_ms, emit_watermark))
    new_state = merged.where("_open").selectExpr(*_next_state(now_ms))
    # Every id that was not a duplicate is remembered (late ones too, so a late event sent
    # twice is one late event) until its window is past changing by the dedup horizon.
    remembered = _still_changeable(
        watermark_after_ms, params.allowed_lateness_ms + params.dedup_horizon_ms, drain
    )
    new_dedup = (
        dedup_state.select("event_id", "window_end")
        .unionByName(
            classified.where(F.col("arrival_status") != DUPLICATE).select("event_id", "window_end")
        )
        .where(remembered)
    )
    return WindowOut(
        aggregates,
        _late_output(memberships, watermark_before_ms, now_ms, params),
        new_state,
        new_dedup,
    )


def _late_output(
    memberships: DataFrame, watermark_before_ms: int | None, now_ms: int, params: WindowParams
) -> DataFrame:
    """The late side output: one row per late (event, window), with the watermark the event
    met and how late it was for that window."""
    late = memberships.where(F.col(WINDOW_STATUS) == LATE).drop(WINDOW_STATUS)
    reason = "window_closed" if params.allowed_lateness_ms == 0 else "beyond_allowed_lateness"
    wm_before = watermark_before_ms if watermark_before_ms is not None else 0
    return late.select(
        "*",
        ts(wm_before).alias("watermark_at_arrival"),
        (batch_long(wm_before) - F.unix_millis("window_end")).alias("lateness_ms"),
        (batch_long(now_ms) - F.unix_millis("event_time")).alias("arrival_delay_ms"),
        F.lit(reason).alias("reason"),
    )
