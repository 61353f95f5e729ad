"""Section 8 (kafka): throughput from a pre-filled Kafka topic.

The throughput section's backlog (`tally generate`, full mode 2M events over 8 source
partitions) is published with `tally produce` into a topic of 8 partitions on a broker that
`scripts/kafka.sh` starts for the section (data in the work directory, stopped by its pid
whatever happens). Then, each as its own OS process timed from start to exit (JVM start
included), with the same number of records a micro-batch as the throughput run's lines a
micro-batch:

(a) tally: `tally stream --source kafka --available-now --clock arrival` (the real command
    line): everything tally does for files, the Kafka partition as the watermark partition;
(b) plain Spark: Spark's Kafka source -> `from_json` -> `withWatermark` + `window` -> Delta
    (append), available-now (`bench.plain_job --mode kafka`);
(c) Flink SQL, aggregation only, and (d) Flink SQL durable (bronze + aggregation in one job,
    checkpoints on) (`bench.flink_peer`, `bench.flink_job`): Flink's Kafka source bounded at
    the offsets latest at its start, the `json` format, watermark and tumbling window as
    above, parallelism 2, files out. Run when Flink is installed (`make flink`; `make bench`
    installs it), else the section says it was not measured. Beside each Flink time: the
    records it dropped (records read minus the events in its windows), beside tally's late
    side output; an untimed third Flink job (batch mode) counts the records Flink reads as
    valid events, which splits that number into rows dropped as late and records not read.

No target is set for this section; the ratios (tally / plain, tally / Flink, Flink / plain)
are reported beside the file-source one.

Expected duration, full mode on 2 cores: generating ~15 s, publishing ~30-60 s, each tally run
~100 s, each plain run ~30-40 s, each Flink run ~30-60 s: ~6-7 min with one repetition.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from bench import engines, flink_peer
from bench.common import Backlog, StreamShape, log, stopwatch
from bench.speed import generate_backlog
from tally_tools.ports import free_port_pair

PROJECT_ROOT = Path(__file__).resolve().parent.parent
TOPIC = "bench-events"
PARTITIONS = 8


@contextmanager
def broker(home: Path) -> Iterator[str]:
    """scripts/kafka.sh on a free port with its data in `home`; yields the bootstrap."""
    script = str(PROJECT_ROOT / "scripts" / "kafka.sh")
    port = free_port_pair()
    env = {**os.environ, "TALLY_KAFKA_HOME": str(home), "TALLY_KAFKA_PORT": str(port)}

    def run(command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [script, command], env=env, capture_output=True, text=True, timeout=120
        )

    started = run("start")
    try:
        if started.returncode != 0:
            raise RuntimeError(f"kafka.sh start: {started.stderr.strip() or started.stdout}")
        yield f"127.0.0.1:{port}"
    finally:
        run("stop")


def records_per_trigger(lines: int, files: int, files_per_trigger: int) -> int:
    """The throughput run's lines a micro-batch, as records a micro-batch."""
    batches = -(-files // files_per_trigger)
    return -(-lines // batches)


def kafka_section(
    spark: SparkSession, work: Path, backlog: Backlog, shape: StreamShape, env: engines.EngineEnv
) -> dict[str, Any]:
    from tally_tools.produce import input_files, publish

    input_dir = work / "kafka_input"
    log(f"kafka: generating {backlog.events:,} events in {backlog.files} files")
    manifest = generate_backlog(input_dir, backlog)
    lines = int(manifest["lines"])
    per = records_per_trigger(lines, backlog.files, shape.max_files_per_trigger)
    with broker(work / "kafka_broker") as bootstrap:
        with stopwatch() as t:
            published = publish(bootstrap, TOPIC, input_files(input_dir), partitions=PARTITIONS)
        log(f"kafka: published {published:,} records in {t['s']:.0f} s")
        kafka = ["--kafka-bootstrap", bootstrap]
        done = {
            "tally": engines.run_tally(
                "tally_kafka",
                "unused",
                work / "kafka_tally",
                shape,
                env,
                extra=[
                    *kafka,
                    "--source",
                    "kafka",
                    "--kafka-topic",
                    TOPIC,
                    "--max-records-per-trigger",
                    str(per),
                ],
            ),
            "plain": engines.run_plain(
                "plain_kafka",
                "kafka",
                TOPIC,
                work / "kafka_plain",
                shape,
                env,
                extra=[*kafka, "--records-per-trigger", str(per)],
            ),
        }
        flink = flink_runs(spark, work, bootstrap, shape, env, published)
        runs: dict[str, dict[str, Any]] = {}
        for name, run in done.items():
            seconds = run["seconds"]
            runs[name] = {
                "seconds": seconds,
                "peak_rss_mb": run["peak_rss_mb"],
                "events_per_s": published / seconds,
            }
            log(f"kafka: {name} {seconds:.0f} s, {published / seconds:,.0f} records/s")
        tally = engines.tally_accounting(
            spark, str(work / "kafka_tally" / "warehouse"), str(work / "kafka_tally" / "checkpoint")
        )
        plain = engines.plain_outputs(spark, "agg", str(work / "kafka_plain" / "out"))
    shutil.rmtree(input_dir, ignore_errors=True)
    for name in runs:
        shutil.rmtree(work / f"kafka_{name}", ignore_errors=True)
    return {
        "events": backlog.events,
        "lines": lines,
        "records": published,
        "partitions": PARTITIONS,
        "records_per_trigger": per,
        "publish_s": t["s"],
        "window_ms": shape.window_ms,
        "lateness_ms": shape.lateness_ms,
        "runs": runs,
        "tally": tally,
        "plain": plain,
        "ratio": runs["tally"]["events_per_s"] / runs["plain"]["events_per_s"],
        "all_records_accounted": tally["input_lines"] == published,
        "malformed_lines": int(manifest["malformed_lines"]),
        "plain_dropped": {
            **flink_peer.dropped(published, plain["output_events"]),
            "dropped_by_watermark": done["plain"]["queries"]["agg"]["dropped_by_watermark"],
        },
        "flink": flink_ratios(flink, runs) if flink["runs"] else flink,
    }


def flink_runs(
    spark: SparkSession,
    work: Path,
    bootstrap: str,
    shape: StreamShape,
    env: engines.EngineEnv,
    records: int,
) -> dict[str, Any]:
    """Flink's two jobs over the topic, when Flink is installed: each run's wall time, peak
    RSS, what it wrote and the records it dropped; else why they did not run."""
    if flink_peer.installation() is None:
        log(f"kafka: Flink not measured: not installed in {flink_peer.flink_home()} (make flink)")
        return {"runs": {}, "not_measured": "Flink is not installed (`make flink`)"}
    runs: dict[str, dict[str, Any]] = {}
    for mode in flink_peer.MODES:
        run_dir = work / f"kafka_flink_{mode}"
        run = flink_peer.run_flink(
            f"flink_{mode}", mode, bootstrap, TOPIC, run_dir, shape, env.timeout_s
        )
        run.update(flink_peer.flink_outputs(spark, mode, run.pop("out")))
        run["events_per_s"] = records / run["seconds"]
        log(f"kafka: flink {mode} {run['seconds']:.0f} s, {run['events_per_s']:,.0f} records/s")
        runs[mode] = run
        shutil.rmtree(run_dir, ignore_errors=True)
    # untimed: the events Flink reads as valid, to tell late rows from records it cannot read
    count_dir = work / "kafka_flink_count"
    valid = flink_peer.run_flink(
        "flink_count", "count", bootstrap, TOPIC, count_dir, shape, env.timeout_s
    )
    shutil.rmtree(count_dir, ignore_errors=True)
    for mode, run in runs.items():
        run.update(flink_peer.dropped(records, run["output_events"], valid["valid_rows"]))
        log(
            f"kafka: flink {mode} dropped {run['dropped_rows']:,} records: "
            f"{run['late_rows']:,} late, {run['unread_rows']:,} not read as events"
        )
    return {
        "valid_rows": valid["valid_rows"],
        "runs": runs,
        "version": flink_peer.FLINK_VERSION,
        "parallelism": flink_peer.PARALLELISM,
        "checkpoint_ms": flink_peer.CHECKPOINT_MS,
    }


def flink_ratios(flink: dict[str, Any], runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """tally / Flink (each job) and Flink aggregation-only / plain Spark, in records/s."""
    eps = {name: run["events_per_s"] for name, run in flink["runs"].items()}
    return {
        **flink,
        "ratio_tally_flink": {mode: runs["tally"]["events_per_s"] / v for mode, v in eps.items()},
        "ratio_flink_plain": {mode: v / runs["plain"]["events_per_s"] for mode, v in eps.items()},
    }
