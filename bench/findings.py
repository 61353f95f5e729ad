"""Findings: plain sentences from the numbers, where the time goes and what would close gaps
(the "Findings" list of `benchmarks.md`, printed by `tally bench`)."""

from __future__ import annotations

from typing import Any

from bench.probe import LATE_CHECK, PHASE_NAMES

READ_PHASE = PHASE_NAMES["inline before processing time"]


def findings(r: dict[str, Any]) -> list[str]:
    """One sentence (or a few) per section that ran."""
    out: list[str] = []
    sp, lat, st, ni = r.get("speed"), r.get("latency"), r.get("state"), r.get("nightly")
    if sp:
        out += _speed(sp, st)
    if lat and "tally" in lat["engines"]:
        out.append(_latency(lat))
    if st:
        out.append(_state(st))
    if ni and ni["sizes"]:
        out.append(_nightly(ni))
    return out


# -- the speed layer ------------------------------------------------------------------------------


def _speed(sp: dict[str, Any], st: dict[str, Any] | None) -> list[str]:
    b = sp["tally_breakdown"]
    per_batch = b.get("median_batch_s") or b["seconds"] / max(1, b["batches"])
    out = [_throughput(sp, per_batch)]
    if st and st["batches"]:
        fixed = _fixed_cost(sp, st, per_batch)
        if fixed:
            out.append(fixed)
    out.append(_largest_phases(b))
    if sp.get("parse"):
        out.append(_unpersisted_parse(sp["parse"]))
    out.append(_further_gaps(b["phases_s"]))
    return out


def _throughput(sp: dict[str, Any], per_batch: float) -> str:
    b = sp["tally_breakdown"]
    wall = b["seconds"]
    writes = {k: v for k, v in b["phases_s"].items() if k.startswith("write ")}
    return (
        f"Speed layer: tally {sp['events_per_s']['tally']['median']:,.0f} events/s vs "
        f"plain Spark {sp['events_per_s']['plain']['median']:,.0f} (ratio "
        f"{sp['ratio_tally_plain']:.2f}, target 0.8). A tally micro-batch of "
        f"{sp['lines'] // max(1, b['batches']):,} lines took {per_batch:.1f} s (median); "
        f"{100 * sum(writes.values()) / wall:.0f} % of the wall time is in the writes "
        f"to {len(writes)} tables, one Delta commit each ("
        + ", ".join(
            f"{k[6:]} {v:.1f} s" for k, v in sorted(writes.items(), key=lambda kv: -kv[1])[:4]
        )
        + ")."
    )


def _fixed_cost(sp: dict[str, Any], st: dict[str, Any], per_batch: float) -> str | None:
    small = st["flat"]["batch_s"]["first_quarter_median"]
    if not small:
        return None
    lines_per_batch = st["lines"] / max(1, len(st["batches"]))
    big_batch = sp["lines"] // max(1, sp["tally_breakdown"]["batches"])
    return (
        f"Fixed cost per micro-batch: with ~{lines_per_batch:,.0f} lines a batch "
        f"(state run) a batch still takes {small:.1f} s, i.e. about "
        f"{100 * min(1.0, small / per_batch):.0f} % of a {big_batch:,}-line "
        "batch is per-batch overhead (about nine Delta commits, their snapshot "
        "updates and three `history(1)` reads) rather than per-event work."
    )


def _largest_phases(b: dict[str, Any]) -> str:
    read = b["phases_s"].get(READ_PHASE, 0.0)
    late = b["phases_s"].get(LATE_CHECK, 0.0)
    return (
        f"Reading, splitting and parsing the lines is the largest phase ({read:.1f} s, "
        f"{100 * read / b['seconds']:.0f} % of the run): the stream reads whole files and "
        "splits them (deterministic line numbers for exactly-once replays), then parses each "
        "line once into a persisted frame both valid events and quarantine come from. "
        f"Second: the event-log duplicate check of late events ({late:.1f} s): a batch "
        "with late events reads the log's ids for their dates, a cost that grows with the "
        "day's log; a Bloom filter or an id index per date would bound it."
    )


def _unpersisted_parse(parse: dict[str, Any]) -> str:
    both = parse["tally_valid_s"] + parse["tally_quarantine_s"]
    return (
        f"Unpersisted `tally.events.parse_events` (as `tally lateness-curve --input` "
        f"and this benchmark's batch load use it) is much slower: on one micro-batch "
        f"({parse['lines']:,} lines) {parse['tally_valid_s']:.1f} s for the valid "
        f"events and {parse['tally_quarantine_s']:.1f} s for the quarantine, against "
        f"{parse['plain_s']:.1f} s for the plain query's JSON reader "
        f"({both / max(parse['plain_s'], 1e-9):.0f}× for both). Their optimized plans "
        f"hold {parse['tally_valid_json_parses_in_plan']} and "
        f"{parse['tally_quarantine_json_parses_in_plan']} `from_json` calls: Catalyst "
        "pushes the `reason IS NULL` filter below the parse and inlines the parse into "
        "it. The stream avoids this by persisting `parse_lines` (one parse, three "
        "`from_json` views); the batch callers should do the same."
    )


def _further_gaps(phases: dict[str, float]) -> str:
    merge = phases.get("merge batch into window state (aggregates.count)", 0.0)
    state_write = phases.get("write window_state", 0.0)
    pin = phases.get("plan parse/classify; pin + persist window/dedup state", 0.0)
    return (
        "Further gaps (streaming/job.py, streaming/logic.py; measured here, not changed): "
        "(1) `close_windows`' `merged` (window_state full-outer-joined with the batch's "
        "aggregate) is computed twice, once for `aggregates.count()` "
        f"({merge:.1f} s) and again for the window_state overwrite ({state_write:.1f} s): "
        "persist `merged`; (2) window_state and dedup_state are written as Delta tables "
        "and read back at a pinned version (time travel) by the next batch "
        f"({pin:.1f} s): in steady state the next batch can reuse the DataFrame this "
        "process just wrote (as `_committed` already does for the progress row); "
        "(3) `_write(versioned=True)` reads `history(1)` after each of its three writes; "
        "the version is in the session conf "
        "`spark.databricks.delta.lastCommitVersionInSession`; (4) every micro-batch pays "
        "about nine Delta commits, so fewer, larger micro-batches (more files per "
        "trigger) amortise the fixed per-batch cost."
    )


# -- latency, state, nightly ----------------------------------------------------------------------


def _latency(lat: dict[str, Any]) -> str:
    t = lat["engines"]["tally"]
    batches = sorted(t["batch_duration_ms"])
    med = batches[len(batches) // 2] if batches else None
    verdict = "within" if t["met"] else "over"
    text = (
        f"Latency: p99 {(t['p99_ms'] or 0) / 1000:.1f} s is {verdict} the target "
        f"L + 2 triggers = {lat['target_ms'] / 1000:.1f} s"
    )
    if med is not None:
        text += (
            f"; the median micro-batch took {med / 1000:.1f} s against a "
            f"{lat['trigger_ms'] / 1000:.0f} s trigger"
        )
        if med > lat["trigger_ms"]:
            text += (
                ", so batches run back to back and a window waits for the batch in flight "
                "plus its own: the per-batch fixed cost above is the latency floor"
            )
    return text + "."


def _state(st: dict[str, Any]) -> str:
    f = st["flat"]
    return (
        "State: "
        + (
            "open-window state, dedup state and batch time stay flat"
            if st["met"]
            else "not flat: "
            + ", ".join(f"{k} ×{v['ratio']:.2f}" for k, v in f.items() if not v["flat"])
        )
        + f" over {len(st['batches'])} micro-batches while the event log grows."
    )


def _nightly(ni: dict[str, Any]) -> str:
    big = ni["sizes"][-1]
    stages = {
        "re-aggregate": big["reaggregate_s"],
        "diff": big["diff_s"],
        "validate": big["validate_s"],
        "report": big["report_s"],
    }
    worst = max(stages, key=lambda k: stages[k])
    return (
        f"Nightly at {big['events']:,} events: re-aggregate + diff "
        f"{big['reaggregate_s'] + big['diff_s']:.1f} s = {big['ratio_json']:.1f}× DuckDB on "
        f"the JSON ({big['duckdb_json']['seconds']:.2f} s) and {big['ratio_parquet']:.1f}× "
        f"DuckDB on the same Parquet files; the slowest stage is {worst} "
        f"({stages[worst]:.1f} s)."
    )
