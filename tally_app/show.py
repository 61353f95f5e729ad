"""`tally show TABLE`: print any tally table for people (a grid) or scripts (JSON lines),
ordered by the table's natural key (`Table.order_by`)."""

from __future__ import annotations

import contextlib
import sys
from typing import TextIO

from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from tally import tables
from tally.outputs import terminal_safe
from tally.settings import Settings
from tally.spark import build_session, cluster_conf, object_store_conf


def show_table(
    settings: Settings,
    name: str,
    as_json: bool = False,
    where: str | None = None,
    limit: int = 20,
    out: TextIO | None = None,
) -> int:
    out = out or sys.stdout
    table = tables.CATALOG.get(name)
    if table is None:
        known = ", ".join(sorted(n for n, t in tables.CATALOG.items() if not t.internal))
        print(f"tally: unknown table {name!r} (tables: {known})", file=sys.stderr)
        return 2
    spark = build_session(
        settings.spark_master,
        app_name="tally-show",
        ui=False,
        extra_conf={
            **object_store_conf(settings.s3_endpoint, settings.s3_region, settings.s3_path_style),
            **cluster_conf(settings.spark_executor_memory, settings.spark_cores_max),
        },
    )
    if not tables.exists(spark, settings.warehouse, name):
        print(f"tally: no table {name!r} in {settings.warehouse} yet", file=sys.stderr)
        return 2
    df = tables.read_table(spark, settings.warehouse, name)
    if where:
        df = df.where(where)
    df = df.orderBy(*table.order_by).limit(limit)
    if as_json:
        # to_json in the JVM keeps BIGINT amounts exact and timestamps in ISO-8601 UTC.
        rows = df.select(
            F.to_json(F.struct("*"), {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSXXX"})
        ).collect()
        for row in rows:
            out.write(row[0] + "\n")
    else:  # payload text (keys, raw lines) as text, never as terminal control sequences
        shown = df.select(
            *[
                terminal_safe(F.col(f.name)).alias(f.name)
                if isinstance(f.dataType, StringType)
                else F.col(f.name)
                for f in df.schema.fields
            ]
        )
        with contextlib.redirect_stdout(out):
            shown.show(limit, truncate=40)
    out.flush()
    return 0
