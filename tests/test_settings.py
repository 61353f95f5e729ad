"""Settings: durations, precedence (defaults < file < env < flags), one-line errors."""

from __future__ import annotations

import pytest

from tally.durations import format_duration, parse_duration
from tally.settings import Settings, SettingsError, load_settings, setting_rules
from tally.spark import QUICK_JIT, cluster_conf, driver_java_options, object_store_conf
from tally_app.cli import main


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("500ms", 500),  # milliseconds as written
        ("10s", 10_000),
        ("1m", 60_000),
        ("1h", 3_600_000),
        ("2d", 172_800_000),
        ("0", 0),  # zero needs no unit: it is zero in every unit
        (" 30s ", 30_000),  # surrounding blanks from env files are tolerated
        (250, 250),  # an int from TOML is already milliseconds
    ],
)
def test_parse_duration(text: str | int, ms: int) -> None:
    assert parse_duration(text) == ms


@pytest.mark.parametrize("text", ["10", "1.5s", "-1s", "ten seconds", "1w", "", "s"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(SettingsError, match=r"^lateness: "):
        parse_duration(text, "lateness")


def test_format_duration_round_trips() -> None:
    for ms in (0, 500, 1_000, 90_000, 3_600_000, 86_400_000, 1_234):
        assert parse_duration(format_duration(ms)) == ms


def test_precedence_file_env_flags(tmp_path) -> None:
    config = tmp_path / "tally.toml"
    config.write_text('[tally]\nwindow = "2m"\nlateness = "20s"\nwarehouse = "from-file"\n')
    env = {"TALLY_LATENESS": "45s", "TALLY_IDLE_TIMEOUT": "5m", "UNRELATED": "x"}
    settings = load_settings(str(config), env=env, overrides={"warehouse": "s3a://b/wh"})
    assert settings.window == 120_000  # file beats default
    assert settings.lateness == 45_000  # env beats file
    assert settings.idle_timeout == 300_000  # env beats default
    assert settings.warehouse == "s3a://b/wh"  # flag beats file
    assert settings.checkpoint_location == "s3a://b/wh/_checkpoints/stream"
    assert Settings().lateness == 30_000


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"TALLY_WINDOW": "fast"}, r"^window: expected a duration"),
        ({"TALLY_WINDOW": "0s"}, r"^window: must be positive"),
        ({"TALLY_WATERMARK_POLICY": "max"}, r"^watermark_policy: expected one of"),
        ({"TALLY_MAX_FILES_PER_TRIGGER": "many"}, r"^max_files_per_trigger: expected an integer"),
        ({"TALLY_SOURCE_KIND": "pulsar"}, r"^source_kind: expected one of files, kafka"),
        ({"TALLY_MAX_RECORDS_PER_TRIGGER": "0"}, r"^max_records_per_trigger: must be positive"),
        ({"TALLY_REPORT_TIMEZONE": "Mars/Olympus"}, r"^report_timezone: unknown time zone"),
        ({"TALLY_LATE_RATE_WARN": "0.5", "TALLY_LATE_RATE_FAIL": "0.1"}, r"^late_rate_warn"),
        # per-source lateness: a pair without '=', a bad key, a bad duration, a repeat
        ({"TALLY_LATENESS_BY_PARTITION": "0:100ms"}, r"^lateness_by_partition: expected PART"),
        ({"TALLY_LATENESS_BY_PARTITION": "radar=1s"}, r"^lateness_by_partition: 'radar' is"),
        ({"TALLY_LATENESS_BY_PARTITION": "3-1=1s"}, r"^lateness_by_partition: '3-1' is not"),
        ({"TALLY_LATENESS_BY_PARTITION": "0=fast"}, r"^lateness_by_partition\[0\]: expected"),
        ({"TALLY_LATENESS_BY_PARTITION": "0-2=1s,2=5s"}, r"partition 2 is given twice"),
        # two window kinds at once: which one the user meant is not ours to guess
        ({"TALLY_SESSION_GAP": "30s", "TALLY_WINDOW_SLIDE": "10s"}, r"^session_gap and window_"),
        ({"TALLY_SESSION_GAP": "a while"}, r"^session_gap: expected a duration"),
        # expected partitions: a name, a reversed range, a repeat, `all` without Kafka
        ({"TALLY_EXPECTED_PARTITIONS": "radar"}, r"^expected_partitions: 'radar' is not"),
        ({"TALLY_EXPECTED_PARTITIONS": "2-0"}, r"^expected_partitions: '2-0' is not a range"),
        ({"TALLY_EXPECTED_PARTITIONS": "0-2,1"}, r"^expected_partitions: partition 1 is given"),
        ({"TALLY_EXPECTED_PARTITIONS": "all"}, r"^expected_partitions: all means every part"),
        ({"TALLY_HEALTH_REGRESSION_BATCHES": "0"}, r"^health_regression_batches: must be pos"),
        # adaptive lateness: neither word nor duration; bounds reversed; auto with no room
        ({"TALLY_LATENESS": "adaptive"}, r"^lateness: expected a duration"),
        ({"TALLY_LATENESS_MIN": "1m", "TALLY_LATENESS_MAX": "30s"}, r"^lateness_min/lateness_"),
        (
            {"TALLY_LATENESS": "auto", "TALLY_LATENESS_MIN": "0", "TALLY_LATENESS_MAX": "0"},
            r"^lateness_max: lateness auto",
        ),
        ({"TALLY_DEFAULT_CURRENCY": "usd"}, r"^default_currency: expected a 3-letter upper"),
        ({"TALLY_DEFAULT_CURRENCY": "DEM"}, r"^default_currency: 'DEM' is not a current"),
        (  # two limits on one thing: the count of UNEXPLAINED windows is not checked with rules
            {"TALLY_UNEXPLAINED_TOLERANCE": "2", "TALLY_TOLERANCE": '[{"key": "*"}]'},
            r"^unexplained_tolerance: a count of UNEXPLAINED windows is not checked under",
        ),
    ],
)
def test_bad_setting_names_it(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message) as err:
        load_settings(env=env)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        # each field's own check (its rule sits beside its help text), the whole line
        ({"TALLY_EVIDENCE_ROWS": "0"}, "evidence_rows: must be between 1 and 100000, got 0"),
        ({"TALLY_COMPACT_MIN_FILES": "1"}, "compact_min_files: must be at least 2, got 1"),
        # a duration's minimum is written as a duration, and so is the value
        ({"TALLY_AGING_MAX": "10m"}, "aging_max: must be at least 1h, got 10m"),
        (
            {"TALLY_KAFKA_TOPIC": "a topic"},
            "kafka_topic: letters, digits, '.', '_' and '-' only, got 'a topic'",
        ),
        ({"TALLY_WAREHOUSE": ""}, "warehouse: must not be empty"),
        (
            {"TALLY_CLOCK_SKEW_TOLERANCE": "1.5"},
            "clock_skew_tolerance: must be a fraction in [0, 1], got 1.5",
        ),
        (
            {"TALLY_COMPLETENESS_TARGET": "0"},
            "completeness_target: must be a percentage in (0, 100], got 0.0",
        ),
        (
            {"TALLY_RESTATEMENT_TOLERANCE_EVENTS": "-1"},
            "restatement_tolerance_events: must be 0 or more, got -1",
        ),
        (
            {"TALLY_SIGNOFF_PREPARERS": "ann,b c"},
            "signoff_preparers: 'b c' is not an Airflow user id (letters, digits, _.@+-)",
        ),
        # the event's own fields (tally.vocabulary.KNOWN_FIELDS) cannot mark a control record
        (
            {"TALLY_SOURCE_WATERMARK_FIELD": "currency"},
            "source_watermark_field: a field name other than the event's own (letters, digits, "
            "'_'), got 'currency'",
        ),
        # relations between fields, checked after every field's own check
        (
            {"TALLY_AMOUNT_MIN": "5", "TALLY_AMOUNT_MAX": "4"},
            "amount_min/amount_max: min 5 > max 4",
        ),
        ({"TALLY_LEASE_TTL": "500ms"}, "lease_ttl: must be at least 1s, got 500ms"),
        (
            {"TALLY_WINDOW_SLIDE": "7s"},
            "window_slide: the window 1m must be a multiple of the slide, got 7s",
        ),
        (
            {"TALLY_SIGNOFF_APPROVERS": "ann"},
            "signoff_approvers: ann alone cannot approve what ann prepared (name a second "
            "approver, or preparers without them)",
        ),
    ],
)
def test_each_rule_says_what_is_wrong(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError) as err:
        load_settings(env=env)
    assert str(err.value) == message


@pytest.mark.parametrize(
    "env",
    [
        {"TALLY_LEASE_TTL": "500ms", "TALLY_STREAM_LEASE": "false"},  # no lease, no ttl to keep
        {"TALLY_SIGNOFF_APPROVERS": "ann", "TALLY_SIGNOFF_PREPARERS": "bob"},  # ann approves bob
        {"TALLY_SIGNOFF_APPROVERS": "ann", "TALLY_SIGNOFF_TWO_PERSON": "never"},  # one person
        {"TALLY_SPARK_EXECUTOR_MEMORY": "", "TALLY_S3_ENDPOINT": ""},  # empty: the setting is off
    ],
)
def test_a_relation_holds_only_where_it_applies(env: dict[str, str]) -> None:
    load_settings(env=env)


@pytest.mark.parametrize(
    ("name", "rules"),
    [
        ("watermark_policy", ["one of partition-min, global-max"]),  # one_of lists the choices
        ("audit_window", [">= 1d"]),  # a duration's minimum as people write it
        ("trigger", []),  # any duration
        # a relation is stated on each field it reads, after the field's own check
        ("source_kind", ["one of files, kafka", "all only with source_kind kafka"]),
        ("late_rate_fail", ["0 <= late_rate_warn <= late_rate_fail <= 1"]),
    ],
)
def test_setting_rules_are_what_the_docs_print(name: str, rules: list[str]) -> None:
    assert setting_rules(name) == rules


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("", {}),  # no overrides: `lateness` everywhere
        ("0=100ms", {0: 100}),
        ("0=100ms, 1-3=30s", {0: 100, 1: 30_000, 2: 30_000, 3: 30_000}),  # a range is a group
        ({"0": "100ms", "1..2": "10s"}, {0: 100, 1: 10_000, 2: 10_000}),  # a TOML table
        ({"4": 250}, {4: 250}),  # a TOML integer is milliseconds, like every duration
    ],
)
def test_lateness_by_partition(raw: object, expected: dict[int, int]) -> None:
    settings = load_settings(env={}, overrides={"lateness_by_partition": raw})
    assert settings.lateness_by_partition_ms == expected
    # the canonical text (provenance, `tally show`) reads back to the same bounds
    again = load_settings(env={"TALLY_LATENESS_BY_PARTITION": settings.lateness_by_partition})
    assert again.lateness_by_partition_ms == expected


@pytest.mark.parametrize(
    ("raw", "partitions", "text"),
    [
        ("", frozenset(), ""),  # none expected: today's rule, the minimum over those seen
        ("0-2", frozenset({0, 1, 2}), "0-2"),
        ("5, 0-1", frozenset({0, 1, 5}), "0-1,5"),  # canonical: sorted, ranges
        ([2, 0, 1], frozenset({0, 1, 2}), "0-2"),  # a TOML list
        (["0-1", 3], frozenset({0, 1, 3}), "0-1,3"),  # a TOML list with a range
    ],
)
def test_expected_partitions(raw: object, partitions: frozenset[int], text: str) -> None:
    settings = load_settings(env={}, overrides={"expected_partitions": raw})
    assert settings.expected_partition_set == partitions
    assert settings.expected_partitions == text
    again = load_settings(env={"TALLY_EXPECTED_PARTITIONS": settings.expected_partitions})
    assert again.expected_partition_set == partitions


def test_expected_partitions_all_is_the_kafka_topic() -> None:
    env = {"TALLY_EXPECTED_PARTITIONS": "ALL", "TALLY_SOURCE_KIND": "kafka"}
    settings = load_settings(env=env)
    assert settings.expected_partitions == "all"
    assert settings.expected_partition_set is None  # resolved when the stream starts


def test_lateness_by_partition_from_a_toml_table(tmp_path) -> None:
    config = tmp_path / "tally.toml"
    config.write_text(
        '[tally]\nlateness = "10s"\n\n[tally.lateness_by_partition]\n'
        '"0" = "100ms"  # radar\n"1" = "30s"  # HTTP poller\n"2-3" = "10s"  # satellite\n'
    )
    settings = load_settings(str(config), env={})
    assert settings.lateness_by_partition_ms == {0: 100, 1: 30_000, 2: 10_000, 3: 10_000}
    assert settings.describe()["lateness_by_partition"] == "0=100ms,1=30s,2-3=10s"


def test_unknown_key_in_file(tmp_path) -> None:
    config = tmp_path / "tally.toml"
    config.write_text('latenes = "5s"\n')
    with pytest.raises(SettingsError, match=r"^latenes: unknown setting"):
        load_settings(str(config), env={})


def test_cli_bad_flag_stops_before_anything_starts(tmp_path, capsys) -> None:
    warehouse = tmp_path / "wh"
    code = main(["stream", "--lateness", "soon", "--warehouse", str(warehouse)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err == [
        "tally: bad setting: lateness: expected a duration like 500ms, 10s, 1m or 1h, got 'soon'"
    ]
    assert not warehouse.exists()  # nothing started, nothing written


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"TALLY_SPARK_RUNNER": "yarn"}, "spark_runner: expected one of local, submit"),
        ({"TALLY_NIGHTLY_START": "2026-13-45"}, "nightly_start: expected YYYY-MM-DD"),
        ({"TALLY_NIGHTLY_SCHEDULE": "daily"}, "nightly_schedule: expected a cron expression"),
        ({"TALLY_RETRIES": "-1"}, "retries: must not be negative"),
        ({"TALLY_HEALTH_LAG_FACTOR": "0"}, "health_lag_factor: must be positive"),
        ({"TALLY_HEALTH_IDLE_MAX": "ten"}, "health_idle_max: expected a duration"),
        ({"TALLY_LATENESS_CANDIDATES": "1s,soon"}, "lateness_candidates: expected a duration"),
        # a typo must not silently mean "virtual-hosted buckets"
        ({"TALLY_S3_PATH_STYLE": "ture"}, "s3_path_style: expected true or false"),
        # an endpoint without a scheme would be read as a host on AWS's default port
        ({"TALLY_S3_ENDPOINT": "127.0.0.1:19000"}, r"s3_endpoint: expected http\(s\)://HOST"),
        # spark-submit's spelling of a size; "2 GB" would only fail once a cluster is asked
        ({"TALLY_SPARK_EXECUTOR_MEMORY": "2 GB"}, "spark_executor_memory: expected a size"),
        ({"TALLY_SPARK_CORES_MAX": "-1"}, "spark_cores_max: must not be negative"),
    ],
)
def test_orchestration_and_health_settings_are_checked_at_load(
    env: dict[str, str], message: str
) -> None:
    with pytest.raises(SettingsError, match=f"^{message}"):
        load_settings(env=env)


def test_output_locations_beside_a_local_warehouse(tmp_path) -> None:
    local = Settings(warehouse=str(tmp_path / "wh"))
    assert local.report_location == str(tmp_path / "reports")
    assert local.gx_location == str(tmp_path)
    chosen = load_settings(
        env={"TALLY_REPORT_DIR": "/srv/reports", "TALLY_GX_ROOT": "/srv/gx"},
        overrides={"warehouse": "s3a://bucket/wh"},
    )
    assert (chosen.report_location, chosen.gx_location) == ("/srv/reports", "/srv/gx")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("true", True),  # the documented spelling
        ("False", False),  # case does not matter
        ("1", True),  # what shells and compose files often pass
        ("no", False),
    ],
)
def test_boolean_settings_from_the_environment(raw: str, expected: bool) -> None:
    assert load_settings(env={"TALLY_S3_PATH_STYLE": raw}).s3_path_style is expected


def test_object_store_conf_names_no_credentials() -> None:
    conf = object_store_conf("http://127.0.0.1:19000", "us-east-1", path_style=True)
    assert conf == {
        "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:19000",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
        "spark.hadoop.fs.s3a.path.style.access": "true",
    }
    # AWS's own endpoints: nothing to set, the provider chain does the rest
    assert object_store_conf("", "", path_style=False) == {}


def test_cluster_conf_asks_only_for_what_is_set() -> None:
    # unset: local mode, spark-defaults.conf and spark-submit's flags decide
    assert cluster_conf("", 0) == {}
    assert cluster_conf("768m", 2) == {"spark.executor.memory": "768m", "spark.cores.max": "2"}
    settings = load_settings(env={"TALLY_SPARK_EXECUTOR_MEMORY": "2G"})
    assert (settings.spark_executor_memory, settings.spark_cores_max) == ("2G", 0)


def test_quick_jit_is_a_driver_option_that_can_be_turned_off() -> None:
    # opt-in for the batch commands (the stream never asks for it)
    assert load_settings(env={}).quick_jit is False
    assert load_settings(env={"TALLY_QUICK_JIT": "true"}).quick_jit is True
    assert driver_java_options(True).split() == ["-Duser.timezone=UTC", QUICK_JIT]
    assert driver_java_options(False) == "-Duser.timezone=UTC"


def test_session_gap_makes_session_windows() -> None:
    assert load_settings(env={}).window_kind == "tumbling"
    sessions = load_settings(env={"TALLY_SESSION_GAP": "30m"})
    assert (sessions.session_gap, sessions.window_kind) == (1_800_000, "session")
    assert load_settings(env={"TALLY_WINDOW_SLIDE": "10s"}).window_kind == "hopping"


@pytest.mark.parametrize(
    ("raw", "auto", "fixed"),
    [
        ("auto", True, 600_000),  # auto: the single-bound readers see lateness_max (10m)
        (" AUTO ", True, 600_000),  # the word as people type it in env files
        ("45s", False, 45_000),  # a duration is a fixed bound, as before
    ],
)
def test_lateness_auto(raw: str, auto: bool, fixed: int) -> None:
    settings = load_settings(env={"TALLY_LATENESS": raw})
    assert (settings.lateness_auto, settings.fixed_lateness) == (auto, fixed)
    # provenance writes it as people write it, and it reads back the same
    described = settings.describe()["lateness"]
    assert load_settings(env={"TALLY_LATENESS": described}).lateness == settings.lateness


def test_lateness_auto_from_the_stream_flag() -> None:
    settings = load_settings(
        env={}, overrides={"lateness": "auto", "lateness_min": "2s", "lateness_max": "1m"}
    )
    assert (settings.lateness, settings.lateness_min, settings.lateness_max) == (
        None,
        2_000,
        60_000,
    )
