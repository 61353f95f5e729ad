"""`benchmarks.png`: one matplotlib panel per measured section (Agg, no display)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.report.formatting import ENGINE_ORDER, engine_labels


def render_chart(r: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(17, 9))
    (ax1, ax2, ax3), (ax4, ax5, ax6) = axes
    panels = (
        (ax1, _chart_speed, r.get("speed")),
        (ax2, _chart_phases, r.get("state")),
        (ax3, _chart_latency, r.get("latency")),
        (ax4, _chart_state, r.get("state")),
        (ax5, _chart_bigfile, r.get("bigfile")),
        (ax6, _chart_nightly, r.get("nightly")),
    )
    for ax, draw, section in panels:
        if not (section and draw(ax, section)):
            ax.set_axis_off()
    fig.suptitle(f"tally benchmarks ({r['mode']} mode, {r['started']})")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _chart_speed(ax: Any, sp: dict[str, Any]) -> bool:
    from matplotlib.ticker import StrMethodFormatter

    measured = sp["events_per_s"]
    names = [n for n in ENGINE_ORDER if n in measured and measured[n]["median"]]
    meds = [sp["events_per_s"][n]["median"] for n in names]
    lo = [m - sp["events_per_s"][n]["min"] for m, n in zip(meds, names, strict=True)]
    hi = [sp["events_per_s"][n]["max"] - m for m, n in zip(meds, names, strict=True)]
    colors = {"tally": "#1f77b4", "durable": "#ff7f0e", "agg": "#2ca02c", "batch": "#7f7f7f"}
    bars = ax.bar(
        [engine_labels()[n].split(" ")[0] for n in names],
        meds,
        yerr=[lo, hi],
        color=[colors.get(n.removesuffix("_prev"), "#999999") for n in names],
        alpha=0.9,
        capsize=5,
    )
    for bar, name in zip(bars, names, strict=True):
        if name.endswith("_prev"):
            bar.set_hatch("//")
    ax.set_ylabel("events/s, whole process (median, min–max)")
    ax.set_title(
        f"1. Throughput: {sp['lines']:,} lines\n(a) tally (b) durable (c) agg only (d) batch; "
        "' = previous config",
        fontsize=10,
    )
    ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    return True


def _chart_phases(ax: Any, st: dict[str, Any]) -> bool:
    fc = st.get("fixed_cost")
    if not fc or not fc["phases"]:
        return False
    names = [p["phase"] for p in fc["phases"]]
    ax.barh(names, [p["median_s"] for p in fc["phases"]], color="#1f77b4")
    ax.invert_yaxis()
    ax.axvline(fc["target_ms"] / 1000, color="red", linestyle="--", label="target, whole batch")
    ax.set_xlabel("median seconds per micro-batch")
    ax.set_title(
        f"2. Per-batch phases (~{fc['lines_per_batch']:,.0f} lines): median batch "
        f"{(fc['median_batch_ms'] or 0) / 1000:.2f} s",
        fontsize=10,
    )
    ax.legend(fontsize=8)
    return True


def _chart_state(ax: Any, st: dict[str, Any]) -> bool:
    batches = st["batches"]
    if not batches:
        return False
    ids = [b["batch_id"] for b in batches]
    ax.plot(ids, [b["open_windows"] for b in batches], label="open windows")
    ax.plot(
        ids,
        [(b["state_bytes"] or float("nan")) / 1000 for b in batches],
        label="state kB on disk",
    )
    ax.set_xlabel("micro-batch")
    ax.set_ylabel("windows / kB")
    ax.set_ylim(bottom=0)
    twin = ax.twinx()
    twin.plot(
        ids, [b["batch_ms"] / 1000 for b in batches], color="#2ca02c", alpha=0.6, label="batch s"
    )
    twin.plot(
        ids,
        [(b["peak_rss_mb"] or float("nan")) / 1000 for b in batches],
        color="#d62728",
        alpha=0.6,
        label="peak RSS GB",
    )
    twin.set_ylabel("batch seconds / RSS GB")
    twin.set_ylim(bottom=0)
    lines = ax.get_legend_handles_labels()
    more = twin.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=8, loc="upper left")
    ax.set_title("4. State, batch time and RSS over a 10× longer run", fontsize=10)
    return True


def _chart_bigfile(ax: Any, bf: dict[str, Any]) -> bool:
    labels = [f"{bf['files']} files", "one file"]
    runs = [bf["runs"]["split"], bf["runs"]["single"]]
    x = range(len(runs))
    ax.bar([i - 0.2 for i in x], [r["seconds"] for r in runs], width=0.4, label="wall s")
    ax.set_ylabel("wall seconds")
    twin = ax.twinx()
    twin.bar(
        [i + 0.2 for i in x],
        [r["peak_rss_mb"] for r in runs],
        width=0.4,
        color="#d62728",
        label="peak RSS MB",
    )
    twin.set_ylabel("peak RSS (MB)")
    ax.set_xticks(list(x), labels)
    lines = ax.get_legend_handles_labels()
    more = twin.get_legend_handles_labels()
    twin.legend(lines[0] + more[0], lines[1] + more[1], fontsize=8, loc="upper center")
    twin.set_ylim(0, max(r["peak_rss_mb"] for r in runs) * 1.25)
    ax.set_ylim(0, max(r["seconds"] for r in runs) * 1.25)
    verdict = "equal" if bf["equal"] else "UNEQUAL"
    ax.set_title(
        f"5. {bf['single_file_bytes'] / 1e9:.2f} GB in one file vs {bf['files']} files: "
        f"results {verdict}",
        fontsize=10,
    )
    return True


def _chart_nightly(ax: Any, ni: dict[str, Any]) -> bool:
    if not ni["sizes"]:
        return False
    sizes = [s["events"] for s in ni["sizes"]]
    series = {
        "tally re-aggregate + diff": [s["reaggregate_s"] + s["diff_s"] for s in ni["sizes"]],
        "tally validate (GX)": [s["validate_s"] for s in ni["sizes"]],
        "tally report": [s["report_s"] for s in ni["sizes"]],
        "DuckDB, JSON": [s["duckdb_json"]["seconds"] for s in ni["sizes"]],
        "DuckDB, Parquet": [s["duckdb_parquet"]["seconds"] for s in ni["sizes"]],
    }
    for label, ys in series.items():
        ax.plot(sizes, ys, marker="o", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("events in the day")
    ax.set_ylabel("seconds")
    ax.set_title("6. Nightly job vs DuckDB", fontsize=10)
    ax.legend(fontsize=8)
    return True


def _chart_latency(ax: Any, lat: dict[str, Any]) -> bool:
    if not lat["engines"]:
        return False
    for engine, res in lat["engines"].items():
        ax.plot(
            range(len(res["delays_ms"])),
            [d / 1000 for d in res["delays_ms"]],
            marker=".",
            label=engine,
        )
    ax.axhline(lat["target_ms"] / 1000, color="red", linestyle="--", label="L + 2 triggers")
    ax.set_xlabel("window (in order)")
    ax.set_ylabel("window end → readable (s)")
    ax.set_ylim(bottom=0)
    ax.set_title("3. Latency at a steady rate", fontsize=10)
    ax.legend(fontsize=8)
    return True
