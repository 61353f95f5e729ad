"""The report's figures of the event log from a run's `reconciliation_partitions` rows (their
only source), and when a run without such rows is refused: pure, no Spark."""

from __future__ import annotations

from typing import Any

import pytest

from expectations.report_data import _nothing_logged
from expectations.report_figures import (
    CURVE_SHIFTS_MS,
    LATENESS_BINS_MS,
    lateness_labels,
    log_figures,
)


def _row(partition: int | None, events: int, late: int, bins: dict[int, int]) -> dict[str, Any]:
    """A row as `figure_columns` selects it: late rows per histogram bin (`b<i>`); every late
    row at or beyond each estimated bound (`d<i>`: here, all of them)."""
    row: dict[str, Any] = {"partition": partition, "events": events, "late_events": late}
    row.update({f"b{i}": bins.get(i, 0) for i in range(len(LATENESS_BINS_MS))})
    row.update({f"d{i}": sum(bins.values()) for i in range(len(CURVE_SHIFTS_MS))})
    return row


@pytest.mark.parametrize(
    ("rows", "allowed_ms", "hist", "dropped", "partitions"),
    [
        # a date the log held nothing of: every figure 0, no partition
        ([], None, [0] * len(LATENESS_BINS_MS), None, []),
        ([], 0, [0] * len(LATENESS_BINS_MS), [0] * len(CURVE_SHIFTS_MS), []),
        # summed over the partitions; by partition, a null one first; a partition with only
        # late rows of the windows (or only repeats) has no events: not shown
        (
            [_row(1, 4, 1, {2: 1}), _row(None, 2, 0, {}), _row(3, 0, 0, {0: 2})],
            1_000,
            [2, 0, 1, 0, 0, 0, 0, 0, 0],
            [3] * len(CURVE_SHIFTS_MS),
            [
                {"partition": None, "events": 2, "late": 0, "rate": 0.0},
                {"partition": 1, "events": 4, "late": 1, "rate": 0.25},
            ],
        ),
    ],
)
def test_log_figures_sum_the_runs_rows(rows, allowed_ms, hist, dropped, partitions) -> None:
    figures = log_figures(rows, allowed_ms)
    assert figures.counts.hist == list(zip(lateness_labels(), hist, strict=True))
    assert figures.counts.dropped == dropped
    assert figures.partitions == partitions


@pytest.mark.parametrize(
    ("totals", "nothing"),
    [
        # no batch event, no late row: a run writes no rows, and shows figures of 0
        ({"batch_count": 0, "explained_count": 0, "copies_count": 0}, True),
        # events or late rows (copies are late rows too): rows missing means an older run
        ({"batch_count": 1, "explained_count": 0, "copies_count": 0}, False),
        ({"batch_count": 0, "explained_count": 1, "copies_count": 0}, False),
        ({"batch_count": 0, "explained_count": 0, "copies_count": 1}, False),
    ],
)
def test_only_a_date_without_events_or_late_rows_needs_no_rows(totals, nothing) -> None:
    assert _nothing_logged(totals) is nothing
