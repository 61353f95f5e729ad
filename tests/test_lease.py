"""One stream per warehouse: the lease's rules (pure), its local store, and the lease object
with an injected clock. The real streams racing for a warehouse are in test_single_writer."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from streaming.lease import (
    Holder,
    LeaseError,
    LeaseRecord,
    LeaseStore,
    LocalLeaseStore,
    S3LeaseStore,
    WarehouseLease,
    decide,
    generation_of,
    lease_store,
    owner_alive,
    refusal,
    this_process,
)

TTL = 60_000
HOLDER = Holder("host-a", 4242, "777", "run-a", "s3a://b/wh/_checkpoints/stream", "q-1")


def record(generation: int = 3, heartbeat_ms: int = 100_000, released: bool = False):
    return LeaseRecord(generation, HOLDER, 40_000, heartbeat_ms, TTL, released)


@pytest.mark.parametrize(
    ("current", "now_ms", "alive", "expected"),
    [
        # an empty warehouse: the first generation
        (None, 0, None, 0),
        # a clean stop released it: take the next generation at once
        (record(released=True), 100_001, True, 4),
        # same host, the holder's process is gone (SIGKILL): no need to wait for expiry
        (record(), 100_001, False, 4),
        # another host, heartbeat fresh: the holder may well be running
        (record(), 100_000 + TTL, None, None),
        # another host, no heartbeat for longer than the ttl: expired
        (record(), 100_001 + TTL, None, 4),
        # same host, process running: refused even when its heartbeat is old (it may be in a
        # long GC pause; killing it is the user's call, not ours)
        (record(), 100_001 + 10 * TTL, True, None),
    ],
)
def test_decide(current, now_ms, alive, expected) -> None:
    assert decide(current, now_ms, alive).generation == expected


def test_refusal_is_one_line_naming_the_owner() -> None:
    line = refusal("s3a://b/wh", record())
    assert "\n" not in line
    assert line.startswith("stream: warehouse s3a://b/wh is owned by a running stream")
    for part in ("host host-a", "pid 4242", "query q-1", "since 1970-01-01T00:00:40Z"):
        assert part in line


@pytest.mark.parametrize(
    ("name", "generation"),
    [
        ("000000000007.json", 7),
        (".0123abcd.tmp", None),  # a record being written
        ("7.json", None),  # not ours: generations are always 12 digits
        ("000000000007.json.bak", None),
    ],
)
def test_generation_of(name: str, generation: int | None) -> None:
    assert generation_of(name) == generation


def test_records_round_trip() -> None:
    assert LeaseRecord.from_json(record().to_json()) == record()


def race_for_generation_zero(store: Callable[[], LeaseStore], claimants: int = 8) -> list[bool]:
    """`claimants` threads released together, each creating generation 0 in its own store
    object; the sorted results (one True: the winner)."""
    results: list[bool] = []
    barrier = threading.Barrier(claimants)

    def claim(i: int) -> None:
        mine = store()
        barrier.wait()
        results.append(mine.create(0, f"claimant {i}".encode()))

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(claimants)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(results)


def test_local_create_is_exclusive_under_a_race(tmp_path: Path) -> None:
    store = LocalLeaseStore(str(tmp_path / "lease"))
    assert race_for_generation_zero(lambda: store) == [False] * 7 + [True]
    assert store.generations() == [0]
    assert list((tmp_path / "lease").iterdir()) == [tmp_path / "lease" / "000000000000.json"]


def test_owner_alive() -> None:
    me = this_process("cp")
    assert owner_alive(me, me.host) is True
    assert owner_alive(me, "another-host") is None
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    gone = replace(me, pid=int(done.stdout))
    assert owner_alive(gone, me.host) is False
    # the pid runs, but it is another process than the one that took the lease (pid reuse)
    reused = replace(me, pid_started="1")
    assert owner_alive(reused, me.host) is False


class FakeClock:
    def __init__(self, ms: int = 1_000_000):
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


def lease_for(tmp_path: Path, holder: Holder, clock: FakeClock) -> WarehouseLease:
    return WarehouseLease(lease_store(str(tmp_path)), str(tmp_path), holder, TTL, clock)


def test_a_live_owner_refuses_a_second_stream(tmp_path: Path) -> None:
    clock = FakeClock()
    first = lease_for(tmp_path, this_process("cp"), clock)
    assert first.acquire().generation == 0
    with pytest.raises(LeaseError, match="is owned by a running stream"):
        lease_for(tmp_path, this_process("cp"), clock).acquire()


def test_takeover_after_expiry_fences_the_old_holder(tmp_path: Path) -> None:
    clock = FakeClock()
    old = lease_for(tmp_path, replace(this_process("cp"), host="gone-host"), clock)
    old.acquire()
    new = lease_for(tmp_path, this_process("cp"), clock)
    clock.ms += TTL  # not yet expired: exactly the ttl since the last heartbeat
    with pytest.raises(LeaseError):
        new.acquire()
    clock.ms += 1
    assert new.acquire().generation == 1
    # the old holder wakes up (a long pause): it must not write any more
    with pytest.raises(LeaseError, match=r"lost the lease on warehouse .* to host"):
        old.check()
    new.check()  # the new one holds it


def test_a_heartbeat_keeps_the_lease(tmp_path: Path) -> None:
    clock = FakeClock()
    owner = lease_for(tmp_path, replace(this_process("cp"), host="elsewhere"), clock)
    owner.acquire()
    clock.ms += TTL
    owner.renew()
    clock.ms += TTL  # 2 ttl since it was taken, 1 since the heartbeat
    with pytest.raises(LeaseError):
        lease_for(tmp_path, this_process("cp"), clock).acquire()


def test_release_lets_the_next_stream_in_at_once(tmp_path: Path) -> None:
    clock = FakeClock()
    with lease_for(tmp_path, this_process("cp"), clock) as first:
        first.set_query_id("q-9")
    following = lease_for(tmp_path, this_process("cp"), clock)
    assert following.acquire().generation == 1
    assert LocalLeaseStore(str(tmp_path / "_lease" / "stream")).generations() == [0, 1]


def test_old_generations_are_tidied(tmp_path: Path) -> None:
    clock = FakeClock()
    for _ in range(6):
        with lease_for(tmp_path, this_process("cp"), clock):
            pass
    assert LocalLeaseStore(str(tmp_path / "_lease" / "stream")).generations() == [3, 4, 5]


def test_a_store_without_atomic_create_is_refused() -> None:
    with pytest.raises(LeaseError, match=r"no atomic create-if-absent known for hdfs://"):
        lease_store("hdfs://namenode/wh")


# -- the same contract on an S3 API server (moto, started by scripts/s3.sh) -------------------
@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory):
    from s3_server import s3_server

    with s3_server(tmp_path_factory.mktemp("s3")) as server:
        server.bucket("lease")
        yield server


def test_s3_create_is_exclusive_under_a_race(s3) -> None:
    def store() -> S3LeaseStore:  # one client per claimant, as separate processes would have
        return S3LeaseStore(s3.client(), "lease", "race/_lease/stream")

    assert race_for_generation_zero(store) == [False] * 7 + [True]
    assert store().generations() == [0]
    assert store().read(0) in {f"claimant {i}".encode() for i in range(8)}


def test_s3a_warehouse_lease_end_to_end(s3, monkeypatch: pytest.MonkeyPatch) -> None:
    # boto3 reads the credentials from the environment, as in production
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, s3.env[name])
    warehouse = "s3a://lease/teams/payments/wh"
    clock = FakeClock()

    def lease(holder: Holder) -> WarehouseLease:
        store = lease_store(warehouse, s3.endpoint, "us-east-1", s3_path_style=True)
        return WarehouseLease(store, warehouse, holder, TTL, clock)

    with lease(this_process("cp")) as first:
        with pytest.raises(LeaseError, match="is owned by a running stream"):
            lease(this_process("cp")).acquire()
        first.check()
    assert lease(this_process("cp")).acquire().generation == 1  # released: at once
    keys = [o["Key"] for o in s3.client().list_objects_v2(Bucket="lease")["Contents"]]
    assert sorted(k for k in keys if k.startswith("teams/")) == [
        "teams/payments/wh/_lease/stream/000000000000.json",
        "teams/payments/wh/_lease/stream/000000000001.json",
    ]


class FlakyStore(LocalLeaseStore):
    """A local store whose listing fails while `failing` is set (an object store's hiccup)."""

    failing = False

    def generations(self) -> list[int]:
        if self.failing:
            raise OSError("503 Slow Down")
        return super().generations()


def test_a_store_hiccup_is_tolerated_while_the_heartbeat_is_fresh(tmp_path: Path) -> None:
    clock = FakeClock()
    store = FlakyStore(str(tmp_path / "lease"))
    lease = WarehouseLease(store, str(tmp_path), this_process("cp"), TTL, clock)
    lease.acquire()
    store.failing = True
    clock.ms += TTL // 2 - 1
    lease.check()  # nobody can have taken it yet: the batch goes on
    clock.ms += 1
    with pytest.raises(LeaseError, match=r"cannot renew the lease on warehouse .*503 Slow Down"):
        lease.check()
    store.failing = False
    lease.check()  # the store answers again: renewed
    assert LeaseRecord.from_json(store.read(0) or b"").heartbeat_ms == clock.ms
