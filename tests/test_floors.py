"""The house's floors: the import contracts hold, the command line stands without the floors
above it (bench/, dags/) and without Airflow, and the Docker image's file set starts the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tomllib
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

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    graph = grimp.build_graph(*pyproject["tool"]["importlinter"]["root_packages"])
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
