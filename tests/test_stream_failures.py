"""The one line a stream prints when it stops on an error it cannot recover from
(streaming.failures.failure_line): what failed, what to change, where the details are."""

from __future__ import annotations

import dataclasses

import pytest

from streaming.failures import FailureContext, failure_line, root_cause

CONTEXT = FailureContext(
    batch_id=3,
    batch_flag="--max-files-per-trigger",
    batch_limit=25,
    driver_memory="1g (Spark's default)",
    log_location="/tmp/tally-logs/tally.log",
)

# What Spark's errors look like at the bottom of a failed query's text (abridged).
SORTER_OOM = """pyspark.errors.exceptions.captured.StreamingQueryException: [STREAM_FAILED] Query
[id = 1f, runId = 2e] terminated with exception: ...
py4j.protocol.Py4JJavaError: An error occurred while calling o812.collectToPython.
: org.apache.spark.SparkException: Job aborted due to stage failure: Task 1 in stage 41.0 failed
Caused by: org.apache.spark.memory.SparkOutOfMemoryError: [UNABLE_TO_ACQUIRE_MEMORY] Unable to
acquire 65536 bytes of memory, got 0. SQLSTATE: 53200
\tat org.apache.spark.memory.MemoryConsumer.throwOom(MemoryConsumer.java:157)
\tat org.apache.spark.util.collection.unsafe.sort.UnsafeExternalSorter.insertRecord
== Physical Plan ==
Project [event_id#1, key#2]
"""
HEAP_OOM = """py4j.protocol.Py4JJavaError: An error occurred while calling o99.save.
: org.apache.spark.SparkException: Job aborted.
Caused by: java.lang.OutOfMemoryError: Java heap space
\tat java.base/java.util.Arrays.copyOf(Arrays.java:3537)
"""
DISK_FULL = """py4j.protocol.Py4JJavaError: An error occurred while calling o70.save.
Caused by: java.io.IOException: No space left on device
"""
# A broadcast hash relation too big to build (the remembered ids of a stream whose windows
# never closed, before they were joined by a sort-merge join past a size).
HASH_MAP = """py4j.protocol.Py4JJavaError: An error occurred while calling o812.persist.
Caused by: org.apache.spark.SparkException: Could not allocate memory to grow BytesToBytesMap.
\tat org.apache.spark.sql.execution.joins.UnsafeHashedRelation.read(HashedRelation.scala:440)
"""
JVM_GONE = """py4j.protocol.Py4JNetworkError: Answer from Java side is empty
"""
CONCURRENT = """py4j.protocol.Py4JJavaError: An error occurred while calling o5.save.
: io.delta.exceptions.ConcurrentAppendException: [DELTA_CONCURRENT_APPEND] Files were added
"""
MISSING_FILE = """Caused by: java.io.FileNotFoundException: File file:/in/arrival-000007.jsonl does
not exist
"""
BROADCAST = """py4j.protocol.Py4JJavaError: An error occurred while calling o9.collectToPython.
: org.apache.spark.SparkException: Could not execute broadcast in 300 secs. You can increase the
Caused by: java.util.concurrent.TimeoutException
"""
OTHER = """Traceback (most recent call last):
py4j.protocol.Py4JJavaError: An error occurred while calling o1.save.
: org.apache.spark.SparkException: Job aborted.
Caused by: org.apache.spark.SparkException: outer
Caused by: java.lang.IllegalStateException: state file truncated at 4096
\tat tally.Something
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            SORTER_OOM,
            "stream: batch 3 ran out of memory (UNABLE_TO_ACQUIRE_MEMORY): rerun with more "
            "driver memory (SPARK_DRIVER_MEMORY=2g; now 1g (Spark's default)) to get past it, "
            "and a lower --max-files-per-trigger (now 25) for the batches after it; details "
            "in /tmp/tally-logs/tally.log",
        ),
        (
            HEAP_OOM,
            "stream: batch 3 ran out of memory (Java heap space): rerun with more driver memory "
            "(SPARK_DRIVER_MEMORY=2g; now 1g (Spark's default)) to get past it, and a lower "
            "--max-files-per-trigger (now 25) for the batches after it; details in "
            "/tmp/tally-logs/tally.log",
        ),
        (
            HASH_MAP,
            "stream: batch 3 ran out of memory (Could not allocate memory): rerun with more "
            "driver memory (SPARK_DRIVER_MEMORY=2g; now 1g (Spark's default)) to get past it, "
            "and a lower --max-files-per-trigger (now 25) for the batches after it; details "
            "in /tmp/tally-logs/tally.log",
        ),
        (
            DISK_FULL,
            "stream: batch 3 ran out of disk space (No space left on device): free space on "
            "the disks of the warehouse, the checkpoint and Spark's local directories "
            "(spark.local.dir), then rerun: the batch is replayed; details in "
            "/tmp/tally-logs/tally.log",
        ),
        (
            JVM_GONE,
            "stream: batch 3 lost its Spark driver (the JVM exited: killed, or out of memory) "
            "(Py4JNetworkError): check the machine's memory (dmesg) and rerun; with more "
            "driver memory (SPARK_DRIVER_MEMORY=2g; now 1g (Spark's default)) or a lower "
            "--max-files-per-trigger (now 25) if it was out of memory; details in "
            "/tmp/tally-logs/tally.log",
        ),
        (
            CONCURRENT,
            "stream: batch 3 met another writer on its tables (ConcurrentAppendException): "
            "run one stream per warehouse (stream_lease on) and nothing else writing its "
            "tables, then rerun: the batch is replayed; details in /tmp/tally-logs/tally.log",
        ),
        (
            MISSING_FILE,
            "stream: batch 3 could not find a file it had planned to read "
            "(FileNotFoundException): keep input files until the stream has read them and "
            "keep the checkpoint with its warehouse, then rerun; details in "
            "/tmp/tally-logs/tally.log",
        ),
        (
            BROADCAST,
            "stream: batch 3 timed out building a broadcast join (spark.sql.broadcastTimeout) "
            "(Could not execute broadcast in): rerun, the batch is replayed; on a busy machine "
            "with a lower --max-files-per-trigger (now 25) for the batches after it; details in "
            "/tmp/tally-logs/tally.log",
        ),
        (
            OTHER,
            "stream: batch 3 failed: IllegalStateException: state file truncated at 4096; "
            "details in /tmp/tally-logs/tally.log",
        ),
    ],
    ids=[
        "sorter-oom",
        "heap-oom",
        "hash-map",
        "disk-full",
        "jvm-gone",
        "concurrent",
        "missing",
        "broadcast",
        "other",
    ],
)
def test_failure_line_names_what_failed_and_what_to_change(text: str, expected: str) -> None:
    line = failure_line(text, CONTEXT)
    assert line == expected
    assert "\n" not in line


@pytest.mark.parametrize(
    ("text", "names_the_clock"),
    [
        (SORTER_OOM, True),  # memory: more of it only postpones a state that keeps growing
        (HASH_MAP, True),
        (DISK_FULL, False),  # any other cause keeps its own change
        (CONCURRENT, False),
    ],
)
def test_out_of_memory_behind_a_skewed_clock_names_the_clock(
    text: str, names_the_clock: bool
) -> None:
    fix = "the arrival clock is behind the events: stream with --clock wall"
    line = failure_line(text, dataclasses.replace(CONTEXT, clock_skew_fix=fix))
    assert (fix in line) is names_the_clock, line
    if names_the_clock:
        assert "SPARK_DRIVER_MEMORY" not in line
        assert line.startswith("stream: batch 3 ran out of memory (")
        assert "no window closes" in line and "nothing is lost" in line
        assert line.endswith("; details in /tmp/tally-logs/tally.log")


def test_a_stream_error_raised_in_a_batch_is_its_own_line() -> None:
    text = (
        "StreamingQueryException: [FOREACH_BATCH_USER_FUNCTION_ERROR] ...\n"
        '  File "/work/streaming/job.py", line 458, in _previous_batch\n'
        "streaming.params.StreamError: stream: checkpoint was drained at batch 4; new input "
        "needs a new checkpoint and warehouse\n"
        "\tat org.apache.spark.sql.execution.streaming.MicroBatchExecution.runBatch\n"
    )
    assert failure_line(text, CONTEXT) == (
        "stream: checkpoint was drained at batch 4; new input needs a new checkpoint and warehouse"
    )


def test_failure_line_without_batch_or_log_file_kafka() -> None:
    context = FailureContext(None, "--max-records-per-trigger", 200_000, "2g", "")
    line = failure_line(SORTER_OOM, context)
    assert line.startswith("stream: the stream ran out of memory (UNABLE_TO_ACQUIRE_MEMORY)")
    assert "(SPARK_DRIVER_MEMORY=2g; now 2g)" in line
    assert "a lower --max-records-per-trigger (now 200000)" in line
    assert line.endswith("; details above")


def test_fallback_keeps_a_long_cause_short_and_on_one_line() -> None:
    text = "Caused by: java.lang.RuntimeException: " + "plan " * 200 + "\tend\n"
    line = failure_line(text, CONTEXT)
    assert line.startswith("stream: batch 3 failed: RuntimeException: plan plan")
    assert "..." in line and len(line) < 300
    assert line.isprintable()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Caused by: a.b.C: one\nCaused by: d.E: two\n", "E: two"),
        ("Caused by: a.b.NoMessage\n", "NoMessage"),
        ("\n  first line\nsecond\n", "first line"),
        ("", ""),
    ],
)
def test_root_cause(text: str, expected: str) -> None:
    assert root_cause(text) == expected


def test_a_failed_query_is_one_line_and_exit_1_with_the_details_in_the_log(
    spark, tmp_path, tally_cli, capsys, monkeypatch
):
    """End to end through `tally stream`: an error raised inside a micro-batch (the state files
    of the batch before it deleted from the checkpoint) stops the query; the command prints its
    one line, exits 1 and appends the whole error to the log."""
    import shutil
    import tempfile
    from datetime import UTC, datetime

    from tally_tools.generate import generate

    first, later = tmp_path / "in", tmp_path / "later"
    for out, seed, day in ((first, 1, 20), (later, 2, 21)):
        start = datetime(2026, 11, day, tzinfo=UTC)
        generate(
            out=str(out),
            events=200,
            partitions=2,
            seed=seed,
            start=start,
            duration_ms=60_000,
            files=1,
        )
    warehouse = tmp_path / "wh"
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the log: <tmp>/tally-logs
    argv = [
        "stream",
        "--input",
        str(first),
        "--warehouse",
        str(warehouse),
        "--window",
        "60s",
        "--lateness",
        "30s",
        "--available-now",
        "--clock",
        "arrival",
    ]
    assert tally_cli(argv) == 0
    shutil.rmtree(warehouse / "_checkpoints" / "stream" / "tally" / "state" / "0")
    shutil.copy(later / "arrival-000000.jsonl", first / "arrival-000001.jsonl")
    capsys.readouterr()

    assert tally_cli(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("tally: stream: stream state of batch 0 missing at "), err
    log = (tmp_path / "tally-logs" / "tally.log").read_text(errors="replace")
    assert "tally stream: stream state of batch 0 missing" in log and "Traceback" in log
