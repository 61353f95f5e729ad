"""Expected partitions: the watermark waits until every expected source has reported.

A hand-computed replay of the issue's three sources, through the reference model and through
BatchProcessor (Spark, Delta): a radar (partition 0, L = 100 ms), an HTTP poller (partition 1,
L = 30 s) whose first poll lands 35 s after the stream started, and a beacon (partition 2,
L = 10 s). The rule itself is table-tested in tests/test_watermark.py.
"""

from __future__ import annotations

import dataclasses

import reference_model as M
import stream_helpers as H

S = 1_000
T0 = H.T0_MS


def t(seconds: float) -> int:
    return T0 + round(seconds * S)


def ev(event_id: str, seconds: float, partition: int) -> str:
    return H.event_line(event_id, "k", 1, t(seconds), partition)


# W = 10 s, idle timeout 60 s; now = the file's mtime (arrival clock).
#
# | batch | now | lines                                  | expected 0-2: WM after | none: WM after |
# |-------|-----|----------------------------------------|------------------------|----------------|
# | 0     | 5   | radar 4.9 · beacon 1                   | none (1 unheard)       | 1 - 10 = -9    |
# | 1     | 25  | radar 24.9 · beacon 20                 | none (1 unheard)       | 20 - 10 = 10   |
# | 2     | 35  | poller 5 · poller 31 · radar 34.9 ·    | min(34.8, 1, 20) = 1   | 1 < 10: kept   |
# |       |     | beacon 30                              |                        | 10             |
# | 3     |     | drain                                  | none                   | none           |
#
# The poller's event at 5 s is 26 s behind its newest (31 s), inside its own 30 s bound. Without
# expected partitions the radar and the beacon alone close [0, 10) in batch 1 and that event is
# judged late (lateness 10 - 10 = 0 s); with them, nothing is late and [0, 10) holds all three.
BATCHES = [
    [H.InputFile("b0.jsonl", t(5), [ev("r1", 4.9, 0), ev("b1", 1, 2)])],
    [H.InputFile("b1.jsonl", t(25), [ev("r2", 24.9, 0), ev("b2", 20, 2)])],
    [
        H.InputFile(
            "b2.jsonl",
            t(35),
            [ev("p1", 5, 1), ev("p2", 31, 1), ev("r3", 34.9, 0), ev("b3", 30, 2)],
        )
    ],
]
WAITING = M.Params(
    window_ms=10 * S,
    lateness_ms=10 * S,
    idle_timeout_ms=60 * S,
    lateness_by_partition={0: 100, 1: 30 * S, 2: 10 * S},
    expected_partitions=frozenset({0, 1, 2}),
)
NOT_WAITING = dataclasses.replace(WAITING, expected_partitions=frozenset())


def check_waiting(out: H.Outputs) -> None:
    assert [p.watermark_after_ms for p in out.progress] == [None, None, t(1), None]
    assert [p.unheard for p in out.progress] == [((1, t(5)),), ((1, t(5)),), (), ()]
    assert out.late_events == []
    first = [a for a in out.aggregates if a.window_start_ms == T0]
    assert [(a.event_count, a.batch_id) for a in first] == [(3, 3)]  # closed by the drain


def check_not_waiting(out: H.Outputs) -> None:
    assert [p.watermark_after_ms for p in out.progress] == [t(-9), t(10), t(10), None]
    assert all(p.unheard == () for p in out.progress)
    assert [(e.event_id, e.lateness_ms) for e in out.late_events] == [("p1", 0)]
    first = [a for a in out.aggregates if a.window_start_ms == T0]
    assert [(a.event_count, a.batch_id) for a in first] == [(2, 1)]


def test_the_model_computes_the_hand_expectations() -> None:
    batches = [H.model_lines(files) for files in BATCHES]
    check_waiting(H.model_outputs(M.run_model(batches, WAITING, drain=True)))
    check_not_waiting(H.model_outputs(M.run_model(batches, NOT_WAITING, drain=True)))


def test_the_stream_waits_for_a_source_first_heard_late(spark, tmp_path) -> None:
    waiting, not_waiting = str(tmp_path / "waiting"), str(tmp_path / "not_waiting")
    H.run_processor(spark, waiting, tmp_path / "in-w", BATCHES, WAITING, drain=True)
    check_waiting(H.read_outputs(spark, waiting))
    H.run_processor(spark, not_waiting, tmp_path / "in-n", BATCHES, NOT_WAITING, drain=True)
    check_not_waiting(H.read_outputs(spark, not_waiting))


def test_all_means_every_partition_of_the_topic() -> None:
    from streaming.params import StreamParams
    from tally.settings import Settings

    kafka = Settings(source_kind="kafka", expected_partitions="all")
    assert StreamParams.from_settings(kafka, topic_partitions=3).expected_partitions == {0, 1, 2}
    listed = Settings(expected_partitions="0,2")
    assert StreamParams.from_settings(listed, topic_partitions=5).expected_partitions == {0, 2}
    assert StreamParams.from_settings(Settings()).expected_partitions == frozenset()
