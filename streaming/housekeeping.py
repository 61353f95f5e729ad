"""The stream's housekeeping: it is the only writer of its tables (the warehouse's lease), so
it compacts and vacuums them itself, off the micro-batch's critical path.

After each committed batch the housekeeper learns the batch's processing time and watermark.
It plans (`tally.maintenance`) when a date closed, or when an interval passed on that clock
(the stream's own processing time, so a backlog replayed under the arrival clock is maintained
as it would have been live), and runs the actions one at a time: right after a batch, before
the next one starts, one action per gap between batches (`inline`, the default), or in a
background thread whose Spark jobs go to their own scheduler pool (`thread`). Every action
gets a `maintenance_log` row, the plan's rows in one write after its last action. An action
that fails is logged as failed and retried when next due; it never stops the stream. A lost
lease stops housekeeping with the stream (the guard runs before each action).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import date

from pyspark.sql import SparkSession

from streaming.watermark import closed_through
from tally import maintenance, tables

log = logging.getLogger("tally.housekeeping")

# The Spark scheduler pool of housekeeping jobs: under Spark's default FIFO scheduler it only
# names them (the UI, the event log); a session run with `spark.scheduler.mode=FAIR` and an
# allocation file can give it a low weight.
POOL = "tally-housekeeping"

# Inline, at most this many actions run between two micro-batches: a plan of several (every
# table's compaction falls due in the same interval) is spread over the next gaps, each short
# enough to fit in the idle time a processing-time trigger leaves after a batch.
INLINE_ACTIONS_PER_GAP = 1

# The tables the stream writes and maintains: (table, its date partition column or None).
STREAM_MAINTAINED: tuple[tuple[tables.Table, str | None], ...] = (
    (tables.EVENTS, "event_date"),
    (tables.QUARANTINE, None),
    (tables.LATE_EVENTS, None),
    (tables.STREAM_AGGREGATES, None),
    (tables.STREAM_PROGRESS, None),
    (tables.MAINTENANCE_LOG, None),
)


@dataclass(frozen=True)
class Clock:
    """Where the stream is after a committed batch."""

    processing_ms: int
    watermark_ms: int | None
    drained: bool


@dataclass(frozen=True)
class Closing:
    """The closing rule's inputs for `event_date` (UTC dates): how far a date's windows reach
    past its end and the allowed lateness (streaming.watermark.date_closed_at)."""

    reach_ms: int
    allowed_lateness_ms: int

    def closed_through(self, clock: Clock) -> date | None:
        if clock.watermark_ms is None:
            return None
        return closed_through(clock.watermark_ms, "UTC", self.reach_ms, self.allowed_lateness_ms)


class Housekeeper:
    """Plans and runs the maintenance of the stream's tables (see the module docstring)."""

    def __init__(
        self,
        spark: SparkSession,
        warehouse: str,
        schedule: maintenance.Schedule,
        closing: Closing,
        *,
        mode: str = "thread",
        wall_ms: Callable[[], int],
        guard: Callable[[], None] = lambda: None,
        run_by: str = "stream",
        forget_schedule: bool = False,
    ):
        self.spark = spark
        self.warehouse = warehouse
        self.schedule = schedule
        self.closing = closing
        self.mode = mode
        self.wall_ms = wall_ms
        self.guard = guard
        self.run_by = run_by
        self.outcomes: list[maintenance.Outcome] = []  # this process's actions, in order
        # when each action last succeeded, read from the log on the first plan; `tally
        # maintain` forgets it: everything runs that has something to do
        self._last: dict[tuple[str, str, str | None], int] | None = {} if forget_schedule else None
        self._forget = forget_schedule
        self._first_ms: int | None = None  # the clock of this writer's first plan
        self._planned: tuple[int, date | None] | None = None  # clock and closed date planned at
        self._latest: Clock | None = None
        # the plan's actions not run yet (inline runs one between two batches), the clock they
        # were planned at, and the outcomes whose log rows are not written yet
        self._queue: list[maintenance.Action] = []
        self._queue_clock: Clock | None = None
        self._unlogged: list[maintenance.Outcome] = []
        # each table's live files as last planned, moved forward from its log at each plan
        self._layouts: dict[str, maintenance.KnownLayout] = {}
        # per table, when the files removed since its last VACUUM here were removed (wall ms),
        # and the tables this process vacuumed
        self._removed: dict[str, tuple[int, ...]] = {}
        self._vacuumed: set[str] = set()
        self._started_wall_ms = wall_ms()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._lock = threading.Lock()  # one plan at a time (thread, finish)
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None  # what stopped the thread, if anything did

    # -- the stream's side ---------------------------------------------------------------------
    def start(self) -> Housekeeper:
        if self.mode == "thread":
            self._thread = threading.Thread(
                target=self._loop, name="tally-housekeeping", daemon=True
            )
            self._thread.start()
        return self

    def after_batch(self, clock: Clock) -> None:
        """A batch committed: plan (inline now; in the thread as soon as it is free)."""
        self._latest = clock
        if self.mode == "thread":
            self._wake.set()
        else:
            self.run_due(clock, limit=INLINE_ACTIONS_PER_GAP)

    @property
    def pending(self) -> int:
        """Planned actions not run yet (inline: they run one a gap)."""
        return len(self._queue)

    def stop(self) -> None:
        """Stop the thread after the action it runs (nothing new starts)."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def finish(self) -> list[maintenance.Outcome]:
        """Stop the thread, then run what fell due by the last batch (a stream run as a job,
        `--available-now`, leaves nothing due behind)."""
        self.stop()
        if self._latest is None:
            return []
        left = self.run_due(self._latest)  # what was planned and not run yet, if anything
        return left + self.run_due(self._latest, force_plan=True)

    # -- planning and running ------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait()
            self._wake.clear()
            clock = self._latest
            if clock is None or self._stopping.is_set():
                continue
            try:
                self.run_due(clock, stopping=self._stopping)
            except BaseException as exc:  # the guard (lease lost) or a Spark shutdown
                self.error = exc
                log.warning("housekeeping stopped: %s", maintenance.first_line(exc))
                return

    def _plan_needed(self, clock: Clock, closed: date | None) -> bool:
        if self._planned is None:
            return True
        planned_ms, planned_closed = self._planned
        if closed != planned_closed or clock.drained:
            return True
        every = (self.schedule.compact_interval_ms, self.schedule.vacuum_interval_ms)
        positive = [i for i in every if i > 0]
        return bool(positive) and clock.processing_ms - planned_ms >= min(positive)

    def plan(self, clock: Clock) -> list[maintenance.Action]:
        """The actions due at this clock, over every maintained table."""
        if self._last is None:
            self._last = maintenance.last_done(self.spark, self.warehouse, tables.MAINTENANCE_LOG)
        closed = maintenance.date_closed_by(self.closing.closed_through(clock), clock.drained)
        actions: list[maintenance.Action] = []
        present = [
            (t, c)
            for t, c in STREAM_MAINTAINED
            if tables.exists(self.spark, self.warehouse, t.name)
        ]
        for table, column in present:
            actions += maintenance.compactions_due(
                table.name,
                column,
                self._layout(table.name, column),
                closed,
                self.schedule,
                clock.processing_ms,
                self._last,
            )
        names = [t.name for t, _ in present]
        if self._first_ms is None:
            self._first_ms = clock.processing_ms
        first = (
            clock.processing_ms - self.schedule.vacuum_interval_ms
            if self._forget
            else self._first_ms
        )
        actions += maintenance.vacuums_due(
            names, self.schedule, clock.processing_ms, self._last, first, self._vacuum_frees
        )
        return actions

    def _layout(self, table: str, column: str | None) -> Mapping[str | None, maintenance.FileStats]:
        """The table's live files now, moved forward from the last plan's."""
        path = tables.table_path(self.warehouse, table)
        known = maintenance.layout_now(self.spark, path, column, self._layouts.get(table))
        self._layouts[table] = known
        self._removed[table] = self._removed.get(table, ()) + known.removed_ms
        return known.stats

    def _vacuum_frees(self, table: str) -> bool:
        """A table this process has not vacuumed yet may hold anything (files removed before
        it started, a killed write's); after that, only the removals it saw can expire."""
        removed = self._removed.get(table, ()) if table in self._vacuumed else None
        return maintenance.vacuum_frees(
            removed, self.wall_ms(), self.schedule.deleted_file_retention_ms
        )

    def _vacuumed_now(self, table: str, wall_ms: int) -> None:
        """What a VACUUM at `wall_ms` left pending: the removals not yet expired, and (after
        the first) any made before this process started that may not have."""
        before_start = () if table in self._vacuumed else (self._started_wall_ms,)
        self._removed[table] = maintenance.still_pending(
            self._removed.get(table, ()) + before_start,
            wall_ms,
            self.schedule.deleted_file_retention_ms,
        )
        self._vacuumed.add(table)

    def run_due(
        self,
        clock: Clock,
        force_plan: bool = False,
        stopping: threading.Event | None = None,
        limit: int | None = None,
    ) -> list[maintenance.Outcome]:
        """Run what is planned and not run yet, or else plan at this clock (when due) and run
        that: at most `limit` actions (None: all), each logged."""
        with self._lock:
            closed = self.closing.closed_through(clock)
            if not self._queue and not (force_plan or self._plan_needed(clock, closed)):
                return []
            sc = self.spark.sparkContext
            sc.setLocalProperty("spark.scheduler.pool", POOL)
            done: list[maintenance.Outcome] = []
            finished = False
            try:
                if not self._queue:
                    self._queue = list(self.plan(clock))
                    self._queue_clock = clock
                    self._planned = (clock.processing_ms, closed)
                while self._queue and (limit is None or len(done) < limit):
                    if stopping is not None and stopping.is_set():
                        break
                    self.guard()
                    action = self._queue.pop(0)
                    sc.setJobDescription(f"tally housekeeping: {action.kind} {_scope(action)}")
                    done.append(self._run(action, self._queue_clock or clock))
                finished = True
                return done
            finally:
                # One log write for a plan's actions, after its last (a Delta commit each would
                # cost as much as a small compaction); a kill mid-plan loses the rows of the
                # actions it did, not what they did (each is its own table's commit).
                self._unlogged += done
                stopped = stopping is not None and stopping.is_set()
                if self._unlogged and (not self._queue or stopped or not finished):
                    self.guard()
                    rows, self._unlogged = self._unlogged, []
                    maintenance.append_log(
                        self.spark, self.warehouse, tables.MAINTENANCE_LOG, rows, self.run_by
                    )
                # Py4J passes None as null: Spark then removes the thread's property
                sc.setLocalProperty("spark.scheduler.pool", None)  # type: ignore[arg-type]
                sc.setJobDescription(None)  # type: ignore[arg-type]

    def _run(self, action: maintenance.Action, clock: Clock) -> maintenance.Outcome:
        outcome = maintenance.run_action(
            self.spark,
            self.warehouse,
            action,
            clock.processing_ms,
            self.wall_ms,
            lambda: self._layout(action.table, action.partition_column),
        )
        assert self._last is not None
        if outcome.outcome == maintenance.DONE:
            self._last[action.key] = clock.processing_ms
            if action.kind == maintenance.VACUUM:
                started_ms = outcome.action_ms - int(outcome.seconds * 1000)
                self._vacuumed_now(action.table, started_ms)
        self.outcomes.append(outcome)
        log.info(
            "housekeeping: %s %s %s: files %d -> %d, %.1f s%s",
            action.kind,
            _scope(action),
            outcome.outcome,
            outcome.before.files,
            outcome.after.files,
            outcome.seconds,
            f" ({outcome.detail})" if outcome.detail else "",
        )
        return outcome


def _scope(action: maintenance.Action) -> str:
    return f"{action.table}/{action.partition}" if action.partition else action.table


def maintain_once(
    spark: SparkSession,
    warehouse: str,
    schedule: maintenance.Schedule,
    closing: Closing,
    clock: Clock,
    wall_ms: Callable[[], int],
) -> list[maintenance.Outcome]:
    """`tally maintain`: every compaction and VACUUM of the stream's tables that has something
    to do, once, whatever the schedule (the caller holds the warehouse's lease): two small
    files are enough to compact."""
    housekeeper = Housekeeper(
        spark,
        warehouse,
        replace(schedule, compact_min_files=2),
        closing,
        mode="inline",
        wall_ms=wall_ms,
        run_by="maintain",
        forget_schedule=True,
    )
    return housekeeper.run_due(clock, force_plan=True)
