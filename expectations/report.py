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

Built in three phases: `expectations.report_data` reads the tables
(`expectations.report_read`) and reduces them to a `ReportData` (the event log's figures and
the completeness curve, estimated without a given one: `expectations.report_figures`),
`expectations.report_charts` draws the charts, `expectations.report_html` renders the page.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import date, datetime
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, DateType, IntegralType, StringType, TimestampType

from expectations.report_charts import preload as preload_charts
from expectations.report_data import collect_report_data
from expectations.report_html import render_html
from expectations.report_read import ReportError, ReportInputs, ReportOptions
from tally.money_columns import money_text, with_currency
from tally.outputs import CSV_FORMULA_STARTS

# The amounts the CSV writes a second time for a person, in the run's currency, each beside
# its integer of minor units as `<name>_formatted` ("$1,234.56", "¥1,234", "BHD 1.234").
FORMATTED_AMOUNTS = (
    "stream_amount",
    "batch_amount",
    "diff_amount",
    "late_amount",
    "residual_amount",
)
FORMATTED = "_formatted"

RECONCILIATION_COLUMNS = (
    "business_date",
    "window_start",
    "window_end",
    "key",
    "currency",
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
    "severity",  # under the materiality tolerances (absent in rows of earlier runs)
    "tolerance_rule",
    *(f"{c}{FORMATTED}" for c in FORMATTED_AMOUNTS),
)


def _csv_cell(column: str, data_type: DataType) -> Column:
    """The column as Python's `csv.writer(quoting=QUOTE_NONNUMERIC)` writes it, built in the
    JVM: integers bare, everything else quoted (quotes doubled; text neutralised against
    spreadsheet formulas as `tally.outputs.csv_safe_cell` does), null as `""`."""
    value = F.col(column)
    if isinstance(data_type, IntegralType):
        return F.coalesce(value.cast("string"), F.lit('""'))
    # Timestamps and dates have no quote to double; text doubles its quotes with a plain
    # `replace` (a regular expression per cell cost ~a third of the CSV's JVM time).
    if isinstance(data_type, TimestampType):
        text = F.date_format(value, "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'")
    elif isinstance(data_type, DateType):
        text = value.cast("string")
    elif isinstance(data_type, StringType) and column.endswith(FORMATTED):
        # written by tally from an integer ("-$1.00"): no formula, and a spreadsheet reads
        # it as the number it is, which a neutralising quote would prevent
        text = value
    elif isinstance(data_type, StringType):
        formula = F.substring(value, 1, 1).isin(*CSV_FORMULA_STARTS)
        safe = F.when(formula, F.concat(F.lit("'"), value)).otherwise(value)
        text = F.replace(safe, F.lit('"'), F.lit('""'))
    else:
        raise TypeError(f"csv: column {column} has an unsupported type {data_type.simpleString()}")
    quoted = F.concat(F.lit('"'), text, F.lit('"'))
    return F.coalesce(quoted, F.lit('""'))


# The CSV reaches the driver in blocks of the rows of 10 minutes of window starts, each one
# string of lines built in the JVM: a few hundred Python objects a day instead of one per row.
CSV_BLOCK_MS = 600_000


def with_formatted_amounts(
    rows: DataFrame, currency: str, currencies: Iterable[str] | None = None
) -> DataFrame:
    """The rows with their `currency` (the run's, where the rows name none) and each of
    `FORMATTED_AMOUNTS` written in it (`tally.money_columns.money_text`, in the JVM);
    `currencies`: the codes the rows hold, when the caller knows them (None: one small job
    finds them), so the formatting's lookups stay short."""
    rows = with_currency(rows, currency)
    if currencies is None:
        currencies = [r[0] for r in rows.select("currency").distinct().collect()]
    codes = {currency, *currencies}
    return rows.withColumns(
        {
            f"{c}{FORMATTED}": money_text(F.col(c), F.col("currency"), codes)
            for c in FORMATTED_AMOUNTS
            if c in rows.columns
        }
    )


def write_csv(
    rows: DataFrame, path: Path, currency: str, currencies: Iterable[str] | None = None
) -> int:
    """The reconciliation rows as CSV (streamed from Spark in window, key order); returns
    the number of rows. Amounts stay integer minor units (unquoted), with their `currency`
    and each written for a person beside them (`with_formatted_amounts`); text cells are quoted
    and neutralised against spreadsheet formulas (`tally.outputs.csv_safe_cell`). Each line
    is formatted in the JVM (`_csv_cell`) and the lines of a block (`CSV_BLOCK_MS` of window
    starts) are sorted and joined there: the driver only writes them (formatting ~100k rows
    a day in Python took seconds)."""
    rows = with_formatted_amounts(rows, currency, currencies)
    columns = [c for c in RECONCILIATION_COLUMNS if c in rows.columns]
    types = {f.name: f.dataType for f in rows.schema.fields}
    line = F.concat_ws(",", *[_csv_cell(c, types[c]) for c in columns])
    # (window_start, key, line): sorted as structs, the rows' order by window_start and key
    row = F.struct(F.col("window_start").alias("s"), F.col("key").alias("k"), line.alias("line"))
    blocks = (
        rows.select(
            F.floor(F.unix_millis("window_start") / F.lit(CSV_BLOCK_MS)).alias("block"),
            row.alias("row"),
        )
        .groupBy("block")
        .agg(F.sort_array(F.collect_list("row")).alias("rows"))
        .select(
            "block",
            F.array_join(F.col("rows.line"), "\r\n").alias("lines"),
            F.size("rows").alias("count"),
        )
        # One partition, sorted in it: ONE job streams it (a global sort sampled its input in
        # a job of its own, and the local iterator ran a job per partition: 6 jobs at 1M).
        .coalesce(1)
        .sortWithinPartitions("block")
    )
    count = 0
    with path.open("w", newline="") as fh:
        csv.writer(fh, quoting=csv.QUOTE_NONNUMERIC).writerow(columns)
        for block in blocks.toLocalIterator():
            fh.write(block["lines"])
            fh.write("\r\n")  # csv.writer's line terminator
            count += int(block["count"])
    return count


def build_report(
    spark: SparkSession,
    warehouse: str,
    business_date: date,
    out_dir: str | Path,
    now: datetime,
    options: ReportOptions | None = None,
    inputs: ReportInputs | None = None,
) -> Path:
    """Write `report-YYYY-MM-DD.html` and `reconciliation-YYYY-MM-DD.csv` into `out_dir`;
    returns the HTML path. See the module docstring for what they hold. `inputs`: what the
    caller already holds of the date (`ReportInputs`), taken instead of reading it back."""
    if now.tzinfo is None:
        raise ReportError("now: needs a time zone")
    # The driver's Python mostly waits for the JVM while the tables are read and the CSV is
    # built: one worker thread meanwhile imports matplotlib, then draws the charts and renders
    # the page (~1 s of Python at 1M events). Only that thread uses matplotlib.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tally-report") as worker:
        worker.submit(preload_charts)
        data, rows = collect_report_data(spark, warehouse, business_date, now, options, inputs)
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        csv_path = out / f"reconciliation-{business_date.isoformat()}.csv"
        page = worker.submit(render_html, data, csv_path.name)
        try:
            # the report found the rows' currencies already: no second job for them
            known = [c.currency for c in data.by_currency] or None
            write_csv(rows, csv_path, data.currency, known)
        finally:
            if inputs is None:  # the caller's own rows stay persisted
                rows.unpersist()
        html_path = out / f"report-{business_date.isoformat()}.html"
        tmp = html_path.with_suffix(".html.tmp")
        tmp.write_text(page.result(), encoding="utf-8")
    tmp.replace(html_path)
    return html_path
