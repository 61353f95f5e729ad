"""The event contract: one JSON object per line, validated in the JVM.

    {"event_id": "e-1", "key": "merchant-42", "amount": 12550,
     "event_time": "2026-11-21T09:42:17.125Z", "partition": 3}

`amount` is an integer in minor units (never a float); `event_time` is ISO-8601 with a zone
or epoch milliseconds; `partition` defaults to 0; unknown fields are kept in `extra`.
A line that breaks the contract becomes a quarantine row with a reason; nothing is dropped.
"""

from __future__ import annotations

from typing import NamedTuple

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

KNOWN_FIELDS = ("event_id", "key", "amount", "event_time", "partition")

# Reasons, checked in this order; the first that applies is recorded.
QUARANTINE_REASONS = (
    "empty_line",
    "invalid_json",
    "missing_event_id",
    "missing_key",
    "missing_amount",
    "amount_not_integer",
    "missing_event_time",
    "bad_event_time",
    "partition_not_integer",
)

# Typed view: a field whose JSON token does not fit its type reads as null here...
_TYPED_SCHEMA = "event_id STRING, key STRING, amount BIGINT, event_time_ms BIGINT, partition INT"
# ...while the text view says whether the field was there at all.
_TEXT_SCHEMA = "MAP<STRING, STRING>"
# An ISO-8601 time with a zone, the contract's text form of event_time (unanchored).
ZONED_ISO_TIME = r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}(:?\d{2})?)"
_ZONED_ISO = f"^{ZONED_ISO_TIME}$"
_INTEGER = r"^-?\d+$"


class ParsedEvents(NamedTuple):
    valid: DataFrame
    quarantine: DataFrame


def _reason(fields: Column, typed: Column, event_time: Column, line: Column) -> Column:
    def has(name: str) -> Column:
        return fields.getItem(name).isNotNull()

    text = fields.getItem
    return (
        F.when(line.rlike(r"^\s*$"), F.lit("empty_line"))
        # Spark's parser stops after the first object; text after its closing brace must
        # not slip through as a valid event.
        .when(fields.isNull() | ~line.rlike(r"\}\s*$"), F.lit("invalid_json"))
        .when(~has("event_id") | (F.trim(text("event_id")) == ""), F.lit("missing_event_id"))
        .when(~has("key") | (F.trim(text("key")) == ""), F.lit("missing_key"))
        .when(~has("amount"), F.lit("missing_amount"))
        # A quoted "12" reads as text "12" but is not a JSON integer: the typed view is null.
        .when(typed["amount"].isNull() | ~text("amount").rlike(_INTEGER), "amount_not_integer")
        .when(~has("event_time"), F.lit("missing_event_time"))
        .when(event_time.isNull(), F.lit("bad_event_time"))
        .when(has("partition") & typed["partition"].isNull(), F.lit("partition_not_integer"))
    )


def parse_lines(raw: DataFrame) -> DataFrame:
    """`raw` (column `raw_line` plus provenance columns), each line parsed once, one row per
    line: the event's typed columns when valid, else `raw_line` and the quarantine `reason`.

    Persist the result when both outputs of `split_parsed` are used: otherwise each output
    reads and parses every line again.
    """
    provenance = [c for c in raw.columns if c != "raw_line"]
    line = F.col("raw_line")
    # from_json is null for anything but a JSON object (bad syntax, arrays, scalars).
    strict = {"allowSingleQuotes": "false"}
    fields = F.from_json(line, _TEXT_SCHEMA, strict)
    typed = F.from_json(
        line,
        _TYPED_SCHEMA.replace("event_time_ms BIGINT", "event_time STRING"),
        {"mode": "PERMISSIVE", **strict},
    )
    time_text = F.col("_fields").getItem("event_time")
    # Only all-digit text is parsed as a JSON number (null when it was a quoted string); the
    # common ISO case never pays for that second parse.
    epoch_ms = F.from_json(line, "event_time BIGINT", strict).getItem("event_time")
    event_time = (
        F.when(time_text.rlike(_INTEGER), F.timestamp_millis(epoch_ms))
        # Zone required: a bare local time is ambiguous, and we do not guess.
        .when(
            time_text.rlike(_ZONED_ISO),
            # ISO-8601 allows hh:mm without seconds; Spark's parser wants them.
            F.try_to_timestamp(
                F.regexp_replace(time_text, r"^(.{10}[T ]\d{2}:\d{2})(Z|[+-].*)$", "$1:00$2")
            ),
        )
    )
    checked = (
        raw.select(*provenance, line.alias("raw_line"), fields.alias("_fields"))
        .withColumn("_typed", typed)
        .withColumn("_event_time", event_time)
        .withColumn(
            "_reason", _reason(F.col("_fields"), F.col("_typed"), F.col("_event_time"), line)
        )
    )
    # Compact: typed columns for valid lines, the raw text only for quarantined ones.
    valid = F.col("_reason").isNull()
    extra = F.map_filter(F.col("_fields"), lambda k, _v: ~k.isin(*KNOWN_FIELDS))
    return checked.select(
        F.when(valid, F.col("_typed.event_id")).alias("event_id"),
        F.when(valid, F.col("_typed.key")).alias("key"),
        F.when(valid, F.col("_typed.amount")).cast("long").alias("amount"),
        F.when(valid, F.col("_event_time")).alias("event_time"),
        F.when(valid, F.coalesce(F.col("_typed.partition"), F.lit(0)))
        .cast("int")
        .alias("partition"),
        F.when(valid, extra).alias("extra"),
        *provenance,
        F.when(~valid, line).alias("raw_line"),
        F.col("_reason").alias("reason"),
    )


def split_parsed(parsed: DataFrame) -> ParsedEvents:
    """Valid events and quarantine rows of `parse_lines`' output."""
    event_columns = ("event_id", "key", "amount", "event_time", "partition", "extra")
    provenance = [c for c in parsed.columns if c not in (*event_columns, "raw_line", "reason")]
    valid = parsed.where(F.col("reason").isNull()).select(*event_columns, *provenance)
    quarantine = parsed.where(F.col("reason").isNotNull()).select("raw_line", "reason", *provenance)
    return ParsedEvents(valid, quarantine)


def parse_events(raw: DataFrame) -> ParsedEvents:
    """Split `raw` (column `raw_line` plus provenance columns) into valid events and quarantine.

    Provenance columns (anything but `raw_line`) are carried to both outputs unchanged.
    """
    return split_parsed(parse_lines(raw))


# -- reading JSONL --------------------------------------------------------------------------------
# Lines get a deterministic identity (file, 1-based line number, file modification time), so a
# replayed micro-batch produces the same provenance for every event.

LINE_COLUMNS = ("raw_line", "source_file", "source_line", "source_mtime")


def whole_files(text_frame: DataFrame) -> DataFrame:
    """A `wholetext` text read (batch or streaming) -> (`value`, `source_file`, `source_mtime`)."""
    return text_frame.select(
        "value",
        F.col("_metadata.file_path").alias("source_file"),
        F.col("_metadata.file_modification_time").alias("source_mtime"),
    )


def split_lines(files: DataFrame) -> DataFrame:
    """Whole files (`value`, `source_file`, `source_mtime`) -> one row per line, numbered
    (`LINE_COLUMNS`). A final newline does not make an extra empty line."""
    body = F.regexp_replace(F.col("value"), r"\r?\n$", "")
    lines = F.when(F.col("value") == "", F.array().cast("array<string>")).otherwise(
        F.split(body, r"\r?\n")
    )
    return files.select(
        "source_file", "source_mtime", F.posexplode(lines).alias("pos", "raw_line")
    ).select(
        "raw_line",
        "source_file",
        (F.col("pos") + 1).cast("long").alias("source_line"),
        "source_mtime",
    )


def read_jsonl_lines(spark: SparkSession, paths: str | list[str]) -> DataFrame:
    """The numbered lines of JSONL files (a file, a directory, or a list of files): batch."""
    text = spark.read.format("text").option("wholetext", True).load(paths)
    return text.transform(whole_files).transform(split_lines)
