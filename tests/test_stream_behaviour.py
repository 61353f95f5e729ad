"""The speed layer's behaviour, batch by batch, against hand-computed expectations.

`streaming.job.BatchProcessor` runs directly over one JSONL file per micro-batch (read the way
the file source reads it) with the arrival clock, so each batch's processing time is its
file's mtime. Two inputs, three runs, shared by all tests (module-scoped fixtures):

* MAIN (partition-min, W = 60 s, L = 10 s, G = 30 s, dedup horizon 60 s, idle 60 s, skew
  120 s): an idle
  partition that rejoins with old data, an allowed-late revision and eviction, late events,
  duplicates of every kind, every malformed kind, a clock running ahead; then a drain.
* LAG, run under partition-min and under global-max: partition 1 lags partition 0.

Times below are seconds after 2026-11-20T00:00:00Z; every event has key `k` unless stated.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from stream_helpers import (
    collect,
    collect_table,
    identity_check,
    iso_ms,
)

from streaming.job import BatchProcessor
from streaming.params import StreamParams
from streaming.state import StateStore
from tally.events import text_lines, text_reader

S = 1000  # ms per second
W = 60 * S
T0_MS = iso_ms("2026-11-20T00:00:00Z")  # times below are seconds after it


def at(seconds: float) -> int:
    return T0_MS + int(seconds * S)


def iso(seconds: float) -> str:
    moment = datetime.fromtimestamp(at(seconds) / 1000, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at(seconds) % 1000:03d}Z"


def event(
    eid: str,
    seconds: float,
    amount: int,
    partition: int | None,
    key: str = "k",
    **extra: Any,
) -> str:
    obj: dict[str, Any] = {
        "event_id": eid,
        "key": key,
        "amount": amount,
        "event_time": iso(seconds),
    }
    if partition is not None:
        obj["partition"] = partition
    obj.update(extra)
    return json.dumps(obj, separators=(",", ":"))


_DROP = object()


def line_with(**fields: Any) -> str:
    base: dict[str, Any] = {"event_id": "bad", "key": "k", "amount": 1, "event_time": iso(15)}
    base.update(fields)
    return json.dumps({k: v for k, v in base.items() if v is not _DROP}, separators=(",", ":"))


# Every quarantine reason of docs/semantics.md, most in more than one form.
MALFORMED: list[tuple[str, str]] = [
    ("", "empty_line"),
    ("   ", "empty_line"),
    ('{"event_id":"x1","key":"k","amount":1', "invalid_json"),
    ("[1,2]", "invalid_json"),
    ('"event"', "invalid_json"),
    ("null", "invalid_json"),
    (line_with(event_id=_DROP), "missing_event_id"),
    (line_with(event_id="  "), "missing_event_id"),
    ('{"amount":5}', "missing_event_id"),  # first matching reason wins
    (line_with(event_id="x2", key=_DROP), "missing_key"),
    (line_with(event_id="x3", key=""), "missing_key"),
    (line_with(event_id="x4", amount=_DROP), "missing_amount"),
    (line_with(event_id="x5").replace('"amount":1', '"amount":12.5'), "amount_not_integer"),
    (line_with(event_id="x6").replace('"amount":1', '"amount":1e3'), "amount_not_integer"),
    (line_with(event_id="x7", amount="125"), "amount_not_integer"),
    (
        line_with(event_id="x8").replace('"amount":1', '"amount":9223372036854775808'),
        "amount_not_integer",
    ),
    (line_with(event_id="x9", event_time=_DROP), "missing_event_time"),
    (line_with(event_id="x10", event_time="2026-11-20T00:00:05"), "bad_event_time"),
    (line_with(event_id="x11", event_time="yesterday"), "bad_event_time"),
    (line_with(event_id="x12", event_time="2026-02-30T00:00:00Z"), "bad_event_time"),
    (line_with(event_id="x13", partition="3"), "partition_not_integer"),
    (line_with(event_id="x14", partition=1.5), "partition_not_integer"),
    (line_with(event_id="x15", currency="usd"), "bad_currency"),  # the exact code only
    (line_with(event_id="x16", currency=840), "bad_currency"),  # ISO's number is no code
]

A = event("a", 5, 100, None, region="eu")  # no partition: partition 0; an unknown field
B = json.dumps(  # epoch-millisecond event time
    {"event_id": "b", "key": "k", "amount": 50, "event_time": at(20), "partition": 1},
    separators=(",", ":"),
)
C = event("c", 90, 7, 0, currency="JPY")
E = event("e", 30, 1000, 0)
LATE_I = event("i", 100, 20, 0, currency="BHD")
D = (  # 05:31:15+05:30 is 00:01:15Z, t = 75
    '{"event_id":"d","key":"k","amount":9,"event_time":"2026-11-20T05:31:15+05:30","partition":1}'
)
# (now, lines) per batch.
MAIN_BATCHES: list[tuple[int, list[str]]] = [
    # B0: a and n on p0, b on p1, every malformed kind, then a again (within-batch duplicate).
    (30, [A, event("n", 10, 1, 0, key="q"), B, *[m for m, _ in MALFORMED], A]),
    # B1: b again (duplicate across batches, its window still open); d in +05:30.
    (
        90,
        [
            C,
            B,
            D,
        ],
    ),
    # B2: e is allowed-late (end 60 <= WM 65 < 60 + G); e again in the same batch.
    (100, [E, event("f", 110, 3, 1), E]),
    # B3: p0 silent for 100 s >= idle timeout: the watermark follows p1 alone.
    (200, [event("g", 190, 4, 1)]),
    # B4: p0 rejoins with old data: i is late; h beyond G as well; no regression.
    (260, [LATE_I, event("h", 50, 500, 1)]),
    # B5: a replay of the late event i, and of c (its window evicted, its id remembered for
    # the 60 s dedup horizon): both duplicates.
    (330, [LATE_I, C]),
    # B6: kk is 620 s ahead of now (> skew 120 s): counted, flagged, clipped to now + 120 s.
    (400, [event("m", 395, 11, 1), event("kk", 1020, 77, 1)]),
]
MAIN_PARAMS = dict(
    window_ms=W,
    lateness_ms=10 * S,
    allowed_lateness_ms=30 * S,
    idle_timeout_ms=60 * S,
    max_clock_skew_ms=120 * S,
    watermark_policy="partition-min",
    arrival_clock=True,
    dedup_horizon_ms=60 * S,
)

LAG_BATCHES: list[tuple[int, list[str]]] = [
    (80, [event("x1", 75, 1, 0), event("y1", 5, 10, 1)]),
    (140, [event("x2", 130, 2, 0), event("y2", 50, 20, 1)]),
    (200, [event("x3", 190, 3, 0), event("y3", 110, 30, 1)]),
]
LAG_PARAMS = dict(
    window_ms=W,
    lateness_ms=10 * S,
    allowed_lateness_ms=0,
    idle_timeout_ms=60 * S,
    max_clock_skew_ms=300 * S,
    arrival_clock=True,
)


STATE_BATCHES = (2, 3, 6, 7)  # batches whose window/dedup state the tests read back


@dataclass
class Run:
    warehouse: str
    progress: dict[int, dict[str, Any]]
    events: list[dict[str, Any]]
    quarantine: list[dict[str, Any]]
    late: list[dict[str, Any]]
    aggregates: list[dict[str, Any]]
    dedup_ids: dict[int, set[str]]  # batch -> remembered ids in the state files it wrote
    open_windows: dict[int, list[tuple[int, str, str, int, int, int]]]  # batch -> open windows
    identity: list[dict[str, Any]]


def read_batch(spark: SparkSession, path: Path) -> DataFrame:
    """The lines of one file as the file source gives them to a micro-batch."""
    return text_reader(spark.read).load(str(path)).transform(text_lines)


def read_state(
    store: StateStore,
    batch_id: int,
    dedup_ids: dict[int, set[str]],
    open_windows: dict[int, list[tuple[int, str, str, int, int, int]]],
) -> None:
    state, dedup = store.read(batch_id)
    dedup_ids[batch_id] = {r["event_id"] for r in dedup.select("event_id").collect()}
    open_windows[batch_id] = sorted(
        (
            (r["window_start"] - T0_MS) // S,
            r["key"],
            r["currency"],
            r["event_count"],
            r["amount_sum"],
            r["emitted_revision"],
        )
        for r in collect(state)
    )


def run(
    spark: SparkSession,
    root: Path,
    batches: list[tuple[int, list[str]]],
    params: dict[str, Any],
    drain: bool,
    state_batches: tuple[int, ...] = (),
) -> Run:
    warehouse = str(root / "warehouse")
    with BatchProcessor(spark, StreamParams(warehouse=warehouse, **params)) as proc:
        proc.set_app_id("t")
        dedup_ids: dict[int, set[str]] = {}
        open_windows: dict[int, list[tuple[int, str, str, int, int, int]]] = {}
        inputs = root / "in"
        inputs.mkdir(parents=True)
        for batch_id, (now, lines) in enumerate(batches):
            path = inputs / f"b{batch_id:03d}.jsonl"
            path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
            ns = at(now) * 1_000_000
            os.utime(path, ns=(ns, ns))
            proc.process(read_batch(spark, path), batch_id)
            if batch_id in state_batches:  # read back the state files the batch wrote
                read_state(proc.store, batch_id, dedup_ids, open_windows)
        if drain:
            assert proc.drain()
            drain_id = len(batches)
            if drain_id in state_batches:
                read_state(proc.store, drain_id, dedup_ids, open_windows)
    progress = {r["batch_id"]: r for r in collect_table(spark, warehouse, "stream_progress")}
    return Run(
        warehouse=warehouse,
        progress=progress,
        events=collect_table(spark, warehouse, "events"),
        quarantine=collect_table(spark, warehouse, "quarantine"),
        late=collect_table(spark, warehouse, "late_events"),
        aggregates=collect_table(spark, warehouse, "stream_aggregates"),
        dedup_ids=dedup_ids,
        open_windows=open_windows,
        identity=collect(identity_check(spark, warehouse, W)) if drain else [],
    )


@pytest.fixture(scope="module")
def main_run(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run(
        spark,
        tmp_path_factory.mktemp("main"),
        MAIN_BATCHES,
        MAIN_PARAMS,
        drain=True,
        state_batches=STATE_BATCHES,
    )


@pytest.fixture(scope="module")
def lag_runs(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    return {
        policy: run(
            spark,
            tmp_path_factory.mktemp(policy),
            LAG_BATCHES,
            {**LAG_PARAMS, "watermark_policy": policy},
            drain=False,
        )
        for policy in ("partition-min", "global-max")
    }


def wm(run_: Run, batch_id: int) -> tuple[int | None, int | None]:
    """(watermark_before, watermark_after) of a batch, in seconds after T0."""
    row = run_.progress[batch_id]

    def s(ms: int | None) -> int | None:
        return None if ms is None else (ms - T0_MS) // S

    return s(row["watermark_before"]), s(row["watermark_after"])


def aggregates(run_: Run) -> list[tuple[int, int, str, str, int, int, int]]:
    """(batch, window start s, key, currency, count, sum, revision), in emission order."""
    return sorted(
        (
            r["batch_id"],
            (r["window_start"] - T0_MS) // S,
            r["key"],
            r["currency"],
            r["event_count"],
            r["amount_sum"],
            r["revision"],
        )
        for r in run_.aggregates
    )


def statuses(run_: Run) -> list[tuple[int, str, int, str]]:
    return sorted(
        (r["batch_id"], r["event_id"], r["source_line"], r["arrival_status"]) for r in run_.events
    )


# --- MAIN: classification, windows, watermark ----------------------------------------------


def test_every_event_is_logged_with_its_status(main_run: Run) -> None:
    last = len(MAIN_BATCHES[0][1])
    assert statuses(main_run) == sorted(
        [
            (0, "a", 1, "on_time"),
            (0, "n", 2, "on_time"),
            (0, "b", 3, "on_time"),
            (0, "a", last, "duplicate"),  # within the batch, later in arrival order
            (1, "c", 1, "on_time"),
            (1, "b", 2, "duplicate"),  # across batches (dedup state)
            (1, "d", 3, "on_time"),
            (2, "e", 1, "allowed_late"),
            (2, "f", 2, "on_time"),
            (2, "e", 3, "duplicate"),
            (3, "g", 1, "on_time"),
            (4, "i", 1, "late"),
            (4, "h", 2, "late"),
            (5, "i", 1, "duplicate"),  # replay of a late event: not a second late event
            (5, "c", 2, "duplicate"),  # window evicted, id still within the dedup horizon
            (6, "m", 1, "on_time"),
            (6, "kk", 2, "on_time"),
        ]
    )


def test_contract_variants_of_valid_events(main_run: Run) -> None:
    first = {r["event_id"]: r for r in main_run.events if r["arrival_status"] != "duplicate"}
    assert first["a"]["partition"] == 0  # missing partition means 0
    assert first["a"]["extra"] == {"region": "eu"}
    # the event's currency, or the default (USD) for one naming none; never in `extra`
    assert (first["a"]["currency"], first["c"]["currency"], first["i"]["currency"]) == (
        "USD",
        "JPY",
        "BHD",
    )
    assert not first["c"]["extra"]
    assert first["b"]["event_time"] == at(20)  # epoch milliseconds
    assert first["d"]["event_time"] == at(75)  # +05:30 offset
    assert all(r["source_file"] == f"b{r['batch_id']:03d}.jsonl" for r in main_run.events)
    assert {r["ingest_time"] for r in main_run.events if r["batch_id"] == 4} == {at(260)}


def test_watermark_per_batch(main_run: Run) -> None:
    assert [wm(main_run, b) for b in range(7)] == [
        (None, 0),  # min(p0 10, p1 20) - 10
        (0, 65),  # min(90, 75) - 10
        (65, 80),  # min(90, 110) - 10
        (80, 180),  # p0 idle (200 - 100 >= 60): p1 alone, 190 - 10
        (180, 180),  # p0 back at 100: candidate 90 is below 180, ignored
        (180, 180),  # p1 idle, p0 still at 100
        (180, 510),  # p1 clipped to now + skew = 520
    ]
    drain = main_run.progress[7]
    assert drain["watermark_after"] is None and drain["drained"] is True
    assert drain["watermark_before"] == at(510)
    assert drain["watermark_lag_ms"] is None
    assert all(not main_run.progress[b]["drained"] for b in range(7))


def test_idle_partition_is_excluded_then_rejoins(main_run: Run) -> None:
    idle = {b: main_run.progress[b]["partition_idle"] for b in range(7)}
    assert idle[2] == {0: False, 1: False}
    assert idle[3] == {0: True, 1: False}  # silent since now=100, now=200
    assert idle[4] == {0: False, 1: False}  # p0 sent again
    assert idle[5] == {0: False, 1: True}
    hw = {
        b: {p: (ms - T0_MS) // S for p, ms in main_run.progress[b]["partition_high_water"].items()}
        for b in range(7)
    }
    assert hw[3] == {0: 90, 1: 190}
    assert hw[4] == {0: 100, 1: 190}  # rejoined with old data: late, and no regression
    last_seen = main_run.progress[4]["partition_last_seen"]
    assert last_seen == {0: at(260), 1: at(260)}
    late = {r["event_id"]: r for r in main_run.late}
    assert late["i"]["partition"] == 0


def test_clock_skewed_event(main_run: Run) -> None:
    row = main_run.progress[6]
    assert row["processing_time"] == at(400)
    assert row["clock_skewed_events"] == 1
    assert row["partition_high_water"][1] == at(400 + 120)  # not 1020
    assert row["watermark_after"] == at(400 + 120 - 10)  # not 1010
    skewed = {(r["event_id"], r["batch_id"]) for r in main_run.events if r["clock_skewed"]}
    assert skewed == {("kk", 6)}
    assert all(main_run.progress[b]["clock_skewed_events"] == 0 for b in range(6))
    # counted in its own window, which only the drain closes
    assert (7, 1020, "k", "USD", 1, 77, 1) in aggregates(main_run)


def test_emissions_revisions_and_eviction(main_run: Run) -> None:
    assert aggregates(main_run) == [
        (1, 0, "k", "USD", 2, 150, 1),  # a + b
        (1, 0, "q", "USD", 1, 1, 1),
        (2, 0, "k", "USD", 3, 1150, 2),  # e allowed-late: revision 2; q unchanged
        (3, 60, "k", "JPY", 1, 7, 1),  # c: a window of its own, never added to dollars
        (3, 60, "k", "USD", 2, 12, 1),  # d + f
        (6, 180, "k", "USD", 1, 4, 1),
        (6, 360, "k", "USD", 1, 11, 1),
        (7, 1020, "k", "USD", 1, 77, 1),  # drain
    ]
    rows = {
        (r["batch_id"], (r["window_start"] - T0_MS) // S, r["key"]): r for r in main_run.aggregates
    }
    assert rows[(2, 0, "k")]["emit_time"] == at(100)
    assert rows[(2, 0, "k")]["watermark_at_emit"] == at(80)
    assert rows[(2, 0, "k")]["window_end"] == at(60)
    assert rows[(7, 1020, "k")]["watermark_at_emit"] is None  # closed by the drain
    assert all(r["watermark_at_emit"] is not None for r in main_run.aggregates if r["batch_id"] < 7)
    # [0,60) stays revisable until end + G = 90 <= WM (batch 3), [60,120) until 150 <= 180.
    assert main_run.open_windows[2] == [
        (0, "k", "USD", 3, 1150, 2),
        (0, "q", "USD", 1, 1, 1),
        (60, "k", "JPY", 1, 7, 0),
        (60, "k", "USD", 2, 12, 0),
    ]
    assert main_run.open_windows[3] == [(180, "k", "USD", 1, 4, 0)]
    assert main_run.open_windows[6] == [(1020, "k", "USD", 1, 77, 0)]
    assert main_run.open_windows[7] == []
    assert [main_run.progress[b]["open_windows"] for b in range(8)] == [2, 4, 4, 1, 1, 1, 1, 0]


def test_dedup_state_is_bounded_by_the_watermark(main_run: Run) -> None:
    # An id is remembered while window_end + G + horizon (30 s + 60 s) > WM after the batch.
    assert main_run.dedup_ids[2] == {"a", "n", "b", "c", "d", "e", "f"}
    # WM 180: [0,60) forgotten (60 + 90 <= 180); [60,120) kept until 210 (c, d, f).
    assert main_run.dedup_ids[3] == {"c", "d", "f", "g"}
    assert main_run.dedup_ids[6] == {"kk"}
    assert main_run.dedup_ids[7] == set()


def test_late_events_side_output(main_run: Run) -> None:
    late = sorted(main_run.late, key=lambda r: r["event_id"])
    got = [
        (
            r["event_id"],
            r["batch_id"],
            r["amount"],
            (r["window_start"] - T0_MS) // S,
            (r["window_end"] - T0_MS) // S,
            r["watermark_at_arrival"],
            r["lateness_ms"],
            r["arrival_delay_ms"],
            r["reason"],
        )
        for r in late
    ]
    assert got == [
        ("h", 4, 500, 0, 60, at(180), 120 * S, 210 * S, "beyond_allowed_lateness"),
        ("i", 4, 20, 60, 120, at(180), 60 * S, 160 * S, "beyond_allowed_lateness"),
    ]
    assert [main_run.progress[b]["late_events"] for b in range(8)] == [0, 0, 0, 0, 2, 0, 0, 0]
    assert [r["currency"] for r in late] == ["USD", "BHD"]  # the event's, carried


def test_quarantine_reasons_and_counts(main_run: Run) -> None:
    got = sorted((r["source_line"], r["raw_line"], r["reason"]) for r in main_run.quarantine)
    assert got == [(4 + n, line, reason) for n, (line, reason) in enumerate(MALFORMED)]
    assert {r["batch_id"] for r in main_run.quarantine} == {0}


def test_input_equals_valid_plus_quarantined_per_batch(main_run: Run) -> None:
    expected = {
        # batch: (input, valid, on_time, allowed_late, late, duplicate, quarantined)
        0: (28, 4, 3, 0, 0, 1, 24),
        1: (3, 3, 2, 0, 0, 1, 0),
        2: (3, 3, 1, 1, 0, 1, 0),
        3: (1, 1, 1, 0, 0, 0, 0),
        4: (2, 2, 0, 0, 2, 0, 0),
        5: (2, 2, 0, 0, 0, 2, 0),
        6: (2, 2, 2, 0, 0, 0, 0),
        7: (0, 0, 0, 0, 0, 0, 0),
    }
    names = (
        "input_lines",
        "valid_events",
        "on_time_events",
        "allowed_late_events",
        "late_events",
        "duplicate_events",
        "quarantined_lines",
    )
    got = {b: tuple(row[n] for n in names) for b, row in main_run.progress.items()}
    assert got == expected
    for b, row in main_run.progress.items():
        logged = sum(r["batch_id"] == b for r in main_run.events)
        quarantined = sum(r["batch_id"] == b for r in main_run.quarantine)
        assert row["input_lines"] == logged + quarantined == row["valid_events"] + quarantined
    assert [main_run.progress[b]["processing_time"] for b in range(8)] == [
        at(n) for n in (30, 90, 100, 200, 260, 330, 400, 400)
    ]


def test_windows_emitted_counts_the_rows_the_batch_wrote(main_run: Run) -> None:
    written = Counter(r["batch_id"] for r in main_run.aggregates)
    reported = {b: row["windows_emitted"] for b, row in main_run.progress.items()}
    assert reported == {b: written.get(b, 0) for b in range(8)}


def test_accounting_identity_after_drain(main_run: Run) -> None:
    checked = {
        ((r["window_start"] - T0_MS) // S, r["key"], r["currency"]): r for r in main_run.identity
    }
    usd = {(0, "k"), (0, "q"), (60, "k"), (180, "k"), (360, "k"), (1020, "k")}
    others = {(60, "k", "JPY"), (60, "k", "BHD")}  # c, and the late i: windows of their own
    assert set(checked) == {(*w, "USD") for w in usd} | others
    assert [k for k, r in checked.items() if not r["ok"]] == []
    # [0,60): a, b, e, h = 1650 = stream 1150 (rev 2) + late 500
    assert (checked[(0, "k", "USD")]["ev_sum"], checked[(0, "k", "USD")]["late_sum"]) == (1650, 500)
    # [60,120): d + f in dollars, c in yen, the late i in dinars: never one sum
    sums = {
        c: (checked[(60, "k", c)]["ev_sum"], checked[(60, "k", c)]["late_sum"])
        for c in ("USD", "JPY", "BHD")
    }
    assert sums == {"USD": (12, 0), "JPY": (7, 0), "BHD": (20, 20)}


# --- beyond the dedup horizon ----------------------------------------------------------------


@pytest.fixture(scope="module")
def no_horizon_run(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """MAIN's input again with a dedup horizon of 0: ids are forgotten as soon as their
    window stops changing."""
    return run(
        spark,
        tmp_path_factory.mktemp("no_horizon"),
        MAIN_BATCHES,
        {**MAIN_PARAMS, "dedup_horizon_ms": 0},
        drain=True,
    )


def test_beyond_the_dedup_horizon_a_replay_is_late_and_the_books_still_balance(
    main_run: Run, no_horizon_run: Run
) -> None:
    # B5 replays i (late in B4) and c (counted on time in B1); both ids were forgotten at WM
    # 180 (window end 120 + G 30 <= 180): the stream cannot tell them from new late events.
    changed = sorted(set(statuses(no_horizon_run)) - set(statuses(main_run)))
    assert changed == [(5, "c", 2, "late"), (5, "i", 1, "late")]
    late = Counter((r["event_id"], r["batch_id"]) for r in no_horizon_run.late)
    assert late == Counter({("i", 4): 1, ("h", 4): 1, ("i", 5): 1, ("c", 5): 1})
    # Everything else is as with the horizon: the same windows, the same totals.
    assert aggregates(no_horizon_run) == aggregates(main_run)
    # The nightly counts an event once (first arrival) and explains a gap only with a late
    # row that is its id's first arrival: the two repeats change nothing, no residual.
    checked = {
        ((r["window_start"] - T0_MS) // S, r["currency"]): r
        for r in no_horizon_run.identity
        if r["key"] == "k"
    }
    assert [k for k, r in checked.items() if not r["ok"]] == []
    assert (checked[(60, "JPY")]["ev_sum"], checked[(60, "JPY")]["late_sum"]) == (7, 0)
    assert (checked[(60, "BHD")]["ev_sum"], checked[(60, "BHD")]["late_sum"]) == (20, 20)


# --- LAG: a lagging partition under both policies ------------------------------------------


def test_lagging_partition_holds_partition_min_back(lag_runs: dict[str, Run]) -> None:
    r = lag_runs["partition-min"]
    assert [wm(r, b) for b in range(3)] == [(None, -5), (-5, 40), (40, 100)]
    assert {s for *_, s in statuses(r)} == {"on_time"}
    assert r.late == []
    assert aggregates(r) == [(2, 0, "k", "USD", 2, 30, 1)]  # y1 + y2, once p1 caught up
    spread = [r.progress[b]["partition_spread_ms"] for b in range(3)]
    assert spread == [70 * S, 80 * S, 80 * S]


def test_global_max_marks_the_lagging_partition_late(lag_runs: dict[str, Run]) -> None:
    r = lag_runs["global-max"]
    assert [wm(r, b) for b in range(3)] == [(None, 65), (65, 120), (120, 180)]
    assert [(b, e, s) for b, e, _, s in statuses(r) if s != "on_time"] == [
        (1, "y2", "late"),
        (2, "y3", "late"),
    ]
    got = sorted(
        (x["event_id"], x["watermark_at_arrival"], x["lateness_ms"], x["reason"]) for x in r.late
    )
    assert got == [
        ("y2", at(65), 5 * S, "window_closed"),
        ("y3", at(120), 0, "window_closed"),
    ]
    assert aggregates(r) == [
        (0, 0, "k", "USD", 1, 10, 1),
        (1, 60, "k", "USD", 1, 1, 1),
        (2, 120, "k", "USD", 1, 2, 1),
    ]


def test_same_input_same_high_water_under_both_policies(lag_runs: dict[str, Run]) -> None:
    a, b = lag_runs["partition-min"], lag_runs["global-max"]
    for batch in range(3):
        assert (
            a.progress[batch]["partition_high_water"] == b.progress[batch]["partition_high_water"]
        )
        assert a.progress[batch]["input_lines"] == b.progress[batch]["input_lines"] == 2
    # the same events are logged; only their classification differs
    assert [x[:3] for x in statuses(a)] == [x[:3] for x in statuses(b)]
