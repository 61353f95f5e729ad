"""Section 10 (windows): throughput of the window kinds on the same input.

One backlog is generated once (`tally generate`, as for the throughput section) and streamed
by the real command line, each run its own OS process on a fresh warehouse and checkpoint,
timed wall-clock from process start to exit (JVM start included), peak RSS of its process
tree sampled:

    tally stream --available-now --drain --clock arrival --window 60s --window-slide ...

once per window kind (`KINDS`):

* tumbling: `--window-slide 0ms` (spelled out, so a `TALLY_WINDOW_SLIDE` in the environment
  cannot turn it into a hopping run), one window per event;
* hopping: `--window-slide 12s` for 60 s windows, S/H = 5: every event is in 5 windows;
* session: `--window-slide 0ms --session-gap 10s` (`SESSION_GAP_MS`; docs/semantics.md,
  "Session windows"): every event is in one session (its span `[t, t + 10 s)`, merged).

The kinds alternate, in an order rotated each repetition; medians are reported, events/s =
input lines / wall seconds, and the ratio of each kind's median events/s to tumbling's.

Why a 10 s gap. The backlog (`bench.speed.generate_backlog`) has 1,000 keys drawn Zipf
(s = 1.1, key k's share 1/(k^1.1 x 5.57)) independently of event time, which is uniform over
the day: each key is a Poisson process of rate n_k / 86,400 s. With gap D a key's sessions
hold e^(lambda_k D) events on average (an event starts a session when the key's previous event
is D or more before it, probability e^(-lambda_k D)). Full mode, 1M events: the event-median
key (rank 12: half the events are on keys 1-12) has 11,700 events, one every 7.4 s; D = 10 s
gives it sessions of ~4 events, keys 5-50 (33 % of the events) 1.3-34, the long tail
(ranks >= 100, spacing >= 76 s) mostly single events. Counted on the generated times (seed
31): 401,293 sessions, mean 2.49 events, event-weighted median session 6 events, 80 %
singletons; ~400k sessions is about the tumbling run's 317k emitted windows, so the ratio
measures the fold, not a different output volume. No gap suits every key: the head (key 1:
180k events, one every 0.48 s; key 2 one every 1 s) is a few hours-long sessions for any gap
over a few seconds (26 % of the events sit in sessions of an hour or more at 10 s); a larger
gap only grows that (30 s: 280k sessions, mean 3.6, but 45 % of the events in hour-long
sessions and an event-weighted median of 97; 60 s: 55 %), a smaller one makes nearly all
singletons (1 s: mean 1.4). Quick mode (4k events, ~4 a key a day) has almost only single
events whatever the gap: 3,923 sessions, mean 1.02; it shows the code runs.

Correctness cross-check, read back from each run's warehouse (outside the timed run), exact:

* `stream_progress.input_lines` sums to the input's lines;
* after the drain every window is closed, so each non-duplicate valid event's `k` (event,
  window) pairs (k = windows per event: 1 tumbling, 5 hopping, 1 session) are either counted
  in a current window or written to `late_events` (one row per late (event, window):
  docs/semantics.md, "Classification of a valid event of batch N", "Session windows" and
  "The accounting identity"). The current windows are the highest revision per
  `(window_start, window_end, key)` minus those whose row is `retracted` (a session another
  absorbed; never true for tumbling and hopping, whose latest revisions are all current):

      sum over current windows of event_count + late_events rows
        = k x (valid_events - duplicate_events)          (from stream_progress)

  with no event left in open-window state;
* the current windows of one key never overlap (tumbling and session: `WindowKind.disjoint`;
  a window function over the read-back rows, ordered by start, comparing each with the
  previous one's end);
* only session runs write `retracted` rows;
* every kind saw the same input the same way: equal valid events, duplicates and quarantined
  lines across kinds and repetitions.

Each run also reports its current windows (sessions, for the session kind), the mean events
counted per current window, and its retraction rows. The hopping run's counted events over
the tumbling run's is reported beside (about 5, less where an event is late for its oldest
windows only), the session run's about 1: informative, not exact.

Expected duration, full mode on 2 cores: the throughput section's input halved, 1M events in
50 files of 20k, 10 files a trigger (the same ~200k-line micro-batches, 5 of them plus the
drain): generating ~5 s; measured on a shared machine (2026-11-23 19:32, load 1.1-4): a
tumbling run 73-92 s, a hopping run 97-105 s, a session run 92-96 s (its `windows` phase,
the sort of each batch's spans with the open sessions per key, 14.1 s over the run against
tumbling's 7.4 s; it writes 401k sessions against tumbling's 317k windows); reading each
warehouse back ~5-40 s. 2 repetitions of 3 kinds: ~10 min. Quick mode (as recorded for the
smoke test): 4,000 events in 2 files (one micro-batch and the drain), one repetition: three
processes that are mostly JVM and session start, ~60-75 s on a quiet machine (estimated; on
a loaded one, load average 4-8 on the 2 cores, ~150-180 s).
"""

from __future__ import annotations

import shutil
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as F

from bench import engines, phases
from bench.common import Backlog, StreamShape, load_average, log, median_run, summary
from bench.speed import generate_backlog, input_and_setup, input_facts
from tally import tables
from tally.durations import format_duration
from tally.windows import SESSION_OWNER, WINDOW_KEY

HOPS = 5  # the hopping run's windows per event: slide = window / HOPS
SESSION_GAP_MS = 10_000  # the session run's gap (why 10 s: the module's docstring)


@dataclass(frozen=True)
class WindowKind:
    """One window configuration: `tally stream` flags (given the run's shape), how many
    windows each event is in (the cross-check's factor), whether the current windows of one
    key are disjoint (checked) and whether the kind may write `retracted` rows."""

    name: str
    label: str
    windows_per_event: int
    flags: Callable[[StreamShape], tuple[str, ...]]
    disjoint: bool = False
    retracts: bool = False


def _slide_flags(divisor: int) -> Callable[[StreamShape], tuple[str, ...]]:
    def flags(shape: StreamShape) -> tuple[str, ...]:
        if shape.window_ms % divisor:
            raise ValueError(f"window {shape.window_ms} ms is not a multiple of {divisor}")
        slide = 0 if divisor == 1 else shape.window_ms // divisor
        return ("--window-slide", format_duration(slide))

    return flags


def _session_flags(gap_ms: int) -> Callable[[StreamShape], tuple[str, ...]]:
    def flags(shape: StreamShape) -> tuple[str, ...]:
        # the slide spelled out as for tumbling: sessions refuse a slide from the environment
        return (*_slide_flags(1)(shape), "--session-gap", format_duration(gap_ms))

    return flags


KINDS: tuple[WindowKind, ...] = (
    WindowKind("tumbling", "tumbling", 1, _slide_flags(1), disjoint=True),
    WindowKind("hopping", f"hopping (S/H = {HOPS})", HOPS, _slide_flags(HOPS)),
    WindowKind(
        "session",
        f"session (gap {format_duration(SESSION_GAP_MS)})",
        1,
        _session_flags(SESSION_GAP_MS),
        disjoint=True,
        retracts=True,
    ),
)
BASELINE = "tumbling"


# -- one run --------------------------------------------------------------------------------------


def current_windows(spark: SparkSession, warehouse: str, disjoint: bool) -> dict[str, int | None]:
    """The current windows (highest revision per window and key, minus the `retracted`), read
    back: how many, the events they count, the `retracted` rows, the windows ever emitted and,
    for a `disjoint` kind, how many current windows overlap their key's previous one (None
    when not checked)."""
    latest = (
        tables.read_table(spark, warehouse, tables.STREAM_AGGREGATES.name)
        .withColumn("retracted", F.coalesce("retracted", F.lit(False)))
        .groupBy(*WINDOW_KEY)
        .agg(
            F.max_by(F.struct("event_count", "retracted"), "revision").alias("_latest"),
            F.count_if("retracted").alias("_retractions"),
        )
    )
    emitted = latest.agg(F.count(F.lit(1)), F.sum("_retractions")).first()
    assert emitted is not None
    current = latest.where(~F.col("_latest.retracted")).select(
        *WINDOW_KEY, F.col("_latest.event_count").alias("event_count")
    )
    overlap = F.lit(None).cast("boolean")
    if disjoint:
        by_key = Window.partitionBy(*SESSION_OWNER).orderBy("window_start", "window_end")
        overlap = F.col("window_start") < F.lag("window_end").over(by_key)
    row = (
        current.withColumn("_overlap", overlap)
        .agg(F.count(F.lit(1)), F.sum("event_count"), F.count_if("_overlap"))
        .first()
    )
    assert row is not None
    return {
        "windows_emitted": int(emitted[0]),
        "retraction_rows": int(emitted[1] or 0),
        "current_windows": int(row[0]),
        "current_events": int(row[1] or 0),
        "overlapping_windows": int(row[2]) if disjoint else None,
    }


def read_back(
    spark: SparkSession, warehouse: str, checkpoint: str, kind: WindowKind
) -> dict[str, Any]:
    """What the run wrote: `bench.engines.tally_accounting` (input lines, valid events,
    duplicates, late rows, events still in state), its current windows (`current_windows`),
    the late events (not rows) and whether the drain ran. `emitted_events` is the events
    counted in the current windows: `tally_accounting`'s sum over the latest revisions counts
    a retracted session's last totals too (kept as `latest_revision_events`)."""
    run: dict[str, Any] = dict(engines.tally_accounting(spark, warehouse, checkpoint))
    run.update(current_windows(spark, warehouse, kind.disjoint))
    run["latest_revision_events"] = run["emitted_events"]
    run["emitted_events"] = run["current_events"]
    run["accounted_events"] = run["current_events"] + run["late_events"] + run["open_window_events"]
    run["events_per_window"] = (
        run["current_events"] / run["current_windows"] if run["current_windows"] else None
    )
    row = (
        tables.read_table(spark, warehouse, tables.STREAM_PROGRESS.name)
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
    counted = run["current_events"] + run["late_events"]
    checks = {
        "input_lines": run["input_lines"] == lines,
        "drained": run["drained"] and run["open_window_events"] == 0,
        "pairs": counted == expected,
        "retractions": kind.retracts or run["retraction_rows"] == 0,
    }
    if kind.disjoint:
        checks["disjoint"] = run["overlapping_windows"] == 0
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
    env: engines.EngineEnv,
    lines: int,
) -> dict[str, Any]:
    """One `tally stream --available-now --drain` process of `kind`, read back and checked."""
    flags = kind.flags(shape)
    run = engines.run_tally(run_dir.name, input_dir, run_dir, shape, env, drain=True, extra=flags)
    run["flags"] = list(flags)
    run["events_per_s"] = lines / run["seconds"]
    run.update(read_back(spark, run["warehouse"], run["checkpoint"], kind))
    run.update(cross_check(run, kind, lines))
    batches = run.pop("trace_batches")
    run["phases"] = phases.phase_table(batches)
    run["batch_seconds"] = [b["seconds"] for b in batches]
    return run


# -- the section ----------------------------------------------------------------------------------


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
    env: engines.EngineEnv,
    kinds: tuple[WindowKind, ...] = KINDS,
) -> dict[str, Any]:
    """Generate the backlog once, then stream it with every kind, alternately."""
    data = work / "windows_input"
    log(f"windows: generating {backlog.events:,} events in {backlog.files} files")
    facts = input_facts(generate_backlog(data, backlog))
    lines = facts["lines"]
    runs, orders = _run_alternately(spark, work, data, shape, repetitions, env, kinds, lines)
    shutil.rmtree(data, ignore_errors=True)
    return {
        **input_and_setup(backlog, facts, shape, repetitions, env),
        "baseline": BASELINE,
        "kind_order": [k.name for k in kinds],  # benchmarks.json sorts the keys
        "kinds": {
            k.name: {
                "label": k.label,
                "windows_per_event": k.windows_per_event,
                "flags": list(k.flags(shape)),
                "disjoint": k.disjoint,
                "retracts": k.retracts,
            }
            for k in kinds
        },
        "session_gap_ms": SESSION_GAP_MS,
        "orders": orders,
        "runs": runs,
        **_compared(runs, kinds),
    }


def _run_alternately(
    spark: SparkSession,
    work: Path,
    data: Path,
    shape: StreamShape,
    repetitions: int,
    env: engines.EngineEnv,
    kinds: tuple[WindowKind, ...],
    lines: int,
) -> tuple[dict[str, list[dict[str, Any]]], list[list[str]]]:
    """Every kind's runs, and the order the kinds ran in each repetition (rotated each time)."""
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
                f"{result['events_per_s']:,.0f} events/s; {result['current_windows']:,} "
                f"current windows, {result['events_per_window'] or 0:.2f} events each, "
                f"{result['retraction_rows']:,} retraction rows; cross-check "
                + ("exact" if result["exact"] else f"FAILED {result['checks']}")
            )
            shutil.rmtree(run_dir, ignore_errors=True)
    return runs, orders


def _compared(
    runs: dict[str, list[dict[str, Any]]], kinds: tuple[WindowKind, ...]
) -> dict[str, Any]:
    """The kinds' medians, each against tumbling's, and whether every run was exact."""
    stats = {name: summary([r["events_per_s"] for r in rs]) for name, rs in runs.items()}
    base = stats[BASELINE]["median"]
    base_runs = runs[BASELINE]
    others = [k.name for k in kinds if k.name != BASELINE]
    median_runs = {name: median_run(rs) for name, rs in runs.items()}
    base_counted = statistics.median(r["emitted_events"] for r in base_runs)
    return {
        # the last run of each kind: its current windows (sessions), the mean events counted
        # in one, its retraction rows (informative; the checks are per run)
        "current": {
            name: {
                key: rs[-1][key]
                for key in (
                    "current_windows",
                    "events_per_window",
                    "retraction_rows",
                    "overlapping_windows",
                    "windows_emitted",
                )
            }
            for name, rs in runs.items()
        },
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
        # events counted in current windows, over tumbling's: about k (informative)
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
