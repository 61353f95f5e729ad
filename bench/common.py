"""Helpers every section uses: the inputs' shapes, statistics, the machine, Delta logs read
from the outside, and engine processes timed and measured from the outside (wall clock, peak
RSS of the process tree). Stdlib only at import time (no Spark, no psutil), so `bench.run`
and with it `tally --help` load without Spark."""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

if TYPE_CHECKING:
    from tally.settings import Settings

DAY = datetime(2026, 11, 20, tzinfo=UTC)  # the first (business) day of every generated input


@dataclass(frozen=True)
class StreamShape:
    """How the stream is run: window, lateness, files per micro-batch, idle timeout."""

    window_ms: int
    lateness_ms: int
    max_files_per_trigger: int
    idle_timeout_ms: int = 600_000


@dataclass(frozen=True)
class Backlog:
    """A generated input: `events` events over `days` of event time in `files` files."""

    events: int
    files: int
    seed: int
    days: float = 1.0
    partitions: int = 8


@dataclass(frozen=True)
class SteadyRate:
    """The latency input: `rate` events/s, one file every `interval_s`, for `run_s` seconds
    from `lead_s` after the start; windows ending in the first `warmup_s` are not counted.
    The engines run with a processing-time trigger of `trigger_ms`."""

    trigger_ms: int
    rate: int
    run_s: float
    interval_s: float = 1.0
    warmup_s: float = 20.0
    lead_s: float = 8.0


def log(message: str) -> None:
    """Progress on stderr (the report is the output)."""
    stamp = datetime.now(UTC).strftime("%H:%M:%S")
    print(f"bench {stamp} {message}", file=sys.stderr, flush=True)


# -- statistics -----------------------------------------------------------------------------------


def summary(values: Sequence[float]) -> dict[str, Any]:
    """Median, min, max and spread ((max - min) / median, percent) of repeated measurements."""
    if not values:
        return {"n": 0, "median": None, "min": None, "max": None, "spread_pct": None, "values": []}
    med = statistics.median(values)
    lo, hi = min(values), max(values)
    return {
        "n": len(values),
        "median": med,
        "min": lo,
        "max": hi,
        "spread_pct": 100.0 * (hi - lo) / med if med else 0.0,
        "values": list(values),
    }


def median_run(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The run of median wall time (`seconds`; of an even count, the upper middle one): a real
    run whose phases can be shown, not an average of several."""
    return sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2]


def percentile(values: Sequence[float], pct: float) -> float | None:
    """Nearest-rank percentile (pct in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), -(-len(ordered) * pct // 100)))
    return float(ordered[int(rank) - 1])


def flatness(first: float | None, last: float | None, tolerance: float) -> dict[str, Any]:
    """last / first and whether it is within `tolerance` (a series that starts and ends at 0
    is flat; one that grows from 0 is not)."""
    if first is None or last is None:
        ratio = None
    elif first:
        ratio = last / first
    else:
        ratio = 1.0 if not last else None
    return {
        "first": first,
        "last": last,
        "ratio": ratio,
        "tolerance": tolerance,
        "flat": ratio is not None and ratio <= tolerance,
    }


@contextmanager
def stopwatch() -> Iterator[dict[str, float]]:
    """`with stopwatch() as t: ...` then `t["s"]` holds the wall seconds."""
    box: dict[str, float] = {}
    start = time.monotonic()
    try:
        yield box
    finally:
        box["s"] = time.monotonic() - start


# -- inputs and settings --------------------------------------------------------------------------


def arrival_files(input_dir: Path) -> list[Path]:
    """The generator's files in arrival order (modification time, then name)."""
    return sorted(input_dir.glob("arrival-*.jsonl"), key=lambda p: (p.stat().st_mtime_ns, p.name))


def session_settings(spark: Any, **values: Any) -> Settings:
    """tally Settings running on `spark`'s master with its shuffle partitions."""
    from tally.settings import Settings

    return Settings(
        shuffle_partitions=int(spark.conf.get("spark.sql.shuffle.partitions") or 4),
        spark_master=str(spark.sparkContext.master),
        **values,
    )


# -- the machine ----------------------------------------------------------------------------------


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def load_average() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def machine_info(spark: Any) -> dict[str, Any]:
    """CPU model, cores, RAM (from /proc), OS, versions, and the Spark settings in force."""
    cpu = _read("/proc/cpuinfo")
    models = [line.split(":", 1)[1].strip() for line in cpu.splitlines() if "model name" in line]
    mem_kb = 0
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            mem_kb = int(line.split()[1])
    conf = spark.sparkContext.getConf()
    java = spark.sparkContext._jvm.java.lang.System.getProperty("java.version")
    return {
        "cpu_model": models[0] if models else platform.processor() or "unknown",
        "cores": os.cpu_count(),
        "ram_gib": round(mem_kb / 1024 / 1024, 1),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "java": str(java),
        "pyspark": _version("pyspark"),
        "delta_spark": _version("delta-spark"),
        "duckdb": _version("duckdb"),
        "spark_master": spark.sparkContext.master,
        "shuffle_partitions": spark.conf.get("spark.sql.shuffle.partitions"),
        "driver_memory": conf.get("spark.driver.memory", "1g (default)"),
        "load_average_at_start": load_average(),
    }


# -- Delta logs, read from the outside ------------------------------------------------------------


def local_path(uri: str) -> str:
    """`file:///x/y` or `/x/y` -> `/x/y` (the benchmark's warehouses are local)."""
    if uri.startswith("file:"):
        return unquote(urlparse(uri).path)
    if "://" in uri:
        raise ValueError(f"bench needs a local warehouse, got {uri}")
    return uri


@dataclass
class Commit:
    version: int
    timestamp_ms: int
    operation: str
    metrics: dict[str, str] = field(default_factory=dict)
    added: list[str] = field(default_factory=list)  # base names of the files it added


def log_actions(commit_file: Path) -> Iterator[dict[str, Any]]:
    """The actions of one `_delta_log/NNN.json` commit file, one JSON object a line."""
    for line in commit_file.read_text().splitlines():
        if line.strip():
            yield json.loads(line)


def delta_commits(table_dir: str) -> list[Commit]:
    """Every commit of a local Delta table, from its `_delta_log/*.json` files."""
    log_dir = Path(local_path(table_dir)) / "_delta_log"
    commits = []
    for path in sorted(log_dir.glob("*.json")):
        if not path.stem.isdigit():
            continue
        commit = Commit(int(path.stem), 0, "")
        for action in log_actions(path):
            if "commitInfo" in action:
                info = action["commitInfo"]
                commit.timestamp_ms = int(info.get("inCommitTimestamp") or info["timestamp"])
                commit.operation = str(info.get("operation", ""))
                commit.metrics = dict(info.get("operationMetrics") or {})
            elif "add" in action:
                commit.added.append(unquote(action["add"]["path"]).rsplit("/", 1)[-1])
        commits.append(commit)
    return commits


def file_commit_times(table_dir: str) -> dict[str, int]:
    """Base name of every data file -> timestamp (ms) of the commit that added it."""
    out: dict[str, int] = {}
    for commit in delta_commits(table_dir):
        for name in commit.added:
            out.setdefault(name, commit.timestamp_ms)
    return out


# -- engine processes, measured from the outside --------------------------------------------------


class EngineFailed(RuntimeError):
    """An engine process exited with an error (the message ends with its stderr's tail)."""


@dataclass
class ProcessRun:
    """One engine process: wall seconds from start to exit (JVM start included), peak RSS of
    its process tree (the Python driver, the JVM, any Python workers), where its output went."""

    name: str
    seconds: float
    returncode: int
    peak_rss_bytes: int
    started_epoch: float  # time.time() just before the process started
    stdout: Path
    stderr: Path
    samples: int


def tree_rss(pid: int) -> int:
    """Resident set size of a process and its descendants (bytes; 0 once it is gone). A child
    with its parent's command line is a fork that has not exec'd yet (the JVM forks to run
    shell commands): it shares its parent's pages copy-on-write and is not counted again."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    cmdlines: dict[int, list[str]] = {}
    for proc in procs:
        with suppress(psutil.Error):
            cmdline = proc.cmdline()
            cmdlines[proc.pid] = cmdline
            if proc.pid != pid and cmdlines.get(proc.ppid()) == cmdline:
                continue
            total += int(proc.memory_info().rss)
    return total


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def run_process(
    name: str,
    argv: Sequence[str],
    log_dir: Path,
    poll_s: float = 0.25,
    sample: Callable[[float, int], None] | None = None,
    timeout_s: float = 3600.0,
    env: dict[str, str] | None = None,
) -> ProcessRun:
    """Run `argv` (stdout and stderr to `log_dir/<name>.out|.err`), polling every `poll_s`
    the RSS of its process tree; `sample(seconds since start, tree RSS)` is called at every
    poll. Raises EngineFailed on a non-zero exit or after `timeout_s`."""
    import subprocess

    log_dir.mkdir(parents=True, exist_ok=True)
    out, err = log_dir / f"{name}.out", log_dir / f"{name}.err"
    environment = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYTHONUNBUFFERED": "1",
        **(env or {}),
    }
    peak = samples = 0
    with out.open("wb") as stdout, err.open("wb") as stderr:
        started_epoch = time.time()
        start = time.monotonic()
        proc = subprocess.Popen(
            list(argv),
            stdout=stdout,
            stderr=stderr,
            cwd=str(Path(__file__).resolve().parent.parent),
            env=environment,
        )
        while True:
            try:
                proc.wait(timeout=poll_s)
                break
            except subprocess.TimeoutExpired:
                pass
            elapsed = time.monotonic() - start
            rss = tree_rss(proc.pid)
            peak = max(peak, rss)
            samples += 1
            if sample is not None:
                sample(elapsed, rss)
            if elapsed > timeout_s:
                proc.kill()
                proc.wait()
                raise EngineFailed(f"{name}: killed after {timeout_s:.0f} s\n{tail(err)}")
        seconds = time.monotonic() - start
    if proc.returncode != 0:
        raise EngineFailed(f"{name}: exit code {proc.returncode}\n{tail(err)}")
    return ProcessRun(name, seconds, proc.returncode, peak, started_epoch, out, err, samples)


def dir_bytes(path: Path) -> int | None:
    """Total size of the files under `path` (None if it vanished while being walked)."""
    total = 0
    try:
        for root, _dirs, files in os.walk(path):
            for f in files:
                total += os.stat(os.path.join(root, f)).st_size
    except FileNotFoundError:
        return None
    return total
