"""Sources: where raw lines come from. The seam a Kafka source slots into.

A source is a streaming DataFrame of raw lines with provenance columns:
`raw_line` (text), `source_file` (file path, or e.g. `topic/partition`), `source_line`
(1-based line in the file, or the offset), `source_mtime` (when the line arrived: the file's
modification time, or the Kafka record timestamp). Everything downstream reads only these.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

SOURCE_COLUMNS = ("raw_line", "source_file", "source_line", "source_mtime")


def split_lines(files: DataFrame) -> DataFrame:
    """Whole files (`value`, `source_file`, `source_mtime`) -> one row per line, numbered.

    Reading whole files and numbering lines with posexplode keeps the numbering deterministic,
    so a replayed micro-batch produces the same (file, line) for every event.
    """
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


def file_source(spark: SparkSession, input_dir: str, max_files_per_trigger: int) -> DataFrame:
    """JSONL files in `input_dir`, oldest modification time first, N files a batch."""
    files = (
        spark.readStream.format("text")
        .option("wholetext", True)
        .option("maxFilesPerTrigger", max_files_per_trigger)
        .option("latestFirst", False)
        .load(input_dir)
        .select(
            "value",
            F.col("_metadata.file_path").alias("source_file"),
            F.col("_metadata.file_modification_time").alias("source_mtime"),
        )
    )
    return files.transform(split_lines)


def open_source(
    spark: SparkSession, kind: str, location: str, max_files_per_trigger: int
) -> DataFrame:
    if kind == "files":
        return file_source(spark, location, max_files_per_trigger)
    raise ValueError(f"source_kind: unsupported source {kind!r}")
