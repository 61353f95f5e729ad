"""`tally stream --source kafka` against a real broker (scripts/kafka.sh): the Kafka partition is
the watermark partition, records keep their (topic, partition, offset, timestamp), bad records
are quarantined with their reason, and the same records give the same tables as files.

The Spark-free rules (`KafkaSpec`, settings) are table-tested first.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import reference_model as M
import stream_helpers as H
from kafka_broker import Broker

from streaming.source import KafkaSpec
from tally.settings import Settings, SettingsError

S = 1_000
T0 = H.T0_MS


# -- pure rules ------------------------------------------------------------------------------
def test_reader_options_pass_client_options_through_and_keep_data_loss_fatal() -> None:
    spec = KafkaSpec(
        bootstrap="b:9092",
        topic="t",
        starting_offsets="earliest",
        max_records_per_trigger=5,
        max_record_bytes=10,
        client_options={"security.protocol": "SASL_SSL", "bootstrap.servers": "spoofed:1"},
    )
    options = spec.reader_options()
    assert options["kafka.security.protocol"] == "SASL_SSL"  # security from the environment
    assert options["kafka.bootstrap.servers"] == "b:9092"  # the setting wins over the env
    assert options["subscribe"] == "t"
    assert options["maxOffsetsPerTrigger"] == "5"
    assert options["failOnDataLoss"] == "true"


class BadSetting(NamedTuple):
    why: str
    overrides: dict[str, Any]
    message: str


BAD_SETTINGS = [
    BadSetting("an unknown source", {"source_kind": "pulsar"}, "source_kind: expected one of"),
    BadSetting(
        "offsets are earliest or latest",
        {"kafka_starting_offsets": "newest"},
        "kafka_starting_offsets: expected one of earliest, latest",
    ),
    BadSetting("no empty batches", {"max_records_per_trigger": 0}, "max_records_per_trigger"),
    BadSetting("a record has bytes", {"max_record_bytes": -1}, "max_record_bytes: must be"),
]


@pytest.mark.parametrize("case", BAD_SETTINGS, ids=lambda c: c.why)
def test_bad_kafka_settings_stop_before_anything_starts(case: BadSetting) -> None:
    with pytest.raises(SettingsError, match=case.message):
        Settings(**case.overrides)


# -- against the broker (the session's, tests/conftest.py) -------------------------------------
class Record(NamedTuple):
    partition: int
    value: bytes | None
    timestamp_ms: int


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)]
    )
    futures[topic].result(timeout=60)


def add_partitions(bootstrap: str, topic: str, total: int) -> None:
    from confluent_kafka.admin import AdminClient, NewPartitions

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(topic, total)])[topic].result(timeout=60)


def send(bootstrap: str, topic: str, records: Sequence[Record]) -> list[tuple[int, int]]:
    """Publish `records` in order; returns each one's (partition, offset)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    placed: dict[int, tuple[int, int]] = {}

    def delivered_to(index: int) -> Any:
        def delivered(err: Any, msg: Any) -> None:
            assert err is None, err
            placed[index] = (msg.partition(), msg.offset())

        return delivered

    for i, r in enumerate(records):
        producer.produce(
            topic,
            value=r.value,
            partition=r.partition,
            timestamp=r.timestamp_ms,
            on_delivery=delivered_to(i),
        )
        producer.flush(30)
    assert len(placed) == len(records)
    return [placed[i] for i in range(len(records))]


def kafka_settings(broker: Broker, topic: str, root: Path, **overrides: Any) -> Settings:
    params = REPLAY_PARAMS
    return Settings(
        **{
            "window": params.window_ms,
            "lateness": params.lateness_ms,
            "allowed_lateness": params.allowed_lateness_ms,
            "idle_timeout": params.idle_timeout_ms,
            "max_clock_skew": params.max_clock_skew_ms,
            "watermark_policy": params.policy,
            "warehouse": str(root / "warehouse"),
            "shuffle_partitions": 2,
            "source_kind": "kafka",
            "kafka_bootstrap": broker.bootstrap,
            "kafka_topic": topic,
            **overrides,
        }
    )


# The hand-computed replay's lines (tests/test_stream_replay.py), one record each, in arrival
# order, a millisecond apart within a file; partitions 2 and 3 of the topic never get one.
def replay_records() -> list[Record]:
    from test_stream_replay import FILES

    records = []
    for f in FILES:
        for j, line in enumerate(f.lines):
            try:
                partition = int(json.loads(line).get("partition", 0))
            except ValueError:  # the garbage line: `tally produce` sends it to partition 0
                partition = 0
            records.append(Record(partition, line.encode(), f.mtime_ms + j))
    return records


REPLAY_PARAMS = M.Params(
    window_ms=60 * S,
    lateness_ms=10 * S,
    allowed_lateness_ms=0,
    idle_timeout_ms=60 * S,
    max_clock_skew_ms=3_600 * S,
    policy="partition-min",
)


def without_provenance(out: H.Outputs) -> dict[str, list[Any]]:
    """Every table of a run, sorted, with the line identity (file/offset) blanked and the
    payload's `partition` (kept in `extra` under Kafka) left out."""

    def event(r: M.EventRow) -> M.EventRow:
        extra = tuple((k, v) for k, v in r.extra if k != "partition")
        return r._replace(source_file="", source_line=0, extra=extra)

    return {
        "events": sorted((event(r) for r in out.events), key=repr),
        "quarantine": sorted(
            (r._replace(source_file="", source_line=0) for r in out.quarantine), key=repr
        ),
        "late_events": sorted(
            (r._replace(source_file="", source_line=0) for r in out.late_events), key=repr
        ),
        "aggregates": sorted(out.aggregates, key=repr),
        "progress": sorted(out.progress, key=repr),
    }


@pytest.fixture(scope="module")
def one_record_per_batch(spark, broker: Broker, tmp_path_factory) -> dict[str, Any]:
    """The same records through Kafka (one `--available-now` run per record on one checkpoint:
    each run reads exactly the new record) and through files (one file per record)."""
    from streaming.run import run_stream

    records = replay_records()
    root = tmp_path_factory.mktemp("kafka_replay")
    create_topic(broker.bootstrap, "replay", partitions=4)
    kafka = kafka_settings(broker, "replay", root / "kafka")
    placed = []
    for record in records:
        placed += send(broker.bootstrap, "replay", [record])
        run_stream(kafka, available_now=True, clock="arrival", spark=spark)
    run_stream(kafka, drain=True, clock="arrival", spark=spark)

    for i, record in enumerate(records):
        assert record.value is not None
        H.write_file(
            root / "input",
            H.InputFile(f"arrival-{i:03d}.jsonl", record.timestamp_ms, [record.value.decode()]),
        )
    files = kafka_settings(
        broker,
        "replay",
        root / "files",
        source_kind="files",
        input=str(root / "input"),
        max_files_per_trigger=1,
    )
    run_stream(files, available_now=True, drain=True, clock="arrival", spark=spark)
    from tally import tables as T

    logged = T.read_table(spark, kafka.warehouse, "events").select("source_file").distinct()
    return {
        "records": records,
        "placed": placed,
        "source_files": sorted(r["source_file"] for r in logged.collect()),
        "kafka": H.read_outputs(spark, kafka.warehouse),
        "files": H.read_outputs(spark, files.warehouse),
    }


@pytest.mark.slow
def test_kafka_and_files_give_the_same_tables(one_record_per_batch: dict[str, Any]) -> None:
    kafka, files = one_record_per_batch["kafka"], one_record_per_batch["files"]
    assert without_provenance(kafka) == without_provenance(files)
    records = one_record_per_batch["records"]
    # not vacuous: one batch per record plus the drain, late events and emitted windows
    assert [p.batch_id for p in kafka.progress] == list(range(len(records) + 1))
    assert [p.input_lines for p in kafka.progress] == [1] * len(records) + [0]
    assert kafka.late_events and kafka.aggregates and kafka.quarantine
    # the payload's partition is kept as data; here it is the one its record was sent to
    assert all(dict(e.extra)["partition"] == str(e.partition) for e in kafka.events)


@pytest.mark.slow
def test_the_broker_keeps_records_however_old_their_timestamp(broker: Broker) -> None:
    """Records carry their file's arrival time, days old in test data: a time retention would
    delete them under a running stream (Kafka's default of 7 days did, on 2026-11-27)."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(ResourceType.BROKER, "1")
    config = admin.describe_configs([resource])[resource].result(timeout=30)
    assert config["log.retention.ms"].value == "-1"


@pytest.mark.slow
def test_records_keep_their_topic_partition_offset_and_timestamp(
    one_record_per_batch: dict[str, Any],
) -> None:
    kafka = one_record_per_batch["kafka"]
    placed = one_record_per_batch["placed"]
    by_batch = {e.batch_id: (e.source_file, e.source_line) for e in kafka.events}
    by_batch.update({q.batch_id: (q.source_file, q.source_line) for q in kafka.quarantine})
    # (the helpers read source_file's last path segment: here the partition)
    assert by_batch == {i: (str(p), o) for i, (p, o) in enumerate(placed)}
    assert one_record_per_batch["source_files"] == ["kafka:replay/0", "kafka:replay/1"]
    late = {(e.source_file, e.source_line) for e in kafka.late_events}
    assert late and late <= set(by_batch.values())
    # the arrival clock is the record timestamp: batch i's processing time is record i's
    records = one_record_per_batch["records"]
    assert [p.now_ms for p in kafka.progress[:-1]] == [r.timestamp_ms for r in records]


@pytest.mark.slow
def test_partitions_without_records_do_not_hold_the_watermark(
    one_record_per_batch: dict[str, Any],
) -> None:
    """The topic has 4 partitions; only 0 and 1 ever get a record: the watermark is theirs."""
    kafka = one_record_per_batch["kafka"]
    last = kafka.progress[-2]
    assert {p for p, _ in last.high_water} == {0, 1}
    assert last.watermark_after_ms == T0 + 180 * S  # as in the file replay: 190 s - 10 s


@pytest.mark.slow
def test_bad_records_are_quarantined_with_reason_and_offset(
    spark, broker: Broker, tmp_path_factory
) -> None:
    from streaming.run import run_stream

    root = tmp_path_factory.mktemp("kafka_bad")
    create_topic(broker.bootstrap, "bad", partitions=2)
    good = H.event_line("ok", "k", 5, T0 + 1 * S, 0).encode()
    records = [
        Record(0, None, T0),  # a tombstone
        Record(1, b'{"event_id":"x","key":"k","amount":1,"event_time":0,"y":"\xff"}', T0),
        Record(1, b'{"event_id":"' + b"z" * 200 + b'"}', T0),  # over max_record_bytes
        Record(0, b"[1, 2]", T0),  # JSON, but not one object
        Record(0, b"", T0),  # an empty value
        Record(1, good.replace(b'"partition":0', b'"partition":7'), T0),  # payload partition 7
        Record(0, good, T0),
    ]
    placed = send(broker.bootstrap, "bad", records)
    settings = kafka_settings(broker, "bad", root, max_record_bytes=100)
    run_stream(settings, available_now=True, clock="arrival", spark=spark)
    out = H.read_outputs(spark, settings.warehouse)

    got = {(q.source_file, q.source_line): (q.reason, q.raw_line) for q in out.quarantine}
    ref = [str(p) for p, _ in placed]  # the helpers read source_file's last path segment
    assert got == {
        (ref[0], placed[0][1]): ("null_value", None),
        (ref[1], placed[1][1]): ("not_utf8", base64.b64encode(records[1].value or b"").decode()),
        (ref[2], placed[2][1]): ("oversized_value", records[2].value.decode()[:100]),  # type: ignore[union-attr]
        (ref[3], placed[3][1]): ("invalid_json", "[1, 2]"),
        (ref[4], placed[4][1]): ("empty_line", ""),
    }
    events = {(e.source_file, e.source_line): e for e in out.events}
    assert set(events) == {(ref[5], placed[5][1]), (ref[6], placed[6][1])}
    moved = events[(ref[5], placed[5][1])]
    assert moved.partition == 1  # the Kafka partition is the watermark partition
    assert dict(moved.extra) == {"partition": "7"}  # the payload's partition is kept as data
    assert dict(events[(ref[6], placed[6][1])].extra) == {"partition": "0"}
    (progress,) = out.progress
    assert (
        progress.input_lines == len(records) == progress.valid_events + progress.quarantined_lines
    )
    assert dict(progress.high_water) == {0: T0 + 1 * S, 1: T0 + 1 * S}


# -- a lagging partition, then an idle one, then a new one, through Kafka ----------------------
# W = 10 s, L = 10 s, idle timeout 30 s; times in seconds after T0; each batch's records carry
# the batch's time as their Kafka timestamp (the arrival clock). Partition 2 runs 45 s behind
# partitions 0 and 1 (batches 0-4), is silent in batches 5-7 (idle from batch 7: 170 - 140 >=
# 30), and is back in batch 8. Before batch 9 the topic gets a fourth partition, whose first
# record joins the minimum.
LAG_PARAMS = M.Params(window_ms=10 * S, lateness_ms=10 * S, idle_timeout_ms=30 * S)
LAG_BATCHES = [
    *((100 + 10 * b, [(0, -2), (1, -1), (2, -45)]) for b in range(5)),
    *((100 + 10 * b, [(0, -2), (1, -1)]) for b in range(5, 8)),
    (180, [(0, -2), (1, -1), (2, -5)]),
    (190, [(0, -2), (1, -1), (2, -5), (3, -3)]),
]
NEW_PARTITION_BATCH = 9


def lag_records(batch: int) -> list[Record]:
    now, events = LAG_BATCHES[batch]
    return [
        Record(
            p, H.event_line(f"b{batch}p{p}", "k", 1, T0 + (now + dt) * S, p).encode(), T0 + now * S
        )
        for p, dt in events
    ]


@pytest.fixture(scope="module")
def lag_runs(spark, broker: Broker, tmp_path_factory) -> dict[str, H.Outputs]:
    """Both policies read the same topic, batch by batch (one `--available-now` run each)."""
    from streaming.run import run_stream

    root = tmp_path_factory.mktemp("kafka_lag")
    create_topic(broker.bootstrap, "lag", partitions=3)
    settings = {
        policy: kafka_settings(
            broker,
            "lag",
            root / policy,
            window=LAG_PARAMS.window_ms,
            lateness=LAG_PARAMS.lateness_ms,
            idle_timeout=LAG_PARAMS.idle_timeout_ms,
            watermark_policy=policy,
        )
        for policy in M.POLICIES
    }
    for batch in range(len(LAG_BATCHES)):
        if batch == NEW_PARTITION_BATCH:
            add_partitions(broker.bootstrap, "lag", total=4)
        send(broker.bootstrap, "lag", lag_records(batch))
        for s in settings.values():
            run_stream(s, available_now=True, clock="arrival", spark=spark)
    return {policy: H.read_outputs(spark, s.warehouse) for policy, s in settings.items()}


def lag_model(policy: str) -> H.Outputs:
    batches = [
        [
            M.Line(r.value.decode(), f"kafka:lag/{r.partition}", i, r.timestamp_ms)  # type: ignore[union-attr]
            for i, r in enumerate(lag_records(b))
        ]
        for b in range(len(LAG_BATCHES))
    ]
    params = M.Params(**{**LAG_PARAMS.__dict__, "policy": policy})
    return H.model_outputs(M.run_model(batches, params))


def watermarks(out: H.Outputs) -> list[int | None]:
    return [
        None if p.watermark_after_ms is None else (p.watermark_after_ms - T0) // S
        for p in out.progress
    ]


@pytest.mark.slow
@pytest.mark.parametrize("policy", M.POLICIES)
def test_lag_and_idleness_through_kafka_match_the_model(
    lag_runs: dict[str, H.Outputs], policy: str
) -> None:
    assert without_provenance(lag_runs[policy]) == without_provenance(lag_model(policy))


@pytest.mark.slow
def test_partition_min_waits_for_the_lagging_partition_then_excludes_it_idle(
    lag_runs: dict[str, H.Outputs],
) -> None:
    out = lag_runs["partition-min"]
    # held 45 s + L behind the others while partition 2 sends; released when it is idle
    assert watermarks(out) == [45, 55, 65, 75, 85, 85, 85, 158, 165, 175]
    assert [dict(p.idle).get(2) for p in out.progress] == [False] * 7 + [True, False, False]
    # the partition added to the topic joined with its first record: min(188, 189, 185, 187)
    assert [p for p, _ in out.progress[NEW_PARTITION_BATCH].high_water] == [0, 1, 2, 3]
    assert out.late_events == []
    assert {e.arrival_status for e in out.events} == {"on_time"}


@pytest.mark.slow
def test_global_max_marks_the_lagging_partition_late(lag_runs: dict[str, H.Outputs]) -> None:
    out = lag_runs["global-max"]
    assert watermarks(out) == [89, 99, 109, 119, 129, 139, 149, 159, 169, 179]
    assert sorted(e.event_id for e in out.late_events) == ["b1p2", "b2p2", "b3p2", "b4p2"]
    assert all(e.partition == 2 for e in out.late_events)


@pytest.mark.slow
def test_an_unreadable_kafka_source_stops_with_one_line(
    broker: Broker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing topic or an unreachable broker: exit 2 and one line, before any session."""
    from tally_app.cli import main
    from tally_tools.ports import free_port_pair

    base = ["stream", "--source", "kafka", "--warehouse", str(tmp_path / "wh"), "--available-now"]
    nobody = f"127.0.0.1:{free_port_pair()}"
    cases = [
        (
            [*base, "--kafka-bootstrap", broker.bootstrap, "--kafka-topic", "no-such-topic"],
            f"tally: stream: Kafka topic 'no-such-topic' does not exist at {broker.bootstrap}",
        ),
        (
            # the wait for metadata is a setting: 2 s, not the default 15 s, for a port
            # where nobody listens
            [
                *base,
                "--kafka-bootstrap",
                nobody,
                "--kafka-topic",
                "t",
                "--kafka-connect-timeout",
                "2s",
            ],
            f"tally: stream: cannot reach Kafka at {nobody}: ",
        ),
    ]
    for argv, message in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(message) and "\n" not in err, err
    assert not (tmp_path / "wh").exists()  # nothing was written


@pytest.mark.slow
def test_a_control_record_on_a_kafka_partition_sets_that_partitions_watermark(
    spark, broker: Broker, tmp_path_factory
) -> None:
    """Source watermarks through a real broker: a control record's partition is its Kafka
    partition (a payload `partition` is ignored, as for events). With lateness 60 s the
    bounded rule alone would give WM = 5 s - 60 s and close nothing; partition 0's mark
    (30 s) and partition 1's (20 s, its only record) give WM = min(30, 20) = 20 s, which
    closes [0, 10) in the first batch."""
    from streaming.run import run_stream
    from tally import tables as T

    root = tmp_path_factory.mktemp("kafka_marks")
    create_topic(broker.bootstrap, "marks", partitions=2)
    records = [
        Record(0, H.event_line("a", "k", 1, T0 + 1 * S, 0).encode(), T0 + 40 * S),
        Record(0, H.event_line("b", "k", 10, T0 + 5 * S, 0).encode(), T0 + 40 * S),
        Record(0, json.dumps({"watermark": H.iso(T0 + 30 * S)}).encode(), T0 + 40 * S),
        # a payload partition that is not the record's: the Kafka partition (1) wins
        Record(1, json.dumps({"watermark": T0 + 20 * S, "partition": 0}).encode(), T0 + 40 * S),
    ]
    send(broker.bootstrap, "marks", records)
    settings = kafka_settings(
        broker,
        "marks",
        root,
        lateness=60 * S,
        idle_timeout=3_600 * S,
        window=10 * S,
        source_watermark_field="watermark",
    )
    run_stream(settings, available_now=True, clock="arrival", spark=spark)
    out = H.read_outputs(spark, settings.warehouse)
    (first,) = out.progress
    assert (first.control_records, first.valid_events, first.input_lines) == (2, 2, 4)
    assert dict(first.source_watermark) == {0: T0 + 30 * S, 1: T0 + 20 * S}
    assert first.watermark_after_ms == T0 + 20 * S
    assert [(a.window_start_ms - T0, a.event_count, a.amount_sum) for a in out.aggregates] == [
        (0, 2, 11)
    ]
    # control records are neither events nor quarantined lines
    assert sorted(e.event_id for e in out.events) == ["a", "b"] and not out.quarantine
    assert T.read_table(spark, settings.warehouse, "events").count() == 2


def test_expected_partitions_all_waits_for_every_partition_of_the_topic(
    spark, broker: Broker, tmp_path_factory
) -> None:
    """`expected_partitions = all`: the topic's three partitions when the stream starts. Only
    0 and 1 have records in the first run, so there is no watermark although their bound
    (40 s - 10 s) would close [0, 10); partition 2's first record (run two) releases it."""
    from streaming.run import run_stream

    root = tmp_path_factory.mktemp("kafka_expected")
    create_topic(broker.bootstrap, "expected", partitions=3)
    first = [
        Record(p, H.event_line(f"e{p}", "k", 1, T0 + 40 * S, p).encode(), T0 + 50 * S)
        for p in (0, 1)
    ]
    send(broker.bootstrap, "expected", first)
    settings = kafka_settings(broker, "expected", root, window=10 * S, expected_partitions="all")
    run_stream(settings, available_now=True, clock="arrival", spark=spark)
    send(
        broker.bootstrap,
        "expected",
        [Record(2, H.event_line("e2", "k", 1, T0 + 35 * S, 2).encode(), T0 + 55 * S)],
    )
    run_stream(settings, available_now=True, clock="arrival", spark=spark)
    out = H.read_outputs(spark, settings.warehouse)
    assert [(p.watermark_after_ms, p.unheard) for p in out.progress] == [
        (None, ((2, T0 + 50 * S),)),  # partition 2 awaited since the first batch
        (T0 + 25 * S, ()),  # min(40, 40, 35) - 10
    ]
    assert not out.late_events and not out.aggregates  # nothing closed before 25 s
