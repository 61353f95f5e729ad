"""The first-arrival rule on a log's copies (`tally.arrivals.marked_copies`), one row per case,
and the same marks as `with_first_arrival` gives each line of the log."""

from __future__ import annotations

from typing import Any

import pytest
from batch_fixtures import event, ms
from frames import frame

from tally import tables as T
from tally.arrivals import FIRST_ARRIVAL, FIRST_COPY, marked_copies, with_first_arrival

T0 = ms("2026-11-20T10:00:00Z")


def line(event_id: str | None, line_no: int, ingest_s: int, batch_id: int = 0) -> dict[str, Any]:
    row = event("x", "k", 1, T0, ingest=T0 + ingest_s * 1000, batch_id=batch_id)
    return {**row, "event_id": event_id, "source_line": line_no}


# (why, lines, expected (first_copy, first_arrival) per line, in the order given)
CASES = [
    ("a single copy is its id's first arrival", [line("a", 1, 1)], [(True, True)]),
    (
        "the earlier ingest wins, whatever the line numbers say",
        [line("a", 1, 9), line("a", 2, 1)],
        [(False, False), (True, True)],
    ),
    (
        "ingest time ties: the batch decides, then the line",
        [line("a", 1, 1, batch_id=2), line("a", 3, 1, batch_id=1), line("a", 2, 1, batch_id=1)],
        [(False, False), (False, False), (True, True)],
    ),
    (
        "a line written twice is the first arrival both times, but kept once",
        [line("a", 1, 1), line("a", 1, 1), line("a", 2, 5)],
        [None, None, (False, False)],  # the two same lines: checked below as a pair
    ),
    (
        "lines without an id: one is kept, none is a first arrival",
        [line(None, 1, 1), line(None, 2, 2)],
        [(True, False), (False, False)],
    ),
    (
        "ids are ranked apart",
        [line("a", 1, 5), line("b", 2, 1), line("a", 3, 1)],
        [(False, False), (True, True), (True, True)],
    ),
]


@pytest.mark.parametrize(("why", "lines", "expected"), CASES, ids=[c[0] for c in CASES])
def test_marked_copies(spark, why, lines, expected) -> None:
    # each line's position rides in `partition`, which neither ranks nor identifies a line
    rows = frame(spark, T.EVENTS, [{**x, "partition": n} for n, x in enumerate(lines)])
    marked = {
        r["partition"]: (r[FIRST_COPY], r[FIRST_ARRIVAL])
        for r in marked_copies(rows).select("partition", FIRST_COPY, FIRST_ARRIVAL).collect()
    }
    got = [marked[n] for n in range(len(lines))]
    if None in expected:  # the same line twice: one of them is the kept copy, both arrive first
        pair = [g for g, e in zip(got, expected, strict=True) if e is None]
        assert sorted(pair) == [(False, True), (True, True)], why
    rest = [(g, e) for g, e in zip(got, expected, strict=True) if e is not None]
    assert [g for g, _ in rest] == [e for _, e in rest], why
    # the same marks as `with_first_arrival` gives each line against the whole log
    marks = with_first_arrival(rows, rows).select("partition", FIRST_ARRIVAL).collect()
    against_log = {r["partition"]: r[FIRST_ARRIVAL] for r in marks}
    assert [against_log[n] for n in range(len(lines))] == [g[1] for g in got], why
