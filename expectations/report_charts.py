"""The report's charts: matplotlib (Agg, no pyplot) figures as base64 PNG strings.

matplotlib is imported inside the functions only: importing this module stays light.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from typing import Any

from expectations.report_data import ReportData
from tally.dates import business_day_bounds
from tally.durations import format_duration
from tally.money import minor_digits
from tally.outputs import one_line

LATE_COLOR = "#9467bd"
UNEXPLAINED_COLOR = "#d62728"


def preload() -> None:
    """Import the matplotlib modules the charts use (see `expectations.validate.preload`)."""
    import matplotlib.backends.backend_agg
    import matplotlib.figure
    import matplotlib.patches
    import matplotlib.ticker  # noqa: F401


def _png(fig: Any) -> str:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def literal_label(text: str) -> str:
    """`text` drawn as it is, on one line: matplotlib reads text between two `$` as mathtext,
    and an event key like `$x^$` would then fail the whole report (an escaped `\\$` is a plain
    dollar); control characters are shown as their escapes (`tally.outputs.one_line`)."""
    return one_line(text).replace("$", r"\$")


def _figure(width: float = 9.0, height: float = 3.6) -> tuple[Any, Any]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    return fig, fig.add_subplot(1, 1, 1)


def _placeholder(fig: Any, ax: Any, text: str) -> str:
    """The chart when there is nothing to draw: `text` in place of the axes."""
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=13, color="#666")
    ax.set_axis_off()
    return _png(fig)


def _hours(ms: int, day_start_ms: int) -> float:
    return (ms - day_start_ms) / 3_600_000


def _unit(data: ReportData) -> int:
    """Minor units per unit of the run's currency: the charts draw currency units (100 for
    USD, 1 for JPY, 1,000 for BHD)."""
    return 10 ** minor_digits(data.currency)


def _thousands(ax: Any, data: ReportData, axis: str = "y") -> None:
    """Ticks with thousands separators, and the currency's decimals where a tick has any."""
    from matplotlib.ticker import FuncFormatter

    digits = minor_digits(data.currency)
    fmt = FuncFormatter(
        lambda v, _pos: f"{v:,.0f}" if float(v).is_integer() else f"{v:,.{digits}f}"
    )
    (ax.yaxis if axis == "y" else ax.xaxis).set_major_formatter(fmt)


def _bars(
    fig: Any,
    ax: Any,
    bars: Sequence[tuple[str, float]],
    color: str,
    axis_labels: tuple[str, str],
    **tick_style: Any,
) -> str:
    """A bar per (label, value), labels on the x axis (`tick_style`: their text properties)."""
    positions = range(len(bars))
    ax.bar(positions, [value for _, value in bars], color=color)
    ax.set_xticks(positions, [label for label, _ in bars], **tick_style)
    ax.set_xlabel(axis_labels[0])
    ax.set_ylabel(axis_labels[1])
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


def chart_per_window(data: ReportData) -> str:
    """Top: batch vs streaming amount per window (all keys); bottom: the gap per window,
    split into the part explained by late events and the unexplained residual."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    fig = Figure(figsize=(9.0, 5.2))
    top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    if not data.per_window:
        bottom.set_axis_off()
        return _placeholder(fig, top, "no windows")
    start, _ = business_day_bounds(data.business_date, data.report_timezone)
    x = [_hours(w[0], start) for w in data.per_window]
    marker = "o" if len(x) <= 60 else None
    unit = _unit(data)
    top.plot(x, [w[2] / unit for w in data.per_window], marker=marker, label="batch (audited)")
    top.plot(
        x,
        [w[1] / unit for w in data.per_window],
        marker=marker,
        linestyle="--",
        label="streaming (provisional)",
    )
    top.set_ylabel(f"amount per window ({data.currency})")
    top.legend(loc="upper left")
    top.grid(alpha=0.3)
    _thousands(top, data)
    # one window wide, but at least 1/300 of the day so a lone window stays visible
    window_h = (data.window_ms or 60_000) / 3_600_000
    width = max(window_h, 24 / 300)
    # Bars only where there is a gap: a zero-height bar draws nothing, yet matplotlib builds a
    # patch for each (two a window: ~3,000 for a day of 1-minute windows, most of the chart's
    # time). The legend names both parts whether or not they occur, as before.
    gaps = [(h, w) for h, w in zip(x, data.per_window, strict=True) if w[3] or w[4]]
    at = [h for h, _ in gaps]
    late = [w[3] / unit for _, w in gaps]
    residual = [w[4] / unit for _, w in gaps]
    bars = {"width": width, "align": "edge"}
    bottom.bar(at, late, color=LATE_COLOR, **bars)
    bottom.bar(at, residual, bottom=late, color=UNEXPLAINED_COLOR, **bars)
    bottom.axhline(0, color="#333", linewidth=0.6)
    bottom.set_ylabel("gap (batch − stream)")
    bottom.set_xlabel(f"hour of {data.business_date.isoformat()} ({data.report_timezone})")
    bottom.set_xlim(0, 24)
    bottom.set_xticks(range(0, 25, 2))
    bottom.legend(
        handles=[
            Patch(color=LATE_COLOR, label="explained by late events"),
            Patch(color=UNEXPLAINED_COLOR, label="unexplained"),
        ],
        loc="upper left",
    )
    bottom.grid(alpha=0.3)
    _thousands(bottom, data)
    return _png(fig)


def chart_lateness(data: ReportData) -> str:
    fig, ax = _figure()
    if not data.lateness_hist or not any(n for _, n in data.lateness_hist):
        return _placeholder(fig, ax, "no late events on this date")
    return _bars(
        fig,
        ax,
        data.lateness_hist,
        "#9467bd",
        ("lateness (watermark at arrival − window end)", "late events"),
        rotation=30,
        ha="right",
    )


def chart_curve(data: ReportData) -> str:
    fig, ax = _figure()
    if not data.curve:
        return _placeholder(fig, ax, "latency/completeness curve: not computed")
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
        return _placeholder(fig, ax, "no key has a gap")
    keys = [literal_label(str(k["key"])) for k in data.worst_keys][::-1]
    unit = _unit(data)
    explained = [k["explained_amount"] / unit for k in data.worst_keys][::-1]
    unexplained = [k["unexplained_amount"] / unit for k in data.worst_keys][::-1]
    ax.barh(keys, explained, color="#9467bd", label="explained by late events")
    ax.barh(keys, unexplained, left=explained, color="#d62728", label="unexplained")
    ax.set_xlabel(f"gap = batch − streaming ({data.currency})")
    _thousands(ax, data, "x")
    ax.legend(loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    return _png(fig)


def chart_partitions(data: ReportData) -> str:
    fig, ax = _figure()
    if not data.partitions:
        return _placeholder(fig, ax, "no events on this date")
    return _bars(
        fig,
        ax,
        [(str(p["partition"]), p["rate"] * 100) for p in data.partitions],
        "#8c564b",
        ("source partition", "late events (% of the partition's events)"),
    )
