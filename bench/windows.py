"""Section 10 (windows): throughput of the window kinds on the same input.

One backlog is generated once (`tally generate`, as for the throughput section) and streamed
by the real command line, each run its own OS process on a fresh warehouse and checkpoint,
timed wall-clock from process start to exit (JVM start included), peak RSS of its process
tree sampled:

    tally stream --available-now --drain --clock arrival --window 60s --window-slide ...

once per window kind (`KINDS`):

* tumbling: `--window-slide 0ms` (spelled out, so a `TALLY_WINDOW_SLIDE` in the environment
  cannot turn it into a hopping run), one window per event;
* hopping: `--window-slide 12s` for 60 s windows, S/H = 5: every event is in 5 windows.

The kinds alternate, in an order rotated each repetition; medians are reported, events/s =
input lines / wall seconds, and the ratio of each kind's median events/s to tumbling's.
Session windows are not implemented in tally yet: they are listed in `NOT_IMPLEMENTED` and the
report says so (no numbers). When they exist, they are one more `WindowKind` in `KINDS` (its
flags and its windows per event, 1) and leave `NOT_IMPLEMENTED`.

Correctness cross-check, read back from each run's warehouse (outside the timed run), exact:

* `stream_progress.input_lines` sums to the input's lines;
* after the drain every window is closed, so each non-duplicate valid event's `k` (event,
  window) pairs (k = windows per event: 1 tumbling, 5 hopping) are either counted in their
  window or written to `late_events` (one row per late (event, window): docs/semantics.md,
  "Classification of a valid event of batch N" and "The accounting identity"):

      sum over windows of the latest revision's event_count + late_events rows
        = k x (valid_events - duplicate_events)          (from stream_progress)

  with no event left in open-window state;
* every kind saw the same input the same way: equal valid events, duplicates and quarantined
  lines across kinds and repetitions.

The hopping run's counted events over the tumbling run's is reported beside (about 5, less
where an event is late for its oldest windows only): informative, not exact.

Expected duration, full mode on 2 cores (estimated, not measured yet at this size): the
throughput section's input halved, 1M events in 50 files of 20k, 10 files a trigger (the same
~200k-line micro-batches, 5 of them plus the drain): generating ~8 s; a tumbling run ~50 s
(the throughput section's 2M events take ~95 s, ~10 s of it JVM and session start); a
hopping run costs more: its `windows` phase, the `stream_aggregates` appends and the state
files handle 5x the (event, window) pairs and windows (in the throughput run they are ~15 %
of the batch time), so ~1.5-2.5x: ~75-125 s; reading each warehouse back ~5-40 s (the
hopping run's ~5M `stream_aggregates` rows). 2 repetitions: ~5-8 min (the throughput
section's full 2M events would take ~10-15 min, over the section's budget of ~8 min). Quick
mode (the smoke test): 4,000 events in 2 files (one micro-batch and the drain), one
repetition: two processes that are mostly JVM and session start, ~40-50 s on a quiet machine
(estimated; measured only on a loaded one, load average 4-8 on the 2 cores: ~100-120 s).
"""

from __future__ import annotations

import shutil
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bench import engines as E
from bench import phases
from bench.common import Backlog, StreamShape, load_average, log, summary
from bench.speed import generate_backlog, input_facts
from tally import tables as T
from tally.settings import format_duration

HOPS = 5  # the hopping run's windows per event: slide = window / HOPS


@dataclass(frozen=True)
class WindowKind:
    """One window configuration: `tally stream` flags (given the run's shape) and how many
    windows each event is in (the cross-check's factor)."""

    name: str
    label: str
    windows_per_event: int
    flags: Callable[[StreamShape], tuple[str, ...]]


def _slide_flags(divisor: int) -> Callable[[StreamShape], tuple[str, ...]]:
    def flags(shape: StreamShape) -> tuple[str, ...]:
        if shape.window_ms % divisor:
            raise ValueError(f"window {shape.window_ms} ms is not a multiple of {divisor}")
        slide = 0 if divisor == 1 else shape.window_ms // divisor
        return ("--window-slide", format_duration(slide))

    return flags


KINDS: tuple[WindowKind, ...] = (
    WindowKind("tumbling", "tumbling", 1, _slide_flags(1)),
    WindowKind("hopping", f"hopping (S/H = {HOPS})", HOPS, _slide_flags(HOPS)),
)
BASELINE = "tumbling"
# kinds the issue asks for that tally does not have yet: reported as such, never measured
NOT_IMPLEMENTED: dict[str, str] = {
    "session": "not implemented in tally yet (no session gap setting); no numbers until they are"
}


# -- one run --------------------------------------------------------------------------------------


def read_back(spark: SparkSession, warehouse: str, checkpoint: str) -> dict[str, Any]:
    """What the run wrote: `bench.engines.tally_accounting` (input lines, valid events,
    duplicates, late rows, events counted in the latest revisions, events still in state),
    plus the windows emitted, the late events (not rows) and whether the drain ran."""
    run: dict[str, Any] = dict(E.tally_accounting(spark, warehouse, checkpoint))
    run["windows_emitted"] = (
        T.read_table(spark, warehouse, T.STREAM_AGGREGATES.name)
        .select("window_start", "window_end", "key")
        .distinct()
        .count()
    )
    row = (
        T.read_table(spark, warehouse, T.STREAM_PROGRESS.name)
        .agg(
            F.sum("late_events").alias("late"),
            F.max(F.col("drained").cast("int")).alias("drained"),
        )
        .first()
    )
    assert row is not None
    run["late_event_count"] = int(row["late"] or 0)  # events late for every window
    run["drained"] = bool(row["drained"])
    return run


def cross_check(run: dict[str, Any], kind: WindowKind, lines: int) -> dict[str, Any]:
    """The exact identities of one drained run (see the module's docstring)."""
    non_duplicate = run["valid_events"] - run["duplicates"]
    expected = kind.windows_per_event * non_duplicate
    counted = run["emitted_events"] + run["late_events"]
    checks = {
        "input_lines": run["input_lines"] == lines,
        "drained": run["drained"] and run["open_window_events"] == 0,
        "pairs": counted == expected,
    }
    return {
        "non_duplicate_events": non_duplicate,
        "expected_pairs": expected,
        "counted_pairs": counted,
        "checks": checks,
        "exact": all(checks.values()),
    }


def run_kind(
    spark: SparkSession,
    kind: WindowKind,
    input_dir: str,
    run_dir: Path,
    shape: StreamShape,
    env: E.EngineEnv,
    lines: int,
) -> dict[str, Any]:
    """One `tally stream --available-now --drain` process of `kind`, read back and checked."""
    flags = kind.flags(shape)
    run = E.run_tally(run_dir.name, input_dir, run_dir, shape, env, drain=True, extra=flags)
    run["flags"] = list(flags)
    run["events_per_s"] = lines / run["seconds"]
    run.update(read_back(spark, run["warehouse"], run["checkpoint"]))
    run.update(cross_check(run, kind, lines))
    batches = run.pop("trace_batches")
    run["phases"] = phases.phase_table(batches)
    run["batch_seconds"] = [b["seconds"] for b in batches]
    return run


# -- the section ----------------------------------------------------------------------------------


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2]


def _same_input(runs: dict[str, list[dict[str, Any]]]) -> bool:
    """Every run saw the same valid events, duplicates and quarantined lines."""
    seen = {
        (r["valid_events"], r["duplicates"], r["quarantined"]) for rs in runs.values() for r in rs
    }
    return len(seen) == 1


def windows_section(
    spark: SparkSession,
    work: Path,
    backlog: Backlog,
    shape: StreamShape,
    repetitions: int,
    env: E.EngineEnv,
    kinds: tuple[WindowKind, ...] = KINDS,
) -> dict[str, Any]:
    """Generate the backlog once, then stream it with every kind, alternately."""
    data = work / "windows_input"
    log(f"windows: generating {backlog.events:,} events in {backlog.files} files")
    facts = input_facts(generate_backlog(data, backlog))
    lines = facts["lines"]
    runs: dict[str, list[dict[str, Any]]] = {k.name: [] for k in kinds}
    orders: list[list[str]] = []
    for rep in range(repetitions):
        shift = rep % len(kinds)
        order = kinds[shift:] + kinds[:shift]
        orders.append([k.name for k in order])
        for kind in order:
            run_dir = work / f"windows_rep{rep}_{kind.name}"
            load = load_average()
            log(f"windows: repetition {rep + 1}/{repetitions}, {kind.name}")
            result = run_kind(spark, kind, str(data), run_dir, shape, env, lines)
            result["load_average_before"] = load
            runs[kind.name].append(result)
            log(
                f"windows: {kind.name} {result['seconds']:.1f} s, "
                f"{result['events_per_s']:,.0f} events/s, cross-check "
                + ("exact" if result["exact"] else f"FAILED {result['checks']}")
            )
            shutil.rmtree(run_dir, ignore_errors=True)
    shutil.rmtree(data, ignore_errors=True)

    stats = {name: summary([r["events_per_s"] for r in rs]) for name, rs in runs.items()}
    base = stats[BASELINE]["median"]
    base_runs = runs[BASELINE]
    others = [k.name for k in kinds if k.name != BASELINE]
    median_runs = {name: _median_run(rs) for name, rs in runs.items()}
    base_counted = statistics.median(r["emitted_events"] for r in base_runs)
    return {
        "events": backlog.events,
        "files": backlog.files,
        **facts,
        "window_ms": shape.window_ms,
        "lateness_ms": shape.lateness_ms,
        "max_files_per_trigger": shape.max_files_per_trigger,
        "lines_per_batch": lines * shape.max_files_per_trigger / backlog.files,
        "repetitions": repetitions,
        "spark_master": env.master,
        "shuffle_partitions": env.shuffle_partitions,
        "baseline": BASELINE,
        "kind_order": [k.name for k in kinds],  # benchmarks.json sorts the keys
        "kinds": {
            k.name: {
                "label": k.label,
                "windows_per_event": k.windows_per_event,
                "flags": list(k.flags(shape)),
            }
            for k in kinds
        },
        "not_implemented": dict(NOT_IMPLEMENTED),
        "orders": orders,
        "runs": runs,
        "events_per_s": stats,
        "seconds": {name: summary([r["seconds"] for r in rs]) for name, rs in runs.items()},
        "peak_rss_mb": {name: max(r["peak_rss_mb"] for r in rs) for name, rs in runs.items()},
        # each kind's median events/s over tumbling's (below 1: slower)
        "ratio_to_baseline": {
            name: stats[name]["median"] / base if base and stats[name]["median"] else None
            for name in others
        },
        # per repetition: tumbling's wall seconds over the kind's (the same ratio, per round)
        "ratio_per_repetition": {
            name: [a["seconds"] / b["seconds"] for a, b in zip(base_runs, runs[name], strict=True)]
            for name in others
        },
        # events counted in windows (latest revisions), over tumbling's: about k (informative)
        "counted_ratio": {
            name: statistics.median(r["emitted_events"] for r in runs[name]) / base_counted
            if base_counted
            else None
            for name in others
        },
        "median_runs": {
            name: {
                "seconds": run["seconds"],
                "batches": run["batches"],
                "phases": run["phases"],
                "wall_split": run["wall_split"],
            }
            for name, run in median_runs.items()
        },
        "same_input": _same_input(runs),
        "all_exact": all(r["exact"] for rs in runs.values() for r in rs) and _same_input(runs),
    }
