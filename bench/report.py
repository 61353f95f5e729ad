"""Write the results: `benchmarks.md` (targets met or missed, findings, one section per
target with its tables), `benchmarks.png` (matplotlib, Agg) and `benchmarks.json` (every raw
number). A partial run (`tally bench --only ...`) first takes the other sections' earlier
results from the output directory's `benchmarks.json` (`carry_previous`); the report labels
them with the date they were measured."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.findings import closing_notes

MD_NAME, PNG_NAME, JSON_NAME = "benchmarks.md", "benchmarks.png", "benchmarks.json"
# Sections whose results kept their shape since format 1 (before issue 12): still carried.
UNCHANGED_SINCE_FORMAT_1 = ("nightly", "curve")
ENGINE_ORDER = ("tally", "durable", "agg", "batch", "tally_prev", "agg_prev")


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


def _mb(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f} MB"


def _met(flag: bool | None) -> str:
    return "–" if flag is None else ("**met**" if flag else "**missed**")


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return [*lines, ""]


def _dur(ms: int) -> str:
    from tally.settings import format_duration

    return format_duration(ms)


def _labels() -> dict[str, str]:
    from bench.speed import ENGINE_LABELS

    return ENGINE_LABELS


# -- carrying earlier results over ----------------------------------------------------------------


def carry_previous(r: dict[str, Any], out_dir: Path, sections: Sequence[str]) -> None:
    """Fill the sections in `sections` (those this run did not run) from `out_dir`'s earlier
    `benchmarks.json`, when it is of the same mode; each keeps the date it was measured
    (`r["measured"]`) and is listed in `r["carried"]`. Results of an older format are carried
    only for sections whose shape did not change."""
    r.setdefault("carried", [])
    r.setdefault("measured", {})
    r.setdefault("carry_notes", [])
    path = out_dir / JSON_NAME
    if not sections or not path.is_file():
        return
    try:
        prev = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        r["carry_notes"].append(f"earlier results in {path} unreadable ({exc}); none carried")
        return
    if prev.get("mode") != r["mode"]:
        r["carry_notes"].append(
            f"earlier results in {path} are of {prev.get('mode')} mode; none carried"
        )
        return
    same_format = prev.get("format", 1) == r.get("format")
    measured = prev.get("measured") or {}
    for name in sections:
        if not prev.get(name):
            continue
        if not same_format and name not in UNCHANGED_SINCE_FORMAT_1:
            r["carry_notes"].append(
                f"the earlier {name} results measured the previous benchmark design; not carried"
            )
            continue
        r[name] = prev[name]
        r["measured"][name] = measured.get(name) or prev.get("started") or "an earlier run"
        r["carried"].append(name)


def _when(r: dict[str, Any], name: str) -> str:
    """' (measured <date>, carried over from an earlier run)' for a carried section."""
    if name not in (r.get("carried") or []):
        return ""
    return f" (measured {r['measured'].get(name)}, carried over from an earlier run)"


# -- the targets ----------------------------------------------------------------------------------


def _targets(r: dict[str, Any]) -> list[str]:
    rows: list[list[Any]] = []

    def row(section: str, target: str, measured: str, met: bool | None) -> None:
        date = (r.get("measured") or {}).get(section, "–")
        rows.append(
            [target, measured, _met(met), date + (" (carried)" if _when(r, section) else "")]
        )

    sp = r.get("speed")
    if sp:
        row(
            "speed",
            f"1. throughput: tally ÷ plain Spark durable ≥ {sp['target_durable']}",
            f"{sp['ratio_tally_durable']:.2f} ({_n(sp['events_per_s']['tally']['median'])} vs "
            f"{_n(sp['events_per_s']['durable']['median'])} events/s)",
            sp["met_durable"],
        )
        row(
            "speed",
            f"1. throughput: tally ÷ plain aggregation only ≥ {sp['target_agg']}",
            f"{sp['ratio_tally_agg']:.2f} (vs {_n(sp['events_per_s']['agg']['median'])} events/s)",
            sp["met_agg"],
        )
    st = r.get("state")
    fc = (st or {}).get("fixed_cost")
    if fc:
        row(
            "state",
            f"2. per-batch fixed cost: median `batch_duration_ms` at "
            f"~{_n(fc['lines_per_batch'])} lines ≤ {_ms(fc['target_ms'])}",
            f"{_ms(fc['median_batch_ms'])}"
            + (
                f" (largest phase `{fc['largest_phase']['phase']}` "
                f"{_s(fc['largest_phase']['median_s'])} s)"
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
            f"3. latency: p99 window end → readable ≤ L + 2 triggers = {_ms(lat['target_ms'])}",
            f"p99 {_ms(t['p99_ms'])} (p50 {_ms(t['p50_ms'])}, {t['windows']} windows)",
            t["met"],
        )
    if st:
        f = st["flat"]
        row(
            "state",
            "4. state flat over 10× the batches (last ÷ first tenth within tolerance)",
            ", ".join(
                f"{_STATE_LABELS[k]} ×{_n(v['ratio'], 2)}"
                for k, v in f.items()
                if k in _STATE_LABELS
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
            + f"; peak RSS {_mb(bf['runs']['single']['peak_rss_mb'])} vs "
            f"{_mb(bf['runs']['split']['peak_rss_mb'])} (×{bf['rss_ratio']:.2f})",
            bf["met"],
        )
    ni = r.get("nightly")
    if ni and ni["sizes"]:
        big = ni["sizes"][-1]
        row(
            "nightly",
            f"6. nightly: re-aggregate + diff ≤ 3× DuckDB at {big['events']:,} events (JSON)",
            f"{big['ratio_json']:.1f}× (Parquet: {big['ratio_parquet']:.1f}×)",
            big["ratio_json"] <= 3.0,
        )
        g = ni.get("growth")
        if g:
            row(
                "nightly",
                f"6. nightly: growth {g['from_events']:,} → {g['to_events']:,} no faster "
                "than linear",
                f"×{g['time_ratio']:.1f} time for ×{g['size_ratio']:.0f} events "
                f"(exponent {g['exponent']:.2f})",
                g["met"],
            )
    ka = r.get("kafka")
    if ka:
        row(
            "kafka",
            "8. Kafka (no target): tally ÷ plain Spark Kafka → window → Delta",
            f"{ka['ratio']:.2f} ({_n(ka['runs']['tally']['events_per_s'])} vs "
            f"{_n(ka['runs']['plain']['events_per_s'])} records/s)",
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
                f"{wi['kinds'][name]['label']}: {_n(wi['ratio_to_baseline'][name], 2)} "
                f"({_n(wi['events_per_s'][name]['median'])} vs "
                f"{_n(wi['events_per_s'][wi['baseline']]['median'])} events/s)"
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
            f"{_s(cu['seconds'])} s for {cu['curve_events']:,} events, {cu['bounds']} bounds",
            None,
        )
    return ["## Targets", "", *_table(["target", "measured", "", "measured on (UTC)"], rows)]


def _section(title: str, intro: str) -> list[str]:
    """A section's heading and its first paragraph."""
    return [f"## {title}", "", intro, ""]


# -- 1. throughput --------------------------------------------------------------------------------


def _speed(sp: dict[str, Any], when: str) -> list[str]:
    labels = _labels()
    out = _section(
        "1. Throughput: whole processes on the same backlog" + when,
        f"Input: {sp['lines']:,} JSON lines from `tally generate` ({sp['distinct_events']:,} "
        f"events, {sp['duplicates']:,} duplicates, {sp['malformed_lines']:,} malformed lines; "
        f"{sp['keys']:,} keys, {sp['partitions']} source partitions, one day of event time) in "
        f"{sp['files']} files of {sp['input_bytes'] / sp['files'] / 1e6:.1f} MB; "
        f"{sp['max_files_per_trigger']} files a trigger (micro-batches of "
        f"~{sp['lines_per_batch']:,.0f} lines), the previous configuration "
        f"{sp['previous_files_per_trigger']} (~{sp['previous_lines_per_batch']:,.0f} lines); "
        f"{_dur(sp['window_ms'])} windows, lateness {_dur(sp['lateness_ms'])}. Every engine is "
        f"its own OS process on `{sp['spark_master']}` with {sp['shuffle_partitions']} shuffle "
        "partitions (`tally.spark.build_session`, Spark's default 1g driver heap), timed "
        "wall-clock from process start to exit (JVM start included), peak RSS of its process "
        f"tree sampled every 0.25 s. {sp['repetitions']} repetition(s), engines alternating in "
        "an order rotated each repetition, fresh directories; medians. events/s = input lines "
        "÷ wall seconds. tally is `tally stream --available-now --clock arrival`; the plain "
        "engines are `bench/plain_job.py`.",
    )
    rows = []
    for name in ENGINE_ORDER:
        st, sec = sp["events_per_s"][name], sp["seconds"][name]
        last = sp["runs"][name][-1]
        rows.append(
            [
                labels[name],
                _n(st["median"]),
                f"{_n(st['min'])} – {_n(st['max'])}",
                _s(sec["median"]),
                _mb(sp["peak_rss_mb"][name]),
                last.get("batches", "–") if last.get("batches") is not None else "–",
            ]
        )
    out += _table(
        ["engine", "events/s (median)", "min – max", "wall s (median)", "peak RSS", "batches"],
        rows,
    )
    reps = sp.get("ratio_per_repetition") or {}
    out += [
        f"tally ÷ durable: **{sp['ratio_tally_durable']:.2f}** (per repetition "
        + ", ".join(f"{x:.2f}" for x in reps.get("durable", []))
        + f"), target ≥ {sp['target_durable']}: {_met(sp['met_durable'])}. "
        f"tally ÷ aggregation only: **{sp['ratio_tally_agg']:.2f}** (per repetition "
        + ", ".join(f"{x:.2f}" for x in reps.get("agg", []))
        + f"), target ≥ {sp['target_agg']}: {_met(sp['met_agg'])}. Previous configuration: "
        f"(a') ÷ (c') = {_n(sp.get('ratio_previous'), 2)}. Every input line accounted for by "
        f"tally (`input_lines` sums to {sp['lines']:,}): "
        + ("yes" if sp["all_lines_accounted"] else "**no**")
        + ".",
        "",
    ]
    out += _what_engines_did(sp)
    out += _where_tally_time_goes(sp["tally_median_run"], "median (a) run")
    return out


def _what_engines_did(sp: dict[str, Any]) -> list[str]:
    labels = _labels()
    t = sp["runs"]["tally"][-1]
    rows = [
        [
            labels["tally"],
            f"{t['input_lines']:,} lines ({t['valid_events']:,} valid, {t['quarantined']:,} "
            "quarantined)",
            f"{t['emitted_events']:,} events in emitted windows + {t['late_events']:,} late "
            f"(side output) + {t['open_window_events']:,} in open windows = "
            f"{t['accounted_events']:,} (distinct valid events: {sp['distinct_events']:,}); "
            f"{t['duplicates']:,} duplicates marked; every valid event in the event log",
        ]
    ]
    for name in ("durable", "agg", "batch"):
        p = sp["runs"][name][-1]
        read = (
            f"{p['input_rows']:,} rows (blank lines skipped)"
            if p.get("input_rows") is not None
            else "every file once"
        )
        result = f"{p['output_events']:,} events in {p['output_rows']:,} window rows"
        if p.get("dropped_by_watermark") is not None:
            result += f"; {p['dropped_by_watermark']:,} rows dropped by the watermark"
        if "bronze_rows" in p:
            result += f"; bronze table {p['bronze_rows']:,} rows (every line)"
        rows.append([labels[name], read, result])
    return [
        "What each engine did (last repetition):",
        "",
        *_table(["engine", "input", "result"], rows),
    ]


def _where_tally_time_goes(run: dict[str, Any], what: str) -> list[str]:
    split = run.get("wall_split") or {}
    wall = run["seconds"]

    def share(secs: float | None) -> str:
        return "–" if secs is None else f"{100 * secs / wall:.0f} %"

    rows = [
        [
            "start → first micro-batch (Python, JVM, session, tables, query start)",
            _s(split.get("startup_s")),
            share(split.get("startup_s")),
        ]
    ]
    for p in run.get("phases") or []:
        rows.append([f"in batches: `{p['phase']}`", _s(p["total_s"]), share(p["total_s"])])
    rows.append(
        [
            "between micro-batches and the end (Spark: offsets, listing, planning; exit)",
            _s(split.get("between_and_end_s")),
            share(split.get("between_and_end_s")),
        ]
    )
    return [
        "### Where tally's time goes",
        "",
        f"The {what}: {_s(wall)} s, {run.get('batches')} micro-batches; phases from the "
        "stream's own DEBUG records (`BatchProcessor.last_phases`), summed over the batches:",
        "",
        *_table(["part", "seconds", "share of wall"], rows),
    ]


# -- 2. per-batch fixed cost ----------------------------------------------------------------------


def _fixed_cost(st: dict[str, Any], when: str) -> list[str]:
    fc = st["fixed_cost"]
    out = _section(
        "2. Per-batch fixed cost" + when,
        f"From the state run (section 4): {fc['batches']} micro-batches of "
        f"~{_n(fc['lines_per_batch'])} lines. Median `stream_progress.batch_duration_ms`: "
        f"**{_ms(fc['median_batch_ms'])}**; target ≤ {_ms(fc['target_ms'])}: "
        f"{_met(fc['met'])}. Phases per batch, from the stream's DEBUG records on "
        "`tally.stream` (`batch N phases: ...`, written by `bench/tally_cli.py`):",
    )
    rows = [
        [
            f"`{p['phase']}`",
            _s(p["median_s"]),
            _s(p["p90_s"]),
            f"{100 * p['share']:.0f} %",
            p["what"],
        ]
        for p in fc["phases"]
    ]
    out += _table(["phase", "median s", "p90 s", "share", "what it covers"], rows)
    appends = fc.get("appends_median_s") or {}
    if appends:
        out += [
            "Median Delta append per table (in the `write` and `progress` phases; the `write` "
            "appends run side by side): "
            + ", ".join(f"{t} {s:.2f} s" for t, s in appends.items())
            + ".",
            "",
        ]
    return out


# -- 3. latency -----------------------------------------------------------------------------------


def _latency(lat: dict[str, Any], when: str) -> list[str]:
    out = _section(
        "3. Latency at a steady rate" + when,
        f"A writer thread drops one file per {lat['file_interval_s']:g} s at "
        f"{lat['rate_events_per_s']:,} events/s for {lat['run_s']:.0f} s (event time = the "
        f"writer's wall clock); {_dur(lat['window_ms'])} windows, L = {_dur(lat['lateness_ms'])}, "
        f"processing-time trigger {_dur(lat['trigger_ms'])}; the engines run in the bench's own "
        "session. Delay of a window = timestamp of the first Delta commit holding a row of it "
        f"(from the table's `_delta_log`) minus its end; windows ending in the first "
        f"{lat['warmup_s']:.0f} s are warm-up and not counted. Target: p99 ≤ L + 2 triggers = "
        f"{_ms(lat['target_ms'])}.",
    )
    names = {"tally": "tally stream", "plain": "plain Spark aggregation"}
    rows = []
    for engine, r in lat["engines"].items():
        batches = sorted(r["batch_duration_ms"])
        median_batch = batches[len(batches) // 2] if batches else None
        rows.append(
            [
                names.get(engine, engine),
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


# -- 4. state -------------------------------------------------------------------------------------

_STATE_LABELS = {
    "open_windows": "open windows",
    "state_bytes": "state bytes on disk",
    "batch_ms": "batch time",
    "peak_rss_mb": "driver peak RSS",
}


def _state(st: dict[str, Any], when: str) -> list[str]:
    f = st["flat"]
    batches = st["batches"]
    n = max(1, int(len(batches) * st["tenth"]))
    out = _section(
        "4. State over a 10× longer run" + when,
        f"{st['lines']:,} lines over {st['days']:g} days of event time, {st['files']} files, "
        f"{st['max_files_per_trigger']} a trigger: {len(batches)} micro-batches in "
        f"{_s(st['seconds'])} s, one `tally stream` process (peak RSS {_mb(st['peak_rss_mb'])})."
        f" First tenth = the first {n} batches, last tenth = the last {n}: medians, the peak "
        "for RSS. State bytes = the size of `<checkpoint>/tally/state/<batch>` (windows + dedup "
        "Parquet), read by a poller every 0.25 s while the stream ran (the stream keeps only "
        "its last two batches' state); RSS = the process tree, charged to the batch in flight.",
    )
    units = {"open_windows": "", "state_bytes": " B", "batch_ms": " ms", "peak_rss_mb": " MB"}
    rows = [
        [
            _STATE_LABELS.get(k, k),
            _n(v["first"]) + units.get(k, ""),
            _n(v["last"]) + units.get(k, ""),
            _n(v["ratio"], 2),
            f"≤ {v['tolerance']}",
            _n(v["max"]) + units.get(k, ""),
            f"{v['sampled']} / {len(batches)}",
            "flat" if v["flat"] else "**grows**",
        ]
        for k, v in f.items()
    ]
    out += _table(
        [
            "per micro-batch",
            "first tenth",
            "last tenth",
            "ratio",
            "tolerance",
            "max",
            "sampled",
            "",
        ],
        rows,
    )
    out += [
        "Every input line accounted for (`input_lines` sums to the input's lines): "
        + ("yes" if st.get("all_lines_accounted") else "**no**")
        + (
            f". Meanwhile the event log grew to {batches[-1]['event_log_rows']:,} rows."
            if batches
            else "."
        ),
        "",
    ]
    return out


# -- 5. one big file ------------------------------------------------------------------------------


def _bigfile(bf: dict[str, Any], when: str) -> list[str]:
    out = _section(
        "5. One big input file" + when,
        f"{bf['events']:,} events ({bf['lines']:,} lines) generated once into {bf['files']} "
        f"files ({bf['input_bytes'] / 1e9:.2f} GB, {_s(bf['generate_s'])} s) and concatenated "
        f"in arrival order into one file of {bf['single_file_bytes'] / 1e9:.2f} GB "
        f"({_s(bf['concatenate_s'])} s; its modification time the newest file's). Each input "
        "streamed by `tally stream --available-now --clock arrival --drain` in its own process, "
        "as one micro-batch (a file is never split across micro-batches, so the 100 files go "
        "in one trigger too: the same batching gives the same watermark history).",
    )
    rows = []
    for name, label in (("split", f"{bf['files']} files"), ("single", "one file")):
        run = bf["runs"][name]
        rows.append(
            [
                label,
                _s(run["seconds"]),
                _n(run["events_per_s"]),
                _mb(run["peak_rss_mb"]),
                run["batches"],
                f"{run['input_lines']:,}",
            ]
        )
    out += _table(
        ["input", "wall s", "events/s", "peak RSS", "batches (incl. drain)", "input lines"], rows
    )
    c = bf["comparison"]
    cmp_rows = [
        [
            f"`{name}`" + (" (latest revisions)" if name == "stream_aggregates" else " rows"),
            f"{v['split']:,}",
            f"{v['single']:,}",
            "equal" if v["equal"] else "**unequal**",
        ]
        for name, v in c.items()
        if isinstance(v, dict)
    ]
    out += _table(["compared", f"{bf['files']} files", "one file", ""], cmp_rows)
    out += [
        f"Results: {'**equal**' if bf['equal'] else '**unequal**'}; peak RSS one file ÷ "
        f"{bf['files']} files = ×{bf['rss_ratio']:.2f} (bounded: ≤ ×{bf['rss_tolerance']}): "
        + ("yes" if bf["memory_bounded"] else "**no**")
        + f"; target {_met(bf['met'])}.",
        "",
    ]
    return out


def _kafka(ka: dict[str, Any], when: str) -> list[str]:
    out = _section(
        "8. Kafka: a pre-filled topic" + when,
        f"The throughput section's input ({ka['events']:,} events, {ka['lines']:,} lines) "
        f"published by `tally produce` into a topic of {ka['partitions']} partitions on a "
        f"broker started by `scripts/kafka.sh` ({_s(ka['publish_s'])} s); "
        f"{ka['records_per_trigger']:,} records a micro-batch (the throughput run's lines a "
        "micro-batch), each engine its own process, available-now from the earliest offsets. "
        f"{_dur(ka['window_ms'])} windows, lateness {_dur(ka['lateness_ms'])}.",
    )
    labels = {
        "tally": "tally stream --source kafka",
        "plain": "plain Spark: Kafka → from_json → withWatermark + window → Delta",
    }
    rows = [
        [labels[name], _s(run["seconds"]), _n(run["events_per_s"]), _mb(run["peak_rss_mb"])]
        for name, run in ka["runs"].items()
    ]
    out += _table(["engine", "wall s", "records/s", "peak RSS"], rows)
    t, p = ka["tally"], ka["plain"]
    out += [
        f"tally ÷ plain: **{ka['ratio']:.2f}** (no target). tally read {t['input_lines']:,} "
        f"records ({t['valid_events']:,} valid, {t['quarantined']:,} quarantined; every record "
        f"accounted for: {'yes' if ka['all_records_accounted'] else '**no**'}); the plain "
        f"query wrote {p['output_rows']:,} window rows holding {p['output_events']:,} events.",
        "",
    ]
    return out


# -- 9. scale-out -------------------------------------------------------------------------------

_SCALEOUT_LABELS = {
    "local": "local[2], local disk",
    "cluster": "standalone cluster, local disk",
    "s3": "local[2], s3a:// (moto)",
    "cluster_s3": "standalone cluster, s3a:// (moto)",
}


def _scaleout(so: dict[str, Any], when: str) -> list[str]:
    out = _section(
        "9. Scale-out: a standalone cluster and S3" + when,
        f"One generated input ({so['events']:,} events, {so['lines']:,} lines in {so['files']} "
        f"files, {so['files_per_trigger']} files a micro-batch). `scripts/s3.sh` (moto's S3 "
        f"server) started in {_s(so['startup_s']['s3'])} s and `scripts/cluster.sh` (a "
        f"standalone master and one 2-core worker) in {_s(so['startup_s']['cluster'])} s (until "
        "the worker registered). Each configuration runs `tally stream --available-now --drain "
        "--clock arrival` and then `tally reconcile` as processes, timed from start to exit.",
    )
    rows = [
        [
            _SCALEOUT_LABELS.get(name, name),
            _s(run["stream_s"]),
            f"×{run['stream_ratio']:.2f}",
            _s(run["reconcile_s"]),
            f"×{run['reconcile_ratio']:.2f}",
        ]
        for name, run in so["runs"].items()
    ]
    out += _table(["configuration", "stream s", "÷ local", "reconcile s", "÷ local"], rows)
    books = next(iter(so["runs"].values()))["books"]
    out += [
        "The reconciliation's books are "
        + ("equal in every configuration" if so["books_equal"] else "**not equal**")
        + f": {books}",
        "",
    ]
    return out


# -- 10. window kinds ----------------------------------------------------------------------------


def _windows_of(count: int) -> str:
    return "one window" if count == 1 else f"{count} windows"


def _windows(wi: dict[str, Any], when: str) -> list[str]:
    kinds = {name: wi["kinds"][name] for name in wi["kind_order"]}
    flags = ", ".join(f"{k['label']} `{' '.join(k['flags'])}`" for k in kinds.values())
    out = _section(
        "10. Window kinds: tumbling, hopping and session windows on the same input" + when,
        f"One input generated once: {wi['lines']:,} JSON lines from `tally generate` "
        f"({wi['distinct_events']:,} events, {wi['duplicates']:,} duplicates, "
        f"{wi['malformed_lines']:,} malformed lines; {wi['keys']:,} keys, one day of event "
        f"time) in {wi['files']} files, {wi['max_files_per_trigger']} a trigger (micro-batches "
        f"of ~{wi['lines_per_batch']:,.0f} lines); {_dur(wi['window_ms'])} windows, lateness "
        f"{_dur(wi['lateness_ms'])}. Each run is `tally stream --available-now --drain --clock "
        f"arrival` in its own process on a fresh warehouse ({flags}), on `{wi['spark_master']}` "
        f"with {wi['shuffle_partitions']} shuffle partitions, timed wall-clock from process "
        f"start to exit (JVM start included). {wi['repetitions']} repetition(s), the kinds "
        "alternating in an order rotated each repetition ("
        + "; ".join(" → ".join(o) for o in wi["orders"])
        + "); medians. events/s = input lines ÷ wall seconds.",
    )
    base = wi["baseline"]
    rows = []
    for name, kind in kinds.items():
        eps, last = wi["events_per_s"][name], wi["runs"][name][-1]
        ratio = 1.0 if name == base else wi["ratio_to_baseline"].get(name)
        rows.append(
            [
                kind["label"],
                _s(wi["seconds"][name]["median"]),
                _n(eps["median"]),
                f"{_n(eps['min'])} – {_n(eps['max'])}",
                f"**{_n(ratio, 2)}**" if name != base else "1.00",
                _mb(wi["peak_rss_mb"][name]),
                last["batches"],
                f"{last['windows_emitted']:,}",
                f"{last['current_windows']:,}",
                _n(last["events_per_window"], 2),
                f"{last['retraction_rows']:,}",
            ]
        )
    out += _table(
        [
            "kind",
            "wall s (median)",
            "events/s (median)",
            "min – max",
            f"÷ {base}",
            "peak RSS",
            "batches (incl. drain)",
            "windows emitted",
            "current windows",
            "events / window",
            "retraction rows",
        ],
        rows,
    )
    out += [
        "Windows emitted: distinct (window_start, window_end, key) in `stream_aggregates`; "
        "current: the highest revision of each minus the `retracted` ones (sessions another "
        "session absorbed); events / window: the events counted in the current windows ÷ "
        "their number (last repetition).",
        "",
    ]
    reps = wi.get("ratio_per_repetition") or {}
    out += [
        "Per repetition, events/s ÷ tumbling's: "
        + "; ".join(
            f"{kinds[name]['label']}: " + ", ".join(f"{x:.2f}" for x in reps[name])
            for name in kinds
            if name in reps
        )
        + ". Events counted in current windows ÷ tumbling's: "
        + "; ".join(
            f"{kinds[name]['label']}: {_n(wi['counted_ratio'][name], 2)} (each event is in "
            f"{_windows_of(kinds[name]['windows_per_event'])}; fewer where it is late for some)"
            for name in kinds
            if name in wi["counted_ratio"]
        )
        + ".",
        "",
    ]
    out += [
        "Cross-check, read back from each run's warehouse (last repetition): after the drain "
        "every (event, window) pair of a non-duplicate valid event is either counted in a "
        "current window (highest `stream_aggregates` revision, not `retracted`) or a "
        "`late_events` row, so counted + late rows = windows per event × (valid − duplicate "
        "events), exactly, with nothing left in open-window state; "
        "`stream_progress.input_lines` sums to the input's lines; the current windows of one "
        "key never overlap (tumbling and session: "
        + ", ".join(
            f"{kinds[n]['label']} {wi['runs'][n][-1]['overlapping_windows']:,} overlapping"
            for n in kinds
            if kinds[n].get("disjoint")
        )
        + "); only session runs write retraction rows.",
        "",
    ]
    check_rows = []
    for name, kind in kinds.items():
        run = wi["runs"][name][-1]
        check_rows.append(
            [
                kind["label"],
                f"{run['input_lines']:,} / {wi['lines']:,}",
                f"{kind['windows_per_event']} × {run['non_duplicate_events']:,} = "
                f"{run['expected_pairs']:,}",
                f"{run['emitted_events']:,} + {run['late_events']:,} = {run['counted_pairs']:,}",
                f"{run['open_window_events']:,}",
                f"{run['late_event_count']:,}",
                "exact" if run["exact"] else "**FAILED**",
            ]
        )
    out += _table(
        [
            "kind",
            "input lines",
            "expected pairs",
            "counted + late rows",
            "left in state",
            "late events (every window late)",
            "",
        ],
        check_rows,
    )
    out += [
        "Every run (all repetitions) exact: "
        + ("yes" if wi["all_exact"] else "**no**")
        + "; the same valid events, duplicates and quarantined lines in every run: "
        + ("yes" if wi["same_input"] else "**no**")
        + ".",
        "",
    ]
    medians = wi.get("median_runs") or {}
    names = [n for n in kinds if medians.get(n)]
    phase_order = list(dict.fromkeys(p["phase"] for n in names for p in medians[n]["phases"]))
    if phase_order:
        totals = {n: {p["phase"]: p["total_s"] for p in medians[n]["phases"]} for n in names}
        prow = [
            ["start → first micro-batch"]
            + [_s((medians[n]["wall_split"] or {}).get("startup_s")) for n in names]
        ]
        prow += [
            [f"in batches: `{ph}`"] + [_s(totals[n].get(ph)) for n in names] for ph in phase_order
        ]
        prow.append(
            ["between micro-batches and the end"]
            + [_s((medians[n]["wall_split"] or {}).get("between_and_end_s")) for n in names]
        )
        prow.append(["wall"] + [_s(medians[n]["seconds"]) for n in names])
        out += [
            "Where the time goes (the median run of each kind; seconds summed over its "
            "micro-batches, from the stream's DEBUG phase records):",
            "",
            *_table(["part", *[kinds[n]["label"] for n in names]], prow),
        ]
    return out


# -- 6./7. nightly and curve ----------------------------------------------------------------------


def _nightly(ni: dict[str, Any], curve: dict[str, Any] | None, r: dict[str, Any]) -> list[str]:
    out: list[str] = []
    if ni.get("sizes"):
        out += _section(
            "6. Nightly job" + _when(r, "nightly"),
            "Per size, one generated day (8 source partitions, 1,000 keys). The speed-layer "
            "tables are built by a batch load with the project's own parse "
            "(`tally.events.parse_events`) and window code (`tally.windows`) instead of "
            f"streaming (see `bench/nightly.py`: micro-batches of {ni['files_per_batch']} "
            "files, global-max watermark, late and duplicate events as the stream would mark "
            "them, drained at the end). Stages are the DAG's (`tally_app.nightly`); reconcile "
            "is split at its `batch_aggregates` write. DuckDB runs the same re-aggregation "
            "(validate, first arrival per `event_id`, window, business day, count and sum, "
            "written to Parquet) on the same JSON files and on the `events` table's Parquet "
            "files.",
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
            "7. Lateness curve" + _when(r, "curve"),
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
        f"{m['delta_spark']}, DuckDB {m['duckdb']}. The bench's own session (latency, nightly, "
        f"curve, reading results back): Spark `{m['spark_master']}`, {m['shuffle_partitions']} "
        f"shuffle partitions, driver memory {m['driver_memory']}. Load average (1/5/15 min) at "
        f"start {m['load_average_at_start']}, at the end {r.get('load_average_at_end')}: the "
        "machine is shared, so compare engines within one run, not across runs.",
        "",
    ]
    sections = r.get("sections_s") or {}
    if sections:
        out += [
            "Wall time per section in this run: "
            + ", ".join(f"{name} {_s(secs)} s" for name, secs in sections.items())
            + ".",
            "",
        ]
    carried = r.get("carried") or []
    if carried:
        out += [
            "**Carried over:** this run measured only "
            + (", ".join(s for s in sections if s not in carried) or "nothing")
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
        out += _speed(r["speed"], _when(r, "speed"))
    if r.get("state") and r["state"].get("fixed_cost"):
        out += _fixed_cost(r["state"], _when(r, "state"))
    if r.get("latency"):
        out += _latency(r["latency"], _when(r, "latency"))
    if r.get("state"):
        out += _state(r["state"], _when(r, "state"))
    if r.get("kafka"):
        out += _kafka(r["kafka"], _when(r, "kafka"))
    if r.get("scaleout"):
        out += _scaleout(r["scaleout"], _when(r, "scaleout"))
    if r.get("windows"):
        out += _windows(r["windows"], _when(r, "windows"))
    if r.get("bigfile"):
        out += _bigfile(r["bigfile"], _when(r, "bigfile"))
    if r.get("nightly") or r.get("curve"):
        out += _nightly(r.get("nightly") or {"sizes": []}, r.get("curve"), r)
    return "\n".join(out).rstrip() + "\n"


# -- the chart ------------------------------------------------------------------------------------


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

    names = [n for n in ENGINE_ORDER if sp["events_per_s"][n]["median"]]
    meds = [sp["events_per_s"][n]["median"] for n in names]
    lo = [m - sp["events_per_s"][n]["min"] for m, n in zip(meds, names, strict=True)]
    hi = [sp["events_per_s"][n]["max"] - m for m, n in zip(meds, names, strict=True)]
    colors = {"tally": "#1f77b4", "durable": "#ff7f0e", "agg": "#2ca02c", "batch": "#7f7f7f"}
    bars = ax.bar(
        [_labels()[n].split(" ")[0] for n in names],
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


def write_outputs(r: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    png = out_dir / PNG_NAME
    render_chart(r, png)
    md = out_dir / MD_NAME
    md.write_text(render_markdown(r, PNG_NAME), encoding="utf-8")
    js = out_dir / JSON_NAME
    js.write_text(json.dumps(r, indent=1, sort_keys=True, default=str) + "\n", encoding="utf-8")
    return {"md": md, "png": png, "json": js}
