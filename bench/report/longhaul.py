"""Section 13 of `benchmarks.md` (the long haul, `bench.longhaul`): its targets rows, the runs
with housekeeping off and on, what each warehouse holds, and the audit of every closed date
after maintenance and cleanup."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.report.formatting import duration, number, secs, table, verdict

HEADING = "## 13. The long haul: many days at small micro-batches, housekeeping off and on"
MODE_LABELS = {
    "off": "off (`--maintenance false`), live cadence",
    "thread": "on, thread, live cadence",
    "inline": "on, inline (default), live cadence",
    "replay": "on, thread, the month replayed",
}


def _pct(ratio: float | None) -> str:
    return "–" if ratio is None else f"{ratio:.2f} ({(ratio - 1) * 100:+.0f} %)"


def _kb(n: float | None) -> str:
    return "–" if n is None else f"{n / 1024:,.1f} KiB"


def target_rows(lh: dict[str, Any], row: Callable[[str, str, str, bool | None], None]) -> None:
    """Files per closed date, housekeeping's cost per housekept run, --reproduce of every date."""
    closed = lh["audit"]["closed_dates"]
    row(
        "longhaul",
        f"13. long haul: files per closed `events` date ≤ {lh['closed_files_target']}",
        f"at most {number(lh['max_files_per_closed_date'])} over {len(closed)} closed dates",
        lh["closed_files_met"],
    )
    for mode, ratio in lh["ratios"].items():
        if mode not in lh["cost_met"]:
            continue  # the replayed month: not a cost run
        row(
            "longhaul",
            f"13. long haul: housekeeping ({mode}) costs ≤ {lh['cost_target'] * 100:.0f} % of "
            "throughput and of micro-batch p99",
            f"throughput on ÷ off {_pct(ratio['throughput'])}, p99 on ÷ off {_pct(ratio['p99'])}",
            lh["cost_met"][mode],
        )
    audit = lh["audit"]
    matched = sum(r["outcome"] == "MATCH" for r in audit["reproduce"])
    row(
        "longhaul",
        "13. long haul: `--reproduce` MATCH for every date after compaction, VACUUM and log "
        "cleanup",
        f"{matched} of {len(closed)} dates MATCH"
        if audit["reproduce_available"]
        else "not available (`tally reconcile` has no `--reproduce`)",
        lh["reproduce_met"] if audit["reproduce_available"] else None,
    )


def section(lh: dict[str, Any], when: str) -> list[str]:
    live = lh["live"]
    out = [
        f"{HEADING}{when}",
        "",
        f"Housekeeping's cost, at the live cadence: {live['minutes']} minutes of events "
        f"(from {live['start']}, so the day before closes inside the run; {live['lines']:,} "
        f"lines) in one file per {duration(live['trigger_ms'])} (the default trigger) of "
        f"~{live['events_per_file']:,} events, with housekeeping "
        + ", ".join(m for m in live["runs"])
        + ": the default compaction interval, so as many batches pass between two compactions "
        "as pass live, and a VACUUM interval of "
        f"{duration(live['vacuum_interval_ms'])} (every table vacuumed once). A date's packing "
        "and a table's VACUUM come once a run here, once a day (17,280 batches) live: the cost "
        "measured is an upper bound. "
        f"Then the month: {lh['days']} days of ~{lh['events_per_file'] * lh['files_per_day']:,} "
        f"events a day ({lh['lines']:,} lines) in {lh['files_per_day']} files a day, streamed "
        "with housekeeping on at the default intervals on the replayed clock (`replay`): each "
        "day of the replay gets a day's housekeeping. "
        f"Every run: {lh['keys']} keys, {lh['partitions']} source partitions, files whose "
        "modification times are just after the events they hold, each streamed by its own "
        "`tally stream --available-now --clock arrival --max-files-per-trigger 1` process into "
        "its own warehouse: one micro-batch a file, so the stream's clock advances one file's "
        "span a batch, and housekeeping is scheduled on that clock. "
        "Throughput: valid events ÷ the seconds from the first batch's start to the last "
        "batch's end (time between batches included); p50/p99 of "
        "`stream_progress.batch_duration_ms`; both without the first batch (the stream's "
        "compile warm-up); ratios to `off` from the same section run.",
        "",
    ]
    out += _runs(lh)
    out += _tables(lh)
    out += _dates(lh)
    out += _audit(lh)
    return out


def _runs(lh: dict[str, Any]) -> list[str]:
    rows = []
    for mode, run in lh["runs"].items():
        ratio = lh["ratios"].get(mode, {})
        rows.append(
            [
                MODE_LABELS.get(mode, mode),
                run["batches"],
                number(run["batch_ms"]["p50"]),
                number(run["batch_ms"]["p99"]),
                number(run["events_per_s"]),
                secs(run["span_s"]),
                secs(run["seconds"]),
                ", ".join(str(x) for x in run["load_average_before"]),
                _pct(ratio.get("throughput")) if ratio else "–",
                _pct(ratio.get("p99")) if ratio else "–",
            ]
        )
    header = [
        "housekeeping",
        "batches",
        "p50 ms",
        "p99 ms",
        "events/s",
        "batches' span s",
        "process s",
        "load before",
        "throughput ÷ off",
        "p99 ÷ off",
    ]
    out = table(header, rows)
    for mode, hk in lh["housekeeping"].items():
        actions = ", ".join(f"{n} {a}" for a, n in sorted(hk["actions"].items())) or "none"
        out.append(
            f"Housekeeping {mode}: {actions} (`maintenance_log`), {secs(hk['seconds'])} s of "
            f"actions, {hk['failed']} failed."
        )
    return [*out, ""]


def _tables(lh: dict[str, Any]) -> list[str]:
    modes = list(lh["layout"])
    names = list(lh["layout"][modes[0]]) or []
    for mode in modes:
        names += [n for n in lh["layout"][mode] if n not in names]
    rows = []
    for name in names:
        cells = [f"`{name}`"]
        for key, fmt in (
            ("live_files", number),
            ("log_bytes", _kb),
            ("checkpoint_bytes", _kb),
            ("commits_per_day", lambda v: number(v, 1)),
        ):
            cells.append(" / ".join(fmt(lh["layout"][m].get(name, {}).get(key)) for m in modes))
        rows.append(cells)
    out = [
        f"What each warehouse holds after its run ({' / '.join(modes)}); commits per day of "
        f"stream time (housekeeping's commits included) at one micro-batch every "
        f"{duration(lh['live']['trigger_ms'])} in the cost runs and every "
        f"{duration(lh['trigger_ms'])} in the replay:",
        "",
        *table(["table", "live files", "`_delta_log`", "checkpoints", "commits a day"], rows),
    ]
    return out


def _dates(lh: dict[str, Any]) -> list[str]:
    audit = lh["audit"]
    replayed = [m for m, r in lh["runs"].items() if r.get("input") == "replay"]
    by_mode = {m: lh["layout"][m].get("events", {}).get("files_by_date", {}) for m in replayed}
    after = audit["layout_after_maintain"].get("events", {}).get("files_by_date", {})
    dates = sorted({d for files in by_mode.values() for d in files})
    rows = [
        [
            d,
            "closed" if d in audit["closed_dates"] else "open",
            *[number(by_mode[m].get(d)) for m in by_mode],
            number(after.get(d)),
        ]
        for d in dates
    ]
    header = ["`event_date`", "", *[f"files ({m})" for m in by_mode], "after `tally maintain`"]
    closed = lh["live"]["start"][:10]
    cost = [m for m in lh["live"]["runs"] if m in lh["layout"]]
    files = " / ".join(
        number(lh["layout"][m].get("events", {}).get("files_by_date", {}).get(closed)) for m in cost
    )
    return [
        f"The cost runs' closed date {closed}: {files} files ({' / '.join(cost)}).",
        "",
        "Live files per `events` date of the month:",
        "",
        *table(header, rows),
    ]


def _audit(lh: dict[str, Any]) -> list[str]:
    audit = lh["audit"]
    maintained = audit["maintain"]
    pins = audit["pinned_versions"]
    log_after = sum(t["log_bytes"] for t in audit["layout_after_cleanup"].values())
    out = [
        f"On the `{lh['housekept']}` warehouse after the stream stopped: `tally reconcile` of "
        f"each closed date, `tally maintain` (exit {maintained['code']}, "
        f"{len(maintained['actions'])} actions, {secs(maintained['seconds'])} s), then on every "
        "stream table VACUUM RETAIN 0 HOURS and log cleanup (`delta.logRetentionDuration` one "
        "hour, `_delta_log` back-dated three days, two commits): of the "
        f"{pins['pinned']} stream-table versions the runs pinned, {pins['unreadable']} are no "
        "longer readable by version; the oldest commit left in each log: "
        + ", ".join(f"`{t}` {v}" for t, v in audit["first_commit_after_cleanup"].items())
        + f"; the `_delta_log`s hold {_kb(log_after)}. Then `tally reconcile --date D "
        "--reproduce`:",
        "",
    ]
    nightly = {n["date"]: n for n in audit["nightly"]}
    reproduced = {r["date"]: r for r in audit["reproduce"]}
    rows = []
    for d in audit["closed_dates"]:
        r = reproduced.get(d)
        rows.append(
            [
                d,
                nightly[d]["code"] if d in nightly else "–",
                (r["outcome"] if r else "not available"),
                (r["detail"] if r and r["outcome"] != "MATCH" else ""),
            ]
        )
    out += table(["date", "reconcile exit", "`--reproduce`", "detail"], rows)
    out.append(
        f"Targets: files per closed date {verdict(lh['closed_files_met'])}; `--reproduce` "
        + (verdict(lh["reproduce_met"]) if audit["reproduce_available"] else "not available")
        + "; housekeeping's cost "
        + ", ".join(f"{m} {verdict(ok)}" for m, ok in lh["cost_met"].items())
        + "."
    )
    return [*out, ""]
