"""The event contract: one JSON object per line, validated in the JVM.

    {"event_id": "e-1", "key": "merchant-42", "amount": 12550,
     "event_time": "2026-11-21T09:42:17.125Z", "partition": 3}

`amount` is an integer in minor units (never a float); `event_time` is ISO-8601 with a zone
or epoch milliseconds; `partition` defaults to 0; unknown fields are kept in `extra`.
A line that breaks the contract becomes a quarantine row with a reason; nothing is dropped.

With a control field configured (setting `source_watermark_field`, e.g. "watermark"), a JSON
object with that field and no `event_id` is a control record, not an event:

    {"watermark": "2026-11-21T09:45:00Z", "partition": 3}

It sets its partition's source watermark (docs/semantics.md, "Source watermarks").
"""

from __future__ import annotations

from typing import NamedTuple, TypeVar

from pyspark.sql import Column, DataFrame, DataFrameReader, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamReader

KNOWN_FIELDS = ("event_id", "key", "amount", "event_time", "partition")

# Reasons a source gives a record before it is a line of text (Kafka: a tombstone, bytes
# that are not UTF-8, a value over `max_record_bytes`); they come before every other reason.
SOURCE_REASONS = ("null_value", "not_utf8", "oversized_value")
# Reasons, checked in this order; the first that applies is recorded.
QUARANTINE_REASONS = (
    *SOURCE_REASONS,
    "empty_line",
    "invalid_json",
    "missing_event_id",
    "missing_key",
    "missing_amount",
    "amount_not_integer",
    "missing_event_time",
    "bad_event_time",
    "partition_not_integer",
    "bad_watermark",  # a control record whose watermark is no time (source watermarks only)
)

# The one parse every line pays (the typed view): a field whose JSON token does not fit its
# type reads as null and sets `_corrupt`; event_time stays text (ISO-8601 or epoch digits).
_TYPED_SCHEMA = (
    "event_id STRING, key STRING, amount BIGINT, event_time STRING, partition INT, _corrupt STRING"
)
_STRICT = {"allowSingleQuotes": "false"}
_TYPED_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt", **_STRICT}
# The text view (field -> JSON text), parsed only for lines that may carry unknown fields or
# fail the fast check: it says whether a field was there at all, and holds the unknown fields.
_TEXT_SCHEMA = "MAP<STRING, STRING>"
# An ISO-8601 time with a zone, the contract's text form of event_time (unanchored).
ZONED_ISO_TIME = r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}(:?\d{2})?)"
_ZONED_ISO = f"^{ZONED_ISO_TIME}$"
# Optional columns of a source's raw frame that `parse_lines` consumes: the reason a record was
# refused before parsing (one of SOURCE_REASONS), and the partition the source read it from,
# which then is the event's watermark `partition` (the payload's own `partition`, if any, is
# kept as data in `extra`).
SOURCE_REASON = "source_reason"
SOURCE_PARTITION = "source_partition"
_INTEGER = r"^-?\d+$"
# The event times the contract accepts: years 0001 to 9999 in UTC, the years ISO-8601's
# four digits can say. An epoch outside them is bad_event_time (Spark's timestamp would
# overflow converting far larger ones).
EVENT_TIME_MIN_MS = -62_135_596_800_000  # 0001-01-01T00:00:00Z
EVENT_TIME_MAX_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z


class ParsedEvents(NamedTuple):
    valid: DataFrame
    quarantine: DataFrame
    controls: DataFrame  # control records: partition, CONTROL_MS and provenance


def _reason(fields: Column, typed: Column, event_time: Column, line: Column) -> Column:
    """The first quarantine reason of a line (null when valid): the detailed diagnosis."""

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


def _fence() -> Column:
    """An optimizer fence, always true. Catalyst pushes a filter on `parse_lines`' output (e.g.
    `split_parsed`'s `reason IS NULL`) down through deterministic projections, inlining every
    column it reads, each parse in them many times over, into the filter. spark_partition_id()
    is nondeterministic, so no filter passes the projection computing `reason`; columns that
    nobody reads are still pruned (counting lines does not parse them)."""
    return F.spark_partition_id() >= 0


def _event_ms(text: Column, line: Column, field: str = "event_time") -> Column:
    """A time field's JSON text (event_time, or a control record's watermark) -> epoch ms;
    null unless epoch milliseconds (a JSON integer) or ISO-8601 with a zone. The typed view's
    text equals the text view's (one converter)."""
    # Only all-digit text is parsed again as a JSON number (null when it was a quoted string):
    # the common ISO case never pays for that second parse.
    epoch_ms = F.from_json(line, f"`{field}` BIGINT", _STRICT).getItem(field)
    # ISO-8601 allows hh:mm without seconds; Spark's parser wants them. Past the ISO check,
    # character 17 is ':' exactly when the seconds are there (else the zone starts).
    with_seconds = F.when(F.substring(text, 17, 1) == ":", text).otherwise(
        F.regexp_replace(text, r"^(.{10}[T ]\d{2}:\d{2})(Z|[+-].*)$", "$1:00$2")
    )
    # Zone required: a bare local time is ambiguous, and we do not guess.
    return F.when(text.rlike(_ZONED_ISO), F.unix_millis(F.try_to_timestamp(with_seconds))).when(
        text.rlike(_INTEGER), epoch_ms
    )


def _event_time(event_ms: Column) -> Column:
    """The contract's range checked on epoch ms, before a timestamp exists (converting a far
    epoch would overflow)."""
    return F.when(
        event_ms.between(EVENT_TIME_MIN_MS, EVENT_TIME_MAX_MS), F.timestamp_millis(event_ms)
    )


def _only_known_fields(line: Column, typed: Column) -> Column:
    """True only when the line's object provably has no field but the known ones with a value,
    for a line whose typed view parsed cleanly (no `_corrupt`) with event_id, key, amount and
    event_time present: fewer commas in the whole line than such fields.

    Those k fields (4, or 5 with partition) are distinct members of the object; m members are
    separated by m - 1 commas (escapes cannot make a structural comma). So at most k - 1 commas
    means m = k: no unknown field, no duplicate, no JSON-null field. More commas (in a value,
    after the object, or from another member) only mean "look": parse the field map.
    """
    members = F.lit(4) + typed["partition"].isNotNull().cast("int")
    # substring_index(s, ',', k) is s itself exactly when s has fewer than k commas.
    before_kth_comma = F.call_function("substring_index", line, F.lit(","), members)
    return F.octet_length(before_kth_comma) == F.octet_length(line)


CONTROL_MS = "control_ms"  # parse_lines: a control record's watermark (epoch ms), else null


def _control(fields: Column, typed: Column, line: Column, field: str) -> tuple[Column, Column]:
    """(is a control record, its reason or null) for a line that missed the fast path: a JSON
    object with `field` and no `event_id`. Its reason: `partition_not_integer`, or
    `bad_watermark` when `field` is no time the contract accepts."""
    is_control = (
        fields.isNotNull()
        & line.rlike(r"\}\s*$")
        & fields.getItem(field).isNotNull()
        & fields.getItem("event_id").isNull()
    )
    watermark = _event_time(_event_ms(fields.getItem(field), line, field))
    reason = F.when(
        fields.getItem("partition").isNotNull() & typed["partition"].isNull(),
        F.lit("partition_not_integer"),
    ).when(watermark.isNull(), F.lit("bad_watermark"))
    return F.coalesce(is_control, F.lit(False)), reason


def parse_lines(raw: DataFrame, control_field: str | None = None) -> DataFrame:
    """`raw` (column `raw_line` plus provenance columns), each line parsed once, one row per
    line: the event's typed columns when valid, else `raw_line` and the quarantine `reason`.
    With `control_field`, a control record (see the module docstring) has neither: its
    `partition` and `CONTROL_MS`, the watermark it carries.

    Fast path: every line pays one typed `from_json` and cheap checks (object braces, no
    `_corrupt`, the required fields, the event time, no unknown fields). A line that passes is
    valid, with exactly the columns the detailed diagnosis gives it; only the other lines (and
    lines with unknown fields, for `extra`) parse the field map and go through `_reason`.

    Persist the result when both outputs of `split_parsed` are used: otherwise each output
    reads and parses every line again.
    """
    seams = (SOURCE_REASON, SOURCE_PARTITION)
    provenance = [c for c in raw.columns if c not in ("raw_line", *seams)]
    given = {c: F.col(c) if c in raw.columns else F.lit(None) for c in seams}
    line = F.col("raw_line")
    typed = F.col("_typed")
    event_time = F.col("_event_time")
    # Each step is its own projection: a column used several times is computed once per row,
    # and an expensive value inside F.when is only computed for the rows its condition holds.
    parsed = raw.select(
        *provenance,
        line,
        given[SOURCE_REASON].cast("string").alias("_source_reason"),
        given[SOURCE_PARTITION].cast("int").alias("_source_partition"),
        F.from_json(line, _TYPED_SCHEMA, _TYPED_OPTIONS).alias("_typed"),
    ).withColumn("_event_ms", _event_ms(typed["event_time"], line))
    parsed = parsed.withColumn("_event_time", _event_time(F.col("_event_ms")))
    typed_ok_check = (
        line.startswith("{")
        & line.endswith("}")
        & typed["_corrupt"].isNull()
        & (F.trim(typed["event_id"]) != "")  # null when missing: the condition is null
        & (F.trim(typed["key"]) != "")
        & typed["amount"].isNotNull()
        & event_time.isNotNull()
    )
    typed_ok, maybe_unknown = F.col("_typed_ok"), F.col("_maybe_unknown")
    checked = (
        parsed.withColumn("_typed_ok", F.coalesce(typed_ok_check, F.lit(False)))
        .withColumn("_maybe_unknown", F.when(typed_ok, ~_only_known_fields(line, typed)))
        # The text view, only where the fast path cannot decide alone.
        .withColumn(
            "_fields",
            F.when(~typed_ok | maybe_unknown, F.from_json(line, _TEXT_SCHEMA, _STRICT)),
        )
        # With unknown fields, the fast path also needs the text view to parse (as the
        # diagnosis does: a bad escape deep in an unknown field makes the line invalid_json).
        .withColumn("_fast", typed_ok & (~maybe_unknown | F.col("_fields").isNotNull()))
    )
    reason = F.when(F.col("_source_reason").isNotNull(), F.col("_source_reason"))
    control_ms = F.lit(None).cast("long")
    if control_field:  # control records: only among the lines that missed the fast path
        checked = checked.withColumn(
            "_control", ~F.col("_fast") & _control(F.col("_fields"), typed, line, control_field)[0]
        )
        is_control = F.col("_control") & F.col("_source_reason").isNull()
        control_reason = _control(F.col("_fields"), typed, line, control_field)[1]
        reason = reason.when(is_control, control_reason)
        control_ms = F.when(
            is_control & control_reason.isNull(),
            _event_ms(F.col("_fields").getItem(control_field), line, control_field),
        )
    checked = checked.withColumn(
        "_reason", reason.when(~F.col("_fast"), _reason(F.col("_fields"), typed, event_time, line))
    ).withColumn("_control_ms", control_ms)
    # Compact: typed columns for valid lines, the raw text only for quarantined ones.
    valid = F.col("_reason").isNull() & F.col("_control_ms").isNull()
    fields = F.col("_fields")
    extra = F.when(fields.isNull(), F.create_map().cast(_TEXT_SCHEMA)).otherwise(
        F.map_filter(fields, lambda k, _v: ~k.isin(*KNOWN_FIELDS))
    )
    payload_partition = F.coalesce(typed["partition"], F.lit(0))
    source_partition = F.col("_source_partition")
    if SOURCE_PARTITION in raw.columns:  # the payload's partition is data, not the watermark's
        extra = F.when(
            typed["partition"].isNotNull(),
            F.map_concat(
                extra, F.create_map(F.lit("partition"), typed["partition"].cast("string"))
            ),
        ).otherwise(extra)
    partition = F.coalesce(source_partition, payload_partition)
    return checked.select(
        F.when(valid, typed["event_id"]).alias("event_id"),
        F.when(valid, typed["key"]).alias("key"),
        F.when(valid, typed["amount"]).cast("long").alias("amount"),
        F.when(valid, event_time).alias("event_time"),
        F.when(valid | F.col("_control_ms").isNotNull(), partition).cast("int").alias("partition"),
        F.when(valid, extra).alias("extra"),
        *provenance,
        F.when(F.col("_reason").isNotNull(), line).alias("raw_line"),
        F.when(_fence(), F.col("_reason")).alias("reason"),
        F.col("_control_ms").alias(CONTROL_MS),
    )


def split_parsed(parsed: DataFrame) -> ParsedEvents:
    """Valid events and quarantine rows of `parse_lines`' output."""
    event_columns = ("event_id", "key", "amount", "event_time", "partition", "extra")
    provenance = [c for c in parsed.columns if c not in (*event_columns, "raw_line", "reason")]
    provenance = [c for c in provenance if c != CONTROL_MS]
    is_control = F.col(CONTROL_MS).isNotNull()
    valid = parsed.where(F.col("reason").isNull() & ~is_control).select(*event_columns, *provenance)
    quarantine = parsed.where(F.col("reason").isNotNull()).select("raw_line", "reason", *provenance)
    controls = parsed.where(is_control).select("partition", CONTROL_MS, *provenance)
    return ParsedEvents(valid, quarantine, controls)


def parse_events(raw: DataFrame, control_field: str | None = None) -> ParsedEvents:
    """Split `raw` (column `raw_line` plus provenance columns) into valid events, quarantine
    and control records (none without `control_field`).

    Provenance columns (anything but `raw_line`) are carried to every output unchanged.
    """
    return split_parsed(parse_lines(raw, control_field))


# -- reading JSONL --------------------------------------------------------------------------------
# Lines get a deterministic identity (file, 1-based line number, file modification time), so a
# replayed micro-batch produces the same provenance for every event. Files are read with Spark's
# line-oriented text source (splittable: a large file is read by several tasks), and the line
# numbers are computed from the splits: no file is ever read as one value.

LINE_COLUMNS = ("raw_line", "source_file", "source_line", "source_mtime")
# Helper columns of unnumbered lines: the byte offset of the file split a line was read from,
# and a row id increasing by 1 from line to line within a split (monotonically_increasing_id).
SPLIT_START = "_split_start"
ROW_ID = "_row"
# Options of the text read: split lines at "\n" only (the text source's default also splits
# at a lone "\r"); `text_lines` drops the "\r" of a "\r\n" ending.
TEXT_OPTIONS = {"lineSep": "\n"}

_Reader = TypeVar("_Reader", DataFrameReader, DataStreamReader)


def text_reader(reader: _Reader) -> _Reader:
    """`spark.read` or `spark.readStream` set up for JSONL: the text source, `TEXT_OPTIONS`."""
    return reader.format("text").options(**TEXT_OPTIONS)


def text_lines(text_frame: DataFrame) -> DataFrame:
    """A text read (`text_reader`, batch or streaming) -> unnumbered lines: `raw_line`,
    `source_file`, `source_mtime` and the helpers `SPLIT_START` and `ROW_ID` for
    `number_lines`. A "\\r" ending a line is dropped ("\\r\\n" endings read like "\\n").

    A streaming frame gets no `ROW_ID` (Spark refuses monotonically_increasing_id on
    streams): `number_lines` adds it to the micro-batch (or `with_row_ids`, before a persist).
    """
    value = F.col("value")
    lines = text_frame.select(
        F.when(value.endswith("\r"), value.substr(F.lit(1), F.length(value) - 1))
        .otherwise(value)
        .alias("raw_line"),
        F.col("_metadata.file_path").alias("source_file"),
        F.col("_metadata.file_modification_time").alias("source_mtime"),
        F.col("_metadata.file_block_start").alias(SPLIT_START),
    )
    return lines if text_frame.isStreaming else with_row_ids(lines)


def with_row_ids(lines: DataFrame) -> DataFrame:
    """Add `ROW_ID` (unless there) to lines straight from the text read: no row may have been
    dropped or moved before (row-wise projections such as `parse_lines` are fine)."""
    if ROW_ID in lines.columns:
        return lines
    return lines.withColumn(ROW_ID, F.monotonically_increasing_id())


class LineSplit(NamedTuple):
    """One file split of a text read: where its lines start in its file."""

    source_file: str
    split_start: int  # byte offset of the split in its file
    first_row: int  # ROW_ID of its first line
    lines: int
    mtime_ms: int | None  # its file's modification time


def line_splits(lines: DataFrame) -> list[LineSplit]:
    """The splits of `lines` (from `text_lines`), ordered by file and offset: one small
    aggregate, a row per split (never per line)."""
    rows = (
        with_row_ids(lines)
        .groupBy("source_file", SPLIT_START)
        .agg(
            F.min(ROW_ID).alias("first_row"),
            F.count(F.lit(1)).alias("lines"),
            F.max(F.unix_millis("source_mtime")).alias("mtime_ms"),
        )
        .collect()
    )
    splits = [LineSplit(r[0], r[1], r[2], r[3], r[4]) for r in rows]
    return sorted(splits, key=lambda s: (s.source_file, s.split_start))


def first_line_numbers(splits: list[LineSplit]) -> dict[tuple[str, int], int]:
    """(file, split offset) -> the 1-based number of the split's first line: one more than
    the lines of the file's earlier splits."""
    before: dict[str, int] = {}
    numbers = {}
    for split in sorted(splits, key=lambda s: (s.source_file, s.split_start)):
        done = before.get(split.source_file, 0)
        numbers[(split.source_file, split.split_start)] = done + 1
        before[split.source_file] = done + split.lines
    return numbers


def number_lines(lines: DataFrame, splits: list[LineSplit] | None = None) -> DataFrame:
    """Lines with the helper columns (from `text_lines`; other columns, e.g. `parse_lines`'
    output, are carried through) -> `source_line` (1-based line number in its file, BIGINT)
    added after `source_file`, helpers dropped. `splits`: `line_splits(lines)`, when the
    caller already has them.

    Within a Spark partition the rows of one file split are contiguous and their row ids step
    by 1, so `row - first row of the split` is the line's index in its split. The splits'
    first line numbers (a row per split, built in the JVM from literals) are joined back by
    broadcast. `lines` is evaluated twice (the splits and the join): the row ids must be the
    same both times, so persist `lines` first, or let both evaluations re-read the same files
    (a batch read of fixed paths, a micro-batch of the file source) straight from
    `text_lines`. Each file must be read once: two copies of a file would be numbered as one.
    """
    if lines.isStreaming:
        raise ValueError("number_lines: number a micro-batch (foreachBatch), not the stream")
    lines = with_row_ids(lines)
    if splits is None:
        splits = line_splits(lines)
    numbers = first_line_numbers(splits)
    # line number = row - (first row - first line number): one offset per split.
    offsets = F.arrays_zip(
        F.lit([s.source_file for s in splits]).cast("array<string>"),
        F.lit([s.split_start for s in splits]).cast("array<bigint>"),
        F.lit([s.first_row - numbers[(s.source_file, s.split_start)] for s in splits]).cast(
            "array<bigint>"
        ),
    )
    split_table = (
        lines.sparkSession.range(1)
        .select(F.inline(offsets))
        .toDF("source_file", SPLIT_START, "_offset")
    )
    # Never null (an inner join on a split's own rows); the coalesce keeps the column NOT NULL.
    number = F.coalesce(F.col(ROW_ID) - F.col("_offset"), F.lit(0)).cast("long")
    columns: list[Column] = []
    for name in lines.columns:
        if name in (SPLIT_START, ROW_ID):
            continue
        columns.append(F.col(name))
        if name == "source_file":
            columns.append(number.alias("source_line"))
    return lines.join(F.broadcast(split_table), ["source_file", SPLIT_START]).select(*columns)


def read_jsonl_lines(spark: SparkSession, paths: str | list[str]) -> DataFrame:
    """The numbered lines (`LINE_COLUMNS`) of JSONL files (a file, a directory, or a list of
    files, each once): batch. Lazy; each evaluation re-reads the files (see `number_lines`)."""
    if not isinstance(paths, str) and len(set(paths)) < len(paths):
        # Two reads of one file would share its splits, and their lines' numbers.
        raise ValueError("read_jsonl_lines: a path is listed more than once")
    text = text_reader(spark.read).load(paths)
    return text.transform(text_lines).transform(number_lines)
