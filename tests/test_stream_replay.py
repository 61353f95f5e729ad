"""A hand-computed replay through the REAL streaming query (file source, foreachBatch, drain).

One file per micro-batch (max_files_per_trigger = 1), arrival clock (a batch's processing time
is its file's mtime). W = 60 s, L = 10 s, G = 0, idle timeout 60 s, partition-min; times are
seconds after T0 = 2026-11-21T00:00:00Z. Every expectation below is computed by hand from
docs/semantics.md (the reference model is checked against the same numbers).

| batch | now | lines (id: partition, time, key, amount)          | WM after                 |
|-------|-----|---------------------------------------------------|--------------------------|
| 0     | 30  | a: p0 5 k 100 · b: p1 20 k 50 · garbage           | min(5, 20) - 10 = -5     |
| 1     | 90  | c: p0 90 k 7 · d: p1 75 k 9 · m1: p1 70 m 500     | min(90, 75) - 10 = 65    |
| 2     | 100 | e: p0 30 k 1000 (late) · f: p1 110 k 3 · c again  | min(90, 110) - 10 = 80   |
| 3     | 200 | g: p1 190 k 4 (p0 idle: 200 - 100 >= 60)          | 190 - 10 = 180           |
| 4     | 210 | h: p0 85 m 20 (late) · i: p1 195 k 6              | 80 < 180: stays 180      |
| 5     | 210 | drain                                             | none (drained: NULL)     |

h arrives 5 s behind its own partition's high-water mark (90 s), well within L, yet its
window [60, 120) closed when p0 was idle and p1 alone moved the watermark to 180 s: late.
"""

from __future__ import annotations

from typing import Any

import pytest
import reference_model as M
import stream_helpers as H

S = 1_000
T0 = H.T0_MS
DRAINED = None  # the drain stores no watermark: NULL, with drained = true


def t(seconds: int) -> int:
    return T0 + seconds * S


def ev(event_id: str, partition: int, seconds: int, key: str, amount: int) -> str:
    return H.event_line(event_id, key, amount, t(seconds), partition)


FILES = [
    H.InputFile(
        "arrival-0.jsonl", t(30), [ev("a", 0, 5, "k", 100), ev("b", 1, 20, "k", 50), "garbage"]
    ),
    H.InputFile(
        "arrival-1.jsonl",
        t(90),
        [ev("c", 0, 90, "k", 7), ev("d", 1, 75, "k", 9), ev("m1", 1, 70, "m", 500)],
    ),
    H.InputFile(
        "arrival-2.jsonl",
        t(100),
        [ev("e", 0, 30, "k", 1000), ev("f", 1, 110, "k", 3), ev("c", 0, 90, "k", 7)],
    ),
    H.InputFile("arrival-3.jsonl", t(200), [ev("g", 1, 190, "k", 4)]),
    H.InputFile("arrival-4.jsonl", t(210), [ev("h", 0, 85, "m", 20), ev("i", 1, 195, "k", 6)]),
]
PARAMS = M.Params(
    window_ms=60 * S,
    lateness_ms=10 * S,
    allowed_lateness_ms=0,
    idle_timeout_ms=60 * S,
    max_clock_skew_ms=300 * S,
    policy="partition-min",
)

# -- hand-computed expectations -----------------------------------------------------------
WATERMARK_AFTER = [t(-5), t(65), t(80), t(180), t(180), DRAINED]
WATERMARK_BEFORE = [None, *WATERMARK_AFTER[:-1]]
NOW = [t(30), t(90), t(100), t(200), t(210), t(210)]
IDLE = [
    {0: False, 1: False},
    {0: False, 1: False},
    {0: False, 1: False},
    {0: True, 1: False},
    {0: False, 1: False},
]
# (window start s, key): (count, sum, revision, batch, watermark at emit)
AGGREGATES = {
    (0, "k"): (2, 150, 1, 1, t(65)),  # a, b
    (60, "k"): (3, 19, 1, 3, t(180)),  # c, d, f
    (60, "m"): (1, 500, 1, 3, t(180)),  # m1 (h came too late)
    (180, "k"): (2, 10, 1, 5, DRAINED),  # g, i: closed by the drain
}
# id: (window start s, key, amount, watermark at arrival, lateness ms, delay ms, batch)
LATE = {
    "e": (0, "k", 1000, t(65), 5_000, 70_000, 2),
    "h": (60, "m", 20, t(180), 60_000, 125_000, 4),
}
STATUSES = sorted(
    [
        ("a", 0, "on_time"),
        ("b", 0, "on_time"),
        ("c", 1, "on_time"),
        ("d", 1, "on_time"),
        ("m1", 1, "on_time"),
        ("e", 2, "late"),
        ("f", 2, "on_time"),
        ("c", 2, "duplicate"),
        ("g", 3, "on_time"),
        ("h", 4, "late"),
        ("i", 4, "on_time"),
    ]
)


# per batch: (valid, on time, late, duplicate, quarantined, windows emitted, open after)
COUNTERS = [
    (2, 2, 0, 0, 1, 0, 1),  # [0,60) k open
    (3, 3, 0, 0, 0, 1, 2),  # emits [0,60) k; [60,120) k and m open
    (3, 1, 1, 1, 0, 0, 2),  # e late, c duplicate; nothing closes (WM 80)
    (1, 1, 0, 0, 0, 2, 1),  # emits [60,120) k and m; [180,240) k open
    (2, 1, 1, 0, 0, 0, 1),  # h late, i on time; WM stays 180: nothing closes
    (0, 0, 0, 0, 0, 1, 0),  # the drain emits [180,240) k
]


@pytest.fixture(scope="module")
def replay(spark, tmp_path_factory) -> dict[str, Any]:
    return run_replay(spark, tmp_path_factory.mktemp("replay"))


def run_replay(spark, root) -> dict[str, Any]:
    """The replay through `run_stream` into `root`: its summary and every table."""
    from streaming.run import run_stream
    from tally.settings import Settings

    for f in FILES:
        H.write_file(root / "input", f)
    settings = Settings(
        window=PARAMS.window_ms,
        lateness=PARAMS.lateness_ms,
        allowed_lateness=PARAMS.allowed_lateness_ms,
        idle_timeout=PARAMS.idle_timeout_ms,
        max_clock_skew=PARAMS.max_clock_skew_ms,
        watermark_policy=PARAMS.policy,
        warehouse=str(root / "warehouse"),
        input=str(root / "input"),
        max_files_per_trigger=1,
        shuffle_partitions=2,
    )
    summary = run_stream(settings, available_now=True, drain=True, clock="arrival", spark=spark)
    return {"summary": summary, "out": H.read_outputs(spark, settings.warehouse)}


def test_one_batch_per_file_and_the_watermark_per_batch(replay: dict[str, Any]) -> None:
    progress = replay["out"].progress
    assert [p.batch_id for p in progress] == list(range(6))
    assert [p.now_ms for p in progress] == NOW
    assert [p.watermark_before_ms for p in progress] == WATERMARK_BEFORE
    assert [p.watermark_after_ms for p in progress] == WATERMARK_AFTER
    assert [p.drained for p in progress] == [False] * 5 + [True]
    assert progress[5].watermark_after_ms is None and progress[5].drained
    assert [dict(p.idle) for p in progress[:5]] == IDLE
    assert dict(progress[4].high_water) == {0: t(90), 1: t(195)}
    assert [p.input_lines for p in progress] == [3, 3, 3, 1, 2, 0]
    assert "(drained)" in replay["summary"]
    assert "9999" not in replay["summary"]


def test_progress_counters_per_batch(replay: dict[str, Any]) -> None:
    """Per batch: (valid, on time, late, duplicate, quarantined, emitted, open windows after)."""
    progress = replay["out"].progress
    got = [
        (
            p.valid_events,
            p.on_time_events,
            p.late_events,
            p.duplicate_events,
            p.quarantined_lines,
            p.windows_emitted,
            p.open_windows,
        )
        for p in progress
    ]
    assert got == COUNTERS


def test_window_by_window_output(replay: dict[str, Any]) -> None:
    got = {
        ((a.window_start_ms - T0) // S, a.key): (
            a.event_count,
            a.amount_sum,
            a.revision,
            a.batch_id,
            a.watermark_at_emit_ms,
        )
        for a in replay["out"].aggregates
    }
    assert len(replay["out"].aggregates) == len(got)  # one revision per window here
    assert got == AGGREGATES
    assert all(a.window_end_ms - a.window_start_ms == 60 * S for a in replay["out"].aggregates)
    emit_times = {a.batch_id: a.emit_time_ms for a in replay["out"].aggregates}
    assert emit_times == {1: t(90), 3: t(200), 5: t(210)}


def test_exact_set_of_late_events(replay: dict[str, Any]) -> None:
    got = {
        e.event_id: (
            (e.window_start_ms - T0) // S,
            e.key,
            e.amount,
            e.watermark_at_arrival_ms,
            e.lateness_ms,
            e.arrival_delay_ms,
            e.batch_id,
        )
        for e in replay["out"].late_events
    }
    assert len(replay["out"].late_events) == len(got)
    assert got == LATE
    assert {e.reason for e in replay["out"].late_events} == {"window_closed"}


def test_late_although_within_L_of_its_partition(replay: dict[str, Any]) -> None:
    """h: p0's high-water mark was 90 s, h is at 85 s (5 s < L behind), yet late."""
    [h] = [e for e in replay["out"].late_events if e.event_id == "h"]
    p0_high_water_before = dict(replay["out"].progress[3].high_water)[0]
    assert p0_high_water_before - h.event_time_ms < PARAMS.lateness_ms
    assert h.window_end_ms <= h.watermark_at_arrival_ms


def test_statuses_quarantine_and_identity(replay: dict[str, Any]) -> None:
    out = replay["out"]
    assert sorted((e.event_id, e.batch_id, e.arrival_status) for e in out.events) == STATUSES
    assert [(q.raw_line, q.reason, q.source_file, q.batch_id) for q in out.quarantine] == [
        ("garbage", "invalid_json", "arrival-0.jsonl", 0)
    ]
    # The identity for the two windows with late events.
    assert AGGREGATES[(0, "k")][1] + LATE["e"][2] == 100 + 50 + 1000
    counted = [e for e in out.events if e.arrival_status != "duplicate"]
    for start, key in ((0, "k"), (60, "m")):
        logged = sum(
            e.amount
            for e in counted
            if e.key == key and t(start) <= e.event_time_ms < t(start + 60)
        )
        late = sum(
            e.amount for e in out.late_events if e.key == key and e.window_start_ms == t(start)
        )
        assert logged == AGGREGATES[(start, key)][1] + late


def test_the_model_computes_the_same_expectations() -> None:
    model = M.run_model([H.model_lines([f]) for f in FILES], PARAMS, drain=True)
    assert [p.watermark_after_ms for p in model.progress] == WATERMARK_AFTER
    assert [p.now_ms for p in model.progress] == NOW
    assert {
        ((a.window_start_ms - T0) // S, a.key): (
            a.event_count,
            a.amount_sum,
            a.revision,
            a.batch_id,
            a.watermark_at_emit_ms,
        )
        for a in model.aggregates
    } == AGGREGATES
    assert {
        e.event_id: (
            (e.window_start_ms - T0) // S,
            e.key,
            e.amount,
            e.watermark_at_arrival_ms,
            e.lateness_ms,
            e.arrival_delay_ms,
            e.batch_id,
        )
        for e in model.late_events
    } == LATE
    assert sorted((e.event_id, e.batch_id, e.arrival_status) for e in model.events) == STATUSES
    assert [
        (
            p.valid_events,
            p.on_time_events,
            p.late_events,
            p.duplicate_events,
            p.quarantined_lines,
            p.windows_emitted,
            p.open_windows,
        )
        for p in model.progress
    ] == COUNTERS


def test_a_batch_shuffled_into_more_partitions_gives_the_same_tables(
    spark, tmp_path_factory, replay: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch too big for Spark's shuffle partitions is shuffled into more (one per
    `LINES_PER_SHUFFLE_PARTITION` lines, so that each task's sort stays small): here one per
    line, 3 partitions against the plain run's 1; every table must be the same as its."""
    import streaming.logic as logic

    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"
    assert logic.event_partitions(3, 2) == 1  # the plain run: a small batch is one task
    monkeypatch.setattr(logic, "LINES_PER_SHUFFLE_PARTITION", 1)
    assert logic.event_partitions(3, 2) == 3
    again = run_replay(spark, tmp_path_factory.mktemp("replay_partitions"))["out"]
    plain = replay["out"]
    for table in ("events", "quarantine", "late_events", "aggregates", "progress"):
        assert sorted(getattr(again, table), key=repr) == sorted(getattr(plain, table), key=repr)
    assert again.events and again.late_events  # not vacuous


@pytest.mark.parametrize(
    ("lines", "shuffle_partitions", "expected"),
    [
        (0, 4, 1),  # an empty batch: one task
        (20_000, 4, 1),  # the fixed-cost benchmark's batches: tasks, not rows, cost there
        (100_001, 4, 2),  # one line over a task's minimum: a second task
        (200_000, 4, 2),  # the throughput benchmark's batches: one task per core
        (400_000, 4, 4),  # four tasks' worth: Spark's partitions
        (2_000_000, 4, 4),  # still Spark's partitions (each below the upper bound)
        (2_000_001, 4, 5),  # one line over 4 partitions' upper bound: a fifth partition
        (17_600_000, 4, 36),  # the 2 GB file as one batch
        (17_600_000, 64, 64),  # a user who asked for more partitions keeps them
    ],
)
def test_event_partitions(lines: int, shuffle_partitions: int, expected: int) -> None:
    from streaming.logic import LINES_PER_SHUFFLE_PARTITION, LINES_PER_TASK_MIN, event_partitions

    # the cases above are computed with these
    assert (LINES_PER_SHUFFLE_PARTITION, LINES_PER_TASK_MIN) == (500_000, 100_000)
    assert event_partitions(lines, shuffle_partitions) == expected


@pytest.mark.parametrize(
    ("lines", "shuffle_partitions", "cores", "expected"),
    [
        (20_000, 4, 2, 1),  # a small batch stays one task
        (100_001, 4, 2, 2),  # one task per core
        (201_400, 4, 1, 3),  # the throughput benchmark's batches (duplicates and bad lines
        (201_400, 4, 2, 2),  # included): 3 tasks were a wave and a lone third task on 2 cores
        (201_400, 4, 4, 3),  # fewer tasks than cores: as many as the lines ask for
        (400_000, 4, 2, 4),  # two whole waves
        (500_000, 8, 2, 4),  # 5 -> 4: whole waves
        (2_000_001, 4, 2, 5),  # the upper bound comes first
    ],
)
def test_event_partitions_in_whole_waves(
    lines: int, shuffle_partitions: int, cores: int, expected: int
) -> None:
    from streaming.logic import event_partitions

    assert event_partitions(lines, shuffle_partitions, cores) == expected
