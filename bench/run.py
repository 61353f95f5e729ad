"""`tally bench [--quick]`: run every section, write benchmarks.md / .png / .json.

    run_bench(spark, quick=False, out_dir=..., work_dir=None, keep=False, command=...) -> dict

Full mode writes into `docs/` by default; `--quick` (a few minutes, used by the smoke test)
writes into a new temporary directory unless `--out` is given, so it never overwrites the
committed results. Data goes to `--work-dir` (default: a new directory under /tmp; an
existing directory gets a new directory inside it), deleted at the end unless `--keep`.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import load_average, log, machine_info
from bench.probe import LATE_CHECK, PHASE_NAMES
from bench.speed import StreamShape

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SECTIONS = ("speed", "latency", "state", "nightly", "curve")


@dataclass(frozen=True)
class Preset:
    name: str
    # 1. speed
    speed_events: int
    speed_files: int
    files_per_trigger: int
    repetitions: int
    warm_up: bool
    # 2. latency
    latency_engines: tuple[str, ...]
    latency_window_ms: int
    latency_lateness_ms: int
    latency_trigger_ms: int
    latency_rate: int
    latency_run_s: float
    latency_warmup_s: float
    latency_lead_s: float
    # 3. state
    state_events: int
    state_days: float
    state_files: int
    # 4./5. nightly and curve
    nightly_sizes: tuple[int, ...]
    curve_size: int
    window_ms: int = 60_000
    lateness_ms: int = 30_000
    notes: list[str] = field(default_factory=list)


FULL = Preset(
    name="full",
    speed_events=5_000_000,
    speed_files=100,  # 50k events a file
    files_per_trigger=20,  # 1M events a micro-batch: 5 batches
    repetitions=2,  # alternating; a third did not fit the session (about 10 min each)
    warm_up=True,
    latency_engines=("tally", "plain"),
    latency_window_ms=10_000,
    latency_lateness_ms=5_000,
    latency_trigger_ms=5_000,
    latency_rate=1_000,
    latency_run_s=90.0,
    latency_warmup_s=20.0,
    latency_lead_s=5.0,
    state_events=1_000_000,
    state_days=10.0,
    state_files=1_000,  # 50 micro-batches of 20 files (20k events): 10x the speed run's 5
    nightly_sizes=(1_000_000, 5_000_000, 20_000_000),
    curve_size=5_000_000,
)

QUICK = Preset(
    name="quick",
    speed_events=10_000,
    speed_files=2,
    files_per_trigger=2,  # one micro-batch
    repetitions=1,
    warm_up=False,
    latency_engines=("tally",),
    latency_window_ms=5_000,
    latency_lateness_ms=2_000,
    latency_trigger_ms=3_000,
    latency_rate=200,
    latency_run_s=20.0,
    latency_warmup_s=8.0,
    latency_lead_s=3.0,
    state_events=16_000,
    state_days=2.0,
    state_files=8,  # 4 micro-batches (10x the speed run's would not fit in minutes)
    nightly_sizes=(20_000,),  # one size: no growth figure in quick mode
    curve_size=20_000,
    notes=["quick mode: tiny inputs, one repetition; the numbers only show the code runs"],
)


READ_PHASE = PHASE_NAMES["inline before processing time"]


def _findings(r: dict[str, Any]) -> list[str]:
    """Plain sentences from the numbers: where the time goes and what would close gaps."""
    out: list[str] = []
    sp = r.get("speed")
    st = r.get("state")
    if sp:
        b = sp["tally_breakdown"]
        wall = b["seconds"]
        phases = b["phases_s"]
        writes = {k: v for k, v in phases.items() if k.startswith("write ")}
        per_batch = b.get("median_batch_s") or wall / max(1, b["batches"])
        out.append(
            f"Speed layer: tally {sp['events_per_s']['tally']['median']:,.0f} events/s vs "
            f"plain Spark {sp['events_per_s']['plain']['median']:,.0f} (ratio "
            f"{sp['ratio_tally_plain']:.2f}, target 0.8). A tally micro-batch of "
            f"{sp['lines'] // max(1, b['batches']):,} lines took {per_batch:.1f} s (median); "
            f"{100 * sum(writes.values()) / wall:.0f} % of the wall time is in the writes "
            f"to {len(writes)} tables, one Delta commit each ("
            + ", ".join(
                f"{k[6:]} {v:.1f} s" for k, v in sorted(writes.items(), key=lambda kv: -kv[1])[:4]
            )
            + ")."
        )
        if st and st["batches"]:
            small = st["flat"]["batch_s"]["first_quarter_median"]
            lines_per_batch = st["lines"] / max(1, len(st["batches"]))
            big_batch = sp["lines"] // max(1, b["batches"])
            if small:
                out.append(
                    f"Fixed cost per micro-batch: with ~{lines_per_batch:,.0f} lines a batch "
                    f"(state run) a batch still takes {small:.1f} s, i.e. about "
                    f"{100 * min(1.0, small / per_batch):.0f} % of a {big_batch:,}-line "
                    "batch is per-batch overhead (about nine Delta commits, their snapshot "
                    "updates and three `history(1)` reads) rather than per-event work."
                )
        merge = phases.get("merge batch into window state (aggregates.count)", 0.0)
        state_write = phases.get("write window_state", 0.0)
        pin = phases.get("plan parse/classify; pin + persist window/dedup state", 0.0)
        read = phases.get(READ_PHASE, 0.0)
        late = phases.get(LATE_CHECK, 0.0)
        out.append(
            f"Reading, splitting and parsing the lines is the largest phase ({read:.1f} s, "
            f"{100 * read / wall:.0f} % of the run): the stream reads whole files and splits "
            "them (deterministic line numbers for exactly-once replays), then parses each "
            "line once into a persisted frame both valid events and quarantine come from. "
            f"Second: the event-log duplicate check of late events ({late:.1f} s): a batch "
            "with late events reads the log's ids for their dates, a cost that grows with the "
            "day's log; a Bloom filter or an id index per date would bound it."
        )
        parse = sp.get("parse")
        if parse:
            both = parse["tally_valid_s"] + parse["tally_quarantine_s"]
            out.append(
                f"Unpersisted `tally.events.parse_events` (as `tally lateness-curve --input` "
                f"and this benchmark's batch load use it) is much slower: on one micro-batch "
                f"({parse['lines']:,} lines) {parse['tally_valid_s']:.1f} s for the valid "
                f"events and {parse['tally_quarantine_s']:.1f} s for the quarantine, against "
                f"{parse['plain_s']:.1f} s for the plain query's JSON reader "
                f"({both / max(parse['plain_s'], 1e-9):.0f}× for both). Their optimized plans "
                f"hold {parse['tally_valid_json_parses_in_plan']} and "
                f"{parse['tally_quarantine_json_parses_in_plan']} `from_json` calls: Catalyst "
                "pushes the `reason IS NULL` filter below the parse and inlines the parse into "
                "it. The stream avoids this by persisting `parse_lines` (one parse, three "
                "`from_json` views); the batch callers should do the same."
            )
        out.append(
            "Further gaps (streaming/job.py, streaming/logic.py; measured here, not changed): "
            "(1) `close_windows`' `merged` (window_state full-outer-joined with the batch's "
            "aggregate) is computed twice, once for `aggregates.count()` "
            f"({merge:.1f} s) and again for the window_state overwrite ({state_write:.1f} s): "
            "persist `merged`; (2) window_state and dedup_state are written as Delta tables "
            "and read back at a pinned version (time travel) by the next batch "
            f"({pin:.1f} s): in steady state the next batch can reuse the DataFrame this "
            "process just wrote (as `_committed` already does for the progress row); "
            "(3) `_write(versioned=True)` reads `history(1)` after each of its three writes; "
            "the version is in the session conf "
            "`spark.databricks.delta.lastCommitVersionInSession`; (4) every micro-batch pays "
            "about nine Delta commits, so fewer, larger micro-batches (more files per "
            "trigger) amortise the fixed per-batch cost."
        )
    lat = r.get("latency")
    if lat and "tally" in lat["engines"]:
        t = lat["engines"]["tally"]
        batches = sorted(t["batch_duration_ms"])
        med = batches[len(batches) // 2] if batches else None
        verdict = "within" if t["met"] else "over"
        text = (
            f"Latency: p99 {(t['p99_ms'] or 0) / 1000:.1f} s is {verdict} the target "
            f"L + 2 triggers = {lat['target_ms'] / 1000:.1f} s"
        )
        if med is not None:
            text += (
                f"; the median micro-batch took {med / 1000:.1f} s against a "
                f"{lat['trigger_ms'] / 1000:.0f} s trigger"
            )
            if med > lat["trigger_ms"]:
                text += (
                    ", so batches run back to back and a window waits for the batch in flight "
                    "plus its own: the per-batch fixed cost above is the latency floor"
                )
        out.append(text + ".")
    if st:
        f = st["flat"]
        out.append(
            "State: "
            + (
                "open-window state, dedup state and batch time stay flat"
                if st["met"]
                else "not flat: "
                + ", ".join(f"{k} ×{v['ratio']:.2f}" for k, v in f.items() if not v["flat"])
            )
            + f" over {len(st['batches'])} micro-batches while the event log grows."
        )
    ni = r.get("nightly")
    if ni and ni["sizes"]:
        big = ni["sizes"][-1]
        stages = {
            "re-aggregate": big["reaggregate_s"],
            "diff": big["diff_s"],
            "validate": big["validate_s"],
            "report": big["report_s"],
        }
        worst = max(stages, key=lambda k: stages[k])
        out.append(
            f"Nightly at {big['events']:,} events: re-aggregate + diff "
            f"{big['reaggregate_s'] + big['diff_s']:.1f} s = {big['ratio_json']:.1f}× DuckDB on "
            f"the JSON ({big['duckdb_json']['seconds']:.2f} s) and {big['ratio_parquet']:.1f}× "
            f"DuckDB on the same Parquet files; the slowest stage is {worst} "
            f"({stages[worst]:.1f} s)."
        )
    return out


def run_bench(
    spark: Any,
    quick: bool = False,
    out_dir: str | Path | None = None,
    work_dir: str | Path | None = None,
    keep: bool = False,
    command: str = "tally bench",
    only: tuple[str, ...] = SECTIONS,
) -> dict[str, Any]:
    """Run the sections in `only` and write the outputs; returns the results (with paths)."""
    from bench import latency, nightly, report, speed, state

    preset = QUICK if quick else FULL
    if out_dir is None:
        out_dir = (
            Path(tempfile.mkdtemp(prefix="bench_quick_out_")) if quick else PROJECT_ROOT / "docs"
        )
    out = Path(out_dir)
    if work_dir is None:
        work = Path(tempfile.mkdtemp(prefix="bench_work_"))
    elif not Path(work_dir).exists():
        work = Path(work_dir)
        work.mkdir(parents=True)
    else:  # never delete what was there: work in a new directory inside it
        work = Path(tempfile.mkdtemp(prefix="bench_work_", dir=work_dir))
    started = datetime.now(UTC)
    clock = time.monotonic()
    results: dict[str, Any] = {
        "mode": preset.name,
        "command": command,
        "started": started.strftime("%Y-%m-%d %H:%M"),
        "machine": machine_info(spark),
        "preset": {k: v for k, v in preset.__dict__.items()},
        "sections_s": {},
    }
    shape = StreamShape(preset.window_ms, preset.lateness_ms, preset.files_per_trigger)
    errors: dict[str, str] = {}

    def section(name: str, body: Callable[[], None]) -> None:
        """Run one section; a failure is recorded and the next section still runs."""
        t0 = time.monotonic()
        try:
            body()
        except Exception as exc:
            log(f"{name}: FAILED: {exc!r}")
            traceback.print_exc(file=sys.stderr)
            errors[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        results["sections_s"][name] = time.monotonic() - t0

    def run_speed() -> None:
        if "speed" in only:
            results["speed"] = speed.speed_section(
                spark,
                work,
                preset.speed_events,
                preset.speed_files,
                preset.repetitions,
                shape,
                preset.warm_up,
            )
        elif (
            preset.curve_size == preset.speed_events or preset.speed_events in preset.nightly_sizes
        ):
            speed.generate_backlog(work / "speed_input", preset.speed_events, preset.speed_files, 7)

    def run_latency() -> None:
        results["latency"] = latency.latency_section(
            spark,
            work,
            preset.latency_engines,
            StreamShape(preset.latency_window_ms, preset.latency_lateness_ms, 1000),
            preset.latency_trigger_ms,
            preset.latency_rate,
            preset.latency_run_s,
            warmup_s=preset.latency_warmup_s,
            lead_s=preset.latency_lead_s,
        )

    def run_state() -> None:
        results["state"] = state.state_section(
            spark, work, preset.state_events, preset.state_days, preset.state_files, shape
        )

    def run_nightly() -> None:
        sizes: list[dict[str, Any]] = []
        results["nightly"] = {
            "sizes": sizes,
            "files_per_batch": preset.files_per_trigger,
            "growth": None,
        }
        for events in preset.nightly_sizes if "nightly" in only else (preset.curve_size,):
            reuse = work / "speed_input"
            size = nightly.nightly_size(
                spark,
                work,
                events,
                preset.window_ms,
                preset.lateness_ms,
                preset.files_per_trigger,
                input_dir=reuse if events == preset.speed_events and reuse.is_dir() else None,
            )
            sizes.append(size)
            if events == preset.curve_size and "curve" in only:
                log(f"curve: lateness curve over {events:,} events")
                t0 = time.monotonic()
                try:
                    results["curve"] = nightly.curve_section(
                        spark,
                        str(work / f"nightly_{events}" / "warehouse"),
                        preset.window_ms,
                        events,
                    )
                except Exception as exc:
                    log(f"curve: FAILED: {exc!r}")
                    traceback.print_exc(file=sys.stderr)
                    errors["curve"] = f"{type(exc).__name__}: {exc}"
                results["sections_s"]["curve"] = time.monotonic() - t0
            if not keep:  # the largest sizes take gigabytes
                shutil.rmtree(work / f"nightly_{events}", ignore_errors=True)
        results["nightly"]["growth"] = nightly.growth(sizes)
        if "nightly" not in only:
            del results["nightly"]

    try:
        if {"speed", "nightly", "curve"} & set(only):
            section("speed", run_speed)
        if "latency" in only:
            section("latency", run_latency)
        if "state" in only:
            section("state", run_state)
        if {"nightly", "curve"} & set(only):
            section("nightly", run_nightly)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    results["errors"] = errors
    results["total_s"] = time.monotonic() - clock
    results["load_average_at_end"] = load_average()
    results["findings"] = _findings(results)
    paths = report.write_outputs(results, out)
    results["outputs"] = {k: str(v) for k, v in paths.items()}
    results["work_dir"] = str(work) if keep else None
    log(f"wrote {paths['md']}, {paths['png']}, {paths['json']} in {results['total_s']:.0f} s")
    return results


# -- command line ---------------------------------------------------------------------------------

BENCH_SETTINGS = ("spark_master", "shuffle_partitions")


def _cmd_bench(args: argparse.Namespace, settings: Any) -> int:
    from tally.spark import build_session

    only = tuple(s.strip() for s in args.only.split(",")) if args.only else SECTIONS
    unknown = [s for s in only if s not in SECTIONS]
    if unknown:
        print(
            f"tally: bad setting: only: unknown section(s) {', '.join(unknown)} "
            f"(known: {', '.join(SECTIONS)})",
            file=sys.stderr,
        )
        return 2
    try:
        import duckdb  # noqa: F401
    except ImportError:
        print("tally: bench needs duckdb: pip install -e '.[bench]'", file=sys.stderr)
        return 2
    spark = build_session(
        settings.spark_master,
        app_name="tally-bench",
        shuffle_partitions=settings.shuffle_partitions,
        extra_conf={"spark.driver.memory": args.driver_memory},
    )
    results = run_bench(
        spark,
        quick=args.quick,
        out_dir=args.out,
        work_dir=args.work_dir,
        keep=args.keep,
        command="tally " + " ".join(sys.argv[1:]) if sys.argv[1:] else "tally bench",
        only=only,
    )
    print(f"wrote {results['outputs']['md']}")
    for line in results["findings"]:
        print(f"- {line}")
    return 0


def add_commands(subparsers: Any) -> None:
    """Add `tally bench` (issue 7). Exit codes: 0 written, 2 bad argument or missing duckdb."""
    parser = subparsers.add_parser(
        "bench",
        help="benchmark the speed layer, latency, state and the nightly job against plain "
        "Spark and DuckDB; write docs/benchmarks.md",
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny inputs, one repetition (a few minutes)"
    )
    parser.add_argument(
        "--out",
        default=None,
        help="output directory for benchmarks.md/.png/.json (default: docs/; with --quick a "
        "new temporary directory)",
    )
    parser.add_argument(
        "--work-dir", default=None, help="data directory (default: a new one under /tmp)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument(
        "--only", default=None, help=f"comma-separated sections (default all: {','.join(SECTIONS)})"
    )
    parser.add_argument(
        "--driver-memory", default="4g", help="spark.driver.memory of the session (default 4g)"
    )
    parser.add_argument(
        "--spark-master", dest="spark_master", default=None, help="Spark master URL"
    )
    parser.add_argument(
        "--shuffle-partitions",
        dest="shuffle_partitions",
        default=None,
        help="spark.sql.shuffle.partitions for every engine",
    )
    parser.set_defaults(func=_cmd_bench, setting_names=BENCH_SETTINGS)
