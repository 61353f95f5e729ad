"""`benchmarks.md`: the run and the machine, the targets met or missed, the findings, then
one section per target with its tables (`bench.report.sections`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench import nightly_targets
from bench.findings import closing_notes
from bench.report import backlog, lateness, sections
from bench.report import history as history_section
from bench.report import longhaul as longhaul_section
from bench.report.carry import carried_label
from bench.report.files import JSON_NAME
from bench.report.formatting import megabytes, ms_as_secs, number, secs, table, verdict

# One row of the targets table: the section, the target, what was measured, met or not (None:
# no target).
Row = Callable[[str, str, str, bool | None], None]


def _targets(r: dict[str, Any]) -> list[str]:
    rows: list[list[Any]] = []

    def row(section: str, target: str, measured: str, met: bool | None) -> None:
        date = (r.get("measured") or {}).get(section, "–")
        rows.append(
            [
                target,
                measured,
                verdict(met),
                date + (" (carried)" if carried_label(r, section) else ""),
            ]
        )

    _speed_cost_latency_rows(r, row)
    _state_bigfile_nightly_rows(r, row)
    _rows_without_target(r, row)
    if r.get("lateness"):
        lateness.target_row(r["lateness"], row)
    if r.get("backlog"):
        backlog.target_row(r["backlog"], row)
        backlog.skewed_target_row(r["backlog"], row)
    if r.get("longhaul"):
        longhaul_section.target_rows(r["longhaul"], row)
    if r.get("history"):
        history_section.target_row(r["history"], row)
    return ["## Targets", "", *table(["target", "measured", "", "measured on (UTC)"], rows)]


def _speed_cost_latency_rows(r: dict[str, Any], row: Row) -> None:
    """Targets 1-3."""
    sp = r.get("speed")
    if sp:
        row(
            "speed",
            f"1. throughput: tally ÷ plain Spark durable ≥ {sp['target_durable']}",
            f"{sp['ratio_tally_durable']:.2f} ({number(sp['events_per_s']['tally']['median'])} vs "
            f"{number(sp['events_per_s']['durable']['median'])} events/s)",
            sp["met_durable"],
        )
        row(
            "speed",
            f"1. throughput: tally ÷ plain aggregation only ≥ {sp['target_agg']}",
            f"{sp['ratio_tally_agg']:.2f} "
            f"(vs {number(sp['events_per_s']['agg']['median'])} events/s)",
            sp["met_agg"],
        )
    st = r.get("state")
    fc = (st or {}).get("fixed_cost")
    if fc:
        row(
            "state",
            f"2. per-batch fixed cost: median whole micro-batch at "
            f"~{number(fc['lines_per_batch'])} lines ≤ {ms_as_secs(fc['target_ms'])}",
            f"{ms_as_secs(fc['median_batch_ms'])}"
            + (
                f" (largest phase `{fc['largest_phase']['phase']}` "
                f"{secs(fc['largest_phase']['median_s'])} s)"
                if fc.get("largest_phase")
                else ""
            ),
            fc["met"],
        )
    lat = r.get("latency")
    if lat and "tally" in lat["engines"]:
        t = lat["engines"]["tally"]
        row(
            "latency",
            "3. latency: p99 window end → readable ≤ L + 2 triggers = "
            f"{ms_as_secs(lat['target_ms'])}",
            f"p99 {ms_as_secs(t['p99_ms'])} (p50 {ms_as_secs(t['p50_ms'])}, "
            f"{t['windows']} windows)",
            t["met"],
        )


def _state_bigfile_nightly_rows(r: dict[str, Any], row: Row) -> None:
    """Targets 4-6."""
    st = r.get("state")
    if st:
        f = st["flat"]
        row(
            "state",
            "4. state flat over 10× the batches (last ÷ first tenth within tolerance; RSS ÷ "
            "middle tenth)",
            ", ".join(
                f"{sections.STATE_LABELS[k]} ×{number(v['ratio'], 2)}"
                for k, v in f.items()
                if k in sections.STATE_LABELS
            ),
            st["met"],
        )
    bf = r.get("bigfile")
    if bf:
        row(
            "bigfile",
            f"5. one {bf['single_file_bytes'] / 1e9:.2f} GB file = {bf['files']} files, "
            "bounded memory",
            ("equal" if bf["equal"] else "**unequal**")
            + f"; peak RSS {megabytes(bf['runs']['single']['peak_rss_mb'])} vs "
            f"{megabytes(bf['runs']['split']['peak_rss_mb'])} (×{bf['rss_ratio']:.2f})",
            bf["met"],
        )
    _nightly_rows(r, row)


def _nightly_rows(r: dict[str, Any], row: Row) -> None:
    """Target 6, issue 27's: the ratio to DuckDB on the same Parquet, the checks within the
    reconciliation, the whole nightly at 20M events, growth (and peak RSS)."""
    ni = r.get("nightly")
    if not (ni and ni["sizes"]):
        return
    sizes, big = ni["sizes"], ni["sizes"][-1]
    judged = nightly_targets.judge(sizes)
    ratio = judged["parquet_ratio"]
    row(
        "nightly",
        f"6. nightly: (re-aggregate + diff) ÷ DuckDB on the same `events` Parquet ≤ "
        f"{nightly_targets.PARQUET_RATIO_TARGET:g}× at {big['events']:,} events",
        ", ".join(f"{n:,}: {v:.1f}×" for n, v in ratio["ratios"].items())
        + f" (÷ DuckDB on the JSON at {big['events']:,}: {big['ratio_json']:.1f}×)",
        ratio["met"],
    )
    row(
        "nightly",
        "6. nightly: validate + report ≤ re-aggregate + diff at every size",
        ", ".join(
            f"{n:,}: {secs(c)} s vs {secs(t)} s"
            for n, (c, t) in judged["checks_within_reconcile"]["pairs"].items()
        ),
        judged["checks_within_reconcile"]["met"],
    )
    whole = judged["whole"]
    row(
        "nightly",
        f"6. nightly: the whole nightly (reconcile, validate, report) at "
        f"{whole['target_events']:,} events ≤ {whole['target_s']:g} s",
        f"{secs(whole['seconds'])} s at {whole['events']:,} events"
        + ("" if whole["met"] is not None else " (no verdict below the target's size)"),
        whole["met"],
    )
    plain = judged["plain_ratio"]
    if plain["paired"]:
        p = plain["paired"]
        row(
            "nightly",
            f"6. nightly (issue 40): re-aggregate + diff ÷ plain Spark SQL's query ≤ "
            f"{plain['target']:g} at {nightly_targets.WHOLE_TARGET_EVENTS:,} events "
            "(medians of two, "
            "alternated)",
            f"{p['ratio']:.2f} ({' / '.join(secs(x) for x in p['tally_s'])} s vs "
            f"{' / '.join(secs(x) for x in p['plain_s'])} s at {plain['events']:,} events)"
            + ("" if plain["met"] is not None else " (no verdict below the target's size)"),
            plain["met"],
        )
    g = ni.get("growth")
    if g:
        rss = [s.get("peak_rss_mb") for s in sizes]
        row(
            "nightly",
            f"6. nightly: growth {g['from_events']:,} → {g['to_events']:,} no faster "
            "than linear; peak RSS",
            f"×{g['time_ratio']:.1f} time for ×{g['size_ratio']:.0f} events "
            f"(exponent {g['exponent']:.2f}); peak RSS " + " → ".join(megabytes(m) for m in rss),
            g["met"],
        )


def _rows_without_target(r: dict[str, Any], row: Row) -> None:
    """Kafka, scale-out, window kinds, the lateness curve: measured, with no target."""
    ka = r.get("kafka")
    if ka:
        row(
            "kafka",
            "8. Kafka (no target): tally ÷ plain Spark Kafka → window → Delta",
            f"{ka['ratio']:.2f} ({number(ka['runs']['tally']['events_per_s'])} vs "
            f"{number(ka['runs']['plain']['events_per_s'])} records/s)",
            None,
        )
        flink = (ka.get("flink") or {}).get("ratio_tally_flink")
        if flink:
            row(
                "kafka",
                "8. Kafka (no target): tally ÷ Flink SQL, Flink ÷ plain Spark",
                "; ".join(
                    f"{mode} {ratio:.2f}, {ka['flink']['ratio_flink_plain'][mode]:.2f}"
                    for mode, ratio in flink.items()
                ),
                None,
            )
    so = r.get("scaleout")
    if so:
        slowest = max(so["runs"].items(), key=lambda kv: kv[1]["stream_ratio"])
        row(
            "scaleout",
            "9. scale-out (no target): same books on a cluster and on S3; stream wall time ÷ local",
            ("equal books" if so["books_equal"] else "**UNEQUAL books**")
            + f"; slowest {slowest[0]} ×{slowest[1]['stream_ratio']:.2f}",
            None,
        )
    wi = r.get("windows")
    if wi:
        row(
            "windows",
            "10. window kinds (no target): events/s ÷ tumbling's, same input; accounting exact",
            "; ".join(
                f"{wi['kinds'][name]['label']}: {number(wi['ratio_to_baseline'][name], 2)} "
                f"({number(wi['events_per_s'][name]['median'])} vs "
                f"{number(wi['events_per_s'][wi['baseline']]['median'])} events/s)"
                for name in wi["kind_order"]
                if name in wi["ratio_to_baseline"]
            )
            + ("; exact" if wi["all_exact"] else "; **NOT exact**"),
            None,
        )
    cu = r.get("curve")
    if cu:
        row(
            "curve",
            "7. lateness curve (no target): wall time",
            f"{secs(cu['seconds'])} s for {cu['curve_events']:,} events, {cu['bounds']} bounds",
            None,
        )


def render_markdown(r: dict[str, Any], png_name: str | None) -> str:
    m = r["machine"]
    out = [
        "# Benchmarks",
        "",
        f"Generated by `{r['command']}` on {r['started']} (UTC), {r['mode']} mode, "
        f"{secs(r['total_s'])} s in all. Raw numbers: [`{JSON_NAME}`]({JSON_NAME}).",
        "",
        f"Machine: {m['cpu_model']}, {m['cores']} cores, {m['ram_gib']} GiB RAM, {m['os']}. "
        f"Python {m['python']}, Java {m['java']}, pyspark {m['pyspark']}, delta-spark "
        f"{m['delta_spark']}, DuckDB {m['duckdb']}. The bench's own session (latency, nightly, "
        f"curve, reading results back): Spark `{m['spark_master']}`, {m['shuffle_partitions']} "
        f"shuffle partitions, driver memory {m['driver_memory']}. Load average (1/5/15 min) at "
        f"start {m['load_average_at_start']}, at the end {r.get('load_average_at_end')}: the "
        "machine is shared, so compare engines within one run, not across runs.",
        "",
    ]
    section_seconds = r.get("sections_s") or {}
    if section_seconds:
        out += [
            "Wall time per section in this run: "
            + ", ".join(f"{name} {secs(seconds)} s" for name, seconds in section_seconds.items())
            + ".",
            "",
        ]
    carried = r.get("carried") or []
    if carried:
        out += [
            "**Carried over:** this run measured only "
            + (", ".join(s for s in section_seconds if s not in carried) or "nothing")
            + "; the results of "
            + ", ".join(f"{s} (measured {r['measured'].get(s)})" for s in carried)
            + f" are an earlier run's, taken from `{JSON_NAME}`.",
            "",
        ]
    for note in [*((r.get("preset") or {}).get("notes") or []), *(r.get("carry_notes") or [])]:
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
    closing = closing_notes(r)
    if closing:
        out += ["## What would close the misses", "", *[f"- {c}" for c in closing], ""]
    if r.get("speed"):
        out += sections.speed(r["speed"], carried_label(r, "speed"))
    if r.get("state") and r["state"].get("fixed_cost"):
        out += sections.fixed_cost(r["state"], carried_label(r, "state"))
    if r.get("latency"):
        out += sections.latency(r["latency"], carried_label(r, "latency"))
    if r.get("state"):
        out += sections.state(r["state"], carried_label(r, "state"))
    if r.get("kafka"):
        out += sections.kafka(r["kafka"], carried_label(r, "kafka"))
    if r.get("scaleout"):
        out += sections.scaleout(r["scaleout"], carried_label(r, "scaleout"))
    if r.get("windows"):
        out += sections.windows(r["windows"], carried_label(r, "windows"))
    if r.get("bigfile"):
        out += sections.bigfile(r["bigfile"], carried_label(r, "bigfile"))
    if r.get("lateness"):
        out += lateness.section(
            r["lateness"], carried_label(r, "lateness"), png=png_name is not None
        )
    if r.get("backlog"):
        out += backlog.section(r["backlog"], carried_label(r, "backlog"))
    if r.get("longhaul"):
        out += longhaul_section.section(r["longhaul"], carried_label(r, "longhaul"))
    if r.get("history"):
        out += history_section.section(r["history"], carried_label(r, "history"))
    if r.get("nightly") or r.get("curve"):
        out += sections.nightly_and_curve(r.get("nightly") or {"sizes": []}, r.get("curve"), r)
    return "\n".join(out).rstrip() + "\n"
