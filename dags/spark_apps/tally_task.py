"""spark-submit application of the tally tasks (`TALLY_SPARK_RUNNER=submit`).

    spark-submit dags/spark_apps/tally_task.py STAGE --interval-start ISO --interval-end ISO \
        [--dag-id ID --task-id ID --run-id ID]

Runs `dags.stages.run_stage` (the same code the in-process tasks run), prints the result as
JSON and exits 0; on a data-quality breach it records the alerts itself (no task context
reaches the driver) and exits 3; bad arguments exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import datetime


def _aware(text: str) -> datetime:
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no time zone")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    from dags.alerting import AlertRaised, emit
    from dags.stages import STAGES, run_stage

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
        result = run_stage(args.stage, args.interval_start, args.interval_end)
    except AlertRaised as exc:
        if not exc.recorded:
            emit([a.with_context(**ids) for a in exc.alerts])
        print(str(exc), file=sys.stderr)
        return 3
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
