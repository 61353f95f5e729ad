"""What each `tally` subcommand does: read its flags, build the session, call the layers, print
the result, return the exit code (see `tally_app.cli`). The layers' heavy modules are imported
inside the commands, so `tally --help` and `tally generate` start without Spark."""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from tally.dates import parse_business_date
from tally.durations import parse_duration
from tally.settings import Settings, SettingsError
from tally.spark import session_for


def _fail(command: str, message: Any, code: int) -> int:
    print(f"tally: {command}: {message}", file=sys.stderr)
    return code


def _bad_setting(message: Any) -> int:
    print(f"tally: bad setting: {message}", file=sys.stderr)
    return 2


def _date_flag(parser: argparse.ArgumentParser, required: bool = True) -> None:
    parser.add_argument("--date", required=required, help="business date, YYYY-MM-DD")


# -- generate -------------------------------------------------------------------------------------

GENERATE_PROFILES = ("default", "three-sources")


def _utc_datetime(text: str) -> datetime:
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no time zone; write e.g. {text}Z")
    return value.astimezone(UTC)


def generate_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument(
        "--profile",
        choices=GENERATE_PROFILES,
        default="default",
        help="default: one messy feed (the flags below); three-sources: a radar, an HTTP "
        "poller and a satellite beacon with 100 ms / 30 s / 10 s of disorder "
        "(tally_tools.sources, docs/scenarios.md; only --seed, --start and --duration apply)",
    )
    parser.add_argument("--events", type=int, default=None, help="number of events (100000)")
    parser.add_argument("--partitions", type=int, default=None, help="source partitions (8)")
    parser.add_argument(
        "--seed", type=int, default=7, help="random seed: the same seed, the same feed"
    )
    parser.add_argument(
        "--start",
        type=_utc_datetime,
        default=datetime(2026, 11, 20, tzinfo=UTC),
        help="event time of the first event (ISO-8601 with zone)",
    )
    parser.add_argument(
        "--duration", default=None, help="event-time span, e.g. 1d or 2h (1d; three-sources: 3m)"
    )
    parser.add_argument("--files", type=int, default=None, help="arrival slices (default: auto)")
    parser.add_argument("--keys", type=int, default=None, help="distinct keys (1000)")
    parser.add_argument(
        "--late-poller",
        action="store_true",
        help="three-sources only: the HTTP poller is first heard 25-28 s after --start "
        "(docs/scenarios.md, 'A source first heard late')",
    )
    parser.add_argument(
        "--currencies",
        default=None,
        help="ISO 4217 codes drawn per key, each with an optional weight: USD:3,EUR,JPY "
        "(default: the lines name no currency, so they take default_currency)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress output")


def generate(args: argparse.Namespace, settings: Settings) -> int:
    if args.profile == "three-sources":
        return _generate_three_sources(args)
    if args.late_poller:
        return _bad_setting("--late-poller: only with --profile three-sources")
    from tally_tools.generate import generate as write_stream
    from tally_tools.generate import parse_currencies

    try:
        currencies = parse_currencies(args.currencies) if args.currencies else None
    except ValueError as exc:
        return _bad_setting(str(exc))

    manifest = write_stream(
        out=args.out,
        events=100_000 if args.events is None else args.events,
        partitions=8 if args.partitions is None else args.partitions,
        seed=args.seed,
        start=args.start,
        duration_ms=parse_duration("1d") if args.duration is None else args.duration,
        files=args.files,
        keys=1000 if args.keys is None else args.keys,
        progress=not args.quiet,
        currencies=currencies,
    )
    print(
        f"wrote {manifest['lines']} lines in {manifest['files']} files to {args.out} "
        f"({manifest['valid_events']} valid events, {manifest['duplicates']} duplicates, "
        f"{manifest['malformed_lines']} malformed)"
    )
    return 0


def _generate_three_sources(args: argparse.Namespace) -> int:
    """`--profile three-sources`: the feed of `tally_tools.sources` (its shape is fixed: the flags
    that size the default profile's feed are refused, not ignored)."""
    from tally_tools.sources import generate as write_sources

    fixed = [f"--{name}" for name in ("events", "partitions", "files", "keys", "currencies")]
    given = [flag for flag in fixed if getattr(args, flag[2:]) is not None]
    if given:
        return _bad_setting(f"{', '.join(given)}: not with --profile three-sources (fixed shape)")
    duration = parse_duration("3m") if args.duration is None else args.duration
    try:
        manifest = write_sources(args.out, args.seed, args.start, duration, args.late_poller)
    except ValueError as exc:
        return _bad_setting(exc)
    print(
        f"wrote {manifest['lines']} lines in {manifest['files']} files to {args.out} "
        f"({manifest['valid_events']} valid events, {manifest['duplicates']} duplicates, "
        f"{manifest['malformed_lines']} malformed; "
        f"{len(manifest['beyond_bound_event_ids'])} beyond their source's bound); stream with "
        f"--lateness-by-partition {manifest['lateness_by_partition']}"
        + (" --expected-partitions 0-2" if args.late_poller else "")
    )
    return 0


def produce_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--partitions",
        type=int,
        default=None,
        help="partitions of a topic created here (default: the input's highest + 1)",
    )


def produce(args: argparse.Namespace, settings: Settings) -> int:
    from tally.settings import kafka_client_options
    from tally_tools.produce import ProduceError, input_files, publish

    directory = Path(settings.input)
    if not directory.is_dir():
        print(f"tally: produce: input directory {directory} not found", file=sys.stderr)
        return 2
    paths = input_files(directory)
    if not paths:
        print(f"tally: produce: no *.jsonl files in {directory}", file=sys.stderr)
        return 2
    if args.partitions is not None and args.partitions <= 0:
        print(
            f"tally: bad setting: partitions: must be positive, got {args.partitions}",
            file=sys.stderr,
        )
        return 2
    try:
        sent = publish(
            settings.kafka_bootstrap,
            settings.kafka_topic,
            paths,
            partitions=args.partitions,
            client_config=kafka_client_options(os.environ),
            connect_timeout_s=settings.kafka_connect_timeout / 1000,
        )
    except ProduceError as exc:
        print(f"tally: {exc}", file=sys.stderr)
        return 1
    print(
        f"published {sent} records from {len(paths)} files to {settings.kafka_topic} "
        f"at {settings.kafka_bootstrap}"
    )
    return 0


# -- stream and show ------------------------------------------------------------------------------


def stream_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--available-now", action="store_true", help="process the backlog, stop")
    parser.add_argument(
        "--drain", action="store_true", help="at end of input, emit every open window"
    )
    parser.add_argument(
        "--clock",
        choices=("wall", "arrival"),
        default="wall",
        help="processing time: the wall clock, or the newest input file's modification time "
        "(Kafka: record timestamp) of the micro-batch (replays of recorded arrivals)",
    )
    parser.add_argument("--timeout", type=float, default=None, help="stop after this many seconds")


def stream(args: argparse.Namespace, settings: Settings) -> int:
    from streaming.params import StreamError
    from streaming.run import run_stream

    try:
        progress = run_stream(
            settings,
            available_now=args.available_now,
            drain=args.drain,
            clock=args.clock,
            timeout_s=args.timeout,
        )
    except StreamError as exc:
        print(f"tally: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # the query stopped on an error: what failed and what to change
        from streaming.failures import report_failure

        line = report_failure(exc, settings, os.environ, arrival_clock=args.clock == "arrival")
        print(f"tally: {line}", file=sys.stderr)
        return 1
    print(progress)
    return 0


def show_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("table", help="a table name, e.g. stream_progress (docs/tables.md)")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument("--where", help="SQL filter, e.g. \"key = 'merchant-1'\"")
    parser.add_argument("--limit", type=int, default=20, help="rows to print")


def show(args: argparse.Namespace, settings: Settings) -> int:
    from tally_app.show import show_table

    return show_table(settings, args.table, as_json=args.json, where=args.where, limit=args.limit)


def ledger_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="the rows as one JSON array")
    parser.add_argument("--status", default=None, help="only dates of this status")
    parser.add_argument("--from", dest="date_from", default=None, help="first date, YYYY-MM-DD")
    parser.add_argument("--to", dest="date_to", default=None, help="last date, YYYY-MM-DD")
    parser.add_argument(
        "--older-than",
        dest="older_than",
        default=None,
        help="only dates with an open item open this many days or more (0: every open item)",
    )


def ledger(args: argparse.Namespace, settings: Settings) -> int:
    """The desk's ledger (one row per business date, newest first), read as the desk reads it
    (delta-rs, no Spark): 0 printed, 2 a bad filter or an unreadable warehouse (one line)."""
    from tally_app.ledger import print_ledger

    return print_ledger(
        settings, args.json, args.status, args.date_from, args.date_to, args.older_than
    )


# -- the nightly commands -------------------------------------------------------------------------


def reconcile_flags(parser: argparse.ArgumentParser) -> None:
    _date_flag(parser)
    parser.add_argument(
        "--reproduce",
        action="store_true",
        help="recompute the date's latest run (or --run-time's) at the pins, window and zone "
        "it recorded and compare with what it recorded: MATCH (exit 0) or the windows and "
        "figures that differ (exit 1); an expired pin exits 2; writes nothing without --write",
    )
    parser.add_argument(
        "--run-time",
        default=None,
        help="with --reproduce: the run to reproduce, by its reconciliation_runs.run_time "
        "(ISO 8601, e.g. 2026-11-21T02:00:00Z; no zone: UTC)",
    )
    parser.add_argument(
        "--write",
        action="store_true",
        help="with --reproduce: also write the recomputation as the date's new run (replaces "
        "the date's reconciliation rows; re-aggregation and diff only)",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="report directory (default: TALLY_REPORT_DIR, else reports/ beside the warehouse)",
    )


def reconcile(args: argparse.Namespace, settings: Settings) -> int:
    """The nightly sequence (re-aggregate + diff, validate, report, publish); every output is
    written before the exit code is decided: 0 balanced (or a residual the materiality
    tolerances grade ok or warn) and every critical expectation passed, 1 UNEXPLAINED windows
    graded fail or a failed expectation (one line says which), 2 bad input. Without
    an explicit window it uses the window the stream recorded."""
    from batch.reconcile import ReconcileError
    from expectations.report_read import ReportError
    from expectations.validate import ValidationError
    from tally_app import nightly

    try:
        business_date = parse_business_date(args.date)
        run_time = _reproduce_flags(args)
    except ValueError as exc:
        return _bad_setting(exc)
    spark = session_for(settings, "tally-reconcile", short_lived=True)
    now = datetime.now(UTC)
    try:
        if args.reproduce:
            return _reproduce(spark, settings, business_date, run_time, args.write, now)
        explicit = "window" in getattr(args, "given_settings", ())
        settings = nightly.with_stream_window(settings, spark, explicit, business_date)
        report_to = Path(args.out) if args.out else Path(settings.report_location)
        outcome = nightly.run_nightly(settings, business_date, now, spark, report_to)
    except nightly.WindowMismatch as exc:
        return _bad_setting(exc)
    except (ReconcileError, ReportError, ValidationError) as exc:
        return _fail("reconcile", exc, 2)
    print(outcome.reconciliation.describe())
    print(outcome.validation.describe())
    print(f"report: {outcome.report}")
    if outcome.failure:
        print(f"tally: {outcome.failure}", file=sys.stderr)
        return 1
    return 0


def restatements_flags(parser: argparse.ArgumentParser) -> None:
    _date_flag(parser, required=False)
    parser.add_argument(
        "--out",
        default=None,
        help="report directory of the re-runs (default: TALLY_REPORT_DIR, else reports/ "
        "beside the warehouse)",
    )


def restatements(args: argparse.Namespace, settings: Settings) -> int:
    """Check every reconciled date (or --date) for first arrivals after its run; record each
    change and act by the policy (`tally_app.restatements.settle`). One line per date checked;
    exit 1 when a date is pending or awaits sign-off."""
    from batch.reconcile import ReconcileError
    from tally.restatements import PENDING, RERUN
    from tally_app.restatements import settle

    try:
        only = None if args.date is None else [parse_business_date(args.date)]
    except ValueError as exc:
        return _bad_setting(exc)
    spark = session_for(settings, "tally-restatements", short_lived=True)
    now = datetime.now(UTC)
    report_to = Path(args.out) if args.out else Path(settings.report_location)
    try:
        settled = settle(settings, now, spark, report_to, only)
    except ReconcileError as exc:
        return _fail("restatements", exc, 2)
    for s in settled:
        print(s.describe())
    if not settled:
        print("restatements: no reconciled date gained events since its run")
    open_ones = [s for s in settled if s.status in (PENDING, RERUN)]
    for s in open_ones:
        print(f"tally: restatements: {s.describe()}", file=sys.stderr)
    return 1 if open_ones else 0


def _reproduce_flags(args: argparse.Namespace) -> datetime | None:
    """--run-time as an aware datetime (no zone: UTC); --run-time and --write need
    --reproduce (ValueError, one line)."""
    for flag, given in (("--run-time", args.run_time is not None), ("--write", args.write)):
        if given and not args.reproduce:
            raise ValueError(f"{flag}: only with --reproduce")
    if args.run_time is None:
        return None
    try:
        value = datetime.fromisoformat(args.run_time)
    except ValueError:
        raise ValueError(
            f"--run-time: expected an ISO 8601 time (e.g. 2026-11-21T02:00:00Z), "
            f"got {args.run_time!r}"
        ) from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _reproduce(
    spark: Any,
    settings: Settings,
    business_date: date,
    run_time: datetime | None,
    write: bool,
    now: datetime,
) -> int:
    """`reconcile --reproduce`: 0 MATCH, 1 differences, 2 an expired pin or no such run (one
    line on stderr, nothing written); with `write`, the recomputation becomes the date's new
    run once it is compared."""
    from batch.reconcile import PinExpired, ReconcileError, reproduce
    from batch.reproduce import verify

    day = business_date.isoformat()
    try:
        verification = verify(
            spark,
            settings.warehouse,
            business_date,
            run_time,
            now=now,
            audit_window_ms=settings.audit_window,
        )
        print(verification.describe())
        if write:
            written = reproduce(
                spark, settings.warehouse, business_date, now=now, run_time=run_time
            )
            print(written.describe())
    except PinExpired as exc:
        print(
            f"tally: reproduce {day}: {exc}; the signed-off figures are in reconciliation_runs; "
            "nothing changed",
            file=sys.stderr,
        )
        return 2
    except ReconcileError as exc:
        return _fail(f"reproduce {day}", exc, 2)
    return 0 if verification.matched else 1


def validate(args: argparse.Namespace, settings: Settings) -> int:
    from expectations.validate import ValidationError
    from tally_app import nightly

    try:
        business_date = parse_business_date(args.date)
    except ValueError as exc:
        return _bad_setting(exc)
    try:
        outcome = nightly.stage_validate(settings, business_date, datetime.now(UTC))
    except ValidationError as exc:
        return _fail("validate", exc, 2)
    print(outcome.describe())
    return 0 if outcome.success else 1


def curve_flags(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--date", help="business date (YYYY-MM-DD) from the events log")
    source.add_argument("--input", help="a JSONL file (or directory of them), in line order")
    parser.add_argument(
        "--lateness",
        dest="lateness_candidates",
        default=None,
        help="comma-separated lateness bounds (default: setting lateness_candidates, "
        f"{Settings.lateness_candidates})",
    )
    parser.add_argument(
        "--target",
        dest="completeness_target",
        default=None,
        help="completeness target in percent (default: setting completeness_target, 99.9)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--by-partition",
        action="store_true",
        help="also the curve of each source partition replayed alone, and the smallest "
        "bound per partition (for lateness_by_partition; docs/lateness-tuning.md); exit 1 "
        "also when some partition has no bound in the list reaching the target",
    )


def lateness_curve(args: argparse.Namespace, settings: Settings) -> int:
    """Exit 0 when some bound reaches the target (with --by-partition: also on every
    partition), 1 when none in the list does (the curve is printed either way), 2 bad
    setting or missing input."""
    from batch.curve import (
        curve_report,
        events_from_jsonl,
        events_from_log,
        format_curve,
        format_curve_by_partition,
    )
    from batch.reconcile import ReconcileError

    try:
        values = settings.lateness_candidates_ms
        business_date = parse_business_date(args.date) if args.date else None
    except (SettingsError, ValueError) as exc:
        return _bad_setting(exc)
    spark = session_for(settings, "tally-lateness-curve")
    source: dict[str, Any]
    try:
        if business_date is not None:
            events, version = events_from_log(
                spark, settings.warehouse, business_date, settings.window, settings.report_timezone
            )
            source = {
                "kind": "events",
                "warehouse": settings.warehouse,
                "date": business_date.isoformat(),
                "report_timezone": settings.report_timezone,
                "events_version": version,
            }
        else:
            events = events_from_jsonl(spark, args.input)
            source = {"kind": "jsonl", "path": args.input}
    except ReconcileError as exc:
        return _fail("lateness-curve", exc, 2)
    by_partition = bool(args.by_partition)
    report = curve_report(
        events, settings.window, values, settings.completeness_target, source, by_partition
    )
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(format_curve(report))
        if by_partition:
            print(format_curve_by_partition(report))
    found = [report["recommended"], *report.get("recommended_by_partition", {}).values()]
    return 0 if all(best is not None for best in found) else 1


def validate_flags(parser: argparse.ArgumentParser) -> None:
    _date_flag(parser)


def report_flags(parser: argparse.ArgumentParser) -> None:
    _date_flag(parser)
    parser.add_argument(
        "--out",
        default=None,
        help="output directory (default: report_dir, as `reconcile` writes it)",
    )
    parser.add_argument(
        "--curve",
        default=None,
        help="JSON from `tally lateness-curve --json` to draw (default: estimate from the "
        "late side output)",
    )


def load_curve(path: str) -> tuple[list[dict[str, Any]], int | None]:
    """A curve file: `tally lateness-curve --json` output ({"curve": [...], "recommended":
    {...}}) or a bare list of points. ValueError with one line otherwise."""
    try:
        with open(path) as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        raise ValueError(f"curve: file not found: {path}") from None
    except ValueError as exc:
        raise ValueError(f"curve: {path} is not valid JSON: {exc}") from None
    points = doc.get("curve") if isinstance(doc, dict) else doc
    if not isinstance(points, list) or not all(
        isinstance(p, dict) and "lateness_ms" in p and "completeness_pct" in p for p in points
    ):
        raise ValueError(f"curve: {path} holds no list of {{lateness_ms, completeness_pct}}")
    best = doc.get("recommended") if isinstance(doc, dict) else None
    return points, (int(best["lateness_ms"]) if isinstance(best, dict) else None)


def report(args: argparse.Namespace, settings: Settings) -> int:
    from expectations.report import build_report
    from expectations.report_read import ReportError, ReportOptions

    try:
        business_date: date = parse_business_date(args.date)
        curve, recommended = load_curve(args.curve) if args.curve else (None, None)
    except ValueError as exc:
        return _bad_setting(exc)
    try:
        path = build_report(
            session_for(settings, "tally-report", short_lived=True),
            settings.warehouse,
            business_date,
            args.out or settings.report_location,
            datetime.now(UTC),
            ReportOptions(
                curve=curve,
                # flags win; otherwise the bound and zone the reconciliation run recorded
                current_bound_ms=settings.fixed_lateness if args.lateness is not None else None,
                recommended_bound_ms=recommended,
                completeness_target=settings.completeness_target,
                report_timezone=settings.report_timezone if args.report_timezone else None,
                fallback_bound_ms=settings.fixed_lateness,
                gx_root=settings.gx_location,
            ),
        )
    except ReportError as exc:
        return _fail("report", exc, 2)
    print(f"wrote {path} and {path.parent / f'reconciliation-{business_date.isoformat()}.csv'}")
    return 0


def maintain(args: argparse.Namespace, settings: Settings) -> int:
    """`tally maintain`: the stream's housekeeping once, the stream stopped (docs/operations.md)."""
    from streaming.housekeeping import Clock, maintain_once
    from streaming.params import StreamError, wall_clock
    from streaming.run import housekeeping_plan, warehouse_lease
    from tally.dates import epoch_ms
    from tally.maintenance import FAILED
    from tally.spark import session_for
    from tally_app.nightly import stream_position

    try:
        lease = warehouse_lease(settings, wall_clock)
    except StreamError as exc:  # the lease's refusal names the live stream holding it
        return _fail("maintain", str(exc).removeprefix("stream: "), 2)
    with lease:
        spark = session_for(settings, "tally-maintain", short_lived=True)
        position = stream_position(spark, settings.warehouse)
        if position is None:
            return _fail("maintain", f"no stream has committed to {settings.warehouse}", 2)
        now_ms = epoch_ms(wall_clock())
        clock = Clock(now_ms, position.watermark_ms, position.drained)
        schedule, closing = housekeeping_plan(settings)
        outcomes = maintain_once(
            spark, settings.warehouse, schedule, closing, clock, lambda: epoch_ms(wall_clock())
        )
    for o in outcomes:
        scope = f"{o.action.table}/{o.action.partition}" if o.action.partition else o.action.table
        print(
            f"{o.action.kind} {scope}: {o.outcome}, files {o.before.files} -> {o.after.files}, "
            f"{o.seconds:.1f} s{f' ({o.detail})' if o.detail else ''}"
        )
    if not outcomes:
        print("nothing to maintain")
    return 1 if any(o.outcome == FAILED for o in outcomes) else 0
