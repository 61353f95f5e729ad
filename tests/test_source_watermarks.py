"""Source watermarks: control records in the stream set their partition's watermark.

Three parts: the control-record contract (Spark's parse and the model, one row a case), the
watermark rule with source watermarks (table-tested, pure), and a hand-computed replay through
BatchProcessor in which a source watermark closes windows before the bounded rule would.
"""

from __future__ import annotations

import json
import logging
from typing import Any, NamedTuple

import pytest
import reference_model as M
import stream_helpers as H

from streaming.watermark import WatermarkState, advance_watermark

S = 1_000
T0 = H.T0_MS
MARK_ISO = "2026-11-21T00:00:30Z"
MARK_MS = T0 + 30 * S


# -- the contract ------------------------------------------------------------------------------
class ControlCase(NamedTuple):
    why: str
    raw: str
    outcome: str  # "control", "valid" (an event) or the quarantine reason
    partition: int | None = None
    mark_ms: int | None = None


CONTROL_CASES = [
    ControlCase(
        "ISO watermark with its partition",
        json.dumps({"watermark": MARK_ISO, "partition": 3}),
        "control",
        3,
        MARK_MS,
    ),
    ControlCase(
        "epoch-ms watermark, partition omitted: 0",
        json.dumps({"watermark": MARK_MS}),
        "control",
        0,
        MARK_MS,
    ),
    ControlCase(
        "other fields are ignored (a CDC log position, a source name)",
        json.dumps({"watermark": MARK_ISO, "partition": 2, "source": "cdc", "lsn": 991}),
        "control",
        2,
        MARK_MS,
    ),
    ControlCase(
        "a time without a zone is no watermark",
        json.dumps({"watermark": "2026-11-21T00:00:30", "partition": 1}),
        "bad_watermark",
    ),
    ControlCase("text that is no time", json.dumps({"watermark": "soon"}), "bad_watermark"),
    ControlCase(
        "a non-integer partition",
        json.dumps({"watermark": MARK_ISO, "partition": "p1"}),
        "partition_not_integer",
    ),
    ControlCase(
        "with an event_id it is an event (the field is kept in extra)",
        H.event_line("e-1", "k", 5, T0, 1, extra={"watermark": MARK_ISO}),
        "valid",
    ),
    ControlCase(
        "a JSON null watermark is no control record: an event without an id",
        json.dumps({"watermark": None, "partition": 1}),
        "missing_event_id",
    ),
    ControlCase("not an object", json.dumps([{"watermark": MARK_ISO}]), "invalid_json"),
]


@pytest.fixture(scope="module")
def parsed_controls(spark) -> dict[int, tuple[Any, ...]]:
    """parse_events over every case with control field "watermark": line -> outcome."""
    from tally.events import CONTROL_MS, parse_events

    raw = spark.createDataFrame(
        [(c.raw, "cases.jsonl", i + 1) for i, c in enumerate(CONTROL_CASES)],
        "raw_line STRING, source_file STRING, source_line BIGINT",
    )
    out = parse_events(raw, "watermark")
    got: dict[int, tuple[Any, ...]] = {}
    for r in out.valid.select("source_line").collect():
        got[r[0]] = ("valid", None, None)
    for r in out.quarantine.select("source_line", "reason").collect():
        got[r[0]] = (r[1], None, None)
    for r in out.controls.select("source_line", "partition", CONTROL_MS).collect():
        got[r[0]] = ("control", r[1], r[2])
    return got


@pytest.mark.parametrize(
    "number,case", list(enumerate(CONTROL_CASES, start=1)), ids=[c.why for c in CONTROL_CASES]
)
def test_control_record_contract(
    parsed_controls: dict[int, tuple[Any, ...]], number: int, case: ControlCase
) -> None:
    expected = (case.outcome, case.partition, case.mark_ms)
    assert parsed_controls[number] == expected
    # the model, from the spec alone
    control = M.parse_control(case.raw, "watermark")
    if control is None:
        _, reason = M.parse_line(case.raw)
        model = ("valid" if reason is None else reason, None, None)
    elif control[0] is not None:
        model = ("control", *control[0])
    else:
        model = (control[1], None, None)
    assert model == expected


def test_without_a_control_field_a_control_record_is_quarantined(spark) -> None:
    from tally.events import parse_events

    raw = spark.createDataFrame(
        [(CONTROL_CASES[0].raw, "f.jsonl", 1)],
        "raw_line STRING, source_file STRING, source_line BIGINT",
    )
    out = parse_events(raw)
    assert [r["reason"] for r in out.quarantine.collect()] == ["missing_event_id"]
    assert out.controls.count() == 0


# -- the rule ----------------------------------------------------------------------------------
class RuleCase(NamedTuple):
    why: str
    prev: WatermarkState
    batch_hw: dict[int, int]  # seconds
    batch_source: dict[int, int]  # seconds
    now: int  # seconds
    wm: int | None  # expected watermark after, seconds
    source_after: dict[int, int]  # expected source watermarks, seconds


def _state(
    wm: int | None, hw: dict[int, int], seen: dict[int, int], source: dict[int, int]
) -> WatermarkState:
    def ms(d: dict[int, int]) -> dict[int, int]:
        return {p: v * S for p, v in d.items()}

    return WatermarkState(None if wm is None else wm * S, ms(hw), ms(seen), ms(source))


EMPTY = WatermarkState()
RULE_CASES = [
    RuleCase(
        "a source watermark ahead of the bounded rule sets the bound: max(90 - 10, 100)",
        EMPTY, {0: 90}, {0: 100}, 100, 100, {0: 100},
    ),
    RuleCase(
        "one behind the bounded rule changes nothing: max(90 - 10, 50)",
        EMPTY, {0: 90}, {0: 50}, 100, 80, {0: 50},
    ),
    RuleCase(
        "a source watermark never moves back: 60 after 100 keeps 100",
        _state(100, {0: 90}, {0: 100}, {0: 100}), {}, {0: 60}, 110, 100, {0: 100},
    ),
    RuleCase(
        "a partition known only by its control records holds the minimum: min(90 - 10, 40)",
        EMPTY, {0: 90}, {1: 40}, 100, 40, {1: 40},
    ),
    RuleCase(
        "the minimum over partitions still rules: min(max(80, 200), 100 - 10)",
        EMPTY, {0: 90, 1: 100}, {0: 200}, 100, 90, {0: 200},
    ),
    RuleCase(
        "a control record keeps its partition active (p1 silent for 200 s otherwise)",
        _state(80, {0: 90, 1: 95}, {0: 100, 1: 100}, {}), {0: 300}, {1: 150}, 300, 150,
        {1: 150},
    ),
]  # fmt: skip


@pytest.mark.parametrize("case", RULE_CASES, ids=[c.why for c in RULE_CASES])
def test_source_watermark_rule(case: RuleCase) -> None:
    out = advance_watermark(
        case.prev,
        {p: v * S for p, v in case.batch_hw.items()},
        case.now * S,
        10 * S,  # L
        60 * S,  # idle timeout
        batch_source_watermark_ms={p: v * S for p, v in case.batch_source.items()},
    )
    assert out.state.watermark_ms == (None if case.wm is None else case.wm * S)
    assert dict(out.state.source_watermark_ms) == {p: v * S for p, v in case.source_after.items()}
    assert not any(out.idle.values())


# -- a hand-computed replay --------------------------------------------------------------------
def t(seconds: int) -> int:
    return T0 + seconds * S


def ev(event_id: str, seconds: int, amount: int) -> str:
    return H.event_line(event_id, "k", amount, t(seconds), 0)


def mark(seconds: int) -> str:
    return H.control_line(t(seconds), 0)


# W = 10 s, L = 30 s (a guessed bound), G = 0, one partition that also sends its watermark.
#
# | batch | now | lines                          | bounded rule | source | WM after |
# |-------|-----|--------------------------------|--------------|--------|----------|
# | 0     | 60  | e1 12 · e2 25 · mark 30        | 25 - 30 = -5 | 30     | 30       |
# | 1     | 70  | e3 28 (late) · e4 45 · mark 20 | 45 - 30 = 15 | 30     | 30       |
# | 2     | 90  | mark 50 · a bad mark           | 15           | 50     | 50       |
# | 3     | 90  | drain                          |              |        | none     |
#
# The source's mark 30 closes [10, 20) and [20, 30) in batch 0, where the bounded rule alone
# (WM -5) would close nothing until e.g. an event at 50 s. e3 (28 s) breaks the source's
# promise: late, in the side output (lateness 0). Mark 20 is behind: ignored (never back), and
# recorded as the source's broken promise (one regression of 10 s in batch 1).
BATCHES = [
    [H.InputFile("b0.jsonl", t(60), [ev("e1", 12, 1), ev("e2", 25, 2), mark(30)])],
    [H.InputFile("b1.jsonl", t(70), [ev("e3", 28, 4), ev("e4", 45, 8), mark(20)])],
    [H.InputFile("b2.jsonl", t(90), [mark(50), H.control_line(t(60), 0, variant=9)])],
]
PARAMS = M.Params(
    window_ms=10 * S,
    lateness_ms=30 * S,
    idle_timeout_ms=0,
    max_clock_skew_ms=300 * S,
    source_watermark_field="watermark",
)
WATERMARK_AFTER = [t(30), t(30), t(50), None]
AGGREGATES = {10: (1, 1, 0), 20: (1, 2, 0), 40: (1, 8, 2)}  # start s: (count, sum, batch)
PROGRESS = [  # (control records, quarantined, source watermark of p0 after)
    (1, 0, t(30)),
    (1, 0, t(30)),
    (1, 1, t(50)),
    (0, 0, t(50)),
]
REGRESSIONS = [  # per batch: (partition, regressed records), (partition, largest gap ms)
    (((0, 0),), ()),
    (((0, 1),), ((0, 10 * S),)),
    (((0, 0),), ()),  # mark 50 is ahead again; the bad mark is quarantined, no record
    ((), ()),  # the drain reads no line
]


def check_replay(out: H.Outputs) -> None:
    assert [p.watermark_after_ms for p in out.progress] == WATERMARK_AFTER
    got = {
        (a.window_start_ms - T0) // S: (a.event_count, a.amount_sum, a.batch_id)
        for a in out.aggregates
    }
    assert got == AGGREGATES and len(out.aggregates) == len(AGGREGATES)
    assert [(e.event_id, e.lateness_ms, e.watermark_at_arrival_ms) for e in out.late_events] == [
        ("e3", 0, t(30))
    ]
    assert [
        (p.control_records, p.quarantined_lines, dict(p.source_watermark).get(0))
        for p in out.progress
    ] == PROGRESS
    assert [(p.source_regressions, p.source_regression_ms) for p in out.progress] == REGRESSIONS
    assert [(q.reason, q.batch_id) for q in out.quarantine] == [("bad_watermark", 2)]
    assert sorted(e.event_id for e in out.events) == ["e1", "e2", "e3", "e4"]  # no control


def test_the_model_computes_the_hand_expectations() -> None:
    batches = [H.model_lines(files) for files in BATCHES]
    check_replay(H.model_outputs(M.run_model(batches, PARAMS, drain=True)))
    # without source watermarks the marks are lines without an event_id, and the bounded
    # rule alone closes nothing in batch 0
    off = M.run_model(batches, M.Params(**{**PARAMS.__dict__, "source_watermark_field": None}))
    assert off.progress[0].watermark_after_ms == t(-5)
    assert {q.reason for q in off.quarantine} == {"missing_event_id"}


def test_a_source_watermark_closes_windows_before_the_bounded_rule(
    spark, tmp_path, caplog: pytest.LogCaptureFixture
) -> None:
    warehouse = str(tmp_path / "warehouse")
    with caplog.at_level(logging.WARNING, logger="tally.stream"):
        H.run_processor(spark, warehouse, tmp_path / "input", BATCHES, PARAMS, drain=True)
    check_replay(H.read_outputs(spark, warehouse))
    # one structured line per partition and batch with regressions
    regressions = [r.getMessage() for r in caplog.records if "regression" in r.getMessage()]
    assert regressions == [
        "source watermark regression: batch=1 partition=0 records=1 largest_ms=10000 "
        "kept=2026-11-21T00:00:30.000Z"
    ]


def test_a_warehouse_from_before_source_watermarks_gains_their_columns(spark, tmp_path) -> None:
    # stream_progress as an earlier tally created it (without the two columns): the stream
    # adds them before its first append, and its old rows read null there.
    import dataclasses

    from tally import tables as T

    warehouse = str(tmp_path / "warehouse")
    new_columns = ", control_records BIGINT, partition_source_watermark MAP<INT, TIMESTAMP>"
    cut = T.STREAM_PROGRESS.ddl.index(new_columns)  # those two and every later column
    old = dataclasses.replace(T.STREAM_PROGRESS, ddl=T.STREAM_PROGRESS.ddl[:cut])
    T.ensure_table(spark, warehouse, old)
    assert "control_records" not in T.read_table(spark, warehouse, "stream_progress").columns
    H.run_processor(spark, warehouse, tmp_path / "input", BATCHES[:1], PARAMS)
    from pyspark.sql import functions as F

    progress = (
        T.read_table(spark, warehouse, "stream_progress")
        .select("control_records", F.unix_millis(F.col("partition_source_watermark")[0]))
        .collect()
    )
    assert [tuple(r) for r in progress] == [(1, t(30))]
