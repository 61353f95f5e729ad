"""Publish JSONL input to a Kafka topic in arrival order: for tests, the demo and the benchmark.

Files are taken in arrival order (modification time, then name: the order the file source
reads them in); each line becomes one record, its value the line's bytes exactly (blank and
malformed lines too, so the stream's quarantine sees them), sent to the Kafka partition named
by the line's `partition` field. One partition gets its records in the order they arrived,
which is what the stream's per-partition watermark assumes. A line that names no usable
partition (missing field: the contract's default 0; malformed line: 0 too) goes to partition 0.

The record timestamp is the file's modification time, so a replay with the arrival clock sees
the same arrival times through Kafka as through the files.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ProduceError(RuntimeError):
    """Nothing was published: the message is one line."""


@dataclass(frozen=True)
class Record:
    partition: int
    key: bytes | None  # the event_id, when the line has one (for log compaction and tools)
    value: bytes
    timestamp_ms: int


def input_files(directory: Path) -> list[Path]:
    """The `*.jsonl` files of `directory` in arrival order: modification time, then name."""
    files = [p for p in directory.iterdir() if p.is_file() and p.suffix == ".jsonl"]
    return sorted(files, key=lambda p: (p.stat().st_mtime_ns, p.name))


def file_lines(data: bytes) -> list[bytes]:
    """Lines as the stream's text source reads them: split at "\\n", one "\\r" ending a line
    dropped, no line after a final "\\n"."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [line[:-1] if line.endswith(b"\r") else line for line in lines]


def _object(line: bytes) -> dict[str, Any] | None:
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    return obj if isinstance(obj, dict) else None


def _partition_of(obj: dict[str, Any] | None) -> int:
    value = obj.get("partition", 0) if obj is not None else 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return 0
    return value


def line_partition(line: bytes) -> int:
    """The Kafka partition of a line: its `partition` field when that is a non-negative JSON
    integer, else 0."""
    return _partition_of(_object(line))


def line_key(line: bytes) -> bytes | None:
    """The record key: the line's `event_id` when it is a string."""
    obj = _object(line)
    event_id = obj.get("event_id") if obj is not None else None
    return event_id.encode("utf-8") if isinstance(event_id, str) else None


def records(paths: Iterable[Path]) -> Iterator[Record]:
    """Every line of every file, in order, as a record."""
    for path in paths:
        timestamp_ms = path.stat().st_mtime_ns // 1_000_000
        for line in file_lines(path.read_bytes()):
            obj = _object(line)  # parsed once for both the partition and the key
            event_id = obj.get("event_id") if obj is not None else None
            key = event_id.encode("utf-8") if isinstance(event_id, str) else None
            yield Record(_partition_of(obj), key, line, timestamp_ms)


def publish(
    bootstrap: str,
    topic: str,
    paths: list[Path],
    partitions: int | None = None,
    client_config: Mapping[str, Any] | None = None,
    connect_timeout_s: float = 15.0,
) -> int:
    """Publish the lines of `paths` to `topic` (created with `partitions`, default: enough for
    the highest partition used, when it does not exist); returns the number of records
    acknowledged; `ProduceError` when the broker gives no metadata within `connect_timeout_s`.
    Refuses, before sending anything, a topic with fewer partitions than the input uses. The
    files are read twice (partitions first), never held in memory whole."""
    from confluent_kafka import KafkaException, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    config = {"bootstrap.servers": bootstrap, **(client_config or {})}
    needed = max((r.partition for r in records(paths)), default=0) + 1
    admin = AdminClient(config)
    try:
        existing = admin.list_topics(timeout=connect_timeout_s).topics.get(topic)
    except KafkaException as exc:
        raise ProduceError(f"produce: cannot reach Kafka at {bootstrap}: {exc}") from None
    if existing is None or existing.error is not None:
        count = partitions or needed
        if count < needed:
            raise ProduceError(f"produce: --partitions {count} < {needed}, the input's partitions")
        # Replication factor 1 suits the local broker; create production topics yourself.
        futures = admin.create_topics([NewTopic(topic, num_partitions=count, replication_factor=1)])
        try:
            futures[topic].result(timeout=60)
        except KafkaException as exc:
            raise ProduceError(f"produce: cannot create topic {topic}: {exc}") from None
    elif len(existing.partitions) < needed:
        raise ProduceError(
            f"produce: topic {topic} has {len(existing.partitions)} partitions, the input uses "
            f"{needed}; publish to a topic with at least {needed}"
        )
    failures: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    # Idempotence keeps per-partition order across the client's own retries.
    producer = Producer({**config, "enable.idempotence": True, "linger.ms": 20})
    sent = 0
    for record in records(paths):
        sent += 1
        while True:
            try:
                producer.produce(
                    topic,
                    value=record.value,
                    key=record.key,
                    partition=record.partition,
                    timestamp=record.timestamp_ms,
                    on_delivery=delivered,
                )
                break
            except BufferError:  # the client's queue is full: let it send, then retry
                producer.poll(0.5)
        producer.poll(0)
    remaining = producer.flush(120)
    if remaining or failures:
        detail = failures[0] if failures else f"{remaining} records not acknowledged"
        raise ProduceError(f"produce: delivery failed: {detail}")
    return sent
