"""Sources: where raw lines come from. The seam a Kafka source slots into.

A source is a streaming DataFrame of raw lines with provenance columns
(`tally.events.LINE_COLUMNS`):
`raw_line` (text), `source_file` (file path, or e.g. `topic/partition`), `source_line`
(1-based line in the file, or the offset), `source_mtime` (when the line arrived: the file's
modification time, or the Kafka record timestamp). Everything downstream reads only these.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from tally.events import split_lines, whole_files


def file_source(spark: SparkSession, input_dir: str, max_files_per_trigger: int) -> DataFrame:
    """JSONL files in `input_dir`, oldest modification time first, N files a batch."""
    files = (
        spark.readStream.format("text")
        .option("wholetext", True)
        .option("maxFilesPerTrigger", max_files_per_trigger)
        .option("latestFirst", False)
        .load(input_dir)
    )
    return files.transform(whole_files).transform(split_lines)


def open_source(
    spark: SparkSession, kind: str, location: str, max_files_per_trigger: int
) -> DataFrame:
    if kind == "files":
        return file_source(spark, location, max_files_per_trigger)
    raise ValueError(f"source_kind: unsupported source {kind!r}")
