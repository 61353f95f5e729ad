"""The house's floors: the import contracts hold, the command line stands without the floors
above it (bench/, dags/) and without Airflow, and the Docker image's file set starts the CLI."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SITE_PACKAGES = sysconfig.get_paths()["purelib"]

# Run Python without the site machinery (so the editable install's path hook, which would find
# any package of the repository, is not loaded) on exactly the given directories.
NO_AIRFLOW = """
import sys
class NoAirflow:
    def find_spec(self, name, path=None, target=None):
        if name == "airflow" or name.startswith("airflow."):
            raise ImportError(f"{name} is not importable here")
sys.meta_path.insert(0, NoAirflow())
from tally_app.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _python(code: str, *args: str, path: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {
        "PYTHONPATH": ":".join(path),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(cwd),
        "PYSPARK_PYTHON": sys.executable,
    }
    env.update({k: v for k, v in os.environ.items() if k in ("JAVA_HOME", "TMPDIR")})
    return subprocess.run(
        [sys.executable, "-S", "-c", code, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_import_contracts_hold() -> None:
    """import-linter (`make check` runs it too): floors, no Airflow or GX below their floors."""
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_no_import_cycle_among_production_modules() -> None:
    import grimp

    graph = grimp.build_graph(
        "tally", "tally_app", "streaming", "batch", "expectations", "dags", "bench"
    )
    cycles = sorted(
        (module, imported)
        for module in graph.modules
        for imported in graph.find_modules_directly_imported_by(module)
        if graph.chain_exists(importer=imported, imported=module)
    )
    assert cycles == []


def test_show_runs_without_airflow(spark, warehouse, tmp_path) -> None:
    from tally import tables as T

    T.ensure_table(spark, warehouse, T.STREAM_PROGRESS)
    result = _python(
        NO_AIRFLOW,
        "show",
        "stream_progress",
        "--warehouse",
        warehouse,
        "--spark-master",
        "local[1]",
        path=[str(ROOT), SITE_PACKAGES],
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "batch_id" in result.stdout and "watermark_after" in result.stdout
    # the command prints its result, not Spark's or the JVM's log lines
    assert result.stderr == ""


def _docker_copies() -> list[str]:
    """The repository paths the Dockerfile copies into the image."""
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    return [
        src
        for line in dockerfile.splitlines()
        if (m := re.match(r"^COPY\s+(.+)\s+\S+$", line))
        for src in m.group(1).split()
    ]


def test_the_docker_file_set_starts_the_cli(tmp_path) -> None:
    image = tmp_path / "image"
    image.mkdir()
    for src in _docker_copies():
        source = ROOT / src.rstrip("/")
        if source.is_dir():
            shutil.copytree(source, image / source.name)
        else:
            shutil.copy2(source, image / source.name)
    assert not (image / "bench").exists()  # the image does not ship the benchmarks
    code = "import sys; from tally_app.cli import main; sys.exit(main(sys.argv[1:]))"
    result = _python(code, "--help", path=[str(image), SITE_PACKAGES], cwd=image)
    assert result.returncode == 0, result.stderr
    for command in ("generate", "stream", "show", "reconcile", "validate", "report"):
        assert command in result.stdout
    assert "bench" not in result.stdout.split("positional arguments")[1].split("options")[0]
    # and the nightly sequence imports there too
    nightly = _python("import tally_app.nightly", path=[str(image), SITE_PACKAGES], cwd=image)
    assert nightly.returncode == 0, nightly.stderr
