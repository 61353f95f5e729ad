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
    rows = [
        [
            b["batch"],
            number(b["input_lines"]),
            secs(b["seconds"]),
            number(b["open_windows"]),
            megabytes(b["peak_jvm_rss_mb"]),
        ]
        for b in bl["batches"]
    ]
    out += table(["batch", "lines", "seconds", "open windows after", "peak JVM RSS"], rows)
    out += [
        f"Peak RSS: the driver JVM {megabytes(bl['peak_jvm_rss_mb'])}, the whole process tree "
        f"(Python driver, JVM, Python workers) {megabytes(bl['peak_tree_rss_mb'])}. Counted: "
        f"`stream_progress.input_lines` {bl['input_lines']:,} of {bl['lines']:,} lines "
        f"written; `events` {bl['event_rows']:,} rows of {bl['valid_lines']:,} valid lines: "
        + ("every line counted" if bl["all_lines_counted"] else "**lines missing**")
        + f"; target {verdict(bl['met'])}.",
        "",
    ]
    return out
