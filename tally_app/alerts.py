"""Writing alerts: one row per alert in the `alerts` Delta table (sending them is the DAGs')."""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from tally import tables
from tally.alert import Alert
from tally.dates import epoch_ms


def alert_row(spark: SparkSession, alert: Alert) -> DataFrame:
    """One `alerts` row, built in the JVM."""
    return tables.literal_row(
        spark,
        {
            "alert_time": F.timestamp_millis(F.lit(epoch_ms(alert.alert_time))),
            "dag_id": F.lit(alert.dag_id),
            "task_id": F.lit(alert.task_id),
            "run_id": F.lit(alert.run_id),
            "business_date": F.lit(alert.business_date).cast("date"),
            "severity": F.lit(alert.severity),
            "what": F.lit(alert.what),
            "observed": F.lit(alert.observed),
            "threshold": F.lit(alert.threshold),
            "report_link": F.lit(alert.report_link),
            "log_link": F.lit(alert.log_link),
        },
    )


def record_alerts(spark: SparkSession, warehouse: str, alerts: Sequence[Alert]) -> None:
    """Append the alerts to the `alerts` table (created on first use)."""
    if not alerts:
        return
    tables.ensure_table(spark, warehouse, tables.ALERTS)
    rows = reduce(DataFrame.unionByName, [alert_row(spark, a) for a in alerts])
    tables.write_table(rows, warehouse, tables.ALERTS)
