"""The markdown of each section: its heading, how it was measured, its tables."""

from __future__ import annotations

from typing import Any

from bench import nightly_targets
from bench.report.carry import carried_label
from bench.report.formatting import (
    ENGINE_ORDER,
    duration,
    engine_labels,
    megabytes,
    ms_as_secs,
    number,
    secs,
    table,
    verdict,
)


def _section(title: str, intro: str) -> list[str]:
    """A section's heading and its first paragraph."""
    return [f"## {title}", "", intro, ""]


# -- 1. throughput --------------------------------------------------------------------------------


def speed(sp: dict[str, Any], when: str) -> list[str]:
    labels = engine_labels()
    out = _section(
        "1. Throughput: whole processes on the same backlog" + when,
        f"Input: {sp['lines']:,} JSON lines from `tally generate` ({sp['distinct_events']:,} "
        f"events, {sp['duplicates']:,} duplicates, {sp['malformed_lines']:,} malformed lines; "
        f"{sp['keys']:,} keys, {sp['partitions']} source partitions, one day of event time) in "
        f"{sp['files']} files of {sp['input_bytes'] / sp['files'] / 1e6:.1f} MB; "
        f"{sp['max_files_per_trigger']} files a trigger (micro-batches of "
        f"~{sp['lines_per_batch']:,.0f} lines), the previous configuration "
        f"{sp['previous_files_per_trigger']} (~{sp['previous_lines_per_batch']:,.0f} lines); "
        f"{duration(sp['window_ms'])} windows, lateness {duration(sp['lateness_ms'])}. Every "
        f"engine is its own OS process on `{sp['spark_master']}` with "
        f"{sp['shuffle_partitions']} shuffle partitions (`tally.spark.build_session`, Spark's "
        "default 1g driver heap), timed "
        "wall-clock from process start to exit (JVM start included), peak RSS of its process "
        f"tree sampled every 0.25 s. {sp['repetitions']} repetition(s), engines alternating in "
        "an order rotated each repetition, fresh directories; medians. events/s = input lines "
        "÷ wall seconds. tally is `tally stream --available-now --clock arrival`; the plain "
        "engines are `bench/plain_job.py`.",
    )
    rows = []
    for name in [n for n in ENGINE_ORDER if n in sp["events_per_s"]]:
        st, sec = sp["events_per_s"][name], sp["seconds"][name]
        last = sp["runs"][name][-1]
        rows.append(
            [
                labels[name],
                number(st["median"]),
                f"{number(st['min'])} – {number(st['max'])}",
                secs(sec["median"]),
                megabytes(sp["peak_rss_mb"][name]),
                last.get("batches", "–") if last.get("batches") is not None else "–",
            ]
        )
    out += table(
        ["engine", "events/s (median)", "min – max", "wall s (median)", "peak RSS", "batches"],
        rows,
    )
    reps = sp.get("ratio_per_repetition") or {}
    out += [
        f"tally ÷ durable: **{sp['ratio_tally_durable']:.2f}** (per repetition "
        + ", ".join(f"{x:.2f}" for x in reps.get("durable", []))
        + f"), target ≥ {sp['target_durable']}: {verdict(sp['met_durable'])}. "
        f"tally ÷ aggregation only: **{sp['ratio_tally_agg']:.2f}** (per repetition "
        + ", ".join(f"{x:.2f}" for x in reps.get("agg", []))
        + f"), target ≥ {sp['target_agg']}: {verdict(sp['met_agg'])}. Previous configuration: "
        f"(a') ÷ (c') = {number(sp.get('ratio_previous'), 2)}. "
        + _currencies_ratio(sp)
        + "Every input line accounted for by "
        f"tally (`input_lines` sums to {sp['lines']:,}): "
        + ("yes" if sp["all_lines_accounted"] else "**no**")
        + ".",
        "",
    ]
    out += _what_engines_did(sp)
    out += _where_tally_time_goes(sp["tally_median_run"], "median (a) run")
    return out


def _currencies_ratio(sp: dict[str, Any]) -> str:
    """(a'') ÷ (a): the same events with a currency each (a run from before: nothing)."""
    if sp.get("ratio_currencies") is None:
        return ""
    return (
        f"The same events in currencies {sp['currencies']}: (a'') ÷ (a) = "
        f"**{sp['ratio_currencies']:.2f}**, target ≥ {sp['target_currencies']}: "
        f"{verdict(sp['met_currencies'])}. "
    )


def _what_engines_did(sp: dict[str, Any]) -> list[str]:
    labels = engine_labels()
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
        *table(["engine", "input", "result"], rows),
    ]


def _where_tally_time_goes(run: dict[str, Any], what: str) -> list[str]:
    split = run.get("wall_split") or {}
    wall = run["seconds"]

    def share(secs: float | None) -> str:
        return "–" if secs is None else f"{100 * secs / wall:.0f} %"

    rows = [
        [
            "start → first micro-batch (Python, JVM, session, tables, query start)",
            secs(split.get("startup_s")),
            share(split.get("startup_s")),
        ]
    ]
    for p in run.get("phases") or []:
        rows.append([f"in batches: `{p['phase']}`", secs(p["total_s"]), share(p["total_s"])])
    rows.append(
        [
            "between micro-batches and the end (Spark: offsets, listing, planning; exit)",
            secs(split.get("between_and_end_s")),
            share(split.get("between_and_end_s")),
        ]
    )
    return [
        "### Where tally's time goes",
        "",
        f"The {what}: {secs(wall)} s, {run.get('batches')} micro-batches; phases from the "
        "stream's own DEBUG records (`BatchProcessor.last_phases`), summed over the batches:",
        "",
        *table(["part", "seconds", "share of wall"], rows),
    ]


# -- 2. per-batch fixed cost ----------------------------------------------------------------------


def fixed_cost(st: dict[str, Any], when: str) -> list[str]:
    fc = st["fixed_cost"]
    out = _section(
        "2. Per-batch fixed cost" + when,
        f"From the state run (section 4): {fc['batches']} micro-batches of "
        f"~{number(fc['lines_per_batch'])} lines. Median micro-batch, whole (every phase below, "
        f"the `stream_progress` commit included): **{ms_as_secs(fc['median_batch_ms'])}**; "
        f"target ≤ {ms_as_secs(fc['target_ms'])}: {verdict(fc['met'])}"
        + (
            f" (`stream_progress.batch_duration_ms`, recorded before that commit: "
            f"{ms_as_secs(fc['median_recorded_ms'])})"
            if fc.get("median_recorded_ms") is not None and fc.get("whole_batch_traced")
            else ""
        )
        + ". Phases per batch, from the stream's DEBUG records on "
        "`tally.stream` (`batch N phases: ...`, written by `bench/tally_cli.py`):",
    )
    rows = [
        [
            f"`{p['phase']}`",
            secs(p["median_s"]),
            secs(p["p90_s"]),
            f"{100 * p['share']:.0f} %",
            p["what"],
        ]
        for p in fc["phases"]
    ]
    out += table(["phase", "median s", "p90 s", "share", "what it covers"], rows)
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


def latency(lat: dict[str, Any], when: str) -> list[str]:
    out = _section(
        "3. Latency at a steady rate" + when,
        f"A writer thread drops one file per {lat['file_interval_s']:g} s at "
        f"{lat['rate_events_per_s']:,} events/s for {lat['run_s']:.0f} s (event time = the "
        f"writer's wall clock); {duration(lat['window_ms'])} windows, "
        f"L = {duration(lat['lateness_ms'])}, processing-time trigger "
        f"{duration(lat['trigger_ms'])}; the engines run in the bench's own session. Delay of a "
        "window = timestamp of the first Delta commit holding a row of it "
        f"(from the table's `_delta_log`) minus its end; windows ending in the first "
        f"{lat['warmup_s']:.0f} s are warm-up and not counted. Target: p99 ≤ L + 2 triggers = "
        f"{ms_as_secs(lat['target_ms'])}.",
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
                ms_as_secs(r["p50_ms"]),
                ms_as_secs(r["p99_ms"]),
                ms_as_secs(r["max_ms"]),
                ms_as_secs(median_batch),
                verdict(r["met"]) if engine == "tally" else "(reference)",
            ]
        )
    out += table(["engine", "windows", "p50", "p99", "max", "median batch", "target"], rows)
    return out


# -- 4. state -------------------------------------------------------------------------------------

STATE_LABELS = {
    "open_windows": "open windows",
    "state_bytes": "state bytes on disk",
    "batch_ms": "batch time",
    "peak_rss_mb": "driver peak RSS",
}


def _baseline_note(series: dict[str, Any]) -> str:
    """Which tenth a state series was compared against, when not the first."""
    baseline = series.get("baseline", "first")
    return "" if baseline == "first" else f" ({baseline} tenth)"


def state(st: dict[str, Any], when: str) -> list[str]:
    f = st["flat"]
    batches = st["batches"]
    n = max(1, int(len(batches) * st["tenth"]))
    out = _section(
        "4. State over a 10× longer run" + when,
        f"{st['lines']:,} lines over {st['days']:g} days of event time, {st['files']} files, "
        f"{st['max_files_per_trigger']} a trigger: {len(batches)} micro-batches in "
        f"{secs(st['seconds'])} s, one `tally stream` process "
        f"(peak RSS {megabytes(st['peak_rss_mb'])})."
        f" First tenth = the first {n} batches, last tenth = the last {n}: medians, the peak "
        "for RSS. RSS is judged against the middle tenth instead (the batches in the middle of "
        "the run): a fresh JVM grows its heap to its working size over the first batches "
        "whatever the state does, so growth with the stream's length shows over the second "
        "half; its ratio to the first tenth is given beside. State bytes = the size of "
        "`<checkpoint>/tally/state/<batch>` (windows + dedup Parquet), read by a poller every "
        "0.25 s while the stream ran (the stream keeps only "
        "its last two batches' state); RSS = the process tree, charged to the batch in flight.",
    )
    units = {"open_windows": "", "state_bytes": " B", "batch_ms": " ms", "peak_rss_mb": " MB"}
    rows = [
        [
            STATE_LABELS.get(k, k),
            number(v["first"]) + units.get(k, "") + _baseline_note(v),
            number(v["last"]) + units.get(k, ""),
            number(v["ratio"], 2)
            + (
                f" (÷ first tenth {number(v['ratio_to_first'], 2)})"
                if "ratio_to_first" in v
                else ""
            ),
            f"≤ {v['tolerance']}",
            number(v["max"]) + units.get(k, ""),
            f"{v['sampled']} / {len(batches)}",
            "flat" if v["flat"] else "**grows**",
        ]
        for k, v in f.items()
    ]
    out += table(
        [
            "per micro-batch",
            "first (or middle) tenth",
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


def bigfile(bf: dict[str, Any], when: str) -> list[str]:
    out = _section(
        "5. One big input file" + when,
        f"{bf['events']:,} events ({bf['lines']:,} lines) generated once into {bf['files']} "
        f"files ({bf['input_bytes'] / 1e9:.2f} GB, {secs(bf['generate_s'])} s) and concatenated "
        f"in arrival order into one file of {bf['single_file_bytes'] / 1e9:.2f} GB "
        f"({secs(bf['concatenate_s'])} s; its modification time the newest file's). Each input "
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
                secs(run["seconds"]),
                number(run["events_per_s"]),
                megabytes(run["peak_rss_mb"]),
                run["batches"],
                f"{run['input_lines']:,}",
            ]
        )
    out += table(
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
    out += table(["compared", f"{bf['files']} files", "one file", ""], cmp_rows)
    out += [
        f"Results: {'**equal**' if bf['equal'] else '**unequal**'}; peak RSS one file ÷ "
        f"{bf['files']} files = ×{bf['rss_ratio']:.2f} (bounded: ≤ ×{bf['rss_tolerance']}): "
        + ("yes" if bf["memory_bounded"] else "**no**")
        + f"; target {verdict(bf['met'])}.",
        "",
    ]
    return out


def kafka(ka: dict[str, Any], when: str) -> list[str]:
    out = _section(
        "8. Kafka: a pre-filled topic" + when,
        f"The throughput section's input ({ka['events']:,} events, {ka['lines']:,} lines) "
        f"published by `tally produce` into a topic of {ka['partitions']} partitions on a "
        f"broker started by `scripts/kafka.sh` ({secs(ka['publish_s'])} s); "
        f"{ka['records_per_trigger']:,} records a micro-batch (the throughput run's lines a "
        "micro-batch), each engine its own process, available-now from the earliest offsets. "
        f"{duration(ka['window_ms'])} windows, lateness {duration(ka['lateness_ms'])}.",
    )
    labels = {
        "tally": "tally stream --source kafka",
        "plain": "plain Spark: Kafka → from_json → withWatermark + window → Delta",
    }
    rows = [
        [
            labels[name],
            secs(run["seconds"]),
            number(run["events_per_s"]),
            megabytes(run["peak_rss_mb"]),
        ]
        for name, run in ka["runs"].items()
    ]
    out += table(["engine", "wall s", "records/s", "peak RSS"], rows)
    t, p = ka["tally"], ka["plain"]
    out += [
        f"tally ÷ plain: **{ka['ratio']:.2f}** (no target). tally read {t['input_lines']:,} "
        f"records ({t['valid_events']:,} valid, {t['quarantined']:,} quarantined; every record "
        f"accounted for: {'yes' if ka['all_records_accounted'] else '**no**'}); the plain "
        f"query wrote {p['output_rows']:,} window rows holding {p['output_events']:,} events.",
        "",
    ]
    if "flink" in ka:  # measured since issue 23
        out += _kafka_flink(ka)
    return out


_FLINK_LABELS = {
    "agg": "Flink SQL aggregation only: Kafka → json → watermark + TUMBLE → files",
    "durable": "Flink SQL durable: bronze + aggregation in one job, checkpoints on",
}


def _kafka_flink(ka: dict[str, Any]) -> list[str]:
    """Flink beside Spark on the same topic: time, rows dropped as late, the ratios."""
    fl = ka["flink"]
    out = ["### Flink beside Spark", ""]
    if not fl["runs"]:
        return [*out, f"Not measured: {fl['not_measured']}.", ""]
    records = ka["records"]
    out += [
        f"PyFlink {fl['version']} in its own virtualenv (`make flink`), Flink SQL "
        "(`bench/flink_job.py`) on a local mini-cluster of parallelism "
        f"{fl['parallelism']}: Flink's Kafka source from the earliest offsets, bounded at the "
        "offsets latest at its start (`scan.bounded.mode = latest-offset`), the `json` format "
        "(parsing in the JVM), the event time's watermark with the same lateness (per Kafka "
        "partition, the minimum over a reader's partitions), the same tumbling windows, count "
        "and sum per key into CSV files. The durable job adds the bronze pipeline (every "
        "record's text with its partition, offset and timestamp into JSON files) and "
        f"checkpoints every {duration(fl['checkpoint_ms'])}. Each job is one process, timed "
        "like the others. Flink drops rows behind its watermark silently: *not in a window* "
        "= records read − events in its windows (at the end of its input Flink closes every "
        f"window); an untimed batch job counted the {fl['valid_rows']:,} records Flink reads "
        "as valid events, so *late* = valid events − events in its windows, and the rest are "
        f"records its `json` format could not read as events ({ka['malformed_lines']:,} "
        "malformed lines in the input; the format reads a decimal or quoted amount as a "
        "number, which tally quarantines). tally keeps its late rows (the late side output) "
        "and its malformed lines (quarantine); plain Spark's late rows are its own "
        "`numRowsDroppedByWatermark`, and its *not in a window* also holds the events of the "
        "windows still open at its end. Flink's watermark follows each partition's highest "
        "event time record by record, with nothing like tally's clipping of clocks running "
        "ahead (`max_clock_skew`): one of the generator's clock-ahead events (0.05 % of the "
        "events, 10–60 min ahead) moves its partition's watermark ahead of the events after it.",
        "",
    ]
    t, tr, pr = ka["tally"], ka["runs"]["tally"], ka["runs"]["plain"]
    pd = ka["plain_dropped"]
    rows = [
        [
            "tally stream --source kafka",
            secs(tr["seconds"]),
            number(tr["events_per_s"]),
            megabytes(tr["peak_rss_mb"]),
            f"{t['late_events']:,} (kept: late side output)",
            f"{t['quarantined']:,} quarantined (kept)",
            "–",
            "–",
        ],
        [
            "plain Spark: aggregation only",
            secs(pr["seconds"]),
            number(pr["events_per_s"]),
            megabytes(pr["peak_rss_mb"]),
            f"{pd['dropped_by_watermark']:,}",
            f"{pd['dropped_rows']:,} ({pd['dropped_pct']:.2f} %)",
            "–",
            "–",
        ],
    ]
    for mode, run in fl["runs"].items():
        rows.append(
            [
                _FLINK_LABELS[mode],
                secs(run["seconds"]),
                number(run["events_per_s"]),
                megabytes(run["peak_rss_mb"]),
                f"{run['late_rows']:,} ({run['late_pct']:.2f} %)",
                f"{run['dropped_rows']:,} ({run['dropped_pct']:.2f} %)",
                f"**{fl['ratio_tally_flink'][mode]:.2f}**",
                f"{fl['ratio_flink_plain'][mode]:.2f}",
            ]
        )
    out += table(
        [
            "engine",
            "wall s",
            "records/s",
            "peak RSS",
            "late rows",
            "not in a window",
            "tally ÷ Flink",
            "Flink ÷ plain",
        ],
        rows,
    )
    durable = fl["runs"].get("durable")
    if durable is not None:
        kept = "yes" if durable["bronze_rows"] == records else "**no**"
        out += [
            f"Flink's durable bronze kept {durable['bronze_rows']:,} of {records:,} records "
            f"(every record: {kept}). Flink ÷ plain compares with plain Spark's aggregation-only "
            "Kafka query (the only plain Kafka peer); tally ÷ Flink durable compares the two "
            "that keep every record.",
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


def scaleout(so: dict[str, Any], when: str) -> list[str]:
    out = _section(
        "9. Scale-out: a standalone cluster and S3" + when,
        f"One generated input ({so['events']:,} events, {so['lines']:,} lines in {so['files']} "
        f"files, {so['files_per_trigger']} files a micro-batch). `scripts/s3.sh` (moto's S3 "
        f"server) started in {secs(so['startup_s']['s3'])} s and `scripts/cluster.sh` (a "
        f"standalone master and one 2-core worker) in {secs(so['startup_s']['cluster'])} s (until "
        "the worker registered). Each configuration runs `tally stream --available-now --drain "
        "--clock arrival` and then `tally reconcile` as processes, timed from start to exit.",
    )
    rows = [
        [
            _SCALEOUT_LABELS.get(name, name),
            secs(run["stream_s"]),
            f"×{run['stream_ratio']:.2f}",
            secs(run["reconcile_s"]),
            f"×{run['reconcile_ratio']:.2f}",
        ]
        for name, run in so["runs"].items()
    ]
    out += table(["configuration", "stream s", "÷ local", "reconcile s", "÷ local"], rows)
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


def windows(wi: dict[str, Any], when: str) -> list[str]:
    kinds = {name: wi["kinds"][name] for name in wi["kind_order"]}
    flags = ", ".join(f"{k['label']} `{' '.join(k['flags'])}`" for k in kinds.values())
    out = _section(
        "10. Window kinds: tumbling, hopping and session windows on the same input" + when,
        f"One input generated once: {wi['lines']:,} JSON lines from `tally generate` "
        f"({wi['distinct_events']:,} events, {wi['duplicates']:,} duplicates, "
        f"{wi['malformed_lines']:,} malformed lines; {wi['keys']:,} keys, one day of event "
        f"time) in {wi['files']} files, {wi['max_files_per_trigger']} a trigger (micro-batches "
        f"of ~{wi['lines_per_batch']:,.0f} lines); {duration(wi['window_ms'])} windows, lateness "
        f"{duration(wi['lateness_ms'])}. Each run is `tally stream --available-now --drain --clock "
        f"arrival` in its own process on a fresh warehouse ({flags}), on `{wi['spark_master']}` "
        f"with {wi['shuffle_partitions']} shuffle partitions, timed wall-clock from process "
        f"start to exit (JVM start included). {wi['repetitions']} repetition(s), the kinds "
        "alternating in an order rotated each repetition ("
        + "; ".join(" → ".join(o) for o in wi["orders"])
        + "); medians. events/s = input lines ÷ wall seconds.",
    )
    out += _windows_runs(wi, kinds)
    out += _windows_ratios(wi, kinds)
    out += _windows_cross_check(wi, kinds)
    out += _windows_phases(wi, kinds)
    return out


def _windows_runs(wi: dict[str, Any], kinds: dict[str, dict[str, Any]]) -> list[str]:
    """Each kind's medians and what its last run wrote."""
    base = wi["baseline"]
    rows = []
    for name, kind in kinds.items():
        eps, last = wi["events_per_s"][name], wi["runs"][name][-1]
        ratio = 1.0 if name == base else wi["ratio_to_baseline"].get(name)
        rows.append(
            [
                kind["label"],
                secs(wi["seconds"][name]["median"]),
                number(eps["median"]),
                f"{number(eps['min'])} – {number(eps['max'])}",
                f"**{number(ratio, 2)}**" if name != base else "1.00",
                megabytes(wi["peak_rss_mb"][name]),
                last["batches"],
                f"{last['windows_emitted']:,}",
                f"{last['current_windows']:,}",
                number(last["events_per_window"], 2),
                f"{last['retraction_rows']:,}",
            ]
        )
    out = table(
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
    return out


def _windows_ratios(wi: dict[str, Any], kinds: dict[str, dict[str, Any]]) -> list[str]:
    """Per repetition, each kind against tumbling's, and the events each counts."""
    reps = wi.get("ratio_per_repetition") or {}
    return [
        "Per repetition, events/s ÷ tumbling's: "
        + "; ".join(
            f"{kinds[name]['label']}: " + ", ".join(f"{x:.2f}" for x in reps[name])
            for name in kinds
            if name in reps
        )
        + ". Events counted in current windows ÷ tumbling's: "
        + "; ".join(
            f"{kinds[name]['label']}: {number(wi['counted_ratio'][name], 2)} (each event is in "
            f"{_windows_of(kinds[name]['windows_per_event'])}; fewer where it is late for some)"
            for name in kinds
            if name in wi["counted_ratio"]
        )
        + ".",
        "",
    ]


def _windows_cross_check(wi: dict[str, Any], kinds: dict[str, dict[str, Any]]) -> list[str]:
    """Every (event, window) pair accounted for, read back from each run's warehouse."""
    out = [
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
    out += table(
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
    return out


def _windows_phases(wi: dict[str, Any], kinds: dict[str, dict[str, Any]]) -> list[str]:
    """Where the median run of each kind spent its time."""
    medians = wi.get("median_runs") or {}
    names = [n for n in kinds if medians.get(n)]
    phase_order = list(dict.fromkeys(p["phase"] for n in names for p in medians[n]["phases"]))
    if not phase_order:
        return []
    totals = {n: {p["phase"]: p["total_s"] for p in medians[n]["phases"]} for n in names}
    rows = [
        ["start → first micro-batch"]
        + [secs((medians[n]["wall_split"] or {}).get("startup_s")) for n in names]
    ]
    rows += [
        [f"in batches: `{ph}`"] + [secs(totals[n].get(ph)) for n in names] for ph in phase_order
    ]
    rows.append(
        ["between micro-batches and the end"]
        + [secs((medians[n]["wall_split"] or {}).get("between_and_end_s")) for n in names]
    )
    rows.append(["wall"] + [secs(medians[n]["seconds"]) for n in names])
    return [
        "Where the time goes (the median run of each kind; seconds summed over its "
        "micro-batches, from the stream's DEBUG phase records):",
        "",
        *table(["part", *[kinds[n]["label"] for n in names]], rows),
    ]


# -- 6./7. nightly and curve ----------------------------------------------------------------------


def nightly_and_curve(
    ni: dict[str, Any], curve: dict[str, Any] | None, r: dict[str, Any]
) -> list[str]:
    out: list[str] = []
    if ni.get("sizes"):
        out += _section(
            "6. Nightly job" + carried_label(r, "nightly"),
            "Per size, one generated day (8 source partitions, 1,000 keys). The speed-layer "
            "tables are built by a batch load with the project's own parse "
            "(`tally.events.parse_events`) and window code (`tally.windows`) instead of "
            f"streaming (see `bench/nightly.py`: micro-batches of {ni['files_per_batch']} "
            "files, global-max watermark, late and duplicate events as the stream would mark "
            "them, drained at the end). Stages are the DAG's (`tally_app.nightly`); reconcile "
            "is split at its `batch_aggregates` write. DuckDB runs the same re-aggregation "
            "(validate, first arrival per `event_id`, window, business day, count and sum, "
            "written to Parquet) on the same JSON files and on the `events` table's Parquet "
            "files. Targets (issue 27): (re-aggregate + diff) ÷ DuckDB on the `events` Parquet "
            f"≤ {nightly_targets.PARQUET_RATIO_TARGET:g}× at the largest size; validate + report ≤ "
            "re-aggregate + diff at every size; the whole nightly (reconcile, validate, report) "
            f"≤ {nightly_targets.WHOLE_TARGET_S:g} s at "
            f"{nightly_targets.WHOLE_TARGET_EVENTS:,} events. Target (issue "
            f"40): re-aggregate + diff ≤ {nightly_targets.PLAIN_RATIO_TARGET:g}× plain Spark "
            "SQL's query at "
            f"{nightly_targets.WHOLE_TARGET_EVENTS:,} events, each the median of two runs "
            "alternated in the "
            "session (the stages' run, plain's, then one more of each: a single plain run, "
            "first of its query and after DuckDB, was measured up to 1.5× its warm runs). Peak "
            "RSS: the "
            "bench's process tree (Python and the session's JVM) while the stages ran; the "
            "session lives through every size, so it is a running maximum.",
        )
        out += _nightly_sizes(ni["sizes"])
        checks = [_nightly_check(s) for s in ni["sizes"]]
        out += ["Results agree:", "", *[f"- {c}" for c in checks], ""]
        g = ni.get("growth")
        if g:
            out += [
                f"Growth of re-aggregate + diff from {g['from_events']:,} to {g['to_events']:,} "
                f"events: ×{g['time_ratio']:.1f} for ×{g['size_ratio']:.0f} the data (time ∝ "
                f"events^{g['exponent']:.2f}); {verdict(g['met'])}.",
                "",
            ]
    if curve:
        out += _section(
            "7. Lateness curve" + carried_label(r, "curve"),
            f"`lateness_curve` over the {curve['curve_events']:,} distinct events of the day "
            f"from the event log ({curve['events']:,}-event day), {curve['bounds']} bounds "
            f"(0 s to 10 min): **{secs(curve['seconds'])} s** wall time, including "
            "`events_from_log` (dedup); recommended bound for 99.9 %: "
            + (duration(curve["recommended_ms"]) if curve["recommended_ms"] is not None else "none")
            + ".",
        )
    return out


def _nightly_sizes(sizes: list[dict[str, Any]]) -> list[str]:
    columns = {
        "events": lambda s: f"{s['events']:,}",
        "re-aggregate s": lambda s: secs(s["reaggregate_s"]),
        "diff s": lambda s: secs(s["diff_s"]),
        "validate s": lambda s: secs(s["validate_s"]),
        "report s": lambda s: secs(s["report_s"]),
        "validate + report ÷ (re-agg + diff)": lambda s: (
            f"{nightly_targets.checks_s(s) / nightly_targets.reconcile_s(s):.2f}"
        ),
        "whole nightly s": lambda s: secs(nightly_targets.whole_s(s)),
        # runs before 2026-11-26 (the committed results until then) did not count the jobs
        "Spark jobs (reconcile / validate / report)": lambda s: (
            " / ".join(str(s["jobs"][k]) for k in ("reconcile", "validate", "report"))
            if "jobs" in s
            else "–"
        ),
        "peak RSS": lambda s: megabytes(s.get("peak_rss_mb")),
        "DuckDB Parquet s": lambda s: secs(s["duckdb_parquet"]["seconds"]),
        "(re-agg + diff) ÷ DuckDB Parquet": lambda s: f"{s['ratio_parquet']:.1f}×",
        # runs before 2026-11-27 did not time plain Spark SQL's query
        "plain Spark SQL s (÷ DuckDB Parquet)": lambda s: (
            f"{secs(s['spark_plain']['seconds'])} ({s['ratio_spark_plain']:.1f}×)"
            if "spark_plain" in s
            else "–"
        ),
        # runs before 2026-11-29 did not alternate a second run of each
        "re-agg + diff ÷ plain (runs, s)": lambda s: (
            f"{s['paired']['ratio']:.2f} ("
            + " / ".join(secs(x) for x in s["paired"]["tally_s"])
            + " vs "
            + " / ".join(secs(x) for x in s["paired"]["plain_s"])
            + ")"
            if "paired" in s
            else "–"
        ),
        "DuckDB JSON s": lambda s: secs(s["duckdb_json"]["seconds"]),
        "÷ DuckDB JSON": lambda s: f"{s['ratio_json']:.1f}×",
        "setup: batch load s": lambda s: secs(s["load_s"]),
    }
    return table(list(columns), [[cell(s) for cell in columns.values()] for s in sizes])


def _nightly_check(s: dict[str, Any]) -> str:
    """Whether tally and DuckDB agree at one size, and how the nightly stages came out."""
    validation = (
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
        f"{validation}"
    )
