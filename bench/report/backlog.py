"""Section 12 of `benchmarks.md` (catch-up after an outage, `bench.backlog`): its targets row
and its table of micro-batches."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.report.formatting import megabytes, number, secs, table, verdict

HEADING = "## 12. Catch-up after an outage: a backlog several days a micro-batch"


def target_row(bl: dict[str, Any], row: Callable[[str, str, str, bool | None], None]) -> None:
    """The targets table's row: the backlog completes at the default driver memory with every
    line counted; the peak RSS and batch times beside it."""
    row(
        "backlog",
        f"12. catch-up: {bl['days']} days at {bl['days_per_batch']} days a micro-batch complete "
        f"at driver memory {bl['driver_memory']}, every line counted",
        f"{len(bl['batches'])} batches, p50 {secs(bl['batch_s']['p50'])} s, max "
        f"{secs(bl['batch_s']['max'])} s; peak JVM RSS {megabytes(bl['peak_jvm_rss_mb'])}; "
        f"{bl['input_lines']:,} of {bl['lines']:,} lines counted",
        bl["met"],
    )


def skewed_target_row(
    bl: dict[str, Any], row: Callable[[str, str, str, bool | None], None]
) -> None:
    """The skewed-clock backlog's row: it completes at the same driver memory with every line
    counted and its one warning in the first batch (no window can close)."""
    sk = bl.get("skewed")
    if sk is None:  # a result from before the skewed run
        return
    measured = (
        f"failed: {sk['failed']}"
        if "failed" in sk
        else f"{len(sk['batches'])} batches, p50 {secs(sk['batch_s']['p50'])} s, max "
        f"{secs(sk['batch_s']['max'])} s; peak JVM RSS {megabytes(sk['peak_jvm_rss_mb'])}; "
        f"{sk['input_lines']:,} of {bl['lines']:,} lines counted; warned "
        f"{len(sk['clock_skew_lines'])}x"
    )
    row(
        "backlog",
        f"12. the same backlog with file times {bl['skew_days']} days before its events "
        f"completes at driver memory {bl['driver_memory']}, every line counted, named once "
        "in its first batch",
        measured,
        sk["met"],
    )


def section(bl: dict[str, Any], when: str) -> list[str]:
    out = [
        f"{HEADING}{when}",
        "",
        f"{bl['days']} days of {bl['events_per_day']:,} events ({bl['lines']:,} lines, "
        f"{bl['input_bytes'] / 1e9:.2f} GB; {bl['keys']} keys, {bl['partitions']} source "
        f"partitions) in {bl['files']} files whose modification times are just after the "
        "events they hold, streamed by one `tally stream --available-now --clock arrival "
        f"--max-files-per-trigger {bl['files_per_trigger']}` process ({bl['days_per_batch']} "
        f"days a micro-batch) at driver memory {bl['driver_memory']}: a stream restarted after "
        f"an outage. Wall {secs(bl['seconds'])} s; load average before "
        f"{bl['load_average_before']}.",
        "",
    ]
    sk = bl.get("skewed")
    if sk is not None:
        out += [_skewed_run(bl, sk), ""]
    out += table(*_batch_table(bl))
    ran = sk if sk is not None and "failed" not in sk else None  # the skewed run that finished
    out += [
        f"Peak RSS: the driver JVM {megabytes(bl['peak_jvm_rss_mb'])}, the whole process tree "
        f"(Python driver, JVM, Python workers) {megabytes(bl['peak_tree_rss_mb'])}"
        + (
            f"; skewed: {megabytes(ran['peak_jvm_rss_mb'])} and "
            f"{megabytes(ran['peak_tree_rss_mb'])}"
            if ran is not None
            else ""
        )
        + f". Counted: `stream_progress.input_lines` {bl['input_lines']:,} of {bl['lines']:,} "
        f"lines written; `events` {bl['event_rows']:,} rows of {bl['valid_lines']:,} valid "
        "lines: "
        + ("every line counted" if bl["all_lines_counted"] else "**lines missing**")
        + (f"; skewed: {_skewed_counted(ran)}" if ran is not None else "")
        + f"; target {verdict(bl['met'])}"
        + ("" if sk is None else f", skewed {verdict(sk['met'])}")
        + ".",
        "",
    ]
    return out


def _skewed_run(bl: dict[str, Any], sk: dict[str, Any]) -> str:
    """The paragraph on the skewed-clock run: what it is, then how it ended."""
    what = (
        f"Then the same files with their modification times {bl['skew_days']} days "
        "earlier (restored with reset times), streamed the same way: every event is ahead "
        "of the arrival clock, no window can close and the state grows every batch "
        '(docs/streaming.md, "A clock behind the events"). '
    )
    if "failed" in sk:
        return f"{what}It failed: `{sk['failed']}`."
    lines = sk["clock_skew_lines"]
    warning = f"`{lines[0]}`" if lines else "**none**"
    if len(lines) > 1:
        warning += f" ({len(lines)} lines)"
    return (
        f"{what}Wall {secs(sk['seconds'])} s; windows emitted {sk['windows_emitted']:,}; "
        f"clock-skewed events {sk['clock_skewed_events']:,}; the stream's warning: {warning}."
    )


def _skewed_counted(sk: dict[str, Any]) -> str:
    if sk["all_lines_counted"]:
        return "every line counted (in open windows)"
    return f"**lines missing** ({sk['input_lines']:,} counted)"


def _batch_table(bl: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """Each micro-batch of the normal run, and of the skewed run beside it when it ran."""
    sk = bl.get("skewed")
    skewed = {b["batch"]: b for b in sk["batches"]} if sk and "batches" in sk else None
    header = ["batch", "lines", "seconds", "open windows after", "peak JVM RSS"]
    if skewed is not None:
        header += ["skewed: seconds", "open windows after", "peak JVM RSS"]
    rows = []
    for b in bl["batches"]:
        cells = [
            b["batch"],
            number(b["input_lines"]),
            secs(b["seconds"]),
            number(b["open_windows"]),
            megabytes(b["peak_jvm_rss_mb"]),
        ]
        if skewed is not None:
            other = skewed.get(b["batch"], {})
            cells += [
                secs(other.get("seconds")),
                number(other.get("open_windows")),
                megabytes(other.get("peak_jvm_rss_mb")),
            ]
        rows.append(cells)
    return header, rows
