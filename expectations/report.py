"""The finance/audit report of a business date: one self-contained HTML file plus a CSV.

    build_report(spark, warehouse, business_date, out_dir, now, *, curve=None,
                 current_bound_ms=None, recommended_bound_ms=None, ...) -> Path

`<out_dir>/report-YYYY-MM-DD.html` holds, with every chart embedded as a base64 PNG
(matplotlib, Agg): the headline (streaming total vs batch total, the gap, the part explained
by late events, the unexplained rest; counts and amounts, amounts in currency units formatted
exactly from integer minor units), streaming vs batch per window across the day, late events
by lateness, the latency/completeness curve with the current and recommended lateness bound,
the worst keys by gap, the late-event rate per source partition, the validation outcome per
expectation (from `validation_results`) with links to GX Data Docs, and provenance (the Delta
versions the reconciliation pinned, the settings in force, run times).
`<out_dir>/reconciliation-YYYY-MM-DD.csv` holds the date's reconciliation rows.

Built in three phases: `expectations.report_data` reads the tables and reduces them to a
`ReportData` (and says how the completeness curve is estimated without a given one),
`expectations.report_charts` draws the charts, `expectations.report_html` renders the page.
"""

from __future__ import annotations

import csv
from datetime import date, datetime
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from expectations.report_data import ReportError, ReportOptions, collect_report_data
from expectations.report_html import render_html
from tally.outputs import csv_safe_cell

RECONCILIATION_COLUMNS = (
    "business_date",
    "window_start",
    "window_end",
    "key",
    "stream_count",
    "stream_amount",
    "batch_count",
    "batch_amount",
    "diff_count",
    "diff_amount",
    "late_count",
    "late_amount",
    "residual_count",
    "residual_amount",
    "status",
)


def write_csv(rows: DataFrame, path: Path) -> int:
    """The reconciliation rows as CSV (streamed from Spark in window, key order); returns
    the number of rows. Amounts stay integer minor units (unquoted); text cells are quoted
    and neutralised against spreadsheet formulas (`tally.outputs.csv_safe_cell`)."""
    columns = [c for c in RECONCILIATION_COLUMNS if c in rows.columns]
    ordered = rows.select(*columns).orderBy("window_start", "key")
    count = 0
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh, quoting=csv.QUOTE_NONNUMERIC)
        writer.writerow(columns)
        for row in ordered.toLocalIterator():
            writer.writerow(
                [
                    v.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
                    if isinstance(v, datetime)
                    else ("" if v is None else csv_safe_cell(v))
                    for v in row
                ]
            )
            count += 1
    return count


def build_report(
    spark: SparkSession,
    warehouse: str,
    business_date: date,
    out_dir: str | Path,
    now: datetime,
    options: ReportOptions | None = None,
) -> Path:
    """Write `report-YYYY-MM-DD.html` and `reconciliation-YYYY-MM-DD.csv` into `out_dir`;
    returns the HTML path. See the module docstring for what they hold."""
    if now.tzinfo is None:
        raise ReportError("now: needs a time zone")
    data, rows = collect_report_data(spark, warehouse, business_date, now, options)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / f"reconciliation-{business_date.isoformat()}.csv"
    write_csv(rows, csv_path)
    html_path = out / f"report-{business_date.isoformat()}.html"
    tmp = html_path.with_suffix(".html.tmp")
    tmp.write_text(render_html(data, csv_path.name), encoding="utf-8")
    tmp.replace(html_path)
    return html_path
