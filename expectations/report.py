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

The completeness curve comes from the caller (`curve`: dicts with at least `lateness_ms` and
`completeness_pct`, e.g. `tally lateness-curve --json`'s "curve"). Without one, it is
estimated from the late side output: shifting the watermark down by D admits exactly the
late events with `lateness_ms < G + D` (G = allowed lateness), so completeness at bound
L + D is `1 - late events with lateness_ms >= G + D / batch events`. Without late events
and a known current bound the chart says "not computed".
"""

from __future__ import annotations

import argparse
import base64
import csv
import html
import io
import itertools
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from expectations.suites import day_bounds_ms
from tally import tables as T
from tally.settings import SettingsError, format_duration, parse_duration

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
# Candidate shifts of the lateness bound for the estimated curve.
CURVE_SHIFTS_MS = (
    0,
    1_000,
    2_000,
    5_000,
    10_000,
    30_000,
    60_000,
    120_000,
    300_000,
    600_000,
    1_800_000,
    3_600_000,
)
LATENESS_BINS_MS = (0, 1_000, 5_000, 10_000, 30_000, 60_000, 300_000, 600_000, 1_800_000)
WORST_KEYS = 10


class ReportError(RuntimeError):
    """The report cannot be built (missing table, bad argument): a one-line message."""


# -- exact money ---------------------------------------------------------------------------------


def format_minor(amount: int, currency: str = "") -> str:
    """Integer minor units -> currency units with 2 decimals and thousands separators,
    exactly (divmod on integers, never floats): 123456 -> "1,234.56", -5 -> "-0.05"."""
    if not isinstance(amount, int) or isinstance(amount, bool):
        raise TypeError(f"amount: expected integer minor units, got {amount!r}")
    sign = "-" if amount < 0 else ""
    units, cents = divmod(abs(amount), 100)
    return f"{sign}{currency}{units:,}.{cents:02d}"


def format_count(count: int) -> str:
    return f"{count:,}"


def format_rate(rate: float | None) -> str:
    return "n/a" if rate is None else f"{rate * 100:.3f} %"


# -- data ------------------------------------------------------------------------------------


@dataclass
class ReportData:
    """Everything the HTML shows, already small and local (collected from Spark)."""

    business_date: date
    now: datetime
    report_timezone: str
    headline: dict[str, int]
    late_event_rate: float | None
    max_lateness_ms: int | None
    # (window_start ms, stream amount, batch amount, late amount, residual amount), all keys
    per_window: list[tuple[int, int, int, int, int]]
    lateness_hist: list[tuple[str, int]]  # (bin label, late events)
    curve: list[dict[str, Any]] | None
    curve_source: str
    current_bound_ms: int | None
    recommended_bound_ms: int | None
    completeness_target: float | None
    worst_keys: list[dict[str, Any]]
    partitions: list[dict[str, Any]]  # partition, events, late, rate
    validation: list[dict[str, Any]]
    data_docs_index: str | None
    provenance: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    window_ms: int | None = None


def _exists(spark: SparkSession, warehouse: str, name: str) -> bool:
    from delta.tables import DeltaTable

    return bool(DeltaTable.isDeltaTable(spark, T.table_path(warehouse, name)))


def _of_date(spark: SparkSession, warehouse: str, name: str, business_date: date) -> DataFrame:
    return T.read_table(spark, warehouse, name).where(
        F.col("business_date") == F.lit(business_date)
    )


def _ms(column: str) -> Any:
    return F.unix_millis(F.col(column))


def _headline(recon: DataFrame, summary: dict[str, Any] | None) -> dict[str, int]:
    """Counts and amounts (exact BIGINT sums): the summary's when the batch layer wrote one,
    else summed from the reconciliation rows."""
    names = {
        "stream_count": "stream_count",
        "stream_amount": "stream_amount",
        "batch_count": "batch_count",
        "batch_amount": "batch_amount",
        "gap_count": "diff_count",
        "gap_amount": "diff_amount",
        "explained_count": "late_count",
        "explained_amount": "late_amount",
        "unexplained_count": "residual_count",
        "unexplained_amount": "residual_amount",
    }
    row = recon.agg(
        *[F.coalesce(F.sum(col), F.lit(0)).cast("long").alias(k) for k, col in names.items()],
        F.count_if(F.col("status") == "UNEXPLAINED").cast("long").alias("unexplained_windows"),
        F.count(F.lit(1)).cast("long").alias("windows"),
    ).first()
    assert row is not None
    totals = {k: int(v) for k, v in row.asDict().items()}
    if summary:
        for key in (*names, "unexplained_windows", "windows"):
            if summary.get(key) is not None:
                totals[key] = int(summary[key])
    return totals


def _lateness_hist(late: DataFrame) -> list[tuple[str, int]]:
    edges = list(LATENESS_BINS_MS)
    labels = [
        f"{format_duration(lo)}–{format_duration(hi)}" for lo, hi in itertools.pairwise(edges)
    ] + [f"≥ {format_duration(edges[-1])}"]
    bucket = F.lit(len(edges) - 1)
    for i in range(len(edges) - 2, -1, -1):
        bucket = F.when(F.col("lateness_ms") < F.lit(edges[i + 1]), F.lit(i)).otherwise(bucket)
    counts = {
        int(r["b"]): int(r["n"])
        for r in late.groupBy(bucket.alias("b")).agg(F.count(F.lit(1)).alias("n")).collect()
    }
    return [(label, counts.get(i, 0)) for i, label in enumerate(labels)]


def _estimated_curve(
    late: DataFrame, batch_events: int, current_ms: int, allowed_ms: int
) -> list[dict[str, Any]]:
    """Completeness at bound current + D for each candidate shift D (see module docstring)."""
    row = late.agg(
        *[
            F.count_if(F.col("lateness_ms") >= F.lit(allowed_ms + d)).alias(f"d{i}")
            for i, d in enumerate(CURVE_SHIFTS_MS)
        ]
    ).first()
    assert row is not None
    curve = []
    for i, shift in enumerate(CURVE_SHIFTS_MS):
        dropped = int(row[f"d{i}"] or 0)
        admitted = batch_events - dropped
        curve.append(
            {
                "lateness_ms": current_ms + shift,
                "lateness": format_duration(current_ms + shift),
                "events": batch_events,
                "admitted": admitted,
                "dropped": dropped,
                "completeness_pct": 100.0 * admitted / batch_events if batch_events else 100.0,
            }
        )
    return curve


def _recommend(curve: list[dict[str, Any]], target: float | None) -> int | None:
    if target is None:
        return None
    for entry in sorted(curve, key=lambda e: e["lateness_ms"]):
        admitted, events = entry.get("admitted"), entry.get("events")
        if admitted is not None and events is not None:
            # exact: 100 * admitted / events >= target
            from fractions import Fraction

            if events == 0 or Fraction(100 * int(admitted), int(events)) >= Fraction(
                repr(float(target))
            ):
                return int(entry["lateness_ms"])
        elif float(entry["completeness_pct"]) >= target:
            return int(entry["lateness_ms"])
    return None


def collect_report_data(
    spark: SparkSession,
    warehouse: str,
    business_date: date,
    now: datetime,
    *,
    curve: Sequence[dict[str, Any]] | None = None,
    current_bound_ms: int | None = None,
    recommended_bound_ms: int | None = None,
    completeness_target: float | None = None,
    report_timezone: str | None = None,
    gx_root: str | None = None,
    fallback_bound_ms: int | None = None,
) -> tuple[ReportData, DataFrame]:
    """Read the date's tables and reduce them to what the report shows; also returns the
    reconciliation rows of the date (for the CSV)."""
    if not _exists(spark, warehouse, "reconciliation"):
        raise ReportError(
            f"reconciliation: no Delta table at {T.table_path(warehouse, 'reconciliation')} "
            "(run tally reconcile first)"
        )
    recon_version = T.latest_version(spark, warehouse, "reconciliation")
    recon = T.read_table(spark, warehouse, "reconciliation", recon_version).where(
        F.col("business_date") == F.lit(business_date)
    )
    run: dict[str, Any] | None = None
    if _exists(spark, warehouse, "reconciliation_runs"):
        first = _of_date(spark, warehouse, "reconciliation_runs", business_date).first()
        run = first.asDict() if first is not None else None
    summary: dict[str, Any] | None = None
    if _exists(spark, warehouse, "reconciliation_summary"):
        first = _of_date(spark, warehouse, "reconciliation_summary", business_date).first()
        summary = first.asDict() if first is not None else None
    settings: dict[str, Any] = {}
    if run and run.get("settings"):
        try:
            settings = dict(json.loads(run["settings"]))
        except (TypeError, ValueError):
            settings = {"settings": str(run["settings"])}
    zone = (
        report_timezone
        or (run or {}).get("report_timezone")
        or settings.get("report_timezone", "UTC")
    )
    bounds = day_bounds_ms(business_date, zone)

    recon = recon.persist()
    try:
        headline = _headline(recon, summary)
        if headline["windows"] == 0:
            raise ReportError(
                f"date: {business_date.isoformat()} has no reconciliation rows "
                "(run tally reconcile first)"
            )
        per_window = [
            (int(r["w"]), int(r["s"]), int(r["b"]), int(r["l"]), int(r["r"]))
            for r in recon.groupBy(_ms("window_start").alias("w"))
            .agg(
                *[
                    F.coalesce(F.sum(col), F.lit(0)).cast("long").alias(alias)
                    for col, alias in (
                        ("stream_amount", "s"),
                        ("batch_amount", "b"),
                        ("late_amount", "l"),
                        ("residual_amount", "r"),
                    )
                ]
            )
            .orderBy("w")
            .collect()
        ]
        worst = [
            r.asDict()
            for r in recon.groupBy("key")
            .agg(
                F.sum("diff_amount").cast("long").alias("gap_amount"),
                F.sum("late_amount").cast("long").alias("explained_amount"),
                F.sum("residual_amount").cast("long").alias("unexplained_amount"),
                F.sum(F.abs("residual_amount")).cast("long").alias("abs_unexplained"),
                F.sum(F.abs("diff_amount")).cast("long").alias("abs_gap"),
                F.count_if(F.col("status") == "UNEXPLAINED").alias("unexplained_windows"),
            )
            .where((F.col("abs_gap") != 0) | (F.col("abs_unexplained") != 0))
            .orderBy(F.col("abs_unexplained").desc(), F.col("abs_gap").desc(), "key")
            .limit(WORST_KEYS)
            .collect()
        ]
    finally:
        recon.unpersist()

    # The speed-layer tables at the versions the reconciliation pinned (latest otherwise).
    def pinned(name: str, key: str) -> DataFrame | None:
        if not _exists(spark, warehouse, name):
            return None
        version = (run or {}).get(key)
        return T.read_table(spark, warehouse, name, None if version is None else int(version))

    late_all = pinned("late_events", "late_events_version")
    events_all = pinned("events", "events_version")
    in_day = (_ms("window_start") >= F.lit(bounds[0])) & (_ms("window_start") < F.lit(bounds[1]))
    late = late_all.where(in_day).select("lateness_ms", "partition") if late_all else None

    lateness_hist = _lateness_hist(late) if late is not None else []
    window_ms = (run or {}).get("window_ms") or settings.get("window_ms")
    if current_bound_ms is None and settings.get("lateness") is not None:
        try:
            current_bound_ms = parse_duration(settings["lateness"], "lateness")
        except SettingsError:
            current_bound_ms = None
    if current_bound_ms is None:
        current_bound_ms = fallback_bound_ms
    if completeness_target is None and settings.get("completeness_target") is not None:
        completeness_target = float(settings["completeness_target"])
    curve_list = [dict(c) for c in curve] if curve else None
    curve_source = "given" if curve_list else "not computed"
    if curve_list is None and late is not None and current_bound_ms is not None:
        allowed = settings.get("allowed_lateness", 0)
        try:
            allowed_ms = parse_duration(allowed, "allowed_lateness")
        except SettingsError:
            allowed_ms = 0
        curve_list = _estimated_curve(late, headline["batch_count"], current_bound_ms, allowed_ms)
        curve_source = "estimated from the late side output"
    if recommended_bound_ms is None and curve_list:
        recommended_bound_ms = _recommend(curve_list, completeness_target)

    partitions: list[dict[str, Any]] = []
    if events_all is not None:
        first_day = datetime.fromtimestamp(bounds[0] / 1000, UTC).date()
        last_day = datetime.fromtimestamp(bounds[1] / 1000, UTC).date()
        events = events_all.where(
            F.col("event_date").between(F.lit(first_day), F.lit(last_day))
            & (_ms("event_time") >= F.lit(bounds[0]))
            & (_ms("event_time") < F.lit(bounds[1]))
            & (F.col("arrival_status") != "duplicate")
        )
        for r in (
            events.groupBy("partition")
            .agg(
                F.count(F.lit(1)).alias("events"),
                F.count_if(F.col("arrival_status") == "late").alias("late"),
            )
            .orderBy("partition")
            .collect()
        ):
            total, late_n = int(r["events"]), int(r["late"])
            partitions.append(
                {
                    "partition": r["partition"],
                    "events": total,
                    "late": late_n,
                    "rate": late_n / total if total else 0.0,
                }
            )

    from expectations.validate import data_docs_index, read_results

    validation = read_results(spark, warehouse, business_date)
    index = data_docs_index(gx_root)
    rate = summary.get("late_event_rate") if summary else None
    if rate is None and headline["batch_count"]:
        rate = headline["explained_count"] / headline["batch_count"]
    provenance: dict[str, Any] = {
        "report generated": now.astimezone(UTC).isoformat(),
        "reconciliation read": f"v{recon_version}",
    }
    if run:
        provenance.update(
            {
                "reconciliation run": _fmt_ts(run.get("run_time")),
                "events version (pinned)": run.get("events_version"),
                "stream_aggregates version (pinned)": run.get("stream_aggregates_version"),
                "late_events version (pinned)": run.get("late_events_version"),
                "window": format_duration(int(window_ms)) if window_ms else None,
                "report time zone": zone,
            }
        )
    else:
        provenance["reconciliation run"] = "not recorded (no reconciliation_runs row)"
    if validation:
        provenance["validation run"] = _fmt_ts(max(r["run_time"] for r in validation))
    data = ReportData(
        business_date=business_date,
        now=now,
        report_timezone=zone,
        headline=headline,
        late_event_rate=None if rate is None else float(rate),
        max_lateness_ms=(summary or {}).get("max_lateness_ms"),
        per_window=per_window,
        lateness_hist=lateness_hist,
        curve=curve_list,
        curve_source=curve_source,
        current_bound_ms=current_bound_ms,
        recommended_bound_ms=recommended_bound_ms,
        completeness_target=completeness_target,
        worst_keys=worst,
        partitions=partitions,
        validation=validation,
        data_docs_index=index.resolve().as_uri() if index.is_file() else None,
        provenance=provenance,
        settings=settings,
        window_ms=int(window_ms) if window_ms else None,
    )
    recon_rows = T.read_table(spark, warehouse, "reconciliation", recon_version).where(
        F.col("business_date") == F.lit(business_date)
    )
    return data, recon_rows


def _fmt_ts(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        # Spark returns session-time (UTC) naive datetimes.
        value = value if value.tzinfo else value.replace(tzinfo=UTC)
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return str(value)


# -- charts --------------------------------------------------------------------------------------


def _png(fig: Any) -> str:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _figure(width: float = 9.0, height: float = 3.6) -> tuple[Any, Any]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    return fig, fig.add_subplot(1, 1, 1)


def _placeholder(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=13, color="#666")
    ax.set_axis_off()


def _hours(ms: int, day_start_ms: int) -> float:
    return (ms - day_start_ms) / 3_600_000


def _thousands(ax: Any, axis: str = "y") -> None:
    from matplotlib.ticker import FuncFormatter

    fmt = FuncFormatter(lambda v, _pos: f"{v:,.0f}" if float(v).is_integer() else f"{v:,.2f}")
    (ax.yaxis if axis == "y" else ax.xaxis).set_major_formatter(fmt)


def chart_per_window(data: ReportData) -> str:
    """Top: batch vs streaming amount per window (all keys); bottom: the gap per window,
    split into the part explained by late events and the unexplained residual."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.0, 5.2))
    top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    if not data.per_window:
        _placeholder(top, "no windows")
        bottom.set_axis_off()
        return _png(fig)
    start, _ = day_bounds_ms(data.business_date, data.report_timezone)
    x = [_hours(w[0], start) for w in data.per_window]
    marker = "o" if len(x) <= 60 else None
    top.plot(x, [w[2] / 100 for w in data.per_window], marker=marker, label="batch (audited)")
    top.plot(
        x,
        [w[1] / 100 for w in data.per_window],
        marker=marker,
        linestyle="--",
        label="streaming (provisional)",
    )
    top.set_ylabel("amount per window")
    top.legend(loc="upper left")
    top.grid(alpha=0.3)
    _thousands(top)
    # one window wide, but at least 1/300 of the day so a lone window stays visible
    window_h = (data.window_ms or 60_000) / 3_600_000
    width = max(window_h, 24 / 300)
    late = [w[3] / 100 for w in data.per_window]
    residual = [w[4] / 100 for w in data.per_window]
    bars = {"width": width, "align": "edge"}
    bottom.bar(x, late, color="#9467bd", label="explained by late events", **bars)
    bottom.bar(x, residual, bottom=late, color="#d62728", label="unexplained", **bars)
    bottom.axhline(0, color="#333", linewidth=0.6)
    bottom.set_ylabel("gap (batch − stream)")
    bottom.set_xlabel(f"hour of {data.business_date.isoformat()} ({data.report_timezone})")
    bottom.set_xlim(0, 24)
    bottom.set_xticks(range(0, 25, 2))
    bottom.legend(loc="upper left")
    bottom.grid(alpha=0.3)
    _thousands(bottom)
    return _png(fig)


def chart_lateness(data: ReportData) -> str:
    fig, ax = _figure()
    if not data.lateness_hist or not any(n for _, n in data.lateness_hist):
        _placeholder(ax, "no late events on this date")
        return _png(fig)
    labels = [label for label, _ in data.lateness_hist]
    ax.bar(range(len(labels)), [n for _, n in data.lateness_hist], color="#9467bd")
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
    ax.set_xlabel("lateness (watermark at arrival − window end)")
    ax.set_ylabel("late events")
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


def chart_curve(data: ReportData) -> str:
    fig, ax = _figure()
    if not data.curve:
        _placeholder(ax, "latency/completeness curve: not computed")
        return _png(fig)
    points = sorted(data.curve, key=lambda e: e["lateness_ms"])
    x = [p["lateness_ms"] / 1000 for p in points]
    ax.plot(x, [float(p["completeness_pct"]) for p in points], marker="o", color="#2ca02c")
    if data.completeness_target is not None:
        ax.axhline(
            data.completeness_target,
            color="#7f7f7f",
            linestyle=":",
            label=f"target {data.completeness_target:g} %",
        )
    bounds = (
        ("current bound", data.current_bound_ms, "#ff7f0e", "--"),
        ("recommended", data.recommended_bound_ms, "#1f77b4", "-."),
    )
    for label, bound_ms, color, style in bounds:
        if bound_ms is not None:
            ax.axvline(
                bound_ms / 1000,
                color=color,
                linestyle=style,
                label=f"{label} {format_duration(bound_ms)}",
            )
    positive = [v for v in x if v > 0]
    if len(positive) >= 2 and max(positive) / min(positive) > 50:
        ax.set_xscale("symlog", linthresh=max(min(positive), 0.001))
    ax.set_xlim(left=0)
    ax.set_xlabel("lateness bound L (seconds) — a bigger L means later results")
    ax.set_ylabel("completeness (% events on time)")
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    return _png(fig)


def chart_worst_keys(data: ReportData) -> str:
    fig, ax = _figure(height=max(2.5, 0.45 * len(data.worst_keys) + 1))
    if not data.worst_keys:
        _placeholder(ax, "no key has a gap")
        return _png(fig)
    keys = [str(k["key"]) for k in data.worst_keys][::-1]
    explained = [k["explained_amount"] / 100 for k in data.worst_keys][::-1]
    unexplained = [k["unexplained_amount"] / 100 for k in data.worst_keys][::-1]
    ax.barh(keys, explained, color="#9467bd", label="explained by late events")
    ax.barh(keys, unexplained, left=explained, color="#d62728", label="unexplained")
    ax.set_xlabel("gap = batch − streaming (currency units)")
    _thousands(ax, "x")
    ax.legend(loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    return _png(fig)


def chart_partitions(data: ReportData) -> str:
    fig, ax = _figure()
    if not data.partitions:
        _placeholder(ax, "no events on this date")
        return _png(fig)
    labels = [str(p["partition"]) for p in data.partitions]
    ax.bar(labels, [p["rate"] * 100 for p in data.partitions], color="#8c564b")
    ax.set_xlabel("source partition")
    ax.set_ylabel("late events (% of the partition's events)")
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


# -- HTML --------------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2rem auto;
max-width:1100px;color:#222;padding:0 1rem}
h1{margin-bottom:.2rem}h2{margin-top:2.2rem;border-bottom:1px solid #ddd;padding-bottom:.3rem}
table{border-collapse:collapse;margin:.6rem 0}td,th{border:1px solid #ddd;padding:.3rem .6rem}
th{background:#f5f5f5;text-align:left}td.num{text-align:right;font-variant-numeric:tabular-nums}
.ok{color:#2a7d2a;font-weight:600}.bad{color:#b22222;font-weight:600}
.warn{color:#b8860b;font-weight:600}.muted{color:#666}img{max-width:100%;height:auto}
.badge{display:inline-block;padding:.2rem .6rem;border-radius:.3rem;color:#fff}
.badge.ok{background:#2a7d2a}.badge.bad{background:#b22222}.badge.warn{background:#b8860b}
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _img(alt: str, png: str, ident: str) -> str:
    return f'<img id="{ident}" alt="{_e(alt)}" src="data:image/png;base64,{png}">'


def render_html(data: ReportData, csv_name: str) -> str:
    h = data.headline
    balanced = h["unexplained_windows"] == 0 and h["unexplained_amount"] == 0
    crit_failed = [r for r in data.validation if not r["success"] and r["severity"] == "critical"]
    warn_failed = [r for r in data.validation if not r["success"] and r["severity"] != "critical"]
    day = data.business_date.isoformat()

    def line(label: str, key: str, ident: str) -> str:
        return (
            f'<tr><th>{_e(label)}</th><td class="num" id="{ident}-count">'
            f"{format_count(h[f'{key}_count'])}</td>"
            f'<td class="num" id="{ident}-amount">{format_minor(h[f"{key}_amount"])}</td></tr>'
        )

    headline = (
        '<table id="headline"><tr><th></th><th>events</th><th>amount</th></tr>'
        + line("Streaming total (provisional)", "stream", "stream")
        + line("Batch total (audited)", "batch", "batch")
        + line("Gap (batch − streaming)", "gap", "gap")
        + line("Explained by late events", "explained", "explained")
        + line("Unexplained", "unexplained", "unexplained")
        + "</table>"
        + f'<p>Windows: <span id="windows">{format_count(h["windows"])}</span>; unexplained '
        f'windows: <span id="unexplained-windows">{format_count(h["unexplained_windows"])}'
        f'</span>; late-event rate: <span id="late-rate">{format_rate(data.late_event_rate)}'
        "</span>"
        + (
            f"; max lateness {format_duration(int(data.max_lateness_ms))}"
            if data.max_lateness_ms is not None
            else ""
        )
        + "</p>"
    )
    status = (
        '<span class="badge ok" id="balance">BALANCED</span>'
        if balanced
        else '<span class="badge bad" id="balance">UNEXPLAINED DIFFERENCES</span>'
    )

    # validation
    if data.validation:
        verdict = (
            '<span class="badge bad" id="validation-verdict">FAILED</span>'
            if crit_failed
            else (
                '<span class="badge warn" id="validation-verdict">PASSED WITH WARNINGS</span>'
                if warn_failed
                else '<span class="badge ok" id="validation-verdict">PASSED</span>'
            )
        )
        rows = []
        for r in data.validation:
            cls = "ok" if r["success"] else ("bad" if r["severity"] == "critical" else "warn")
            word = "pass" if r["success"] else "FAIL"
            page = r.get("data_docs_page")
            docs = f'<a href="{_e(page)}">Data Docs</a>' if page else ""
            rows.append(
                f"<tr><td>{_e(r['suite'])}</td><td>{_e(r['check_name'])}</td>"
                f'<td>{_e(r["severity"])}</td><td class="{cls}">{word}</td>'
                f"<td>{_e(r['observed_value'])}</td><td>{_e(r.get('description'))}</td>"
                f"<td>{docs}</td></tr>"
            )
        index_link = (
            f'<p>GX Data Docs: <a id="data-docs" href="{_e(data.data_docs_index)}">'
            f"{_e(data.data_docs_index)}</a></p>"
            if data.data_docs_index
            else '<p class="muted">GX Data Docs site not built on this machine.</p>'
        )
        validation = (
            f"<p>{verdict} {len(data.validation)} expectations, {len(crit_failed)} failed, "
            f"{len(warn_failed)} warning(s).</p>"
            + index_link
            + '<table id="validation"><tr><th>suite</th><th>check</th><th>severity</th>'
            "<th>result</th><th>observed</th><th>expectation</th><th></th></tr>"
            + "".join(rows)
            + "</table>"
        )
    else:
        validation = (
            '<p class="muted" id="validation-verdict">Not validated: no validation_results '
            f"rows for {day} (run tally validate --date {day}).</p>"
        )

    worst = (
        '<table id="worst-keys"><tr><th>key</th><th>gap</th><th>explained</th>'
        "<th>unexplained</th><th>unexplained windows</th></tr>"
        + "".join(
            f'<tr><td>{_e(k["key"])}</td><td class="num">{format_minor(int(k["gap_amount"]))}'
            f'</td><td class="num">{format_minor(int(k["explained_amount"]))}</td>'
            f'<td class="num">{format_minor(int(k["unexplained_amount"]))}</td>'
            f'<td class="num">{format_count(int(k["unexplained_windows"]))}</td></tr>'
            for k in data.worst_keys
        )
        + "</table>"
        if data.worst_keys
        else '<p class="muted">No key has a gap.</p>'
    )
    partitions = (
        '<table id="partitions"><tr><th>partition</th><th>events</th><th>late</th>'
        "<th>late rate</th></tr>"
        + "".join(
            f'<tr><td>{_e(p["partition"])}</td><td class="num">{format_count(p["events"])}'
            f'</td><td class="num">{format_count(p["late"])}</td>'
            f'<td class="num">{format_rate(p["rate"])}</td></tr>'
            for p in data.partitions
        )
        + "</table>"
        if data.partitions
        else ""
    )
    curve_note = (
        f"Curve: {_e(data.curve_source)}. Current bound: "
        f'<span id="current-bound">{_e(_dur(data.current_bound_ms))}</span>; recommended: '
        f'<span id="recommended-bound">{_e(_dur(data.recommended_bound_ms))}</span>'
        + (
            f" (smallest bound reaching {data.completeness_target:g} % completeness)"
            if data.completeness_target is not None
            else ""
        )
        + "."
    )
    provenance = (
        '<table id="provenance">'
        + "".join(
            f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>"
            for k, v in data.provenance.items()
            if v is not None
        )
        + "</table>"
    )
    settings = (
        '<table id="settings">'
        + "".join(
            f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in sorted(data.settings.items())
        )
        + "</table>"
        if data.settings
        else '<p class="muted">No settings recorded.</p>'
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>tally reconciliation report {day}</title>
<style>{_CSS}</style></head>
<body>
<h1>Reconciliation report: <span id="business-date">{day}</span></h1>
<p class="muted">Business date in {_e(data.report_timezone)}; amounts in currency units
(integer minor units / 100). Rows: <a href="{_e(csv_name)}">{_e(csv_name)}</a>.</p>
<h2>Headline</h2>
<p>{status}</p>
{headline}
<h2>Streaming vs batch per window</h2>
{_img("streaming vs batch per window", chart_per_window(data), "chart-windows")}
<h2>Late events by lateness</h2>
{_img("late events by lateness", chart_lateness(data), "chart-lateness")}
<h2>Latency / completeness</h2>
{_img("latency/completeness curve", chart_curve(data), "chart-curve")}
<p>{curve_note}</p>
<h2>Worst keys by gap</h2>
{_img("worst keys by gap", chart_worst_keys(data), "chart-worst-keys")}
{worst}
<h2>Late-event rate per source partition</h2>
{_img("late-event rate per source partition", chart_partitions(data), "chart-partitions")}
{partitions}
<h2>Validation</h2>
{validation}
<h2>Provenance</h2>
{provenance}
<h3>Settings in force</h3>
{settings}
</body></html>
"""


def _dur(ms: int | None) -> str:
    return "not known" if ms is None else format_duration(int(ms))


def write_csv(rows: DataFrame, path: Path) -> int:
    """The reconciliation rows as CSV (streamed from Spark in window, key order); returns
    the number of rows. Amounts stay integer minor units."""
    columns = [c for c in RECONCILIATION_COLUMNS if c in rows.columns]
    ordered = rows.select(*columns).orderBy("window_start", "key")
    count = 0
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(columns)
        for row in ordered.toLocalIterator():
            writer.writerow(
                [
                    v.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
                    if isinstance(v, datetime)
                    else ("" if v is None else v)
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
    *,
    curve: Sequence[dict[str, Any]] | None = None,
    current_bound_ms: int | None = None,
    recommended_bound_ms: int | None = None,
    completeness_target: float | None = None,
    report_timezone: str | None = None,
    gx_root: str | None = None,
    fallback_bound_ms: int | None = None,
) -> Path:
    """Write `report-YYYY-MM-DD.html` and `reconciliation-YYYY-MM-DD.csv` into `out_dir`;
    returns the HTML path. See the module docstring for what they hold."""
    if now.tzinfo is None:
        raise ReportError("now: needs a time zone")
    data, rows = collect_report_data(
        spark,
        warehouse,
        business_date,
        now,
        curve=curve,
        current_bound_ms=current_bound_ms,
        recommended_bound_ms=recommended_bound_ms,
        completeness_target=completeness_target,
        report_timezone=report_timezone,
        gx_root=gx_root,
        fallback_bound_ms=fallback_bound_ms,
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / f"reconciliation-{business_date.isoformat()}.csv"
    write_csv(rows, csv_path)
    html_path = out / f"report-{business_date.isoformat()}.html"
    tmp = html_path.with_suffix(".html.tmp")
    tmp.write_text(render_html(data, csv_path.name), encoding="utf-8")
    tmp.replace(html_path)
    return html_path


# -- command line ----------------------------------------------------------------------------

REPORT_SETTINGS = ("warehouse", "spark_master", "report_timezone", "lateness")


def _load_curve(path: str) -> tuple[list[dict[str, Any]], int | None]:
    """A curve file: `tally lateness-curve --json` output ({"curve": [...], "recommended":
    {...}}) or a bare list of points."""
    try:
        with open(path) as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        raise ReportError(f"curve: file not found: {path}") from None
    except ValueError as exc:
        raise ReportError(f"curve: {path} is not valid JSON: {exc}") from None
    points = doc.get("curve") if isinstance(doc, dict) else doc
    if not isinstance(points, list) or not all(
        isinstance(p, dict) and "lateness_ms" in p and "completeness_pct" in p for p in points
    ):
        raise ReportError(f"curve: {path} holds no list of {{lateness_ms, completeness_pct}}")
    best = doc.get("recommended") if isinstance(doc, dict) else None
    return points, (int(best["lateness_ms"]) if isinstance(best, dict) else None)


def _cmd_report(args: argparse.Namespace, settings: Any) -> int:
    from batch.reconcile import parse_business_date
    from tally.spark import build_session

    try:
        business_date = parse_business_date(args.date)
    except ValueError as exc:
        print(f"tally: bad setting: {exc}", file=sys.stderr)
        return 2
    try:
        curve, recommended = _load_curve(args.curve) if args.curve else (None, None)
        spark = build_session(
            settings.spark_master,
            app_name="tally-report",
            shuffle_partitions=settings.shuffle_partitions,
        )
        path = build_report(
            spark,
            settings.warehouse,
            business_date,
            args.out,
            datetime.now(UTC),
            curve=curve,
            # flags win; otherwise the bound and zone the reconciliation run recorded
            current_bound_ms=settings.lateness if args.lateness is not None else None,
            recommended_bound_ms=recommended,
            completeness_target=settings.completeness_target,
            report_timezone=settings.report_timezone if args.report_timezone else None,
            fallback_bound_ms=settings.lateness,
        )
    except ReportError as exc:
        print(f"tally: report: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path} and {path.parent / f'reconciliation-{business_date.isoformat()}.csv'}")
    return 0


def add_commands(subparsers: Any) -> None:
    """Add `tally report --date YYYY-MM-DD [--warehouse W] [--out DIR] [--curve FILE]`.

    Follows tally.cli's protocol (`func(args, settings)`, `setting_names`; tally.cli reads
    the settings with load_settings and turns a bad one into one line and exit 2). Exit
    codes: 0 written, 2 bad setting or nothing to report on.
    """
    parser = subparsers.add_parser(
        "report",
        help="write the finance/audit report of a business date (one HTML file + a CSV)",
    )
    parser.add_argument("--date", required=True, help="business date, YYYY-MM-DD")
    parser.add_argument("--out", default="reports", help="output directory (default: reports)")
    parser.add_argument(
        "--curve",
        default=None,
        help="JSON from `tally lateness-curve --json` to draw (default: estimate from the "
        "late side output)",
    )
    helps = {
        "warehouse": "warehouse location (directory or URI) of the Delta tables",
        "spark_master": "Spark master URL, e.g. local[*] or spark://host:7077",
        "report_timezone": "time zone of business dates, e.g. Asia/Kolkata",
        "lateness": "the current lateness bound L, marked on the curve, e.g. 30s",
    }
    for name in REPORT_SETTINGS:
        parser.add_argument(
            "--" + name.replace("_", "-"), dest=name, default=None, help=helps.get(name)
        )
    parser.set_defaults(func=_cmd_report, setting_names=REPORT_SETTINGS)
