"""Section 14 of `benchmarks.md` (the nightly with history, `bench.history`): its targets row
and its table of history sizes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.report.formatting import number, secs, table, verdict

HEADING = "## 14. The nightly with history: the cost of the day, not of the log"


def _largest(hi: dict[str, Any]) -> dict[str, Any]:
    return max(hi["sizes"], key=lambda s: s["history_days"])


def target_row(hi: dict[str, Any], row: Callable[[str, str, str, bool | None], None]) -> None:
    """The targets table's row: the whole nightly after the most history ÷ the day alone."""
    big, alone = _largest(hi), hi["sizes"][0]
    row(
        "history",
        f"14. the whole nightly (`tally reconcile`) of a {hi['day_events']:,}-event day after "
        f"{big['history_days']} days of {hi['events_per_day']:,} ÷ the day alone ≤ {hi['target']}",
        f"{hi['ratio']:.2f} ({secs(big['median_s'])} s vs {secs(alone['median_s'])} s; "
        f"`--dedup full`: {hi['full_ratio']:.2f})",
        hi["met"],
    )


def section(hi: dict[str, Any], when: str) -> list[str]:
    big = _largest(hi)
    out = [
        f"{HEADING}{when}",
        "",
        f"One generated day of {hi['day_events']:,} events (batch-loaded as in section 6) in a "
        f"warehouse of its own, and copies of it after {', '.join(map(str, hi['history_days']))}"
        f" days of history of {hi['events_per_day']:,} events (every 200th line repeating an id "
        "of three days earlier). Each warehouse's index of event ids covers its history and not "
        "the day, as after the night before (restored before every run; the day alone has no "
        "index, so its run builds one from the day). Timed: the whole nightly, one "
        "`tally reconcile --date` process (re-aggregate, diff, validate, report; JVM start "
        f"included), the warehouses alternating, {hi['rounds']} round(s); medians. Load average "
        f"before {hi['load_average_before']}.",
        "",
    ]
    rows = [
        [
            s["history_days"],
            number(s["history_days"] * hi["events_per_day"] + hi["day_events"]),
            ", ".join(secs(x) for x in s["nightly_s"]),
            secs(s["median_s"]),
            f"{s['median_s'] / hi['sizes'][0]['median_s']:.2f}",
            ", ".join(secs(x) for x in s.get("catch_up_s") or []) or "–",
            secs(s["build_s"]) if "build_s" in s else "–",
            f"{s['build_s_per_million']:.1f}" if "build_s_per_million" in s else "–",
            f"{s['index_bytes_per_line']:.1f}" if "index_bytes_per_line" in s else "–",
        ]
        for s in hi["sizes"]
    ]
    out += table(
        [
            "days of history",
            "events in the log",
            "nightly s",
            "median s",
            "÷ the day alone",
            "catch-up s",
            "index build s",
            "build s per million lines",
            "index bytes per line",
        ],
        rows,
    )
    out += [
        f"`--dedup full` (the whole log's repeated ids ranked every night, the path before the "
        f"index) on {big['history_days']} days: {', '.join(secs(x) for x in hi['full_s'])} s, "
        f"median {secs(hi['full_median_s'])} s, {hi['full_ratio']:.2f}× the day alone. The "
        "index build is the one-time cost of a warehouse without an index (over its history); "
        "catch-up is each run's own (the day's lines). Target (issue 40): the largest history "
        f"÷ the day alone ≤ {hi['target']}: {verdict(hi['met'])}.",
        "",
    ]
    if hi.get("restatements"):
        out += restatement_lines(hi["restatements"])
    return out


def restatement_lines(rs: dict[str, Any]) -> list[str]:
    """What noticing a date that changed after its run costs (`bench.restatements`)."""
    return [
        f"**Restatements.** {rs['days']} days of {rs['events_per_day']:,} events streamed (a "
        f"day a micro-batch) and {rs['dates_reconciled']} dates reconciled. The check (`tally "
        "restatements`' detection: the runs, the restatements and one aggregate of "
        f"`stream_progress`; no date had changed) took {secs(rs['check_one_s'])} s with 1 date "
        f"reconciled and {secs(rs['check_all_s'])} s with {rs['dates_reconciled']} (median of 3; "
        f"{'flat' if rs['flat'] else 'NOT flat'}). Then 3 late first arrivals and a copy of an "
        f"event of {rs['restated_date']} were streamed: the desk's ledger read "
        f"({secs(rs['ledger_s'])} s) showed {len(rs['ledger_reopened'])} date(s) reopened, "
        f"{rs['restated_date']} with the stream's count of {rs['ledger_count']} (the copy "
        "is days old, beyond the stream's dedup horizon: new to the stream); the check "
        f"({secs(rs['check_s'])} s, recomputing that date) recorded {rs['restated_events']} "
        f"events and {number(rs['restated_amount'])} (expected {rs['expected_events']} and "
        f"{number(rs['expected_amount'])}). False flags: {rs['false_flags']}.",
        "",
    ]
