"""The speed layer's micro-batch: the foreachBatch function `streaming.run` wires to the
source. It reads, classifies, advances the watermark, closes windows and writes.

A micro-batch makes few commits: `events`, the side outputs and `stream_aggregates` when they
have rows (written side by side, in parallel), then its `stream_progress` row, which makes
the batch visible. Window and dedup state are not tables: the running stream keeps them in
memory for the next batch and saves them as files in the checkpoint (streaming.state).

Exactly once: Spark's checkpoint replays an interrupted micro-batch with the same input
lines; only the first batch a process runs can be such a replay, so only it checks, table by
table, whether an earlier attempt already appended the batch's rows (by app_id and batch_id)
and skips those appends. Every attempt records its processing time in the checkpoint before
its first append, so a first batch that finds no record skips the checks too. The replay
recomputes the same result because it reads the state
files of batch N-1 (named in `stream_progress`) and the processing time batch N recorded
first in the checkpoint.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from streaming.health import clock_skew_warning
from streaming.lateness import DelayHistogram, advance_histograms, auto_lateness
from streaming.logic import (
    WindowOut,
    classify_events,
    close_windows,
    delay_counts,
    event_partitions,
    fold_counts,
    late_window_count,
    source_watermark_stats,
)
from streaming.params import Clock, StreamError, StreamParams, wall_clock
from streaming.progress import Progress, read_columns
from streaming.state import DEDUP, DEDUP_DDL, WINDOWS_DDL, StateStore
from streaming.watermark import WatermarkState, advance_watermark, fixed_bounds
from tally import tables
from tally.dates import counted_dates_columns, epoch_ms, iso_ms, window_reach_back_ms
from tally.events import (
    SPLIT_START,
    ParsedEvents,
    line_splits,
    number_lines,
    parse_lines,
    split_parsed,
    with_row_ids,
)
from tally.jvm_functions import batch_long, batch_long_sql, batch_timestamp
from tally.maintenance import upgrade_properties
from tally.money import DEFAULT_CURRENCY
from tally.money_columns import with_currency
from tally.spark import jvm_class, release_local_checkpoint, without_adaptive_execution
from tally.vocabulary import ALLOWED_LATE, DUPLICATE, LATE, ON_TIME

log = logging.getLogger("tally.stream")

# One writer thread per table a batch may append to (events, quarantine, late_events,
# stream_aggregates, stream_progress) plus the state files: every write of a batch side by side.
WRITER_THREADS = 6
# How long the first batch waits for the query id (known once `start()` returns): far more
# than the start takes; a stream past it is broken, not slow.
QUERY_ID_WAIT_S = 120


# -- values passed between the phases of a micro-batch ------------------------------------
@dataclass(frozen=True)
class BatchInput:
    """A micro-batch's lines, read and parsed once (`lines` stays cached for the batch)."""

    lines: DataFrame
    parsed: ParsedEvents
    input_lines: int
    newest_input_ms: int | None  # newest source file modification time (arrival clock)
    cached: list[DataFrame]  # unpersisted once the batch is written


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
    delays: Mapping[int, DelayHistogram] = field(default_factory=dict)  # lateness auto
    dedup_bytes: int = 0  # the size of the remembered ids' state files


@dataclass(frozen=True)
class Classified:
    """Valid events with window and `arrival_status` (cached), and per-partition stats."""

    events: DataFrame
    stats: list[Any]  # one row per source partition, see BatchProcessor._batch_stats
    skew_limit_ms: int  # now + max clock skew: event times beyond it are clock-skewed
    # control records: the newest source watermark per partition (clipped like high-water
    # marks) and how many there were
    source_watermark_ms: Mapping[int, int] = field(default_factory=dict)
    control_records: int = 0
    # per partition with control records: how many fell below the partition's source
    # watermark before them (0 included), and, where any did, the largest gap (ms)
    source_regressions: Mapping[int, int] = field(default_factory=dict)
    source_regression_ms: Mapping[int, int] = field(default_factory=dict)
    # lateness auto: partition -> histogram bucket -> events measured in the batch
    delay_counts: Mapping[int, Mapping[int, int]] = field(default_factory=dict)

    def count(self, column: str) -> int:
        """Total over the stats rows of a column (a status, `valid` or `skewed`)."""
        return sum(int(r[column]) for r in self.stats)

    def new_by_date(self, column: str) -> dict[date, int]:
        """Per business date whose windows can hold them (each stats row's `first_date` to
        `last_date`), the total of a stats column (`new`: the non-duplicate events;
        `new_amount`: their amount) over the rows with such events (a date without any is
        left out of both)."""
        out: dict[date, int] = {}
        for r in self.stats:
            if not r["new"]:
                continue
            day, last = r["first_date"], r["last_date"]
            while day <= last:
                out[day] = out.get(day, 0) + int(r[column])
                day += timedelta(days=1)
        return out

    @property
    def valid(self) -> int:
        return self.count("valid")

    def quarantined(self, input_lines: int) -> int:
        """Every line is a valid event, a control record or quarantined."""
        return input_lines - self.valid - self.control_records

    @property
    def high_water_ms(self) -> dict[int, int]:
        """Newest event time per partition, clipped to now + max skew, so an event from a
        clock running ahead cannot drag the watermark into the future."""
        newest: dict[int, int] = {}
        for r in self.stats:  # a row per (partition, event date)
            part = int(r["partition"])
            newest[part] = max(newest.get(part, int(r["max_ms"])), int(r["max_ms"]))
        return {part: min(ms, self.skew_limit_ms) for part, ms in newest.items()}


@dataclass(frozen=True)
class WatermarkStep:
    """The watermark state before and after this batch, and which partitions were idle."""

    before: WatermarkState
    after: WatermarkState  # the drain keeps the partitions' marks as they were
    after_ms: int | None  # None: no watermark yet, or drained (end of input closed everything)
    idle: Mapping[int, bool]
    lateness_ms: Mapping[int, int] = field(default_factory=dict)  # bound in force per partition
    delays: Mapping[int, DelayHistogram] = field(default_factory=dict)  # lateness auto's state


@dataclass(frozen=True)
class CommittedState:
    """What a batch wrote, for its progress row and the next batch."""

    events_version: int
    state_batch: int  # the batch id whose state files hold the state after this batch
    open_windows: int
    windows_emitted: int


@dataclass(frozen=True)
class KeptState:
    """State this process computed for the batch `batch_id`, reused by the next batch."""

    batch_id: int
    windows: DataFrame
    dedup: DataFrame


class PhaseTimer:
    """Wall seconds of each phase of a micro-batch, for the log and the benchmark."""

    def __init__(self, started: float):
        self._last = started
        self.seconds: dict[str, float] = {}

    def done(self, phase: str) -> None:
        now = time.monotonic()
        self.seconds[phase] = now - self._last
        self._last = now

    def __str__(self) -> str:
        return ", ".join(f"{k} {v:.2f} s" for k, v in self.seconds.items())


class BatchProcessor:
    """The foreachBatch function: one micro-batch in, idempotent Delta writes out."""

    def __init__(
        self,
        spark: SparkSession,
        params: StreamParams,
        clock: Clock = wall_clock,
        guard: Callable[[], None] | None = None,
    ):
        self.spark = spark
        self.params = params
        self.clock = clock
        # Called before a batch reads and again before it writes: raises if this process may
        # no longer write the warehouse (its lease was taken over).
        self.guard = guard or (lambda: None)
        self.store = StateStore(spark, params.checkpoint_location)
        self._app_id: str | None = None
        self._app_id_ready = threading.Event()
        # The last batch this process committed, so the next batch need not read it back.
        # A replay after a crash runs in a new process and reads stream_progress instead.
        self._committed: Progress | None = None
        self._kept: KeptState | None = None
        # The fold's local checkpoints not released yet, oldest first: the newest holds the
        # kept windows, older ones are released once the batch after them committed.
        self._checkpoints: list[DataFrame] = []
        self._batches_seen = 0
        self._skew_warned = False  # the clock-skew line is printed once per process
        # Whether this batch may repeat an attempt that already appended: only the first batch
        # a process runs can (`_may_be_replay`), and only if it found an earlier attempt's
        # clock record (every attempt records it before its first append); set per batch by
        # `_batch_now_ms`, so the per-table checks (a Spark job each) run only then.
        self._replaying = True
        self._state_partitions = int(spark.conf.get("spark.sql.shuffle.partitions") or "4")
        self._cores = int(spark.sparkContext.defaultParallelism)  # task slots (`event_partitions`)
        self.last_phases: dict[str, float] = {}
        # Writes of one batch to different tables go side by side: each is mostly waiting on
        # Delta's commit protocol, not computing.
        self._writers = ThreadPoolExecutor(
            max_workers=WRITER_THREADS, thread_name_prefix="tally-write"
        )
        self._created, self._creating = self._start_tables()

    def _start_tables(self) -> tuple[set[str], list[Future[None]]]:
        """Start creating the stream's tables that do not exist yet, side by side in the writer
        threads (a Delta commit each), while the first batch reads and classifies: in a fresh
        JVM creating them takes seconds, mostly Delta's first use. The names to create, and
        their creations (`await_tables`). An existing table gains the columns newer versions
        added, before anything else runs."""
        warehouse = self.params.warehouse
        missing = [
            t for t in tables.STREAMING_TABLES if not tables.exists(self.spark, warehouse, t.name)
        ]
        created = {t.name for t in missing}
        # a warehouse from before source watermarks lacks their progress columns; early
        # firings' `final`, session windows' `retracted`; events' `currency` (old rows: null,
        # read as the reading run's default_currency)
        for table in (
            tables.STREAM_PROGRESS,
            tables.STREAM_AGGREGATES,
            tables.EVENTS,
            tables.LATE_EVENTS,
        ):
            if table.name not in created:
                tables.add_missing_columns(self.spark, warehouse, table)
        extra = dict(self.params.table_properties)
        for table in tables.STREAMING_TABLES:  # before the first append: a property change is a
            if table.name not in created:  # metadata commit, concurrent appends fail on it
                upgrade_properties(
                    self.spark, tables.table_path(warehouse, table.name), table, extra
                )
        creating = [
            self._writers.submit(tables.ensure_table, self.spark, warehouse, t, extra)
            for t in missing
        ]
        return created, creating

    def await_tables(self) -> None:
        """Wait until every stream table exists (raises what a creation raised)."""
        for creation in self._creating:
            creation.result()

    def close(self) -> None:
        """Let go of the kept state and the writer threads (the tables are already written)."""
        self._writers.shutdown(wait=True)
        self._release_checkpoints(keep=0)
        self._kept = None
        self._committed = None

    def __enter__(self) -> BatchProcessor:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- identity -------------------------------------------------------------------------
    def set_app_id(self, app_id: str) -> None:
        self._app_id = app_id
        self._app_id_ready.set()

    @property
    def app_id(self) -> str:
        # The query id is known only once start() returns; the first batch may already run.
        if not self._app_id_ready.wait(timeout=QUERY_ID_WAIT_S):
            raise StreamError(f"stream: query id not set within {QUERY_ID_WAIT_S} s")
        assert self._app_id is not None
        return self._app_id

    # -- reads ----------------------------------------------------------------------------
    def _path(self, table: tables.Table) -> str:
        return tables.table_path(self.params.warehouse, table.name)

    def _read(self, table: tables.Table, version: int | None = None) -> DataFrame:
        return tables.read_table(self.spark, self.params.warehouse, table.name, version)

    def previous_progress(self, before_batch: int | None = None) -> Progress | None:
        """The last committed batch of this query (one small row)."""
        if before_batch is None and self._committed is not None:
            return self._committed  # the last commit of the query is this process's own
        if tables.STREAM_PROGRESS.name in self._created and self._committed is None:
            return None  # this process created the table and has not committed to it yet
        progress = self._read(tables.STREAM_PROGRESS).where(F.col("app_id") == self.app_id)
        if before_batch is not None:
            progress = progress.where(F.col("batch_id") < before_batch)
        row = (
            progress.orderBy(F.col("batch_id").desc())
            .selectExpr(*read_columns())
            .limit(1)
            .collect()
        )
        return Progress.from_row(row[0]) if row else None

    def _batch_now_ms(
        self, batch_id: int, newest_input_ms: int | None, prev: Progress | None
    ) -> int:
        """Processing time of this batch, the same in any replay of it.

        The arrival clock is a function of the batch's files, so a replay recomputes it. The
        wall clock is recorded in the checkpoint before the batch writes anything else; only
        the first batch a process runs can be a replay (Spark replays the interrupted batch
        first), so only it looks for a record. Either clock is recorded: the record is also
        the mark that an attempt of the batch may have written (see `_replaying`).
        """
        prev_ms = prev.processing_time_ms if prev else None
        recorded = self.store.recorded_clock(batch_id) if self._may_be_replay else None
        self._replaying = recorded is not None
        if self.params.arrival_clock:
            now_ms = newest_input_ms if newest_input_ms is not None else (prev_ms or 0)
            now_ms = max(now_ms, prev_ms) if prev_ms is not None else now_ms
        elif recorded is not None:
            return recorded
        else:
            now_ms = epoch_ms(self.clock())
            if prev_ms is not None:
                now_ms = max(now_ms, prev_ms)  # processing time never runs backwards
        if recorded is None:
            self.store.record_clock(batch_id, now_ms)
        return now_ms

    # -- writes ---------------------------------------------------------------------------
    def _already_written(self, table: tables.Table, batch_id: int) -> bool:
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

    def _append(self, df: DataFrame, table: tables.Table, batch_id: int) -> None:
        """Append once: skipped when a previous attempt of the batch committed it, which can
        only be the case for the first batch a process runs, and only when an earlier attempt
        recorded its clock (see `_replaying`)."""
        t0 = time.monotonic()
        self._label(batch_id, f"append {table.name}")  # this thread's jobs
        if not (self._replaying and self._already_written(table, batch_id)):
            tables.conform(df, table).write.format("delta").mode("append").save(self._path(table))
        log.debug("append %s: %.2f s", table.name, time.monotonic() - t0)

    def _labelled(self, batch_id: int, what: str, write: Callable[[], None]) -> None:
        """Run `write` (in a writer thread) with its Spark jobs named."""
        self._label(batch_id, what)
        write()

    def _table_version(self, table: tables.Table) -> int:
        """The table's current version as this process's Delta log knows it (after its own
        commit, no read of the log: the commit updated it)."""
        delta_log = jvm_class(self.spark, "org.apache.spark.sql.delta.DeltaLog").forTable(
            self.spark._jsparkSession, self._path(table)
        )
        return int(delta_log.unsafeVolatileSnapshot().version())

    @property
    def _may_be_replay(self) -> bool:
        # Spark runs batch N+1 only after batch N's foreachBatch returned, and a failed batch
        # stops the query; so only the first batch of a process can repeat an earlier attempt.
        return self._batches_seen == 0

    def _label(self, batch_id: int, what: str) -> None:
        """Name the calling thread's next Spark jobs (the UI's and the event log's job
        description), so a profile tells a batch's phases and appends apart."""
        self.spark.sparkContext.setJobDescription(f"tally batch {batch_id}: {what}")

    # -- the batch ------------------------------------------------------------------------
    def __call__(self, raw_batch: DataFrame, batch_id: int) -> None:
        self.process(raw_batch, batch_id)

    def process(self, raw_batch: DataFrame, batch_id: int, drain: bool = False) -> None:
        """One micro-batch: read, classify, advance the watermark, close windows, write.

        With `drain`, the end of input: every open window closes, and nothing stored holds a
        watermark for it (`watermark_after` and the drained windows' `watermark_at_emit` are
        NULL, `drained` is true).
        """
        self.guard()
        started = time.monotonic()
        phases = PhaseTimer(started)
        self._label(batch_id, "read_parse")
        prev = self._previous_batch(batch_id)
        batch = self._read_batch(
            raw_batch,
            batch_id,
            started,
            self.params.source_watermark_field,
            self.params.default_currency,
        )
        phases.done("read_parse")
        now_ms = self._batch_now_ms(batch_id, batch.newest_input_ms, prev)
        ctx = BatchContext(batch_id, now_ms, drain, started)
        prior = self._prior_state(prev)
        phases.done("clock_state")
        self._label(batch_id, "classify")
        classified = self._classify(ctx, batch, prior)
        step = self._advance(ctx, prior, classified)
        phases.done("classify")
        self._label(batch_id, "windows")
        fold = Observation(f"tally_fold_{batch_id}")
        out = close_windows(
            classified.events,
            prior.window_state,
            prior.dedup_state,
            step.before.watermark_ms,
            step.after_ms,
            now_ms,
            self.params.window,
            drain=drain,
            materialize=lambda df: self._checkpoint(
                df.observe(fold, *fold_counts(self.params.window))
            ),
        )
        phases.done("windows")
        self.guard()
        self._label(batch_id, "write")
        state, kept = self._write_batch(ctx, batch, classified, out, fold.get)
        phases.done("write")
        progress = self._progress(ctx, batch, classified, step, state)
        self._label(batch_id, "progress")
        # one SQL query of literals: one Py4J call for the row's DataFrame
        self._append(self.spark.sql(progress.to_sql()), tables.STREAM_PROGRESS, batch_id)
        phases.done("progress")
        self._finish(progress, kept)
        self.store.forget_before(batch_id)
        for frame in (classified.events, *batch.cached):
            frame.unpersist()
        self._release_checkpoints(keep=1)  # the previous batch's: nothing kept reads it now
        self.last_phases = phases.seconds
        log.debug("batch %d phases: %s", batch_id, phases)
        log.info(
            "batch %d: %d valid, %d late, %d quarantined, watermark %s, %.2f s",
            batch_id,
            classified.valid,
            classified.count(LATE),
            classified.quarantined(batch.input_lines),
            "drained" if drain else step.after_ms,
            time.monotonic() - started,
        )

    def _checkpoint(self, df: DataFrame) -> DataFrame:
        """`df` computed once into Spark's blocks (a local checkpoint), released by
        `_release_checkpoints` once no kept state reads it."""
        done = df.localCheckpoint(eager=True)
        self._checkpoints.append(done)
        return done

    def _release_checkpoints(self, keep: int) -> None:
        """Release all but the newest `keep` fold checkpoints now: left to the JVM's garbage
        collector, a five-day batch's lingered up to two batches past its last reader."""
        while len(self._checkpoints) > keep:
            release_local_checkpoint(self._checkpoints.pop(0))

    # -- phases of a batch, in the order `process` runs them ------------------------------
    def _previous_batch(self, batch_id: int) -> Progress | None:
        """The batch before `batch_id` (kept from this process or read back); refuses input
        to a drained checkpoint. The drain is a batch of its own after the query's last one,
        which Spark's checkpoint does not know: new input after it comes as a batch with the
        drain's id, whose appends would be skipped as a replay's. So the query's newest row
        is checked too (read once a process)."""
        cached = self._committed
        if cached is not None and cached.batch_id == batch_id - 1:
            prev: Progress | None = cached
        else:
            prev = self.previous_progress(before_batch=batch_id)
        newest = cached if cached is not None else self.previous_progress()
        drained = next((p for p in (prev, newest) if p is not None and p.drained), None)
        if drained is not None:
            raise StreamError(
                f"stream: checkpoint was drained at batch {drained.batch_id}; new input needs "
                "a new checkpoint and warehouse"
            )
        return prev

    @staticmethod
    def _read_batch(
        raw_batch: DataFrame,
        batch_id: int,
        started: float,
        control_field: str = "",
        default_currency: str = DEFAULT_CURRENCY,
    ) -> BatchInput:
        """Each line is read and parsed once, then numbered; valid events, quarantine and
        control records all come from here."""
        control = control_field or None
        if SPLIT_START in raw_batch.columns:  # file lines: numbered here, from their splits
            parsed = parse_lines(with_row_ids(raw_batch), control, default_currency).persist()
            # The split table (one job) also reads and caches every parsed line, and gives the
            # batch's line count and newest file time: no other pass over the lines. Numbering
            # is a broadcast join of a few literal rows onto the cache: not worth a second one.
            # One job, where adaptive execution made three (the cache, the map stage, the
            # result): a few rows out of a persisted frame have nothing to re-plan.
            with without_adaptive_execution(parsed.sparkSession):
                splits = line_splits(parsed)
            lines = number_lines(parsed, splits)
            cached = [parsed]
            input_lines = sum(s.lines for s in splits)
            mtimes = [s.mtime_ms for s in splits if s.mtime_ms is not None]
            newest_ms = max(mtimes) if mtimes else None
        else:  # the source numbered its lines (`source_line`) itself
            lines = parse_lines(raw_batch, control, default_currency).persist()
            cached = [lines]
            raw_stats = lines.agg(
                F.count(F.lit(1)).alias("lines"),
                F.max(F.unix_millis("source_mtime")).alias("newest"),
            ).first()
            assert raw_stats is not None
            input_lines, newest_ms = int(raw_stats["lines"]), raw_stats["newest"]
        log.debug("batch %d: read and parse %.2f s", batch_id, time.monotonic() - started)
        return BatchInput(
            lines=lines,
            parsed=split_parsed(lines),
            input_lines=input_lines,
            newest_input_ms=newest_ms,
            cached=cached,
        )

    def _prior_state(self, prev: Progress | None) -> PriorState:
        """The watermark state and the open windows and remembered ids after the previous
        batch: kept in memory by this process, else read from the checkpoint's state files."""
        if prev is None:
            return PriorState(
                WatermarkState(),
                tables.empty_of(self.spark, WINDOWS_DDL),
                tables.empty_of(self.spark, DEDUP_DDL),
            )
        watermark = WatermarkState(
            prev.watermark_after_ms,
            dict(prev.partition_high_water_ms),
            dict(prev.partition_last_seen_ms),
            dict(prev.partition_source_watermark_ms),
            dict(prev.partition_unheard_ms),
        )
        measured = prev.partition_delays_measured
        delays = {
            part: DelayHistogram(dict(weights), measured.get(part, 0))
            for part, weights in prev.partition_delay_weights.items()
        }
        dedup_bytes = self.store.part_bytes(prev.dedup_state_version, DEDUP)
        kept = self._kept
        if kept is not None and kept.batch_id == prev.batch_id:
            return PriorState(watermark, kept.windows, kept.dedup, delays, dedup_bytes)
        try:
            windows, dedup = self.store.read(prev.window_state_version)
        except FileNotFoundError as exc:
            raise StreamError(f"stream: {exc}") from None
        # windows held before amounts carried a currency are in the default one
        windows = with_currency(windows, self.params.default_currency)
        return PriorState(watermark, windows, dedup, delays, dedup_bytes)

    def _classify(self, ctx: BatchContext, batch: BatchInput, prior: PriorState) -> Classified:
        """Arrival status of every valid event, against the watermark before this batch."""
        p = self.params
        skew_limit_ms = ctx.now_ms + p.max_clock_skew_ms
        late_windows = late_window_count(prior.watermark.watermark_ms, p.window)
        # Planned and run without adaptive execution, the cache included (its plan is made
        # when it is persisted): one Spark job where adaptive execution ran one per shuffle
        # and one for the cache. The partitions are chosen here (`event_partitions`).
        with without_adaptive_execution(batch.parsed.valid.sparkSession):
            events = classify_events(
                batch.parsed.valid,
                prior.watermark.watermark_ms,
                p.window,
                prior.dedup_state,
                partitions=event_partitions(batch.input_lines, self._state_partitions, self._cores),
                seen_ids_bytes=prior.dedup_bytes,
            ).persist()
            stats = self._batch_stats(events, skew_limit_ms, late_windows)
        controls = (
            source_watermark_stats(
                batch.parsed.controls, skew_limit_ms, prior.watermark.source_watermark_ms
            ).collect()
            if p.source_watermark_field
            else []
        )
        measured: dict[int, dict[int, int]] = {}
        if p.lateness_auto:  # one small aggregate: (partition, bucket) -> events
            for r in delay_counts(events, prior.watermark.high_water_ms).collect():
                measured.setdefault(int(r["partition"]), {})[int(r["bucket"])] = int(r["n"])
        classified = Classified(
            events,
            stats,
            skew_limit_ms,
            source_watermark_ms={int(r["partition"]): int(r["wm"]) for r in controls},
            control_records=sum(int(r["n"]) for r in controls),
            source_regressions={int(r["partition"]): int(r["regressions"]) for r in controls},
            source_regression_ms={
                int(r["partition"]): int(r["regression_ms"])
                for r in controls
                if r["regression_ms"] is not None
            },
            delay_counts=measured,
        )
        self._warn_clock_skew(ctx, classified)
        for part, count in sorted(classified.source_regressions.items()):
            if count:  # the source broke its promise; the watermark ignores it (semantics.md)
                log.warning(
                    "source watermark regression: batch=%d partition=%d records=%d "
                    "largest_ms=%d kept=%s",
                    ctx.batch_id,
                    part,
                    count,
                    classified.source_regression_ms[part],
                    iso_ms(prior.watermark.source_watermark_ms.get(part)),
                )
        log.debug("batch %d: classified %.2f s", ctx.batch_id, time.monotonic() - ctx.started)
        return classified

    def _warn_clock_skew(self, ctx: BatchContext, classified: Classified) -> None:
        """One line (stderr, through the log) in the first batch whose events are mostly ahead
        of processing time: the stream then closes no window, silently (streaming/health.py)."""
        if self._skew_warned or not classified.stats:
            return
        newest_ms = max(int(r["max_ms"]) for r in classified.stats)
        line = clock_skew_warning(
            ctx.batch_id,
            classified.valid,
            classified.count("skewed"),
            newest_ms - ctx.now_ms,
            self.params.max_clock_skew_ms,
            self.params.arrival_clock,
        )
        if line is not None:
            self._skew_warned = True
            log.warning("%s", line)

    def _advance(
        self, ctx: BatchContext, prior: PriorState, classified: Classified
    ) -> WatermarkStep:
        """The watermark after this batch, with each known partition's bound (lateness auto:
        chosen from its delays, streaming/lateness.py). The drain closes every window without
        one: it keeps the partitions' marks (and delay histograms) and stores no watermark."""
        before = prior.watermark
        if ctx.drain:
            return WatermarkStep(before, before, None, {}, {}, prior.delays)
        p = self.params
        known = sorted({*before.high_water_ms, *classified.high_water_ms})
        delays = prior.delays
        if p.lateness_auto:
            delays = advance_histograms(
                prior.delays,
                classified.delay_counts,
                before.high_water_ms,
                classified.high_water_ms,
            )
            lateness = auto_lateness(
                delays,
                known,
                p.completeness_target,
                p.lateness_min_ms,
                p.lateness_max_ms,
                p.lateness_by_partition,
                p.lateness_min_history,
            )
        else:
            lateness = fixed_bounds(known, p.lateness_ms, p.lateness_by_partition)
        advance = advance_watermark(
            before,
            classified.high_water_ms,
            ctx.now_ms,
            p.lateness_ms,
            p.idle_timeout_ms,
            p.watermark_policy,
            lateness,
            classified.source_watermark_ms,
            p.expected_partitions,
        )
        return WatermarkStep(
            before, advance.state, advance.state.watermark_ms, advance.idle, lateness, delays
        )

    def _write_batch(
        self,
        ctx: BatchContext,
        batch: BatchInput,
        classified: Classified,
        out: WindowOut,
        fold: dict[str, Any],
    ) -> tuple[CommittedState, KeptState]:
        """Everything but the progress row, side by side: `events`, the side outputs and
        `stream_aggregates` when they have rows, and the state files. Empty outputs are not
        written: a replay recomputes them empty again."""
        batch_id = ctx.batch_id
        self.await_tables()  # the first batch of a new warehouse may get here before them
        columns = {
            "batch_id": batch_long(batch_id),
            "ingest_time": batch_timestamp(ctx.now_ms),
            "app_id": F.lit(self.app_id),
        }
        # Kept ids are the union of the previous batch's and this batch's: without a coalesce
        # their partitions (and the files of every state write) would grow batch by batch.
        dedup = out.dedup_state.coalesce(self._state_partitions)
        # Both were observed while the fold was checkpointed (`fold_counts`).
        open_windows, emitted = int(fold["open_windows"]), int(fold["windows_emitted"])
        events = classified.events.withColumns(
            {
                "clock_skewed": F.unix_millis("event_time") > batch_long(classified.skew_limit_ms),
                **columns,
                "event_date": F.to_date("event_time"),
            }
        )
        tasks: list[Callable[[], None]] = [
            lambda: self._append(events, tables.EVENTS, batch_id),
            lambda: self._labelled(
                batch_id, "state", lambda: self.store.write(batch_id, out.window_state, dedup)
            ),
        ]
        if classified.quarantined(batch.input_lines):
            quarantine = batch.parsed.quarantine.withColumns(columns)
            tasks.append(lambda: self._append(quarantine, tables.QUARANTINE, batch_id))
        if classified.count("late_windows"):
            late = out.late_events.withColumns(columns)
            tasks.append(lambda: self._append(late, tables.LATE_EVENTS, batch_id))
        if emitted:
            aggregates = out.aggregates.withColumns(
                {"batch_id": batch_long(batch_id), "app_id": F.lit(self.app_id)}
            )
            tasks.append(lambda: self._append(aggregates, tables.STREAM_AGGREGATES, batch_id))
        for future in [self._writers.submit(task) for task in tasks]:
            future.result()
        committed = CommittedState(
            self._table_version(tables.EVENTS), batch_id, open_windows, emitted
        )
        # The next batch reads the remembered ids back from the files just written: computing
        # them once for the write is cheaper than a checkpoint in memory and then the write.
        return committed, KeptState(batch_id, out.window_state, self.store.read_dedup(batch_id))

    def _progress(
        self,
        ctx: BatchContext,
        batch: BatchInput,
        classified: Classified,
        step: WatermarkStep,
        state: CommittedState,
    ) -> Progress:
        """The batch's `stream_progress` row."""
        after = step.after
        active_hw = [hw for part, hw in after.high_water_ms.items() if not step.idle.get(part)]
        wm_after, now_ms = step.after_ms, ctx.now_ms
        return Progress(
            batch_id=ctx.batch_id,
            app_id=self.app_id,
            processing_time_ms=now_ms,
            watermark_before_ms=step.before.watermark_ms,
            watermark_after_ms=wm_after,
            partition_high_water_ms=dict(after.high_water_ms),
            partition_last_seen_ms=dict(after.last_seen_ms),
            partition_idle=dict(step.idle),
            input_lines=batch.input_lines,
            valid_events=classified.valid,
            on_time_events=classified.count(ON_TIME),
            allowed_late_events=classified.count(ALLOWED_LATE),
            late_events=classified.count(LATE),
            duplicate_events=classified.count(DUPLICATE),
            quarantined_lines=classified.quarantined(batch.input_lines),
            clock_skewed_events=classified.count("skewed"),
            windows_emitted=state.windows_emitted,
            open_windows=state.open_windows,
            watermark_lag_ms=now_ms - wm_after if wm_after is not None and not ctx.drain else None,
            partition_spread_ms=max(active_hw) - min(active_hw) if active_hw else None,
            batch_duration_ms=int((time.monotonic() - ctx.started) * 1000),
            drained=ctx.drain,
            window_state_version=state.state_batch,
            dedup_state_version=state.state_batch,
            events_version=state.events_version,
            control_records=classified.control_records,
            partition_source_watermark_ms=dict(after.source_watermark_ms),
            partition_unheard_ms=dict(after.unheard_since_ms),
            source_watermark_regressions=dict(classified.source_regressions),
            source_watermark_regression_ms=dict(classified.source_regression_ms),
            partition_lateness_ms=dict(step.lateness_ms),
            partition_delay_weights={part: dict(h.weights) for part, h in step.delays.items()},
            partition_delays_measured={part: h.measured for part, h in step.delays.items()},
            new_events_by_date=classified.new_by_date("new"),
            new_amount_by_date=classified.new_by_date("new_amount"),
            report_timezone=self.params.report_timezone,
        )

    def _finish(self, progress: Progress, kept: KeptState) -> None:
        """The batch is committed: remember it, so the next batch need not read it back."""
        self._batches_seen += 1
        self._committed = progress
        self._kept = kept

    def _batch_stats(
        self, classified: DataFrame, skew_limit_ms: int, late_windows: Column
    ) -> list[Any]:
        """One small row per source partition and span of business dates whose windows can
        hold the events (`tally.dates.counted_dates`: a batch spans one or two): newest event
        time, counts by status, the non-duplicate events and their amount (`new`,
        `new_amount`: what a reconciled date gains, restatements) and the number of late
        (event, window) rows (`late_windows`: the side output's size). The aggregates are SQL
        text: one Py4J call each."""
        p = self.params
        first, last = counted_dates_columns(
            window_reach_back_ms(p.window_ms, p.window_slide_ms, p.session_gap_ms),
            p.report_timezone,
        )
        statuses = (ON_TIME, ALLOWED_LATE, LATE, DUPLICATE)
        fresh = f"arrival_status <> '{DUPLICATE}'"
        aggregates = [
            "max(unix_millis(event_time)) AS max_ms",
            "count(1) AS valid",
            *[f"count_if(arrival_status = '{s}') AS {s}" for s in statuses],
            f"count_if(unix_millis(event_time) > {batch_long_sql(skew_limit_ms)}) AS skewed",
            f"count_if({fresh}) AS new",
            f"coalesce(sum(CASE WHEN {fresh} THEN amount END), 0) AS new_amount",
        ]
        return (
            classified.groupBy("partition", first.alias("first_date"), last.alias("last_date"))
            .agg(*[F.expr(a) for a in aggregates], F.sum(late_windows).alias("late_windows"))
            .collect()
        )

    def drain(self) -> bool:
        """Close every open window (end of input), as one more idempotent batch; its progress
        row has `drained` true and no watermark."""
        prev = self.previous_progress()
        if prev is None:
            return False
        if prev.drained:
            return True
        empty = self.spark.range(0).selectExpr(
            "CAST(NULL AS STRING) AS raw_line",
            "CAST(NULL AS STRING) AS source_file",
            "CAST(NULL AS TIMESTAMP) AS source_mtime",
            f"CAST(NULL AS BIGINT) AS {SPLIT_START}",
        )
        self.process(empty, prev.batch_id + 1, drain=True)
        return True
