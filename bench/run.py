"""`tally bench [--quick] [--only a,b] [--out DIR]`: run the sections, write benchmarks.md /
.png / .json.

    run_bench(spark, quick=False, out_dir=..., work_dir=None, keep=False, command=..., only=...)

Sections (`SECTIONS`): speed (target 1), latency (3), state (targets 2 and 4), kafka,
scaleout (a standalone cluster and S3), windows (tumbling and hopping on one input), bigfile
(5), nightly, curve, lateness (adaptive lateness against fixed bounds), backlog (catch-up
after an outage: 40 days, five a micro-batch), longhaul (housekeeping off and on in hour-long
runs at the live trigger; 30 days at one file a micro-batch with housekeeping, then the
nightly, maintenance, cleanup and `--reproduce` of every date), history (the whole nightly of
a day alone and after 1, 10 and 40 days of history). Full mode writes into `docs/`
by default and takes over an hour on a
2-core machine (speed ~10 min, latency ~4 min, state ~5 min, kafka ~5 min, scaleout ~8 min,
windows ~5-8 min, nightly ~22 min, curve ~20 s, lateness ~10-15 min, backlog ~20 min, longhaul
~75 min, history ~25 min, bigfile ~15-20 min, run last); `--quick`
(~7-13 min; the smoke test runs some of its sections, the others carried over from a
recorded quick run) writes into a new temporary
directory unless `--out` is given, so it never overwrites the committed results. A run of
some sections (`--only`) keeps the other sections' results of the same mode from the
output directory's benchmarks.json, each labelled with the date it was measured. Data goes
to `--work-dir` (default: a new directory under /tmp; an existing directory gets a new
directory inside it), deleted at the end unless `--keep`.

The command line loads this module to list `tally bench` (entry point group
`tally.commands`), so it imports no Spark at module level: the sections are imported when
they run.
"""

from __future__ import annotations

import argparse
import os
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
from typing import TYPE_CHECKING, Any

from bench.common import Backlog, SteadyRate, StreamShape, load_average, log, machine_info
from bench.findings import findings

if TYPE_CHECKING:  # bench.backlog imports Spark: the command line loads this module without it
    from bench.backlog import CatchUp
    from bench.history import History
    from bench.longhaul import LongHaul

FORMAT = 2  # of benchmarks.json: 2 since the issue-12 targets (throughput as processes, ...)

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SECTIONS = (
    "speed",
    "latency",
    "state",
    "kafka",
    "scaleout",
    "windows",
    "bigfile",
    "nightly",
    "curve",
    "lateness",
    "backlog",
    "longhaul",
    "history",
)


@dataclass(frozen=True)
class Preset:
    name: str
    # 1. throughput (speed)
    speed_events: int
    speed_files: int
    files_per_trigger: int
    previous_files_per_trigger: int
    repetitions: int
    # 3. latency
    latency_engines: tuple[str, ...]
    latency_window_ms: int
    latency_lateness_ms: int
    latency_trigger_ms: int
    latency_rate: int
    latency_run_s: float
    latency_warmup_s: float
    latency_lead_s: float
    # 2. per-batch fixed cost and 4. state (one run)
    state_events: int
    state_days: float
    state_files: int
    # 5. one big file
    bigfile_events: int
    bigfile_files: int
    # 6./7. nightly and curve
    nightly_sizes: tuple[int, ...]
    curve_size: int
    nightly_shared_events: int  # a nightly size generated in 100 files (0: none)
    nightly_files_per_batch: int  # micro-batches of the nightly section's batch load
    # 9. scale-out: the same commands on a standalone cluster and on S3
    scaleout_events: int
    scaleout_files: int
    scaleout_configurations: tuple[str, ...]
    # 10. window kinds: tumbling and hopping (S/H = 5) on one backlog
    windows_events: int
    windows_files: int
    windows_repetitions: int
    # 11. adaptive lateness: calm / burst / calm (bench.lateness)
    lateness_rate: int
    lateness_phase_s: tuple[int, int, int]
    lateness_file_s: int
    # 12. catch-up after an outage (bench.backlog)
    backlog_days: int
    backlog_events_per_day: int
    backlog_files_per_day: int
    backlog_days_per_batch: int
    # 13. the long haul (bench.longhaul)
    longhaul_days: int
    longhaul_files_per_day: int
    longhaul_events_per_file: int
    longhaul_live_minutes: int
    longhaul_live_events_per_file: int
    longhaul_modes: tuple[str, ...]
    # 14. the nightly's cost with history (bench.history)
    history_day_events: int
    history_day_files: int
    history_events_per_day: int
    history_days: tuple[int, ...]
    history_rounds: int
    # 14. restatements (bench.restatements): streamed days, events and files a day
    restate_days: int
    restate_events_per_day: int
    restate_files_per_day: int
    window_ms: int = 60_000
    lateness_ms: int = 30_000
    notes: list[str] = field(default_factory=list)

    @property
    def shape(self) -> StreamShape:
        """The throughput, state and big-file runs' window, lateness and files per trigger."""
        return StreamShape(self.window_ms, self.lateness_ms, self.files_per_trigger)

    @property
    def nightly_shape(self) -> StreamShape:
        """The nightly section's batch load: micro-batches as they were measured before."""
        return StreamShape(self.window_ms, self.lateness_ms, self.nightly_files_per_batch)

    @property
    def speed_backlog(self) -> Backlog:
        return Backlog(self.speed_events, self.speed_files, seed=7)

    @property
    def state_backlog(self) -> Backlog:
        return Backlog(self.state_events, self.state_files, seed=17, days=self.state_days)

    @property
    def bigfile_backlog(self) -> Backlog:
        return Backlog(self.bigfile_events, self.bigfile_files, seed=23)

    @property
    def nightly_shared(self) -> Backlog:
        """The input the nightly size `nightly_shared_events` and the curve share: 100 files
        (the layout they were measured on before)."""
        return Backlog(self.nightly_shared_events, 100, seed=7)

    @property
    def windows_backlog(self) -> Backlog:
        return Backlog(self.windows_events, self.windows_files, seed=31)

    @property
    def catch_up(self) -> CatchUp:
        from bench.backlog import CatchUp

        return CatchUp(
            self.backlog_days,
            self.backlog_events_per_day,
            self.backlog_files_per_day,
            self.backlog_days_per_batch,
        )

    @property
    def long_haul(self) -> LongHaul:
        from bench.longhaul import LongHaul

        return LongHaul(
            self.longhaul_days,
            self.longhaul_files_per_day,
            self.longhaul_events_per_file,
            self.longhaul_live_minutes,
            self.longhaul_live_events_per_file,
            self.longhaul_modes,
        )

    @property
    def history(self) -> History:
        from bench.history import History

        return History(
            self.history_day_events,
            self.history_day_files,
            self.history_events_per_day,
            self.history_days,
            self.history_rounds,
        )

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


# Both presets side by side, setting: (full, quick). Expected full-mode durations on 2 cores
# (see each section's module): speed ~10 min, latency ~4 min, state ~5 min, kafka ~5 min,
# scaleout ~8 min, windows ~5-8 min, nightly ~22 min, curve ~20 s, backlog ~20 min, longhaul
# ~75 min, bigfile ~15-20 min: over three hours.
_PRESETS: dict[str, tuple[Any, Any]] = {
    # 1. throughput. full: 100 files of 20k events, 10 files a trigger: 10 micro-batches of
    # ~200k lines; the previous configuration: 50 files a trigger (~1M lines a batch)
    "speed_events": (2_000_000, 20_000),
    "speed_files": (100, 10),
    "files_per_trigger": (10, 2),
    "previous_files_per_trigger": (50, 10),
    "repetitions": (2, 1),
    # 3. latency: 1,000 events/s, 2 s trigger, L = 5 s, 10 s windows (target 9 s)
    "latency_engines": (("tally", "plain"), ("tally",)),
    "latency_window_ms": (10_000, 5_000),
    "latency_lateness_ms": (5_000, 2_000),
    "latency_trigger_ms": (2_000, 2_000),
    "latency_rate": (1_000, 200),
    "latency_run_s": (90.0, 30.0),
    "latency_warmup_s": (20.0, 8.0),
    "latency_lead_s": (5.0, 3.0),
    # 2./4. state: 10x the throughput run's micro-batches at ~20k lines each. full: 1,000
    # files of 2k events over 10 days, 10 a trigger: 100 batches; quick: 20 batches of ~1k
    "state_events": (2_000_000, 20_000),
    "state_days": (10.0, 2.0),
    "state_files": (1_000, 40),
    # 5. one big file: full ~2 GB (17.5M events at ~114 bytes a line), quick ~20 MB
    "bigfile_events": (17_500_000, 175_000),
    "bigfile_files": (100, 100),
    # 6./7. nightly and curve (as before; quick: one size, so no growth figure)
    "nightly_sizes": ((1_000_000, 5_000_000, 20_000_000), (20_000,)),
    "curve_size": (5_000_000, 20_000),
    "nightly_shared_events": (5_000_000, 0),
    "nightly_files_per_batch": (20, 2),
    # 9. scale-out: full 200k events in 20 files (2 batches of ~100k lines) in all four
    # configurations; quick: cluster + S3 only (the code runs; the ratios need a full run)
    "scaleout_events": (200_000, 4_000),
    "scaleout_files": (20, 4),
    "scaleout_configurations": (("local", "cluster", "s3", "cluster_s3"), ("cluster_s3",)),
    # 10. window kinds. full: 1M events in 50 files, 10 a trigger (the throughput run's ~200k
    # lines a micro-batch, half its batches: a hopping run costs more than a tumbling one), 2
    # rounds of tumbling and hopping; quick: 2 files of 2k events (one micro-batch + the
    # drain: each process is mostly JVM start), one round
    "windows_events": (1_000_000, 4_000),
    "windows_files": (50, 2),
    "windows_repetitions": (2, 1),
    # 11. adaptive lateness: 400 events/s in 10 s files (one a micro-batch: a 10 s trigger).
    # full: calm 1 min, a 2-minute delivery degradation of one source partition in four, calm
    # 3 min (its stragglers arrive for 40 s, then auto's 1-minute horizon forgets them), 42
    # batches per engine (docs/benchmarks.md, section 11: why these lengths); quick: 15/15/20 s,
    # 11 batches per engine: a burst shorter than its delays, only shows the code runs
    "lateness_rate": (400, 400),
    "lateness_phase_s": ((60, 120, 180), (15, 15, 20)),
    "lateness_file_s": (10, 10),
    # 12. catch-up: issue 39's backlog. full: 40 days of 500k events in 5 files a day, 5 days
    # (25 files, ~2.5M lines) a micro-batch: 8 batches; quick: 6 days of 2k events, 2 a batch
    "backlog_days": (40, 6),
    "backlog_events_per_day": (500_000, 2_000),
    "backlog_files_per_day": (5, 5),
    "backlog_days_per_batch": (5, 2),
    # 13. the long haul: issue 39's 30-day warehouse at one file (~4,000 events) a micro-batch,
    # 24 a day (a batch every hour of stream time): 720 batches, housekeeping on (`replay`);
    # housekeeping's cost in runs of an hour at the default 5 s trigger (720 batches of ~1,000
    # events), off, thread and inline; quick: 2 days of 8 files, cost runs of 4 minutes (48
    # batches of 250), off and thread
    "longhaul_days": (30, 2),
    "longhaul_files_per_day": (24, 8),
    "longhaul_events_per_file": (4_000, 250),
    "longhaul_live_minutes": (60, 4),
    "longhaul_live_events_per_file": (1_000, 250),
    "longhaul_modes": (("off", "thread", "inline", "replay"), ("off", "thread", "replay")),
    # 14. the nightly with history (issue 40): a day of 200k events alone and after 1, 10 and
    # 40 days of 500k, three rounds of whole `tally reconcile` processes; quick: 2k events
    # after 1 and 3 days of 5k, one round
    "history_day_events": (200_000, 2_000),
    "history_day_files": (100, 4),
    "history_events_per_day": (500_000, 5_000),
    "history_days": ((1, 10, 40), (1, 3)),
    "history_rounds": (3, 1),
    # 14. restatements (issue 40 part 2): 31 streamed days of 20k events (30 reconciled);
    # quick: 4 days of 400 (3 reconciled)
    "restate_days": (31, 4),
    "restate_events_per_day": (20_000, 400),
    "restate_files_per_day": (4, 2),
}
FULL = Preset(name="full", **{k: full for k, (full, _) in _PRESETS.items()})
QUICK = Preset(
    name="quick",
    notes=["quick mode: tiny inputs, one repetition; the numbers only show the code runs"],
    **{k: quick for k, (_, quick) in _PRESETS.items()},
)


# -- the run --------------------------------------------------------------------------------------


def engine_master(spark: Any) -> str:
    """The master every engine process runs on: the bench session's (local[*] spelled out)."""
    master = str(spark.sparkContext.master)
    return f"local[{os.cpu_count() or 1}]" if master == "local[*]" else master


class BenchRun:
    """The sections of one run, sharing the session, the preset and the work directory; a
    section's failure is recorded in `errors` and the next section still runs."""

    def __init__(self, spark: Any, preset: Preset, work: Path, only: tuple[str, ...]) -> None:
        from bench.engines import EngineEnv

        self.spark = spark
        self.preset = preset
        self.work = work
        self.only = only
        self.errors: dict[str, str] = {}
        self.env = EngineEnv(
            engine_master(spark), int(spark.conf.get("spark.sql.shuffle.partitions") or 4)
        )
        self.results: dict[str, Any] = {
            "format": FORMAT,
            "mode": preset.name,
            "machine": machine_info(spark),
            "preset": dict(preset.__dict__),
            "engine_env": dict(self.env.__dict__),
            "sections_s": {},
            "measured": {},
        }

    def section(self, name: str, body: Callable[[], None]) -> None:
        """Run one section, timed; a failure is logged and recorded."""
        t0 = time.monotonic()
        log(f"{name}: starting")
        try:
            body()
        except Exception as exc:
            log(f"{name}: FAILED: {exc!r}")
            traceback.print_exc(file=sys.stderr)
            message = str(exc).splitlines()[0] if str(exc) else ""
            self.errors[name] = f"{type(exc).__name__}: {message}"
        self.results["sections_s"][name] = time.monotonic() - t0
        if self.results.get(name) is not None:
            self.results["measured"][name] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M")

    def run(self, keep: bool) -> None:
        """Every section in `only`; the work directory is deleted unless `keep`."""
        wanted = set(self.only)
        try:
            for name, body in (
                ("speed", self.speed),
                ("latency", self.latency),
                ("state", self.state),
                ("kafka", self.kafka),
                ("scaleout", self.scaleout),
                ("windows", self.windows),
                ("lateness", self.lateness),
                ("backlog", self.backlog),
                ("longhaul", self.longhaul),
                ("history", self.history),
            ):
                if name in wanted:
                    self.section(name, body)
            if {"nightly", "curve"} & wanted:
                self.section("nightly", lambda: self.nightly(keep))
            if "bigfile" in wanted:  # last: the longest single runs
                self.section("bigfile", self.bigfile)
        finally:
            if not keep:
                shutil.rmtree(self.work, ignore_errors=True)

    def speed(self) -> None:
        from bench import speed

        p = self.preset
        self.results["speed"] = speed.speed_section(
            self.spark,
            self.work,
            p.speed_backlog,
            p.shape,
            p.previous_files_per_trigger,
            p.repetitions,
            self.env,
        )

    def latency(self) -> None:
        from bench import latency

        p = self.preset
        self.results["latency"] = latency.latency_section(
            self.spark, self.work, p.latency_engines, p.latency_shape, p.steady
        )

    def state(self) -> None:
        from bench import state

        self.results["state"] = state.state_section(
            self.spark, self.work, self.preset.state_backlog, self.preset.shape, self.env
        )

    def kafka(self) -> None:
        from bench import kafka_source

        self.results["kafka"] = kafka_source.kafka_section(
            self.spark, self.work, self.preset.speed_backlog, self.preset.shape, self.env
        )

    def scaleout(self) -> None:
        from bench import scaleout

        p = self.preset
        self.results["scaleout"] = scaleout.scaleout_section(
            self.work,
            Backlog(p.scaleout_events, p.scaleout_files, seed=29),
            p.shape,
            p.scaleout_configurations,
        )

    def windows(self) -> None:
        from bench import windows

        p = self.preset
        self.results["windows"] = windows.windows_section(
            self.spark, self.work, p.windows_backlog, p.shape, p.windows_repetitions, self.env
        )

    def lateness(self) -> None:
        from bench import lateness

        p = self.preset
        self.results["lateness"] = lateness.lateness_section(
            self.spark,
            self.work,
            lateness.LatenessBench(p.lateness_rate, p.lateness_phase_s, p.lateness_file_s),
        )

    def backlog(self) -> None:
        from bench import backlog

        self.results["backlog"] = backlog.backlog_section(
            self.spark, self.work, self.preset.catch_up, self.env
        )

    def longhaul(self) -> None:
        from bench import longhaul

        self.results["longhaul"] = longhaul.longhaul_section(
            self.spark, self.work, self.preset.long_haul, self.env
        )

    def history(self) -> None:
        from bench import history, restatements

        p = self.preset
        self.results["history"] = history.history_section(
            self.spark, self.work, p.history, p.nightly_shape, self.env.master
        )
        restated = restatements.Restated(
            p.restate_days, p.restate_events_per_day, p.restate_files_per_day
        )
        self.results["history"]["restatements"] = restatements.restatements_section(
            self.spark, self.work, restated, p.nightly_shape, self.env.master
        )

    def bigfile(self) -> None:
        from bench import bigfile

        self.results["bigfile"] = bigfile.bigfile_section(
            self.spark, self.work, self.preset.bigfile_backlog, self.preset.shape, self.env
        )

    def _nightly_input(self, events: int) -> Path | None:
        """The shared 100-file input for the size that has one (generated once), else None."""
        from bench.speed import generate_backlog

        p = self.preset
        if not p.nightly_shared_events or events != p.nightly_shared_events:
            return None
        shared = self.work / "nightly_shared_input"
        if not shared.is_dir():
            log(f"nightly: generating the shared {events:,}-event input in 100 files")
            generate_backlog(shared, p.nightly_shared)
        return shared

    def nightly(self, keep: bool) -> None:
        """Every nightly size (only the curve's when the nightly section is not wanted), and
        the lateness curve on the curve's size."""
        from bench import nightly

        p = self.preset
        sizes: list[dict[str, Any]] = []
        if "nightly" in self.only:  # the sizes done so far are reported if a later one fails
            self.results["nightly"] = {
                "sizes": sizes,
                "files_per_batch": p.nightly_files_per_batch,
                "growth": None,
                "library_import_s": nightly.import_stage_libraries(),
            }
        for events in p.nightly_sizes if "nightly" in self.only else (p.curve_size,):
            size_dir = self.work / f"nightly_{events}"
            sizes.append(
                nightly.nightly_size(
                    self.spark,
                    self.work,
                    events,
                    p.nightly_shape,
                    input_dir=self._nightly_input(events),
                )
            )
            if events == p.curve_size and "curve" in self.only:
                self.section("curve", partial(self.curve, size_dir / "warehouse", events))
            if not keep:  # the largest sizes take gigabytes
                shutil.rmtree(size_dir, ignore_errors=True)
        shutil.rmtree(self.work / "nightly_shared_input", ignore_errors=True)
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
    class_archives: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run the sections in `only` and write the outputs; returns the results (with paths).
    `class_archives`: what `bench.warmup` found and did before the session started."""
    from bench import report

    out, work = _directories(quick, out_dir, work_dir)
    started = datetime.now(UTC)
    clock = time.monotonic()
    bench = BenchRun(spark, QUICK if quick else FULL, work, only)
    results = bench.results
    results.update(command=command, started=started.strftime("%Y-%m-%d %H:%M"))
    results["class_archives"] = class_archives
    bench.run(keep)
    results["errors"] = bench.errors
    results["total_s"] = time.monotonic() - clock
    results["load_average_at_end"] = load_average()
    # a partial run keeps the other sections' earlier results (labelled with their date)
    report.carry_previous(results, out, [s for s in SECTIONS if s not in only])
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
    for package in ("duckdb", "psutil"):
        try:
            __import__(package)
        except ImportError:
            print(f"tally: bench needs {package}: pip install -e '.[bench]'", file=sys.stderr)
            return 2
    warmup = None
    if not args.quick and settings.driver_cds:  # before the bench's own JVM starts
        from bench.warmup import ensure_class_archives

        with tempfile.TemporaryDirectory(prefix="tally-bench-warmup-") as scratch:
            warmup = ensure_class_archives(Path(scratch), settings.spark_master)
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
        class_archives=warmup,
    )
    print(f"wrote {results['outputs']['md']}")
    for line in results["findings"]:
        print(f"- {line}")
    return 0


def add_commands(subparsers: Any) -> None:
    """Add `tally bench` (issue 7). Exit codes: 0 written, 2 bad argument or missing duckdb."""
    parser = subparsers.add_parser(
        "bench",
        help="benchmark the speed layer (throughput, per-batch cost, latency, state, window "
        "kinds, one big file) and the nightly job against plain Spark and DuckDB; write "
        "docs/benchmarks.md",
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
        "--only",
        default=None,
        help=f"comma-separated sections (default all: {','.join(SECTIONS)}); the report keeps "
        "the other sections' earlier results from benchmarks.json, labelled with their date",
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
