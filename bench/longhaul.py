"""Section 13: the long haul. Housekeeping's cost on a stream at its live cadence, with
housekeeping off and on; then a month-long warehouse streamed at small micro-batches with the
stream's housekeeping on, the nightly of every closed date, `tally maintain`, a cleanup that
makes the old versions unreadable, and `tally reconcile --reproduce` of each date.

Every run is one `tally stream --available-now --clock arrival --max-files-per-trigger 1`
process over files from `tally_tools.generate`, each file's modification time just after the
events it holds: one micro-batch a file, and the stream's processing time (the arrival clock)
advances one file's span a batch. Housekeeping is scheduled on that clock.

The cost runs (`off`: `--maintenance false`; `inline`, the default: between micro-batches;
`thread`: a background thread) stream `live_minutes` of events in one file per default
trigger (5 s), so the compaction interval (1 h) passes every 720 batches, as live. The
input starts a quarter of the way before midnight, so the day before closes, and is packed,
inside the run, and the VACUUM interval is half the run, so every table is vacuumed once: live,
a date closes and a table is vacuumed once a day (17,280 batches), here once in a run of
hundreds of batches, so the cost measured is an upper bound. A replay of many days cannot
measure this cost: a day's packing every `files_per_day` batches is hundreds of times the live
rate, whatever the intervals.

The replay (`replay`): `days` of events in `files_per_day` files a day, default intervals on
the replayed clock: every day gets its compactions, its closed date packed and its VACUUM.
Its warehouse is the one the layout, log sizes and `--reproduce` are reported from.

Measured per run: micro-batch p50/p99 (`stream_progress.batch_duration_ms`), throughput (valid
events / the seconds from the first batch's start to the last batch's end, from the stream's
trace: time between batches, where inline housekeeping runs, is inside it), and for the cost
runs the ratios to `off` (target: housekeeping costs <= 10 % of throughput and of p99).
After the runs, per warehouse and stream table: live files (per `event_date` for `events`),
`_delta_log` and checkpoint bytes, commits by kind (appends, compactions, VACUUMs) and per day.
On the replay's warehouse: the nightly (`tally reconcile --date D`) of every closed date,
`tally maintain`, then VACUUM RETAIN 0 HOURS and log cleanup on back-dated logs of every
stream table, and `tally reconcile --date D --reproduce` of every date (target: MATCH for
all). The commands run in this process (`tally_app.cli.main`, on the bench's session), as a
user runs them.

Expected duration on 2 cores: full (cost runs of an hour, 720 batches of ~1 s each, three of
them; the replay, 30 days of 24 files, 720 batches) ~55 min, then the nightly and
`--reproduce` of 29 dates ~15 min; quick (cost runs of 4 minutes, 2 days of 8 files) a few
minutes on a quiet machine.
"""

from __future__ import annotations

import io
import os
import shutil
import time
from collections.abc import Sequence
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from bench import engines
from bench.common import (
    DAY,
    StreamShape,
    delta_commits,
    load_average,
    local_path,
    log,
    percentile,
    stopwatch,
)
from tally import maintenance, tables

PARTITIONS = 4
KEYS = 200
SEED = 43
DAY_MS = 86_400_000
WINDOW_MS, LATENESS_MS = 60_000, 30_000
# The runs, each one `tally stream` process: its flags. `off`, `thread` and `inline` are the
# cost runs, on the live input at the default intervals (`run_flags` adds the VACUUM interval);
# `replay` streams the month (default intervals on the replayed clock), the warehouse whose
# layout, log and `--reproduce` the section reports.
RUN_FLAGS: dict[str, tuple[str, ...]] = {
    "off": ("--maintenance", "false"),
    "thread": ("--maintenance", "true", "--maintenance-mode", "thread"),
    "inline": ("--maintenance", "true", "--maintenance-mode", "inline"),
    "replay": ("--maintenance", "true", "--maintenance-mode", "thread"),
}
COST_RUNS = ("off", "thread", "inline")  # the runs on the live input; `off` is the baseline
LIVE = ("thread", "inline")  # the housekept cost runs, each against `off`
HOUSEKEPT = "replay"  # the run whose warehouse gets the nightly, maintenance and --reproduce
COST_TARGET = 0.10  # housekeeping may cost this share of throughput and of the p99
CLOSED_FILES_TARGET = maintenance.CLOSED_MAX_FILES
# The first micro-batch compiles the stream's stages (seconds, not milliseconds): left out of
# the p50/p99 and the throughput of every run alike.
WARMUP_BATCHES = 1
CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"


@dataclass(frozen=True)
class LongHaul:
    """The replay: `days` of events in `files_per_day` files of ~`events_per_file` events. The
    cost runs: `live_minutes` of events in a file per default trigger of
    ~`live_events_per_file` events. One file a micro-batch; `modes`: the runs (RUN_FLAGS'
    keys; `off` first, the cost runs' baseline)."""

    days: int
    files_per_day: int
    events_per_file: int
    live_minutes: int
    live_events_per_file: int
    modes: tuple[str, ...]

    @property
    def files(self) -> int:
        return self.days * self.files_per_day

    @property
    def events(self) -> int:
        return self.files * self.events_per_file

    @property
    def trigger_ms(self) -> int:
        """Processing time between the replay's micro-batches: a day per file count."""
        return DAY_MS // self.files_per_day

    @property
    def live_trigger_ms(self) -> int:
        from tally.settings import setting_default

        return int(setting_default("trigger"))

    @property
    def live_files(self) -> int:
        return self.live_minutes * 60_000 // self.live_trigger_ms

    @property
    def live_start(self) -> datetime:
        """A quarter of the cost runs' span before midnight: the day before closes inside."""
        return DAY - timedelta(minutes=self.live_minutes / 4)

    @property
    def live_vacuum_interval_ms(self) -> int:
        """Half the run: every table vacuumed once (live: once a day)."""
        return self.live_minutes * 60_000 // 2


def run_flags(mode: str, lh: LongHaul) -> tuple[str, ...]:
    if mode not in LIVE:
        return RUN_FLAGS[mode]
    return (*RUN_FLAGS[mode], "--vacuum-interval", f"{lh.live_vacuum_interval_ms // 1000}s")


def stream_tables() -> list[tuple[tables.Table, str | None]]:
    from streaming.housekeeping import STREAM_MAINTAINED

    return list(STREAM_MAINTAINED)


# -- the input and the runs ------------------------------------------------------------------------


@dataclass(frozen=True)
class Input:
    """What `generate` writes: `files` files of `events` events over `duration_ms` from
    `start`."""

    start: datetime
    duration_ms: int
    files: int
    events: int


def replay_input(lh: LongHaul) -> Input:
    return Input(DAY, lh.days * DAY_MS, lh.files, lh.events)


def live_input(lh: LongHaul) -> Input:
    return Input(
        lh.live_start,
        lh.live_minutes * 60_000,
        lh.live_files,
        lh.live_files * lh.live_events_per_file,
    )


def generate_input(out: Path, shape: Input) -> dict[str, Any]:
    from tally_tools.generate import generate

    with stopwatch() as t:
        manifest = generate(
            out=str(out),
            events=shape.events,
            partitions=PARTITIONS,
            seed=SEED,
            start=shape.start,
            duration_ms=shape.duration_ms,
            files=shape.files,
            keys=KEYS,
        )
    manifest["generate_s"] = t["s"]
    return manifest


def stream_run(
    spark: SparkSession, data: Path, work: Path, mode: str, env: engines.EngineEnv, lh: LongHaul
) -> dict[str, Any]:
    """One `tally stream` process over the whole input with the mode's flags: its batches'
    durations and throughput over their span (the first batch, the stream's compile warm-up,
    left out of both), wall time and peak RSS."""
    run_dir = work / f"longhaul_{mode}"
    load = load_average()
    shape = StreamShape(WINDOW_MS, LATENESS_MS, 1)
    flags = run_flags(mode, lh)
    log(f"longhaul: streaming, housekeeping {mode} ({' '.join(flags)})")
    run = engines.run_tally(f"longhaul-{mode}", str(data), run_dir, shape, env, extra=flags)
    progress = engines.progress_rows(spark, run["warehouse"])
    steady = progress[WARMUP_BATCHES:]
    durations = [float(p["batch_duration_ms"] or 0) for p in steady]
    valid = sum(int(p["valid_events"] or 0) for p in steady)
    traced = run["trace_batches"][WARMUP_BATCHES:]
    span = traced[-1]["t"] - (traced[0]["t"] - traced[0]["seconds"]) if traced else None
    return {
        "mode": mode,
        "flags": list(flags),
        "load_average_before": load,
        "seconds": run["seconds"],
        "peak_rss_mb": run["peak_rss_mb"],
        "batches": len(progress),
        "input_lines": sum(int(p["input_lines"] or 0) for p in progress),
        "valid_events": sum(int(p["valid_events"] or 0) for p in progress),
        "first_batch_ms": progress[0]["batch_duration_ms"] if progress else None,
        "batch_ms": {
            "p50": percentile(durations, 50),
            "p99": percentile(durations, 99),
            "max": max(durations, default=None),
        },
        "span_s": span,
        "events_per_s": valid / span if span else None,
        "warehouse": run["warehouse"],
        "checkpoint": run["checkpoint"],
    }


def ratios(runs: dict[str, dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Each housekept cost run against `off` (same input): throughput ON/OFF and p99 ON/OFF."""
    base = runs["off"]
    out: dict[str, dict[str, float | None]] = {}
    for mode, run in runs.items():
        if mode not in LIVE:
            continue
        eps, p99 = run["events_per_s"], run["batch_ms"]["p99"]
        out[mode] = {
            "throughput": eps / base["events_per_s"] if eps and base["events_per_s"] else None,
            "p99": p99 / base["batch_ms"]["p99"] if p99 and base["batch_ms"]["p99"] else None,
            "p50": (
                run["batch_ms"]["p50"] / base["batch_ms"]["p50"]
                if run["batch_ms"]["p50"] and base["batch_ms"]["p50"]
                else None
            ),
        }
    return out


def cost_met(ratio: dict[str, float | None]) -> bool:
    thr, p99 = ratio.get("throughput"), ratio.get("p99")
    return thr is not None and p99 is not None and thr >= 1 - COST_TARGET and p99 <= 1 + COST_TARGET


# -- what a warehouse holds ------------------------------------------------------------------------


def commit_kind(operation: str) -> str:
    """A Delta commit's operation as what sizes the log: appends, compactions, VACUUMs, other."""
    if operation in ("WRITE", "STREAMING UPDATE", "CREATE TABLE AS SELECT", "MERGE"):
        return "append"
    if operation == "OPTIMIZE":
        return "optimize"
    if operation.startswith("VACUUM"):
        return "vacuum"
    return "other"


def log_listing(table_dir: Path) -> dict[str, Any]:
    """The table's `_delta_log`: its bytes, its checkpoints' bytes, its oldest commit left."""
    log_dir = table_dir / "_delta_log"
    total = checkpoint = 0
    versions = []
    for path in log_dir.rglob("*"):
        if not path.is_file():
            continue
        size = path.stat().st_size
        total += size
        if ".checkpoint" in path.name:
            checkpoint += size
        elif path.suffix == ".json" and path.stem.isdigit() and path.parent == log_dir:
            versions.append(int(path.stem))
    return {
        "log_bytes": total,
        "checkpoint_bytes": checkpoint,
        "first_commit": min(versions, default=None),
    }


def table_layout(spark: SparkSession, warehouse: str, days: float) -> dict[str, Any]:
    """Per stream table: live files and bytes, `_delta_log` bytes, commits by kind and per day
    of stream time; `events` also per `event_date`."""
    out: dict[str, Any] = {}
    for table, column in stream_tables():
        if not tables.exists(spark, warehouse, table.name):
            continue
        path = tables.table_path(warehouse, table.name)
        layout = maintenance.live_files(spark, path, column)
        commits = delta_commits(path)
        kinds: dict[str, int] = {}
        for c in commits:
            kinds[commit_kind(c.operation)] = kinds.get(commit_kind(c.operation), 0) + 1
        local = Path(local_path(path))
        listing = log_listing(local)
        json_bytes = sum(p.stat().st_size for p in (local / "_delta_log").glob("*.json"))
        row: dict[str, Any] = {
            "live_files": sum(s.files for s in layout.values()),
            "live_bytes": sum(s.bytes for s in layout.values()),
            **listing,
            "commits": len(commits),
            "commits_by_kind": kinds,
            "commits_per_day": len(commits) / days,
            "log_bytes_per_day": listing["log_bytes"] / days,
            "bytes_per_commit": json_bytes / len(commits) if commits else None,
        }
        if column is not None:
            row["files_by_date"] = {str(k): s.files for k, s in sorted(layout.items())}
        out[table.name] = row
    return out


def closed_dates(spark: SparkSession, warehouse: str, lh: LongHaul) -> list[date]:
    """The generated dates the stream's last watermark closed (the nightly's wait rule)."""
    from streaming.watermark import date_closed_at
    from tally.dates import epoch_ms, window_reach_ms
    from tally.settings import setting_default
    from tally_app.nightly import stream_position

    position = stream_position(spark, warehouse)
    first = DAY.date()
    dates = [first + timedelta(days=i) for i in range(lh.days)]
    if position is None or (position.watermark_ms is None and not position.drained):
        return []
    reach, allowed = window_reach_ms(WINDOW_MS), setting_default("allowed_lateness")
    return [
        d
        for d in dates
        if position.drained
        or epoch_ms(date_closed_at(d, "UTC", reach, allowed)) <= (position.watermark_ms or 0)
    ]


# -- the nightly, maintenance, cleanup and reproduce --------------------------------------------


def tally(argv: Sequence[str]) -> dict[str, Any]:
    """`tally ARGV` in this process (on the bench's session): exit code, output, seconds."""
    from tally_app.cli import main

    out, err = io.StringIO(), io.StringIO()
    with stopwatch() as t, redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse refused the arguments (its message is in err)
            code = exc.code if isinstance(exc.code, int) else 2
    return {"code": code, "out": out.getvalue(), "err": err.getvalue(), "seconds": t["s"]}


def reproduce_available() -> bool:
    """Whether this tally's `reconcile` has `--reproduce`."""
    from tally_app.cli import build_parser

    try:
        with redirect_stderr(io.StringIO()):
            build_parser().parse_args(["reconcile", "--date", "2026-11-20", "--reproduce"])
    except SystemExit:
        return False
    return True


def nightly_runs(warehouse: str, dates: list[date]) -> list[dict[str, Any]]:
    """`tally reconcile --date D` for each closed date (exit 0 balanced, 1 a named problem:
    the generated feed plants data-quality faults; either way the run is recorded)."""
    out = []
    for d in dates:
        run = tally(["reconcile", "--date", d.isoformat(), "--warehouse", warehouse])
        log(f"longhaul: reconcile {d}: exit {run['code']} in {run['seconds']:.1f} s")
        out.append({"date": d.isoformat(), "code": run["code"], "seconds": run["seconds"]})
    return out


def maintain(warehouse: str, checkpoint: str) -> dict[str, Any]:
    run = tally(
        [
            "maintain",
            "--warehouse",
            warehouse,
            "--checkpoint",
            checkpoint,
        ]
    )  # the stream's window is the default (60s): maintain reads it as a setting, not a flag
    lines = [line for line in run["out"].splitlines() if line.strip()]
    log(f"longhaul: tally maintain: exit {run['code']}, {len(lines)} lines, {run['seconds']:.0f} s")
    return {
        "code": run["code"],
        "seconds": run["seconds"],
        "actions": lines,
        "error": run["err"].strip().splitlines()[-1] if run["err"].strip() else None,
    }


def force_cleanup(spark: SparkSession, warehouse: str) -> dict[str, Any]:
    """Make every old version of the stream's tables unreadable: VACUUM keeping nothing (the
    files compaction replaced), then log cleanup as Delta does it at a checkpoint (an hour of
    log and of removed files kept, a checkpoint every second commit, the log's files three days
    old, two commits)."""
    three_days_ago = time.time() - 3 * 86_400
    first_commit: dict[str, Any] = {}
    for table, _column in stream_tables():
        if not tables.exists(spark, warehouse, table.name):
            continue
        path = tables.table_path(warehouse, table.name)
        quoted = path.replace("`", "``")
        spark.conf.set(CHECK, "false")
        try:
            spark.sql(f"VACUUM delta.`{quoted}` RETAIN 0 HOURS")
        finally:
            spark.conf.unset(CHECK)
        spark.sql(  # Delta requires log retention >= deleted-file retention
            f"ALTER TABLE delta.`{quoted}` SET TBLPROPERTIES ("
            "'delta.logRetentionDuration' = 'interval 1 hours', "
            "'delta.deletedFileRetentionDuration' = 'interval 1 hours', "
            "'delta.checkpointInterval' = '2')"
        )
        log_dir = Path(local_path(path), "_delta_log")
        for name in os.listdir(log_dir):
            os.utime(log_dir / name, (three_days_ago, three_days_ago))
        for n in (1, 2):
            spark.sql(f"ALTER TABLE delta.`{quoted}` SET TBLPROPERTIES ('tally.bench' = '{n}')")
        first_commit[table.name] = log_listing(Path(local_path(path)))["first_commit"]
    return first_commit


PINNED = ("events", "stream_aggregates", "late_events", "stream_progress")  # `<table>_version`


def pinned_versions_unreadable(spark: SparkSession, warehouse: str) -> dict[str, int]:
    """Of the stream tables' versions the recorded runs pinned: how many Delta can no longer
    read by version (its commit cleaned from the log, or its files vacuumed)."""
    runs = tables.read_table(spark, warehouse, tables.RECONCILIATION_RUNS.name)
    columns = [f"{name}_version" for name in PINNED if f"{name}_version" in runs.columns]
    pinned = {
        (column.removesuffix("_version"), int(row[column]))
        for row in runs.select(*columns).collect()
        for column in columns
        if row[column] is not None
    }
    unreadable = 0
    for name, version in sorted(pinned):
        try:
            tables.read_table(spark, warehouse, name, version).limit(1).count()
        except Exception:  # the commit or its files are gone: what the cleanup was for
            unreadable += 1
    return {"pinned": len(pinned), "unreadable": unreadable}


OUTCOMES = {0: "MATCH", 1: "differs", 2: "expired"}


def reproduce_runs(warehouse: str, dates: list[date]) -> list[dict[str, Any]]:
    """`tally reconcile --date D --reproduce` of each reconciled date: MATCH (exit 0), differs
    (1) or expired (2: its one line kept)."""
    out = []
    for d in dates:
        run = tally(["reconcile", "--date", d.isoformat(), "--warehouse", warehouse, "--reproduce"])
        outcome = OUTCOMES.get(run["code"], f"exit {run['code']}")
        detail = (run["err"] or run["out"]).strip().splitlines()
        log(f"longhaul: reproduce {d}: {outcome}")
        out.append(
            {
                "date": d.isoformat(),
                "code": run["code"],
                "outcome": outcome,
                "detail": detail[-1] if detail else "",
                "seconds": run["seconds"],
            }
        )
    return out


def audit(spark: SparkSession, run: dict[str, Any], lh: LongHaul) -> dict[str, Any]:
    """On the housekept warehouse: the nightly of every closed date, `tally maintain`, the
    forced cleanup, `--reproduce` of every date; the layout after maintenance and cleanup."""
    warehouse = run["warehouse"]
    dates = closed_dates(spark, warehouse, lh)
    nightly = nightly_runs(warehouse, dates)
    maintained = maintain(warehouse, run["checkpoint"])
    layout_maintained = table_layout(spark, warehouse, lh.days)
    first_commit = force_cleanup(spark, warehouse)
    layout_cleaned = table_layout(spark, warehouse, lh.days)
    pins = pinned_versions_unreadable(spark, warehouse)
    available = reproduce_available()
    reproduced = reproduce_runs(warehouse, dates) if available else []
    return {
        "closed_dates": [d.isoformat() for d in dates],
        "nightly": nightly,
        "maintain": maintained,
        "layout_after_maintain": layout_maintained,
        "layout_after_cleanup": layout_cleaned,
        "first_commit_after_cleanup": first_commit,
        "pinned_versions": pins,
        "reproduce_available": available,
        "reproduce": reproduced,
        "all_match": bool(reproduced) and all(r["outcome"] == "MATCH" for r in reproduced),
    }


# -- the section -----------------------------------------------------------------------------------


def maintenance_summary(spark: SparkSession, warehouse: str) -> dict[str, Any]:
    """What the stream's housekeeping did: actions by kind, failures, its seconds."""
    from pyspark.sql import functions as F

    if not tables.exists(spark, warehouse, tables.MAINTENANCE_LOG.name):
        return {"actions": {}, "failed": 0, "seconds": 0.0}
    rows = (
        tables.read_table(spark, warehouse, tables.MAINTENANCE_LOG.name)
        .groupBy("action")
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.count_if(F.col("outcome") != maintenance.DONE).alias("failed"),
            F.sum("seconds").alias("seconds"),
        )
        .collect()
    )
    return {
        "actions": {r["action"]: int(r["n"]) for r in rows},
        "failed": sum(int(r["failed"]) for r in rows),
        "seconds": float(sum(r["seconds"] or 0 for r in rows)),
    }


def verdicts(result: dict[str, Any]) -> dict[str, Any]:
    """The targets: files per closed date, housekeeping's cost, reproduce."""
    on = result["layout"][HOUSEKEPT].get("events", {}).get("files_by_date", {})
    closed = result["audit"]["closed_dates"]
    files = [on.get(d, 0) for d in closed]
    return {
        "max_files_per_closed_date": max(files, default=None),
        "closed_files_met": bool(files) and max(files) <= CLOSED_FILES_TARGET,
        "cost_met": {mode: cost_met(r) for mode, r in result["ratios"].items() if mode in LIVE},
        "reproduce_met": result["audit"]["all_match"],
    }


def longhaul_section(
    spark: SparkSession, work: Path, lh: LongHaul, env: engines.EngineEnv
) -> dict[str, Any]:
    inputs = {"live": live_input(lh), "replay": replay_input(lh)}
    manifests = {}
    for name, shape in inputs.items():
        log(f"longhaul: the {name} input: {shape.events:,} events in {shape.files} files")
        manifests[name] = generate_input(work / f"longhaul_{name}_input", shape)
    runs = {}
    for mode in lh.modes:
        name = "live" if mode in COST_RUNS else "replay"
        runs[mode] = stream_run(spark, work / f"longhaul_{name}_input", work, mode, env, lh)
        runs[mode]["input"] = name
    days = {"live": lh.live_minutes / (24 * 60), "replay": lh.days}
    layout = {m: table_layout(spark, r["warehouse"], days[r["input"]]) for m, r in runs.items()}
    housekept = [mode for mode in runs if mode != "off"]
    housework = {mode: maintenance_summary(spark, runs[mode]["warehouse"]) for mode in housekept}
    result: dict[str, Any] = {
        "days": lh.days,
        "files_per_day": lh.files_per_day,
        "events_per_file": lh.events_per_file,
        "trigger_ms": lh.trigger_ms,
        "live": {
            "minutes": lh.live_minutes,
            "files": lh.live_files,
            "events_per_file": lh.live_events_per_file,
            "trigger_ms": lh.live_trigger_ms,
            "start": lh.live_start.isoformat(),
            "vacuum_interval_ms": lh.live_vacuum_interval_ms,
            "lines": manifests["live"]["lines"],
            "runs": [mode for mode in COST_RUNS if mode in runs],
        },
        "partitions": PARTITIONS,
        "keys": KEYS,
        "lines": manifests["replay"]["lines"],
        "valid_lines": manifests["replay"]["events"] + manifests["replay"]["duplicates"],
        "generate_s": sum(m["generate_s"] for m in manifests.values()),
        "runs": runs,
        "ratios": ratios(runs),
        "layout": layout,
        "housekeeping": housework,
        "housekept": HOUSEKEPT,
        "cost_target": COST_TARGET,
        "closed_files_target": CLOSED_FILES_TARGET,
        "all_lines_counted": all(
            r["input_lines"] == manifests[r["input"]]["lines"] for r in runs.values()
        ),
    }
    result["audit"] = audit(spark, runs[HOUSEKEPT], lh)
    result.update(verdicts(result))
    for mode in runs:
        shutil.rmtree(work / f"longhaul_{mode}", ignore_errors=True)
    for name in inputs:
        shutil.rmtree(work / f"longhaul_{name}_input", ignore_errors=True)
    return result
