"""A real Kafka broker for tests: scripts/kafka.sh on a free port, data in a temporary folder,
stopped by its pid whatever happens."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tally_tools.ports import free_port_pair

__all__ = ["Broker", "kafka_broker"]

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SCRIPT = PROJECT_ROOT / "scripts" / "kafka.sh"


@dataclass(frozen=True)
class Broker:
    bootstrap: str
    home: Path
    env: dict[str, str]

    def run(self, command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(SCRIPT), command], env=self.env, capture_output=True, text=True, timeout=120
        )

    @property
    def pid(self) -> int | None:
        pid_file = self.home / "kafka.pid"
        return int(pid_file.read_text()) if pid_file.exists() else None


@contextmanager
def kafka_broker(home: Path) -> Iterator[Broker]:
    port = free_port_pair()
    env = {
        **os.environ,
        "TALLY_KAFKA_HOME": str(home),
        "TALLY_KAFKA_PORT": str(port),
        "TALLY_KAFKA_HEAP": "384m",
    }
    broker = Broker(f"127.0.0.1:{port}", home, env)
    started = broker.run("start")
    try:
        if started.returncode != 0:
            raise RuntimeError(f"kafka.sh start failed: {started.stderr or started.stdout}")
        yield broker
    finally:
        broker.run("stop")
