"""`tally` command line: each subcommand reads settings (file < env < flags) and runs.

Exit codes of every command: 0 done (and, for the nightly commands, clean), 1 the command ran
and found a problem it names in one line on stderr, 2 a bad setting or missing input (nothing
was written). Spark's and py4j's logs stay out of the output unless `--verbose` is given.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from tally.durations import parse_duration
from tally.settings import Settings, SettingsError, given_values, setting_help

# Shorter flags some settings also answer to.
FLAG_ALIASES = {"source_kind": ("--source",)}

# The stream's housekeeping (docs/operations.md); `tally maintain` reads them too.
HOUSEKEEPING_SETTINGS = (
    "maintenance",
    "maintenance_mode",
    "compact_interval",
    "compact_min_files",
    "compact_closed_dates",
    "vacuum_interval",
    "deleted_file_retention",
    "log_retention",
)
STREAM_SETTINGS = (
    "window",
    "window_slide",
    "session_gap",
    "lateness",
    "lateness_min",
    "lateness_max",
    "completeness_target",
    "lateness_by_partition",
    "expected_partitions",
    "source_watermark_field",
    "early_firing_interval",
    "allowed_lateness",
    "dedup_horizon",
    "idle_timeout",
    "max_clock_skew",
    "watermark_policy",
    "warehouse",
    "checkpoint",
    "input",
    "spark_master",
    "max_files_per_trigger",
    "trigger",
    "shuffle_partitions",
    "source_kind",
    "kafka_bootstrap",
    "kafka_topic",
    "kafka_connect_timeout",
    "kafka_starting_offsets",
    "max_records_per_trigger",
    "max_record_bytes",
    "stream_lease",
    "lease_ttl",
    *HOUSEKEEPING_SETTINGS,
)
MAINTAIN_FROM_STREAM = ("window", "session_gap", "allowed_lateness")
MAINTAIN_SETTINGS = (
    "warehouse",
    "spark_master",
    "window",
    "session_gap",
    "allowed_lateness",
    "checkpoint",
    "stream_lease",
    "lease_ttl",
    *HOUSEKEEPING_SETTINGS,
)
PRODUCE_SETTINGS = ("kafka_bootstrap", "kafka_topic", "kafka_connect_timeout", "input")
SHOW_SETTINGS = ("warehouse", "spark_master")
LEDGER_SETTINGS = ("warehouse", "s3_endpoint", "s3_region", "s3_path_style")
RECONCILE_SETTINGS = (
    "window",
    "window_slide",
    "session_gap",
    "warehouse",
    "report_timezone",
    "spark_master",
    "dedup",
)
# each date is recomputed with its own run's windowing and zone (no window flags to ignore)
RESTATEMENT_SETTINGS = (
    "warehouse",
    "spark_master",
    "dedup",
    "restatement_policy",
    "restatement_tolerance_events",
    "restatement_tolerance_amount",
)
CURVE_SETTINGS = (
    "window",
    "warehouse",
    "report_timezone",
    "spark_master",
    "completeness_target",
    "lateness_candidates",
)
VALIDATE_SETTINGS = ("warehouse", "report_timezone", "spark_master", "max_clock_skew")
REPORT_SETTINGS = ("warehouse", "spark_master", "report_timezone", "lateness")

# Commands contributed by packages above this one (e.g. `tally bench` from bench/), found
# through this entry-point group so the command line never imports them.
EXTENSION_GROUP = "tally.commands"

Command = Callable[[argparse.Namespace, Settings], int]


def setting_flags(parser: argparse.ArgumentParser, names: Sequence[str]) -> None:
    """Flags that override settings; they default to None so file/env values survive."""
    for name in names:
        flags = ("--" + name.replace("_", "-"), *FLAG_ALIASES.get(name, ()))
        # the setting's own text (tally/settings.py); argparse reads % as a format
        help_text = setting_help(name).replace("%", "%%")
        parser.add_argument(*flags, dest=name, default=None, help=help_text)


def _command(
    sub: Any,
    name: str,
    func: Command,
    settings: Sequence[str],
    flags: Sequence[str] | None = None,
    **kwargs: Any,
) -> argparse.ArgumentParser:
    """A subcommand reading `settings`; `flags` (default: all of them) get a generic flag."""
    parser: argparse.ArgumentParser = sub.add_parser(name, **kwargs)
    setting_flags(parser, settings if flags is None else flags)
    # also accepted after the command; SUPPRESS keeps a --verbose given before it
    parser.add_argument(
        "--verbose", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )
    parser.set_defaults(func=func, setting_names=tuple(settings))
    return parser


@dataclass(frozen=True)
class Subcommand:
    """One `tally` command: what runs it (a function of `tally_app.commands`), the settings
    it reads, which of them are offered as flags (default: all), and the function adding
    its own flags."""

    name: str
    run: str
    settings: tuple[str, ...]
    help: str
    flags: tuple[str, ...] | None = None
    own_flags: str | None = None
    epilog: str | None = None


SUBCOMMANDS = (
    Subcommand(
        "generate", "generate", (), "write a synthetic stream as JSONL", own_flags="generate_flags"
    ),
    Subcommand(
        "produce",
        "produce",
        PRODUCE_SETTINGS,
        "publish JSONL input to a Kafka topic, in arrival order",
        own_flags="produce_flags",
    ),
    Subcommand(
        "stream",
        "stream",
        STREAM_SETTINGS,
        "run the speed layer over the input",
        own_flags="stream_flags",
    ),
    Subcommand(
        "maintain",
        "maintain",
        MAINTAIN_SETTINGS,
        "compact and vacuum the stream's tables once, while no stream runs",
        # the window settings (which dates are closed) are the stream's: from its environment
        # or config file, not flags of their own here
        flags=tuple(n for n in MAINTAIN_SETTINGS if n not in MAINTAIN_FROM_STREAM),
    ),
    Subcommand("show", "show", SHOW_SETTINGS, "print a tally table", own_flags="show_flags"),
    Subcommand(
        "ledger",
        "ledger",
        LEDGER_SETTINGS,
        "the reconciliation desk's ledger: one row per business date",
        flags=("warehouse",),  # the object store's settings: from the environment or config
        own_flags="ledger_flags",
        epilog="Exit codes: 0 printed, 2 bad filter or unreadable warehouse.",
    ),
    Subcommand(
        "reconcile",
        "reconcile",
        RECONCILE_SETTINGS,
        "the nightly sequence for a business date: re-aggregate, diff, validate, report",
        own_flags="reconcile_flags",
    ),
    Subcommand(
        "restatements",
        "restatements",
        RESTATEMENT_SETTINGS,
        "check the reconciled dates the stream changed after their run, and re-run or "
        "flag them (restatement_policy)",
        own_flags="restatements_flags",
        epilog="Exit codes: 0 nothing changed or every change signed off, 1 a date is "
        "pending or awaits sign-off (one line each), 2 bad setting or input.",
    ),
    Subcommand(
        "lateness-curve",
        "lateness_curve",
        CURVE_SETTINGS,
        "completeness and emit latency per lateness bound, replaying arrivals",
        # --lateness and --target are the curve's own flags; the curve measures lateness
        # against tumbling windows of --window, so the window-kind flags are not offered
        flags=CURVE_SETTINGS[:4],
        own_flags="curve_flags",
        epilog="Exit codes: 0 some bound reaches the target, 1 none in the list does "
        "(with --by-partition: or some partition has none; the curve is still printed), "
        "2 bad setting or missing input.",
    ),
    Subcommand(
        "validate",
        "validate",
        VALIDATE_SETTINGS,
        "run the Great Expectations suites on a business date",
        own_flags="validate_flags",
        epilog="Exit codes: 0 passed, 1 a critical check failed, 2 bad setting.",
    ),
    Subcommand(
        "report",
        "report",
        REPORT_SETTINGS,
        "write the finance/audit report of a business date (one HTML file + a CSV)",
        own_flags="report_flags",
        epilog="Exit codes: 0 written, 2 bad setting or nothing to report on.",
    ),
)


def build_parser() -> argparse.ArgumentParser:
    from tally_app import commands

    parser = argparse.ArgumentParser(
        prog="tally",
        description="Fast numbers now, audited numbers tonight, every late event accounted for.",
        epilog="Exit codes: 0 done and clean, 1 a problem found (one line on stderr), "
        "2 bad setting or missing input. Spark's own logs go to <tmp>/tally-logs/tally.log "
        "unless --verbose is given.",
    )
    parser.add_argument("--config", help="TOML settings file (also TALLY_CONFIG)")
    parser.add_argument(
        "--verbose", action="store_true", help="show Spark's and tally's logs on stderr"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for spec in SUBCOMMANDS:
        extra = {"epilog": spec.epilog} if spec.epilog else {}
        command = _command(
            sub,
            spec.name,
            getattr(commands, spec.run),
            spec.settings,
            spec.flags,
            help=spec.help,
            **extra,
        )
        if spec.own_flags:
            getattr(commands, spec.own_flags)(command)
    _extensions(sub)
    return parser


def _extensions(sub: Any) -> None:
    """The commands contributed through `EXTENSION_GROUP` (a missing package: no command)."""
    for extension in entry_points(group=EXTENSION_GROUP):
        try:
            add_commands = extension.load()
        except ModuleNotFoundError as exc:
            # a deployment without that package (the Docker image has no bench/): no command
            if (exc.name or "").split(".")[0] == extension.module.split(".")[0]:
                continue
            raise
        add_commands(sub)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from tally.spark import quiet_logs

    quiet_logs(verbose=args.verbose)
    try:
        if getattr(args, "duration", None) is not None and args.command == "generate":
            args.duration = parse_duration(args.duration, "duration")
        overrides = {name: getattr(args, name, None) for name in args.setting_names}
        given = given_values(args.config, overrides=overrides)
        settings = Settings(**given)
        args.given_settings = frozenset(given)
    except SettingsError as exc:
        print(f"tally: bad setting: {exc}", file=sys.stderr)
        return 2
    result: int = args.func(args, settings)
    return result


if __name__ == "__main__":
    sys.exit(main())
