"""An S3-compatible endpoint for tests: scripts/s3.sh (moto's server) on a free port, its pid
file and log in a temporary folder, stopped by its pid whatever happens.

The credentials are dummy values, set only in the environment of the processes a test starts
(`S3Server.env`): never in this process's environment, so the test session's own JVM and every
other test run without them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tally_tools.ports import free_port

__all__ = ["REGION", "S3Server", "s3_server"]

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SCRIPT = PROJECT_ROOT / "scripts" / "s3.sh"
REGION = "us-east-1"
ACCESS_KEY = "testing"
SECRET_KEY = "testing"


@dataclass(frozen=True)
class S3Server:
    endpoint: str  # http://127.0.0.1:PORT
    home: Path
    env: dict[str, str]  # for child processes: TALLY_S3_*, AWS_* (dummy credentials)

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(SCRIPT), *args], env=self.env, capture_output=True, text=True, timeout=60
        )

    def bucket(self, name: str) -> None:
        made = self.run("bucket", name)
        if made.returncode != 0:
            raise RuntimeError(f"s3.sh bucket {name} failed: {made.stderr or made.stdout}")

    def client(self):  # type: ignore[no-untyped-def]
        """A boto3 client of this server, with the dummy credentials passed explicitly."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
        )

    @property
    def pid(self) -> int | None:
        pid_file = self.home / "s3.pid"
        return int(pid_file.read_text()) if pid_file.exists() else None


def child_env(port: int, home: Path) -> dict[str, str]:
    """This process's environment without TALLY_* and AWS_* (a developer's own profile, token
    or endpoint must not leak into a test), plus the server's settings and dummy credentials."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TALLY_", "AWS_"))}
    return {
        **base,
        "TALLY_S3_HOME": str(home),
        "TALLY_S3_PORT": str(port),
        "TALLY_S3_ENDPOINT": f"http://127.0.0.1:{port}",
        "TALLY_S3_REGION": REGION,
        "TALLY_S3_PATH_STYLE": "true",
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_REGION": REGION,
    }


@contextmanager
def s3_server(home: Path) -> Iterator[S3Server]:
    port = free_port()
    server = S3Server(f"http://127.0.0.1:{port}", home, child_env(port, home))
    try:
        started = server.run("start")
        if started.returncode != 0:
            raise RuntimeError(f"s3.sh start failed: {started.stderr or started.stdout}")
        yield server
    finally:
        pid = server.pid
        try:
            stopped = server.run("stop").returncode == 0
        except subprocess.TimeoutExpired:
            stopped = False
        if not stopped and pid is not None:  # the script failed: its recorded pid goes anyway
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
