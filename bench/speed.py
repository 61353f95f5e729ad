"""Section 1: throughput of whole processes on the same JSON backlog, available-now.

Engines (`bench.engines`; each a separate OS process, JVM start included, timed wall-clock,
peak RSS of its process tree sampled with psutil):

(a) tally: `tally stream --available-now --clock arrival` (the real command line): parse and
    quarantine, per-partition watermark, dedup, late side output, the event log, window state;
(b) plain Spark durable: one session, a bronze query (every raw line appended to Delta) and the
    `withWatermark` + `window` aggregation query (append mode into Delta) side by side;
(c) plain Spark aggregation only: the aggregation query alone (late rows dropped silently, no
    dedup, no quarantine, no event log);
(d) Spark batch: `read.json` + the same aggregation into Delta, the ceiling on this machine;
(a'') tally again on the same events with a currency each (`CURRENCIES`, a currency per key):
    what keeping every aggregate per currency costs (issue 41: >= 0.95 of (a)).

The same files per trigger for every streaming engine (full mode: 100 files of 20k events, 10
files a trigger, micro-batches of ~200k lines); the previous configuration (micro-batches of
~1M lines, 50 files a trigger) runs tally and (c) again, reported beside. The engines run
alternately, in an order rotated each repetition, on fresh directories; medians are reported.
events/s = input lines / wall seconds of the process.

Targets (issue 23, "must"): tally / plain durable >= 0.8, tally / aggregation only >= 0.6 (the
goal beyond them: durable >= 1.0). tally must account for every input line
(`stream_progress.input_lines` sums to the input's lines).

Expected duration, full mode on 2 cores: generating 2M events ~15 s; a round of the seven runs
~4-5 min (each tally run ~90 s, each plain engine 20-40 s, JVM start ~10-20 s included, plus
reading the results back); 2 repetitions ~9-10 min. Quick mode: ~3-6 min.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from bench import engines, phases
from bench.common import (
    DAY,
    Backlog,
    StreamShape,
    load_average,
    log,
    median_run,
    stopwatch,
    summary,
)

TARGET_DURABLE = 0.8  # tally events/s over plain durable events/s (issue 23's must; goal 1.0)
TARGET_AGG = 0.6  # tally events/s over plain aggregation-only events/s


@dataclass(frozen=True)
class Engine:
    name: str
    label: str
    kind: str  # "tally" or a bench.plain_job mode
    previous: bool = False  # the previous configuration (bigger micro-batches)
    currencies: bool = False  # the same backlog with a currency on every event


ENGINES = (
    Engine("tally", "(a) tally stream", "tally"),
    Engine("durable", "(b) plain Spark durable (bronze + aggregation)", "durable"),
    Engine("agg", "(c) plain Spark aggregation only", "agg"),
    Engine("batch", "(d) Spark batch (ceiling)", "batch"),
    Engine("tally_prev", "(a') tally stream, previous configuration", "tally", previous=True),
    Engine("agg_prev", "(c') aggregation only, previous configuration", "agg", previous=True),
    Engine(
        "tally_currencies",
        "(a'') tally stream, the same events in four currencies",
        "tally",
        currencies=True,
    ),
)
# The currencies (with weights) of the backlog (a'') streams: a currency per key, by weight
# (`tally generate --currencies`); otherwise the very same events.
CURRENCIES = "USD:6,EUR:2,JPY:1,BHD:1"
TARGET_CURRENCIES = 0.95  # (a'') events/s over (a) events/s (issue 41)
ENGINE_LABELS = {e.name: e.label for e in ENGINES}

Runner = Callable[[Engine, Path], dict[str, Any]]


# -- data -----------------------------------------------------------------------------------------


def generate_backlog(out: Path, backlog: Backlog, currencies: str | None = None) -> dict[str, Any]:
    """A backlog from `tally_tools.generate` (1,000 keys, the generator's lateness and disorder;
    `currencies`: a currency per key, by weight, the events otherwise the same)."""
    from tally_tools.generate import generate, parse_currencies

    with stopwatch() as t:
        manifest = generate(
            out=str(out),
            events=backlog.events,
            partitions=backlog.partitions,
            seed=backlog.seed,
            start=DAY,
            duration_ms=int(backlog.days * 86_400_000),
            files=backlog.files,
            keys=1000,
            currencies=None if currencies is None else parse_currencies(currencies),
        )
    manifest["generate_s"] = t["s"]
    manifest["bytes"] = sum(p.stat().st_size for p in out.glob("arrival-*.jsonl"))
    return manifest


def input_facts(manifest: dict[str, Any]) -> dict[str, Any]:
    """What the generator wrote, as the report describes the input."""
    return {
        "lines": manifest["lines"],
        "valid_events": manifest["events"] + manifest["duplicates"],
        "distinct_events": manifest["events"],
        "duplicates": manifest["duplicates"],
        "malformed_lines": manifest["malformed_lines"],
        "empty_lines": manifest["malformed_by_kind"]["empty_line"],
        "keys": manifest["keys"],
        "partitions": manifest["partitions"],
        "input_bytes": manifest["bytes"],
        "generate_s": manifest["generate_s"],
    }


def input_and_setup(
    backlog: Backlog,
    facts: dict[str, Any],
    shape: StreamShape,
    repetitions: int,
    env: engines.EngineEnv,
) -> dict[str, Any]:
    """The input, the stream's shape and the engines' setup, as a section reports them (the
    throughput and window-kind sections stream the same kind of backlog)."""
    return {
        "events": backlog.events,
        "files": backlog.files,
        **facts,
        "window_ms": shape.window_ms,
        "lateness_ms": shape.lateness_ms,
        "max_files_per_trigger": shape.max_files_per_trigger,
        "lines_per_batch": facts["lines"] * shape.max_files_per_trigger / backlog.files,
        "repetitions": repetitions,
        "spark_master": env.master,
        "shuffle_partitions": env.shuffle_partitions,
    }


# -- one run of one engine ------------------------------------------------------------------------


def _tally_run(
    spark: SparkSession, input_dir: str, run_dir: Path, shape: StreamShape, env: engines.EngineEnv
) -> dict[str, Any]:
    run = engines.run_tally(run_dir.name, input_dir, run_dir, shape, env)
    run.update(engines.tally_accounting(spark, run["warehouse"], run["checkpoint"]))
    batches = run.pop("trace_batches")
    run["phases"] = phases.phase_table(batches)
    run["appends_median_s"] = phases.append_medians(batches)
    run["batch_seconds"] = [b["seconds"] for b in batches]
    return run


def _plain_run(
    spark: SparkSession,
    mode: str,
    input_dir: str,
    run_dir: Path,
    shape: StreamShape,
    env: engines.EngineEnv,
) -> dict[str, Any]:
    run = engines.run_plain(run_dir.name, mode, input_dir, run_dir, shape, env)
    run.update(engines.plain_outputs(spark, mode, run.pop("out")))
    agg = run["queries"].get("agg") or {}
    run["batches"] = agg.get("batches")
    run["input_rows"] = agg.get("input_rows")
    run["dropped_by_watermark"] = agg.get("dropped_by_watermark")
    return run


def _runner(
    spark: SparkSession,
    inputs: dict[bool, str],
    shapes: dict[bool, StreamShape],
    env: engines.EngineEnv,
) -> Runner:
    """Runs an engine on `inputs[engine.currencies]` in `shapes[engine.previous]`."""

    def run(engine: Engine, run_dir: Path) -> dict[str, Any]:
        shape, input_dir = shapes[engine.previous], inputs[engine.currencies]
        if engine.kind == "tally":
            return _tally_run(spark, input_dir, run_dir, shape, env)
        return _plain_run(spark, engine.kind, input_dir, run_dir, shape, env)

    return run


def _alternate(
    run: Runner, work: Path, repetitions: int, lines: int
) -> dict[str, list[dict[str, Any]]]:
    """`repetitions` rounds of every engine, in an order rotated each round, fresh directories."""
    runs: dict[str, list[dict[str, Any]]] = {e.name: [] for e in ENGINES}
    for rep in range(repetitions):
        shift = rep % len(ENGINES)
        for engine in ENGINES[shift:] + ENGINES[:shift]:
            run_dir = work / f"speed_rep{rep}_{engine.name}"
            load = load_average()
            log(f"speed: repetition {rep + 1}/{repetitions}, {engine.name}")
            result = run(engine, run_dir)
            result["load_average_before"] = load
            result["events_per_s"] = lines / result["seconds"]
            runs[engine.name].append(result)
            log(
                f"speed: {engine.name} {result['seconds']:.1f} s, "
                f"{result['events_per_s']:,.0f} events/s, peak RSS {result['peak_rss_mb']:,.0f} MB"
            )
            shutil.rmtree(run_dir, ignore_errors=True)
    return runs


def _ratio(stats: dict[str, dict[str, Any]], a: str, b: str) -> float | None:
    num, den = stats[a]["median"], stats[b]["median"]
    return num / den if num and den else None


def speed_section(
    spark: SparkSession,
    work: Path,
    backlog: Backlog,
    shape: StreamShape,
    previous_files_per_trigger: int,
    repetitions: int,
    env: engines.EngineEnv,
) -> dict[str, Any]:
    """Generate the backlog once, then run every engine alternately `repetitions` times."""
    data = work / "speed_input"
    log(f"speed: generating {backlog.events:,} events in {backlog.files} files")
    manifest = generate_backlog(data, backlog)
    facts = input_facts(manifest)
    in_currencies = work / "speed_input_currencies"
    log(f"speed: the same events in currencies {CURRENCIES}")
    generate_backlog(in_currencies, backlog, CURRENCIES)
    previous = StreamShape(
        shape.window_ms, shape.lateness_ms, previous_files_per_trigger, shape.idle_timeout_ms
    )
    inputs = {False: str(data), True: str(in_currencies)}
    run = _runner(spark, inputs, {False: shape, True: previous}, env)
    runs = _alternate(run, work, repetitions, facts["lines"])
    shutil.rmtree(data, ignore_errors=True)
    shutil.rmtree(in_currencies, ignore_errors=True)

    stats = {name: summary([r["events_per_s"] for r in rs]) for name, rs in runs.items()}
    ratio_durable = _ratio(stats, "tally", "durable")
    ratio_agg = _ratio(stats, "tally", "agg")
    lines_ok = all(
        r["input_lines"] == facts["lines"]
        for e in ("tally", "tally_prev", "tally_currencies")
        for r in runs[e]
    )
    ratio_currencies = _ratio(stats, "tally_currencies", "tally")
    return {
        **input_and_setup(backlog, facts, shape, repetitions, env),
        "previous_files_per_trigger": previous_files_per_trigger,
        "previous_lines_per_batch": facts["lines"] * previous_files_per_trigger / backlog.files,
        "runs": runs,
        "events_per_s": stats,
        "seconds": {name: summary([r["seconds"] for r in rs]) for name, rs in runs.items()},
        "peak_rss_mb": {
            name: max((r["peak_rss_mb"] for r in rs), default=None) for name, rs in runs.items()
        },
        "ratio_tally_durable": ratio_durable,
        "ratio_tally_agg": ratio_agg,
        "ratio_previous": _ratio(stats, "tally_prev", "agg_prev"),
        "currencies": CURRENCIES,
        "ratio_currencies": ratio_currencies,
        "target_currencies": TARGET_CURRENCIES,
        "met_currencies": ratio_currencies is not None and ratio_currencies >= TARGET_CURRENCIES,
        "ratio_per_repetition": {
            other: [
                b["seconds"] / a["seconds"] for a, b in zip(runs["tally"], runs[other], strict=True)
            ]
            for other in ("durable", "agg")
        },
        "target_durable": TARGET_DURABLE,
        "target_agg": TARGET_AGG,
        "met_durable": ratio_durable is not None and ratio_durable >= TARGET_DURABLE,
        "met_agg": ratio_agg is not None and ratio_agg >= TARGET_AGG,
        "all_lines_accounted": lines_ok,
        "tally_median_run": median_run(runs["tally"]),
        "tally_prev_median_run": median_run(runs["tally_prev"]),
        "cpu_count": os.cpu_count(),
    }
