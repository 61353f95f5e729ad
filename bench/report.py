"""Write the results: `benchmarks.md` (tables, targets, where the time goes), `benchmarks.png`
(matplotlib, Agg) and `benchmarks.json` (every raw number)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.speed import ENGINE_LABELS, ENGINES

MD_NAME, PNG_NAME, JSON_NAME = "benchmarks.md", "benchmarks.png", "benchmarks.json"


def _n(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def _s(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:,.2f}" if value < 10 else f"{value:,.1f}"


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value / 1000:,.1f} s"


def _met(flag: bool | None) -> str:
    return "–" if flag is None else ("**met**" if flag else "**missed**")


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return [*lines, ""]


def _dur(ms: int) -> str:
    from tally.settings import format_duration

    return format_duration(ms)


# -- sections -------------------------------------------------------------------------------------


def _targets(r: dict[str, Any]) -> list[str]:
    rows: list[list[Any]] = []
    sp = r.get("speed")
    if sp:
        rows.append(
            [
                "1. speed layer",
                "tally events/s ÷ plain Spark events/s ≥ 0.8",
                f"{sp['ratio_tally_plain']:.2f}",
                _met(sp["met"]),
            ]
        )
    lat = r.get("latency")
    if lat and "tally" in lat["engines"]:
        t = lat["engines"]["tally"]
        rows.append(
            [
                "2. latency",
                f"p99 ≤ L + 2 triggers = {_ms(lat['target_ms'])}",
                f"p99 {_ms(t['p99_ms'])} (p50 {_ms(t['p50_ms'])})",
                _met(t["met"]),
            ]
        )
    st = r.get("state")
    if st:
        f = st["flat"]
        rows.append(
            [
                "3. state",
                "state and batch time flat (last/first quarter median ≤ 1.5)",
                f"windows ×{_n(f['open_windows']['ratio'], 2)}, "
                f"dedup ×{_n(f['dedup_rows']['ratio'], 2)}, "
                f"batch time ×{_n(f['batch_s']['ratio'], 2)}",
                _met(st["met"]),
            ]
        )
    ni = r.get("nightly")
    if ni and ni["sizes"]:
        big = ni["sizes"][-1]
        rows.append(
            [
                "4. nightly",
                f"re-aggregate + diff ≤ 3× DuckDB at {big['events']:,} events (JSON)",
                f"{big['ratio_json']:.1f}× (Parquet: {big['ratio_parquet']:.1f}×)",
                _met(big["ratio_json"] <= 3.0),
            ]
        )
        g = ni.get("growth")
        if g:
            rows.append(
                [
                    "4. nightly",
                    f"growth {g['from_events']:,} → {g['to_events']:,} no faster than linear",
                    f"×{g['time_ratio']:.1f} time for ×{g['size_ratio']:.0f} events "
                    f"(exponent {g['exponent']:.2f})",
                    _met(g["met"]),
                ]
            )
    cu = r.get("curve")
    if cu:
        rows.append(
            [
                "5. lateness curve",
                "(no target) wall time",
                f"{_s(cu['seconds'])} s for {cu['curve_events']:,} events, {cu['bounds']} bounds",
                "–",
            ]
        )
    return ["## Targets", "", *_table(["section", "target", "measured", ""], rows)]


def _section(title: str, intro: str) -> list[str]:
    """A section's heading and its first paragraph."""
    return [f"## {title}", "", intro, ""]


def _speed(sp: dict[str, Any]) -> list[str]:
    out = _section(
        "1. Speed layer vs plain Spark (available-now backlog)",
        f"Input: {sp['lines']:,} JSON lines from `tally generate` ({sp['distinct_events']:,} "
        f"events, {sp['duplicates']:,} duplicates, {sp['malformed_lines']:,} malformed lines; "
        f"{sp['keys']:,} keys, {sp['partitions']} source partitions, one day of event time), "
        f"{sp['files']} files of {sp['input_bytes'] / sp['files'] / 1e6:.1f} MB, "
        f"{sp['max_files_per_trigger']} files per trigger, {_dur(sp['window_ms'])} windows, "
        f"lateness {_dur(sp['lateness_ms'])}. {sp['repetitions']} repetition(s), engines "
        "alternating in a rotated order, fresh directories for every run"
        + ("; one unmeasured warm-up run of each engine first." if sp["warm_up"] else ".")
        + " events/s = input lines ÷ wall seconds from the query's start to its end (tally: "
        "the `run_stream` call, including creating its tables).",
    )
    out += _engine_rates(sp)
    out += _what_engines_did(sp)
    out += _where_tally_time_goes(sp["tally_breakdown"])
    if sp.get("parse"):
        out += _parse_alone(sp["parse"])
    durations = sp["runs"]["plain"][-1].get("duration_ms") or {}
    if durations:
        out += [
            "Plain Spark's own progress report for the same input (sum over micro-batches, "
            "seconds): "
            + ", ".join(
                f"{k} {v / 1000:.1f}" for k, v in sorted(durations.items(), key=lambda kv: -kv[1])
            )
            + ".",
            "",
        ]
    return out


def _engine_rates(sp: dict[str, Any]) -> list[str]:
    rows = []
    for e in ENGINES:
        st, sec = sp["events_per_s"][e], sp["seconds"][e]
        rows.append(
            [
                ENGINE_LABELS[e],
                _n(st["median"]),
                f"{_n(st['min'])} – {_n(st['max'])}",
                f"{st['spread_pct']:.0f} %",
                _s(sec["median"]),
            ]
        )
    out = _table(["engine", "events/s (median)", "min – max", "spread", "wall s (median)"], rows)
    ceiling = sp["events_per_s"]["batch"]["median"] / sp["events_per_s"]["plain"]["median"]
    return [
        *out,
        f"Ratio (a)/(b): **{sp['ratio_tally_plain']:.2f}** (per repetition: "
        + ", ".join(f"{x:.2f}" for x in sp["ratio_per_repetition"])
        + f"); target ≥ {sp['target_ratio']}: {_met(sp['met'])}. "
        f"(c)/(b): {ceiling:.1f}×.",
        "",
    ]


def _what_engines_did(sp: dict[str, Any]) -> list[str]:
    t = sp["runs"]["tally"][-1]
    p = sp["runs"]["plain"][-1]
    return [
        "What each engine did (last repetition):",
        "",
        *_table(
            ["engine", "micro-batches", "input rows", "result"],
            [
                [
                    ENGINE_LABELS["tally"],
                    t["batches"],
                    f"{t['input_lines']:,} lines ({t['valid_events']:,} valid, "
                    f"{t['quarantined']:,} quarantined)",
                    f"{t['emitted_events']:,} events in emitted windows + {t['late_events']:,} "
                    f"late (side output) + {t['open_window_events']:,} in open windows = "
                    f"{t['accounted_events']:,} (distinct valid events: "
                    f"{sp['distinct_events']:,}); {t['duplicates']:,} duplicates logged; all "
                    "five tables and the state committed each batch",
                ],
                [
                    ENGINE_LABELS["plain"],
                    p["batches"],
                    f"{p['input_rows']:,} rows (blank lines skipped)",
                    f"{p['output_events']:,} events in emitted windows; "
                    f"{p['dropped_by_watermark']:,} rows dropped by the watermark (counted after "
                    "partial aggregation); no dedup, no quarantine, no event log",
                ],
            ],
        ),
    ]


def _where_tally_time_goes(b: dict[str, Any]) -> list[str]:
    wall = b["seconds"]

    def row(name: str, secs: float) -> list[str]:
        return [name, _s(secs), f"{100 * secs / wall:.0f} %"]

    rows = [row("create the 8 tables (once)", b["create_tables_s"])]
    for name, secs in sorted(b["phases_s"].items(), key=lambda kv: -kv[1]):
        if secs >= 0.005 * wall:
            rows.append(row(name, secs))
    rows.append(
        row(
            "outside foreachBatch (Spark: listing, offsets, planning; start/stop)",
            b["outside_foreach_batch_s"],
        )
    )
    return [
        "### Where tally's time goes",
        "",
        f"The median tally run ({_s(wall)} s, {b['batches']} micro-batch"
        f"{'es' if b['batches'] != 1 else ''}), timed from the "
        "outside (`bench/probe.py` wraps `BatchProcessor`'s methods; the gaps between them are "
        "the inline steps of `process()`), summed over the micro-batches:",
        "",
        *_table(["phase", "seconds", "share of wall"], rows),
    ]


def _parse_alone(parse: dict[str, Any]) -> list[str]:
    return [
        f"Parsing alone, on one micro-batch's files ({parse['lines']:,} lines, raw lines "
        "cached as the stream caches them, every output column computed):",
        "",
        *_table(
            ["parse", "seconds", "`from_json` calls in the optimized plan"],
            [
                [
                    "tally `parse_events` → valid (cached raw lines)",
                    _s(parse["tally_valid_s"]),
                    parse["tally_valid_json_parses_in_plan"],
                ],
                [
                    "tally `parse_events` → quarantine (cached raw lines)",
                    _s(parse["tally_quarantine_s"]),
                    parse["tally_quarantine_json_parses_in_plan"],
                ],
                [
                    "plain query's JSON reader (reading the files too)",
                    _s(parse["plain_s"]),
                    "– (one parse in the scan)",
                ],
            ],
        ),
    ]


def _latency(lat: dict[str, Any]) -> list[str]:
    out = _section(
        "2. Latency at a steady rate",
        f"A writer thread drops one file per {lat['file_interval_s']:g} s at "
        f"{lat['rate_events_per_s']:,} events/s for {lat['run_s']:.0f} s (event time = the "
        f"writer's wall clock); {_dur(lat['window_ms'])} windows, L = {_dur(lat['lateness_ms'])}, "
        f"processing-time trigger {_dur(lat['trigger_ms'])}. Delay of a window = timestamp of "
        "the first Delta commit holding a row of it (from the table's `_delta_log`) minus its "
        f"end; windows ending in the first {lat['warmup_s']:.0f} s are warm-up and not counted. "
        f"Target: ≤ L + 2 triggers = {_ms(lat['target_ms'])}.",
    )
    rows = []
    for engine, r in lat["engines"].items():
        batches = sorted(r["batch_duration_ms"])
        median_batch = batches[len(batches) // 2] if batches else None
        rows.append(
            [
                ENGINE_LABELS[engine].split(" (")[0].replace("(a) ", "").replace("(b) ", ""),
                f"{r['windows']} / {r['windows_expected']}",
                _ms(r["p50_ms"]),
                _ms(r["p99_ms"]),
                _ms(r["max_ms"]),
                _ms(median_batch),
                _met(r["met"]) if engine == "tally" else "(reference)",
            ]
        )
    out += _table(["engine", "windows", "p50", "p99", "max", "median batch", "target"], rows)
    return out


def _state(st: dict[str, Any]) -> list[str]:
    f = st["flat"]
    batches = st["batches"]
    out = _section(
        "3. State over a long run",
        f"{st['lines']:,} lines over {st['days']:g} days of event time, {st['files']} files, "
        f"{st['max_files_per_trigger']} per trigger: {len(batches)} micro-batches "
        f"in {_s(st['seconds'])} s. Medians of the first and last quarter of the micro-batches:",
    )
    labels = {
        "open_windows": "open windows (window_state rows)",
        "window_state_bytes": "window_state bytes",
        "dedup_rows": "dedup_state rows",
        "dedup_bytes": "dedup_state bytes",
        "batch_s": "micro-batch wall time (s)",
    }
    rows = [
        [
            labels[k],
            _n(v["first_quarter_median"], 2 if k == "batch_s" else 0),
            _n(v["last_quarter_median"], 2 if k == "batch_s" else 0),
            _n(v["ratio"], 2),
            _n(v["max"], 2 if k == "batch_s" else 0),
            "flat" if v["flat"] else "**grows**",
        ]
        for k, v in f.items()
    ]
    out += _table(["per micro-batch", "first quarter", "last quarter", "ratio", "max", ""], rows)
    if batches:
        out += [
            f"Meanwhile the event log grew to {batches[-1]['event_log_rows']:,} rows: state is "
            "bounded by the watermark, not by the length of the stream.",
            "",
        ]
    return out


def _nightly(ni: dict[str, Any], curve: dict[str, Any] | None) -> list[str]:
    out = _section(
        "4. Nightly job",
        "Per size, one generated day (8 source partitions, 1,000 keys). The speed-layer tables "
        "are built by a batch load with the project's own parse (`tally.events.parse_events`) "
        "and window code (`tally.windows`) instead of streaming (see `bench/nightly.py`: "
        f"micro-batches of {ni['files_per_batch']} files, global-max watermark, late and "
        "duplicate events as the stream would mark them, drained at the end). Stages are the "
        "DAG's (`tally_app.nightly`); reconcile is split at its `batch_aggregates` write. "
        "DuckDB runs the same re-aggregation (validate, first arrival per `event_id`, window, "
        "business day, count and sum, written to Parquet) on the same JSON files and on the "
        "`events` table's Parquet files.",
    )
    out += _nightly_sizes(ni["sizes"])
    checks = [_nightly_check(s) for s in ni["sizes"]]
    out += ["Results agree:", "", *[f"- {c}" for c in checks], ""]
    g = ni.get("growth")
    if g:
        out += [
            f"Growth of re-aggregate + diff from {g['from_events']:,} to {g['to_events']:,} "
            f"events: ×{g['time_ratio']:.1f} for ×{g['size_ratio']:.0f} the data (time ∝ "
            f"events^{g['exponent']:.2f}); {_met(g['met'])}.",
            "",
        ]
    if curve:
        out += _section(
            "5. Lateness curve",
            f"`lateness_curve` over the {curve['curve_events']:,} distinct events of the day "
            f"from the event log ({curve['events']:,}-event day), {curve['bounds']} bounds "
            f"(0 s to 10 min): **{_s(curve['seconds'])} s** wall time, including "
            "`events_from_log` (dedup); recommended bound for 99.9 %: "
            + (_dur(curve["recommended_ms"]) if curve["recommended_ms"] is not None else "none")
            + ".",
        )
    return out


def _nightly_sizes(sizes: list[dict[str, Any]]) -> list[str]:
    columns = {
        "events": lambda s: f"{s['events']:,}",
        "re-aggregate s": lambda s: _s(s["reaggregate_s"]),
        "diff s": lambda s: _s(s["diff_s"]),
        "validate s": lambda s: _s(s["validate_s"]),
        "report s": lambda s: _s(s["report_s"]),
        "DuckDB JSON s": lambda s: _s(s["duckdb_json"]["seconds"]),
        "DuckDB Parquet s": lambda s: _s(s["duckdb_parquet"]["seconds"]),
        "(re-agg + diff) ÷ DuckDB JSON": lambda s: f"{s['ratio_json']:.1f}×",
        "÷ DuckDB Parquet": lambda s: f"{s['ratio_parquet']:.1f}×",
        "setup: batch load s": lambda s: _s(s["load_s"]),
    }
    return _table(list(columns), [[cell(s) for cell in columns.values()] for s in sizes])


def _nightly_check(s: dict[str, Any]) -> str:
    """Whether tally and DuckDB agree at one size, and how the nightly stages came out."""
    verdict = (
        "passed"
        if s["validation_passed"]
        else "failed: " + "; ".join(f.split(":")[0] for f in s["validation_failures"])
    )
    return (
        f"{s['events']:,}: tally {s['tally_events']:,} events / {s['tally_amount']:,} minor "
        f"units in {s['tally_rows']:,} windows, DuckDB {s['duckdb_json']['events']:,} / "
        f"{s['duckdb_json']['amount']:,} ({'same' if s['same_totals_as_duckdb'] else 'DIFFERENT'}"
        f"); nightly wait condition {'ready' if s['wait_ready'] else 'NOT ready'}, "
        f"reconciliation {'balanced' if s['balanced'] else 'NOT balanced'}, validation "
        f"{verdict}"
    )


def render_markdown(r: dict[str, Any], png_name: str | None) -> str:
    m = r["machine"]
    out = [
        "# Benchmarks",
        "",
        f"Generated by `{r['command']}` on {r['started']} (UTC), {r['mode']} mode, "
        f"{_s(r['total_s'])} s in all. Raw numbers: [`{JSON_NAME}`]({JSON_NAME}).",
        "",
        f"Machine: {m['cpu_model']}, {m['cores']} cores, {m['ram_gib']} GiB RAM, {m['os']}. "
        f"Python {m['python']}, Java {m['java']}, pyspark {m['pyspark']}, delta-spark "
        f"{m['delta_spark']}, DuckDB {m['duckdb']}. Spark `{m['spark_master']}`, "
        f"{m['shuffle_partitions']} shuffle partitions, driver memory {m['driver_memory']}; "
        "the same session for every Spark engine. Load average (1/5/15 min) at start "
        f"{m['load_average_at_start']}, at the end {r.get('load_average_at_end')}: the machine "
        "is shared, so compare engines within this run, not across runs.",
        "",
    ]
    sections = r.get("sections_s") or {}
    if sections:
        out += [
            "Wall time per section: "
            + ", ".join(f"{name} {_s(secs)} s" for name, secs in sections.items())
            + ".",
            "",
        ]
    for note in (r.get("preset") or {}).get("notes") or []:
        out += [f"**Note:** {note}.", ""]
    if png_name:
        out += [f"![benchmarks]({png_name})", ""]
    if r.get("errors"):
        out += [
            "## Errors",
            "",
            *[f"- {name}: `{message}`" for name, message in r["errors"].items()],
            "",
        ]
    out += _targets(r)
    if r.get("findings"):
        out += ["## Findings", "", *[f"- {f}" for f in r["findings"]], ""]
    if r.get("speed"):
        out += _speed(r["speed"])
    if r.get("latency"):
        out += _latency(r["latency"])
    if r.get("state"):
        out += _state(r["state"])
    if r.get("nightly") and r["nightly"]["sizes"]:
        out += _nightly(r["nightly"], r.get("curve"))
    elif r.get("curve"):
        out += _nightly({"sizes": [], "files_per_batch": 0}, r["curve"])
    return "\n".join(out).rstrip() + "\n"


# -- the chart ------------------------------------------------------------------------------------


def render_chart(r: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    (ax1, ax2), (ax3, ax4) = axes
    panels = (
        (ax1, _chart_speed, r.get("speed")),
        (ax2, _chart_nightly, r.get("nightly")),
        (ax3, _chart_state, r.get("state")),
        (ax4, _chart_latency, r.get("latency")),
    )
    for ax, draw, section in panels:
        if not (section and draw(ax, section)):
            ax.set_axis_off()
    fig.suptitle(f"tally benchmarks ({r['mode']} mode, {r['started']})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _chart_speed(ax: Any, sp: dict[str, Any]) -> bool:
    from matplotlib.ticker import StrMethodFormatter

    meds = [sp["events_per_s"][e]["median"] for e in ENGINES]
    lo = [m - sp["events_per_s"][e]["min"] for m, e in zip(meds, ENGINES, strict=True)]
    hi = [sp["events_per_s"][e]["max"] - m for m, e in zip(meds, ENGINES, strict=True)]
    ax.bar(
        [ENGINE_LABELS[e].replace(" (", "\n(") for e in ENGINES],
        meds,
        yerr=[lo, hi],
        color=["#1f77b4", "#ff7f0e", "#7f7f7f"],
        capsize=6,
    )
    ax.set_ylabel("events/s (median, min–max)")
    ax.set_title(f"1. Speed: {sp['lines']:,} events, available-now")
    ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
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
    ax.set_title("4. Nightly job vs DuckDB")
    ax.legend(fontsize=8)
    return True


def _chart_state(ax: Any, st: dict[str, Any]) -> bool:
    if not st["batches"]:
        return False
    ids = [b["batch_id"] for b in st["batches"]]
    ax.plot(ids, [b["open_windows"] for b in st["batches"]], label="open windows")
    ax.plot(ids, [b["dedup_rows"] for b in st["batches"]], label="dedup ids")
    ax.set_xlabel("micro-batch")
    ax.set_ylabel("state rows")
    twin = ax.twinx()
    twin.plot(
        ids,
        [b["batch_s"] or 0 for b in st["batches"]],
        color="#2ca02c",
        alpha=0.6,
        label="batch seconds",
    )
    twin.set_ylabel("batch seconds")
    twin.set_ylim(bottom=0)
    ax.set_ylim(bottom=0)
    lines = ax.get_legend_handles_labels()
    more = twin.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=8, loc="upper left")
    ax.set_title("3. State and batch time over a long run")
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
    ax.set_title("2. Latency at a steady rate")
    ax.legend(fontsize=8)
    return True


def write_outputs(r: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    png = out_dir / PNG_NAME
    render_chart(r, png)
    md = out_dir / MD_NAME
    md.write_text(render_markdown(r, PNG_NAME), encoding="utf-8")
    js = out_dir / JSON_NAME
    js.write_text(json.dumps(r, indent=1, sort_keys=True, default=str) + "\n", encoding="utf-8")
    return {"md": md, "png": png, "json": js}
