"""Section 11: adaptive lateness against fixed bounds on a stream whose delays change.

One input, three engines (tally each time, only the lateness setting differs): a fixed bound
tuned for the calm phases, a fixed bound tuned for the burst, and `lateness = "auto"` at the
completeness target (99.9 %). The input (written here, deterministic from a seed) has three
phases of event time: calm (every partition's delays exponential, mean 250 ms: most within
1 s), a burst (a slice of the partitions, 1 of 4, delayed 20-40 s, uniformly), calm again; then
a calm tail that only lets every engine's watermark pass the measured windows.

Phase lengths (full mode): what a real incident looks like at a 10 s trigger. The burst is
a delivery degradation of one source in four lasting 2 minutes (12 micro-batches): a consumer,
network or upstream slow-down of minutes, not one stalled batch. The calm before it (1 minute)
lets every engine settle (auto has its 1,000 events of history per partition after ~10 s);
the calm after it (3 minutes) is long enough for the burst's stragglers (40 s) and auto's
1-minute horizon to pass, so it shows the bound tightening and what that saves. The lengths
are not chosen for the controller: with the delays measured behind the stream's front, a
burst longer than its delays costs auto nothing while it adapts (the partition's stale mark
holds the watermark until its first delayed events arrive, and those widen the bound), so
the burst phase's completeness does not depend on its length beyond that; a burst shorter
than its delays (quick mode's 15 s) loses events whatever the controller does, as the
partition's fresh events overtake stragglers nothing has announced yet. (The 10 s trigger
rather than 5 s: half the micro-batches, so the section runs in ~45 min on this loaded
machine; the simulated arrival clock makes latency a property of the watermark, and auto's
horizon is in event time, not batches.)

Arrival is simulated: the events land in files of `file_s` seconds of arrival time, each
file's mtime the end of its slice, one file a micro-batch, and the stream runs on the arrival
clock (`--clock arrival`: processing time = the newest file's mtime). So emit latency (a
window's first emission, `stream_aggregates.emit_time`, minus its end) is measured in event /
processing time and is a property of the watermark alone, not of the machine's speed.

Per phase (by event time; a window by its start): completeness = events not judged late ÷
events; emit latency mean and p99 over the windows. And the bound auto had in force per
partition after each batch (`stream_progress.partition_lateness_ms`), drawn over time.
Acceptance (issue 24): auto reaches the target in every phase, with a lower mean emit latency
than the burst-tuned bound over all measured windows (per phase reported too; see `verdict`).

Expected duration: full ~10-15 min on an idle machine, ~45 min on a loaded one (3 runs of 42
micro-batches of ~4,000 lines), quick ~3-5 min (3 runs of 11 micro-batches of ~4,000 lines).
"""

from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bench.common import log, percentile, session_settings
from tally import tables
from tally.dates import iso_ms
from tally.vocabulary import DUPLICATE, LATE

START_MS = 1_795_132_800_000  # 2026-11-20T00:00:00Z: event time 0 of the input
PARTITIONS = 4
BURST_PARTITIONS = (3,)  # the slice delayed in the burst
CALM_MEAN_DELAY_MS = 250.0
BURST_DELAY_MS = (20_000, 40_000)
KEYS = 20
PHASES = ("calm", "burst", "calm again")


@dataclass(frozen=True)
class LatenessBench:
    """The input's shape and the three engines' settings."""

    rate: int  # events per second of event time, all partitions
    phase_s: tuple[int, int, int]  # calm, burst, calm again (seconds of event time)
    file_s: int  # seconds of arrival time per file (one file a micro-batch)
    window_ms: int = 5_000
    calm_bound_ms: int = 2_000  # tuned for calm: 99.9 % of exp(250 ms) delays is 1.73 s
    burst_bound_ms: int = 40_000  # tuned for the burst: its largest delay
    # calm event time after the last phase, not measured: lets every watermark pass the last
    # measured window before the input ends (the burst bound or auto's bound for 40 s delays,
    # 40.96 s, plus a window plus a file)
    tail_s: int = 60
    target_pct: float = 99.9
    lateness_min_ms: int = 1_000
    lateness_max_ms: int = 60_000
    seed: int = 41

    @property
    def phase_bounds_ms(self) -> list[tuple[int, int]]:
        """Each phase's [start, end) in event time, as epoch ms."""
        out, start = [], START_MS
        for seconds in self.phase_s:
            out.append((start, start + seconds * 1000))
            start += seconds * 1000
        return out

    @property
    def engines(self) -> dict[str, dict[str, Any]]:
        """Engine name -> the Settings values that differ (lateness None: auto)."""
        return {
            "fixed_calm": {"lateness": self.calm_bound_ms},
            "fixed_burst": {"lateness": self.burst_bound_ms},
            "auto": {
                "lateness": None,
                "lateness_min": self.lateness_min_ms,
                "lateness_max": self.lateness_max_ms,
                "completeness_target": self.target_pct,
            },
        }


def _delay_ms(rng: random.Random, b: LatenessBench, partition: int, event_ms: int) -> int:
    burst = b.phase_bounds_ms[1]
    if partition in BURST_PARTITIONS and burst[0] <= event_ms < burst[1]:
        return rng.randint(*BURST_DELAY_MS)
    return int(rng.expovariate(1.0 / CALM_MEAN_DELAY_MS))


def write_input(input_dir: Path, b: LatenessBench) -> dict[str, Any]:
    """The input files (arrival order, mtimes at slice ends); returns counts."""
    rng = random.Random(b.seed)
    span_ms = (sum(b.phase_s) + b.tail_s) * 1000
    events = span_ms * b.rate // 1000
    arrivals: list[tuple[int, int, str]] = []  # (arrival ms, sequence, line)
    for i in range(events):
        event_ms = START_MS + i * 1000 // b.rate
        partition = i % PARTITIONS
        arrival = event_ms + _delay_ms(rng, b, partition, event_ms)
        line = json.dumps(
            {
                "event_id": f"l-{i:08d}",
                "key": f"k{rng.randrange(KEYS):02d}",
                "amount": rng.randint(100, 10_000),
                "event_time": iso_ms(event_ms),
                "partition": partition,
            },
            separators=(",", ":"),
        )
        arrivals.append((arrival, i, line))
    arrivals.sort()
    input_dir.mkdir(parents=True, exist_ok=True)
    file_ms = b.file_s * 1000
    files: dict[int, list[str]] = {}
    for arrival, _, line in arrivals:
        files.setdefault((arrival - START_MS) // file_ms, []).append(line)
    for n, slot in enumerate(sorted(files)):
        path = input_dir / f"arrival-{n:06d}.jsonl"
        path.write_text("\n".join(files[slot]) + "\n", encoding="utf-8")
        end = (START_MS + (slot + 1) * file_ms) / 1000
        os.utime(path, (end, end))
    return {"events": events, "files": len(files)}


def _run(
    spark: SparkSession, run_dir: Path, input_dir: Path, b: LatenessBench, values: dict[str, Any]
) -> None:
    from streaming.run import run_stream

    settings = session_settings(
        spark,
        window=b.window_ms,
        idle_timeout=600_000,
        warehouse=str(run_dir / "warehouse"),
        input=str(input_dir),
        max_files_per_trigger=1,
        **values,
    )
    run_stream(settings, available_now=True, clock="arrival", spark=spark)


def _completeness(spark: SparkSession, warehouse: str, b: LatenessBench) -> list[dict[str, Any]]:
    """Per phase: events (duplicates aside: there are none) and those judged late."""
    events = tables.read_table(spark, warehouse, tables.EVENTS.name).where(
        F.col("arrival_status") != DUPLICATE
    )
    t = F.unix_millis("event_time")
    rows = events.agg(
        *[
            agg
            for i, (lo, hi) in enumerate(b.phase_bounds_ms)
            for agg in (
                F.count_if(t.between(lo, hi - 1)).alias(f"n{i}"),
                F.count_if(t.between(lo, hi - 1) & (F.col("arrival_status") == LATE)).alias(
                    f"l{i}"
                ),
            )
        ]
    ).first()
    assert rows is not None
    out = []
    for i, name in enumerate(PHASES):
        n, late = int(rows[f"n{i}"]), int(rows[f"l{i}"])
        pct = 100.0 * (n - late) / n if n else None
        out.append({"phase": name, "events": n, "late": late, "completeness_pct": pct})
    return out


def _emit_latency(spark: SparkSession, warehouse: str, b: LatenessBench) -> list[dict[str, Any]]:
    """Per phase: over the windows starting in it, the first emission (any key) minus the
    window's end; windows first emitted by the drain (none here: no drain) or never, missing."""
    windows = (
        tables.read_table(spark, warehouse, tables.STREAM_AGGREGATES.name)
        .groupBy(
            F.unix_millis("window_start").alias("start"), F.unix_millis("window_end").alias("end")
        )
        .agg(F.min(F.unix_millis("emit_time")).alias("emit"))
        .collect()  # one row per window: ~(span / window) rows
    )
    out = []
    for name, (lo, hi) in zip(PHASES, b.phase_bounds_ms, strict=True):
        expected = len(range(lo, hi, b.window_ms))
        delays = [int(w["emit"]) - int(w["end"]) for w in windows if lo <= w["start"] < hi]
        out.append(
            {
                "phase": name,
                "windows": len(delays),
                "windows_missing": expected - len(delays),
                "mean_ms": sum(delays) / len(delays) if delays else None,
                "p99_ms": percentile(delays, 99),
                "max_ms": max(delays) if delays else None,
            }
        )
    return out


def _bounds_over_time(spark: SparkSession, warehouse: str) -> list[dict[str, Any]]:
    """Per batch: seconds of arrival time since the input's start, and the bound per partition."""
    rows = (
        tables.read_table(spark, warehouse, tables.STREAM_PROGRESS.name)
        .select("batch_id", F.unix_millis("processing_time").alias("t"), "partition_lateness_ms")
        .orderBy("batch_id")
        .collect()
    )
    return [
        {
            "t_s": (int(r["t"]) - START_MS) / 1000,
            "bounds_ms": {
                int(k): int(v) for k, v in sorted((r["partition_lateness_ms"] or {}).items())
            },
        }
        for r in rows
    ]


def run_engine(
    spark: SparkSession, work: Path, input_dir: Path, b: LatenessBench, name: str
) -> dict[str, Any]:
    run_dir = work / f"lateness_{name}"
    _run(spark, run_dir, input_dir, b, b.engines[name])
    warehouse = str(run_dir / "warehouse")
    result = {
        "completeness": _completeness(spark, warehouse, b),
        "emit_latency": _emit_latency(spark, warehouse, b),
        "bounds": _bounds_over_time(spark, warehouse),
    }
    shutil.rmtree(run_dir, ignore_errors=True)
    return result


def overall_mean_ms(emit_latency: list[dict[str, Any]]) -> float | None:
    """The mean emit latency over every measured window of the three phases."""
    windows = sum(e["windows"] for e in emit_latency if e["mean_ms"] is not None)
    total = sum(e["mean_ms"] * e["windows"] for e in emit_latency if e["mean_ms"] is not None)
    return total / windows if windows else None


def verdict(engines: dict[str, dict[str, Any]], target_pct: float) -> dict[str, Any]:
    """The acceptance: auto's completeness reaches the target in every phase, and its mean
    emit latency over all measured windows is below the burst-tuned bound's. Per phase the
    latency comparison is reported too, not required: in the burst a bound that reaches the
    target sits at the burst's largest delay, which is what the burst-tuned bound is, so no
    controller meeting the target there can be clearly faster there (docs/benchmarks.md)."""
    auto, burst = engines["auto"], engines["fixed_burst"]
    reached = [
        c["completeness_pct"] is not None and c["completeness_pct"] >= target_pct
        for c in auto["completeness"]
    ]
    lower = [
        a["mean_ms"] is not None and f["mean_ms"] is not None and a["mean_ms"] < f["mean_ms"]
        for a, f in zip(auto["emit_latency"], burst["emit_latency"], strict=True)
    ]
    auto_mean = overall_mean_ms(auto["emit_latency"])
    burst_mean = overall_mean_ms(burst["emit_latency"])
    overall = auto_mean is not None and burst_mean is not None and auto_mean < burst_mean
    return {
        "auto_reaches_target": reached,
        "auto_mean_latency_below_burst": lower,
        "auto_overall_mean_ms": auto_mean,
        "burst_overall_mean_ms": burst_mean,
        "auto_overall_mean_below_burst": overall,
        "met": all(reached) and overall,
    }


def lateness_section(spark: SparkSession, work: Path, b: LatenessBench) -> dict[str, Any]:
    input_dir = work / "lateness_input"
    written = write_input(input_dir, b)
    log(
        f"lateness: {written['events']:,} events in {written['files']} files "
        f"({b.file_s} s of arrival each); phases {b.phase_s} s, burst delays "
        f"{BURST_DELAY_MS[0] // 1000}-{BURST_DELAY_MS[1] // 1000} s on partitions "
        f"{BURST_PARTITIONS}"
    )
    engines: dict[str, dict[str, Any]] = {}
    for name in b.engines:
        log(f"lateness: {name}")
        engines[name] = run_engine(spark, work, input_dir, b, name)
        for c, e in zip(engines[name]["completeness"], engines[name]["emit_latency"], strict=True):
            log(
                f"lateness: {name} {c['phase']}: {c['completeness_pct']} % complete, emit latency "
                f"mean {e['mean_ms']} ms p99 {e['p99_ms']} ms over {e['windows']} windows"
            )
    shutil.rmtree(input_dir, ignore_errors=True)
    return {
        **written,
        "rate": b.rate,
        "phase_s": list(b.phase_s),
        "tail_s": b.tail_s,
        "file_s": b.file_s,
        "window_ms": b.window_ms,
        "partitions": PARTITIONS,
        "burst_partitions": list(BURST_PARTITIONS),
        "calm_mean_delay_ms": CALM_MEAN_DELAY_MS,
        "burst_delay_ms": list(BURST_DELAY_MS),
        "calm_bound_ms": b.calm_bound_ms,
        "burst_bound_ms": b.burst_bound_ms,
        "target_pct": b.target_pct,
        "lateness_min_ms": b.lateness_min_ms,
        "lateness_max_ms": b.lateness_max_ms,
        "engines": engines,
        **verdict(engines, b.target_pct),
    }
