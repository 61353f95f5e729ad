"""The synthetic stream generator: counted properties of the files it writes (pure Python)."""

from __future__ import annotations

import json
import os
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from tally_tools.generate import MALFORMED_KINDS, generate

START = datetime(2026, 11, 20, tzinfo=UTC)
START_MS = int(START.timestamp() * 1000)
HOUR_MS = 3_600_000
KNOWN = ("event_id", "key", "amount", "event_time", "partition")
ZONED_ISO = re.compile(
    r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}(:?\d{2})?)$"
)
# The main fixture: enough events for stable statistics, slices far shorter than 5 minutes.
PARAMS: dict[str, Any] = dict(
    events=20_000,
    partitions=8,
    seed=11,
    start=START,
    duration_ms=2 * HOUR_MS,
    files=240,
    keys=200,
    progress=False,
)


def iso_ms(text: str) -> int:
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    assert value.tzinfo is not None, text
    return (value - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)


def classify(line: str) -> tuple[str | None, dict[str, Any] | None]:
    """Independent contract check: (malformed kind or None, parsed object if valid)."""
    if line.strip() == "":
        return "empty_line", None
    try:
        obj = json.loads(line)
    except json.JSONDecodeError:
        return "invalid_json", None
    if not isinstance(obj, dict):
        return "non_object", None
    if not isinstance(obj.get("event_id"), str) or not obj["event_id"].strip():
        return "missing_event_id", None
    if not isinstance(obj.get("key"), str) or not obj["key"].strip():
        return "missing_key", None
    amount = obj.get("amount")
    if isinstance(amount, bool) or not isinstance(amount, int):
        return "amount_not_integer", None
    when = obj.get("event_time")
    if isinstance(when, bool) or not isinstance(when, int | str):
        return "bad_event_time", None
    if isinstance(when, str):
        if not ZONED_ISO.match(when):
            return "bad_event_time", None
        try:
            iso_ms(when)
        except ValueError:
            return "bad_event_time", None
    part = obj.get("partition", 0)
    if isinstance(part, bool) or not isinstance(part, int):
        return "partition_not_integer", None
    return None, obj


def event_ms(obj: dict[str, Any]) -> int:
    when = obj["event_time"]
    return when if isinstance(when, int) else iso_ms(when)


@dataclass
class Valid:
    obj: dict[str, Any]
    line: str
    file: int
    pos: int  # line number within the file
    mtime_ms: int

    @property
    def delay_ms(self) -> int:
        return self.mtime_ms - event_ms(self.obj)


@dataclass
class Stream:
    manifest: dict[str, Any]
    names: list[str]
    mtimes_ns: list[int]
    lines: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    valid: list[Valid] = field(default_factory=list)
    first: dict[str, Valid] = field(default_factory=dict)  # event_id -> first arrival

    @property
    def unique(self) -> list[Valid]:
        return list(self.first.values())


def read_stream(out: Path) -> Stream:
    manifest = json.loads((out / "_manifest.json").read_text())
    names = sorted(p.name for p in out.iterdir() if not p.name.startswith("_"))
    stream = Stream(manifest, names, [os.stat(out / n).st_mtime_ns for n in names])
    for index, name in enumerate(names):
        mtime_ms = stream.mtimes_ns[index] // 1_000_000
        text = (out / name).read_text()
        assert text == "" or text.endswith("\n")
        for pos, line in enumerate(text.split("\n")[:-1]):
            stream.lines += 1
            kind, obj = classify(line)
            if kind is not None:
                stream.kinds[kind] += 1
                continue
            assert obj is not None
            record = Valid(obj, line, index, pos, mtime_ms)
            stream.valid.append(record)
            stream.first.setdefault(obj["event_id"], record)
    return stream


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("stream") / "in"
    generate(out=str(path), **PARAMS)
    return path


@pytest.fixture(scope="module")
def stream(out: Path) -> Stream:
    return read_stream(out)


def snapshot(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


# --- determinism ---------------------------------------------------------------------------


def test_same_seed_is_byte_identical(out: Path, tmp_path: Path) -> None:
    again = generate(out=str(tmp_path / "again"), **PARAMS)
    first, second = snapshot(out), snapshot(tmp_path / "again")
    assert list(first) == list(second)
    assert len(first) == PARAMS["files"] + 1  # + _manifest.json
    for name in first:
        assert first[name] == second[name], name
    mtimes = [os.stat(out / n).st_mtime_ns for n in first]
    assert mtimes == [os.stat(tmp_path / "again" / n).st_mtime_ns for n in first]
    assert again == json.loads((out / "_manifest.json").read_text())


def test_different_seed_differs(out: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    generate(out=str(other), **{**PARAMS, "seed": PARAMS["seed"] + 1})
    first, second = snapshot(out), snapshot(other)
    assert list(first) == list(second)
    differing = sum(first[n] != second[n] for n in first)
    assert differing > len(first) // 2


def test_start_in_another_zone_is_the_same_instant(tmp_path: Path) -> None:
    small = {**PARAMS, "events": 300, "files": 5}
    a, b = tmp_path / "a", tmp_path / "b"
    generate(out=str(a), **small)
    ist = timezone(timedelta(hours=5, minutes=30))
    generate(out=str(b), **{**small, "start": START.astimezone(ist)})
    assert snapshot(a) == snapshot(b)


def test_naive_start_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="timezone"):
        generate(out=str(tmp_path / "x"), **{**PARAMS, "start": datetime(2026, 11, 20)})  # noqa: DTZ001


# --- files ---------------------------------------------------------------------------------


def test_files_are_in_arrival_order(stream: Stream) -> None:
    m = stream.manifest
    assert len(stream.names) == m["files"] == PARAMS["files"]
    assert stream.names == [f"arrival-{i:06d}.jsonl" for i in range(m["files"])]
    assert all(a < b for a, b in pairwise(stream.mtimes_ns))
    assert stream.lines == m["lines"]
    # mtimes are simulated from `start`, never the wall clock
    first_arrival, last_arrival = iso_ms(m["first_arrival"]), iso_ms(m["last_arrival"])
    slice_ms = m["slice_ms"]
    assert START_MS <= first_arrival < stream.mtimes_ns[0] // 1_000_000
    last_mtime = stream.mtimes_ns[-1] // 1_000_000
    assert last_mtime - slice_ms - 1 <= last_arrival < last_mtime
    assert last_mtime < START_MS + PARAMS["duration_ms"] + 40 * 60_000


def test_every_slice_is_equally_long(stream: Stream) -> None:
    gaps = [b - a for a, b in pairwise(stream.mtimes_ns)]
    slice_ns = stream.manifest["slice_ms"] * 1_000_000
    assert all(abs(g - slice_ns) <= 1_000_000 for g in gaps)


def test_lines_within_a_file_follow_arrival(stream: Stream) -> None:
    # Arrival is not written, but arrival >= event time: a line arrives after every earlier line,
    # so after the newest event time seen so far in its file. Only delayed events (lagging
    # partition, heavy tail, bursts, replays) may sit far below that running maximum; in a
    # shuffled file most lines would.
    ahead = set(stream.manifest["clock_ahead_event_ids"])
    below = total = 0
    newest: dict[int, int] = {}
    for v in stream.valid:
        t = event_ms(v.obj)
        total += 1
        below += newest.get(v.file, t) - t > 3_000
        if v.obj["event_id"] not in ahead:
            newest[v.file] = max(newest.get(v.file, t), t)
    share_delayed = 1 / PARAMS["partitions"] + 0.02 + 0.005 + 0.01
    assert below / total < share_delayed
    assert below / total > 0.02


def test_auto_file_count_and_empty_slices(tmp_path: Path) -> None:
    m = generate(out=str(tmp_path / "auto"), **{**PARAMS, "events": 4500, "files": None})
    assert m["files"] == 2
    assert len(list((tmp_path / "auto").glob("arrival-*.jsonl"))) == 2
    tiny = generate(out=str(tmp_path / "tiny"), **{**PARAMS, "events": 3, "files": 50})
    names = sorted((tmp_path / "tiny").glob("arrival-*.jsonl"))
    assert len(names) == 50 == tiny["files"]
    assert sum(len(p.read_text().splitlines()) for p in names) == tiny["lines"] == 3
    assert sum(p.stat().st_size == 0 for p in names) >= 47
    mtimes = [p.stat().st_mtime_ns for p in names]
    assert all(a < b for a, b in pairwise(mtimes))
    none = generate(out=str(tmp_path / "none"), **{**PARAMS, "events": 0, "files": None})
    assert none["files"] == 1 and none["lines"] == 0
    assert (tmp_path / "none" / "arrival-000000.jsonl").read_text() == ""


def test_rerun_replaces_previous_files_only(tmp_path: Path) -> None:
    target = tmp_path / "re"
    generate(out=str(target), **{**PARAMS, "events": 500, "files": 10})
    (target / "notes.txt").write_text("keep me")
    generate(out=str(target), **{**PARAMS, "events": 500, "files": 3})
    assert sorted(p.name for p in target.iterdir()) == [
        "_manifest.json",
        "arrival-000000.jsonl",
        "arrival-000001.jsonl",
        "arrival-000002.jsonl",
        "notes.txt",
    ]


def test_progress_only_for_large_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    generate(out=str(tmp_path / "q"), **{**PARAMS, "events": 5000, "progress": True})
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""
    big = {**PARAMS, "events": 100_000, "files": 20, "progress": True}
    generate(out=str(tmp_path / "p"), **big)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert 10 <= len(captured.err.splitlines()) <= 25
    assert "100%" in captured.err


# --- contract ------------------------------------------------------------------------------


def test_valid_and_malformed_lines_are_counted(stream: Stream) -> None:
    m = stream.manifest
    assert m["valid_events"] == PARAMS["events"]
    assert len(stream.valid) == m["valid_events"] + m["duplicates"]
    assert len(stream.first) == m["valid_events"]
    assert dict(stream.kinds) == {k: v for k, v in m["malformed_by_kind"].items() if v}
    assert set(stream.kinds) == set(MALFORMED_KINDS)
    assert sum(stream.kinds.values()) == m["malformed_lines"]
    assert m["lines"] == m["valid_events"] + m["duplicates"] + m["malformed_lines"]
    assert 0.001 < m["malformed_lines"] / m["lines"] < 0.004


def assert_malformed_variants(out: Path) -> None:
    raw = [line for p in sorted(out.glob("arrival-*.jsonl")) for line in p.read_text().split("\n")]
    bad_amounts = [
        json.loads(line)["amount"]
        for line in raw
        if line and classify(line)[0] == "amount_not_integer"
    ]
    assert any(isinstance(a, float) for a in bad_amounts)
    assert any(isinstance(a, str) for a in bad_amounts)
    bad_times = [
        json.loads(line)["event_time"]
        for line in raw
        if line and classify(line)[0] == "bad_event_time"
    ]
    zoneless = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")
    assert any(zoneless.fullmatch(t) for t in bad_times)
    assert any(not zoneless.fullmatch(t) for t in bad_times)  # text like "yesterday"
    non_objects = [json.loads(line) for line in raw if line and classify(line)[0] == "non_object"]
    assert non_objects and not any(isinstance(x, dict) for x in non_objects)


def test_malformed_variants(out: Path) -> None:
    assert_malformed_variants(out)


def test_every_kind_appears_from_2000_events(tmp_path: Path) -> None:
    m = generate(out=str(tmp_path / "k"), **{**PARAMS, "events": 2000, "files": 4})
    assert all(m["malformed_by_kind"][k] >= 1 for k in MALFORMED_KINDS)
    assert m["clock_ahead_events"] >= 1
    stream = read_stream(tmp_path / "k")
    assert set(stream.kinds) == set(MALFORMED_KINDS)
    assert_malformed_variants(tmp_path / "k")


def test_line_format(stream: Stream) -> None:
    for v in stream.valid[:2000]:
        keys = list(v.obj)
        known = [k for k in keys if k in KNOWN]
        assert known == [k for k in KNOWN if k in v.obj]  # contract keys first, in order
        assert keys[: len(known)] == known
        assert v.line == json.dumps(v.obj, separators=(",", ":"))
        assert re.fullmatch(r"e-\d{8}", v.obj["event_id"])
        assert re.fullmatch(r"merchant-\d+", v.obj["key"])


def test_amounts(stream: Stream) -> None:
    amounts = [v.obj["amount"] for v in stream.unique]
    assert all(type(a) is int for a in amounts)
    assert sum(amounts) == stream.manifest["amount_total"]
    negative = sum(a < 0 for a in amounts)
    assert 0.03 < negative / len(amounts) < 0.07
    assert all(100 <= abs(a) <= 500_000 for a in amounts)
    assert statistics.median(abs(a) for a in amounts) < statistics.mean(abs(a) for a in amounts)


def test_event_time_forms(stream: Stream) -> None:
    epoch = sum(isinstance(v.obj["event_time"], int) for v in stream.unique)
    assert epoch == stream.manifest["epoch_ms_time_events"]
    assert 0.02 < epoch / len(stream.unique) < 0.04
    iso = [v.obj["event_time"] for v in stream.unique if isinstance(v.obj["event_time"], str)]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", t) for t in iso)
    ahead = set(stream.manifest["clock_ahead_event_ids"])
    times = [event_ms(v.obj) for v in stream.unique if v.obj["event_id"] not in ahead]
    assert min(times) >= START_MS and max(times) < START_MS + PARAMS["duration_ms"]


def test_partitions_skew_and_omissions(stream: Stream) -> None:
    m = stream.manifest
    counts = Counter(v.obj.get("partition", 0) for v in stream.unique)
    assert {str(p): counts[p] for p in range(PARAMS["partitions"])} == m["events_by_partition"]
    assert m["skewed_partition"] == 0
    assert counts[0] / len(stream.unique) > 0.25
    assert counts[0] > 2 * max(counts[p] for p in range(1, PARAMS["partitions"]))
    omitted = sum("partition" not in v.obj for v in stream.unique)
    assert omitted == m["omitted_partition_events"]
    assert 0.07 < omitted / len(stream.unique) < 0.13


def test_key_popularity_is_skewed(stream: Stream) -> None:
    counts = Counter(v.obj["key"] for v in stream.unique)
    ranked = [n for _, n in counts.most_common()]
    assert len(counts) <= PARAMS["keys"]
    assert ranked[0] > 10 * statistics.median(ranked)


def test_extra_fields(stream: Stream) -> None:
    extra = [v for v in stream.unique if set(v.obj) - set(KNOWN)]
    assert len(extra) == stream.manifest["extra_field_events"]
    assert 0.07 < len(extra) / len(stream.unique) < 0.13
    regions = Counter(v.obj.get("region") for v in extra)
    assert regions["ap-south"] > 0 and len(regions) >= 3
    assert any("device" in v.obj for v in extra)


# --- disorder ------------------------------------------------------------------------------


def test_duplicates_are_verbatim_and_later(stream: Stream) -> None:
    ids = Counter(v.obj["event_id"] for v in stream.valid)
    repeated = sum(n - 1 for n in ids.values())
    assert repeated == stream.manifest["duplicates"] > 0
    assert 0.003 < repeated / PARAMS["events"] < 0.007
    later_files = 0
    for v in stream.valid:
        original = stream.first[v.obj["event_id"]]
        if v is original:
            continue
        assert v.line == original.line
        assert (v.file, v.pos) > (original.file, original.pos)
        later_files += v.file > original.file
    assert later_files > repeated // 2


def test_delay_distribution(stream: Stream) -> None:
    m = stream.manifest
    ahead = set(m["clock_ahead_event_ids"])
    delays = sorted(v.delay_ms for v in stream.unique if v.obj["event_id"] not in ahead)
    assert delays[0] > 0  # the file's mtime closes its slice: after every arrival in it
    assert statistics.median(delays) < m["slice_ms"] + 3_000
    assert delays[int(len(delays) * 0.995)] > 60_000
    assert max(delays) < 31 * 60_000 + m["slice_ms"] + 60_000
    # The tail alone: without the lagging partition and the bursting region, a delay measured
    # from the slice end beyond 60 s + one slice is a true delay beyond 60 s.
    plain = sorted(
        v.delay_ms
        for v in stream.unique
        if v.obj["event_id"] not in ahead
        and v.obj.get("partition", 0) != m["lagging_partition"]
        and v.obj.get("region") != m["burst_region"]
    )
    assert plain[int(len(plain) * 0.995)] > 60_000 + m["slice_ms"]
    assert plain[int(len(plain) * 0.97)] < 10_000 + m["slice_ms"]
    heavy = sum(d > 60_000 + m["slice_ms"] for d in plain)
    assert heavy <= m["heavy_tail_events"]
    assert heavy > 0.4 * m["heavy_tail_events"]
    assert 0.015 < m["heavy_tail_events"] / PARAMS["events"] < 0.025


def test_lagging_partition(stream: Stream) -> None:
    lag = stream.manifest["lagging_partition"]
    assert lag == PARAMS["partitions"] - 1
    ahead = set(stream.manifest["clock_ahead_event_ids"])
    by_part: dict[int, list[int]] = {}
    for v in stream.unique:
        if v.obj["event_id"] not in ahead:
            by_part.setdefault(v.obj.get("partition", 0), []).append(v.delay_ms)
    lagging = statistics.median(by_part.pop(lag))
    others = [statistics.median(d) for d in by_part.values()]
    assert lagging - max(others) > 30_000
    assert lagging - statistics.median(others) < 60_000


def test_idle_partition(stream: Stream) -> None:
    m = stream.manifest
    idle = m["idle_partition"]
    assert idle == 1
    lo, hi = iso_ms(m["idle_from"]), iso_ms(m["idle_until"])
    assert 0.08 * PARAMS["duration_ms"] <= hi - lo <= 0.12 * PARAMS["duration_ms"]
    times = [event_ms(v.obj) for v in stream.valid if v.obj.get("partition", 0) == idle]
    assert sum(lo <= t < hi for t in times) == 0
    assert sum(t < lo for t in times) > 100 and sum(t >= hi for t in times) > 100
    # the others keep producing through the gap
    assert sum(lo <= event_ms(v.obj) < hi for v in stream.unique) > 0.05 * len(stream.unique)


def test_clock_ahead_events_are_exact(stream: Stream) -> None:
    m = stream.manifest
    assert m["slice_ms"] < 5 * 60_000  # makes the check below exact
    found = {eid for eid, v in stream.first.items() if event_ms(v.obj) > v.mtime_ms + 5 * 60_000}
    assert len(found) == m["clock_ahead_events"] >= 1
    assert found == set(m["clock_ahead_event_ids"])
    for eid in found:
        v = stream.first[eid]
        assert event_ms(v.obj) <= v.mtime_ms + 60 * 60_000


def test_bursts_release_at_period_end(stream: Stream) -> None:
    m = stream.manifest
    periods = [(iso_ms(a), iso_ms(b)) for a, b in m["bursts"]]
    assert 3 <= len(periods) <= 5
    assert all(b - a == min(600_000, PARAMS["duration_ms"] // 20) for a, b in periods)
    held = [
        (v, end)
        for v in stream.unique
        if v.obj.get("region") == m["burst_region"]
        for start, end in periods
        if start <= event_ms(v.obj) < end
    ]
    assert len(held) == m["burst_events"] > 0
    assert all(v.mtime_ms > end for v, end in held)
    # released together: most of a period's events land in the file whose slice holds its end
    together = 0
    for _, end in periods:
        release = min(t for t in (n // 1_000_000 for n in stream.mtimes_ns) if t > end)
        together += sum(v.mtime_ms == release for v, e in held if e == end)
    assert together > 0.7 * len(held)


def test_small_partition_counts(tmp_path: Path) -> None:
    one = generate(out=str(tmp_path / "p1"), **{**PARAMS, "events": 3000, "partitions": 1})
    assert one["lagging_partition"] is None and one["idle_partition"] is None
    assert one["idle_from"] is None and one["idle_until"] is None
    assert one["events_by_partition"] == {"0": 3000}
    two = generate(out=str(tmp_path / "p2"), **{**PARAMS, "events": 3000, "partitions": 2})
    assert two["lagging_partition"] is None and two["idle_partition"] is None
    assert sum(two["events_by_partition"].values()) == 3000
    three = generate(out=str(tmp_path / "p3"), **{**PARAMS, "events": 3000, "partitions": 3})
    assert (three["skewed_partition"], three["idle_partition"], three["lagging_partition"]) == (
        0,
        1,
        2,
    )
    parsed = read_stream(tmp_path / "p3")
    assert parsed.manifest == three
    assert all(0 <= v.obj.get("partition", 0) < 3 for v in parsed.valid)


# --- currencies ----------------------------------------------------------------------------


def test_currencies_are_drawn_per_key_and_change_nothing_else(tmp_path: Path) -> None:
    """With `currencies` each key books one currency (by weight), the lines name it right after
    the amount, the manifest counts events and amount per currency; every other byte of the
    feed is what the same seed writes without currencies."""
    small = {**PARAMS, "events": 2_000, "files": 10, "keys": 40}
    plain, priced = tmp_path / "plain", tmp_path / "priced"
    generate(out=str(plain), **small)
    weights = {"USD": 3, "JPY": 1, "BHD": 1}
    manifest = generate(out=str(priced), **small, currencies=weights)
    currency_of: dict[str, str] = {}
    totals: Counter[tuple[str, str]] = Counter()
    for name, text in snapshot(priced).items():
        if name.startswith("_"):
            continue
        without = re.sub(rb',"currency":"[A-Z]{3}"', b"", text)
        assert without == snapshot(plain)[name]
        for line in text.decode().splitlines():
            _kind, obj = classify(line)
            if obj is None:
                assert '"currency"' not in line  # malformed lines name none
                continue
            assert line.index('"currency"') == line.index('"amount"') + len(
                f'"amount":{obj["amount"]},'
            )
            assert currency_of.setdefault(obj["key"], obj["currency"]) == obj["currency"]
    assert set(currency_of.values()) == set(weights)
    assert Counter(currency_of.values())["USD"] > len(currency_of) / 3  # weight 3 of 5
    first = read_stream(priced).first
    for event in first.values():
        code = currency_of[event.obj["key"]]
        totals[(code, "events")] += 1
        totals[(code, "amount_total")] += event.obj["amount"]
    assert manifest["currencies"] == {
        code: {"events": totals[(code, "events")], "amount_total": totals[(code, "amount_total")]}
        for code in sorted(weights)
    }
    assert sum(c["events"] for c in manifest["currencies"].values()) == manifest["events"]
    assert generate(out=str(plain), **small)["currencies"] == {}


@pytest.mark.parametrize(
    ("text", "weights", "error"),
    [
        ("USD", {"USD": 1}, None),
        ("USD:3,EUR,JPY:2", {"USD": 3, "EUR": 1, "JPY": 2}, None),
        ("usd", None, "upper-case"),  # a mistake to report, not to mend
        ("USD,DEM", None, "not a current ISO 4217"),
        ("USD,USD", None, "named twice"),
        ("USD:0", None, "positive integer"),
        ("USD:1.5", None, "positive integer"),
        ("", None, "upper-case"),
    ],
)
def test_parse_currencies(text: str, weights: dict[str, int] | None, error: str | None) -> None:
    from tally_tools.generate import parse_currencies

    if error is None:
        assert parse_currencies(text) == weights
    else:
        with pytest.raises(ValueError, match=error):
            parse_currencies(text)
