"""Validate a business date with Great Expectations; results to Delta and to GX Data Docs.

    validate_date(spark, warehouse, business_date, thresholds=None, *, now,
                  report_timezone="UTC", gx_root, suites=SUITES, sources=None)
        -> ValidationOutcome
    validate_frame(spark, warehouse, business_date, suite, frame, thresholds=None, *, now, ...)
    run_suite(business_date, suite, frame, thresholds=None, *, now, ...) -> rows (not written)

For each suite (`expectations.suites`): the source Delta table is read at its latest version
(recorded as `source_version`; or taken as the caller holds it, `validate_date`'s `sources`),
the date's rows are selected and prepared in Spark, and the suite is run against the
DataFrame through the file-backed GX project in `<gx_root>/gx` (the setting's
`gx_location`, by default beside the warehouse): Spark datasource `tally` ->
dataframe asset per table -> `whole_dataframe` batch definition -> ValidationDefinition ->
Checkpoint -> `checkpoint.run(batch_parameters={"dataframe": df})` (GX stores the result; it
counts unexpected rows without looking up examples, and the expectations that found some are
run again for up to five, `_add_examples`, so the stored result is a `SUMMARY` one; the gap
suite's `unexplained_windows_named` for up to `NAMED_WINDOWS` UNEXPLAINED windows, each with its
window_start, key and currency: the result format in its `meta`). One
checkpoint per suite: a checkpoint run passes the same `batch_parameters` to every validation
definition it holds, so dataframe-backed suites over different tables cannot share one.
The Data Docs (each result's page, its suite's page, the site index) are built after the
suites ran, once for all of them (`build_data_docs`, what GX's UpdateDataDocsAction does for
one result): the index lists every stored result, so building it after each suite read the
whole history four times a night.

The rows replace the date's rows of the suites that ran in `validation_results` (one Delta
commit, `replaceWhere` on business_date and suite), so running a date twice leaves one set of
rows. Everything (rows and Data Docs) is written before `validate_date` returns, also when
validation fails (and, for the suites that ran, when a later one raised).

A date passes when no *critical* expectation failed; failed *warning* expectations are
reported in `warnings` and in the table, but do not fail the date.
"""

from __future__ import annotations

import copy
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from expectations.suites import (
    RATE,
    SOURCE_TABLE,
    SUITES,
    Thresholds,
    build_suite,
    percent,
    select_for_date,
)
from tally import tables
from tally.spark import session_conf, without_adaptive_execution
from tally.sql_text import rows_sql, sql_string
from tally.vocabulary import CRITICAL

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DATASOURCE = "tally"
BATCH_DEFINITION = "whole_dataframe"
DOCS_SITE = "local_site"
# GX's metric queries all run on the suite's persisted frame: without AQE each is one Spark
# job (not one per shuffle stage), and a `limit` (the few unexpected values each per-row
# expectation shows) scans up to 64 cached partitions in its first job instead of one, then
# four times as many (usually nothing is unexpected: it would scan them all, job by job).
# A 200k-event day: the suites' 61 Spark jobs -> 27 (Spark's event log), the same results.
GX_QUERY_CONF = {
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.limit.initialNumPartitions": "64",
}
# What each expectation's result holds: the counts and up to 5 unexpected values (`SUMMARY`).
RESULT_FORMAT = {"result_format": "SUMMARY", "partial_unexpected_count": 5}
# The checkpoint runs with no unexpected values (GX's `limit(0)` of them plans no Spark job);
# only the expectations that found unexpected rows are run again for their examples
# (`_add_examples`): usually none is, and each lookup was a Spark job over the suite's frame.
COUNTS_ONLY = {"result_format": "SUMMARY", "partial_unexpected_count": 0}


class ValidationError(RuntimeError):
    """Validation cannot start (bad argument): a one-line message."""


@dataclass(frozen=True)
class ValidationOutcome:
    """What `validate_date` found; every row is already in `validation_results`."""

    success: bool  # no critical expectation failed
    failures: list[str]  # one line per failed critical expectation, with the observed value
    results_rows: list[dict[str, Any]]  # the rows written to validation_results
    data_docs_path: str  # local path of the Data Docs index page
    warnings: list[str] = field(default_factory=list)  # failed warning-severity expectations

    def failed_checks(self, severity: str | None = None) -> set[tuple[str, str]]:
        """(suite, check_name) of every failed expectation (of one severity if given)."""
        return {
            (r["suite"], r["check_name"])
            for r in self.results_rows
            if not r["success"] and (severity is None or r["severity"] == severity)
        }

    def describe(self) -> str:
        checks = len(self.results_rows)
        head = (
            f"validation: {checks} checks, {len(self.failures)} failed, "
            f"{len(self.warnings)} warning(s): {'PASSED' if self.success else 'FAILED'}"
        )
        lines = [head, *[f"  FAIL {f}" for f in self.failures]]
        lines += [f"  WARN {w}" for w in self.warnings]
        lines.append(f"  Data Docs: {self.data_docs_path}")
        return "\n".join(lines)


# -- the GX project ----------------------------------------------------------------------------

_CONTEXTS: dict[str, Any] = {}


def project_root(gx_root: str | os.PathLike[str]) -> Path:
    """The directory holding `gx/` (the caller's `Settings.gx_location`)."""
    return Path(gx_root)


def ensure_project(gx_root: str | os.PathLike[str]) -> Path:
    """`<root>/gx` with tally's great_expectations.yml (copied from the repository's `gx/`
    when the root has none, e.g. a scratch root in tests). Returns the root."""
    root = project_root(gx_root)
    config = root / "gx" / "great_expectations.yml"
    if not config.exists():
        template = PROJECT_ROOT / "gx" / "great_expectations.yml"
        if not template.is_file():
            raise ValidationError(
                f"gx: no great_expectations.yml in {root / 'gx'} and no template at {template}"
            )
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(template.read_text())
        (root / "gx" / ".gitignore").write_text("uncommitted/\n")
    return root


def preload() -> None:
    """Import Great Expectations' modules the validation uses (seconds of Python), e.g. from a
    thread while the re-aggregation keeps the JVM busy, so the validation does not wait."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations.checkpoint
    import great_expectations.expectations  # noqa: F401


def gx_context(gx_root: str | os.PathLike[str]) -> Any:
    """The file-backed GX context of `gx_root`, one per process."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx

    root = ensure_project(gx_root).resolve()
    key = str(root)
    if key not in _CONTEXTS:
        _CONTEXTS[key] = gx.get_context(mode="file", project_root_dir=key)
    return _CONTEXTS[key]


def data_docs_index(gx_root: str | os.PathLike[str]) -> Path:
    """Where the Data Docs site's index page is (built by the checkpoints' action)."""
    root = project_root(gx_root)
    return root / "gx" / "uncommitted" / "data_docs" / DOCS_SITE / "index.html"


def _batch_definition(context: Any, asset_name: str) -> Any:
    """Get-or-add the Spark datasource, the dataframe asset and its whole-dataframe batch
    definition. Existing ones are reused (add_or_update would give them new ids and rewrite
    great_expectations.yml on every run); a datasource that is not a non-persisting Spark
    source is replaced with add_or_update_spark."""
    try:
        datasource = context.data_sources.get(DATASOURCE)
    except KeyError:  # not there yet (GX: "Could not find a datasource named ...")
        datasource = None
    if datasource is None or datasource.type != "spark" or datasource.persist:
        datasource = context.data_sources.add_or_update_spark(name=DATASOURCE, persist=False)
    names = {asset.name for asset in datasource.assets}
    asset = (
        datasource.get_asset(asset_name)
        if asset_name in names
        else datasource.add_dataframe_asset(name=asset_name)
    )
    definitions = {bd.name for bd in asset.batch_definitions}
    if BATCH_DEFINITION in definitions:
        return asset.get_batch_definition(BATCH_DEFINITION)
    return asset.add_batch_definition_whole_dataframe(BATCH_DEFINITION)


def run_checkpoint(
    context: Any,
    suite: Any,
    frame: DataFrame,
    asset_name: str,
    run_name: str,
    run_time: datetime,
    *,
    build_docs: bool = True,
) -> tuple[Any, Any]:
    """Persist `suite` (add_or_update: the code is the source of truth), bind it to the asset's
    batch definition, run its checkpoint on `frame` (GX stores the result); returns (suite
    validation result, its result identifier). `build_docs`: render its Data Docs pages and
    the site index now (`build_data_docs`); a caller running several suites passes False and
    builds them once for all (the index reads every stored result: once, not per suite)."""
    import great_expectations as gx
    from great_expectations.checkpoint import Checkpoint
    from great_expectations.core.run_identifier import RunIdentifier

    batch_definition = _batch_definition(context, asset_name)
    suite = context.suites.add_or_update(suite)
    validation = context.validation_definitions.add_or_update(
        gx.ValidationDefinition(name=suite.name, data=batch_definition, suite=suite)
    )
    # No UpdateDataDocsAction: it would rebuild the whole site index after each suite.
    checkpoint = context.checkpoints.add_or_update(
        Checkpoint(
            name=f"tally_{suite.name}",
            validation_definitions=[validation],
            actions=[],
            result_format=COUNTS_ONLY,
        )
    )
    result = checkpoint.run(
        batch_parameters={"dataframe": frame},
        run_id=RunIdentifier(run_name=run_name, run_time=run_time),
    )
    ((identifier, suite_result),) = result.run_results.items()
    if _add_examples(suite, batch_definition, suite_result, frame):
        context.validation_results_store.set(identifier, suite_result)
    if build_docs:
        build_data_docs(context, [identifier])
    return suite_result, identifier


def _add_examples(suite: Any, batch_definition: Any, suite_result: Any, frame: DataFrame) -> bool:
    """Make a `COUNTS_ONLY` result of `suite` what a `RESULT_FORMAT` run gives: the per-row
    expectations that found unexpected rows are validated again on the same frame with
    `RESULT_FORMAT` (or their own, `examples_format`) and take those results (the same counts,
    with the examples: partial_unexpected_list and its counts, and the index columns' values
    of those rows when the format names some); the others get the examples' empty counts.
    True when a result changed (the caller stores the suite result again: the checkpoint
    stored it as it ran)."""
    import great_expectations as gx

    again = []
    changed = False
    for each in suite_result.results:
        result = each.result or {}
        if "partial_unexpected_list" not in result:
            continue  # not a per-row expectation, or its metric raised
        if result.get("unexpected_count"):
            again.append(each)
        elif "partial_unexpected_counts" not in result:
            result["partial_unexpected_counts"] = []
            changed = True
    if not again:
        return changed
    ids = {each.expectation_config.id for each in again}
    # one validation per result format (one is given to all the expectations it runs)
    by_format: dict[str, list[Any]] = {}
    for expectation in suite.expectations:
        if expectation.id in ids:
            fmt = json.dumps(examples_format(expectation), sort_keys=True)
            by_format.setdefault(fmt, []).append(copy.copy(expectation))
    batch = batch_definition.get_batch(batch_parameters={"dataframe": frame})
    rerun = {}
    for fmt, expectations in by_format.items():
        subset = gx.ExpectationSuite(name=suite.name, expectations=expectations)
        results = batch.validate(subset, result_format=json.loads(fmt)).results
        rerun.update({_key(r.expectation_config): r for r in results})
    for each in again:
        new = rerun.get(_key(each.expectation_config))
        if new is None or new.success != each.success:
            continue  # kept without examples (the same frame gives the same counts)
        if (new.result or {}).get("unexpected_count") == each.result.get("unexpected_count"):
            each.result = new.result
            changed = True
    return changed


def examples_format(expectation: Any) -> dict[str, Any]:
    """The result format an expectation's unexpected rows are looked up with: its own
    (`meta.result_format`: the gap suite's UNEXPLAINED windows, by name) or `RESULT_FORMAT`."""
    return dict((expectation.meta or {}).get("result_format") or RESULT_FORMAT)


def _key(config: Any) -> str:
    """An expectation configuration without its batch (the same expectation in two runs)."""
    kwargs = {k: v for k, v in dict(config.kwargs).items() if k != "batch_id"}
    return json.dumps([config.type, kwargs, config.meta], default=str, sort_keys=True)


def build_data_docs(context: Any, identifiers: Sequence[Any]) -> None:
    """Render the Data Docs pages of these validation results (and of their suites) and the
    site index, once: what GX's UpdateDataDocsAction does for one result."""
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier,
    )

    if not identifiers:
        return
    suites = dict.fromkeys(i.expectation_suite_identifier.name for i in identifiers)
    context.build_data_docs(
        site_names=[DOCS_SITE],
        resource_identifiers=[
            *identifiers,
            *[ExpectationSuiteIdentifier(name=name) for name in suites],
        ],
    )


def data_docs_page(context: Any, identifier: Any) -> str | None:
    """The URL of the Data Docs page of a validation result; None when it was not written.
    Anything else (no such site in the project, say) is GX's error with its own message."""
    try:
        urls = context.get_docs_sites_urls(resource_identifier=identifier, site_name=DOCS_SITE)
    except ValueError:  # GX: "Cannot get URL for resource" when the page was not written
        return None
    return urls[0]["site_url"] if urls else None


# -- results -------------------------------------------------------------------------------------


def _number(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer() and abs(value) < 2**53:
            return str(int(value))
        return repr(value)
    return str(value)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return _number(value)
    return json.dumps(value, default=str, sort_keys=True)


def observed_text(result: dict[str, Any], unit: str | None = None) -> str | None:
    """A one-line text of what the expectation saw: the observed value of an aggregate
    expectation (a share as a percentage when its `unit` is `RATE`); for a per-row one, how
    many rows were unexpected and a few examples."""
    if "observed_value" in result:
        value = result["observed_value"]
        if unit == RATE and isinstance(value, int | float) and not isinstance(value, bool):
            return percent(value)
        return _text(value)
    if "unexpected_count" in result:
        count = result.get("unexpected_count") or 0
        total = result.get("element_count")
        text = f"{count} of {total} rows unexpected"
        examples = result.get("partial_unexpected_list") or []
        if count and examples:
            text += f", e.g. {_text(examples[:5])}"
        return text
    return None


def result_rows(
    suite_result: Any,
    business_date: date,
    suite_name: str,
    source_version: int | None,
    page: str | None,
    run_time: datetime,
) -> list[dict[str, Any]]:
    """validation_results rows (dicts) of one suite run."""
    rows = []
    for each in suite_result.results:
        config = each.expectation_config
        kwargs = {k: v for k, v in dict(config.kwargs).items() if k not in ("batch_id",)}
        result = dict(each.result or {})
        exception = None
        info = each.exception_info or {}
        # exception_info is either one dict or a dict of dicts keyed by metric id.
        infos = [info] if "raised_exception" in info else list(info.values())
        for item in infos:
            if isinstance(item, dict) and item.get("raised_exception"):
                exception = str(item.get("exception_message"))
                break
        severity = getattr(config, "severity", None) or CRITICAL
        meta = dict(config.meta or {})
        rows.append(
            {
                "business_date": business_date,
                "suite": suite_name,
                "check_name": str(meta.get("check", config.type)),
                "expectation": str(config.type),
                "column_name": kwargs.get("column"),
                "kwargs": json.dumps(kwargs, default=str, sort_keys=True),
                "success": bool(each.success),
                "severity": str(getattr(severity, "value", severity)),
                "observed_value": (
                    f"error: {exception}"
                    if exception is not None
                    else observed_text(result, meta.get("unit"))
                ),
                "unexpected_count": _int_or_none(result.get("unexpected_count")),
                "element_count": _int_or_none(result.get("element_count")),
                "description": getattr(config, "description", None),
                "exception": exception,
                "source_table": SOURCE_TABLE.get(suite_name),
                "source_version": source_version,
                "data_docs_page": page,
                "run_time": run_time,
            }
        )
    return rows


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def missing_table_row(
    business_date: date, suite_name: str, table: str, warehouse: str, run_time: datetime
) -> dict[str, Any]:
    """The single failed row a suite records when its source table does not exist."""
    return {
        "business_date": business_date,
        "suite": suite_name,
        "check_name": "table_exists",
        "expectation": "table_exists",
        "column_name": None,
        "kwargs": json.dumps({"table": table}),
        "success": False,
        "severity": CRITICAL,
        "observed_value": f"no Delta table at {tables.table_path(warehouse, table)}",
        "unexpected_count": None,
        "element_count": None,
        "description": f"The {table} table exists.",
        "exception": None,
        "source_table": table,
        "source_version": None,
        "data_docs_page": None,
        "run_time": run_time,
    }


def write_results(
    spark: SparkSession,
    warehouse: str,
    business_date: date,
    suites: Sequence[str],
    rows: list[dict[str, Any]],
) -> None:
    """Replace the rows of (business_date, each of `suites`) in validation_results with `rows`:
    one Delta commit (replaceWhere) of rows built in the JVM from one SQL text of literals (no
    Python workers, one Py4J call), planned without AQE (a job per shuffle stage otherwise)."""
    suites = [suites] if isinstance(suites, str) else list(suites)
    if not suites:
        return
    if not tables.creates_on_write(tables.VALIDATION_RESULTS):
        tables.ensure_table(spark, warehouse, tables.VALIDATION_RESULTS)
    fields = tables.VALIDATION_RESULTS.schema().fields
    frame = (
        spark.sql(rows_sql(rows, fields))
        if rows
        else tables.empty_frame(spark, tables.VALIDATION_RESULTS)
    )
    names = ", ".join(sql_string(name) for name in suites)
    date_sql = f"DATE'{business_date.isoformat()}'"
    # A missing table is created by this write, partitioned as declared (`T.creates_on_write`).
    with without_adaptive_execution(spark):
        tables.write_table(
            frame,
            warehouse,
            tables.VALIDATION_RESULTS,
            replace_where=f"business_date = {date_sql} AND suite IN ({names})",
        )


def read_results(spark: SparkSession, warehouse: str, business_date: date) -> list[dict[str, Any]]:
    """The validation_results rows of the date (empty if never validated)."""
    if not tables.exists(spark, warehouse, tables.VALIDATION_RESULTS.name):
        return []
    rows = (
        tables.read_table(spark, warehouse, tables.VALIDATION_RESULTS.name)
        .where(F.col("business_date") == F.lit(business_date))
        .orderBy("suite", "check_name")
        .collect()
    )
    return [r.asDict() for r in rows]


def as_read(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows just written to validation_results (`write_results`), as `read_results` returns
    them: ordered by suite and check_name, each value through its column's type (a timestamp
    comes back naive in UTC, as Spark returns it)."""
    fields = tables.VALIDATION_RESULTS.schema().fields
    read = [
        {f.name: f.dataType.fromInternal(f.dataType.toInternal(row.get(f.name))) for f in fields}
        for row in rows
    ]
    return sorted(read, key=lambda r: (r["suite"], r["check_name"]))


def _one_line(row: dict[str, Any]) -> str:
    description = row.get("description") or row["expectation"]
    return f"{row['suite']}/{row['check_name']}: {description} Observed: {row['observed_value']}"


# -- entry points --------------------------------------------------------------------------------


def _check_now(now: datetime) -> datetime:
    if now.tzinfo is None:
        raise ValidationError("now: needs a time zone")
    return now.astimezone(UTC)


def run_suite(
    business_date: date,
    suite_name: str,
    frame: DataFrame,
    thresholds: Thresholds | None = None,
    *,
    now: datetime,
    gx_root: str | os.PathLike[str],
    source_version: int | None = None,
) -> list[dict[str, Any]]:
    """Run suite `suite_name` on an already prepared `frame` through its checkpoint (Data Docs
    updated) and return the validation_results rows, without writing them."""
    ran = _run_suite(business_date, suite_name, frame, thresholds, now=now, gx_root=gx_root)
    context = gx_context(gx_root)
    build_data_docs(context, [ran.identifier])
    return ran.rows(context, business_date, source_version, now)


@dataclass(frozen=True)
class _SuiteRun:
    """A suite's checkpoint run whose Data Docs may not be built yet (`_run_suite`)."""

    suite_name: str
    result: Any  # GX's suite validation result
    identifier: Any  # its ValidationResultIdentifier

    def rows(
        self, context: Any, business_date: date, source_version: int | None, now: datetime
    ) -> list[dict[str, Any]]:
        """Its validation_results rows (the Data Docs built: the page is looked up)."""
        page = data_docs_page(context, self.identifier)
        return result_rows(self.result, business_date, self.suite_name, source_version, page, now)


def _run_suite(
    business_date: date,
    suite_name: str,
    frame: DataFrame,
    thresholds: Thresholds | None = None,
    *,
    now: datetime,
    gx_root: str | os.PathLike[str],
) -> _SuiteRun:
    """`run_suite` up to the checkpoint's result, its Data Docs not built."""
    if suite_name not in SUITES:
        raise ValidationError(f"suite: unknown suite {suite_name!r} (known: {', '.join(SUITES)})")
    now = _check_now(now)
    suite = build_suite(suite_name, thresholds or Thresholds.defaults())
    context = gx_context(gx_root)
    # persist() plans the frame (Delta lists the table's files then): in the block too
    with session_conf(frame.sparkSession, GX_QUERY_CONF):
        frame = frame.persist()
        try:
            suite_result, identifier = run_checkpoint(
                context,
                suite,
                frame,
                SOURCE_TABLE[suite_name],
                business_date.isoformat(),
                now,
                build_docs=False,
            )
        finally:
            frame.unpersist()
    return _SuiteRun(suite_name, suite_result, identifier)


def validate_frame(
    spark: SparkSession,
    warehouse: str,
    business_date: date,
    suite_name: str,
    frame: DataFrame,
    thresholds: Thresholds | None = None,
    *,
    now: datetime,
    gx_root: str | os.PathLike[str],
    source_version: int | None = None,
) -> list[dict[str, Any]]:
    """Run suite `suite_name` on an already prepared `frame` (`expectations.suites.prepare`),
    write its rows to validation_results (replacing the date's rows of that suite) and the
    Data Docs; returns the rows."""
    rows = run_suite(
        business_date,
        suite_name,
        frame,
        thresholds,
        now=now,
        gx_root=gx_root,
        source_version=source_version,
    )
    write_results(spark, warehouse, business_date, [suite_name], rows)
    return rows


def validate_date(
    spark: SparkSession,
    warehouse: str,
    business_date: date,
    thresholds: Thresholds | None = None,
    *,
    now: datetime,
    report_timezone: str = "UTC",
    gx_root: str | os.PathLike[str],
    suites: Sequence[str] = SUITES,
    sources: Mapping[str, tuple[DataFrame, int]] | None = None,
) -> ValidationOutcome:
    """Validate `business_date` with every suite in `suites` (all by default).

    `now` is the run time recorded with the rows and the Data Docs run (pass the wall clock at
    the entry point). A suite whose source table is missing records one failed
    `table_exists` row. The rows of every suite that ran are written in one Delta commit,
    also when a later suite raised (then the error propagates after the write).
    `sources`: source table name -> (its rows at its latest version, that version), which a
    caller already holds (`tally reconcile`: what the reconciliation read and wrote), used
    instead of reading the table again; the frame may hold only the date's rows.
    """
    unknown = [s for s in suites if s not in SUITES]
    if unknown:
        raise ValidationError(f"suite: unknown suite(s) {', '.join(unknown)}")
    now = _check_now(now)
    thresholds = thresholds or Thresholds.defaults()
    # per suite that ran, in order: its rows (a missing table) or its run (rows after the docs)
    ran: list[list[dict[str, Any]] | tuple[_SuiteRun, int]] = []
    done: list[str] = []
    all_rows: list[dict[str, Any]] = []
    try:
        for suite_name in suites:
            table = SOURCE_TABLE[suite_name]
            source = _source(spark, warehouse, table, sources or {})
            if source is None:
                ran.append([missing_table_row(business_date, suite_name, table, warehouse, now)])
            else:
                frame = select_for_date(
                    suite_name,
                    source[0],
                    business_date,
                    report_timezone,
                    thresholds.tolerance,
                )
                run = _run_suite(
                    business_date, suite_name, frame, thresholds, now=now, gx_root=gx_root
                )
                ran.append((run, source[1]))
            done.append(suite_name)
    finally:
        # The Data Docs of every suite that ran, built once (the site index reads every stored
        # result), then the rows with their pages, written in one commit.
        runs = [r for r in ran if isinstance(r, tuple)]
        context = gx_context(gx_root) if runs else None
        try:
            if runs:
                build_data_docs(context, [run.identifier for run, _ in runs])
        finally:
            for entry in ran:
                if isinstance(entry, tuple):
                    run, version = entry
                    all_rows.extend(run.rows(context, business_date, version, now))
                else:
                    all_rows.extend(entry)
            write_results(spark, warehouse, business_date, done, all_rows)
    return outcome_of(all_rows, gx_root)


def _source(
    spark: SparkSession,
    warehouse: str,
    table: str,
    given: Mapping[str, tuple[DataFrame, int]],
) -> tuple[DataFrame, int] | None:
    """The table's rows at its latest version and that version (the caller's if `given`);
    None when there is no such table."""
    from delta.tables import DeltaTable

    if table in given:
        return given[table]
    if not DeltaTable.isDeltaTable(spark, tables.table_path(warehouse, table)):
        return None
    version = tables.latest_version(spark, warehouse, table)
    return tables.read_table(spark, warehouse, table, version), version


def outcome_of(rows: list[dict[str, Any]], gx_root: str | os.PathLike[str]) -> ValidationOutcome:
    """The outcome of a set of validation_results rows."""
    failed = [r for r in rows if not r["success"]]
    critical = [r for r in failed if r["severity"] == CRITICAL]
    others = [r for r in failed if r["severity"] != CRITICAL]
    return ValidationOutcome(
        success=not critical,
        failures=[_one_line(r) for r in critical],
        results_rows=rows,
        data_docs_path=str(data_docs_index(gx_root)),
        warnings=[_one_line(r) for r in others],
    )
