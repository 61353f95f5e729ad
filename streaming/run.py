"""`tally stream`: the speed layer's entry point. Takes the warehouse's lease, builds the
session, wires the source to the micro-batch processor (`streaming.job.BatchProcessor`) and
waits for the query as asked."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping

from pyspark.sql import DataFrame, SparkSession

from streaming.housekeeping import Clock as HousekeepingClock
from streaming.housekeeping import Closing, Housekeeper
from streaming.job import BatchProcessor
from streaming.lease import LeaseError, WarehouseLease, lease_store, this_process
from streaming.params import Clock, StreamError, StreamParams, wall_clock
from streaming.progress import Progress
from streaming.source import KafkaSpec, SourceError, kafka_topic_partitions, open_source
from tally.dates import epoch_ms, iso_ms, window_reach_ms
from tally.maintenance import Schedule
from tally.settings import Settings, kafka_client_options
from tally.spark import STREAM_CONF, session_for


def kafka_spec(settings: Settings, environ: Mapping[str, str]) -> KafkaSpec:
    """The Kafka source's settings, client options (security) from the environment."""
    return KafkaSpec(
        bootstrap=settings.kafka_bootstrap,
        topic=settings.kafka_topic,
        starting_offsets=settings.kafka_starting_offsets,
        max_records_per_trigger=settings.max_records_per_trigger,
        max_record_bytes=settings.max_record_bytes,
        client_options=kafka_client_options(environ),
        connect_timeout_s=settings.kafka_connect_timeout / 1000,
    )


def warehouse_lease(
    settings: Settings, wall: Clock
) -> contextlib.AbstractContextManager[WarehouseLease | None]:
    """The warehouse's stream lease, taken now (StreamError naming the owner if it is not
    free), or nothing when `stream_lease` is off."""
    if not settings.stream_lease:
        return contextlib.nullcontext()
    lease = WarehouseLease(
        lease_store(
            settings.warehouse, settings.s3_endpoint, settings.s3_region, settings.s3_path_style
        ),
        settings.warehouse,
        this_process(settings.checkpoint_location),
        settings.lease_ttl,
        now_ms=lambda: epoch_ms(wall()),
    )
    try:
        lease.acquire()
    except LeaseError as exc:
        raise StreamError(str(exc)) from None
    return lease


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
    kafka = kafka_spec(settings, os.environ)
    topic_partitions = 0
    if settings.source_kind == "kafka":  # before the session: an unreadable topic stops here
        try:
            topic_partitions = kafka_topic_partitions(kafka)
        except SourceError as exc:
            raise StreamError(f"stream: {exc}") from None
    params = StreamParams.from_settings(settings, clock == "arrival", topic_partitions)
    # Before the session too: a second stream on this warehouse stops before it writes.
    with warehouse_lease(settings, wall) as lease:
        try:
            last = _run_query(
                settings, params, kafka, available_now, drain, timeout_s, spark, wall, lease
            )
        except Exception:
            if lease is not None and lease.lost:
                raise StreamError(lease.lost) from None
            raise
    if last is None:
        return "no input processed"
    watermark = "end of input (drained)" if last.drained else iso_ms(last.watermark_after_ms)
    return f"batch {last.batch_id}: watermark {watermark}; tables in {settings.warehouse}"


def _run_query(
    settings: Settings,
    params: StreamParams,
    kafka: KafkaSpec,
    available_now: bool,
    drain: bool,
    timeout_s: float | None,
    spark: SparkSession | None,
    wall: Clock,
    lease: WarehouseLease | None,
) -> Progress | None:
    """Start the streaming query, wait for it as asked, drain; the last committed batch."""
    spark = spark or session_for(settings, "tally-stream")
    for key, value in STREAM_CONF.items():  # the stream's tuning, each with its why
        spark.conf.set(key, value)
    guard = lease.check if lease is not None else None
    processor = BatchProcessor(spark, params, clock=wall, guard=guard)
    housekeeper = stream_housekeeper(settings, spark, wall, guard)
    source = open_source(
        spark, settings.source_kind, settings.input, settings.max_files_per_trigger, kafka=kafka
    )
    writer = (
        source.writeStream.foreachBatch(with_housekeeping(processor, housekeeper))
        .option("checkpointLocation", settings.checkpoint_location)
        .queryName("tally_stream")
    )
    writer = (
        writer.trigger(availableNow=True)
        if available_now or drain
        else writer.trigger(processingTime=f"{settings.trigger} milliseconds")
    )
    with processor, _stopping(housekeeper):
        query = writer.start()
        processor.set_app_id(str(query.id))
        if lease is not None:
            lease.set_query_id(str(query.id))
        try:
            if available_now or drain:
                query.awaitTermination()
            else:
                query.awaitTermination(int(timeout_s) if timeout_s is not None else None)
        finally:
            if query.isActive:
                query.stop()
        processor.await_tables()  # a stream that got no batch has created them all the same
        if drain and processor.drain() and housekeeper is not None:
            housekeeper.after_batch(housekeeping_clock(processor.previous_progress()))
        if housekeeper is not None and (available_now or drain):
            housekeeper.finish()  # a stream run as a job leaves no housekeeping due behind
        last = processor.previous_progress()
    return last


def stream_housekeeper(
    settings: Settings, spark: SparkSession, wall: Clock, guard: Callable[[], None] | None
) -> Housekeeper | None:
    """The housekeeper of the stream's tables (None when `maintenance` is off), started."""
    if not settings.maintenance:
        return None
    schedule, closing = housekeeping_plan(settings)
    return Housekeeper(
        spark,
        settings.warehouse,
        schedule,
        closing,
        mode=settings.maintenance_mode,
        wall_ms=lambda: epoch_ms(wall()),
        guard=guard or (lambda: None),
    ).start()


def housekeeping_plan(settings: Settings) -> tuple[Schedule, Closing]:
    """The housekeeping schedule and the closing rule of the settings (the stream's
    housekeeper and `tally maintain` alike)."""
    schedule = Schedule(
        compact_interval_ms=settings.compact_interval,
        compact_closed=settings.compact_closed_dates,
        vacuum_interval_ms=settings.vacuum_interval,
        compact_min_files=settings.compact_min_files,
        deleted_file_retention_ms=settings.deleted_file_retention,
    )
    closing = Closing(
        window_reach_ms(settings.window, settings.session_gap), settings.allowed_lateness
    )
    return schedule, closing


def housekeeping_clock(progress: Progress | None) -> HousekeepingClock:
    assert progress is not None, "a committed batch has a progress row"
    return HousekeepingClock(
        progress.processing_time_ms, progress.watermark_after_ms, progress.drained
    )


def with_housekeeping(
    processor: BatchProcessor, housekeeper: Housekeeper | None
) -> Callable[[DataFrame, int], None]:
    """The foreachBatch function: the batch, then (once it committed) the housekeeper's turn
    (in its thread, or here between batches in inline mode)."""
    if housekeeper is None:
        return processor

    def each_batch(raw_batch: DataFrame, batch_id: int) -> None:
        processor(raw_batch, batch_id)
        housekeeper.after_batch(housekeeping_clock(processor.previous_progress()))

    return each_batch


@contextlib.contextmanager
def _stopping(housekeeper: Housekeeper | None) -> Iterator[None]:
    """Stop the housekeeper's thread however the stream ends (after its current action)."""
    try:
        yield
    finally:
        if housekeeper is not None:
            housekeeper.stop()
