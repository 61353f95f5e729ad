"""The three-source feed (tally_tools.sources): deterministic, and each source's disorder within its
bound except the events the manifest lists (pure Python; lines read back from the files and
checked with the reference model's contract parser, not the generator's own code)."""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import reference_model as M

from tally_tools.sources import LATENESS_BY_PARTITION, MIN_DURATION_MS, PROFILE, SOURCES, generate

START = datetime(2026, 11, 21, 23, 58, 30, tzinfo=UTC)
START_MS = (START - M.EPOCH) // timedelta(milliseconds=1)
DURATION_MS = 180_000
BOUND = {0: 100, 1: 30_000, 2: 10_000}
NAME = {0: "radar", 1: "poller", 2: "satellite"}
IDLE_TIMEOUT_MS = 60_000  # the setting's default


@dataclass
class Arrival:
    """One valid line, in arrival order (file mtime, name, line number)."""

    parsed: M.Parsed
    text: str
    file: int
    mtime_ms: int
    disorder_ms: int  # partition high-water mark over earlier lines minus its time (0 if none)


@dataclass
class Feed:
    manifest: dict[str, Any]
    names: list[str]
    mtimes_ms: list[int]
    lines: int = 0
    reasons: Counter[str] = field(default_factory=Counter)
    valid: list[Arrival] = field(default_factory=list)

    def first_arrivals(self) -> dict[str, Arrival]:
        first: dict[str, Arrival] = {}
        for a in self.valid:
            first.setdefault(a.parsed.event_id, a)
        return first


def read_feed(out: Path) -> Feed:
    names = sorted(p.name for p in out.iterdir() if p.name.startswith("arrival-"))
    mtimes = [os.stat(out / n).st_mtime_ns // 1_000_000 for n in names]
    feed = Feed(json.loads((out / "_manifest.json").read_text()), names, mtimes)
    high_water: dict[int, int] = {}
    for index, name in enumerate(names):
        text = (out / name).read_text(encoding="utf-8")
        assert text.endswith("\n"), name
        for raw in text.split("\n")[:-1]:
            feed.lines += 1
            parsed, reason = M.parse_line(raw)
            if parsed is None:
                assert reason is not None
                feed.reasons[reason] += 1
                continue
            hw = high_water.get(parsed.partition, parsed.event_time_ms)
            disorder = max(0, hw - parsed.event_time_ms)
            feed.valid.append(Arrival(parsed, raw, index, mtimes[index], disorder))
            high_water[parsed.partition] = max(hw, parsed.event_time_ms)
    return feed


def write(tmp_path: Path, seed: int, name: str = "feed", **kwargs: Any) -> Feed:
    out = tmp_path / name
    manifest = generate(str(out), seed, START, kwargs.pop("duration_ms", DURATION_MS), **kwargs)
    feed = read_feed(out)
    assert feed.manifest == manifest
    return feed


def snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(directory.iterdir())}


def test_same_seed_same_bytes_names_and_mtimes(tmp_path: Path) -> None:
    generate(str(tmp_path / "a"), 5, START, DURATION_MS)
    generate(str(tmp_path / "b"), 5, START, DURATION_MS)
    generate(str(tmp_path / "c"), 6, START, DURATION_MS)
    a, b, c = (snapshot(tmp_path / d) for d in "abc")
    assert a == b
    assert len(a) > 50
    assert a != c  # the seed matters
    # a start moved by one day moves every time by one day, bytes aside
    generate(str(tmp_path / "d"), 5, START + timedelta(days=1), DURATION_MS)
    d = snapshot(tmp_path / "d")
    assert list(d) == list(a)
    assert all(d[n][1] - a[n][1] == 86_400 * 10**9 for n in a)


def test_files_in_arrival_order_and_the_manifest_counts(tmp_path: Path) -> None:
    feed = write(tmp_path, 5)
    m = feed.manifest
    assert feed.names == [f"arrival-{i:06d}.jsonl" for i in range(len(feed.names))]
    assert m["files"] == len(feed.names)
    assert all(a < b for a, b in pairwise(feed.mtimes_ms))  # strictly: no (mtime, name) ties
    manifest_mtime = os.stat(tmp_path / "feed" / "_manifest.json").st_mtime_ns // 1_000_000
    assert manifest_mtime == feed.mtimes_ms[-1]
    assert (m["profile"], m["lateness_by_partition"]) == (PROFILE, "0=100ms,1=30s,2=10s")
    assert m["lateness_by_partition"] == LATENESS_BY_PARTITION

    first = feed.first_arrivals()
    assert feed.lines == m["lines"] == m["valid_events"] + m["duplicates"] + m["malformed_lines"]
    assert len(first) == m["events"] == m["valid_events"]
    assert 2_000 <= m["events"] <= 5_000
    assert len(feed.valid) - len(first) == m["duplicates"] == 6
    assert dict(feed.reasons) == m["malformed_by_reason"]
    assert sum(feed.reasons.values()) == m["malformed_lines"] == 6
    by_partition = Counter(a.parsed.partition for a in first.values())
    assert {str(p): n for p, n in by_partition.items()} == m["events_by_partition"]
    assert sum(a.parsed.amount for a in first.values()) == m["amount_total"]
    for source in SOURCES:
        assert m["sources"][source.name]["events"] == by_partition[source.partition]
        assert m["sources"][source.name]["bound_ms"] == BOUND[source.partition]


def test_every_line_is_the_contract_with_integer_money_and_no_clock_ahead(tmp_path: Path) -> None:
    feed = write(tmp_path, 5)
    keys = {s.partition: set(s.keys) for s in SOURCES}
    for a in feed.valid:
        p = a.parsed
        assert p.partition in BOUND
        assert dict(p.extra) == {"source": NAME[p.partition]}
        assert p.key in keys[p.partition]
        assert p.event_id.startswith(NAME[p.partition] + "-")
        assert isinstance(p.amount, int) and p.amount != 0
        assert START_MS <= p.event_time_ms < START_MS + DURATION_MS
        assert p.event_time_ms <= a.mtime_ms  # an event arrives after it happened
        assert a.text.endswith(f'Z","partition":{p.partition},"source":"{NAME[p.partition]}"}}')
    amounts = [a.parsed.amount for a in feed.valid if a.parsed.partition == 1]
    assert any(x < 0 for x in amounts)  # the poller carries refunds


@pytest.mark.parametrize("seed", range(12))
def test_disorder_within_each_bound_except_the_listed_events(tmp_path: Path, seed: int) -> None:
    feed = write(tmp_path, seed)
    m = feed.manifest
    beyond = set(m["beyond_bound_event_ids"])
    first = feed.first_arrivals()
    listed: dict[int, set[str]] = defaultdict(set)
    most: dict[int, int] = defaultdict(int)
    for event_id, a in first.items():
        p = a.parsed.partition
        if event_id in beyond:
            assert a.disorder_ms > BOUND[p], (event_id, a.disorder_ms)
            listed[p].add(event_id)
        else:
            assert a.disorder_ms <= BOUND[p], (event_id, a.disorder_ms)
            most[p] = max(most[p], a.disorder_ms)
    assert beyond <= set(first)
    for source in SOURCES:
        p = source.partition
        info = m["sources"][source.name]
        assert len(listed[p]) == info["beyond_bound"] == 3
        assert {e["event_id"] for e in info["beyond_bound_events"]} == listed[p]
        assert {e["event_id"]: e["disorder_ms"] for e in info["beyond_bound_events"]} == {
            i: first[i].disorder_ms for i in listed[p]
        }
        assert info["max_disorder_ms"] == most[p]
    # ...and each source uses its bound: its disorder reaches well into it
    assert most[0] >= 50 and most[1] >= 15_000 and most[2] >= 5_000, dict(most)


@pytest.mark.parametrize("seed", [0, 5, 9])
def test_duplicates_repeat_an_earlier_within_bound_line_verbatim(tmp_path: Path, seed: int) -> None:
    feed = write(tmp_path, seed)
    m = feed.manifest
    seen: dict[str, Arrival] = {}
    repeated: list[str] = []
    for a in feed.valid:
        earlier = seen.get(a.parsed.event_id)
        if earlier is None:
            seen[a.parsed.event_id] = a
            continue
        repeated.append(a.parsed.event_id)
        assert a.text == earlier.text
        assert a.mtime_ms > earlier.mtime_ms or a.file == earlier.file
    assert sorted(repeated) == m["duplicate_event_ids"]
    assert not set(repeated) & set(m["beyond_bound_event_ids"])
    for source in SOURCES:
        ids = m["sources"][source.name]["duplicate_event_ids"]
        assert len(ids) == 2 and all(i.startswith(source.name + "-") for i in ids)


@pytest.mark.parametrize("seed", range(6))
def test_every_source_joins_early_and_never_falls_silent(tmp_path: Path, seed: int) -> None:
    """What keeps the watermark's minimum rule honest: the poller's first page is the first
    file, every source sends before the poller's second poll (26 s or more after the start: the
    watermark stays below the start until then), and no source is silent for the idle timeout
    until it is done."""
    feed = write(tmp_path, seed)
    arrivals: dict[int, list[int]] = defaultdict(list)
    for a in feed.valid:
        arrivals[a.parsed.partition].append(a.mtime_ms)
    assert feed.valid[0].parsed.partition == 1 and feed.valid[0].mtime_ms == feed.mtimes_ms[0]
    for p, times in arrivals.items():
        assert times[0] - START_MS <= 22_500, p
        gaps = [b - a for a, b in pairwise(sorted(set(times)))]
        assert max(gaps) < IDLE_TIMEOUT_MS // 2, (p, max(gaps))


def test_rerun_replaces_only_its_own_files(tmp_path: Path) -> None:
    out = tmp_path / "feed"
    generate(str(out), 1, START, 400_000)
    (out / "keep.txt").write_text("mine")
    generate(str(out), 2, START, DURATION_MS)  # a shorter feed: fewer files
    again = tmp_path / "again"
    generate(str(again), 2, START, DURATION_MS)
    mine = snapshot(out)
    assert mine.pop("keep.txt")[0] == b"mine"
    assert mine == snapshot(again)


def test_bad_arguments_stop_before_writing(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        generate(str(tmp_path / "naive"), 1, datetime(2026, 11, 21), DURATION_MS)  # noqa: DTZ001
    with pytest.raises(ValueError, match="at least 3m"):
        generate(str(tmp_path / "short"), 1, START, MIN_DURATION_MS - 1)
    assert not (tmp_path / "naive").exists() and not (tmp_path / "short").exists()
    feed = write(tmp_path, 1, duration_ms=MIN_DURATION_MS)  # the shortest feed still works
    assert len(feed.manifest["beyond_bound_event_ids"]) == 9


# -- the command line -------------------------------------------------------------------------
def test_cli_three_sources_profile_writes_the_generators_feed(tmp_path: Path, tally_cli) -> None:
    out = tmp_path / "cli"
    code = tally_cli(
        [
            "generate",
            "--profile",
            "three-sources",
            "--out",
            str(out),
            "--seed",
            "4",
            "--start",
            "2026-11-21T23:58:30Z",
            "--duration",
            "4m",
        ]
    )
    assert code == 0
    generate(str(tmp_path / "direct"), 4, START, 240_000)
    assert snapshot(out) == snapshot(tmp_path / "direct")
    # the profile's own default duration: 3 minutes
    assert tally_cli(["generate", "--profile", "three-sources", "--out", str(tmp_path / "d")]) == 0
    default = json.loads((tmp_path / "d" / "_manifest.json").read_text())
    assert (default["duration_ms"], default["seed"]) == (180_000, 7)
    assert default["start"] == "2026-11-20T00:00:00.000Z"


def _with_cli_defaults(out: Path, events: int, **more: Any) -> dict[str, Any]:
    """tally_tools.generate with the default profile's documented flag defaults."""
    from tally_tools.generate import generate as generate_default

    return generate_default(
        str(out),
        events=events,
        partitions=8,
        seed=7,
        start=datetime(2026, 11, 20, tzinfo=UTC),
        duration_ms=86_400_000,
        files=None,
        keys=1000,
        **more,
    )


def test_cli_default_profile_is_unchanged(tmp_path: Path, tally_cli) -> None:
    """No --profile: the same bytes as tally_tools.generate with the flags' documented defaults."""
    assert tally_cli(["generate", "--out", str(tmp_path / "cli"), "--events", "3000"]) == 0
    _with_cli_defaults(tmp_path / "direct", 3000)
    assert snapshot(tmp_path / "cli") == snapshot(tmp_path / "direct")
    argv = [
        "generate",
        "--profile",
        "default",
        "--out",
        str(tmp_path / "named"),
        "--events",
        "3000",
    ]
    assert tally_cli(argv) == 0
    assert snapshot(tmp_path / "named") == snapshot(tmp_path / "direct")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--events", "100"], "--events: not with --profile three-sources"),
        (["--partitions", "3", "--keys", "9"], "--partitions, --keys: not with --profile"),
        (["--duration", "1m"], "duration must be at least 3m"),
        (["--currencies", "JPY"], "--currencies: not with --profile"),
    ],
)
def test_cli_three_sources_refuses_what_does_not_apply(
    tmp_path: Path, tally_cli, capsys, flags: list[str], message: str
) -> None:
    out = tmp_path / "refused"
    argv = ["generate", "--profile", "three-sources", "--out", str(out), *flags]
    assert tally_cli(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("tally: bad setting: ") and message in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_cli_late_poller_is_a_variant_of_the_three_sources_only(
    tmp_path: Path, tally_cli, capsys
) -> None:
    refused = tmp_path / "refused"
    assert tally_cli(["generate", "--late-poller", "--out", str(refused)]) == 2
    assert "--late-poller: only with --profile three-sources" in capsys.readouterr().err
    assert not refused.exists()
    out = tmp_path / "late"
    argv = ["generate", "--profile", "three-sources", "--late-poller", "--out", str(out)]
    assert tally_cli(argv) == 0
    assert "--expected-partitions 0-2" in capsys.readouterr().out
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["late_poller"] is True
    assert manifest["first_heard"]["poller"] > manifest["first_heard"]["radar"]


def test_cli_currencies(tmp_path: Path, tally_cli, capsys) -> None:
    """`--currencies` is the generator's, checked before anything is written (one line)."""
    argv = ["generate", "--out", str(tmp_path / "cli"), "--events", "300", "--currencies"]
    assert tally_cli([*argv, "JPY:2,BHD"]) == 0
    direct = _with_cli_defaults(tmp_path / "direct", 300, currencies={"JPY": 2, "BHD": 1})
    assert snapshot(tmp_path / "cli") == snapshot(tmp_path / "direct")
    assert set(direct["currencies"]) == {"JPY", "BHD"}
    capsys.readouterr()
    refused = ["generate", "--out", str(tmp_path / "refused"), "--currencies", "JPY,yen"]
    assert tally_cli(refused) == 2
    err = capsys.readouterr().err
    assert err == (
        "tally: bad setting: currencies: currency: expected a 3-letter upper-case ISO 4217 "
        "code, got 'yen'\n"
    )
    assert not (tmp_path / "refused").exists()
