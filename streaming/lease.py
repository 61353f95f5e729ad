"""One stream per warehouse: a lease kept in the warehouse itself.

Two `tally stream` processes on one warehouse would each compute their own watermark and
count every event twice. The lease is a numbered sequence of small JSON records under
`<warehouse>/_lease/stream/`: the current lease is the highest number. Taking the warehouse is
creating the next number with an atomic create-if-absent (a hard link on a local file system,
`If-None-Match: *` on S3): of two claimants exactly one wins. The holder renews its own record
(a heartbeat) and, before each batch, checks that no higher number exists (fencing: a holder
that stalled past its lease and was replaced stops instead of writing).

The rules (`decide`) are pure; the stores and the heartbeat thread are the thin edges.
docs/semantics.md, "One stream per warehouse", states them for another engine.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger(__name__)

LEASE_DIR = "_lease/stream"
# Generations older than this many below the current one are deleted by a new holder.
KEEP_GENERATIONS = 3
# Record names are the generation zero-padded to this many digits (so they sort as numbers).
GENERATION_DIGITS = 12
# How many times a claimant looks again after another claimant created the generation first.
CLAIM_ATTEMPTS = 5
# A store that fails to answer is tolerated while the last heartbeat is younger than
# ttl / FAILED_CHECK_TOLERANCE (nobody may take the lease before it expires).
FAILED_CHECK_TOLERANCE = 2
# Heartbeats per ttl (several, so one late beat never lets the lease expire), and the
# shortest interval between two, in seconds.
BEATS_PER_TTL = 4
MIN_BEAT_INTERVAL_S = 0.05


class LeaseError(RuntimeError):
    """The warehouse is taken, lost, or its store cannot hold a lease; one line."""


@dataclass(frozen=True)
class Holder:
    """Who holds (or claims) the lease."""

    host: str
    pid: int
    pid_started: str  # the process's start time as the OS reports it ("" if unknown)
    run_id: str  # one per process: tells this process's records from a pid reused later
    checkpoint: str
    query_id: str = ""  # known once the streaming query started


@dataclass(frozen=True)
class LeaseRecord:
    generation: int
    holder: Holder
    since_ms: int
    heartbeat_ms: int
    ttl_ms: int
    released: bool = False

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @staticmethod
    def from_json(data: bytes) -> LeaseRecord:
        raw = json.loads(data)
        return LeaseRecord(**{**raw, "holder": Holder(**raw["holder"])})


@dataclass(frozen=True)
class Decision:
    """Take generation `generation` (why: `reason`), or refuse (`generation` is None)."""

    generation: int | None
    reason: str


def decide(current: LeaseRecord | None, now_ms: int, owner_alive: bool | None) -> Decision:
    """May a claimant take the warehouse? `owner_alive` is what the claimant could prove about
    the current holder: False (same host, process gone), True (same host, running) or None
    (another host: unknown, only the heartbeat's age tells)."""
    if current is None:
        return Decision(0, "no stream held the warehouse")
    following = current.generation + 1
    if current.released:
        return Decision(following, "the previous stream stopped and released it")
    if owner_alive is False:
        return Decision(following, "the previous stream's process is gone")
    if owner_alive is None and now_ms - current.heartbeat_ms > current.ttl_ms:
        return Decision(following, "the previous stream's lease expired")
    return Decision(None, "held")


def refusal(warehouse: str, current: LeaseRecord) -> str:
    """The one line a refused stream prints."""
    h = current.holder
    query = f", query {h.query_id}" if h.query_id else ""
    return (
        f"stream: warehouse {warehouse} is owned by a running stream (host {h.host}, pid "
        f"{h.pid}{query}, since {iso(current.since_ms)}, last heartbeat "
        f"{iso(current.heartbeat_ms)}); stop it first, or a dead one's lease expires "
        f"{current.ttl_ms // 1000} s after its last heartbeat"
    )


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def record_name(generation: int) -> str:
    return f"{generation:0{GENERATION_DIGITS}d}.json"


def generation_of(name: str) -> int | None:
    stem, dot, ext = name.rpartition(".")
    return (
        int(stem)
        if dot and ext == "json" and stem.isdigit() and len(stem) == GENERATION_DIGITS
        else None
    )


# -- stores ------------------------------------------------------------------------------
class LeaseStore(Protocol):
    def generations(self) -> list[int]: ...
    def read(self, generation: int) -> bytes | None: ...
    def create(self, generation: int, data: bytes) -> bool: ...  # atomic; False if it exists
    def overwrite(self, generation: int, data: bytes) -> None: ...
    def delete(self, generation: int) -> None: ...


class LocalLeaseStore:
    """A directory on a local (or POSIX shared) file system. Create is a hard link of a fully
    written temporary file: atomic, fails if the name exists, and never shows a half record."""

    def __init__(self, directory: str):
        self.directory = Path(directory)

    def generations(self) -> list[int]:
        if not self.directory.is_dir():
            return []
        found = (generation_of(p.name) for p in self.directory.iterdir())
        return sorted(g for g in found if g is not None)

    def read(self, generation: int) -> bytes | None:
        try:
            return (self.directory / record_name(generation)).read_bytes()
        except FileNotFoundError:
            return None

    def _temporary(self, data: bytes) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.directory / f".{uuid.uuid4().hex}.tmp"
        tmp.write_bytes(data)
        return tmp

    def create(self, generation: int, data: bytes) -> bool:
        tmp = self._temporary(data)
        try:
            os.link(tmp, self.directory / record_name(generation))
            return True
        except FileExistsError:
            return False
        finally:
            tmp.unlink()

    def overwrite(self, generation: int, data: bytes) -> None:
        os.replace(self._temporary(data), self.directory / record_name(generation))

    def delete(self, generation: int) -> None:
        (self.directory / record_name(generation)).unlink(missing_ok=True)


class S3LeaseStore:
    """A prefix in an S3 bucket. Create is a conditional PUT (`If-None-Match: *`): S3 and
    compatible servers answer 412 when the key exists, so of two claimants one wins."""

    def __init__(self, client: Any, bucket: str, prefix: str):
        self.client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/"

    def generations(self) -> list[int]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.prefix
        )
        found = (
            generation_of(obj["Key"][len(self.prefix) :])
            for page in pages
            for obj in page.get("Contents", [])
        )
        return sorted(g for g in found if g is not None)

    def read(self, generation: int) -> bytes | None:
        try:
            response = self.client.get_object(
                Bucket=self.bucket, Key=self.prefix + record_name(generation)
            )
        except self.client.exceptions.NoSuchKey:
            return None
        body: bytes = response["Body"].read()
        return body

    def create(self, generation: int, data: bytes) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.put_object(
                Bucket=self.bucket,
                Key=self.prefix + record_name(generation),
                Body=data,
                IfNoneMatch="*",
            )
            return True
        except ClientError as exc:
            # 412: the key exists; 409: a concurrent conditional write to it is in flight.
            if exc.response.get("Error", {}).get("Code") in (
                "PreconditionFailed",
                "ConditionalRequestConflict",
            ):
                return False
            raise

    def overwrite(self, generation: int, data: bytes) -> None:
        self.client.put_object(
            Bucket=self.bucket, Key=self.prefix + record_name(generation), Body=data
        )

    def delete(self, generation: int) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self.prefix + record_name(generation))


def lease_store(
    warehouse: str, s3_endpoint: str = "", s3_region: str = "", s3_path_style: bool = False
) -> LeaseStore:
    """The store for a warehouse URI; LeaseError where no atomic create is known."""
    scheme, sep, rest = warehouse.partition("://")
    if not sep or scheme == "file":
        local = warehouse.removeprefix("file://").removeprefix("file:")
        return LocalLeaseStore(os.path.join(os.path.abspath(local), LEASE_DIR))
    if scheme in ("s3a", "s3"):
        bucket, _, key = rest.partition("/")
        return S3LeaseStore(
            s3_client(s3_endpoint, s3_region, s3_path_style),
            bucket,
            f"{key.strip('/')}/{LEASE_DIR}".lstrip("/"),
        )
    raise LeaseError(
        f"stream: no atomic create-if-absent known for {scheme}:// warehouses, so one stream "
        "per warehouse cannot be guaranteed; set stream_lease=false and make sure yourself "
        "that a single stream writes it"
    )


def s3_client(endpoint: str, region: str, path_style: bool) -> Any:
    """A boto3 S3 client; credentials from the default chain (environment, profile, role)."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint or None,
        region_name=region or None,
        config=Config(s3={"addressing_style": "path" if path_style else "auto"}),
    )


# -- this process ------------------------------------------------------------------------
def process_started(pid: int) -> str:
    """The process's start time in clock ticks since boot (Linux), "" where unknown: with the
    pid it names one process, even after the pid is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    # Field 22; the command name (field 2) may hold spaces, so count after its ')'.
    return stat.rpartition(")")[2].split()[19]


def owner_alive(holder: Holder, host: str) -> bool | None:
    """What this host can prove about a holder: None when it runs elsewhere."""
    if holder.host != host:
        return None
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process with that pid: running
    started = process_started(holder.pid)
    return not (holder.pid_started and started and started != holder.pid_started)


def this_process(checkpoint: str) -> Holder:
    pid = os.getpid()
    return Holder(
        host=socket.gethostname(),
        pid=pid,
        pid_started=process_started(pid),
        run_id=uuid.uuid4().hex,
        checkpoint=checkpoint,
    )


class WarehouseLease:
    """The lease one stream process holds: acquire, renew in the background, check before
    each batch, release at a clean stop."""

    def __init__(
        self,
        store: LeaseStore,
        warehouse: str,
        holder: Holder,
        ttl_ms: int,
        now_ms: Callable[[], int],
    ):
        self.store = store
        self.warehouse = warehouse
        self.holder = holder
        self.ttl_ms = ttl_ms
        self.now_ms = now_ms
        self.record: LeaseRecord | None = None
        self._lost: str | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def lost(self) -> str | None:
        """Why this process lost the warehouse (one line), or None while it holds it."""
        return self._lost

    def _current(self) -> LeaseRecord | None:
        generations = self.store.generations()
        if not generations:
            return None
        data = self.store.read(generations[-1])
        if data is None:  # deleted between list and read: only older ones are deleted
            return self._current()
        return LeaseRecord.from_json(data)

    def acquire(self) -> LeaseRecord:
        """Take the warehouse, or LeaseError naming its live owner."""
        for _attempt in range(CLAIM_ATTEMPTS):
            current = self._current()
            alive = owner_alive(current.holder, self.holder.host) if current else None
            decision = decide(current, self.now_ms(), alive)
            if decision.generation is None:
                assert current is not None
                raise LeaseError(refusal(self.warehouse, current))
            now = self.now_ms()
            record = LeaseRecord(decision.generation, self.holder, now, now, self.ttl_ms)
            if self.store.create(decision.generation, record.to_json()):
                log.info("lease %d taken: %s", decision.generation, decision.reason)
                self.record = record
                self._forget_old(decision.generation)
                return record
            # Another claimant created that generation first: look again.
        raise LeaseError(
            f"stream: warehouse {self.warehouse}: lost {CLAIM_ATTEMPTS} races for its lease"
        )

    def _forget_old(self, generation: int) -> None:
        with contextlib.suppress(Exception):  # tidying only; a failure changes nothing
            for old in self.store.generations():
                if old <= generation - KEEP_GENERATIONS:
                    self.store.delete(old)

    def set_query_id(self, query_id: str) -> None:
        self.holder = replace(self.holder, query_id=query_id)
        self.renew()

    def renew(self) -> None:
        """Heartbeat: rewrite our record, unless someone took the warehouse from us."""
        with self._lock:
            record = self.record
            if record is None or self._lost:
                return
            newer = [g for g in self.store.generations() if g > record.generation]
            if newer:
                data = self.store.read(newer[-1])
                taker = LeaseRecord.from_json(data).holder if data else None
                self._lost = (
                    f"stream: lost the lease on warehouse {self.warehouse} to "
                    + (f"host {taker.host}, pid {taker.pid}" if taker else "another stream")
                    + "; stopping without writing"
                )
                return
            self.record = replace(record, holder=self.holder, heartbeat_ms=self.now_ms())
            self.store.overwrite(record.generation, self.record.to_json())

    def check(self) -> None:
        """Before a batch writes: still ours? (LeaseError otherwise.) A store that fails to
        answer is tolerated while our last heartbeat is younger than half the ttl
        (`FAILED_CHECK_TOLERANCE`): nobody may take the lease before it expires, so a passing
        hiccup need not stop the stream."""
        try:
            self.renew()
        except Exception as exc:
            record = self.record
            tolerated_ms = record.ttl_ms // FAILED_CHECK_TOLERANCE if record else 0
            if record is None or self.now_ms() - record.heartbeat_ms >= tolerated_ms:
                raise LeaseError(
                    f"stream: cannot renew the lease on warehouse {self.warehouse}: {exc}"
                ) from exc
            log.warning("lease check failed, last heartbeat still fresh: %s", exc)
        if self._lost:
            raise LeaseError(self._lost)

    def _beat(self) -> None:
        interval = max(self.ttl_ms / 1000 / BEATS_PER_TTL, MIN_BEAT_INTERVAL_S)
        while not self._stop.wait(interval):
            try:
                self.renew()
            except Exception as exc:  # a store hiccup: the next beat retries
                log.warning("lease heartbeat failed: %s", exc)

    def __enter__(self) -> WarehouseLease:
        if self.record is None:
            self.acquire()
        self._thread = threading.Thread(target=self._beat, name="tally-lease", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            self.release()
        except Exception as exc:  # never mask how the stream ended; the lease will expire
            log.warning("lease release failed (it expires after its ttl): %s", exc)

    def release(self) -> None:
        """A clean stop: mark our record released, so the next stream need not wait."""
        with self._lock:
            record = self.record
            if record is None or self._lost:
                return
            if any(g > record.generation for g in self.store.generations()):
                return
            released = replace(record, heartbeat_ms=self.now_ms(), released=True)
            self.store.overwrite(record.generation, released.to_json())
            self.record = None
