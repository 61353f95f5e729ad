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
from tally.spark import UNCOMPRESSED_CACHE, session_for

# Dates one micro-batch's `events` may span with a writer open per date (more fall back to
# Delta's sort of every task's rows by event_date): a batch spans one or two.
CONCURRENT_DATE_WRITERS = 4
# How long a broadcast join's build may take (Spark's default: 300 s), see `_run_query`.
BROADCAST_TIMEOUT_S = 3600


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
    # The stream commits small appends every batch: replaying a table's Delta log with one
    # task instead of several makes each commit cheaper (measured: docs/benchmarks.md).
    spark.conf.set("spark.databricks.delta.snapshotPartitions", "1")
    # A batch's cached frames live for one batch: building them uncompressed costs a third
    # less (measured: 0.47 s against 0.70 s for 200k parsed lines), memory is not the limit.
    for key, value in UNCOMPRESSED_CACHE.items():
        spark.conf.set(key, value)
    # A batch's events span one or two dates: a writer per date open side by side instead of
    # Delta's sort of every task's rows by event_date (more dates than this fall back to it).
    spark.conf.set("spark.sql.maxConcurrentOutputFileWriters", str(CONCURRENT_DATE_WRITERS))
    # Every Spark SQL execution (a micro-batch runs ~17, plus one per adaptive re-plan) renders
    # its physical plan for the UI and event log; the default "formatted" rendering was ~10 % of
    # the driver's CPU in a small batch (JFR). The plain tree is enough to read a plan there.
    spark.conf.set("spark.sql.ui.explainMode", "simple")
    # Delta's optional checksum file beside each commit (`<version>.crc`, a summary of the
    # table's state it validates against when present; Delta reads the log without it). On a
    # local file system each is one more atomic write, and Hadoop's local file system runs a
    # `chmod` and several `readlink` processes for one: ~10 process starts a commit, ~50 of a
    # micro-batch's ~150 (JFR, 20k-line batches). A stream commits 4-5 times a batch.
    spark.conf.set("spark.databricks.delta.writeChecksumFile.enabled", "false")
    # `event_id` is unique per row: Parquet's dictionary for it (built for every page, then
    # dropped for plain encoding once it outgrows the page size) was ~11 % of the write phase's
    # JFR samples. A SQL setting reaches every write's Hadoop configuration, where Parquet reads
    # per-column settings (`key#column`): `events`, `late_events` and the dedup state files.
    # Only the encoding of new files changes; readers and old files are untouched.
    spark.conf.set("parquet.enable.dictionary#event_id", "false")
    # A broadcast join's build waits for free task slots behind the batch's own tasks: on a
    # busy machine a five-day catch-up batch waited past Spark's 300 s and the stream died
    # (measured, issue 39's backlog at load ~35). A slow batch is not a failed one.
    spark.conf.set("spark.sql.broadcastTimeout", str(BROADCAST_TIMEOUT_S))
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
