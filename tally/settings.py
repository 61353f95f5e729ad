"""Typed settings, read once at an entry point: defaults < config file < TALLY_* env < CLI flags.

Logic never reads settings; entry points pass plain values (milliseconds, strings) down.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from tally.dates import parse_business_date
from tally.durations import (
    LATENESS_AUTO,
    SettingsError,
    format_duration,
    parse_duration,
    parse_duration_list,
    parse_lateness,
)
from tally.money import DEFAULT_CURRENCY, CurrencyError, check_currency
from tally.setting_checks import (
    Check,
    Parses,
    SettingCheck,
    at_least,
    between,
    cron,
    fraction,
    matches,
    not_empty,
    not_negative,
    one_of,
    percentage,
    positive,
)
from tally.tolerances import (
    ToleranceError,
    ToleranceRule,
    parse_rules,
    rules_as_json,
    rules_from_json,
)
from tally.vocabulary import KNOWN_FIELDS
from tally.windows import windowing_problem

WATERMARK_POLICIES = ("partition-min", "global-max")
SOURCE_KINDS = ("files", "kafka")
KAFKA_STARTING_OFFSETS = ("earliest", "latest")
SPARK_RUNNERS = ("local", "submit")
MAINTENANCE_MODES = ("thread", "inline")
# How the nightly finds first arrivals over the whole log (batch/firsts.py).
DEDUP_MODES = ("index", "full")
# Which dates need a second person's approval (`signoff_two_person`): fail = a gap graded fail
# (any unexplained gap without materiality tolerance rules); never = one person signs off all.
TWO_PERSON_RULES = ("fail", "never")
# An Airflow user id in `signoff_preparers` / `signoff_approvers` (SimpleAuthManager: the user
# name; another auth manager: its `get_id()`).
_USER_ID = re.compile(r"[A-Za-z0-9_.@+-]+")
# The default cap per kind of each UNEXPLAINED window's records (`reconciliation_evidence`).
EVIDENCE_ROWS = 1000
RESTATEMENT_POLICIES = ("rerun", "flag")


_PARTITIONS = re.compile(r"^(-?\d+)(?:\s*(?:-|\.\.)\s*(-?\d+))?$")
INT32_RANGE = (-(2**31), 2**31 - 1)


def parse_partition_durations(raw: str | Mapping[str, Any], name: str) -> dict[int, int]:
    """Durations per source partition: text `0=100ms, 1-3=30s` or a TOML table
    `{"0" = "100ms", "1-3" = "30s"}` (a key is a partition or an inclusive range of them, a
    source group) -> {partition: ms}. A partition named twice is an error."""
    if isinstance(raw, Mapping):
        pairs = [(str(k), v) for k, v in raw.items()]
    else:
        pairs = []
        for part in (p.strip() for p in str(raw).split(",")):
            if not part:
                continue
            key, sep, value = part.partition("=")
            if not sep:
                raise SettingsError(
                    f"{name}: expected PARTITION=DURATION pairs like 0=100ms,1-3=30s, got {part!r}"
                )
            pairs.append((key.strip(), value.strip()))
    out: dict[int, int] = {}
    for key, value in pairs:
        partitions = _partition_range(key, name, "a partition or a range like 1-3")
        ms = parse_duration(value, f"{name}[{key}]")
        for partition in partitions:
            if partition in out:
                raise SettingsError(f"{name}: partition {partition} is given twice")
            out[partition] = ms
    return out


def _partition_range(key: str, name: str, expected: str) -> range:
    """`3` or the inclusive range `1-3` (or `1..3`) of 32-bit partitions."""
    match = _PARTITIONS.match(key.strip())
    if not match:
        raise SettingsError(f"{name}: {key!r} is not {expected}")
    first = int(match.group(1))
    last = int(match.group(2)) if match.group(2) is not None else first
    if not INT32_RANGE[0] <= first <= last <= INT32_RANGE[1] or last - first > 100_000:
        raise SettingsError(f"{name}: {key!r} is not a range of 32-bit partitions (a <= b)")
    return range(first, last + 1)


def parse_partition_list(raw: str | list[Any], name: str) -> frozenset[int]:
    """Source partitions: text `0-2,5` or a TOML list `[0, 1, 2]` (an item is a partition or
    an inclusive range) -> the set. `all` is not a list: callers handle it first."""
    items = [str(v) for v in raw] if isinstance(raw, list) else str(raw).split(",")
    out: set[int] = set()
    for item in (i.strip() for i in items):
        if not item:
            continue
        for partition in _partition_range(
            item, name, "a partition or a range like 0-2 (or all, for Kafka)"
        ):
            if partition in out:
                raise SettingsError(f"{name}: partition {partition} is given twice")
            out.add(partition)
    return frozenset(out)


def format_partition_list(partitions: frozenset[int] | set[int]) -> str:
    """The canonical text of `parse_partition_list`: sorted, consecutive partitions as ranges."""
    return ",".join(
        key.partition("=")[0]
        for key in format_partition_durations(dict.fromkeys(partitions, 0)).split(",")
        if key
    )


ALL_PARTITIONS = "all"  # expected_partitions: every partition of the Kafka topic at start


def format_partition_durations(by_partition: Mapping[int, int]) -> str:
    """The canonical text of `parse_partition_durations`: sorted, consecutive partitions with
    the same duration written as one range."""
    parts: list[str] = []
    items = sorted(by_partition.items())
    i = 0
    while i < len(items):
        j = i
        while (
            j + 1 < len(items)
            and items[j + 1][0] == items[j][0] + 1
            and items[j + 1][1] == items[i][1]
        ):
            j += 1
        first, last = items[i][0], items[j][0]
        key = str(first) if first == last else f"{first}-{last}"
        parts.append(f"{key}={format_duration(items[i][1])}")
        i = j + 1
    return ",".join(parts)


def user_ids(text: str) -> tuple[str, ...]:
    """Comma-separated Airflow user ids, in order, each once (blank items dropped)."""
    return tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))


def default_checkpoint(warehouse: str) -> str:
    """Where a stream keeps its checkpoint unless told: inside its warehouse."""
    return f"{warehouse.rstrip('/')}/_checkpoints/stream"


KAFKA_OPTION_PREFIX = "TALLY_KAFKA_OPT_"


def kafka_client_options(environ: Mapping[str, str]) -> dict[str, str]:
    """Kafka client options from the environment: `TALLY_KAFKA_OPT_SASL_MECHANISM=PLAIN` is
    `sasl.mechanism=PLAIN` (Kafka's option names have dots, never underscores). This is where
    credentials go (never a settings file, never the repo)."""
    return {
        name[len(KAFKA_OPTION_PREFIX) :].lower().replace("_", "."): value
        for name, value in environ.items()
        if name.startswith(KAFKA_OPTION_PREFIX) and len(name) > len(KAFKA_OPTION_PREFIX)
    }


def _setting(
    default: Any, help: str, kind: str | None = None, check: SettingCheck | None = None
) -> Any:
    """A settings field with its meaning (`help`): the one text `tally --help` and
    docs/configuration.md show. `kind` marks the values parsed from text beyond the type;
    `check` is the rule a value must keep (docs/configuration.md states it too)."""
    metadata: dict[str, Any] = {"help": help}
    if kind is not None:
        metadata["kind"] = kind
    if check is not None:
        metadata["check"] = check
    return field(default=default, metadata=metadata)


def _duration_field(default: str, help: str, check: SettingCheck | None = None) -> Any:
    return _setting(parse_duration(default), help, kind="duration", check=check)


# -- the checks of single values that need a parser or more than one rule ----------------------
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SOURCE_WATERMARK_FIELD = Check(
    lambda v: not v or (_IDENTIFIER.fullmatch(v) is not None and v not in KNOWN_FIELDS),
    "a field name other than the event's own (letters, digits, '_'), got {value!r}",
    "empty, or a field name (letters, digits, '_') other than the event's own",
)


def _expected_partitions(text: Any, name: str) -> None:
    if text != ALL_PARTITIONS:
        parse_partition_list(text, name)


def _time_zone(text: str, name: str) -> None:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError):  # no such zone; a name that is no key
        raise SettingsError(f"{name}: unknown time zone {text!r}") from None


def _currency(code: str, name: str) -> None:
    try:
        check_currency(code)
    except CurrencyError as exc:
        raise SettingsError(f"{name}: {str(exc).removeprefix('currency: ')}") from None


def _tolerance_rules(raw: Any, name: str) -> None:
    tolerance_text(raw)  # its errors name the rule and the field


def _business_date(text: str, name: str) -> None:
    try:
        parse_business_date(text)
    except ValueError:
        raise SettingsError(f"{name}: expected YYYY-MM-DD, got {text!r}") from None


def _airflow_user_ids(text: str, name: str) -> None:
    bad = [i for i in user_ids(text) if not _USER_ID.fullmatch(i)]
    if bad:
        raise SettingsError(
            f"{name}: {bad[0]!r} is not an Airflow user id (letters, digits, _.@+-)"
        )


@dataclass(frozen=True)
class Settings:
    """Everything an entry point may need. Durations are integer milliseconds. Each field's
    `help` says what it means and its `check` the rule its value keeps; `RELATIONS` (below)
    are the rules between fields (docs/configuration.md is generated from all three)."""

    # -- windows and the watermark (the stream; the nightly uses the same windows)
    window: int = _duration_field("60s", "window size (of tumbling or hopping windows), e.g. 60s")
    window_slide: int = _duration_field(
        "0s",
        "hopping windows: slide by this; the window must be a multiple of it (0 = tumbling "
        'windows; docs/semantics.md, "Windows")',
    )
    session_gap: int = _duration_field(
        "0s",
        "session windows: a key's events with no pause this long or longer form one session "
        '(0 = off: fixed windows of `window`; docs/semantics.md, "Session windows")',
    )
    lateness: int | None = _setting(
        parse_lateness("30s"),
        "lateness bound L: the watermark is the high-water mark minus L, e.g. 30s; or `auto`: "
        "each partition's bound follows its delays toward `completeness_target`, within "
        '`lateness_min`..`lateness_max` (docs/semantics.md, "Adaptive lateness")',
        kind="lateness",
    )
    lateness_min: int = _duration_field(
        "1s",
        "lateness auto: the smallest bound it may choose for a partition, and the start bound "
        "of a partition with no history and no `lateness_by_partition` bound",
    )
    lateness_max: int = _duration_field(
        "10m", "lateness auto: the largest bound it may choose for a partition"
    )
    early_firing_interval: int = _duration_field(
        "0s",
        "early results: an open window whose contents changed is emitted as a provisional row "
        "(final = false) at most once per this much processing time (0 = off: final rows only)",
    )
    source_watermark_field: str = _setting(
        "",
        "source watermarks: a JSON line with this field and no event_id is a control record "
        "setting its partition's watermark, e.g. watermark (empty = off: such a line is "
        'quarantined as missing_event_id; docs/semantics.md, "Source watermarks")',
        check=_SOURCE_WATERMARK_FIELD,
    )
    lateness_by_partition: str = _setting(
        "",
        "a lateness bound per source partition or partition range (a source group), overriding "
        "`lateness` there: 0=100ms,1-3=30s, or a TOML table "
        '{"0" = "100ms", "1-3" = "30s"} (docs/semantics.md, "Watermark")',
        kind="partition_durations",
        check=Parses(parse_partition_durations, "partition=duration pairs, each partition once"),
    )
    expected_partitions: str = _setting(
        "",
        "sources the watermark waits for: no watermark until each of these partitions has "
        "reported (an event or a control record) or stayed unheard for idle_timeout: 0-2, a "
        "TOML list [0, 1, 2], or all (Kafka: the topic's partitions at start; docs/semantics.md, "
        '"Expected partitions")',
        kind="partition_list",
        check=Parses(_expected_partitions, "all, or partitions and ranges, each partition once"),
    )
    allowed_lateness: int = _duration_field(
        "0s", "allowed lateness G: a closed window is revised by late events for this long"
    )
    dedup_horizon: int = _duration_field(
        "10m",
        "how long an event id is remembered for duplicate detection after its window stopped "
        'changing; bounds the stream\'s dedup state (docs/semantics.md, "Dedup horizon")',
    )
    idle_timeout: int = _duration_field(
        "60s",
        "a partition silent this long (processing time) is idle: it stops holding the "
        "watermark back",
    )
    max_clock_skew: int = _duration_field(
        "5m",
        "event times further ahead of processing time are clipped for the watermark (and "
        "checked by the validation suites), e.g. 5m",
    )
    trigger: int = _duration_field("5s", "processing-time trigger interval, e.g. 5s")
    watermark_policy: str = _setting(
        "partition-min",
        "partition-min (the minimum over active partitions) or global-max (Spark's rule: the "
        "maximum over all partitions)",
        check=one_of(WATERMARK_POLICIES),
    )
    # -- where things are
    warehouse: str = _setting(
        "warehouse",
        "warehouse location of the Delta tables: a directory or any Hadoop-compatible URI "
        "(s3a://BUCKET/PREFIX)",
        check=not_empty,
    )
    checkpoint: str = _setting(
        "", "the stream's checkpoint location (empty = <warehouse>/_checkpoints/stream)"
    )
    input: str = _setting("demo/events", "input directory of JSONL files")
    stream_lease: bool = _setting(
        True,
        "one stream per warehouse: refuse to start while another stream owns the warehouse's "
        "lease (false: on stores without an atomic create; make sure of one stream yourself)",
    )
    lease_ttl: int = _duration_field(
        "60s",
        "a stream that stopped renewing its warehouse lease this long may be replaced by "
        "another (at once when its process is provably gone)",
    )
    # -- housekeeping (docs/operations.md): each writer maintains its own tables
    maintenance: bool = _setting(
        True,
        "the stream (and the nightly) compact, vacuum and set retention on the tables they "
        "write (false: nothing is maintained; run `tally maintain` yourself)",
    )
    maintenance_mode: str = _setting(
        "inline",
        "where the stream runs its housekeeping: inline (between micro-batches, one action a "
        "gap, on the stream's own thread) or thread (a background thread beside the "
        "micro-batches)",
        check=one_of(MAINTENANCE_MODES),
    )
    compact_interval: int = _duration_field(
        "1h",
        "how often (stream processing time) an open events date and each unpartitioned "
        "stream table have their small files compacted (0s: never)",
    )
    compact_min_files: int = _setting(
        50,
        "an open events date or unpartitioned stream table is compacted (at most every "
        "compact_interval) once it holds this many small files (Delta's own auto-compaction "
        "threshold, spark.databricks.delta.autoCompact.minNumFiles; at least 2)",
        check=at_least(2),
    )
    compact_closed_dates: bool = _setting(
        True,
        "compact each events date to a few files once it is closed (the watermark passed its "
        "end plus the window and the allowed lateness)",
    )
    vacuum_interval: int = _duration_field(
        "1d", "how often (stream processing time) each table is vacuumed (0s: never)"
    )
    deleted_file_retention: int = _duration_field(
        "7d",
        "delta.deletedFileRetentionDuration of the tables: VACUUM deletes files removed this "
        "long ago (at least 1h: longer than any write in flight)",
        check=at_least(3_600_000, duration=True),
    )
    log_retention: int = _duration_field(
        "30d",
        "delta.logRetentionDuration of the tables: commits older than this are cleaned up at "
        "checkpoints (time travel by version reaches back the shorter of this and "
        "deleted_file_retention; audit pins need neither)",
        check=at_least(3_600_000, duration=True),
    )
    audit_window: int = _duration_field(
        "90d",
        "how long a reconciliation run must stay reproducible (tally reconcile --reproduce): "
        "its pins read the stream tables' rows at their batch frontiers, so the rows must be "
        "kept this long (at least 1d)",
        check=at_least(86_400_000, duration=True),
    )
    # -- Kafka (client options, security included, come from TALLY_KAFKA_OPT_* only:
    # `kafka_client_options`)
    source_kind: str = _setting(
        "files",
        "where events come from: files (the input directory) or kafka (the topic)",
        check=one_of(SOURCE_KINDS),
    )
    kafka_bootstrap: str = _setting(
        "127.0.0.1:19092",
        "Kafka bootstrap servers, HOST:PORT[,HOST:PORT] (default: the broker scripts/kafka.sh "
        "starts)",
        check=matches(
            r"[^\s,]+:\d+(,[^\s,]+:\d+)*",
            "expected HOST:PORT[,HOST:PORT...]",
            "HOST:PORT[,HOST:PORT...]",
        ),
    )
    kafka_topic: str = _setting(
        "tally-events",
        "Kafka topic",
        check=matches(
            r"[A-Za-z0-9._-]{1,249}",
            "letters, digits, '.', '_' and '-' only",
            "1 to 249 letters, digits, '.', '_' and '-'",
        ),
    )
    kafka_connect_timeout: int = _duration_field(
        "15s",
        "how long the stream and `tally produce` wait for the broker's metadata before they "
        "refuse to start with one line (Spark's own source would retry for minutes)",
    )
    kafka_starting_offsets: str = _setting(
        "earliest",
        "earliest or latest: where a new checkpoint starts in the topic (afterwards the "
        "checkpoint's offsets)",
        check=one_of(KAFKA_STARTING_OFFSETS),
    )
    max_records_per_trigger: int = _setting(
        200_000, "Kafka records per micro-batch", check=positive
    )
    max_record_bytes: int = _setting(
        1_048_576,
        "a Kafka record value longer than this is quarantined (oversized_value), never parsed",
        check=positive,
    )
    # -- Spark and object storage
    spark_master: str = _setting(
        "local[*]",
        "Spark master URL, e.g. local[*] or spark://host:7077; a local master retries a failed "
        "task 4 times, as a cluster does (local[2] runs as local[2,4])",
    )
    spark_executor_memory: str = _setting(
        "",
        "on a cluster: the heap of each executor, e.g. 2g (empty = Spark's default, 1g; "
        "ignored in local mode)",
        check=matches(
            r"\d+[kmgt]?",
            "expected a size like 512m or 2g",
            "a size like 512m or 2g",
            flags=re.IGNORECASE,
            empty=True,
        ),
    )
    quick_jit: bool = _setting(
        False,
        "batch commands (reconcile, report, the DAG's stages, not the stream): start the driver "
        "JVM (in local mode also the executor) with C1 only (-XX:TieredStopAtLevel=1): ~27% "
        "less JVM CPU for a 200k-event nightly, but no shorter on a loaded 2-core machine "
        "(docs/development.md); false: HotSpot's full tiered JIT",
    )
    driver_cds: bool = _setting(
        True,
        "class data sharing for the driver JVM: the first run of the stream, and of any batch "
        "command, writes an archive of the classes its driver loaded (.cache/cds, ~200 MB each, "
        "keyed by the JDK and the jars), later runs map it: less class loading at start-up "
        "(docs/development.md); false: neither written nor used",
    )
    spark_cores_max: int = _setting(
        0,
        "on a standalone cluster: the cores one application may hold (0 = all the cluster "
        "offers); cap it so a long-running stream leaves cores for the nightly jobs",
        check=not_negative("must not be negative (0 = no cap)"),
    )
    s3_endpoint: str = _setting(
        "",
        "S3-compatible endpoint for s3a:// warehouses, e.g. http://127.0.0.1:19000 (empty = "
        "AWS's own endpoints). Credentials are never settings: AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY, or the default provider chain",
        check=matches(
            r"https?://[^\s/]+/?",
            "expected http(s)://HOST[:PORT]",
            "http(s)://HOST[:PORT]",
            empty=True,
        ),
    )
    s3_region: str = _setting("", "S3 region (empty = the provider chain's region, AWS_REGION)")
    s3_path_style: bool = _setting(
        False, "bucket in the path, not the host name (most S3 servers other than AWS)"
    )
    max_files_per_trigger: int = _setting(
        8, "input files per micro-batch (a batch holds whole files)", check=positive
    )
    shuffle_partitions: int = _setting(
        4, "spark.sql.shuffle.partitions for the job", check=positive
    )
    # -- the nightly: business dates, data quality, the lateness curve, outputs
    report_timezone: str = _setting(
        "UTC",
        "time zone of business dates (a window belongs to the date its start falls on) and of "
        "the Airflow schedules, e.g. Asia/Kolkata",
        check=Parses(_time_zone, "a time zone (IANA name)"),
    )
    dedup: str = _setting(
        "index",
        "how the nightly finds each event's first arrival over the whole log: index (the "
        "index of event ids, caught up with what arrived since the last run: the cost "
        "of the day) or full (every repeated id of the log ranked each run; the oracle)",
        check=one_of(DEDUP_MODES),
    )
    evidence_rows: int = _setting(
        EVIDENCE_ROWS,
        "the nightly keeps at most this many records of each kind (events, late rows, stream "
        "revisions) of each UNEXPLAINED window in reconciliation_evidence, never-counted "
        "events first (the desk's window pages read them)",
        check=between(1, 100_000),
    )
    restatement_policy: str = _setting(
        "rerun",
        "what a reconciled date that gained first arrivals after its run gets: rerun (the date "
        "is re-run; a change within the restatement tolerance is signed off automatically, a "
        "larger one asks for sign-off again) or flag (recorded pending, and tally "
        "restatements exits 1; the date stays reopened until someone re-runs it)",
        check=one_of(RESTATEMENT_POLICIES),
    )
    restatement_tolerance_events: int = _setting(
        0,
        "events a restatement may add (in absolute value) and be signed off automatically",
        check=not_negative("must be 0 or more"),
    )
    restatement_tolerance_amount: int = _setting(
        0,
        "amount (minor units) a restatement may add (in absolute value) and be signed off "
        "automatically",
        check=not_negative("must be 0 or more"),
    )
    late_rate_warn: float = _setting(
        0.001, "validation warns when late events exceed this share of the day's events"
    )
    late_rate_fail: float = _setting(
        0.01, "validation fails when late events exceed this share of the day's events"
    )
    unexplained_tolerance: int = _setting(
        0,
        "UNEXPLAINED windows a business date may have and still pass validation (without "
        "materiality tolerance rules; with them the date's severity is checked instead)",
    )
    default_currency: str = _setting(
        DEFAULT_CURRENCY,
        "the currency of amounts nothing names one for (an ISO 4217 code, upper case): an "
        "event without a `currency` (recorded in its events row), rows written before events "
        "carried one (read as it), and a date without windows (its one summary row); every "
        "other amount is in its own row's currency, kept apart per currency",
        check=Parses(_currency, "an ISO 4217 code in use, upper case"),
    )
    tolerance: str = _setting(
        "[]",
        "materiality tolerances: rules grading each window's and each date's unexplained "
        "residual ok, warn or fail (the reconciliation rows' and the summary's severity: "
        "ok signs off automatically, warn asks a person, fail asks a person and fails "
        "validation), the first rule matching the row's key and currency deciding (none: "
        "every residual fails). In the file an array of tables "
        "[[tolerance]]: key (a glob), currency "
        "(or *), name, and window and date tables of limits warn_abs/fail_abs (minor units), "
        "warn_pct/fail_pct (percent of the batch amount), warn_count/fail_count (events); in "
        "TALLY_TOLERANCE the same as a JSON array. Held and recorded as canonical JSON "
        '(docs/semantics.md, "Materiality tolerances")',
        kind="tolerance_rules",
        check=Parses(_tolerance_rules, "each rule a key, names unique, each limit warn <= fail"),
    )
    completeness_target: float = _setting(
        99.9,
        "completeness in percent a lateness bound must reach (the lateness curve, the weekly "
        "tuning, the report; the stream's target under lateness auto)",
        check=percentage,
    )
    lateness_candidates: str = _setting(
        "0s,1s,2s,5s,10s,30s,1m,5m",
        "the lateness bounds the curve and the weekly tuning try (the configured one is added)",
        check=Parses(parse_duration_list, "durations, comma-separated"),
    )
    amount_min: int = _setting(
        -1_000_000_000, "validation: the smallest amount, in minor units (-10,000,000.00)"
    )
    amount_max: int = _setting(1_000_000_000, "validation: the largest amount, in minor units")
    clock_skew_tolerance: float = _setting(
        0.0,
        "validation: the share of events allowed further ahead than max_clock_skew",
        check=fraction,
    )
    duplicate_rate_max: float = _setting(
        0.01, "validation: the largest share of duplicate events", check=fraction
    )
    watermark_lag_max: int = _duration_field(
        "10m", "validation: the largest watermark lag of the last micro-batch that was not drained"
    )
    report_dir: str = _setting(
        "",
        "where the nightly writes report-DATE.html, its CSV and index.html (empty = reports/ "
        "beside a local warehouse, else in the working directory)",
    )
    gx_root: str = _setting(
        "",
        "the directory holding the Great Expectations project gx/ and its Data Docs (empty = "
        "beside a local warehouse, else the working directory)",
    )
    # -- streaming health check (the tally_streaming_health DAG)
    health_lag_factor: float = _setting(
        3.0,
        "health: alert when the watermark lag is above this factor times the median lag of "
        "recent batches (and above health_min_lag)",
        check=positive,
    )
    health_min_lag: int = _duration_field(
        "1m", "health: the watermark lag below which no lag alert is raised"
    )
    health_history: int = _setting(
        20, "health: the recent batches read (steady state, late rate)", check=not_negative()
    )
    health_spread_batches: int = _setting(
        5,
        "health: alert when the partition spread rose in each of the last this many batches",
        check=not_negative(),
    )
    health_idle_max: int = _duration_field(
        "10m", "health: alert on a partition silent (or expected and unheard) this long"
    )
    health_regression_min: int = _setting(
        3,
        "health: alert on a partition whose source watermark went back in at least this many "
        "of the last health_regression_batches batches (0 = no such alert)",
        check=not_negative(),
    )
    health_regression_batches: int = _setting(
        10, "health: the recent batches health_regression_min counts over", check=positive
    )
    # -- orchestration (the Airflow DAGs): runner, schedules, retries, sensor
    spark_runner: str = _setting(
        "local",
        "Airflow: local runs Spark in the task's process; submit runs each stage with "
        "spark-submit through the connection tally_spark",
        check=one_of(SPARK_RUNNERS),
    )
    nightly_schedule: str = _setting(
        "30 0 * * *", "Airflow: cron of the nightly reconciliation, in report_timezone", check=cron
    )
    nightly_start: str = _setting(
        "2026-11-20",
        "Airflow: the first business date the nightly DAG reconciles",
        check=Parses(_business_date, "a date, YYYY-MM-DD"),
    )
    health_schedule: str = _setting(
        "*/5 * * * *", "Airflow: cron of the streaming health check, in report_timezone", check=cron
    )
    tuning_schedule: str = _setting(
        "0 3 * * 1", "Airflow: cron of the weekly lateness tuning, in report_timezone", check=cron
    )
    retries: int = _setting(2, "Airflow: retries of a failed task", check=not_negative())
    retry_delay: int = _duration_field(
        "5m", "Airflow: the delay before a task's first retry (then exponential back-off)"
    )
    max_retry_delay: int = _duration_field("1h", "Airflow: the longest delay between retries")
    sensor_poke: int = _duration_field(
        "5m", "Airflow: how often the nightly's sensor checks the stream's watermark"
    )
    sensor_timeout: int = _duration_field(
        "6h",
        "Airflow: how long the sensor waits for the watermark before a critical alert "
        "(stream stalled)",
    )
    alert_email: str = _setting("", "Airflow: recipients of the SMTP alerts, comma-separated")
    signoff_timeout: int = _duration_field(
        "24h",
        "Airflow: how long the nightly waits for a person to accept or reject an unbalanced "
        "date (Required Actions) before it alerts and leaves the date open",
    )
    signoff_two_person: str = _setting(
        "fail",
        "Airflow: which unbalanced dates need two people (four eyes): fail (a gap the "
        "materiality tolerances grade fail, or any unexplained gap without tolerance rules: a "
        "reviewer prepares, a different person approves) or never (one person decides every "
        "date)",
        check=one_of(TWO_PERSON_RULES),
    )
    signoff_preparers: str = _setting(
        "",
        "Airflow: the user ids who may decide a date (one person) or prepare it (two), "
        "comma-separated (SimpleAuthManager: user names); empty = any user Airflow lets answer",
        check=Parses(
            _airflow_user_ids, "Airflow user ids (letters, digits, _.@+-), comma-separated"
        ),
    )
    signoff_approvers: str = _setting(
        "",
        "Airflow: the user ids who may approve a prepared decision, comma-separated; empty = any "
        "user Airflow lets answer; never the one who prepared it",
        check=Parses(
            _airflow_user_ids, "Airflow user ids (letters, digits, _.@+-), comma-separated"
        ),
    )
    aging_max: int = _duration_field(
        "7d",
        "open items (dates someone must act on): an alert when one has been open this long, "
        "and again each time it has been open another aging_max",
        check=at_least(3_600_000, duration=True),
    )
    desk_timeout: int = _duration_field(
        "15s",
        "Airflow UI: how long the Reconciliation view waits for the warehouse before it "
        "answers 'warehouse unreachable'",
    )

    def __post_init__(self) -> None:
        """Each field's own check in field order, then the relations between fields: the
        first problem stops it, as one line naming the setting."""
        for f in dataclasses.fields(self):
            check = f.metadata.get("check")
            problem = check(f.name, getattr(self, f.name)) if check else None
            if problem:
                raise SettingsError(problem)
        for relation in RELATIONS:
            problem = relation.problem(self)
            if problem:
                raise SettingsError(problem)

    @property
    def preparers(self) -> tuple[str, ...]:
        """`signoff_preparers` as user ids (empty: anyone Airflow lets answer)."""
        return user_ids(self.signoff_preparers)

    @property
    def approvers(self) -> tuple[str, ...]:
        """`signoff_approvers` as user ids (empty: anyone Airflow lets answer)."""
        return user_ids(self.signoff_approvers)

    @property
    def signoff_people(self) -> tuple[str, str]:
        """Who may prepare (or decide) and who may approve, in words for an open item."""
        return (
            ", ".join(self.preparers) or "any reviewer",
            ", ".join(self.approvers) or "any other reviewer",
        )

    @property
    def checkpoint_location(self) -> str:
        return self.checkpoint or default_checkpoint(self.warehouse)

    @property
    def window_slide_ms(self) -> int:
        """The slide H in milliseconds (the window size for tumbling windows)."""
        return self.window_slide or self.window

    @property
    def window_kind(self) -> str:
        if self.session_gap:
            return "session"
        return "tumbling" if self.window_slide_ms == self.window else "hopping"

    @property
    def lateness_by_partition_ms(self) -> dict[int, int]:
        """The per-partition lateness bounds ({} = `lateness` everywhere)."""
        return parse_partition_durations(self.lateness_by_partition, "lateness_by_partition")

    @property
    def expected_partition_set(self) -> frozenset[int] | None:
        """The partitions the watermark waits for: an empty set when none are expected, None
        for `all` (the Kafka topic's partitions, known when the stream starts)."""
        if self.expected_partitions == ALL_PARTITIONS:
            return None
        return parse_partition_list(self.expected_partitions, "expected_partitions")

    @property
    def tolerance_rules(self) -> tuple[ToleranceRule, ...]:
        """The materiality tolerance rules, in order (() = none: every residual fails)."""
        return rules_from_json(self.tolerance)

    @property
    def lateness_candidates_ms(self) -> list[int]:
        """The lateness bounds the curve and the tuning try, in milliseconds."""
        return parse_duration_list(self.lateness_candidates, "lateness_candidates")

    @property
    def output_root(self) -> str:
        """The local directory beside a local warehouse; the working directory for a URI
        warehouse (reports and Data Docs are local files people open in a browser)."""
        if "://" in self.warehouse and not self.warehouse.startswith("file:"):
            return os.getcwd()
        local = self.warehouse.removeprefix("file://").removeprefix("file:")
        return os.path.dirname(os.path.abspath(local.rstrip("/")))

    @property
    def report_location(self) -> str:
        """Where the nightly writes `report-DATE.html`, its CSV and `index.html`."""
        return self.report_dir or os.path.join(self.output_root, "reports")

    @property
    def gx_location(self) -> str:
        """The directory holding the Great Expectations project `gx/` (and its Data Docs)."""
        return self.gx_root or self.output_root

    @property
    def lateness_auto(self) -> bool:
        """`lateness = "auto"`: each partition's bound follows its delays."""
        return self.lateness is None

    @property
    def fixed_lateness(self) -> int:
        """The one fixed bound L: `lateness`, or under auto `lateness_max` (the widest bound
        auto may choose), for the readers that compare with a single bound."""
        return self.lateness_max if self.lateness is None else self.lateness

    def describe(self) -> dict[str, Any]:
        """Settings as people write them (durations formatted), for provenance."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.metadata.get("kind") == "lateness":
                value = LATENESS_AUTO if value is None else format_duration(value)
            elif f.metadata.get("kind") == "duration":
                value = format_duration(value)
            out[f.name] = value
        return out


class Relation(NamedTuple):
    """A rule between settings: the `fields` it reads, the rule in words (each field's row of
    docs/configuration.md states it) and `problem`, one line naming the setting, or None."""

    fields: tuple[str, ...]
    rule: str
    problem: Callable[[Settings], str | None]


def _lone_approver(s: Settings) -> str | None:
    """An approver left for whatever any preparer prepares (two people sign a fail gap)."""
    approvers = s.approvers
    if s.signoff_two_person == "never" or len(approvers) != 1:
        return None
    if s.preparers and approvers[0] not in s.preparers:
        return None
    return (
        f"signoff_approvers: {approvers[0]} alone cannot approve what {approvers[0]} "
        "prepared (name a second approver, or preparers without them)"
    )


def _late_rates(s: Settings) -> str | None:
    if 0 <= s.late_rate_warn <= s.late_rate_fail <= 1:
        return None
    return (
        "late_rate_warn/late_rate_fail: need 0 <= warn <= fail <= 1, got "
        f"{s.late_rate_warn}/{s.late_rate_fail}"
    )


def _unexplained_and_rules(s: Settings) -> str | None:
    if not (s.unexplained_tolerance and s.tolerance_rules):
        return None
    return (
        "unexplained_tolerance: a count of UNEXPLAINED windows is not checked under "
        "materiality tolerance rules (they grade the date: give a date limit, e.g. "
        f"fail_count); set one of them, got {s.unexplained_tolerance} and rules"
    )


# In the order they are checked, after every field's own check.
RELATIONS = (
    Relation(
        ("window", "window_slide", "session_gap"),
        "window > 0 and a multiple of window_slide (when set); not both window_slide and "
        "session_gap",
        lambda s: windowing_problem(s.window, s.window_slide, s.session_gap),
    ),
    Relation(
        ("signoff_two_person", "signoff_preparers", "signoff_approvers"),
        "under signoff_two_person fail, one approver alone is not also a preparer",
        _lone_approver,
    ),
    Relation(
        ("stream_lease", "lease_ttl"),
        "lease_ttl >= 1s while stream_lease is on",
        lambda s: (
            f"lease_ttl: must be at least 1s, got {format_duration(s.lease_ttl)}"
            if s.stream_lease and s.lease_ttl < 1_000
            else None
        ),
    ),
    Relation(
        ("late_rate_warn", "late_rate_fail"),
        "0 <= late_rate_warn <= late_rate_fail <= 1",
        _late_rates,
    ),
    Relation(
        ("amount_min", "amount_max"),
        "amount_min <= amount_max",
        lambda s: (
            f"amount_min/amount_max: min {s.amount_min} > max {s.amount_max}"
            if s.amount_min > s.amount_max
            else None
        ),
    ),
    Relation(
        ("lateness_min", "lateness_max"),
        "lateness_min <= lateness_max",
        lambda s: (
            f"lateness_min/lateness_max: min {format_duration(s.lateness_min)} > max "
            f"{format_duration(s.lateness_max)}"
            if s.lateness_min > s.lateness_max
            else None
        ),
    ),
    Relation(
        ("lateness", "lateness_max"),
        "lateness auto needs lateness_max > 0",
        lambda s: (
            "lateness_max: lateness auto needs a positive lateness_max (0 is a fixed bound "
            "of 0: set lateness = 0s)"
            if s.lateness is None and s.lateness_max == 0
            else None
        ),
    ),
    Relation(
        ("unexplained_tolerance", "tolerance"),
        "unexplained_tolerance 0 when tolerance rules are given",
        _unexplained_and_rules,
    ),
    Relation(
        ("expected_partitions", "source_kind"),
        "all only with source_kind kafka",
        lambda s: (
            "expected_partitions: all means every partition of a Kafka topic; with "
            f"source_kind {s.source_kind} list them, e.g. 0-2"
            if s.expected_partitions == ALL_PARTITIONS and s.source_kind != "kafka"
            else None
        ),
    ),
)


def setting_rules(name: str) -> list[str]:
    """The rules a setting's value keeps, in words: its own check's, then each relation's
    that reads it (docs/configuration.md)."""
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    check = fields[name].metadata.get("check")
    own = [check.describe()] if check else []
    return own + [r.rule for r in RELATIONS if name in r.fields]


def setting_default(name: str) -> Any:
    """A setting's declared default (its field's, no environment read): what a value recorded
    before the setting existed stands for."""
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    return fields[name].default


def setting_help(name: str) -> str:
    """What a setting means, as its field's `help` states it."""
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    return str(fields[name].metadata["help"])


def _coerce(name: str, raw: Any) -> Any:
    """Turn a file/env/CLI value into the field's type, or fail naming the setting."""
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    if name not in fields:
        raise SettingsError(f"{name}: unknown setting (known: {', '.join(sorted(fields))})")
    f = fields[name]
    if f.metadata.get("kind") == "tolerance_rules":  # TOML tables, or JSON text from env
        return tolerance_text(raw)
    if f.metadata.get("kind") == "duration":
        return parse_duration(raw, name)
    if f.metadata.get("kind") == "lateness":
        return parse_lateness(raw, name)
    if f.metadata.get("kind") == "partition_durations":
        return format_partition_durations(parse_partition_durations(raw, name))
    if f.metadata.get("kind") == "partition_list":
        if isinstance(raw, str) and raw.strip().lower() == ALL_PARTITIONS:
            return ALL_PARTITIONS
        return format_partition_list(parse_partition_list(raw, name))
    kind = f.type if isinstance(f.type, str) else f.type.__name__
    if kind == "bool":
        return _coerce_bool(name, raw)
    try:
        if kind == "int":
            if isinstance(raw, bool | float):
                raise ValueError
            return int(raw)
        if kind == "float":
            return float(raw)
    except (TypeError, ValueError):
        raise SettingsError(
            f"{name}: expected {'an integer' if kind == 'int' else 'a number'}, got {raw!r}"
        ) from None
    if not isinstance(raw, str):
        raise SettingsError(f"{name}: expected text, got {raw!r}")
    return raw


def tolerance_text(raw: Any) -> str:
    """Tolerance rules (a list of tables, or JSON text) as their canonical JSON, or a
    SettingsError naming the rule and the field."""
    try:
        rules = rules_from_json(raw) if isinstance(raw, str) else parse_rules(raw)
    except ToleranceError as exc:
        raise SettingsError(str(exc)) from None
    return rules_as_json(rules)


_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def _coerce_bool(name: str, raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise SettingsError(f"{name}: expected true or false, got {raw!r}")


def given_values(
    config_file: str | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The settings given explicitly (config file, then TALLY_* env, then overrides; None
    values are ignored), typed; defaults are not included."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    path = config_file or env.get("TALLY_CONFIG")
    if path:
        try:
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
        except FileNotFoundError:
            raise SettingsError(f"config: file not found: {path}") from None
        except tomllib.TOMLDecodeError as exc:
            raise SettingsError(f"config: {path} is not valid TOML: {exc}") from None
        table = data.get("tally", data)
        if table is not data and "tolerance" in data:
            # `[[tolerance]]` beside a `[tally]` table is tally's too, not silently ignored
            if "tolerance" in table:
                raise SettingsError("tolerance: given as [[tolerance]] and [[tally.tolerance]]")
            table = {**table, "tolerance": data["tolerance"]}
        for key, raw in table.items():
            name = key.replace("-", "_")
            values[name] = _coerce(name, raw)
    known = {f.name for f in dataclasses.fields(Settings)}
    for key, raw in env.items():
        if key.startswith("TALLY_") and key != "TALLY_CONFIG":
            name = key[len("TALLY_") :].lower()
            if name in known:
                values[name] = _coerce(name, raw)
    for key, raw in (overrides or {}).items():
        if raw is not None:
            name = key.replace("-", "_")
            values[name] = _coerce(name, raw)
    return values


def load_settings(
    config_file: str | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Defaults, then the TOML config file (`[tally]` table or top level), then TALLY_* env,
    then overrides (CLI flags; None values are ignored)."""
    return Settings(**given_values(config_file, env, overrides))
