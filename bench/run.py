"""`tally bench [--quick]`: run every section, write benchmarks.md / .png / .json.

    run_bench(spark, quick=False, out_dir=..., work_dir=None, keep=False, command=...) -> dict

Full mode writes into `docs/` by default; `--quick` (a few minutes, used by the smoke test)
writes into a new temporary directory unless `--out` is given, so it never overwrites the
committed results. Data goes to `--work-dir` (default: a new directory under /tmp; an
existing directory gets a new directory inside it), deleted at the end unless `--keep`.

The command line loads this module to list `tally bench` (entry point group
`tally.commands`), so it imports no Spark at module level: the sections are imported when
they run.
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
from functools import partial
from pathlib import Path
from typing import Any

from bench.common import Backlog, SteadyRate, StreamShape, load_average, log, machine_info
from bench.findings import findings

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

    @property
    def shape(self) -> StreamShape:
        """The speed, state and nightly runs' window, lateness and files per micro-batch."""
        return StreamShape(self.window_ms, self.lateness_ms, self.files_per_trigger)

    @property
    def speed_backlog(self) -> Backlog:
        return Backlog(self.speed_events, self.speed_files, seed=7)

    @property
    def state_backlog(self) -> Backlog:
        return Backlog(self.state_events, self.state_files, seed=17, days=self.state_days)

    @property
    def latency_shape(self) -> StreamShape:
        return StreamShape(self.latency_window_ms, self.latency_lateness_ms, 1000)

    @property
    def steady(self) -> SteadyRate:
        return SteadyRate(
            self.latency_trigger_ms,
            self.latency_rate,
            self.latency_run_s,
            warmup_s=self.latency_warmup_s,
            lead_s=self.latency_lead_s,
        )


# Both presets side by side, setting: (full, quick).
_PRESETS: dict[str, tuple[Any, Any]] = {
    # 1. speed. full: 50k events a file, 1M events a micro-batch (5 batches), repetitions
    # alternating (a third did not fit the session, about 10 min each); quick: one batch
    "speed_events": (5_000_000, 10_000),
    "speed_files": (100, 2),
    "files_per_trigger": (20, 2),
    "repetitions": (2, 1),
    "warm_up": (True, False),
    # 2. latency
    "latency_engines": (("tally", "plain"), ("tally",)),
    "latency_window_ms": (10_000, 5_000),
    "latency_lateness_ms": (5_000, 2_000),
    "latency_trigger_ms": (5_000, 3_000),
    "latency_rate": (1_000, 200),
    "latency_run_s": (90.0, 20.0),
    "latency_warmup_s": (20.0, 8.0),
    "latency_lead_s": (5.0, 3.0),
    # 3. state. full: 50 micro-batches of 20 files (20k events), 10x the speed run's 5;
    # quick: 4 micro-batches (10x the speed run's would not fit in minutes)
    "state_events": (1_000_000, 16_000),
    "state_days": (10.0, 2.0),
    "state_files": (1_000, 8),
    # 4./5. nightly and curve (quick: one size, so no growth figure)
    "nightly_sizes": ((1_000_000, 5_000_000, 20_000_000), (20_000,)),
    "curve_size": (5_000_000, 20_000),
}
FULL = Preset(name="full", **{k: full for k, (full, _) in _PRESETS.items()})
QUICK = Preset(
    name="quick",
    notes=["quick mode: tiny inputs, one repetition; the numbers only show the code runs"],
    **{k: quick for k, (_, quick) in _PRESETS.items()},
)


# -- the run --------------------------------------------------------------------------------------


class BenchRun:
    """The sections of one run, sharing the session, the preset and the work directory; a
    section's failure is recorded in `errors` and the next section still runs."""

    def __init__(self, spark: Any, preset: Preset, work: Path, only: tuple[str, ...]) -> None:
        self.spark = spark
        self.preset = preset
        self.work = work
        self.only = only
        self.errors: dict[str, str] = {}
        self.results: dict[str, Any] = {
            "mode": preset.name,
            "machine": machine_info(spark),
            "preset": dict(preset.__dict__),
            "sections_s": {},
        }

    def section(self, name: str, body: Callable[[], None]) -> None:
        """Run one section, timed; a failure is logged and recorded."""
        t0 = time.monotonic()
        try:
            body()
        except Exception as exc:
            log(f"{name}: FAILED: {exc!r}")
            traceback.print_exc(file=sys.stderr)
            message = str(exc).splitlines()[0] if str(exc) else ""
            self.errors[name] = f"{type(exc).__name__}: {message}"
        self.results["sections_s"][name] = time.monotonic() - t0

    def run(self, keep: bool) -> None:
        """Every section in `only` (the speed input is also generated for the nightly and
        curve sections when they can reuse it); the work directory is deleted unless `keep`."""
        wanted = set(self.only)
        try:
            if {"speed", "nightly", "curve"} & wanted:
                self.section("speed", self.speed)
            if "latency" in wanted:
                self.section("latency", self.latency)
            if "state" in wanted:
                self.section("state", self.state)
            if {"nightly", "curve"} & wanted:
                self.section("nightly", lambda: self.nightly(keep))
        finally:
            if not keep:
                shutil.rmtree(self.work, ignore_errors=True)

    def speed(self) -> None:
        from bench import speed

        p = self.preset
        if "speed" in self.only:
            self.results["speed"] = speed.speed_section(
                self.spark, self.work, p.speed_backlog, p.shape, p.repetitions, p.warm_up
            )
        elif p.curve_size == p.speed_events or p.speed_events in p.nightly_sizes:
            speed.generate_backlog(self.work / "speed_input", p.speed_backlog)

    def latency(self) -> None:
        from bench import latency

        p = self.preset
        self.results["latency"] = latency.latency_section(
            self.spark, self.work, p.latency_engines, p.latency_shape, p.steady
        )

    def state(self) -> None:
        from bench import state

        self.results["state"] = state.state_section(
            self.spark, self.work, self.preset.state_backlog, self.preset.shape
        )

    def nightly(self, keep: bool) -> None:
        """Every nightly size (only the curve's when the nightly section is not wanted), and
        the lateness curve on the curve's size."""
        from bench import nightly

        p = self.preset
        sizes: list[dict[str, Any]] = []
        if "nightly" in self.only:  # the sizes done so far are reported if a later one fails
            self.results["nightly"] = {
                "sizes": sizes,
                "files_per_batch": p.files_per_trigger,
                "growth": None,
            }
        for events in p.nightly_sizes if "nightly" in self.only else (p.curve_size,):
            reuse = self.work / "speed_input"
            size_dir = self.work / f"nightly_{events}"
            sizes.append(
                nightly.nightly_size(
                    self.spark,
                    self.work,
                    events,
                    p.shape,
                    input_dir=reuse if events == p.speed_events and reuse.is_dir() else None,
                )
            )
            if events == p.curve_size and "curve" in self.only:
                self.section("curve", partial(self.curve, size_dir / "warehouse", events))
            if not keep:  # the largest sizes take gigabytes
                shutil.rmtree(size_dir, ignore_errors=True)
        if "nightly" in self.only:
            self.results["nightly"]["growth"] = nightly.growth(sizes)

    def curve(self, warehouse: Path, events: int) -> None:
        from bench import nightly

        log(f"curve: lateness curve over {events:,} events")
        self.results["curve"] = nightly.curve_section(
            self.spark, str(warehouse), self.preset.window_ms, events
        )


def _directories(
    quick: bool, out_dir: str | Path | None, work_dir: str | Path | None
) -> tuple[Path, Path]:
    """The output directory and a work directory of this run's own."""
    if out_dir is None:
        out_dir = (
            Path(tempfile.mkdtemp(prefix="bench_quick_out_")) if quick else PROJECT_ROOT / "docs"
        )
    if work_dir is None:
        work = Path(tempfile.mkdtemp(prefix="bench_work_"))
    elif not Path(work_dir).exists():
        work = Path(work_dir)
        work.mkdir(parents=True)
    else:  # never delete what was there: work in a new directory inside it
        work = Path(tempfile.mkdtemp(prefix="bench_work_", dir=work_dir))
    return Path(out_dir), work


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
    from bench import report

    out, work = _directories(quick, out_dir, work_dir)
    started = datetime.now(UTC)
    clock = time.monotonic()
    bench = BenchRun(spark, QUICK if quick else FULL, work, only)
    results = bench.results
    results.update(command=command, started=started.strftime("%Y-%m-%d %H:%M"))
    bench.run(keep)
    results["errors"] = bench.errors
    results["total_s"] = time.monotonic() - clock
    results["load_average_at_end"] = load_average()
    results["findings"] = findings(results)
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
