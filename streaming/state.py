"""The stream's own state between micro-batches: files in the checkpoint, named by batch id.

Users never query this state, so it is not a Delta table: a Delta commit per state table per
batch cost more than the rest of a small batch. It lives beside Spark's own checkpoint, on
any Hadoop file system (a local directory, `s3a://...`), under `<checkpoint>/tally/`:

    clock/<batch_id>                  the processing time the batch first ran with (epoch ms, text)
    state/<batch_id>/state=windows    open windows after the batch (Parquet, `WINDOWS_DDL`)
    state/<batch_id>/state=dedup      remembered event ids after the batch (Parquet, `DEDUP_DDL`)

Both parts of a batch's state are one Parquet dataset partitioned by `state`, written by one
Spark job (two writes were two jobs, two plans and two output commits a micro-batch); a part
with no rows has no directory. State written by batch N is read only by a replay of batch N + 1
in a new process (a restart); a running stream keeps the state it computed in memory for the
next batch. The files of batch N are complete (Spark's `_SUCCESS` in `state/<batch_id>`) before
batch N's `stream_progress` row is written, and nothing a later batch needs is deleted before
that row exists. A checkpoint from before this layout (`state/<batch_id>/windows` and
`.../dedup`, each with its own `_SUCCESS`) is still read.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from tally.spark import jvm_class
from tally.tables import empty_of, schema_of

# finalized: a final row was emitted; pending: changed since its last row; last_emit_ms: the
# processing time of its last row (early firings). Files from before them read these as null;
# files from before currencies read `currency` as null (the stream's default_currency).
WINDOWS_DDL = (
    "window_start TIMESTAMP, window_end TIMESTAMP, key STRING, event_count BIGINT, "
    "amount_sum BIGINT, emitted_revision INT, finalized BOOLEAN, pending BOOLEAN, "
    "last_emit_ms BIGINT, currency STRING"
)
DEDUP_DDL = "event_id STRING, window_end TIMESTAMP"
# The partition column of a batch's state files, and its values: one directory per part.
PART = "state"
WINDOWS, DEDUP = "windows", "dedup"
_DDL = {WINDOWS: WINDOWS_DDL, DEDUP: DEDUP_DDL}


@dataclass(frozen=True)
class StateStore:
    """Where one stream keeps its state: `<checkpoint>/tally`."""

    spark: SparkSession
    checkpoint: str

    @property
    def root(self) -> str:
        return f"{self.checkpoint.rstrip('/')}/tally"

    def state_dir(self, batch_id: int) -> str:
        return f"{self.root}/state/{batch_id}"

    def clock_file(self, batch_id: int) -> str:
        return f"{self.root}/clock/{batch_id}"

    # -- the Hadoop file system, through the JVM (works for every scheme Spark reads) -----
    def _fs_path(self, location: str):  # type: ignore[no-untyped-def]
        path = jvm_class(self.spark, "org.apache.hadoop.fs.Path")(location)
        return path.getFileSystem(self.spark._jsc.hadoopConfiguration()), path

    def _exists(self, location: str) -> bool:
        fs, path = self._fs_path(location)
        return bool(fs.exists(path))

    def _delete(self, location: str) -> None:
        fs, path = self._fs_path(location)
        fs.delete(path, True)

    # -- the batch clock ----------------------------------------------------------------------
    def recorded_clock(self, batch_id: int) -> int | None:
        """The processing time an earlier attempt of `batch_id` recorded, if any. A file left
        half-written by a crash reads as no record (it was the attempt's first write)."""
        location = self.clock_file(batch_id)
        if not self._exists(location):
            return None
        fs, path = self._fs_path(location)
        stream = fs.open(path)
        try:
            io_utils = jvm_class(self.spark, "org.apache.commons.io.IOUtils")
            text = str(io_utils.toString(stream, "UTF-8")).strip()
        finally:
            stream.close()
        return int(text) if text.lstrip("-").isdigit() else None

    def record_clock(self, batch_id: int, now_ms: int) -> None:
        fs, path = self._fs_path(self.clock_file(batch_id))
        out = fs.create(path, True)
        try:
            out.write(bytearray(f"{now_ms}\n".encode("ascii")))
        finally:
            out.close()

    # -- window and dedup state ---------------------------------------------------------------
    def part_dir(self, batch_id: int, part: str) -> str:
        return f"{self.state_dir(batch_id)}/{PART}={part}"

    def write(self, batch_id: int, windows: DataFrame, dedup: DataFrame) -> None:
        """Both parts of batch `batch_id`'s state in one Spark job: one Parquet dataset
        partitioned by `PART` (each part keeps its own columns: the other part's read as null
        and are never read back), complete when its `_SUCCESS` exists."""
        both = windows.withColumn(PART, F.lit(WINDOWS)).unionByName(
            dedup.withColumn(PART, F.lit(DEDUP)), allowMissingColumns=True
        )
        both.write.mode("overwrite").partitionBy(PART).parquet(self.state_dir(batch_id))

    def read(self, batch_id: int) -> tuple[DataFrame, DataFrame]:
        """Batch `batch_id`'s (windows, dedup) state, written completely before its progress
        row: missing files mean the checkpoint and the warehouse do not belong together."""
        base = self.state_dir(batch_id)
        if self._exists(f"{base}/_SUCCESS"):
            return self._part(batch_id, WINDOWS), self._part(batch_id, DEDUP)
        # a checkpoint from before the one-job layout: a directory and a marker per part
        for part in (WINDOWS, DEDUP):
            if not self._exists(f"{base}/{part}/_SUCCESS"):
                raise FileNotFoundError(
                    f"stream state of batch {batch_id} missing at {base}: was the "
                    "checkpoint moved or deleted apart from the warehouse?"
                )
        reader = self.spark.read
        return (
            reader.schema(schema_of(WINDOWS_DDL)).parquet(f"{base}/{WINDOWS}"),
            reader.schema(schema_of(DEDUP_DDL)).parquet(f"{base}/{DEDUP}"),
        )

    def part_bytes(self, batch_id: int, part: str) -> int:
        """The bytes of one part's files of batch `batch_id` (0: no rows, or no such files;
        a checkpoint from before the one-job layout: its part's directory)."""
        for location in (self.part_dir(batch_id, part), f"{self.state_dir(batch_id)}/{part}"):
            if self._exists(location):
                fs, path = self._fs_path(location)
                return int(fs.getContentSummary(path).getLength())
        return 0

    def read_dedup(self, batch_id: int) -> DataFrame:
        """The remembered ids this process just wrote for `batch_id` (no completeness check)."""
        return self._part(batch_id, DEDUP)

    def _part(self, batch_id: int, part: str) -> DataFrame:
        """One part of a batch's state; a part without rows has no directory: empty."""
        location = self.part_dir(batch_id, part)
        if not self._exists(location):
            return empty_of(self.spark, _DDL[part])
        return self.spark.read.schema(schema_of(_DDL[part])).parquet(location)

    def forget_before(self, batch_id: int) -> None:
        """Once `batch_id` committed, delete what no replay can need. A replay of `batch_id`
        itself (Spark had not recorded it) reads the state of `batch_id` - 1 and the clock of
        `batch_id`; a later batch reads the state of `batch_id`. Older files go."""
        if batch_id >= 2:
            self._delete(self.state_dir(batch_id - 2))
        if batch_id >= 1:
            self._delete(self.clock_file(batch_id - 1))
