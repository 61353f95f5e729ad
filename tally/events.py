"""The event contract: one JSON object per line, validated in the JVM.

    {"event_id": "e-1", "key": "merchant-42", "amount": 12550, "currency": "EUR",
     "event_time": "2026-11-21T09:42:17.125Z", "partition": 3}

`amount` is an integer in minor units of `currency` (never a float); `currency` is optional, an
ISO 4217 code in use (`tally.money`), the setting `default_currency` when absent or null;
`event_time` is ISO-8601 with a zone or epoch milliseconds; `partition` defaults to 0; unknown
fields are kept in `extra`.
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

from tally.jvm_functions import SCAN_FUNCTION, register_jvm_functions
from tally.money import DEFAULT_CURRENCY, check_currency, current_currencies
from tally.spark import jvm_cached, kept_select
from tally.sql_text import sql_string

# Reasons a source gives a record before it is a line of text (Kafka: a tombstone, bytes
# that are not UTF-8, a value over `max_record_bytes`); they come before every other reason.
SOURCE_REASONS = ("null_value", "not_utf8", "oversized_value")
# Reasons, checked in this order; the first that applies is recorded.
QUARANTINE_REASONS = (
    *SOURCE_REASONS,
    "empty_line",
    "invalid_json",
    "duplicate_field",  # an object naming a top-level field twice: which value counts?
    "missing_event_id",
    "missing_key",
    "missing_amount",
    "amount_not_integer",
    "missing_event_time",
    "bad_event_time",
    "partition_not_integer",
    "bad_currency",  # a currency that is no current ISO 4217 code (`tally.money`), or no text
    "bad_watermark",  # a control record whose watermark is no time (source watermarks only)
)

# An ISO-8601 time with a zone, the contract's text form of event_time (unanchored).
ZONED_ISO_TIME = r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2})"
# Optional columns of a source's raw frame that `parse_lines` consumes: the reason a record was
# refused before parsing (one of SOURCE_REASONS), and the partition the source read it from,
# which then is the event's watermark `partition` (the payload's own `partition`, if any, is
# kept as data in `extra`).
SOURCE_REASON = "source_reason"
SOURCE_PARTITION = "source_partition"


class ParsedEvents(NamedTuple):
    valid: DataFrame
    quarantine: DataFrame
    controls: DataFrame  # control records: partition, CONTROL_MS and provenance


def _fence() -> Column:
    """An optimizer fence, always true. Catalyst pushes a filter on `parse_lines`' output (e.g.
    `split_parsed`'s `reason IS NULL`) down through deterministic projections, inlining the
    columns it reads, the scan among them, into the filter: the scan would run twice.
    spark_partition_id() is nondeterministic, so no filter passes the projection computing
    `reason`; columns that nobody reads are still pruned (counting lines does not scan them)."""
    return F.spark_partition_id() >= 0


# The contract's scanner (jvm/src/main/java/tally/jvm/ScanEventLine.java, registered with
# tally's other JVM functions by `tally.jvm_functions`): one Jackson pass over a line's bytes
# gives its verdict and fields. Spark's own `from_json` would parse each line several times
# over (typed, as a map, per time form) and through a char decoder; the scanner also sees what
# it cannot: text after the object and a field named twice.
VALID, CONTROL = "valid", "control"  # the scanner's verdicts that are no quarantine reason


def scan_line(line: Column, control_field: str) -> Column:
    """The scanner's struct (`tally.jvm_functions.SCAN_TYPE`) for a line."""
    return F.call_function(SCAN_FUNCTION, line.cast("binary"), F.lit(control_field))


CONTROL_MS = "control_ms"  # parse_lines: a control record's watermark (epoch ms), else null


def parse_lines(
    raw: DataFrame, control_field: str | None = None, default_currency: str = DEFAULT_CURRENCY
) -> DataFrame:
    """`raw` (column `raw_line` plus provenance columns), each line scanned once, one row per
    line: the event's typed columns when valid (its `currency`: `default_currency` when it
    names none), else `raw_line` and the quarantine `reason`.
    With `control_field`, a control record (see the module docstring) has neither: its
    `partition` and `CONTROL_MS`, the watermark it carries.

    Persist the result when both outputs of `split_parsed` are used: otherwise each output
    reads and scans every line again.
    """
    register_jvm_functions(raw.sparkSession)
    key = ("parse_lines", tuple(raw.columns), control_field or "", default_currency)
    projections = jvm_cached(
        raw.sparkSession,
        key,
        lambda: _parse_columns(raw.columns, control_field or "", check_currency(default_currency)),
    )
    scanned = kept_select(raw, (*key, 0), lambda: projections[0])
    return kept_select(scanned, (*key, 1), lambda: projections[1])


def _parse_columns(
    raw_columns: list[str], control_field: str, default_currency: str
) -> tuple[list[Column], list[Column]]:
    """`parse_lines`' two projections for a raw frame of these columns (built once a JVM)."""
    seams = (SOURCE_REASON, SOURCE_PARTITION)
    provenance = [c for c in raw_columns if c not in ("raw_line", *seams)]
    given = {c: F.col(c) if c in raw_columns else F.lit(None) for c in seams}
    line = F.col("raw_line")
    # Its own projection: every column below reads the one scan of the row.
    scanned = [
        *[F.col(c) for c in provenance],
        line,
        given[SOURCE_REASON].cast("string").alias("_source_reason"),
        given[SOURCE_PARTITION].cast("int").alias("_source_partition"),
        scan_line(line, control_field).alias("_scan"),
    ]
    scan, source_reason = F.col("_scan"), F.col("_source_reason")
    # The scanner passes a currency's text; whether it is a code in use is checked here, the
    # contract's last rule for an event (a set lookup in the JVM: Spark makes an InSet of it).
    currency = scan["currency"]
    known_currency = currency.isNull() | currency.isin(*sorted(current_currencies()))
    verdict = F.when((scan["verdict"] == VALID) & ~known_currency, F.lit("bad_currency"))
    verdict = verdict.otherwise(scan["verdict"])
    # A source's own reason (Kafka: a tombstone, no UTF-8, oversized) comes before the scan's.
    reason = F.when(source_reason.isNotNull(), source_reason).when(
        ~verdict.isin(VALID, CONTROL), verdict
    )
    valid = source_reason.isNull() & (verdict == VALID)
    control = source_reason.isNull() & (verdict == CONTROL)
    extra = scan["extra"]
    payload_partition = scan["partition"]
    source_partition = F.col("_source_partition")
    if SOURCE_PARTITION in raw_columns:  # the payload's partition is data, not the watermark's
        extra = F.when(
            payload_partition.isNotNull(),
            F.map_concat(extra, F.create_map(F.lit("partition"), payload_partition.cast("string"))),
        ).otherwise(extra)
    partition = F.coalesce(source_partition, payload_partition, F.lit(0))
    return scanned, [
        F.when(valid, scan["event_id"]).alias("event_id"),
        F.when(valid, scan["key"]).alias("key"),
        F.when(valid, scan["amount"]).cast("long").alias("amount"),
        F.when(valid, F.timestamp_millis(scan["event_ms"])).alias("event_time"),
        F.when(valid | control, partition).cast("int").alias("partition"),
        F.when(valid, extra).alias("extra"),
        F.when(valid, F.coalesce(currency, F.lit(default_currency))).alias("currency"),
        *[F.col(c) for c in provenance],
        F.when(reason.isNotNull(), line).alias("raw_line"),
        F.when(_fence(), reason).alias("reason"),
        F.when(control, scan["control_ms"]).alias(CONTROL_MS),
    ]


def split_parsed(parsed: DataFrame) -> ParsedEvents:
    """Valid events and quarantine rows of `parse_lines`' output."""
    key = ("split_parsed", tuple(parsed.columns))
    splits = jvm_cached(parsed.sparkSession, key, lambda: _split_columns(parsed.columns))
    (valid, valid_columns), (bad, bad_columns), (control, control_columns) = splits
    return ParsedEvents(
        kept_select(parsed.where(valid), (*key, 0), lambda: valid_columns),
        kept_select(parsed.where(bad), (*key, 1), lambda: bad_columns),
        kept_select(parsed.where(control), (*key, 2), lambda: control_columns),
    )


_Split = tuple[Column, list[Column]]  # a filter and its projection


def _split_columns(columns: list[str]) -> tuple[_Split, _Split, _Split]:
    """`split_parsed`'s three filters and projections (built once a JVM)."""
    event_columns = ("event_id", "key", "amount", "event_time", "partition", "extra", "currency")
    provenance = [c for c in columns if c not in (*event_columns, "raw_line", "reason")]
    provenance = [c for c in provenance if c != CONTROL_MS]
    is_control = F.col(CONTROL_MS).isNotNull()
    return (
        (
            F.col("reason").isNull() & ~is_control,
            [F.col(c) for c in (*event_columns, *provenance)],
        ),
        (F.col("reason").isNotNull(), [F.col(c) for c in ("raw_line", "reason", *provenance)]),
        (is_control, [F.col(c) for c in ("partition", CONTROL_MS, *provenance)]),
    )


def parse_events(
    raw: DataFrame, control_field: str | None = None, default_currency: str = DEFAULT_CURRENCY
) -> ParsedEvents:
    """Split `raw` (column `raw_line` plus provenance columns) into valid events, quarantine
    and control records (none without `control_field`).

    Provenance columns (anything but `raw_line`) are carried to every output unchanged.
    """
    return split_parsed(parse_lines(raw, control_field, default_currency))


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
    first line numbers are literals: a CASE for a few splits, else a table of them (a row per
    split, built in the JVM) joined back by broadcast. `lines` is evaluated twice (the splits
    and the numbering): the row ids must be the same both times, so persist `lines` first, or
    let both evaluations re-read the same files (a batch read of fixed paths, a micro-batch of
    the file source) straight from `text_lines`. Each file must be read once: two copies of a
    file would be numbered as one.
    """
    if lines.isStreaming:
        raise ValueError("number_lines: number a micro-batch (foreachBatch), not the stream")
    lines = with_row_ids(lines)
    if splits is None:
        splits = line_splits(lines)
    numbers = first_line_numbers(splits)
    # line number = row - (first row - first line number): one offset per split.
    offsets = {
        (s.source_file, s.split_start): s.first_row - numbers[(s.source_file, s.split_start)]
        for s in splits
    }
    if len(offsets) <= INLINE_SPLITS_MAX:
        return lines.select(*_numbered_columns(lines, _inline_offset(offsets)))
    offset_rows = F.arrays_zip(
        F.lit([file for file, _ in offsets]).cast("array<string>"),
        F.lit([start for _, start in offsets]).cast("array<bigint>"),
        F.lit(list(offsets.values())).cast("array<bigint>"),
    )
    split_table = (
        lines.sparkSession.range(1)
        .select(F.inline(offset_rows))
        .toDF("source_file", SPLIT_START, "_offset")
    )
    joined = lines.join(F.broadcast(split_table), ["source_file", SPLIT_START])
    return joined.select(*_numbered_columns(lines, F.col("_offset")))


# Up to this many splits, a line's offset is a CASE over (split start, file) literals: a
# projection, where the broadcast join of a split table costs a Spark job in every query that
# reads the lines (three a micro-batch). Beyond it the join's hash lookup is cheaper per line.
INLINE_SPLITS_MAX = 64


def _inline_offset(offsets: dict[tuple[str, int], int]) -> Column:
    """The offset of each line's split, from the literals (the start, a long, compared first),
    as one SQL CASE: one Py4J call for the whole expression, where a Column built per split
    made ~15. No split: no line either (an empty micro-batch, the drain)."""
    if not offsets:
        return F.lit(0)
    whens = " ".join(
        f"WHEN `{SPLIT_START}` = {start} AND source_file = {sql_string(file)} THEN {offset}"
        for (file, start), offset in offsets.items()
    )
    return F.expr(f"CASE {whens} END")


def _numbered_columns(lines: DataFrame, offset: Column) -> list[Column]:
    """`lines`' columns, helpers dropped and `source_line` after `source_file`."""
    # Never null (every line belongs to a split of `offsets`); the coalesce keeps it NOT NULL.
    number = F.coalesce(F.col(ROW_ID) - offset, F.lit(0)).cast("long")
    before, after = jvm_cached(
        lines.sparkSession,
        ("numbered_columns", tuple(lines.columns)),
        lambda: _kept_columns(lines.columns),
    )
    return [*before, number.alias("source_line"), *after] if after is not None else before


def _kept_columns(columns: list[str]) -> tuple[list[Column], list[Column] | None]:
    """The columns `_numbered_columns` keeps, up to `source_file` and after it (None: no
    `source_file`, nothing numbered)."""
    kept = [c for c in columns if c not in (SPLIT_START, ROW_ID)]
    if "source_file" not in kept:
        return [F.col(c) for c in kept], None
    cut = kept.index("source_file") + 1
    return [F.col(c) for c in kept[:cut]], [F.col(c) for c in kept[cut:]]


def read_jsonl_lines(spark: SparkSession, paths: str | list[str]) -> DataFrame:
    """The numbered lines (`LINE_COLUMNS`) of JSONL files (a file, a directory, or a list of
    files, each once): batch. Lazy; each evaluation re-reads the files (see `number_lines`)."""
    if not isinstance(paths, str) and len(set(paths)) < len(paths):
        # Two reads of one file would share its splits, and their lines' numbers.
        raise ValueError("read_jsonl_lines: a path is listed more than once")
    text = text_reader(spark.read).load(paths)
    return text.transform(text_lines).transform(number_lines)
