"""tally on a real Spark standalone cluster (scripts/cluster.sh: a master and a worker, each its
own JVM, on free ports), not in a local driver:

1. `tally stream` runs as a command with `--spark-master spark://...` over a small generated
   day; the accounting identity holds over what it wrote. The master lists the application,
   finished, with the executor memory the settings asked for, and the worker's work directory
   holds its executor's log, with the tasks it ran and the Delta jars the driver shipped to it.
2. Python on the executors runs this virtualenv's interpreter (with pyarrow), not python3.
3. The nightly DAG with `TALLY_SPARK_RUNNER=submit` runs its four stages as spark-submit jobs
   against the cluster (the Airflow connection's master wins over TALLY_SPARK_MASTER, and the
   recorded settings say so); its re-aggregation's books balance: nothing is UNEXPLAINED.
   (`tally reconcile` as a command on the cluster is the same stage the DAG submits: it is not
   run a second time, which saved a cluster application's minute or two of the suite.)

Wall times go to stdout (`pytest -s`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import airflow_helpers as H  # first: points Airflow at a temporary AIRFLOW_HOME
import pytest
from spark_cluster import Cluster, spark_cluster
from stream_helpers import collect, identity_check

pytestmark = pytest.mark.slow

DAY = date(2026, 11, 20)
WINDOW_MS = 60_000
EXECUTOR_MEMORY_MB = 768
STEP_TIMEOUT_S = 900


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    H.start_migration()  # Airflow's database, in the background, for the DAG test
    with spark_cluster(tmp_path_factory.mktemp("cluster"), cores=2, memory="2g") as running:
        print(f"\ncluster: started in {running.start_seconds:.1f} s ({running.master_url})")
        yield running


def command_env(cluster: Cluster, root: Path, **extra: str) -> dict[str, str]:
    """The environment of a tally process on the cluster: the nightly tests' small-stream
    settings, the cluster's master, a smaller executor than Spark's 1g, loopback only."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TALLY_")}
    env.update(H.stream_settings(root / "warehouse", root / "events"))
    env.update(
        {
            "TALLY_SPARK_MASTER": cluster.master_url,
            "TALLY_SPARK_EXECUTOR_MEMORY": f"{EXECUTOR_MEMORY_MB}m",
            "TALLY_SPARK_CORES_MAX": "2",
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable,
            **extra,
        }
    )
    return env


def tally(args: list[str], env: dict[str, str], log: Path) -> tuple[int, float]:
    """`tally ARGS` as a user runs it (own process); exit code and wall seconds."""
    started = time.monotonic()
    with log.open("wb") as out:
        code = subprocess.run(
            [sys.executable, "-m", "tally_app.cli", *args],
            cwd=H.REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=STEP_TIMEOUT_S,
        ).returncode
    return code, time.monotonic() - started


@dataclass(frozen=True)
class Streamed:
    root: Path
    warehouse: str
    env: dict[str, str]
    stream_seconds: float


@pytest.fixture(scope="module")
def streamed(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Streamed:
    """A generated day (the nightly tests' 1-day stream: 1500 events, 4 partitions, one file)
    streamed by `tally stream` on the cluster: available-now, drained, arrival clock."""
    from tally_tools.generate import generate

    root = tmp_path_factory.mktemp("on_cluster")
    generate(
        out=str(root / "events"),
        events=1500,
        partitions=4,
        seed=3,
        start=datetime.combine(DAY, datetime.min.time(), tzinfo=UTC),
        duration_ms=86_400_000,
        files=1,
        keys=40,
        progress=False,
    )
    env = command_env(cluster, root)
    code, seconds = tally(
        ["stream", "--available-now", "--drain", "--clock", "arrival"], env, root / "stream.log"
    )
    assert code == 0, (root / "stream.log").read_text(errors="replace")[-3000:]
    print(f"cluster: tally stream {seconds:.1f} s")
    return Streamed(root, env["TALLY_WAREHOUSE"], env, seconds)


def app_named(cluster: Cluster, name: str) -> dict[str, Any]:
    return cluster.finished_application(name)


def assert_ran_on_executors(cluster: Cluster, app: dict[str, Any]) -> None:
    """The master ran the application to the end with the asked-for executor, and one of the
    worker's executors ran its tasks (its log) with the jars the driver shipped."""
    assert app["state"] == "FINISHED", app
    assert app["cores"] == 2 and app["memoryperexecutor"] == EXECUTOR_MEMORY_MB, app
    (executor,) = cluster.executor_dirs(app["id"])
    log = (executor / "stderr").read_text(errors="replace")
    assert "CoarseGrainedExecutorBackend" in log and "Finished task" in log
    assert list(executor.glob("delta-spark_*.jar")), sorted(p.name for p in executor.iterdir())


def test_the_stream_runs_on_the_cluster(spark, cluster: Cluster, streamed) -> None:
    assert_ran_on_executors(cluster, app_named(cluster, "tally-stream"))
    rows = collect(identity_check(spark, streamed.warehouse, WINDOW_MS))
    assert rows and [r for r in rows if not r["ok"]] == []


PROBE = """
import sys, time
from tally.settings import load_settings
from tally.spark import session_for
spark = session_for(load_settings(), "tally-python-probe")
started = time.monotonic()
rows = spark.sparkContext.parallelize([0], 1).map(
    lambda _: (sys.executable, __import__("pyarrow").__version__)
).collect()
print(rows[0][0], rows[0][1], f"{time.monotonic() - started:.1f}")
"""


def test_executors_run_python_with_the_virtualenv(cluster: Cluster, streamed) -> None:
    # No PYSPARK_PYTHON given: the session names this interpreter (python3 has no pyarrow).
    env = {k: v for k, v in streamed.env.items() if not k.startswith("PYSPARK_")}
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        env=env,
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT_S,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    executable, pyarrow_version, seconds = out.stdout.split()[-3:]
    assert executable == sys.executable and pyarrow_version
    print(f"cluster: first Python task (executor already up) {seconds} s")
    assert_ran_on_executors(cluster, app_named(cluster, "tally-python-probe"))


def test_nightly_dag_submits_its_stages_to_the_cluster(
    spark, cluster: Cluster, streamed, monkeypatch
) -> None:

    from pyspark.sql import functions as F

    from batch.reconcile import runs_of
    from tally.tables import read_table

    for key in [k for k in os.environ if k.startswith(("TALLY_", "AIRFLOW_CONN_"))]:
        monkeypatch.delenv(key)
    settings = {
        **{k: v for k, v in streamed.env.items() if k.startswith("TALLY_")},
        "TALLY_SPARK_RUNNER": "submit",
        # The sensor runs in this process (on the tests' session); the submitted stages must
        # run where the connection says, not here.
        "TALLY_SPARK_MASTER": "local[2]",
        "TALLY_RETRIES": "0",
        "TALLY_SENSOR_POKE": "1s",
        "TALLY_SENSOR_TIMEOUT": "5m",
        "AIRFLOW_CONN_TALLY_SPARK": json.dumps({"conn_type": "spark", "host": cluster.master_url}),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PATH": f"{H.VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",  # spark-submit
    }
    for key, value in settings.items():
        monkeypatch.setenv(key, value)
    dag = H.dag_bag().dags[H.NIGHTLY]
    assert type(dag.get_task("reaggregate")).__name__ == "SparkSubmitOperator"
    before = {a["id"] for a in cluster.applications()}

    started = time.monotonic()
    run = dag.test(logical_date=H.logical_date_for(DAY))
    seconds = time.monotonic() - started
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert str(run.state) == "success" and set(states.values()) == {"success"}, states
    print(f"cluster: nightly DAG, 4 stages submitted, {seconds:.1f} s")

    # reaggregate, validate and build_report each ran a Spark application on the cluster;
    # publish (it rewrites index.html) starts no session, so the master never sees it.
    submitted = [a for a in cluster.applications() if a["id"] not in before]
    assert [a["name"] for a in submitted] == ["tally-nightly"] * 3, submitted
    for app in submitted:
        assert_ran_on_executors(cluster, app)

    # The date's one run is the nightly's, recorded with where it ran...
    (recorded,) = runs_of(spark, streamed.warehouse, DAY)
    provenance = json.loads(recorded["settings"])
    assert provenance["spark_master"] == cluster.master_url
    assert provenance["spark_runner"] == "submit"
    # ...and its books balance: nothing UNEXPLAINED.
    (summary,) = (
        read_table(spark, streamed.warehouse, "reconciliation_summary")
        .where(F.col("business_date") == F.lit(DAY))
        .collect()
    )
    assert summary["windows"] > 0 and summary["unexplained_windows"] == 0
    statuses = read_table(spark, streamed.warehouse, "reconciliation").select("status")
    assert statuses.where(F.col("status") == "UNEXPLAINED").count() == 0
