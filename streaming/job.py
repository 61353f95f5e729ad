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
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from streaming.logic import (
    ALLOWED_LATE,
    DUPLICATE,
    LATE,
    ON_TIME,
    WindowParams,
    classify_events,
    close_windows,
    mark_logged_duplicates,
)
from streaming.source import open_source
from streaming.watermark import DRAINED_WATERMARK_MS, WatermarkState, advance_watermark
from tally import tables as T
from tally.events import parse_lines, split_parsed
from tally.settings import Settings

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

        schema = table.schema()
        t0 = time.monotonic()
        if mode == "overwrite" or not (
            self._may_be_replay and self._already_written(table, batch_id)
        ):
            (
                df.select(*[F.col(f.name).cast(f.dataType) for f in schema.fields])
                .write.format("delta")
                .mode(mode)
                .save(self._path(table))
            )
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

    def process(self, raw_batch: DataFrame, batch_id: int, drain: bool = False) -> None:
        started = time.monotonic()
        p = self.params
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
        # Each line is read and parsed once; valid events and quarantine both come from here.
        lines = parse_lines(raw_batch).persist()
        raw_stats = lines.agg(
            F.count(F.lit(1)).alias("lines"), F.max(F.unix_millis("source_mtime")).alias("newest")
        ).first()
        assert raw_stats is not None
        input_lines = int(raw_stats["lines"])
        log.debug("batch %d: read and parse %.2f s", batch_id, time.monotonic() - started)
        now_ms = self._batch_now_ms(batch_id, raw_stats["newest"], prev)
        parsed = split_parsed(lines)
        prev_wm = WatermarkState(
            prev["watermark_ms"] if prev else None,
            dict(prev["high_water"] or {}) if prev else {},
            dict(prev["last_seen"] or {}) if prev else {},
        )
        if prev:
            # Each is used twice below; read the pinned version once.
            window_state = self._read(T.WINDOW_STATE, prev["window_state_version"]).persist()
            dedup_state = self._read(T.DEDUP_STATE, prev["dedup_state_version"]).persist()
        else:
            window_state = T.empty_frame(self.spark, T.WINDOW_STATE)
            dedup_state = T.empty_frame(self.spark, T.DEDUP_STATE)

        classified = classify_events(parsed.valid, prev_wm.watermark_ms, p.window, dedup_state)
        classified = classified.persist()
        skew_limit_ms = now_ms + p.max_clock_skew_ms
        stats = self._batch_stats(classified, skew_limit_ms)
        log.debug("batch %d: classified %.2f s", batch_id, time.monotonic() - started)
        if prev and any(int(r[LATE]) for r in stats):
            # Rare path: a late event may replay an id from beyond the dedup state's horizon.
            late_dates = [
                r["d"]
                for r in classified.where(F.col("arrival_status") == LATE)
                .select(F.to_date("event_time").alias("d"))
                .distinct()
                .collect()
            ]
            logged = (
                self._read(T.EVENTS, prev["events_version"])
                .where(F.col("event_date").isin(late_dates))
                .select("event_id")
            )
            checked = mark_logged_duplicates(classified, logged).persist()
            classified.unpersist()
            classified = checked
            stats = self._batch_stats(classified, skew_limit_ms)

        # Clock skew: a partition's high-water mark is clipped to now + max skew, so an event
        # from a clock running ahead cannot drag the watermark into the future.
        batch_high_water = {
            int(r["partition"]): min(int(r["max_ms"]), skew_limit_ms) for r in stats
        }
        wm_after: int | None
        advance = None
        if drain:
            wm_after = DRAINED_WATERMARK_MS
            wm_state = prev_wm
        else:
            advance = advance_watermark(
                prev_wm,
                batch_high_water,
                now_ms,
                p.lateness_ms,
                p.idle_timeout_ms,
                p.watermark_policy,
            )
            wm_state = advance.state
            wm_after = wm_state.watermark_ms

        out = close_windows(
            classified,
            window_state,
            dedup_state,
            prev_wm.watermark_ms,
            wm_after,
            now_ms,
            p.window,
            drain=drain,
        )
        app = F.lit(self.app_id)
        batch = F.lit(batch_id).cast("long")
        ingest = F.timestamp_millis(F.lit(now_ms))

        events_version, _ = self._write(
            classified.withColumns(
                {
                    "clock_skewed": F.unix_millis("event_time") > F.lit(skew_limit_ms),
                    "batch_id": batch,
                    "ingest_time": ingest,
                    "app_id": app,
                    "event_date": F.to_date("event_time"),
                }
            ),
            T.EVENTS,
            batch_id,
            versioned=True,
        )
        counts = {
            s: sum(int(r[s]) for r in stats) for s in (ON_TIME, ALLOWED_LATE, LATE, DUPLICATE)
        }
        valid = sum(int(r["valid"]) for r in stats)
        quarantined = input_lines - valid
        # Empty side outputs are not written: a replay recomputes them empty again.
        if quarantined:
            self._write(
                parsed.quarantine.withColumns(
                    {"batch_id": batch, "ingest_time": ingest, "app_id": app}
                ),
                T.QUARANTINE,
                batch_id,
            )
        if counts[LATE]:
            self._write(
                out.late_events.withColumns(
                    {"batch_id": batch, "ingest_time": ingest, "app_id": app}
                ),
                T.LATE_EVENTS,
                batch_id,
            )
        # Counted, not read from the commit: an empty append makes no Delta commit.
        aggregates = out.aggregates.persist()
        emitted = aggregates.count()
        if emitted:
            self._write(
                aggregates.withColumns({"batch_id": batch, "app_id": app}),
                T.STREAM_AGGREGATES,
                batch_id,
            )
        state_version, open_windows = self._write(
            out.window_state, T.WINDOW_STATE, batch_id, mode="overwrite", versioned=True
        )
        dedup_version, _ = self._write(
            out.dedup_state, T.DEDUP_STATE, batch_id, mode="overwrite", versioned=True
        )
        idle = advance.idle if advance else {}
        active_hw = [hw for part, hw in wm_state.high_water_ms.items() if not idle.get(part, False)]
        progress = {
            "batch_id": batch_id,
            "app_id": self.app_id,
            "processing_ms": now_ms,
            "wm_before": prev_wm.watermark_ms,
            "wm_after": wm_after,
            "high_water": dict(wm_state.high_water_ms),
            "last_seen": dict(wm_state.last_seen_ms),
            "partition_idle": idle,
            "input_lines": input_lines,
            "valid_events": valid,
            "on_time_events": counts[ON_TIME],
            "allowed_late_events": counts[ALLOWED_LATE],
            "late_events": counts[LATE],
            "duplicate_events": counts[DUPLICATE],
            "quarantined_lines": quarantined,
            "clock_skewed_events": sum(int(r["skewed"]) for r in stats),
            "windows_emitted": emitted,
            "open_windows": open_windows,
            "watermark_lag_ms": now_ms - wm_after if wm_after is not None and not drain else None,
            "partition_spread_ms": max(active_hw) - min(active_hw) if active_hw else None,
            "batch_duration_ms": int((time.monotonic() - started) * 1000),
            "drained": drain,
            "window_state_version": state_version,
            "dedup_state_version": dedup_version,
            "events_version": events_version,
        }
        self._write(self._progress_row(progress), T.STREAM_PROGRESS, batch_id)
        self._batches_seen += 1
        self._committed = {
            "batch_id": batch_id,
            "drained": drain,
            "processing_ms": now_ms,
            "watermark_ms": wm_after,
            "high_water": dict(wm_state.high_water_ms),
            "last_seen": dict(wm_state.last_seen_ms),
            "window_state_version": state_version,
            "dedup_state_version": dedup_version,
            "events_version": events_version,
        }
        for frame in (classified, lines, window_state, dedup_state, aggregates):
            frame.unpersist()
        log.info(
            "batch %d: %d valid, %d late, %d quarantined, watermark %s",
            batch_id,
            valid,
            counts[LATE],
            quarantined,
            wm_after,
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
        """Close every open window (watermark +infinity), as one more idempotent batch."""
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
    from tally.spark import build_session

    spark = spark or build_session(
        settings.spark_master,
        app_name="tally-stream",
        shuffle_partitions=settings.shuffle_partitions,
    )
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
    return (
        f"batch {last['batch_id']}: watermark "
        f"{_fmt_ms(last['watermark_ms'])}{' (drained)' if last['drained'] else ''}; "
        f"tables in {settings.warehouse}"
    )


def _fmt_ms(ms: int | None) -> str:
    if ms is None:
        return "none"
    seconds, millis = divmod(ms, 1000)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{millis:03d}Z"
