"""Sources: where raw lines come from, JSONL files or a Kafka topic.

A source is a streaming DataFrame of raw lines with provenance columns: `raw_line` (text),
`source_file` (the file's path, or `kafka:<topic>/<partition>`), `source_mtime` (when the line
arrived: the file's modification time, or the Kafka record timestamp), and what numbers the
lines. Files are read line by line (Spark's text source, splittable), never whole; each
micro-batch computes `source_line` (the 1-based line in the file) from the helpers of
`tally.events.text_lines` with `tally.events.number_lines`. A Kafka record's `source_line` is
its offset, and it also carries `source_partition` (the Kafka partition: the watermark
partition) and, for a record that is not a line of text, `source_reason`
(`tally.events.SOURCE_REASONS`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from tally.events import SOURCE_PARTITION, SOURCE_REASON, text_lines, text_reader

KAFKA_SOURCE_PREFIX = "kafka:"  # source_file of a Kafka record: kafka:<topic>/<partition>


@dataclass(frozen=True)
class KafkaSpec:
    """What the Kafka source reads: plain values, built from the settings at the entry point."""

    bootstrap: str
    topic: str
    starting_offsets: str  # earliest | latest: where a new checkpoint starts
    max_records_per_trigger: int
    max_record_bytes: int
    client_options: Mapping[str, str] = field(default_factory=dict)  # from the environment
    connect_timeout_s: float = 15.0  # the pre-flight check's wait for the broker's metadata

    def reader_options(self) -> dict[str, str]:
        """Options of Spark's Kafka source. Client options pass through as `kafka.*`;
        `failOnDataLoss` stays on: offsets deleted before they were read stop the stream."""
        return {
            **{f"kafka.{name}": value for name, value in self.client_options.items()},
            "kafka.bootstrap.servers": self.bootstrap,
            "subscribe": self.topic,
            "startingOffsets": self.starting_offsets,
            "maxOffsetsPerTrigger": str(self.max_records_per_trigger),
            "failOnDataLoss": "true",
        }


def kafka_lines(records: DataFrame, max_record_bytes: int) -> DataFrame:
    """Kafka records (Spark's Kafka source columns) -> numbered raw lines. A record that is
    not a line of text keeps its place with a `source_reason`: a null value (`null_value`,
    no text), a value over `max_record_bytes` (`oversized_value`, its first bytes as text), a
    value that is not UTF-8 (`not_utf8`, its bytes in base64)."""
    value = F.col("value")
    oversized = F.octet_length(value) > F.lit(max_record_bytes)
    not_utf8 = ~F.is_valid_utf8(value)
    reason = (
        F.when(value.isNull(), F.lit("null_value"))
        .when(oversized, F.lit("oversized_value"))
        .when(not_utf8, F.lit("not_utf8"))
    )
    raw_line = (
        F.when(value.isNull(), F.lit(None).cast("string"))
        .when(oversized, F.make_valid_utf8(F.substring(value, 1, max_record_bytes)))
        # one line: Spark's base64 may break its output every 76 characters (MIME style)
        .when(not_utf8, F.regexp_replace(F.base64(value), r"\s", ""))
        .otherwise(value.cast("string"))
    )
    return records.select(
        raw_line.alias("raw_line"),
        F.concat(
            F.lit(KAFKA_SOURCE_PREFIX),
            F.col("topic"),
            F.lit("/"),
            F.col("partition").cast("string"),
        ).alias("source_file"),
        F.col("offset").cast("long").alias("source_line"),
        F.col("timestamp").alias("source_mtime"),
        F.col("partition").cast("int").alias(SOURCE_PARTITION),
        reason.alias(SOURCE_REASON),
    )


class SourceError(RuntimeError):
    """The source cannot be read (one-line message)."""


def kafka_topic_partitions(spec: KafkaSpec) -> int:
    """How many partitions the topic has; raises `SourceError` (one line) when the broker
    cannot be reached within `spec.connect_timeout_s` or the topic does not exist, before
    anything starts (Spark's own source would retry for minutes, then fail with a stack
    trace)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({**spec.client_options, "bootstrap.servers": spec.bootstrap})
    try:
        topics = admin.list_topics(timeout=spec.connect_timeout_s).topics
    except KafkaException as exc:
        raise SourceError(f"cannot reach Kafka at {spec.bootstrap}: {exc}") from None
    found = topics.get(spec.topic)
    if found is None or found.error is not None:
        raise SourceError(f"Kafka topic {spec.topic!r} does not exist at {spec.bootstrap}")
    return len(found.partitions)


def kafka_source(spark: SparkSession, spec: KafkaSpec) -> DataFrame:
    """The topic's records as numbered raw lines (`kafka_lines`), at most
    `max_records_per_trigger` a micro-batch; offsets live in the query's checkpoint."""
    records = spark.readStream.format("kafka").options(**spec.reader_options()).load()
    return kafka_lines(records, spec.max_record_bytes)


def file_source(spark: SparkSession, input_dir: str, max_files_per_trigger: int) -> DataFrame:
    """JSONL files in `input_dir`, oldest modification time first, N files a batch."""
    files = (
        text_reader(spark.readStream)
        .option("maxFilesPerTrigger", max_files_per_trigger)
        .option("latestFirst", False)
        .load(input_dir)
    )
    return files.transform(text_lines)


def open_source(
    spark: SparkSession,
    kind: str,
    location: str,
    max_files_per_trigger: int,
    kafka: KafkaSpec | None = None,
) -> DataFrame:
    if kind == "files":
        return file_source(spark, location, max_files_per_trigger)
    if kind == "kafka" and kafka is not None:
        return kafka_source(spark, kafka)
    raise ValueError(f"source_kind: unsupported source {kind!r}")
