"""A real Spark standalone cluster for tests: scripts/cluster.sh (one master, one worker) on free
ports, its pids, logs and the worker's work directory in a temporary folder, stopped by its
pids whatever happens."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tally_tools.ports import free_ports

__all__ = ["Cluster", "spark_cluster"]

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SCRIPT = PROJECT_ROOT / "scripts" / "cluster.sh"


@dataclass(frozen=True)
class Cluster:
    master_url: str  # spark://127.0.0.1:PORT
    ui_url: str  # the master's web UI; its state as JSON at /json/
    home: Path  # TALLY_CLUSTER_HOME: master.log, worker.log, *.pid, work/
    env: dict[str, str]  # the environment scripts/cluster.sh runs with
    start_seconds: float  # `cluster.sh start` until the worker had registered

    def run(self, command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(SCRIPT), command], env=self.env, capture_output=True, text=True, timeout=120
        )

    def state(self) -> dict[str, Any]:
        """The master's view: workers, cores, active and completed applications."""
        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=10) as response:
            return dict(json.load(response))

    def applications(self) -> list[dict[str, Any]]:
        """Every application the master has seen, oldest first."""
        state = self.state()
        apps = [*state["completedapps"], *state["activeapps"]]
        return sorted(apps, key=lambda a: a["starttime"])

    def finished_application(self, name: str, timeout_s: float = 60.0) -> dict[str, Any]:
        """The one application called NAME, once the master has moved it to its completed list.
        The driver's process can exit a moment before the master notices the disconnection, so
        a check right after the process ended can still read RUNNING."""
        deadline = time.monotonic() + timeout_s
        while True:
            (app,) = [a for a in self.applications() if a["name"] == name]
            if app["state"] != "RUNNING" or time.monotonic() > deadline:
                return app
            time.sleep(0.5)

    def executor_dirs(self, app_id: str) -> list[Path]:
        """The worker's directory of each executor the application had (stdout, stderr, jars)."""
        return sorted(p for p in (self.home / "work" / app_id).glob("*") if p.is_dir())

    def pids(self) -> list[int]:
        return [
            int(p.read_text())
            for p in (self.home / "master.pid", self.home / "worker.pid")
            if p.exists() and p.read_text().strip()
        ]


@contextlib.contextmanager
def spark_cluster(home: Path, cores: int = 2, memory: str = "2g") -> Iterator[Cluster]:
    """Start a cluster whose worker offers `cores` and `memory`; stop it on exit, by its
    recorded pids (SIGKILL for whatever `cluster.sh stop` left)."""
    port, ui_port, worker_ui_port = free_ports(3)
    env = {
        **os.environ,
        "TALLY_CLUSTER_HOME": str(home),
        "TALLY_CLUSTER_PORT": str(port),
        "TALLY_CLUSTER_UI_PORT": str(ui_port),
        "TALLY_CLUSTER_WORKER_UI_PORT": str(worker_ui_port),
        "TALLY_CLUSTER_CORES": str(cores),
        "TALLY_CLUSTER_MEMORY": memory,
    }
    started = time.monotonic()
    result = subprocess.run(
        [str(SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=180
    )
    cluster = Cluster(
        f"spark://127.0.0.1:{port}",
        f"http://127.0.0.1:{ui_port}",
        home,
        env,
        time.monotonic() - started,
    )
    try:
        if result.returncode != 0:
            raise RuntimeError(f"cluster.sh start failed: {result.stderr or result.stdout}")
        yield cluster
    finally:
        pids = cluster.pids()
        with contextlib.suppress(subprocess.TimeoutExpired):
            cluster.run("stop")
        for pid in pids:  # only if `stop` could not end it, and only our own daemon
            if _is_daemon_of(pid, port, home):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def _is_daemon_of(pid: int, port: int, home: Path) -> bool:
    """Whether `pid` is still this cluster's master (its port) or worker (its work dir)."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    text = [a.decode(errors="replace") for a in args]
    if "org.apache.spark.deploy.master.Master" in text:
        return str(port) in text
    if "org.apache.spark.deploy.worker.Worker" in text:
        return str(home / "work") in text
    return False
