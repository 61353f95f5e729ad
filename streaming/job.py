"""`tally stream`: the speed layer's entry point. Builds the session, reads, writes.

Exactly once: Spark's checkpoint replays a failed micro-batch with the same input files; every
Delta write of batch N carries `txnAppId` (the query id, stable per checkpoint) and
`txnVersion=N`, so a replayed write that already committed is skipped; and the replay
recomputes the same result because it reads state at the versions batch N-1 recorded in
`stream_progress` and the processing time batch N recorded first in `batch_clock`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from streaming.logic import (
    WindowOut,
    WindowParams,
    classify_events,
    close_windows,
    mark_logged_duplicates,
)
from streaming.source import open_source
from streaming.watermark import WatermarkState, advance_watermark
from tally import tables as T
from tally.events import ParsedEvents, parse_lines, split_parsed
from tally.settings import Settings
from tally.spark import session_for
from tally.vocabulary import ALLOWED_LATE, DUPLICATE, LATE, ON_TIME

log = logging.getLogger("tally.stream")

Clock = Callable[[], datetime]


class StreamError(RuntimeError):
    """A condition that stops the stream before it writes anything (one-line message)."""


@dataclass(frozen=True)
class StreamParams:
    """Plain values the job runs with (read from Settings at the entry point)."""

    warehouse: str
    window_ms: int
    lateness_ms: int
    allowed_lateness_ms: int
    idle_timeout_ms: int
    max_clock_skew_ms: int
    watermark_policy: str = "partition-min"
    arrival_clock: bool = False  # processing time = newest input file's modification time

    @property
    def window(self) -> WindowParams:
        return WindowParams(self.window_ms, self.allowed_lateness_ms)

    @classmethod
    def from_settings(cls, settings: Settings, arrival_clock: bool = False) -> StreamParams:
        return cls(
            warehouse=settings.warehouse,
            window_ms=settings.window,
            lateness_ms=settings.lateness,
            allowed_lateness_ms=settings.allowed_lateness,
            idle_timeout_ms=settings.idle_timeout,
            max_clock_skew_ms=settings.max_clock_skew,
            watermark_policy=settings.watermark_policy,
            arrival_clock=arrival_clock,
        )


def wall_clock() -> datetime:
    return datetime.now(UTC)


def _ms(value: datetime) -> int:
    return int(value.timestamp() * 1000)


# -- values passed between the phases of a micro-batch ------------------------------------
@dataclass(frozen=True)
class BatchInput:
    """A micro-batch's lines, read and parsed once (`lines` stays cached for the batch)."""

    lines: DataFrame
    parsed: ParsedEvents
    input_lines: int
    newest_input_ms: int | None  # newest source file modification time (arrival clock)


@dataclass(frozen=True)
class BatchContext:
    """Who and when: the batch's id, processing time and whether it is the drain."""

    batch_id: int
    now_ms: int  # the batch's processing time, the same in any replay of it
    drain: bool
    started: float  # time.monotonic() when the batch started


@dataclass(frozen=True)
class PriorState:
    """What the previous batch left: its watermark state and the state tables it pinned."""

    watermark: WatermarkState
    window_state: DataFrame
    dedup_state: DataFrame


@dataclass(frozen=True)
class Classified:
    """Valid events with window and `arrival_status` (cached), and per-partition stats."""

    events: DataFrame
    stats: list[Any]  # one row per source partition, see BatchProcessor._batch_stats
    skew_limit_ms: int  # now + max clock skew: event times beyond it are clock-skewed

    def count(self, column: str) -> int:
        """Total over partitions of a stats column (a status, `valid` or `skewed`)."""
        return sum(int(r[column]) for r in self.stats)

    @property
    def valid(self) -> int:
        return self.count("valid")

    @property
    def high_water_ms(self) -> dict[int, int]:
        """Newest event time per partition, clipped to now + max skew, so an event from a
        clock running ahead cannot drag the watermark into the future."""
        return {int(r["partition"]): min(int(r["max_ms"]), self.skew_limit_ms) for r in self.stats}


@dataclass(frozen=True)
class WatermarkStep:
    """The watermark state before and after this batch, and which partitions were idle."""

    before: WatermarkState
    after: WatermarkState  # the drain keeps the partitions' marks as they were
    after_ms: int | None  # None: no watermark yet, or drained (end of input closed everything)
    idle: Mapping[int, bool]


@dataclass(frozen=True)
class CommittedState:
    """Versions and sizes of what a batch wrote, for its progress row and the next batch."""

    events_version: int
    window_state_version: int
    dedup_state_version: int
    open_windows: int
    windows_emitted: int


class BatchProcessor:
    """The foreachBatch function: one micro-batch in, idempotent Delta writes out."""

    def __init__(self, spark: SparkSession, params: StreamParams, clock: Clock = wall_clock):
        self.spark = spark
        self.params = params
        self.clock = clock
        self._app_id: str | None = None
        self._app_id_ready = threading.Event()
        # The last batch this process committed, so the next batch need not read it back.
        # A replay after a crash runs in a new process and reads stream_progress instead.
        self._committed: dict[str, Any] | None = None
        self._batches_seen = 0
        T.ensure_tables(spark, params.warehouse, T.STREAMING_TABLES)

    # -- identity -------------------------------------------------------------------------
    def set_app_id(self, app_id: str) -> None:
        self._app_id = app_id
        self._app_id_ready.set()

    @property
    def app_id(self) -> str:
        # The query id is known only once start() returns; the first batch may already run.
        if not self._app_id_ready.wait(timeout=120):
            raise StreamError("stream: query id not set within 120 s")
        assert self._app_id is not None
        return self._app_id

    # -- reads ----------------------------------------------------------------------------
    def _path(self, table: T.Table) -> str:
        return T.table_path(self.params.warehouse, table.name)

    def _read(self, table: T.Table, version: int | None = None) -> DataFrame:
        return T.read_table(self.spark, self.params.warehouse, table.name, version)

    def previous_progress(self, before_batch: int | None = None) -> dict[str, Any] | None:
        """The last committed batch of this query (a small row, with times as epoch ms)."""
        progress = self._read(T.STREAM_PROGRESS).where(F.col("app_id") == self.app_id)
        if before_batch is not None:
            progress = progress.where(F.col("batch_id") < before_batch)
        row = (
            progress.orderBy(F.col("batch_id").desc())
            .select(
                "batch_id",
                "drained",
                F.unix_millis("processing_time").alias("processing_ms"),
                F.unix_millis("watermark_after").alias("watermark_ms"),
                F.transform_values("partition_high_water", lambda _k, v: F.unix_millis(v)).alias(
                    "high_water"
                ),
                F.transform_values("partition_last_seen", lambda _k, v: F.unix_millis(v)).alias(
                    "last_seen"
                ),
                "window_state_version",
                "dedup_state_version",
                "events_version",
            )
            .limit(1)
            .collect()
        )
        return row[0].asDict() if row else None

    def _batch_now_ms(
        self, batch_id: int, newest_input_ms: int | None, prev: dict[str, Any] | None
    ) -> int:
        """Processing time of this batch, the same in any replay of it.

        The arrival clock is a function of the batch's files, so a replay recomputes it. The
        wall clock is recorded in `batch_clock` before the batch writes anything else; only
        the first batch a process runs can be a replay (Spark replays the interrupted batch
        first), so only it looks for a record.
        """
        prev_ms = prev["processing_ms"] if prev else None
        if self.params.arrival_clock:
            now_ms = newest_input_ms if newest_input_ms is not None else (prev_ms or 0)
            return max(now_ms, prev_ms) if prev_ms is not None else now_ms
        if self._may_be_replay:
            recorded = (
                self._read(T.BATCH_CLOCK)
                .where((F.col("app_id") == self.app_id) & (F.col("batch_id") == batch_id))
                .select(F.unix_millis("processing_time").alias("ms"))
                .collect()
            )
            if recorded:
                return int(recorded[0]["ms"])
        now_ms = _ms(self.clock())
        if prev_ms is not None:
            now_ms = max(now_ms, prev_ms)  # processing time never runs backwards
        clock_row = T.literal_row(
            self.spark,
            {
                "app_id": F.lit(self.app_id),
                "batch_id": F.lit(batch_id).cast("long"),
                "processing_time": F.timestamp_millis(F.lit(now_ms)),
            },
        )
        self._write(clock_row, T.BATCH_CLOCK, batch_id)
        return now_ms

    # -- writes ---------------------------------------------------------------------------
    def _already_written(self, table: T.Table, batch_id: int) -> bool:
        """Whether a previous attempt of this batch committed its rows to `table`.

        Each append is one Delta commit holding exactly one batch id, so file statistics
        on batch_id let Delta skip every other file: the check reads almost nothing.
        """
        found = (
            self._read(table)
            .where((F.col("app_id") == self.app_id) & (F.col("batch_id") == batch_id))
            .limit(1)
            .count()
        )
        return found > 0

    def _write(
        self,
        df: DataFrame,
        table: T.Table,
        batch_id: int,
        mode: str = "append",
        versioned: bool = False,
    ) -> tuple[int, int]:
        """Write once; if `versioned`, return (table version, rows of that commit).

        Appends are skipped when a previous attempt of the batch committed them, which can
        only be the case for the first batch a process runs (see `_may_be_replay`). Overwrites
        of state are deterministic for a batch, so repeating one is harmless.
        """
        from delta.tables import DeltaTable

        t0 = time.monotonic()
        if mode == "overwrite" or not (
            self._may_be_replay and self._already_written(table, batch_id)
        ):
            (T.conform(df, table).write.format("delta").mode(mode).save(self._path(table)))
        log.debug("write %s: %.2f s", table.name, time.monotonic() - t0)
        if not versioned:
            return -1, -1
        commit = DeltaTable.forPath(self.spark, self._path(table)).history(1).first()
        assert commit is not None
        metrics = commit["operationMetrics"] or {}
        return int(commit["version"]), int(metrics.get("numOutputRows", 0))

    @property
    def _may_be_replay(self) -> bool:
        # Spark runs batch N+1 only after batch N's foreachBatch returned, and a failed batch
        # stops the query; so only the first batch of a process can repeat an earlier attempt.
        return self._batches_seen == 0

    # -- the batch ------------------------------------------------------------------------
    def __call__(self, raw_batch: DataFrame, batch_id: int) -> None:
        self.process(raw_batch, batch_id)

    def process(self, raw_batch: DataFrame, batch_id: int, drain: bool = False) -> None:
        """One micro-batch: read, classify, advance the watermark, close windows, write.

        With `drain`, the end of input: every open window closes, and nothing stored holds a
        watermark for it (`watermark_after` and the drained windows' `watermark_at_emit` are
        NULL, `drained` is true).
        """
        started = time.monotonic()
        prev = self._previous_batch(batch_id)
        batch = self._read_batch(raw_batch, batch_id, started)
        now_ms = self._batch_now_ms(batch_id, batch.newest_input_ms, prev)
        ctx = BatchContext(batch_id, now_ms, drain, started)
        prior = self._prior_state(prev)
        classified = self._classify(ctx, batch, prior, prev)
        step = self._advance(ctx, prior.watermark, classified)
        out = close_windows(
            classified.events,
            prior.window_state,
            prior.dedup_state,
            step.before.watermark_ms,
            step.after_ms,
            now_ms,
            self.params.window,
            drain=drain,
        )
        events_version = self._write_log_and_side_outputs(ctx, batch, classified, out)
        aggregates, emitted = self._write_aggregates(ctx, out.aggregates)
        state = self._write_state(ctx, out, events_version, emitted)
        progress = self._progress_values(ctx, batch, classified, step, state)
        self._write(self._progress_row(progress), T.STREAM_PROGRESS, batch_id)
        self._finish(ctx, step, state)
        for frame in (
            classified.events,
            batch.lines,
            prior.window_state,
            prior.dedup_state,
            aggregates,
        ):
            frame.unpersist()
        log.info(
            "batch %d: %d valid, %d late, %d quarantined, watermark %s",
            batch_id,
            classified.valid,
            classified.count(LATE),
            batch.input_lines - classified.valid,
            "drained" if drain else step.after_ms,
        )

    # -- phases of a batch, in the order `process` runs them ------------------------------
    def _previous_batch(self, batch_id: int) -> dict[str, Any] | None:
        """The batch before `batch_id` (kept from this process or read back); refuses input
        to a drained checkpoint."""
        cached = self._committed
        if cached is not None and cached["batch_id"] == batch_id - 1:
            prev: dict[str, Any] | None = cached
        else:
            prev = self.previous_progress(before_batch=batch_id)
        if prev and prev["drained"]:
            raise StreamError(
                f"stream: checkpoint was drained at batch {prev['batch_id']}; new input needs "
                "a new checkpoint and warehouse"
            )
        return prev

    @staticmethod
    def _read_batch(raw_batch: DataFrame, batch_id: int, started: float) -> BatchInput:
        """Each line is read and parsed once; valid events and quarantine both come from here."""
        lines = parse_lines(raw_batch).persist()
        raw_stats = lines.agg(
            F.count(F.lit(1)).alias("lines"), F.max(F.unix_millis("source_mtime")).alias("newest")
        ).first()
        assert raw_stats is not None
        log.debug("batch %d: read and parse %.2f s", batch_id, time.monotonic() - started)
        return BatchInput(
            lines=lines,
            parsed=split_parsed(lines),
            input_lines=int(raw_stats["lines"]),
            newest_input_ms=raw_stats["newest"],
        )

    def _prior_state(self, prev: dict[str, Any] | None) -> PriorState:
        """The watermark state and the state tables at the versions the previous batch pinned."""
        if prev is None:
            return PriorState(
                WatermarkState(),
                T.empty_frame(self.spark, T.WINDOW_STATE),
                T.empty_frame(self.spark, T.DEDUP_STATE),
            )
        watermark = WatermarkState(
            prev["watermark_ms"], dict(prev["high_water"] or {}), dict(prev["last_seen"] or {})
        )
        # Each is used twice (classify, close windows); read the pinned version once.
        return PriorState(
            watermark,
            self._read(T.WINDOW_STATE, prev["window_state_version"]).persist(),
            self._read(T.DEDUP_STATE, prev["dedup_state_version"]).persist(),
        )

    def _classify(
        self,
        ctx: BatchContext,
        batch: BatchInput,
        prior: PriorState,
        prev: dict[str, Any] | None,
    ) -> Classified:
        """Arrival status of every valid event, against the watermark before this batch."""
        p = self.params
        events = classify_events(
            batch.parsed.valid, prior.watermark.watermark_ms, p.window, prior.dedup_state
        ).persist()
        skew_limit_ms = ctx.now_ms + p.max_clock_skew_ms
        classified = Classified(events, self._batch_stats(events, skew_limit_ms), skew_limit_ms)
        log.debug("batch %d: classified %.2f s", ctx.batch_id, time.monotonic() - ctx.started)
        if prev and classified.count(LATE):
            return self._recheck_late_in_log(classified, prev["events_version"])
        return classified

    def _recheck_late_in_log(self, classified: Classified, events_version: int) -> Classified:
        """Rare path: a late event may replay an id from beyond the dedup state's horizon, so
        late events whose id the log (at the pinned version, their dates only) holds become
        duplicates."""
        late_dates = [
            r["d"]
            for r in classified.events.where(F.col("arrival_status") == LATE)
            .select(F.to_date("event_time").alias("d"))
            .distinct()
            .collect()
        ]
        logged = (
            self._read(T.EVENTS, events_version)
            .where(F.col("event_date").isin(late_dates))
            .select("event_id")
        )
        checked = mark_logged_duplicates(classified.events, logged).persist()
        classified.events.unpersist()
        limit = classified.skew_limit_ms
        return Classified(checked, self._batch_stats(checked, limit), limit)

    def _advance(
        self, ctx: BatchContext, before: WatermarkState, classified: Classified
    ) -> WatermarkStep:
        """The watermark after this batch. The drain closes every window without one: it
        keeps the partitions' marks and stores no watermark."""
        if ctx.drain:
            return WatermarkStep(before, before, None, {})
        p = self.params
        advance = advance_watermark(
            before,
            classified.high_water_ms,
            ctx.now_ms,
            p.lateness_ms,
            p.idle_timeout_ms,
            p.watermark_policy,
        )
        return WatermarkStep(before, advance.state, advance.state.watermark_ms, advance.idle)

    def _write_log_and_side_outputs(
        self, ctx: BatchContext, batch: BatchInput, classified: Classified, out: WindowOut
    ) -> int:
        """Append `events`, then `quarantine` and `late_events`; the log's new version."""
        batch_id = ctx.batch_id
        columns = {
            "batch_id": F.lit(batch_id).cast("long"),
            "ingest_time": F.timestamp_millis(F.lit(ctx.now_ms)),
            "app_id": F.lit(self.app_id),
        }
        events_version, _ = self._write(
            classified.events.withColumns(
                {
                    "clock_skewed": F.unix_millis("event_time") > F.lit(classified.skew_limit_ms),
                    **columns,
                    "event_date": F.to_date("event_time"),
                }
            ),
            T.EVENTS,
            batch_id,
            versioned=True,
        )
        # Empty side outputs are not written: a replay recomputes them empty again.
        if batch.input_lines - classified.valid:
            self._write(batch.parsed.quarantine.withColumns(columns), T.QUARANTINE, batch_id)
        if classified.count(LATE):
            self._write(out.late_events.withColumns(columns), T.LATE_EVENTS, batch_id)
        return events_version

    def _write_aggregates(self, ctx: BatchContext, aggregates: DataFrame) -> tuple[DataFrame, int]:
        """Append the emitted windows; (the cached rows, how many)."""
        # Counted, not read from the commit: an empty append makes no Delta commit.
        cached = aggregates.persist()
        emitted = cached.count()
        if emitted:
            self._write(
                cached.withColumns(
                    {"batch_id": F.lit(ctx.batch_id).cast("long"), "app_id": F.lit(self.app_id)}
                ),
                T.STREAM_AGGREGATES,
                ctx.batch_id,
            )
        return cached, emitted

    def _write_state(
        self, ctx: BatchContext, out: WindowOut, events_version: int, emitted: int
    ) -> CommittedState:
        """Overwrite `window_state` and `dedup_state`; the versions the next batch reads."""
        state_version, open_windows = self._write(
            out.window_state, T.WINDOW_STATE, ctx.batch_id, mode="overwrite", versioned=True
        )
        dedup_version, _ = self._write(
            out.dedup_state, T.DEDUP_STATE, ctx.batch_id, mode="overwrite", versioned=True
        )
        return CommittedState(events_version, state_version, dedup_version, open_windows, emitted)

    def _progress_values(
        self,
        ctx: BatchContext,
        batch: BatchInput,
        classified: Classified,
        step: WatermarkStep,
        state: CommittedState,
    ) -> dict[str, Any]:
        """The batch's `stream_progress` row (times as epoch ms; see `_progress_row`)."""
        after = step.after
        active_hw = [hw for part, hw in after.high_water_ms.items() if not step.idle.get(part)]
        counts = {s: classified.count(s) for s in (ON_TIME, ALLOWED_LATE, LATE, DUPLICATE)}
        wm_after, now_ms = step.after_ms, ctx.now_ms
        return {
            "batch_id": ctx.batch_id,
            "app_id": self.app_id,
            "processing_ms": now_ms,
            "wm_before": step.before.watermark_ms,
            "wm_after": wm_after,
            "high_water": dict(after.high_water_ms),
            "last_seen": dict(after.last_seen_ms),
            "partition_idle": dict(step.idle),
            "input_lines": batch.input_lines,
            "valid_events": classified.valid,
            "on_time_events": counts[ON_TIME],
            "allowed_late_events": counts[ALLOWED_LATE],
            "late_events": counts[LATE],
            "duplicate_events": counts[DUPLICATE],
            "quarantined_lines": batch.input_lines - classified.valid,
            "clock_skewed_events": classified.count("skewed"),
            "windows_emitted": state.windows_emitted,
            "open_windows": state.open_windows,
            "watermark_lag_ms": (
                now_ms - wm_after if wm_after is not None and not ctx.drain else None
            ),
            "partition_spread_ms": max(active_hw) - min(active_hw) if active_hw else None,
            "batch_duration_ms": int((time.monotonic() - ctx.started) * 1000),
            "drained": ctx.drain,
            "window_state_version": state.window_state_version,
            "dedup_state_version": state.dedup_state_version,
            "events_version": state.events_version,
        }

    def _finish(self, ctx: BatchContext, step: WatermarkStep, state: CommittedState) -> None:
        """The batch is committed: remember it, so the next batch need not read it back."""
        self._batches_seen += 1
        self._committed = {
            "batch_id": ctx.batch_id,
            "drained": ctx.drain,
            "processing_ms": ctx.now_ms,
            "watermark_ms": step.after_ms,
            "high_water": dict(step.after.high_water_ms),
            "last_seen": dict(step.after.last_seen_ms),
            "window_state_version": state.window_state_version,
            "dedup_state_version": state.dedup_state_version,
            "events_version": state.events_version,
        }

    @staticmethod
    def _batch_stats(classified: DataFrame, skew_limit_ms: int) -> list[Any]:
        """One small row per source partition: newest event time and counts by status."""
        status = F.col("arrival_status")
        return (
            classified.groupBy("partition")
            .agg(
                F.max(F.unix_millis("event_time")).alias("max_ms"),
                F.count(F.lit(1)).alias("valid"),
                *[
                    F.count_if(status == s).alias(s)
                    for s in (ON_TIME, ALLOWED_LATE, LATE, DUPLICATE)
                ],
                F.count_if(F.unix_millis("event_time") > skew_limit_ms).alias("skewed"),
            )
            .collect()
        )

    def _progress_row(self, p: dict[str, Any]) -> DataFrame:
        def ts_or_null(ms: int | None) -> Column:
            return F.timestamp_millis(F.lit(ms).cast("long"))

        def ms_map(entries: dict[int, int]) -> Column:
            return F.transform_values(
                T.literal_map(entries, "int", "bigint"), lambda _k, v: F.timestamp_millis(v)
            )

        special = {
            "processing_time": ts_or_null(p.pop("processing_ms")),
            "watermark_before": ts_or_null(p.pop("wm_before")),
            "watermark_after": ts_or_null(p.pop("wm_after")),
            "partition_high_water": ms_map(p.pop("high_water")),
            "partition_last_seen": ms_map(p.pop("last_seen")),
            "partition_idle": T.literal_map(p.pop("partition_idle"), "int", "boolean"),
        }
        return T.literal_row(self.spark, {**{k: F.lit(v) for k, v in p.items()}, **special})

    def drain(self) -> bool:
        """Close every open window (end of input), as one more idempotent batch; its progress
        row has `drained` true and no watermark."""
        prev = self.previous_progress()
        if prev is None:
            return False
        if prev["drained"]:
            return True
        empty = self.spark.range(0).selectExpr(
            "CAST(NULL AS STRING) AS raw_line",
            "CAST(NULL AS STRING) AS source_file",
            "CAST(NULL AS BIGINT) AS source_line",
            "CAST(NULL AS TIMESTAMP) AS source_mtime",
        )
        self.process(empty, int(prev["batch_id"]) + 1, drain=True)
        return True


def run_stream(
    settings: Settings,
    available_now: bool = False,
    drain: bool = False,
    clock: str = "wall",
    timeout_s: float | None = None,
    spark: SparkSession | None = None,
    wall: Clock = wall_clock,
) -> str:
    """Run the speed layer; returns a one-line summary of the last batch."""
    spark = spark or session_for(settings, "tally-stream")
    params = StreamParams.from_settings(settings, arrival_clock=(clock == "arrival"))
    processor = BatchProcessor(spark, params, clock=wall)
    source = open_source(
        spark, settings.source_kind, settings.input, settings.max_files_per_trigger
    )
    writer = (
        source.writeStream.foreachBatch(processor)
        .option("checkpointLocation", settings.checkpoint_location)
        .queryName("tally_stream")
    )
    writer = (
        writer.trigger(availableNow=True)
        if available_now or drain
        else writer.trigger(processingTime=f"{settings.trigger} milliseconds")
    )
    query = writer.start()
    processor.set_app_id(str(query.id))
    try:
        if available_now or drain:
            query.awaitTermination()
        else:
            query.awaitTermination(int(timeout_s) if timeout_s is not None else None)
    finally:
        if query.isActive:
            query.stop()
    if drain:
        processor.drain()
    last = processor.previous_progress()
    if last is None:
        return "no input processed"
    watermark = "end of input (drained)" if last["drained"] else _fmt_ms(last["watermark_ms"])
    return f"batch {last['batch_id']}: watermark {watermark}; tables in {settings.warehouse}"


def _fmt_ms(ms: int | None) -> str:
    if ms is None:
        return "none"
    seconds, millis = divmod(ms, 1000)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{millis:03d}Z"
