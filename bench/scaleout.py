"""Section 9 (scaleout): the same commands on a Spark standalone cluster and on S3.

One generated input. `scripts/s3.sh` (moto's S3 server) and `scripts/cluster.sh` (a standalone
master and one worker, 2 cores) are started for the section on free ports, their start-up
timed, and stopped by their pids whatever happens. Then each configuration runs, as OS
processes timed from start to exit (JVM start included), the commands a user runs:

    tally stream --available-now --drain --clock arrival ...   then   tally reconcile --date D

* local: `local[2]`, warehouse and checkpoint on local disk (the baseline);
* cluster: `spark://127.0.0.1:PORT`, executors in the worker's JVMs, local disk;
* s3: `local[2]`, warehouse and checkpoint on `s3a://bench/...`;
* cluster_s3: both.

The configurations must agree: the reconciliation's summary line (windows, counts, sums, gap,
unexplained) is compared across them.

Expected duration, full mode on 2 cores: ~6-8 min; quick (cluster + S3 only, so the code
runs; no ratio): ~2 min.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.common import DAY, Backlog, StreamShape, log, run_process, stopwatch
from bench.speed import generate_backlog
from tally.durations import format_duration
from tally_tools.ports import free_ports

PROJECT_ROOT = Path(__file__).resolve().parent.parent
BUCKET = "bench"
CONFIGURATIONS = ("local", "cluster", "s3", "cluster_s3")
# Dummy credentials for the section's own S3 server, set only for the processes it starts.
S3_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"}


def _script(name: str, command: str, env: dict[str, str], *args: str) -> None:
    done = subprocess.run(
        [str(PROJECT_ROOT / "scripts" / name), command, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{name} {command}: {(done.stderr or done.stdout).strip()}")


@contextmanager
def started(name: str, env: dict[str, str], timings: dict[str, float]) -> Iterator[None]:
    """`scripts/<name> start` timed into `timings[name]`; `stop` (by pid) whatever happens."""
    try:
        with stopwatch() as t:
            _script(name, "start", env)
        timings[name] = t["s"]
        yield
    finally:
        _script(name, "stop", env)


def services_env(work: Path) -> dict[str, str]:
    """The environment of the servers and of every command: S3 endpoint and credentials."""
    s3_port, master, ui, worker_ui = free_ports(4)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TALLY_", "AWS_"))}
    return {
        **base,
        **S3_CREDENTIALS,
        "AWS_REGION": "us-east-1",
        "TALLY_S3_HOME": str(work / "s3"),
        "TALLY_S3_PORT": str(s3_port),
        "TALLY_S3_ENDPOINT": f"http://127.0.0.1:{s3_port}",
        "TALLY_S3_REGION": "us-east-1",
        "TALLY_S3_PATH_STYLE": "true",
        # the worker (and so its executors) inherits this environment: S3 credentials too
        "TALLY_CLUSTER_HOME": str(work / "cluster"),
        "TALLY_CLUSTER_PORT": str(master),
        "TALLY_CLUSTER_UI_PORT": str(ui),
        "TALLY_CLUSTER_WORKER_UI_PORT": str(worker_ui),
        "TALLY_CLUSTER_CORES": "2",
        "TALLY_CLUSTER_MEMORY": "3g",
    }


def stream_argv(input_dir: str, warehouse: str, master: str, shape: StreamShape) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tally_app.cli",
        "stream",
        "--available-now",
        "--drain",
        "--clock",
        "arrival",
        "--input",
        input_dir,
        "--warehouse",
        warehouse,
        "--window",
        format_duration(shape.window_ms),
        "--lateness",
        format_duration(shape.lateness_ms),
        "--max-files-per-trigger",
        str(shape.max_files_per_trigger),
        "--spark-master",
        master,
        "--shuffle-partitions",
        "2",
    ]


def reconcile_argv(warehouse: str, master: str, out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tally_app.cli",
        "reconcile",
        "--date",
        DAY.date().isoformat(),
        "--warehouse",
        warehouse,
        "--spark-master",
        master,
        "--out",
        str(out),
    ]


def books(stdout: str) -> str:
    """The reconciliation's summary (`tally reconcile`'s lines before `validation:`) without
    its table versions (they name commits, not numbers): what must be equal across
    configurations."""
    summary = stdout.split("\nvalidation:")[0]
    return re.sub(r"\s+", " ", summary.partition("): ")[2]).strip()


def run_configuration(
    name: str, input_dir: str, work: Path, master: str, env: dict[str, str], shape: StreamShape
) -> dict[str, Any]:
    """Stream then reconcile in one configuration; wall seconds of each, the books."""
    warehouse = f"s3a://{BUCKET}/{name}" if name.endswith("s3") else str(work / name / "wh")
    logs = work / name / "logs"
    stream = run_process(
        f"{name}_stream", stream_argv(input_dir, warehouse, master, shape), logs, env=env
    )
    # reconcile exits 1 when the day's books do not balance: that is a result, not a failure
    reconcile = run_process_allowing(
        f"{name}_reconcile", reconcile_argv(warehouse, master, work / name / "reports"), logs, env
    )
    run = {
        "warehouse": warehouse,
        "master": master,
        "stream_s": stream.seconds,
        "reconcile_s": reconcile["seconds"],
        "books": books(reconcile["stdout"]),
        "reconcile_exit": reconcile["returncode"],
    }
    log(f"scaleout: {name}: stream {stream.seconds:.1f} s, reconcile {reconcile['seconds']:.1f} s")
    return run


def run_process_allowing(
    name: str, argv: Sequence[str], logs: Path, env: dict[str, str]
) -> dict[str, Any]:
    """A timed process that may exit 1 (a finding the command prints, e.g. a failed
    expectation: the run itself completed); any other non-zero exit raises."""
    logs.mkdir(parents=True, exist_ok=True)
    with stopwatch() as t:
        done = subprocess.run(
            list(argv), env=env, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=3600
        )
    (logs / f"{name}.out").write_text(done.stdout)
    (logs / f"{name}.err").write_text(done.stderr)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"{name}: exit code {done.returncode}: {done.stderr.strip()[-500:]}")
    return {"seconds": t["s"], "returncode": done.returncode, "stdout": done.stdout}


def scaleout_section(
    work: Path, backlog: Backlog, shape: StreamShape, configurations: Sequence[str]
) -> dict[str, Any]:
    root = work / "scaleout"
    input_dir = root / "input"
    log(f"scaleout: generating {backlog.events:,} events in {backlog.files} files")
    manifest = generate_backlog(input_dir, backlog)
    env = services_env(root)
    startup: dict[str, float] = {}
    runs: dict[str, dict[str, Any]] = {}
    with started("s3.sh", env, startup), started("cluster.sh", env, startup):
        _script("s3.sh", "bucket", env, BUCKET)
        cluster = f"spark://127.0.0.1:{env['TALLY_CLUSTER_PORT']}"
        for name in configurations:
            master = cluster if name.startswith("cluster") else "local[2]"
            runs[name] = run_configuration(name, str(input_dir), root, master, env, shape)
    shutil.rmtree(root, ignore_errors=True)
    base = runs[configurations[0]]
    for run in runs.values():
        run["stream_ratio"] = run["stream_s"] / base["stream_s"]
        run["reconcile_ratio"] = run["reconcile_s"] / base["reconcile_s"]
    return {
        "events": backlog.events,
        "lines": int(manifest["lines"]),
        "files": backlog.files,
        "files_per_trigger": shape.max_files_per_trigger,
        "startup_s": {"s3": startup["s3.sh"], "cluster": startup["cluster.sh"]},
        "runs": runs,
        "books_equal": len({run["books"] for run in runs.values()}) == 1,
    }
