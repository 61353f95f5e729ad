"""spark-submit application of the tally tasks (`TALLY_SPARK_RUNNER=submit`).

    spark-submit dags/spark_apps/tally_task.py STAGE --interval-start ISO --interval-end ISO \
        [--dag-id ID --task-id ID --run-id ID]

Runs `dags.stages.run_stage` (the same code the in-process tasks run), prints the result as
JSON and exits 0; on a data-quality breach it records the alerts itself (no task context
reaches the driver) and exits 3; bad arguments or settings exit 2.

Settings come from the environment as everywhere (TALLY_*, the S3 ones included), except the
master: the session runs on the one spark-submit was given (the Airflow connection's
`--master`), whatever TALLY_SPARK_MASTER says, and the settings the stages record say so.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from datetime import datetime


def _aware(text: str) -> datetime:
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no time zone")
    return value


def submitted_master() -> str | None:
    """The master spark-submit was given (`--master`, else spark-defaults.conf, else local[*]):
    spark-submit hands it to the driver's JVM, which this process joins, as the system property
    `spark.master`. None outside spark-submit."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not launched by spark-submit
        return None
    from pyspark import SparkContext

    SparkContext._ensure_initialized()  # joins spark-submit's JVM; starts no context
    jvm = SparkContext._jvm
    return None if jvm is None else jvm.java.lang.System.getProperty("spark.master")


def main(argv: Sequence[str] | None = None) -> int:
    from dags.alerting import AlertRaised, emit
    from dags.stages import STAGES, run_stage
    from tally.settings import SettingsError, load_settings

    parser = argparse.ArgumentParser(prog="tally_task", description=__doc__)
    parser.add_argument("stage", choices=STAGES)
    parser.add_argument("--interval-start", type=_aware, required=True)
    parser.add_argument("--interval-end", type=_aware, required=True)
    parser.add_argument("--dag-id", default="")
    parser.add_argument("--task-id", default="")
    parser.add_argument("--run-id", default="")
    args = parser.parse_args(argv)
    ids = {"dag_id": args.dag_id, "task_id": args.task_id, "run_id": args.run_id}
    try:
        # The builder's .master() would override spark-submit's: give it spark-submit's.
        settings = load_settings(overrides={"spark_master": submitted_master()})
    except SettingsError as exc:
        print(f"tally_task: {exc}", file=sys.stderr)
        return 2
    try:
        result = run_stage(args.stage, args.interval_start, args.interval_end, settings=settings)
    except AlertRaised as exc:
        if not exc.recorded:
            emit([a.with_context(**ids) for a in exc.alerts], settings)
        print(str(exc), file=sys.stderr)
        return 3
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
