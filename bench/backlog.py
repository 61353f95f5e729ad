"""Section 12: catch-up after an outage. A backlog of many days streamed several days a
micro-batch, at Spark's default driver memory, as a stream restarted after an outage meets it.

The input is issue 39's (part 1b): 500,000 events a day over 40 days, 200 keys, 4 source
partitions, 5 files of 100,000 lines a day whose modification times are just after the events
they hold (`tally generate`: a file's time is the arrival time of its slice's end), streamed by
one `tally stream --available-now --clock arrival --max-files-per-trigger 25` process: 8
micro-batches of five days (~2.5M lines) each. Quick mode: a few days of a few thousand events,
two days a batch.

Then the same files with their modification times moved back by the backlog's span plus four
weeks, streamed the same way (issue 45 part B): every event is ahead of the arrival clock, no
window can close, and the open windows and remembered ids pile up for the whole run. Met when it
completes at the same driver memory, every line counted, named once (the stream's clock-skew
line, in batch 0) and no window emitted.

Measured, per run: each micro-batch's seconds (the stream's own phase records,
`bench.phases`), the peak RSS of the driver JVM (the `java` process of the stream, sampled with
psutil at every poll, and charged to the batch in flight) and of the whole process tree, and
whether every line was counted: `stream_progress.input_lines` summed = the lines written, and
the rows of `events` = the valid lines (events and their duplicates). The normal run is met when
it completes at the default driver memory and every line is counted.

Expected duration, full mode on 2 cores: generating 20M events ~4 min; the normal run ~10 min,
the skewed one ~15 min on a quiet machine. Quick mode: ~2 min.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from bench import engines
from bench.common import (
    DAY,
    EngineFailed,
    StreamShape,
    load_average,
    log,
    percentile,
    stopwatch,
)
from tally import tables

KEYS = 200
PARTITIONS = 4
SEED = 41
DAY_MS = 86_400_000
# The skewed run's files are moved this much further back than the backlog's span, so that
# even the newest lies four weeks before the first event: no window can close in the whole run
# (a shift shorter than the span lets the late batches' clock pass the first days' events).
SKEW_BEYOND_SPAN_DAYS = 28


@dataclass(frozen=True)
class CatchUp:
    """The backlog: `days` of `events_per_day` in `files_per_day` files a day, streamed
    `days_per_batch` days a micro-batch."""

    days: int
    events_per_day: int
    files_per_day: int
    days_per_batch: int

    @property
    def events(self) -> int:
        return self.days * self.events_per_day

    @property
    def files(self) -> int:
        return self.days * self.files_per_day

    @property
    def files_per_trigger(self) -> int:
        return self.days_per_batch * self.files_per_day


class JvmSampler:
    """Called at every poll of the stream's process tree: the RSS of its driver JVM (the `java`
    descendant of the process whose command line names `marker`), with the wall time."""

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.samples: list[tuple[float, int]] = []  # (epoch s, JVM RSS bytes)
        self._jvm: Any = None

    def _find_jvm(self) -> Any:
        import psutil

        for proc in psutil.process_iter(["cmdline"]):
            if self.marker in " ".join(proc.info["cmdline"] or []):
                with_children = [proc, *proc.children(recursive=True)]
                return next((p for p in with_children if p.name() == "java"), None)
        return None

    def __call__(self, _elapsed: float, _tree_rss: int) -> None:
        import psutil

        try:
            if self._jvm is None:
                self._jvm = self._find_jvm()
            if self._jvm is not None:
                self.samples.append((time.time(), int(self._jvm.memory_info().rss)))
        except psutil.Error:
            self._jvm = None  # gone (the run's end), or not started yet

    def peak_between(self, start: float, end: float) -> int | None:
        inside = [rss for t, rss in self.samples if start <= t <= end]
        return max(inside) if inside else None


def generate_input(out: Path, catch_up: CatchUp) -> dict[str, Any]:
    """The backlog from `tally_tools.generate`: file times just after the events they hold."""
    from tally_tools.generate import generate

    with stopwatch() as t:
        manifest = generate(
            out=str(out),
            events=catch_up.events,
            partitions=PARTITIONS,
            seed=SEED,
            start=DAY,
            duration_ms=catch_up.days * DAY_MS,
            files=catch_up.files,
            keys=KEYS,
        )
    manifest["generate_s"] = t["s"]
    manifest["bytes"] = sum(p.stat().st_size for p in out.glob("arrival-*.jsonl"))
    return manifest


def _mb(n: int | None) -> float | None:
    return None if n is None else round(n / 1e6, 1)


def per_batch(
    trace_batches: list[dict[str, Any]], progress: list[dict[str, Any]], jvm: JvmSampler
) -> list[dict[str, Any]]:
    """Each micro-batch: its lines, seconds (its phases), open windows after it and the peak
    JVM RSS while it ran."""
    lines = {int(p["batch_id"]): p for p in progress}
    out = []
    for b in trace_batches:
        row = lines.get(b["batch"], {})
        out.append(
            {
                "batch": b["batch"],
                "input_lines": row.get("input_lines"),
                "seconds": b["seconds"],
                "open_windows": row.get("open_windows"),
                "peak_jvm_rss_mb": _mb(jvm.peak_between(b["t"] - b["seconds"], b["t"])),
            }
        )
    return out


def shift_file_times(data: Path, days: int) -> None:
    """Move every input file's modification time `days` back, order kept: a restore that reset
    the files' times weeks before the events they hold (issue 45 part B)."""
    shift_ns = days * DAY_MS * 1_000_000
    for path in data.glob("arrival-*.jsonl"):
        mtime = path.stat().st_mtime_ns - shift_ns
        os.utime(path, ns=(mtime, mtime))


def stream_backlog(
    spark: SparkSession,
    name: str,
    data: Path,
    run_dir: Path,
    catch_up: CatchUp,
    expected: tuple[int, int],
    env: engines.EngineEnv,
) -> dict[str, Any]:
    """One `tally stream` over the backlog, measured: wall time, each batch (lines, seconds,
    open windows, peak JVM RSS) and whether every line was counted (`expected`: the lines
    and valid lines written). A run that fails is its error's last line."""
    shape = StreamShape(60_000, 30_000, catch_up.files_per_trigger)
    jvm = JvmSampler(str(run_dir / "trace.jsonl"))
    try:
        run = engines.run_tally(name, str(data), run_dir, shape, env, sample=jvm)
    except EngineFailed as exc:
        said = [line for line in str(exc).splitlines() if line.strip()]
        return {"failed": said[-1] if said else str(exc), "all_lines_counted": False}
    errors = (run_dir / "logs" / f"{name}.err").read_text(errors="replace").splitlines()
    counted = engines.tally_accounting(spark, run["warehouse"], run["checkpoint"])
    event_rows = tables.read_table(spark, run["warehouse"], tables.EVENTS.name).count()
    progress = engines.progress_rows(spark, run["warehouse"])
    batches = per_batch(run["trace_batches"], progress, jvm)
    seconds = [b["seconds"] for b in batches]
    lines, valid = expected
    all_counted = counted["input_lines"] == lines and event_rows == valid == counted["valid_events"]
    peak_jvm = max((rss for _t, rss in jvm.samples), default=None)
    log(
        f"backlog {name}: {len(batches)} batches in {run['seconds']:.0f} s, peak JVM RSS "
        f"{_mb(peak_jvm)} MB, every line counted: {all_counted}"
    )
    return {
        "seconds": run["seconds"],
        "wall_split": run["wall_split"],
        "batches": batches,
        "batch_s": {"p50": percentile(seconds, 50), "max": max(seconds, default=None)},
        "peak_jvm_rss_mb": _mb(peak_jvm),
        "peak_tree_rss_mb": run["peak_rss_mb"],
        "jvm_samples": len(jvm.samples),
        "input_lines": counted["input_lines"],
        "valid_events": counted["valid_events"],
        "event_rows": event_rows,
        "all_lines_counted": all_counted,
        "clock_skewed_events": sum(int(p.get("clock_skewed_events") or 0) for p in progress),
        "windows_emitted": sum(int(p.get("windows_emitted") or 0) for p in progress),
        "clock_skew_lines": [e[e.index("clock skew:") :] for e in errors if "clock skew:" in e],
    }


def backlog_section(
    spark: SparkSession, work: Path, catch_up: CatchUp, env: engines.EngineEnv
) -> dict[str, Any]:
    data = work / "backlog_input"
    log(
        f"backlog: generating {catch_up.days} days of {catch_up.events_per_day:,} events in "
        f"{catch_up.files} files"
    )
    manifest = generate_input(data, catch_up)
    expected = (manifest["lines"], manifest["events"] + manifest["duplicates"])
    load = load_average()
    log(f"backlog: streaming {expected[0]:,} lines, {catch_up.files_per_trigger} files a batch")
    normal = stream_backlog(spark, "backlog", data, work / "backlog_run", catch_up, expected, env)
    # The same files timed weeks before their events, streamed the same way: no window can
    # close (issue 45 part B); the state piles up, and memory must hold out all the same.
    skew_days = catch_up.days + SKEW_BEYOND_SPAN_DAYS
    shift_file_times(data, skew_days)
    log(f"backlog: the same files {skew_days} days earlier (a clock behind the events)")
    skewed = stream_backlog(
        spark, "backlog_skewed", data, work / "backlog_skewed_run", catch_up, expected, env
    )
    for run_dir in ("backlog_run", "backlog_skewed_run"):
        shutil.rmtree(work / run_dir, ignore_errors=True)
    shutil.rmtree(data, ignore_errors=True)
    if "failed" in normal:
        raise EngineFailed(f"backlog: {normal['failed']}")
    skewed_batches = catch_up.days // catch_up.days_per_batch
    skewed["met"] = (
        skewed["all_lines_counted"]
        and len(skewed["batches"]) == skewed_batches
        and len(skewed["clock_skew_lines"]) == 1
        and skewed["clock_skew_lines"][0].startswith("clock skew: batch 0: ")
        and skewed["windows_emitted"] == 0
    )
    return {
        "days": catch_up.days,
        "events_per_day": catch_up.events_per_day,
        "files": catch_up.files,
        "files_per_trigger": catch_up.files_per_trigger,
        "days_per_batch": catch_up.days_per_batch,
        "keys": KEYS,
        "partitions": PARTITIONS,
        "lines": expected[0],
        "valid_lines": expected[1],
        "input_bytes": manifest["bytes"],
        "generate_s": manifest["generate_s"],
        "driver_memory": os.environ.get("SPARK_DRIVER_MEMORY", "1g (Spark's default)"),
        "load_average_before": load,
        **normal,
        "met": normal["all_lines_counted"] and len(normal["batches"]) >= 2,
        "skew_days": skew_days,
        "skewed": skewed,
    }
