"""Issue 27's targets for the nightly section, judged from the measured sizes (stdlib only: the
report and the findings judge results carried from earlier runs too, some of which predate a
figure; a missing one shows as "–" and judges nothing).

1. (re-aggregate + diff) ÷ DuckDB re-aggregating the same `events` Parquet files ≤ 2× at the
   largest size (the ratio at every size is shown; the ÷ DuckDB-on-JSON ratio is information).
2. validate + report ≤ re-aggregate + diff at every size.
3. The whole nightly (reconcile, validate, report; the wait condition is not counted) at
   20,000,000 events ≤ 120 s (no verdict when the largest size is smaller, as in quick mode).
4. Growth of re-aggregate + diff no faster than linear (`bench.nightly.growth`), with the peak
   RSS of the bench's process tree (Python driver + JVM) during the stages, as information.

Issue 40's: re-aggregate + diff ≤ 1.3× plain Spark SQL's own re-aggregation query
(`bench.nightly.spark_plain`) at 20,000,000 events, each the median of two runs alternated
in the same session (`paired`; no verdict below that size or without the pair).
"""

from __future__ import annotations

from typing import Any

PARQUET_RATIO_TARGET = 2.0
WHOLE_TARGET_S = 120.0
WHOLE_TARGET_EVENTS = 20_000_000
PLAIN_RATIO_TARGET = 1.3


def reconcile_s(size: dict[str, Any]) -> float:
    """Re-aggregate + diff (seconds)."""
    return float(size["reaggregate_s"] + size["diff_s"])


def checks_s(size: dict[str, Any]) -> float:
    """Validate + report (seconds)."""
    return float(size["validate_s"] + size["report_s"])


def whole_s(size: dict[str, Any]) -> float:
    """The whole nightly: reconcile, validate, report (seconds)."""
    return reconcile_s(size) + checks_s(size)


def judge(sizes: list[dict[str, Any]]) -> dict[str, Any]:
    """Targets 1-3 over the sizes (smallest first): each with `met` (None: not judged)."""
    if not sizes:
        return {}
    big = sizes[-1]
    whole_judged = big["events"] >= WHOLE_TARGET_EVENTS
    return {
        "parquet_ratio": {
            "target": PARQUET_RATIO_TARGET,
            "events": big["events"],
            "ratios": {s["events"]: s["ratio_parquet"] for s in sizes},
            "met": big["ratio_parquet"] <= PARQUET_RATIO_TARGET,
        },
        "checks_within_reconcile": {
            "pairs": {s["events"]: (checks_s(s), reconcile_s(s)) for s in sizes},
            "met": all(checks_s(s) <= reconcile_s(s) for s in sizes),
        },
        "plain_ratio": {
            "target": PLAIN_RATIO_TARGET,
            "events": big["events"],
            "paired": big.get("paired"),
            "met": (
                big["paired"]["ratio"] <= PLAIN_RATIO_TARGET
                if whole_judged and "paired" in big
                else None
            ),
        },
        "whole": {
            "target_s": WHOLE_TARGET_S,
            "target_events": WHOLE_TARGET_EVENTS,
            "events": big["events"],
            "seconds": whole_s(big),
            "met": whole_s(big) <= WHOLE_TARGET_S if whole_judged else None,
        },
    }
