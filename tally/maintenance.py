"""Delta table maintenance: compaction, VACUUM and retention properties, and the plan of what
is due (pure, table-tested). The process that writes a table maintains it (one writer per
table: the stream its tables, through `streaming.housekeeping`; the nightly the tables it
writes); this module only knows tables, files and clocks.

Compaction is Delta's OPTIMIZE (bin-packing, `dataChange=false`): it never conflicts with the
stream's blind appends, and a reader at any version sees the same rows. VACUUM removes files
no version inside `delta.deletedFileRetentionDuration` references (compacted-away inputs, and
the orphans of a compaction killed before its commit). docs/operations.md says what runs when.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from tally import tables
from tally.spark import jvm_class, session_conf

MIB = 1024 * 1024
# Open partitions and the unpartitioned stream tables: files below SMALL_FILE_BYTES are merged
# into files of up to OPEN_TARGET_BYTES. A merged file still below the threshold is merged
# again next time, until it passes it: a table keeps about one small file plus one file per
# SMALL_FILE_BYTES of data.
SMALL_FILE_BYTES = 16 * MIB
OPEN_TARGET_BYTES = 128 * MIB
# A closed `event_date` is packed into files of up to 1 GiB (Delta's own OPTIMIZE default):
# one file for a day of up to ~1 GiB of events.
CLOSED_FILE_BYTES = 1024 * MIB

COMPACT, COMPACT_CLOSED, VACUUM = "compact", "compact_closed", "vacuum"
# A closed date is compacted again when late events have grown it past this many files.
CLOSED_MAX_FILES = 4
DONE, FAILED = "done", "failed"


class MaintenanceError(RuntimeError):
    """A maintenance action failed (one-line message); the table is unchanged."""


# -- settings as table properties -----------------------------------------------------------
def _interval(ms: int) -> str:
    """A Delta interval property value (`interval 7 days` style), in whole hours or days."""
    hours = ms // 3_600_000
    if ms % 86_400_000 == 0:
        return f"interval {ms // 86_400_000} days"
    if ms % 3_600_000 == 0:
        return f"interval {hours} hours"
    return f"interval {ms // 1000} seconds"


def retention_properties(deleted_file_retention_ms: int, log_retention_ms: int) -> dict[str, str]:
    """The retention a table keeps: removed data files (VACUUM frees them after this) and its
    commit log (cleaned at checkpoints after this): together, how far back `versionAsOf` of
    the table can read."""
    return {
        "delta.deletedFileRetentionDuration": _interval(deleted_file_retention_ms),
        "delta.logRetentionDuration": _interval(log_retention_ms),
    }


def table_properties(spark: SparkSession, path: str) -> dict[str, str]:
    """The table's current properties (its snapshot's metadata, no Spark job)."""
    delta_log = jvm_class(spark, "org.apache.spark.sql.delta.DeltaLog").forTable(
        spark._jsparkSession, path
    )
    defaults = [getattr(delta_log, f"update$default${i}")() for i in (1, 2, 3)]
    configuration = delta_log.update(*defaults).metadata().configuration()
    return {str(k): str(configuration.apply(k)) for k in _scala_keys(configuration)}


def _scala_keys(scala_map: Any) -> list[str]:
    keys = scala_map.keys().toList()
    return [str(keys.apply(i)) for i in range(keys.size())]


def properties_to_set(current: Mapping[str, str], wanted: Mapping[str, str]) -> dict[str, str]:
    """The wanted properties the table does not have yet (equal values are left alone, so an
    unchanged setting commits nothing)."""
    return {k: v for k, v in wanted.items() if current.get(k, "").lower() != v.lower()}


def set_properties(spark: SparkSession, path: str, properties: Mapping[str, str]) -> None:
    """ALTER TABLE SET TBLPROPERTIES (one commit). A metadata change: concurrent appends to the
    table fail on it, so the writer sets properties before it starts appending. Turning row
    tracking on for an existing table backfills its row ids (one more commit)."""
    pairs = ", ".join(f"'{k}' = '{v}'" for k, v in sorted(properties.items()))
    spark.sql(f"ALTER TABLE delta.`{path.replace('`', '``')}` SET TBLPROPERTIES ({pairs})")


def upgrade_properties(
    spark: SparkSession, path: str, table: tables.Table, extra: Mapping[str, str]
) -> dict[str, str]:
    """Give an existing table its declared properties and `extra` where it lacks them (a
    warehouse written before they were declared: row tracking and append-only on the stream's
    tables, retention from settings); the properties set."""
    wanted = {**dict(table.properties), **extra}
    missing = properties_to_set(table_properties(spark, path), wanted)
    if missing:
        set_properties(spark, path, missing)
    return missing


# -- what the table holds ---------------------------------------------------------------------
@dataclass(frozen=True)
class FileStats:
    """Live files of a table or one partition of it."""

    files: int = 0
    bytes: int = 0
    small: int = 0  # below SMALL_FILE_BYTES
    below_closed: int = 0  # below CLOSED_FILE_BYTES


def live_files(
    spark: SparkSession, path: str, partition_column: str | None
) -> dict[str | None, FileStats]:
    """Live files per partition value (None: an unpartitioned table), from the table's current
    snapshot (its log state, not a listing of the storage)."""
    return _files_of(spark, _snapshot(spark, path), partition_column)


def _files_of(
    spark: SparkSession, snapshot: Any, partition_column: str | None
) -> dict[str | None, FileStats]:
    from pyspark.sql import functions as F

    files = DataFrame(snapshot.allFiles().toDF(), spark)
    part = F.col("partitionValues")[partition_column] if partition_column else F.lit(None)
    rows = (
        files.groupBy(part.cast("string").alias("p"))
        .agg(
            F.count(F.lit(1)).alias("files"),
            F.coalesce(F.sum("size"), F.lit(0)).alias("bytes"),
            F.count_if(F.col("size") < SMALL_FILE_BYTES).alias("small"),
            F.count_if(F.col("size") < CLOSED_FILE_BYTES).alias("below_closed"),
        )
        .collect()
    )
    return {
        r["p"]: FileStats(int(r["files"]), int(r["bytes"]), int(r["small"]), int(r["below_closed"]))
        for r in rows
    }


# -- the layout kept up to date from the log ----------------------------------------------------
# A layout job reconstructs the table's state (a Spark job over its checkpoint and commits):
# ~0.3-0.9 s a table after each append, measured; run for six tables after every micro-batch it
# was most of housekeeping's cost. A writer's housekeeper instead reads the layout once and then
# applies the file actions of the commits since (a few small JSON files a batch, no Spark job).
Change = tuple[str | None, int, int]  # (partition value, file size in bytes, +1 added / -1 removed)


@dataclass(frozen=True)
class KnownLayout:
    """A table's live files per partition as of its Delta `version`; `removed_ms`: when the
    files removed by the commits it was moved forward over were removed (wall clock, epoch
    ms; one per commit that removed any, its earliest), so VACUUM can tell when they expire."""

    version: int
    stats: Mapping[str | None, FileStats]
    removed_ms: tuple[int, ...] = ()


def apply_changes(
    stats: Mapping[str | None, FileStats], changes: Iterable[Change]
) -> dict[str | None, FileStats]:
    """The layout after files were added (+1) and removed (-1); a partition left with no file
    is dropped."""
    out = dict(stats)
    for partition, size, sign in changes:
        was = out.get(partition, FileStats())
        now = FileStats(
            was.files + sign,
            was.bytes + sign * size,
            was.small + (sign if size < SMALL_FILE_BYTES else 0),
            was.below_closed + (sign if size < CLOSED_FILE_BYTES else 0),
        )
        if now.files > 0:
            out[partition] = now
        else:
            out.pop(partition, None)
    return out


def layout_now(
    spark: SparkSession, path: str, partition_column: str | None, known: KnownLayout | None
) -> KnownLayout:
    """The table's layout at its latest version: `known` moved forward by the file actions of
    the commits since, or (nothing known, a commit gone from the log, a removal without its
    size) read whole (`live_files`)."""
    snapshot = _snapshot(spark, path)
    version = int(snapshot.version())
    if known is not None and known.version == version:
        return known
    if known is not None and known.version < version:
        read = _file_changes(spark, path, partition_column, known.version + 1, version)
        if read is not None:
            changes, removed_ms = read
            return KnownLayout(version, apply_changes(known.stats, changes), removed_ms)
    return KnownLayout(version, _files_of(spark, snapshot, partition_column))


def _file_changes(
    spark: SparkSession, path: str, partition_column: str | None, start: int, end: int
) -> tuple[list[Change], tuple[int, ...]] | None:
    """The AddFile (+1) and RemoveFile (-1) actions of the commits `start` to `end`, from the
    commit files themselves, and the earliest removal time of each commit that removed files;
    None when a commit can no longer be read or a removal has no size."""
    delta_log = jvm_class(spark, "org.apache.spark.sql.delta.DeltaLog").forTable(
        spark._jsparkSession, path
    )
    no_table = jvm_class(spark, "scala.Option").apply(None)
    changes: list[Change] = []
    removed_ms: list[int] = []
    try:
        commits = delta_log.getChanges(start, end, no_table, True)
        while commits.hasNext():
            actions = commits.next()._2()
            removals: list[int] = []
            for i in range(actions.size()):
                action = actions.apply(i)
                kind = action.getClass().getSimpleName()
                if kind in ("AddFile", "RemoveFile"):
                    changes.append(_file_change(action, kind, partition_column))
                if kind == "RemoveFile":
                    removals.append(int(action.delTimestamp()))
            if removals:
                removed_ms.append(min(removals))
    except Exception:  # a commit cleaned from the log, a removal without its size: read whole
        return None
    return changes, tuple(removed_ms)


def _file_change(action: Any, kind: str, partition_column: str | None) -> Change:
    value = None
    if partition_column is not None:
        found = action.partitionValues().get(partition_column)
        value = str(found.get()) if found.isDefined() else None
    if kind == "AddFile":
        return (value, int(action.size()), 1)
    return (value, int(action.size().get()), -1)  # no size: NoSuchElementException


def _snapshot(spark: SparkSession, path: str) -> Any:
    delta_log = jvm_class(spark, "org.apache.spark.sql.delta.DeltaLog").forTable(
        spark._jsparkSession, path
    )
    defaults = [getattr(delta_log, f"update$default${i}")() for i in (1, 2, 3)]
    return delta_log.update(*defaults)


def stored_files(spark: SparkSession, path: str) -> FileStats:
    """Data files in the table's directory, referenced or not (what VACUUM can free): a
    recursive listing of the storage, without `_delta_log`."""
    hadoop_path = jvm_class(spark, "org.apache.hadoop.fs.Path")(path)
    fs = hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    listing = fs.listFiles(hadoop_path, True)
    files = size = 0
    while listing.hasNext():
        status = listing.next()
        name = str(status.getPath().toString())
        if "/_delta_log/" in name or name.endswith("/_delta_log"):
            continue
        files += 1
        size += int(status.getLen())
    return FileStats(files, size)


# -- the plan ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Schedule:
    """How often each part runs, on the writer's clock (0 switches a part off)."""

    compact_interval_ms: int  # open partitions and unpartitioned tables, at most this often
    compact_closed: bool  # a closed date to CLOSED_FILE_BYTES files, once closed
    vacuum_interval_ms: int  # VACUUM each table at most this often
    # An open partition or unpartitioned table is compacted once it holds this many small
    # files (the stream: `compact_min_files`, Delta's own auto-compaction threshold by
    # default); the nightly's few files of a date: two.
    compact_min_files: int = 2
    # the tables' delta.deletedFileRetentionDuration: when a removed file can be vacuumed
    deleted_file_retention_ms: int = 7 * 86_400_000


@dataclass(frozen=True)
class Action:
    """One maintenance action: compact a table or one partition of it, or VACUUM a table."""

    table: str
    kind: str  # COMPACT, COMPACT_CLOSED or VACUUM
    partition: str | None = None  # the partition value compacted (None: the whole table)
    partition_column: str | None = None
    target_bytes: int = OPEN_TARGET_BYTES  # files below this are merged, into files up to it
    min_bytes: int = SMALL_FILE_BYTES

    @property
    def key(self) -> tuple[str, str, str | None]:
        return (self.table, self.kind, self.partition)

    @property
    def predicate(self) -> str | None:
        if self.partition is None or self.partition_column is None:
            return None
        return f"{self.partition_column} = '{self.partition}'"


LastDone = Mapping[tuple[str, str, str | None], int]  # (table, kind, partition) -> clock ms


def _due(last: LastDone, key: tuple[str, str, str | None], now_ms: int, every_ms: int) -> bool:
    done = last.get(key)
    return done is None or now_ms - done >= every_ms


def compactions_due(
    table: str,
    partition_column: str | None,
    layout: Mapping[str | None, FileStats],
    closed: Callable[[str], bool],
    schedule: Schedule,
    now_ms: int,
    last: LastDone,
) -> list[Action]:
    """The compactions of one table due now; one file alone is never rewritten.

    A closed date (`closed(value)`) with two or more files below CLOSED_FILE_BYTES is packed
    into ~1 GiB files once; again only when late events have since grown it past
    CLOSED_MAX_FILES files, and at most every interval (a date that keeps receiving late
    events is not rewritten every batch). Any other partition, or an unpartitioned table,
    with `compact_min_files` (at least two) files below SMALL_FILE_BYTES is compacted, at most
    every `compact_interval_ms`."""
    due: list[Action] = []
    every = schedule.compact_interval_ms
    for value, stats in sorted(layout.items(), key=lambda kv: kv[0] or ""):
        if value is not None and partition_column is not None and closed(value):
            action = Action(
                table, COMPACT_CLOSED, value, partition_column, CLOSED_FILE_BYTES, CLOSED_FILE_BYTES
            )
            first = action.key not in last
            again = stats.files > CLOSED_MAX_FILES and _due(last, action.key, now_ms, every)
            if schedule.compact_closed and stats.below_closed >= 2 and (first or again):
                due.append(action)
        elif every > 0 and stats.small >= max(2, schedule.compact_min_files):
            action = Action(table, COMPACT, value, partition_column)
            if _due(last, action.key, now_ms, every):
                due.append(action)
    return due


def vacuums_due(
    table_names: Iterable[str],
    schedule: Schedule,
    now_ms: int,
    last: LastDone,
    first_ms: int,
    frees: Callable[[str], bool] = lambda _table: True,
) -> list[Action]:
    """VACUUM of each table, at most every `vacuum_interval_ms` (0: never), and only where it
    `frees` something. A table never vacuumed is first due one interval after `first_ms` (when
    this writer first planned): a new table has nothing to free, and a VACUUM lists the whole
    table."""
    if schedule.vacuum_interval_ms <= 0:
        return []
    every = schedule.vacuum_interval_ms
    return [
        Action(t, VACUUM)
        for t in table_names
        if now_ms - last.get((t, VACUUM, None), first_ms) >= every and frees(t)
    ]


def vacuum_frees(removed_ms: Sequence[int] | None, wall_now_ms: int, retention_ms: int) -> bool:
    """Whether a VACUUM now can delete a file: one removed at least `retention_ms` ago (wall
    clock, as Delta compares), or unknown (None: files removed before the writer kept count,
    or the uncommitted files of a killed write, which only a VACUUM's listing finds)."""
    if removed_ms is None:
        return True
    return any(r <= wall_now_ms - retention_ms for r in removed_ms)


def still_pending(
    removed_ms: Sequence[int], vacuumed_wall_ms: int, retention_ms: int
) -> tuple[int, ...]:
    """The removals a VACUUM at `vacuumed_wall_ms` left on storage (not yet expired)."""
    return tuple(r for r in removed_ms if r > vacuumed_wall_ms - retention_ms)


def date_closed_by(closed_through: date | None, drained: bool) -> Callable[[str], bool]:
    """`closed(event_date)` for a writer whose dates up to `closed_through` are closed (every
    date once `drained`)."""

    def closed(value: str) -> bool:
        if drained:
            return True
        return closed_through is not None and date.fromisoformat(value) <= closed_through

    return closed


# -- running an action -------------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    """What one action did: a `maintenance_log` row's values."""

    action: Action
    action_ms: int  # wall clock when it finished
    clock_ms: int  # the writer's clock it was scheduled by
    before: FileStats
    after: FileStats
    seconds: float
    outcome: str
    detail: str = ""


def run_action(
    spark: SparkSession,
    warehouse: str,
    action: Action,
    clock_ms: int,
    wall_ms: Callable[[], int],
    layout: Callable[[], Mapping[str | None, FileStats]] | None = None,
) -> Outcome:
    """Run one action; a failure is an Outcome (FAILED, its first line), never an exception:
    maintenance is retried at its next due time and never stops the writer. `layout`: the
    table's live files now, if the caller keeps them (else read: `live_files`)."""
    path = tables.table_path(warehouse, action.table)
    started = time.monotonic()
    before = after = FileStats()
    try:
        if action.kind in (COMPACT, COMPACT_CLOSED):
            files = layout() if layout else live_files(spark, path, action.partition_column)
            before = files.get(action.partition, FileStats())
            before, after = compact(spark, path, action, before)
        else:
            before = stored_files(spark, path)
            vacuum(spark, path)
            after = stored_files(spark, path)
        outcome, detail = DONE, ""
    except Exception as exc:  # recorded as the outcome; the action is retried when next due
        outcome, detail = FAILED, first_line(exc)
    seconds = time.monotonic() - started
    return Outcome(action, wall_ms(), clock_ms, before, after, seconds, outcome, detail)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:500]


def compact(
    spark: SparkSession, path: str, action: Action, before: FileStats
) -> tuple[FileStats, FileStats]:
    """OPTIMIZE the table or the action's partition: files below `min_bytes` are binned into
    files of up to `target_bytes` (a bin of one file is left alone). The scope's files before
    and after, counted in the snapshot OPTIMIZE compacted (`totalConsideredFiles`): `before`
    (the caller's count) misses what a writer appended since, which OPTIMIZE may have merged
    too (48 files known, 49 compacted into 1, would read 48 -> 0)."""
    from delta.tables import DeltaTable

    conf = {
        "spark.databricks.delta.optimize.minFileSize": str(action.min_bytes),
        "spark.databricks.delta.optimize.maxFileSize": str(action.target_bytes),
    }
    with session_conf(spark, conf):
        builder = DeltaTable.forPath(spark, path).optimize()
        if action.predicate is not None:
            builder = builder.where(action.predicate)
        metrics = builder.executeCompaction().select("metrics.*").first()
    if metrics is None:
        return before, before
    added, removed = metrics["filesAdded"], metrics["filesRemoved"]
    considered = max(int(metrics["totalConsideredFiles"] or 0), before.files)
    seen = FileStats(considered, before.bytes)
    after = FileStats(
        considered - int(metrics["numFilesRemoved"]) + int(metrics["numFilesAdded"]),
        max(0, before.bytes - int(removed["totalSize"] or 0)) + int(added["totalSize"] or 0),
    )
    return seen, after


def vacuum(spark: SparkSession, path: str) -> None:
    """VACUUM at the table's own `delta.deletedFileRetentionDuration` (no retention argument:
    Delta then allows a retention the table's property sets, however short)."""
    from delta.tables import DeltaTable

    # VACUUM lists the table's directories in a job of `parallelPartitionDiscovery.parallelism`
    # tasks (Spark's default 10,000: VacuumCommand / DeltaFileOperations.recursiveListDirs,
    # Delta 4.3.1): a minute of empty tasks on 2 cores for a table of a few directories.
    tasks = max(2, 2 * spark.sparkContext.defaultParallelism)
    with session_conf(
        spark, {"spark.sql.sources.parallelPartitionDiscovery.parallelism": str(tasks)}
    ):
        DeltaTable.forPath(spark, path).vacuum()


def log_rows(spark: SparkSession, outcomes: list[Outcome], run_by: str) -> DataFrame:
    """The outcomes as `maintenance_log` rows (literals built in the JVM, no Python workers)."""
    from pyspark.sql import functions as F

    def lit_or_null(value: Any, sql_type: str) -> Any:
        return F.lit(value).cast(sql_type)

    frames = [
        tables.literal_row(
            spark,
            {
                "action_time": F.timestamp_millis(F.lit(o.action_ms)),
                "processing_time": F.timestamp_millis(F.lit(o.clock_ms)),
                "table_name": F.lit(o.action.table),
                "action": F.lit(o.action.kind),
                "partition": lit_or_null(o.action.partition, "string"),
                "predicate": lit_or_null(o.action.predicate, "string"),
                "files_before": F.lit(o.before.files).cast("bigint"),
                "files_after": F.lit(o.after.files).cast("bigint"),
                "bytes_before": F.lit(o.before.bytes).cast("bigint"),
                "bytes_after": F.lit(o.after.bytes).cast("bigint"),
                "seconds": F.lit(round(o.seconds, 3)).cast("double"),
                "outcome": F.lit(o.outcome),
                "detail": lit_or_null(o.detail or None, "string"),
                "run_by": F.lit(run_by),
            },
        )
        for o in outcomes
    ]
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out.coalesce(1)


def append_log(
    spark: SparkSession,
    warehouse: str,
    log_table: tables.Table,
    outcomes: list[Outcome],
    run_by: str,
) -> None:
    """Append the outcomes to the writer's log table (created by its first write)."""
    if outcomes:
        tables.write_table(log_rows(spark, outcomes, run_by), warehouse, log_table)


def last_done(spark: SparkSession, warehouse: str, log_table: tables.Table) -> dict[Any, int]:
    """When each (table, action, partition) last succeeded, on the writer's clock (epoch ms),
    from the log: a restarted writer keeps the schedule."""
    from pyspark.sql import functions as F

    if not tables.exists(spark, warehouse, log_table.name):
        return {}
    rows = (
        tables.read_table(spark, warehouse, log_table.name)
        .where(F.col("outcome") == DONE)
        .groupBy("table_name", "action", "partition")
        .agg(F.max(F.unix_millis("processing_time")).alias("ms"))
        .collect()
    )
    return {(r["table_name"], r["action"], r["partition"]): int(r["ms"]) for r in rows}
