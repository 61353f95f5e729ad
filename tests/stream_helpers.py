"""The speed layer's test helpers, one module: the input contract, the real job run over
hand-made micro-batches, one read-back layer over the stream's tables, random streams, and a
supervised `tally stream` process.

* The input contract is parsed in plain Python, independently of tally/events.py
  (`classify_line`, `read_input`).
* `run_processor` runs the real speed layer (`BatchProcessor`) over micro-batches of one or
  more JSONL files written to a temporary directory with a chosen modification time, read as
  the file source reads them (`tally.events.text_lines`: one row per line, file path and mtime
  from `_metadata`, numbered by `tally.events.number_lines`), so the job runs its real code
  path with the arrival clock: a batch's processing time is its newest file's mtime.
* Tables come back as DataFrames (`read`), as dicts (`collect`, `collect_table`) or as the
  reference model's row tuples (`read_outputs`, tests/reference_model.py); either way times
  are epoch milliseconds (converted in the JVM with unix_millis: collect() would give naive
  local datetimes) and source files base names. `identity_check` is the accounting identity
  as a DataFrame, with its own first-arrival ranking.
* `streams` is a hypothesis strategy of random streams.
* `StreamProcess` runs `tally stream` in its own process group for fault injection, with kill
  conditions that watch its tables.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import reduce
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import unquote

import reference_model as M
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import MapType, TimestampType
from reference_diff import ARRIVAL_ORDER, LINE

from streaming.lease import LEASE_DIR, LeaseRecord
from tally import tables as T
from tally.windows import WINDOW_KEY, with_window

PROJECT_ROOT = Path(__file__).resolve().parent.parent
APP_ID = "test-app"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
EVENT_TIME_MIN_MS = (datetime(1, 1, 1, tzinfo=UTC) - EPOCH) // timedelta(milliseconds=1)
EVENT_TIME_MAX_MS = (datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC) - EPOCH) // timedelta(
    milliseconds=1
)

# -- the input contract, independently of tally/events.py -----------------------------------

_ZONED_ISO = re.compile(
    r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}(:?\d{2})?)$"
)


def iso_ms(text: str) -> int:
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        raise ValueError(text)
    return (value - EPOCH) // timedelta(milliseconds=1)


def classify_line(line: str) -> tuple[str | None, dict[str, Any] | None]:
    """(quarantine reason, None) or (None, parsed object): docs/semantics.md, in its order."""
    if line.strip() == "":
        return "empty_line", None
    try:
        obj = json.loads(line)
    except json.JSONDecodeError:
        return "invalid_json", None
    if not isinstance(obj, dict):
        return "invalid_json", None

    def blank(name: str) -> bool:
        value = obj.get(name)
        return value is None or (isinstance(value, str) and value.strip() == "")

    if blank("event_id"):
        return "missing_event_id", None
    if blank("key"):
        return "missing_key", None
    if obj.get("amount") is None:
        return "missing_amount", None
    amount = obj["amount"]
    if isinstance(amount, bool) or not isinstance(amount, int) or not -(2**63) <= amount < 2**63:
        return "amount_not_integer", None
    when = obj.get("event_time")
    if when is None:
        return "missing_event_time", None
    if isinstance(when, bool) or not isinstance(when, int | str):
        return "bad_event_time", None
    if isinstance(when, str):
        if not _ZONED_ISO.match(when):
            return "bad_event_time", None
        try:
            when = iso_ms(when)
        except ValueError:
            return "bad_event_time", None
    if not EVENT_TIME_MIN_MS <= when <= EVENT_TIME_MAX_MS:  # years 0001-9999 UTC
        return "bad_event_time", None
    part = obj.get("partition")
    if part is not None and (isinstance(part, bool) or not isinstance(part, int)):
        return "partition_not_integer", None
    return None, obj


@dataclass(frozen=True)
class InputLine:
    file: str  # base name
    number: int  # 1-based
    text: str
    reason: str | None
    obj: dict[str, Any] | None


def read_input(directory: str | Path) -> list[InputLine]:
    """Every line of every input file (Spark's view: `_`/`.` files are hidden)."""
    out: list[InputLine] = []
    for path in sorted(Path(directory).iterdir()):
        if path.name.startswith(("_", ".")) or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        if text == "":
            continue
        body = text[:-1] if text.endswith("\n") else text
        for number, line in enumerate(body.split("\n"), start=1):
            reason, obj = classify_line(line)
            out.append(InputLine(path.name, number, line, reason, obj))
    return out


# -- running the job over hand-made micro-batches -------------------------------------------


class InputFile(NamedTuple):
    name: str  # base name, e.g. "b000-0.jsonl"
    mtime_ms: int
    lines: Sequence[str]


def model_lines(files: Iterable[InputFile]) -> list[M.Line]:
    """The model's view of a batch: every line with its file, 1-based line number and mtime."""
    return [
        M.Line(raw, f.name, number, f.mtime_ms)
        for f in files
        for number, raw in enumerate(f.lines, start=1)
    ]


def write_file(directory: Path, f: InputFile) -> str:
    """Write the lines (newline-terminated) and set the file's mtime to `mtime_ms`."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f.name
    path.write_text("".join(line + "\n" for line in f.lines), encoding="utf-8")
    ns = f.mtime_ms * 1_000_000
    os.utime(path, ns=(ns, ns))
    return str(path)


def read_raw(spark: SparkSession, paths: Sequence[str]) -> DataFrame:
    """Raw lines of `paths` (`tally.events.LINE_COLUMNS`), numbered as the file source's."""
    from tally.events import read_jsonl_lines

    return read_jsonl_lines(spark, list(paths))


def stream_params(warehouse: str, params: M.Params) -> Any:
    from streaming.params import StreamParams

    return StreamParams(
        warehouse=warehouse,
        window_ms=params.window_ms,
        lateness_ms=params.lateness_ms,
        allowed_lateness_ms=params.allowed_lateness_ms,
        idle_timeout_ms=params.idle_timeout_ms,
        max_clock_skew_ms=params.max_clock_skew_ms,
        watermark_policy=params.policy,
        arrival_clock=True,
        # The model's None (remember every id) is, for the job, a horizon longer than any
        # test stream.
        dedup_horizon_ms=(
            params.dedup_horizon_ms if params.dedup_horizon_ms is not None else 10**12
        ),
        lateness_by_partition=dict(params.lateness_by_partition),
        window_slide_ms=params.window_slide_ms or 0,
        source_watermark_field=params.source_watermark_field or "",
        early_firing_interval_ms=params.early_firing_interval_ms,
        session_gap_ms=params.session_gap_ms,
        expected_partitions=params.expected_partitions,
        lateness_auto=params.lateness_auto is not None,
        **(
            {
                "completeness_target": params.lateness_auto.target_pct,
                "lateness_min_ms": params.lateness_auto.min_ms,
                "lateness_max_ms": params.lateness_auto.max_ms,
                "lateness_min_history": params.lateness_auto.min_history,
            }
            if params.lateness_auto is not None
            else {}
        ),
    )


def run_processor(
    spark: SparkSession,
    warehouse: str,
    input_dir: Path,
    batches: Sequence[Sequence[InputFile]],
    params: M.Params,
    drain: bool = False,
    first_batch: int = 0,
) -> None:
    """Batch i = the files of batches[i], processed as micro-batch first_batch + i (a later
    `first_batch`: a new process continuing the same checkpoint); then drain if asked."""
    from streaming.job import BatchProcessor

    with BatchProcessor(spark, stream_params(warehouse, params)) as proc:
        proc.set_app_id(APP_ID)
        for batch_id, files in enumerate(batches, start=first_batch):
            directory = input_dir / f"batch-{batch_id:03d}"
            paths = [write_file(directory, f) for f in files]
            proc.process(read_raw(spark, paths), batch_id)
        if drain:
            proc.drain()


# -- reading the tables back ----------------------------------------------------------------


def read(spark: SparkSession, warehouse: str, name: str) -> DataFrame:
    return T.read_table(spark, warehouse, name)


def base_name(col: str = "source_file") -> Column:
    return F.regexp_extract(F.col(col), r"([^/]+)$", 1)


def _ms(name: str) -> Column:
    return F.unix_millis(F.col(name)).alias(name)


def _ms_map(name: str) -> Column:
    """A map column whose values are timestamps, its values as epoch ms."""
    return F.transform_values(name, lambda _k, v: F.unix_millis(v)).alias(name)


def _base(name: str) -> Column:
    return base_name(name).alias(name)


def _ms_columns(df: DataFrame) -> list[Column]:
    cols: list[Column] = []
    for f in df.schema.fields:
        if isinstance(f.dataType, TimestampType):
            cols.append(_ms(f.name))
        elif isinstance(f.dataType, MapType) and isinstance(f.dataType.valueType, TimestampType):
            cols.append(_ms_map(f.name))
        elif f.name == "source_file":
            cols.append(_base(f.name))
        else:
            cols.append(F.col(f.name))
    return cols


def collect(df: DataFrame) -> list[dict[str, Any]]:
    """Rows as dicts; timestamps (also map values) as epoch ms; source_file as base name."""
    return [r.asDict() for r in df.select(*_ms_columns(df)).collect()]


def collect_table(spark: SparkSession, warehouse: str, name: str) -> list[dict[str, Any]]:
    return collect(read(spark, warehouse, name))


def _pairs(value: dict[Any, Any] | None) -> tuple[tuple[Any, Any], ...]:
    return tuple(sorted((value or {}).items()))


def read_events(spark: SparkSession, warehouse: str) -> list[M.EventRow]:
    rows = (
        read(spark, warehouse, "events")
        .select(
            "event_id",
            "key",
            "amount",
            _ms("event_time"),
            "partition",
            "extra",
            "arrival_status",
            "clock_skewed",
            _base("source_file"),
            "source_line",
            "batch_id",
            "currency",
        )
        .collect()
    )
    return [
        M.EventRow(
            r.event_id,
            r.key,
            r.amount,
            r.event_time,
            r.partition,
            _pairs(r.extra),
            r.arrival_status,
            r.clock_skewed,
            r.source_file,
            r.source_line,
            r.batch_id,
            r.currency,
        )
        for r in rows
    ]


def read_quarantine(spark: SparkSession, warehouse: str) -> list[M.QuarantineRow]:
    rows = (
        read(spark, warehouse, "quarantine")
        .select("raw_line", "reason", _base("source_file"), "source_line", "batch_id")
        .collect()
    )
    return [M.QuarantineRow(*r) for r in rows]


def read_late_events(spark: SparkSession, warehouse: str) -> list[M.LateRow]:
    rows = (
        read(spark, warehouse, "late_events")
        .select(
            "event_id",
            "key",
            "amount",
            _ms("event_time"),
            "partition",
            _ms("window_start"),
            _ms("window_end"),
            _ms("watermark_at_arrival"),
            "lateness_ms",
            "arrival_delay_ms",
            "reason",
            _base("source_file"),
            "source_line",
            "batch_id",
            "currency",
        )
        .collect()
    )
    return [M.LateRow(*r) for r in rows]


def read_aggregates(spark: SparkSession, warehouse: str) -> list[M.AggregateRow]:
    rows = (
        read(spark, warehouse, "stream_aggregates")
        .select(
            _ms("window_start"),
            _ms("window_end"),
            "key",
            "event_count",
            "amount_sum",
            "revision",
            _ms("emit_time"),
            _ms("watermark_at_emit"),
            "batch_id",
            "final",
            # rows from before session windows have no `retracted`: they withdraw nothing
            F.coalesce("retracted", F.lit(False)).alias("retracted"),
            "currency",
        )
        .collect()
    )
    return [M.AggregateRow(*r) for r in rows]


@dataclass(frozen=True)
class SparkProgress:
    """The stream_progress columns the spec defines, in the model's terms."""

    batch_id: int
    now_ms: int
    watermark_before_ms: int | None
    watermark_after_ms: int | None
    high_water: tuple[tuple[int, int], ...]
    last_seen: tuple[tuple[int, int], ...]
    idle: tuple[tuple[int, bool], ...]
    input_lines: int
    valid_events: int
    on_time_events: int
    allowed_late_events: int
    late_events: int
    duplicate_events: int
    quarantined_lines: int
    clock_skewed_events: int
    windows_emitted: int
    open_windows: int
    drained: bool
    control_records: int
    source_watermark: tuple[tuple[int, int], ...]
    unheard: tuple[tuple[int, int], ...]
    source_regressions: tuple[tuple[int, int], ...]
    source_regression_ms: tuple[tuple[int, int], ...]
    lateness: tuple[tuple[int, int], ...]
    new_by_date: tuple[tuple[str, int, int], ...]


PROGRESS_FIELDS = tuple(SparkProgress.__dataclass_fields__)


def model_progress(row: M.ProgressRow) -> SparkProgress:
    values = row._asdict()
    return SparkProgress(**{name: values[name] for name in PROGRESS_FIELDS})


def read_progress(spark: SparkSession, warehouse: str) -> list[SparkProgress]:
    rows = (
        read(spark, warehouse, "stream_progress")
        .select(
            "batch_id",
            F.unix_millis("processing_time").alias("now_ms"),
            F.unix_millis("watermark_before").alias("watermark_before_ms"),
            F.unix_millis("watermark_after").alias("watermark_after_ms"),
            _ms_map("partition_high_water"),
            _ms_map("partition_last_seen"),
            "partition_idle",
            "input_lines",
            "valid_events",
            "on_time_events",
            "allowed_late_events",
            "late_events",
            "duplicate_events",
            "quarantined_lines",
            "clock_skewed_events",
            "windows_emitted",
            "open_windows",
            "drained",
            "control_records",
            _ms_map("partition_source_watermark"),
            _ms_map("partition_unheard"),
            "source_watermark_regressions",
            "source_watermark_regression_ms",
            "partition_lateness_ms",
            "new_events_by_date",
            "new_amount_by_date",
        )
        .orderBy("batch_id")
        .collect()
    )
    return [
        SparkProgress(
            batch_id=r.batch_id,
            now_ms=r.now_ms,
            watermark_before_ms=r.watermark_before_ms,
            watermark_after_ms=r.watermark_after_ms,
            high_water=_pairs(r.partition_high_water),
            last_seen=_pairs(r.partition_last_seen),
            idle=_pairs(r.partition_idle),
            input_lines=r.input_lines,
            valid_events=r.valid_events,
            on_time_events=r.on_time_events,
            allowed_late_events=r.allowed_late_events,
            late_events=r.late_events,
            duplicate_events=r.duplicate_events,
            quarantined_lines=r.quarantined_lines,
            clock_skewed_events=r.clock_skewed_events,
            windows_emitted=r.windows_emitted,
            open_windows=r.open_windows,
            drained=r.drained,
            control_records=r.control_records,
            source_watermark=_pairs(r.partition_source_watermark),
            unheard=_pairs(r.partition_unheard),
            source_regressions=_pairs(r.source_watermark_regressions),
            source_regression_ms=_pairs(r.source_watermark_regression_ms),
            lateness=_pairs(r.partition_lateness_ms),
            new_by_date=tuple(
                (day.isoformat(), n, (r.new_amount_by_date or {})[day])
                for day, n in sorted((r.new_events_by_date or {}).items())
            ),
        )
        for r in rows
    ]


@dataclass(frozen=True)
class Outputs:
    events: list[M.EventRow]
    quarantine: list[M.QuarantineRow]
    late_events: list[M.LateRow]
    aggregates: list[M.AggregateRow]
    progress: list[SparkProgress]


def read_outputs(spark: SparkSession, warehouse: str) -> Outputs:
    return Outputs(
        events=read_events(spark, warehouse),
        quarantine=read_quarantine(spark, warehouse),
        late_events=read_late_events(spark, warehouse),
        aggregates=read_aggregates(spark, warehouse),
        progress=read_progress(spark, warehouse),
    )


def model_outputs(model: M.ReferenceModel) -> Outputs:
    return Outputs(
        events=list(model.events),
        quarantine=list(model.quarantine),
        late_events=list(model.late_events),
        aggregates=list(model.aggregates),
        progress=[model_progress(p) for p in model.progress],
    )


def sort_rows(rows: Iterable[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Rows in a canonical order (None sorts first), for order-free comparison."""
    return sorted(rows, key=lambda row: tuple((v is not None, v) for v in row))


# -- the accounting identity, with its own first-arrival ranking ----------------------------


def latest_revisions(aggregates: DataFrame) -> DataFrame:
    """The stream's answer per (window, key): its highest revision."""
    top = F.row_number().over(Window.partitionBy(*WINDOW_KEY).orderBy(F.col("revision").desc()))
    return aggregates.withColumn("_top", top).where(F.col("_top") == 1).drop("_top")


def first_arrivals(log: DataFrame) -> DataFrame:
    """Each event_id's first row in the event log, in arrival order: the rule as
    tests/reference_diff.py states it (docs/semantics.md), ranked here rather than with
    `tally.arrivals`, so that an oracle built on it does not share the code it checks."""
    rank = F.row_number().over(Window.partitionBy("event_id").orderBy(*ARRIVAL_ORDER))
    return (
        log.where(F.col("event_id").isNotNull())
        .withColumn("_rank", rank)
        .where(F.col("_rank") == 1)
        .drop("_rank")
    )


def first_arrival_rows(rows: DataFrame, log: DataFrame) -> DataFrame:
    """The rows (of `events` or `late_events`) whose input line (`LINE`) is the first arrival
    of their event_id in the event log: each such row, so a line written twice is kept twice."""
    firsts = first_arrivals(log).select(*[F.col(c).alias(f"_first_{c}") for c in LINE])
    same_line = [F.col(c).eqNullSafe(F.col(f"_first_{c}")) for c in LINE]
    return rows.join(firsts, reduce(lambda a, b: a & b, same_line), "left_semi")


def identity_check(spark: SparkSession, warehouse: str, window_ms: int) -> DataFrame:
    """One row per (window, key) seen anywhere, with both sides of the accounting identity.

    first arrivals in `events` = latest stream revision + late_events rows that are first
    arrivals, for count and sum (`first_arrival_rows`, the nightly's rule computed
    independently of it), so a repeat the stream no longer recognized (beyond its dedup
    horizon, `late` in both tables) is on neither side. Rows are matched by their input line,
    not deduplicated: a line written twice to either table still breaks the identity.
    Computed with joins and aggregates only (nothing collected).
    """
    log = read(spark, warehouse, "events")
    events = (
        first_arrival_rows(log, log)
        .transform(lambda df: with_window(df, window_ms))
        .groupBy(*WINDOW_KEY)
        .agg(F.count(F.lit(1)).alias("ev_count"), F.sum("amount").alias("ev_sum"))
    )
    stream = latest_revisions(read(spark, warehouse, "stream_aggregates")).select(
        *WINDOW_KEY,
        F.col("event_count").alias("st_count"),
        F.col("amount_sum").alias("st_sum"),
    )
    late = (
        first_arrival_rows(read(spark, warehouse, "late_events"), log)
        .groupBy(*WINDOW_KEY)
        .agg(F.count(F.lit(1)).alias("late_count"), F.sum("amount").alias("late_sum"))
    )
    joined = events.join(stream, list(WINDOW_KEY), "full_outer").join(
        late, list(WINDOW_KEY), "full_outer"
    )
    zero = F.lit(0).cast("long")
    return joined.select(
        *WINDOW_KEY,
        *[F.coalesce(c, zero).alias(c) for c in ("ev_count", "ev_sum", "st_count", "st_sum")],
        *[F.coalesce(c, zero).alias(c) for c in ("late_count", "late_sum")],
    ).withColumn(
        "ok",
        (F.col("ev_count") == F.col("st_count") + F.col("late_count"))
        & (F.col("ev_sum") == F.col("st_sum") + F.col("late_sum")),
    )


# -- random streams (hypothesis) ------------------------------------------------------------
T0_MS = 1_795_219_200_000  # 2026-11-21T00:00:00Z: every generated time is within minutes of it
KEYS = ("k1", "k2", "k3")
# Malformed lines of the kinds the contract names (tally_tools.generate's kinds and a few more).
MALFORMED = {
    "empty_line": ("", "   "),
    "invalid_json": ('{"event_id":"bad-1","key":"k1","amount":1', "[1,2]", "42", "null"),
    "missing_event_id": ('{"key":"k1","amount":5,"event_time":"2026-11-21T00:00:01.000Z"}',),
    "missing_key": ('{"event_id":"bad-2","amount":5,"event_time":"2026-11-21T00:00:01.000Z"}',),
    "missing_amount": ('{"event_id":"bad-3","key":"k2","event_time":"2026-11-21T00:00:01Z"}',),
    "amount_not_integer": (
        '{"event_id":"bad-4","key":"k1","amount":12.5,"event_time":"2026-11-21T00:00:01Z"}',
        '{"event_id":"bad-5","key":"k1","amount":"125","event_time":"2026-11-21T00:00:01Z"}',
    ),
    "missing_event_time": ('{"event_id":"bad-6","key":"k3","amount":5}',),
    "bad_event_time": (
        '{"event_id":"bad-7","key":"k1","amount":5,"event_time":"2026-11-21T00:00:01"}',
        '{"event_id":"bad-8","key":"k1","amount":5,"event_time":"yesterday"}',
    ),
    "partition_not_integer": (
        '{"event_id":"bad-9","key":"k1","amount":5,"event_time":0,"partition":"1"}',
    ),
    "bad_currency": (
        '{"event_id":"bad-10","key":"k1","amount":5,"event_time":0,"currency":"EURO"}',
    ),
}


@dataclass(frozen=True)
class Stream:
    params: M.Params
    batches: list[list[InputFile]]
    drain: bool

    def model_batches(self) -> list[list[M.Line]]:
        return [model_lines(files) for files in self.batches]

    def run_model(self) -> M.ReferenceModel:
        return M.run_model(self.model_batches(), self.params, drain=self.drain)

    def describe(self) -> str:
        """A readable dump for failure messages (the whole input and parameters)."""
        out = [f"{self.params}, drain={self.drain}"]
        for number, files in enumerate(self.batches):
            for f in files:
                out.append(f"batch {number} {f.name} mtime={f.mtime_ms - T0_MS} (T0+ms)")
                out.extend(f"    {line}" for line in f.lines)
        return "\n".join(out)


def iso(ms: int, offset_minutes: int = 0) -> str:
    """ISO-8601 with milliseconds and a zone (Z, or ±hh:mm shifting the wall clock)."""
    from datetime import timedelta, timezone

    zone = timezone(timedelta(minutes=offset_minutes))
    value = M.EPOCH + timedelta(milliseconds=ms)
    text = value.astimezone(zone).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
    if offset_minutes == 0:
        return text + "Z"
    sign = "+" if offset_minutes > 0 else "-"
    hours, minutes = divmod(abs(offset_minutes), 60)
    return f"{text}{sign}{hours:02d}:{minutes:02d}"


def control_line(mark_ms: int, partition: int, variant: int = 0) -> str:
    """A control record: `{"watermark": ..., "partition": p}`; `variant` 7 writes epoch ms,
    8 omits the partition, 9 an unparseable watermark (bad_watermark)."""
    body: dict[str, object] = {"watermark": iso(mark_ms), "partition": partition}
    if variant == 7:
        body["watermark"] = mark_ms
    elif variant == 8:
        del body["partition"]
    elif variant == 9:
        body["watermark"] = "soon"
    return json.dumps(body)


def event_line(
    event_id: str,
    key: str,
    amount: int,
    time_ms: int,
    partition: int | None,
    time_style: str = "iso",
    extra: dict[str, str] | None = None,
) -> str:
    import json

    when: Any = {
        "iso": lambda: iso(time_ms),
        "offset": lambda: iso(time_ms, 330),
        "negative_offset": lambda: iso(time_ms, -180),
        "epoch": lambda: time_ms,
    }[time_style]()
    obj: dict[str, Any] = {"event_id": event_id, "key": key, "amount": amount, "event_time": when}
    if partition is not None:
        obj["partition"] = partition
    obj.update(extra or {})
    return json.dumps(obj, separators=(",", ":"))


def streams(
    max_batches: int = 4,
    max_lines: int = 8,
    min_batches: int = 1,
    min_lines: int = 0,
    replays_change_time: bool = False,
    monotone_now: bool = True,
    policies: Sequence[str] = M.POLICIES,
    slides: Sequence[int | None] = (None, None, 5_000),
    min_lateness_overrides: int = 0,
    control_fields: Sequence[str | None] = (None, None, "watermark"),
    early_intervals: Sequence[int] = (0, 0, 0, 20_000),
    session_gaps: Sequence[int] = (0,),
    expected: Sequence[frozenset[int]] = (frozenset(),),
    autos: Sequence[M.AutoLateness | None] = (None,),
) -> Any:
    """A hypothesis strategy of random streams.

    Few keys, 2-3 partitions (one may lag, any may skip batches and go idle), times within
    minutes of T0 on a 500 ms grid (so window boundaries are hit), replays of earlier lines
    (same event time unless `replays_change_time`), a few malformed lines, one or two files
    per batch, random parameters. Processing time (the newest mtime) never decreases unless
    `monotone_now` is False. Hypothesis tries the simplest stream first (the minimum of
    every draw), so a caller with few examples should set `min_batches`/`min_lines`.
    `session_gaps`: the session gap is drawn from these (0: fixed windows, the default); a
    stream with a gap has no slide (the two window kinds exclude each other). `expected`:
    the expected partitions are drawn from these (a partition beyond the stream's 2-3 never
    reports). `autos`: lateness auto's parameters are drawn from these (None: fixed bounds).
    """
    from hypothesis import strategies as st

    @st.composite
    def build(draw: Any) -> Stream:
        # session windows (a gap) or fixed ones: tumbling, or hopping with a 5 s slide
        gap = draw(st.sampled_from(list(session_gaps)))
        slide = draw(st.sampled_from(list(slides)))
        params = M.Params(
            window_ms=draw(st.sampled_from([10_000, 30_000, 60_000])),
            lateness_ms=draw(st.sampled_from([0, 5_000, 20_000])),
            allowed_lateness_ms=draw(st.sampled_from([0, 10_000, 30_000])),
            idle_timeout_ms=draw(st.sampled_from([0, 30_000, 90_000])),
            max_clock_skew_ms=draw(st.sampled_from([5_000, 60_000])),
            policy=draw(st.sampled_from(list(policies))),
            dedup_horizon_ms=draw(st.sampled_from([None, 0, 20_000])),
            # hopping windows (5 s slide: S/H = 2, 6 or 12) or tumbling; none with sessions
            window_slide_ms=None if gap else slide,
            # session windows: spans [t, t + gap) merged per key (0: off)
            session_gap_ms=gap,
            # source watermarks: some lines are control records ({"watermark": ...})
            source_watermark_field=draw(st.sampled_from(list(control_fields))),
            # early results: changed open windows emitted provisionally at most this often
            early_firing_interval_ms=draw(st.sampled_from(list(early_intervals))),
            # per-source lateness: some partitions with their own bound (0..2 overrides)
            lateness_by_partition=draw(
                st.dictionaries(
                    st.integers(0, 2),
                    st.sampled_from([0, 100, 5_000, 30_000]),
                    min_size=min_lateness_overrides,
                    max_size=2,
                )
            ),
            # expected partitions: no watermark until each has reported (or idled out)
            expected_partitions=draw(st.sampled_from(list(expected))),
            # lateness auto: each partition's bound from its delays (None: the fixed bounds)
            lateness_auto=draw(st.sampled_from(list(autos))),
        )
        partitions = draw(st.integers(2, 3))
        lag_ms = [draw(st.sampled_from([0, 0, 15_000, 45_000])) for _ in range(partitions)]
        now = T0_MS + draw(st.integers(0, 120)) * 500
        sent: list[tuple[str, str, int, int, int]] = []  # id, key, amount, time, partition
        batches: list[list[InputFile]] = []
        next_id = 0
        for number in range(draw(st.integers(min_batches, max_batches))):
            if number:
                low = 0 if monotone_now else -60
                now += draw(st.integers(low, 180)) * 500
            silent = draw(st.sets(st.integers(0, partitions - 1), max_size=partitions - 1))
            lines: list[str] = []
            for _ in range(draw(st.integers(min_lines, max_lines))):
                roll = draw(st.integers(0, 99))  # 0 (the simplest draw) is a new event
                if roll >= 92:
                    kind = draw(st.sampled_from(sorted(MALFORMED)))
                    lines.append(draw(st.sampled_from(MALFORMED[kind])))
                elif roll >= 86:  # a control record (an event-less line unless they are on)
                    part = draw(st.integers(0, partitions - 1))
                    mark = now - draw(st.integers(-20, 120)) * 500
                    lines.append(control_line(mark, part, draw(st.integers(0, 9))))
                elif roll >= 78 and sent:
                    eid, key, amount, when, part = draw(st.sampled_from(sent))
                    if draw(st.booleans()):
                        part = draw(st.integers(0, partitions - 1))
                    if replays_change_time and draw(st.booleans()):
                        when += draw(st.integers(-240, 240)) * 500
                    lines.append(event_line(eid, key, amount, when, part))
                else:
                    part = draw(st.integers(0, partitions - 1))
                    if part in silent:
                        continue
                    delay = draw(st.integers(-30, 240)) * 500 + lag_ms[part]
                    when = now - delay
                    eid = f"e-{next_id}"
                    next_id += 1
                    key = draw(st.sampled_from(KEYS))
                    amount = draw(st.integers(-1_000, 100_000))
                    sent.append((eid, key, amount, when, part))
                    style = draw(st.sampled_from(["iso", "iso", "iso", "epoch", "offset"]))
                    # one event in ten carries a field tally does not know, one a currency
                    extra = {9: {"region": "eu-west"}, 8: {"currency": "JPY"}}.get(
                        draw(st.integers(0, 9))
                    )
                    omit = part == 0 and draw(st.booleans())
                    lines.append(
                        event_line(eid, key, amount, when, None if omit else part, style, extra)
                    )
            if len(lines) >= 2 and draw(st.booleans()):
                cut = draw(st.integers(1, len(lines) - 1))
                early = now - draw(st.integers(0, 10)) * 500
                files = [
                    InputFile(f"b{number:03d}-0.jsonl", early, lines[:cut]),
                    InputFile(f"b{number:03d}-1.jsonl", now, lines[cut:]),
                ]
                if draw(st.booleans()):  # the later-named file may be the older one
                    files = [files[0]._replace(mtime_ms=now), files[1]._replace(mtime_ms=early)]
            else:
                files = [InputFile(f"b{number:03d}-0.jsonl", now, lines)]
            batches.append(files)
        return Stream(params, batches, drain=draw(st.booleans()))

    return build()


# -- a supervised `tally stream` process ----------------------------------------------------


def delta_version(warehouse: str | Path, table: str) -> int:
    """Newest committed version of a local Delta table (-1 if it does not exist yet)."""
    log = Path(warehouse) / table / "_delta_log"
    if not log.is_dir():
        return -1
    versions = [int(p.stem) for p in log.glob("*.json") if p.stem.isdigit()]
    return max(versions, default=-1)


def delta_versions(warehouse: str | Path) -> dict[str, int]:
    return {t.name: delta_version(warehouse, t.name) for t in T.STREAMING_TABLES}


def seconds_after_next_batch(warehouse: str | Path, delay_s: float) -> Callable[[], bool]:
    """A kill condition: true `delay_s` after the first `stream_progress` commit newer than the
    table's version now (some seconds into the batch after a completed one)."""
    base = delta_version(warehouse, "stream_progress")
    advanced: dict[str, float] = {}

    def condition() -> bool:
        if not advanced and delta_version(warehouse, "stream_progress") > base:
            advanced["at"] = time.monotonic()
        return bool(advanced) and time.monotonic() - advanced["at"] >= delay_s

    return condition


class UncommittedFiles:
    """A kill condition: a data file of one Delta table that no commit of its log names yet,
    i.e. a write under way between its files and its commit. Beside an inline housekeeper
    (between micro-batches, so no batch writes then) it is a compaction in flight. Storage
    is read through two functions (local or S3): the table's data file names relative to
    its root, and its commit files' names and texts (a commit is read once: it never
    changes)."""

    def __init__(
        self,
        data_files: Callable[[], list[str]],
        commit_names: Callable[[], list[str]],
        read_commit: Callable[[str], str],
    ) -> None:
        self._data_files, self._commit_names, self._read = data_files, commit_names, read_commit
        self._named: set[str] = set()
        self._read_commits: set[str] = set()
        self.seen: list[str] = []  # the uncommitted files when the condition held

    def _refresh(self) -> None:
        for name in self._commit_names():
            if name not in self._read_commits:
                self._read_commits.add(name)
                for line in self._read(name).splitlines():
                    action = json.loads(line)
                    for kind in ("add", "remove"):
                        if kind in action:
                            self._named.add(unquote(action[kind]["path"]))

    def __call__(self) -> bool:
        files = self._data_files()
        if all(f in self._named for f in files):
            self._refresh()
        self.seen = [f for f in files if f not in self._named]
        return bool(self.seen)


def local_uncommitted(table_dir: str | Path) -> UncommittedFiles:
    root = Path(table_dir)
    log = root / "_delta_log"

    def data_files() -> list[str]:
        return [
            str(p.relative_to(root))
            for p in root.rglob("*.parquet")
            if "_delta_log" not in p.parts and not p.name.startswith(".")
        ]

    def commit_names() -> list[str]:
        return sorted(p.name for p in log.glob("*.json")) if log.is_dir() else []

    return UncommittedFiles(data_files, commit_names, lambda n: (log / n).read_text())


def ui_port_env(port: int) -> dict[str, str]:
    """A `tally stream` process's environment entry that puts its Spark UI on `port`."""
    return {"PYSPARK_SUBMIT_ARGS": f"--conf spark.ui.port={port} pyspark-shell"}


def active_pools(port: int) -> set[str]:
    """The scheduler pools of the Spark stages running now in the application whose UI is on
    `port` (its REST API); empty while it cannot be reached."""
    import urllib.request

    base = f"http://127.0.0.1:{port}/api/v1/applications"
    try:
        with urllib.request.urlopen(base, timeout=1) as r:
            apps = json.load(r)
        with urllib.request.urlopen(f"{base}/{apps[0]['id']}/stages?status=active", timeout=1) as r:
            return {str(stage.get("schedulingPool")) for stage in json.load(r)}
    except (OSError, ValueError, IndexError, KeyError):
        return set()


def compaction_in_flight(port: int, uncommitted: UncommittedFiles) -> Callable[[], bool]:
    """A kill condition: the table holds files no commit names while the last Spark stages
    seen running were housekeeping's (its scheduler pool): a compaction between its files and
    its commit. The housekeeper runs inline, between micro-batches, so no batch writes then;
    a batch's first stages (its input) run long before it writes."""
    from streaming.housekeeping import POOL

    last_pools: set[str] = set()

    def condition() -> bool:
        pools = active_pools(port)
        if pools:
            last_pools.clear()
            last_pools.update(pools)
        return last_pools == {POOL} and uncommitted()

    return condition


def lease_records(warehouse: str | Path) -> list[LeaseRecord]:
    """The stream lease's records in a local warehouse, oldest first (streaming/lease.py)."""
    directory = Path(warehouse) / LEASE_DIR
    return [LeaseRecord.from_json(p.read_bytes()) for p in sorted(directory.glob("*.json"))]


def stream_command(input_dir: str, warehouse: str, drain: bool = False) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "tally_app.cli",
        "stream",
        "--input",
        input_dir,
        "--warehouse",
        warehouse,
        "--window",
        "60s",
        "--lateness",
        "30s",
        "--max-files-per-trigger",
        "2",
        "--available-now",
        "--clock",
        "arrival",
        "--spark-master",
        "local[2]",
        "--shuffle-partitions",
        "2",
    ]
    return [*cmd, "--drain"] if drain else cmd


class StreamProcess:
    """`tally stream` in its own process group, so a kill takes the JVM and workers with it."""

    def __init__(self, cmd: list[str], log_path: Path, env: dict[str, str] | None = None):
        env = {
            **os.environ,
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            **(env or {}),
        }
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 (closed in wait/kill)
        self.proc = subprocess.Popen(
            cmd,
            cwd=PROJECT_ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def running(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole group (python driver, JVM, python workers) at once."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._log.close()

    def wait(self, timeout: float) -> int:
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"stream did not finish in {timeout} s\n{self.tail()}") from None
        # The JVM may outlive its driver for a moment; nothing of the group may keep writing.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self._log.close()
        return rc

    def tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def kill_when(self, condition: Callable[[], bool], timeout: float, poll: float = 0.02) -> bool:
        """Poll `condition`; SIGKILL as soon as it holds. False if the process ended first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                self.kill()
                return True
            if not self.running():
                self.wait(5)
                return False
            time.sleep(poll)
        self.kill()
        raise AssertionError(f"kill condition not reached in {timeout} s\n{self.tail()}")
