"""`tally produce`: the pure rules (table-tested), then a real broker started by
scripts/kafka.sh: what was published is read back record by record."""

from __future__ import annotations

import os
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

import pytest
from kafka_broker import Broker

from tally.settings import kafka_client_options
from tally_tools.produce import file_lines, input_files, line_key, line_partition


class Partitioned(NamedTuple):
    why: str
    line: bytes
    partition: int


PARTITIONS = [
    Partitioned("the partition field", b'{"event_id":"a","partition":3}', 3),
    Partitioned("no partition field: the contract's default", b'{"event_id":"a"}', 0),
    Partitioned("a quoted partition is malformed: 0", b'{"partition":"3"}', 0),
    Partitioned("a float partition is malformed: 0", b'{"partition":1.5}', 0),
    Partitioned("true is not an integer", b'{"partition":true}', 0),
    Partitioned("negative partitions do not exist", b'{"partition":-1}', 0),
    Partitioned("not JSON", b"garbage", 0),
    Partitioned("a JSON array, not an object", b"[1,2]", 0),
    Partitioned("a blank line", b"", 0),
    Partitioned("not UTF-8", b'{"partition":2,"x":"\xff"}', 0),
]


@pytest.mark.parametrize("case", PARTITIONS, ids=lambda c: c.why)
def test_line_partition(case: Partitioned) -> None:
    assert line_partition(case.line) == case.partition


def test_line_key() -> None:
    assert line_key(b'{"event_id":"e-1","partition":2}') == b"e-1"
    assert line_key(b'{"event_id":7}') is None  # not a string: no key, the value is as sent
    assert line_key(b"[1]") is None
    assert line_key(b"") is None


class Lines(NamedTuple):
    why: str
    data: bytes
    lines: list[bytes]


LINES = [
    Lines("an empty file has no line", b"", []),
    Lines("a final newline ends the last line", b"a\nb\n", [b"a", b"b"]),
    Lines("no final newline: the last line still counts", b"a\nb", [b"a", b"b"]),
    Lines("CRLF endings read like LF", b"a\r\nb\r\n", [b"a", b"b"]),
    Lines("a lone CR inside a line stays", b"a\rb\n", [b"a\rb"]),
    Lines("blank lines are lines (quarantined downstream)", b"\n\na\n", [b"", b"", b"a"]),
]


@pytest.mark.parametrize("case", LINES, ids=lambda c: c.why)
def test_file_lines(case: Lines) -> None:
    assert file_lines(case.data) == case.lines


def test_input_files_in_arrival_order(tmp_path: Path) -> None:
    for name, mtime in [("b.jsonl", 20), ("a.jsonl", 30), ("c.jsonl", 10), ("d.jsonl", 20)]:
        path = tmp_path / name
        path.write_text("{}\n")
        os.utime(path, ns=(mtime * 10**9, mtime * 10**9))
    (tmp_path / "notes.txt").write_text("not input")
    assert [p.name for p in input_files(tmp_path)] == ["c.jsonl", "b.jsonl", "d.jsonl", "a.jsonl"]


def test_kafka_client_options_from_the_environment() -> None:
    environ = {
        "TALLY_KAFKA_OPT_SECURITY_PROTOCOL": "SASL_SSL",
        "TALLY_KAFKA_OPT_SASL_MECHANISM": "PLAIN",
        "TALLY_KAFKA_OPT_": "ignored: no name",
        "TALLY_KAFKA_TOPIC": "a setting, not a client option",
        "PATH": "/bin",
    }
    assert kafka_client_options(environ) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
    }


# -- against a real broker (the session's, tests/conftest.py) ----------------------------------
def consume_all(bootstrap: str, topic: str, expected: int) -> list[object]:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tally-test",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got: list[object] = []
    try:
        for _ in range(600):
            if len(got) >= expected:
                break
            batch = consumer.consume(num_messages=1000, timeout=0.5)
            got.extend(m for m in batch if m.error() is None)
    finally:
        consumer.close()
    return got


def test_publish_sends_each_line_to_its_partition_in_arrival_order(
    broker: Broker, tmp_path: Path
) -> None:
    from tally_app.cli import main
    from tally_tools.generate import generate

    source = tmp_path / "in"
    generate(
        out=str(source),
        events=600,
        partitions=3,
        seed=5,
        start=datetime(2026, 11, 20, tzinfo=UTC),
        duration_ms=600_000,
        files=6,
        keys=10,
        progress=False,
    )
    code = main(
        [
            "produce",
            "--kafka-bootstrap",
            broker.bootstrap,
            "--kafka-topic",
            "t1",
            "--input",
            str(source),
        ]
    )
    assert code == 0
    expected: dict[int, list[tuple[bytes, int]]] = defaultdict(list)
    for path in input_files(source):
        mtime_ms = path.stat().st_mtime_ns // 1_000_000
        for line in file_lines(path.read_bytes()):
            expected[line_partition(line)].append((line, mtime_ms))
    total = sum(len(v) for v in expected.values())
    assert sorted(expected) == [0, 1, 2] and total > 600

    got: dict[int, list[tuple[bytes, int]]] = defaultdict(list)
    for message in sorted(consume_all(broker.bootstrap, "t1", total), key=lambda m: m.offset()):
        got[message.partition()].append((message.value() or b"", message.timestamp()[1]))
    assert dict(got) == dict(expected)


def test_publish_refuses_a_topic_with_too_few_partitions(
    broker: Broker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tally_app.cli import main

    wide, narrow = tmp_path / "wide", tmp_path / "narrow"
    wide.mkdir()
    narrow.mkdir()
    (wide / "a.jsonl").write_text(
        '{"event_id":"a","partition":0}\n{"event_id":"b","partition":5}\n'
    )
    (narrow / "a.jsonl").write_text('{"event_id":"c"}\n')

    def produce(source: Path, topic: str, *more: str) -> int:
        base = ["produce", "--kafka-bootstrap", broker.bootstrap, "--kafka-topic", topic]
        return main([*base, "--input", str(source), *more])

    assert produce(wide, "t2", "--partitions", "2") == 1  # too few to create: nothing sent
    assert "--partitions 2 < 6" in capsys.readouterr().err
    assert produce(narrow, "t3") == 0  # created with the 1 partition it needs
    assert produce(wide, "t3") == 1  # exists with 1: refused before sending
    assert "t3 has 1 partitions, the input uses 6" in capsys.readouterr().err
    assert produce(wide, "t4", "--partitions", "6") == 0
    assert produce(wide, "t4") == 0  # exists with 6: enough
    assert len(consume_all(broker.bootstrap, "t3", 1)) == 1
    assert len(consume_all(broker.bootstrap, "t4", 4)) == 4


def test_the_broker_runs_under_the_scripts_pid(broker: Broker) -> None:
    status = broker.run("status")
    assert status.returncode == 0
    assert broker.pid is not None and f"pid {broker.pid}," in status.stdout


def test_an_unreachable_broker_is_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tally_app.cli import main
    from tally_tools.ports import free_port_pair

    (tmp_path / "a.jsonl").write_text('{"event_id":"a"}\n')
    nobody = f"127.0.0.1:{free_port_pair()}"
    argv = ["--kafka-bootstrap", nobody, "--kafka-connect-timeout", "2s"]
    code = main(["produce", *argv, "--input", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 1
    assert err.startswith(f"tally: produce: cannot reach Kafka at {nobody}") and "\n" not in err
