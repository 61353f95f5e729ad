"""Before anything is timed, the driver JVMs' class data archives exist (`tally.driver_cds`).

A `tally` process that finds no archive for its JDK and class path writes one at exit (~200 MB,
tens of seconds): a training run. Timed, it measures that dump, not the command (session 18's
Kafka section: 116.7 s for a training run, 82.3 s for the next one). So a full benchmark first
looks for the two archives (`tally.spark.cds_profile`: the stream's, and the batch commands'
one) and, when one is missing, runs a tiny stream and its reconciliation, untimed, to write
them. The bench's own session is built afterwards and maps the batch archive like any other
batch command.
"""

from __future__ import annotations

import time
from pathlib import Path

from bench.common import Backlog, StreamShape, log, run_process
from tally import driver_cds

PROFILES = ("tally-stream", "tally-batch")
WARMUP_INPUT = Backlog(events=2_000, files=2, seed=11)
WARMUP_SHAPE = StreamShape(window_ms=60_000, lateness_ms=30_000, max_files_per_trigger=1)


def missing_archives(directory: Path, key: str) -> list[str]:
    """The profiles in `PROFILES` without an archive for `key` in `directory`."""
    missing = []
    for profile in PROFILES:
        archive = driver_cds.plan(directory, profile, key, now=0.0, pid=0).archive
        if not (archive.is_file() and archive.stat().st_size > 0):
            missing.append(profile)
    return missing


def forget_attempts(directory: Path, key: str, profiles: list[str]) -> None:
    """Remove the attempt markers of `profiles` so the warm-up's processes train (a marker
    younger than `RETRY_S` makes a run go without an archive, and the benchmark would then
    time processes that a user's second run would not be)."""
    for profile in profiles:
        archive = driver_cds.plan(directory, profile, key, now=0.0, pid=0).archive
        archive.with_name(archive.name + ".attempt").unlink(missing_ok=True)


def ensure_class_archives(work: Path, master: str) -> dict[str, object]:
    """Write the missing archives with a tiny stream and reconciliation under `work`; what was
    found and done, for the results."""
    from bench.scaleout import reconcile_argv, stream_argv
    from bench.speed import generate_backlog
    from tally.spark import cds_dir, driver_class_path

    directory = cds_dir()
    key = driver_cds.archive_key(driver_cds.jdk_files(driver_cds.java_home()) + driver_class_path())
    missing = missing_archives(directory, key)
    if not missing:
        log("class data archives: both present (no warm-up)")
        return {"missing": [], "seconds": 0.0}
    log(f"class data archives missing for {', '.join(missing)}: a tiny untimed warm-up run")
    forget_attempts(directory, key, missing)
    root = work / "warmup"
    generate_backlog(root / "input", WARMUP_INPUT)
    started = time.monotonic()
    warehouse = str(root / "warehouse")
    stream = stream_argv(str(root / "input"), warehouse, master, WARMUP_SHAPE)
    run_process("warmup_stream", stream, root / "logs")
    # exit 1 says a check failed (two files spanning a day: the watermark lag check does); the
    # JVM exits cleanly and writes its archive either way
    try:
        reconcile = reconcile_argv(warehouse, master, root / "reports")
        run_process("warmup_reconcile", reconcile, root / "logs")
    except Exception as exc:
        log(f"class data warm-up: reconcile: {str(exc).splitlines()[0]}")
    seconds = time.monotonic() - started
    still = missing_archives(directory, key)
    log(f"class data warm-up: {seconds:.0f} s; still missing: {', '.join(still) or 'none'}")
    return {"missing": missing, "seconds": round(seconds, 1), "still_missing": still}
