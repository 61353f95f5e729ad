"""`tally` command line: each subcommand reads settings (file < env < flags) and runs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from tally.settings import Settings, SettingsError, load_settings, parse_duration


def _utc_datetime(text: str) -> datetime:
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no time zone; write e.g. {text}Z")
    return value.astimezone(UTC)


def _settings_args(parser: argparse.ArgumentParser, *names: str) -> None:
    """Flags that override settings; they default to None so file/env values survive."""
    helps = {
        "window": "window size, e.g. 60s",
        "lateness": "lateness bound L (watermark = high-water mark - L), e.g. 30s",
        "allowed_lateness": "allowed lateness G: revise closed windows for this long",
        "idle_timeout": "exclude a partition silent this long (processing time)",
        "max_clock_skew": "event times further ahead of processing time are clipped",
        "watermark_policy": "partition-min (default) or global-max",
        "warehouse": "warehouse location (directory or URI) of the Delta tables",
        "checkpoint": "checkpoint location (default <warehouse>/_checkpoints/stream)",
        "input": "input directory of JSONL files",
        "spark_master": "Spark master URL, e.g. local[*] or spark://host:7077",
        "max_files_per_trigger": "files per micro-batch",
        "trigger": "processing-time trigger interval, e.g. 5s",
        "shuffle_partitions": "spark.sql.shuffle.partitions for the job",
        "report_timezone": "time zone of business dates, e.g. Asia/Kolkata",
    }
    for name in names:
        flag = "--" + name.replace("_", "-")
        parser.add_argument(flag, dest=name, default=None, help=helps.get(name))


def _overrides(args: argparse.Namespace, names: Sequence[str]) -> dict[str, Any]:
    return {name: getattr(args, name, None) for name in names}


def _cmd_generate(args: argparse.Namespace, settings: Settings) -> int:
    from tally.generate import generate

    manifest = generate(
        out=args.out,
        events=args.events,
        partitions=args.partitions,
        seed=args.seed,
        start=args.start,
        duration_ms=args.duration,
        files=args.files,
        keys=args.keys,
        progress=not args.quiet,
    )
    print(
        f"wrote {manifest['lines']} lines in {manifest['files']} files to {args.out} "
        f"({manifest['valid_events']} valid events, {manifest['duplicates']} duplicates, "
        f"{manifest['malformed_lines']} malformed)"
    )
    return 0


STREAM_SETTINGS = (
    "window",
    "lateness",
    "allowed_lateness",
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
)


def _cmd_stream(args: argparse.Namespace, settings: Settings) -> int:
    from streaming.job import run_stream

    progress = run_stream(
        settings,
        available_now=args.available_now,
        drain=args.drain,
        clock=args.clock,
        timeout_s=args.timeout,
    )
    print(progress)
    return 0


def _cmd_show(args: argparse.Namespace, settings: Settings) -> int:
    from tally.show import show_table

    return show_table(
        settings,
        args.table,
        as_json=args.json,
        where=args.where,
        limit=args.limit,
        out=sys.stdout,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tally", description=__doc__)
    parser.add_argument("--config", help="TOML settings file (also TALLY_CONFIG)")
    sub = parser.add_subparsers(dest="command", required=True)

    gen = sub.add_parser("generate", help="write a synthetic event stream as JSONL files")
    gen.add_argument("--out", required=True, help="output directory")
    gen.add_argument("--events", type=int, default=100_000, help="number of events")
    gen.add_argument("--partitions", type=int, default=8, help="source partitions")
    gen.add_argument("--seed", type=int, default=7)
    gen.add_argument(
        "--start",
        type=_utc_datetime,
        default=datetime(2026, 11, 20, tzinfo=UTC),
        help="event time of the first event (ISO-8601 with zone)",
    )
    gen.add_argument("--duration", default="1d", help="event-time span, e.g. 1d or 2h")
    gen.add_argument("--files", type=int, default=None, help="arrival slices (default: auto)")
    gen.add_argument("--keys", type=int, default=1000, help="distinct keys")
    gen.add_argument("--quiet", action="store_true", help="no progress output")
    gen.set_defaults(func=_cmd_generate, setting_names=())

    stream = sub.add_parser("stream", help="run the speed layer over the input directory")
    _settings_args(stream, *STREAM_SETTINGS)
    stream.add_argument("--available-now", action="store_true", help="process the backlog, stop")
    stream.add_argument(
        "--drain", action="store_true", help="at end of input, emit every open window"
    )
    stream.add_argument(
        "--clock",
        choices=("wall", "arrival"),
        default="wall",
        help="processing time: the wall clock, or the newest input file's modification time "
        "(replays of recorded arrivals)",
    )
    stream.add_argument("--timeout", type=float, default=None, help="stop after this many seconds")
    stream.set_defaults(func=_cmd_stream, setting_names=STREAM_SETTINGS)

    show = sub.add_parser("show", help="print a tally table")
    _settings_args(show, "warehouse", "spark_master")
    show.add_argument("table")
    show.add_argument("--json", action="store_true", help="one JSON object per line")
    show.add_argument("--where", help="SQL filter, e.g. \"key = 'merchant-1'\"")
    show.add_argument("--limit", type=int, default=20)
    show.set_defaults(func=_cmd_show, setting_names=("warehouse", "spark_master"))

    # The nightly layer's commands live beside their code.
    from batch.curve import add_commands as add_curve_commands
    from batch.reconcile import add_commands as add_reconcile_commands
    from expectations.report import add_commands as add_report_commands
    from expectations.validate import add_commands as add_validate_commands

    add_reconcile_commands(sub)
    add_curve_commands(sub)
    add_validate_commands(sub)
    add_report_commands(sub)

    from bench.run import add_commands as add_bench_commands

    add_bench_commands(sub)

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.func is _cmd_generate:
            args.duration = parse_duration(args.duration, "duration")
        settings = load_settings(args.config, overrides=_overrides(args, args.setting_names))
    except SettingsError as exc:
        print(f"tally: bad setting: {exc}", file=sys.stderr)
        return 2
    result: int = args.func(args, settings)
    return result


if __name__ == "__main__":
    sys.exit(main())
