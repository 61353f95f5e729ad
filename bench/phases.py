"""Where a micro-batch's time goes, from the stream's own records: `BatchProcessor` times its
phases (`streaming.job.PhaseTimer`) and logs them at DEBUG on `tally.stream`; `bench.tally_cli`
writes those records to a trace file while the real `tally stream` runs. This module reads
the trace back: one entry per micro-batch with its phases and its Delta appends.

The phases, in the order `BatchProcessor.process` runs them (streaming/job.py):
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any

# phase -> what it covers (streaming/job.py, `process`)
PHASES: dict[str, str] = {
    "read_parse": "read the batch's lines, parse each once, persist and count them (`parse_lines`)",
    "clock_state": "the batch's processing time and the previous batch's watermark and "
    "window/dedup state (kept in memory, else read from the checkpoint's state files)",
    "classify": "dedup and lateness of every valid event, per-partition stats, the watermark "
    "advance (`classify_events`, `_batch_stats`)",
    "windows": "fold the batch into the open windows and close the ripe ones "
    "(`close_windows`, checkpointed in memory)",
    "write": "the batch's Delta appends side by side (events; quarantine, late_events, "
    "stream_aggregates when non-empty) and the state files",
    "progress": "the `stream_progress` row: the commit that makes the batch visible",
}
__doc__ = (__doc__ or "") + "\n" + "\n".join(f"* `{k}`: {v};" for k, v in PHASES.items())

_PHASES_MSG = re.compile(r"^batch (\d+) phases: (.*)$")
_PHASE_ITEM = re.compile(r"(\w+) (-?[\d.]+(?:e-?\d+)?) s")
_APPEND_MSG = re.compile(r"^append (\S+): (-?[\d.]+) s$")


def read_trace(path: Path) -> list[dict[str, Any]]:
    """The micro-batches of a trace, in order: `{"batch", "t" (epoch s at its end),
    "phases" {phase: s}, "seconds" (their sum), "appends" {table: s}}`. Appends are logged by
    the writer threads before their batch's phase record, so they go to the next one."""
    batches: list[dict[str, Any]] = []
    appends: dict[str, float] = {}
    if not path.exists():
        return batches
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:  # a line cut short by a killed process
            continue
        msg = str(entry.get("msg", ""))
        append = _APPEND_MSG.match(msg)
        if append:
            appends[append.group(1)] = appends.get(append.group(1), 0.0) + float(append.group(2))
            continue
        match = _PHASES_MSG.match(msg)
        if not match:
            continue
        phases = entry.get("phases") or {
            name: float(value) for name, value in _PHASE_ITEM.findall(match.group(2))
        }
        batches.append(
            {
                "batch": int(match.group(1)),
                "t": float(entry["t"]),
                "phases": phases,
                "seconds": sum(phases.values()),
                "appends": appends,
            }
        )
        appends = {}
    return batches


def phase_names(batches: list[dict[str, Any]]) -> list[str]:
    """The phases seen, in `PHASES` order first, then any new ones in order of appearance."""
    seen = dict.fromkeys(p for b in batches for p in b["phases"])
    return [p for p in PHASES if p in seen] + [p for p in seen if p not in PHASES]


def phase_table(batches: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per phase: median, p90 and total seconds over the batches, and its share of the
    batches' summed time."""
    total = sum(b["seconds"] for b in batches) or 1.0
    rows = []
    for name in phase_names(batches):
        values = sorted(float(b["phases"].get(name, 0.0)) for b in batches)
        rows.append(
            {
                "phase": name,
                "median_s": statistics.median(values),
                "p90_s": values[min(len(values) - 1, int(0.9 * len(values)))],
                "total_s": sum(values),
                "share": sum(values) / total,
                "what": PHASES.get(name, ""),
            }
        )
    return rows


def append_medians(batches: list[dict[str, Any]]) -> dict[str, float]:
    """Median seconds per table of its append, over the batches that appended to it."""
    tables: dict[str, list[float]] = {}
    for b in batches:
        for table, secs in b["appends"].items():
            tables.setdefault(table, []).append(secs)
    return {t: statistics.median(v) for t, v in sorted(tables.items())}


def wall_split(batches: list[dict[str, Any]], started_epoch: float, seconds: float) -> dict:
    """A process's wall time split: start to the first batch (Python, the JVM, the session,
    the tables, the query's start and first listing), inside micro-batches (the phases), and
    the rest (Spark's work between batches: offsets, planning, commits; the end)."""
    if not batches:
        return {"startup_s": None, "in_batches_s": 0.0, "between_and_end_s": None}
    first_start = batches[0]["t"] - batches[0]["seconds"]
    startup = max(0.0, first_start - started_epoch)
    inside = sum(b["seconds"] for b in batches)
    return {
        "startup_s": startup,
        "in_batches_s": inside,
        "between_and_end_s": max(0.0, seconds - startup - inside),
    }


def largest_phase(rows: list[dict[str, Any]], key: str = "median_s") -> dict[str, Any] | None:
    return max(rows, key=lambda r: r[key]) if rows else None
