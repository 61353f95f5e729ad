"""Sources: where raw lines come from. The seam a Kafka source slots into.

A source is a streaming DataFrame of raw lines with provenance columns: `raw_line` (text),
`source_file` (file path, or e.g. `topic/partition`), `source_mtime` (when the line arrived: the
file's modification time, or the Kafka record timestamp), and what numbers the lines: for
files, the helpers of `tally.events.text_lines`, from which each micro-batch computes
`source_line` (the 1-based line in the file) with `tally.events.number_lines`. Files are read
line by line (Spark's text source, splittable), never whole.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from tally.events import text_lines, text_reader


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
    spark: SparkSession, kind: str, location: str, max_files_per_trigger: int
) -> DataFrame:
    if kind == "files":
        return file_source(spark, location, max_files_per_trigger)
    raise ValueError(f"source_kind: unsupported source {kind!r}")
