"""Three sources, three bounds, end to end: the seed scenario of per-source lateness.

`tally_tools.sources` writes a radar (partition 0, disorder within 100 ms), an HTTP poller (1, pages
of a poll every 25-30 s, newest first: within 30 s) and a satellite beacon (2, within 10 s),
plus three events per source beyond its bound, two duplicates and two malformed lines per
source; three minutes of event time across midnight (two business dates). The REAL stream
(`run_stream`, arrival clock, drain) runs it with `lateness_by_partition = 0=100ms,1=30s,2=10s`
and 10 s windows, then the nightly's reconcile and validation run for both dates.

What must hold: the books balance (no unexplained window), the late side output holds only
listed beyond-bound events, every within-bound event is counted on time, every input line is
an event or quarantined. The stream is the reference model row for row; the model then shows
why the per-source bounds matter (pure Python): one bound of 100 ms for all makes many
within-bound poller events late, one bound of 30 s for all keeps the watermark further
behind.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest
import reference_model as M
import stream_helpers as H

from tally.dates import epoch_ms
from tally_tools.sources import SOURCES, generate

SEED = 5
START = datetime(2026, 11, 21, 23, 58, 30, tzinfo=UTC)  # 3 minutes across midnight
DURATION_MS = 180_000
WINDOW_MS = 10_000
FILES_PER_BATCH = 10
DATES = (date(2026, 11, 21), date(2026, 11, 22))
NIGHTLY_NOW = datetime(2026, 11, 23, 1, 0, tzinfo=UTC)  # the nightly's run time, recorded
BOUNDS = {0: 100, 1: 30_000, 2: 10_000}
PER_SOURCE = M.Params(window_ms=WINDOW_MS, lateness_ms=10_000, lateness_by_partition=BOUNDS)
ONE_TIGHT_BOUND = M.Params(window_ms=WINDOW_MS, lateness_ms=100)
ONE_LOOSE_BOUND = M.Params(window_ms=WINDOW_MS, lateness_ms=30_000)
POLLER = 1
SOURCE_PARTITION = {source.name: source.partition for source in SOURCES}


@dataclass(frozen=True)
class Feed:
    directory: Path
    manifest: dict[str, Any]
    files: list[H.InputFile]  # in arrival order (mtime, name)

    @property
    def beyond(self) -> set[str]:
        return set(self.manifest["beyond_bound_event_ids"])

    def batches(self, files_per_batch: int) -> list[list[M.Line]]:
        """The micro-batches of the file source: the next `files_per_batch` files by mtime."""
        return [
            H.model_lines(self.files[i : i + files_per_batch])
            for i in range(0, len(self.files), files_per_batch)
        ]

    def batches_by_trigger(self, trigger_ms: int) -> list[list[M.Line]]:
        """The micro-batches of a live stream that keeps up, with a processing-time trigger:
        the files that arrived during each trigger interval."""
        groups: dict[int, list[H.InputFile]] = {}
        for f in self.files:
            groups.setdefault(f.mtime_ms // trigger_ms, []).append(f)
        return [H.model_lines(files) for _, files in sorted(groups.items())]


def write_feed(out: Path, seed: int, start: datetime = START, late_poller: bool = False) -> Feed:
    manifest = generate(str(out), seed, start, DURATION_MS, late_poller)
    files = []
    for path in sorted(out.glob("arrival-*.jsonl")):
        text = path.read_text(encoding="utf-8")
        mtime_ms = os.stat(path).st_mtime_ns // 1_000_000
        files.append(H.InputFile(path.name, mtime_ms, text.split("\n")[:-1]))
    files.sort(key=lambda f: (f.mtime_ms, f.name))
    return Feed(out, manifest, files)


def run_model(feed: Feed, params: M.Params, batching: str | int) -> M.ReferenceModel:
    """`batching`: files per batch (an int), or "trigger=MS" (a live stream's trigger)."""
    if isinstance(batching, str):
        trigger_ms = int(batching.removeprefix("trigger="))
        return M.run_model(feed.batches_by_trigger(trigger_ms), params, drain=True)
    return M.run_model(feed.batches(batching), params, drain=True)


def late_ids(events: Sequence[M.EventRow]) -> set[str]:
    return {e.event_id for e in events if e.arrival_status == M.LATE}


def within_bound_late(feed: Feed, model: M.ReferenceModel) -> Counter[int]:
    """Late events the feed kept within their source's bound, per partition."""
    late = {e.event_id: e.partition for e in model.events if e.arrival_status == M.LATE}
    return Counter(p for event_id, p in late.items() if event_id not in feed.beyond)


def mean_lag_ms(model: M.ReferenceModel) -> float:
    """Mean of now - watermark over the batches with a watermark (the drain has none)."""
    return statistics.mean(
        p.now_ms - p.watermark_after_ms for p in model.progress if p.watermark_after_ms is not None
    )


# -- the real stream and the nightly ------------------------------------------------------------
@pytest.fixture(scope="module")
def feed(tmp_path_factory: pytest.TempPathFactory) -> Feed:
    return write_feed(tmp_path_factory.mktemp("three-sources") / "input", SEED)


@pytest.fixture(scope="module")
def run(spark, feed: Feed, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from batch.reconcile import reconcile
    from expectations.validate import validate_date
    from streaming.run import run_stream
    from tally.settings import Settings

    root = tmp_path_factory.mktemp("three-sources-run")
    settings = Settings(
        window=WINDOW_MS,
        lateness=10_000,
        lateness_by_partition="0=100ms,1=30s,2=10s",
        warehouse=str(root / "warehouse"),
        input=str(feed.directory),
        max_files_per_trigger=FILES_PER_BATCH,
        shuffle_partitions=2,
    )
    summary = run_stream(settings, available_now=True, drain=True, clock="arrival", spark=spark)
    warehouse = settings.warehouse
    results = {
        day: reconcile(spark, warehouse, day, WINDOW_MS, now=NIGHTLY_NOW, settings={})
        for day in DATES
    }
    outcomes = {
        day: validate_date(spark, warehouse, day, now=NIGHTLY_NOW, gx_root=str(root / "gx"))
        for day in DATES
    }
    return {
        "summary": summary,
        "out": H.read_outputs(spark, warehouse),
        "results": results,
        "outcomes": outcomes,
    }


def test_the_feed_spans_the_two_dates(feed: Feed) -> None:
    m = feed.manifest
    assert m["first_event_time"].startswith("2026-11-21T23:58:")
    assert m["last_event_time"].startswith("2026-11-22T00:01:")
    assert 2_000 <= m["events"] <= 5_000
    assert len(feed.files) == m["files"]
    assert len(feed.batches(FILES_PER_BATCH)) <= 9  # the Spark run stays small


def test_the_books_balance_on_both_dates(run: dict[str, Any], feed: Feed) -> None:
    results = run["results"]
    for day, result in results.items():
        assert result.balanced, (day, result.describe())
        assert result.unexplained_windows == 0
        assert result.late_repeats == 0
    summaries = [r.summary for r in results.values()]
    # every event is a tumbling window's on exactly one date: the two dates hold them all
    assert sum(s["batch_count"] for s in summaries) == feed.manifest["valid_events"]
    assert sum(s["batch_amount"] for s in summaries) == feed.manifest["amount_total"]
    late = run["out"].late_events
    assert sum(s["explained_count"] for s in summaries) == len(late)
    assert sum(s["explained_amount"] for s in summaries) == sum(e.amount for e in late)
    stream = sum(s["stream_amount"] for s in summaries)
    assert stream + sum(e.amount for e in late) == feed.manifest["amount_total"]
    assert "(drained)" in run["summary"]


def test_only_listed_beyond_bound_events_are_late(run: dict[str, Any], feed: Feed) -> None:
    late = {e.event_id for e in run["out"].late_events}
    assert late  # the side output is exercised: most listed events arrive 90-120 s behind
    assert late <= feed.beyond
    assert {e.partition for e in run["out"].late_events} == {0, 1, 2}  # each source
    assert late == late_ids(run["out"].events)  # tumbling: one row per late event


def test_every_within_bound_event_is_counted_on_time(run: dict[str, Any], feed: Feed) -> None:
    events = run["out"].events
    first: dict[str, M.EventRow] = {}
    copies: list[str] = []
    for e in sorted(events, key=lambda e: (e.batch_id, e.source_file, e.source_line)):
        if e.event_id in first:
            copies.append(e.event_id)
            assert e.arrival_status == M.DUPLICATE
        else:
            first[e.event_id] = e
    assert sorted(copies) == feed.manifest["duplicate_event_ids"]
    statuses = Counter(e.arrival_status for i, e in first.items() if i not in feed.beyond)
    assert statuses == {M.ON_TIME: feed.manifest["valid_events"] - len(feed.beyond)}
    by_partition = Counter(e.partition for e in first.values())
    assert {str(p): n for p, n in by_partition.items()} == feed.manifest["events_by_partition"]


def test_every_input_line_is_an_event_or_quarantined(run: dict[str, Any], feed: Feed) -> None:
    out = run["out"]
    m = feed.manifest
    assert sum(p.input_lines for p in out.progress) == m["lines"]
    assert sum(p.valid_events + p.quarantined_lines for p in out.progress) == m["lines"]
    assert len(out.events) == m["valid_events"] + m["duplicates"]
    assert len(out.quarantine) == m["malformed_lines"]
    assert dict(Counter(q.reason for q in out.quarantine)) == m["malformed_by_reason"]
    lines = {(e.source_file, e.source_line) for e in out.events}
    lines |= {(q.source_file, q.source_line) for q in out.quarantine}
    assert len(lines) == m["lines"]


def test_the_stream_is_the_reference_model(run: dict[str, Any], feed: Feed) -> None:
    """Row for row, batch for batch: the file source cut the feed into the batches the model
    was given (FILES_PER_BATCH files by mtime), and no partition was ever idle."""
    spark_out = run["out"]
    want = H.model_outputs(run_model(feed, PER_SOURCE, FILES_PER_BATCH))
    for name in ("events", "quarantine", "late_events", "aggregates"):
        assert H.sort_rows(getattr(spark_out, name)) == H.sort_rows(getattr(want, name)), name
    assert spark_out.progress == want.progress
    assert not any(idle for p in spark_out.progress for _, idle in p.idle)
    assert [p.input_lines for p in spark_out.progress[:-1]] == [
        len(b) for b in feed.batches(FILES_PER_BATCH)
    ]


# An event the scenario holds back this long (a link drop: 90-120 s) is late whatever the
# batching: the watermark is at most one poll (<= 30 s) plus the poller's 30 s bound behind the
# arrival clock, and the event's 10 s window ended 80 s or more before it arrived.
HELD_BACK_MS = 90_000
# An event that arrives at most this far behind its time is on time whatever the batching:
# the watermark (a minimum over the sources) is at or below the poller's high-water mark minus
# its 30 s bound, so at least 30 s behind the arrival clock, and the event's window ends after
# the event.
NEVER_LATE_MS = max(BOUNDS.values())


def late_rate_range(feed: Feed, day: date) -> tuple[float, float]:
    """The late-event rate of `day` the scenario's definition allows: at least the held-back
    events of the day, at most its beyond-bound events (the manifest's list) that arrive more
    than NEVER_LATE_MS behind, over the day's events (counted from the feed's lines; the few
    malformed lines that carry an id widen the range)."""
    parsed: dict[str, str] = {}
    for f in feed.files:
        for line in f.lines:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict) and isinstance(obj.get("event_time"), str):
                parsed.setdefault(str(obj.get("event_id")), obj["event_time"])
    on_day = sum(datetime.fromisoformat(t).date() == day for t in parsed.values())
    malformed_with_id = len(parsed) - feed.manifest["valid_events"]
    assert 0 <= malformed_with_id <= feed.manifest["malformed_lines"]
    beyond = [
        b
        for source in feed.manifest["sources"].values()
        for b in source["beyond_bound_events"]
        if datetime.fromisoformat(b["event_time"]).date() == day
    ]
    held_back = [b for b in beyond if b["delay_ms"] >= HELD_BACK_MS]
    may_be_late = [b for b in beyond if b["delay_ms"] > NEVER_LATE_MS]
    return len(held_back) / on_day, len(may_be_late) / (on_day - malformed_with_id)


def expected_failed_checks(feed: Feed, day: date) -> set[tuple[str, str]]:
    """What validation must find on `day`, from the scenario and the default thresholds:
    the 0.1 % warning when even the held-back events exceed it, nothing when all the events
    that may be late stay under it; never the 1 % failure."""
    from tally.settings import Settings

    low, high = late_rate_range(feed, day)
    defaults = Settings()
    assert high <= defaults.late_rate_fail, (day, high)
    if low > defaults.late_rate_warn:
        return {("gap", "late_rate_warn")}
    assert high <= defaults.late_rate_warn, (day, low, high)  # else the scenario is undecided
    return set()


def test_validation_passes_on_both_dates(run: dict[str, Any], feed: Feed) -> None:
    expected = {day: expected_failed_checks(feed, day) for day in DATES}
    assert expected == {DATES[0]: {("gap", "late_rate_warn")}, DATES[1]: set()}  # seed 5
    for day, outcome in run["outcomes"].items():
        assert outcome.success, (day, outcome.describe())
        low, high = late_rate_range(feed, day)
        assert low <= run["results"][day].summary["late_event_rate"] <= high
        assert outcome.failed_checks() == expected[day], (day, outcome.describe())


# -- why per-source bounds: the same files through the reference model -------------------------
@pytest.mark.parametrize(("batching", "at_least"), [(1, 100), ("trigger=1000", 100), (10, 20)])
def test_one_tight_bound_makes_within_bound_poller_events_late(
    feed: Feed, batching: str | int, at_least: int
) -> None:
    """With 100 ms for every source, the poller's first page (its newest events) pulls the
    watermark up to the radar's pace, and the older pages of the same poll, in later batches,
    find their windows closed: late although they were within the poller's 30 s. It takes a
    poll split across batches: one file per batch, a live stream's 1 s trigger (the pages come
    150-400 ms apart), or, for some polls, the Spark run's 10 files per batch. The per-source
    bounds have none late in any batching."""
    assert FILES_PER_BATCH == 10  # the last case is the Spark run's batching
    tight = within_bound_late(feed, run_model(feed, ONE_TIGHT_BOUND, batching))
    per_source = within_bound_late(feed, run_model(feed, PER_SOURCE, batching))
    assert per_source == Counter()
    assert tight[POLLER] >= at_least, tight
    assert tight[0] == 0  # the radar's own disorder is within 100 ms


@pytest.mark.parametrize("batching", [1, FILES_PER_BATCH, "trigger=1000"])
def test_one_loose_bound_keeps_the_watermark_further_behind(
    feed: Feed, batching: str | int
) -> None:
    """With 30 s for every source nothing within bound is late either, but the watermark is
    never ahead of the per-source one (each hw_p - 30 s <= hw_p - L_p) and on average behind
    it: after each poll the satellite's or the radar's hw_p - 30 s is the minimum. The gain is
    small while the poller is active (it is the slowest source and sets the pace under either
    setting): one to four seconds of a ~40 s mean lag."""
    per_source = run_model(feed, PER_SOURCE, batching)
    loose = run_model(feed, ONE_LOOSE_BOUND, batching)
    assert within_bound_late(feed, loose) == Counter()
    assert late_ids(loose.events) <= late_ids(per_source.events)
    pairs = [
        (a.watermark_after_ms, b.watermark_after_ms)
        for a, b in zip(per_source.progress, loose.progress, strict=True)
        if a.watermark_after_ms is not None
    ]
    assert all(b is not None and b <= a for a, b in pairs)
    assert sum(b < a for a, b in pairs if b is not None) >= 3  # at least once per poll or so
    assert mean_lag_ms(loose) - mean_lag_ms(per_source) >= 1_000


@pytest.mark.parametrize("seed", range(8))
def test_per_source_bounds_make_only_listed_events_late_in_any_batching(
    tmp_path: Path, seed: int
) -> None:
    """The consequence of the minimum rule, over seeds and batch sizes: with no idle partition
    and no clock skew, an event at most L_p behind its partition's high-water mark is never
    late; the tight single bound breaks it on every seed."""
    feed = write_feed(tmp_path / "input", seed)
    for batching in (1, 2, 5, 13, "trigger=1000", "trigger=5000"):
        model = run_model(feed, PER_SOURCE, batching)
        assert within_bound_late(feed, model) == Counter(), batching
        assert late_ids(model.events) <= feed.beyond
        assert not any(idle for p in model.progress for _, idle in p.idle)
        statuses = Counter(e.arrival_status for e in model.events)
        assert statuses[M.DUPLICATE] == feed.manifest["duplicates"]
    tight = within_bound_late(feed, run_model(feed, ONE_TIGHT_BOUND, 1))
    assert tight[POLLER] >= 50, tight


# -- a source first heard late: the late-poller variant -----------------------------------------
# 3 s into a 10 s window: the window holding the feed's first seconds closes while the radar
# alone is heard (its watermark is ~10 s behind the start after its second file).
LATE_POLLER_START = datetime(2026, 11, 21, 23, 58, 33, tzinfo=UTC)
WAITING_FOR_ALL = dataclasses.replace(PER_SOURCE, expected_partitions=frozenset(BOUNDS))


@pytest.mark.parametrize("seed", range(4))
def test_a_source_first_heard_late_needs_expected_partitions(tmp_path: Path, seed: int) -> None:
    """The poller is first heard 25-28 s after the start, the radar and the satellite within
    the first ~15 s. Over the partitions seen so far, the radar alone moves the watermark past
    the first window before the others report: their first events are late although within
    their bounds, in every batching that hands the radar's files over before theirs. Waiting
    for all three partitions, again only listed events are late."""
    feed = write_feed(tmp_path / "input", seed, LATE_POLLER_START, late_poller=True)
    start_ms = epoch_ms(LATE_POLLER_START)
    heard = {
        SOURCE_PARTITION[name]: epoch_ms(datetime.fromisoformat(iso)) - start_ms
        for name, iso in feed.manifest["first_heard"].items()
    }
    assert heard[POLLER] >= 25_000 > max(heard[0], heard[2])
    for batching in (1, 2, "trigger=1000"):
        seen_so_far = run_model(feed, PER_SOURCE, batching)
        late = {
            e.event_id: e
            for e in seen_so_far.events
            if e.arrival_status == M.LATE and e.event_id not in feed.beyond
        }
        assert Counter(e.partition for e in late.values())[POLLER] >= 10, batching
        # each happened before its source was first heard: late only for being unheard
        assert all(e.event_time_ms - start_ms < heard[e.partition] for e in late.values())
        waiting = run_model(feed, WAITING_FOR_ALL, batching)
        assert within_bound_late(feed, waiting) == Counter(), batching
        assert late_ids(waiting.events) <= feed.beyond
        assert waiting.progress[0].watermark_after_ms is None  # nothing moves before all report
