"""A stream that stopped on an error it cannot recover from: one line saying what failed and what
to change (`failure_line`, pure), the details in the log (`report_failure`).

Spark reports a failed micro-batch as a `StreamingQueryException` whose message is the query's
whole description (its logical plan, offsets, the Java stack); what the operator needs is the
cause at the bottom of it and the setting that gets the stream past it.
"""

from __future__ import annotations

import logging
import re
import traceback
from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql import SparkSession

from streaming.health import clock_skew_fix as health_clock_skew_fix
from streaming.health import mostly_skewed, read_recent_progress, skewed_counts
from tally.outputs import one_line
from tally.settings import Settings
from tally.spark import jvm_class, log_file

log = logging.getLogger("tally.stream")

# How long the fallback's cause may be in the one line (a Java message can be a whole plan).
CAUSE_CHARS = 200


@dataclass(frozen=True)
class FailureContext:
    """What the line can name besides the cause: the batch that failed (None: unknown), the
    bound on a micro-batch's input, the driver's memory and where the details are."""

    batch_id: int | None
    batch_flag: str  # the flag bounding a micro-batch's input: --max-files-per-trigger ...
    batch_limit: int  # its value in force
    driver_memory: str  # as configured, e.g. "1g (Spark's default)"
    log_location: str  # "" when the log is on stderr (--verbose)
    # What to change when most events of the recent batches were ahead of the stream's clock
    # (`streaming.health.clock_skew_fix`); "" when they were not or nothing is known.
    clock_skew_fix: str = ""


@dataclass(frozen=True)
class Cause:
    """A kind of failure: the markers that identify it in the error's text (the first found
    is named in the line), what failed and what to change."""

    markers: tuple[str, ...]
    what: str
    change: str


# Checked in order: the first kind with a marker in the text names the failure.
CAUSES = (
    Cause(
        (
            "UNABLE_TO_ACQUIRE_MEMORY",
            "SparkOutOfMemoryError",
            "Could not allocate memory",  # a hash map that could not grow (BytesToBytesMap)
            "Java heap space",
            "GC overhead limit exceeded",
            "OutOfMemoryError",
        ),
        "ran out of memory",
        # The failed batch's files are fixed in the checkpoint (a restart replays the same
        # files whatever --max-files-per-trigger says): only more memory gets past it.
        "rerun with more driver memory (SPARK_DRIVER_MEMORY=2g; now {driver_memory}) to get "
        "past it, and a lower {batch_flag} (now {batch_limit}) for the batches "
        "after it",
    ),
    Cause(
        ("No space left on device",),
        "ran out of disk space",
        "free space on the disks of the warehouse, the checkpoint and Spark's local "
        "directories (spark.local.dir), then rerun: the batch is replayed",
    ),
    Cause(
        ("Py4JNetworkError", "Answer from Java side is empty", "Error while receiving"),
        "lost its Spark driver (the JVM exited: killed, or out of memory)",
        "check the machine's memory (dmesg) and rerun; with more driver memory "
        "(SPARK_DRIVER_MEMORY=2g; now {driver_memory}) or a lower {batch_flag} "
        "(now {batch_limit}) if it was out of memory",
    ),
    Cause(
        ("ConcurrentAppendException", "ConcurrentWriteException", "MetadataChangedException"),
        "met another writer on its tables",
        "run one stream per warehouse (stream_lease on) and nothing else writing its tables, "
        "then rerun: the batch is replayed",
    ),
    Cause(
        ("Could not execute broadcast in",),
        "timed out building a broadcast join (spark.sql.broadcastTimeout)",
        "rerun, the batch is replayed; on a busy machine with a lower {batch_flag} (now "
        "{batch_limit}) for the batches after it",
    ),
    Cause(
        ("FileNotFoundException",),
        "could not find a file it had planned to read",
        "keep input files until the stream has read them and keep the checkpoint with its "
        "warehouse, then rerun",
    ),
)

# Out of memory while most events were ahead of the stream's clock: no window closes, the
# state grows every batch, and more memory only postpones the failure.
_OUT_OF_MEMORY = CAUSES[0]
CLOCK_SKEW_CHANGE = (
    "most events of the last batches were ahead of the stream's clock, so no window closes "
    "and its state grows every batch: {fix}, then rerun (the batch is replayed, nothing is "
    "lost)"
)

# A tally StreamError raised inside a micro-batch reaches the query's error as its traceback's
# last line: its message is already the one line.
_STREAM_ERROR = re.compile(r"^(?:[\w.]+\.)?StreamError: (.+)$", re.MULTILINE)
_CAUSED_BY = re.compile(r"^\s*Caused by: ([\w.$]+)(?::[ \t]*(.*))?$", re.MULTILINE)


def root_cause(text: str) -> str:
    """The innermost Java cause in `text` (its last `Caused by:` line) as `Class: message`
    (the class without its package), else the text's first non-empty line."""
    caused = _CAUSED_BY.findall(text)
    if caused:
        cls, message = caused[-1]
        name = cls.rsplit(".", 1)[-1]
        return f"{name}: {message.strip()}" if message.strip() else name
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return first


def failure_line(text: str, context: FailureContext) -> str:
    """One line for an error the stream cannot recover from: `text` is everything known of
    it (messages and stack traces of the whole chain)."""
    own = _STREAM_ERROR.findall(text)
    if own:
        return one_line(own[-1].strip())
    where = f"batch {context.batch_id}" if context.batch_id is not None else "the stream"
    details = f"details in {context.log_location}" if context.log_location else "details above"
    for cause in CAUSES:
        found = [marker for marker in cause.markers if marker in text]
        if found and context.clock_skew_fix and cause is _OUT_OF_MEMORY:
            change = CLOCK_SKEW_CHANGE.format(fix=context.clock_skew_fix)
            return one_line(f"stream: {where} {cause.what} ({found[0]}): {change}; {details}")
        if found:
            change = cause.change.format(
                driver_memory=context.driver_memory,
                batch_flag=context.batch_flag,
                batch_limit=context.batch_limit,
            )
            return one_line(f"stream: {where} {cause.what} ({found[0]}): {change}; {details}")
    cause_text = root_cause(text)
    if len(cause_text) > CAUSE_CHARS:
        cause_text = cause_text[: CAUSE_CHARS - 3] + "..."
    return one_line(f"stream: {where} failed: {cause_text}; {details}")


# -- the parts that ask Spark and write the log ------------------------------------------------


def error_text(exc: BaseException) -> str:
    """Everything an exception says: its traceback and chain (a Py4J error's text carries the
    Java stack with every `Caused by:`)."""
    return "".join(traceback.format_exception(exc))


def failed_batch(spark: SparkSession | None, checkpoint: str) -> int | None:
    """The micro-batch that was running: the newest batch Spark planned (`offsets/N` in the
    checkpoint) and did not commit (`commits/N`); None when it cannot be told (no JVM)."""
    if spark is None:
        return None
    try:
        path_class = jvm_class(spark, "org.apache.hadoop.fs.Path")
        conf = spark.sparkContext._jsc.hadoopConfiguration()

        def batch_ids(part: str) -> set[int]:
            path = path_class(f"{checkpoint.rstrip('/')}/{part}")
            fs = path.getFileSystem(conf)
            if not fs.exists(path):
                return set()
            names = [str(s.getPath().getName()) for s in fs.listStatus(path)]
            return {int(n) for n in names if n.isdigit()}

        planned = batch_ids("offsets") - batch_ids("commits")
    except Exception:  # a dead JVM, an unreadable checkpoint: the line goes without a batch
        return None
    return max(planned) if planned else None


def driver_memory(spark: SparkSession | None, environ: Mapping[str, str]) -> str:
    """The driver's memory as configured (Spark reads `spark.driver.memory`, then the
    SPARK_DRIVER_MEMORY environment variable; 1g by default)."""
    configured = None
    if spark is not None:
        try:
            configured = spark.sparkContext.getConf().get("spark.driver.memory")
        except Exception:
            configured = None
    return configured or environ.get("SPARK_DRIVER_MEMORY") or "1g (Spark's default)"


def clock_skew_fix(spark: SparkSession | None, settings: Settings, arrival_clock: bool) -> str:
    """What to change if most events of the stream's recent batches were clock-skewed
    (`streaming.health`), else ""; "" too when the warehouse cannot be read."""
    if spark is None:
        return ""
    try:
        rows = read_recent_progress(spark, settings.warehouse, settings.health_history)
    except Exception:  # a dead JVM, an unreadable table: the line goes without it
        return ""
    return health_clock_skew_fix(arrival_clock) if mostly_skewed(*skewed_counts(rows)) else ""


def report_failure(
    exc: BaseException,
    settings: Settings,
    environ: Mapping[str, str],
    arrival_clock: bool = False,
) -> str:
    """Write the error's details to the log and return its one line."""
    text = error_text(exc)
    spark = _live_session()
    kafka = settings.source_kind == "kafka"
    location = log_file()
    context = FailureContext(
        failed_batch(spark, settings.checkpoint_location),
        "--max-records-per-trigger" if kafka else "--max-files-per-trigger",
        settings.max_records_per_trigger if kafka else settings.max_files_per_trigger,
        driver_memory(spark, environ),
        location,
        clock_skew_fix(spark, settings, arrival_clock),
    )
    line = failure_line(text, context)
    if location:
        with open(location, "a", encoding="utf-8") as out:
            out.write(f"tally {line}\n{text}\n")
    else:
        log.error("%s", line, exc_info=exc)
    return line


def _live_session() -> SparkSession | None:
    """This process's Spark session, if its JVM still answers."""
    try:
        return SparkSession.getActiveSession()
    except Exception:
        return None
