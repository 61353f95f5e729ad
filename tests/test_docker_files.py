"""The cluster deployment files stay in step with the repository (no Docker engine here to build
them, so check what can be checked: the compose file parses, and every COPY source exists)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def test_compose_file_declares_the_cluster() -> None:
    compose = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"spark-master", "spark-worker", "stream", "airflow"}
    assert services["stream"]["environment"]["TALLY_SPARK_MASTER"] == "spark://spark-master:7077"
    for name, service in services.items():
        assert service["build"]["dockerfile"] == "docker/Dockerfile", name
    text = (ROOT / "docker" / "compose.yaml").read_text().lower()
    assert "password" not in text and "secret" not in text


def test_dockerfile_copies_only_existing_paths() -> None:
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    sources = [
        src
        for line in dockerfile.splitlines()
        if (m := re.match(r"^COPY\s+(.+)\s+\S+$", line))
        for src in m.group(1).split()
    ]
    assert sources, "no COPY lines found"
    missing = [s for s in sources if not (ROOT / s.rstrip("/")).exists()]
    assert missing == []
