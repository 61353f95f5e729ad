"""The desk's FastAPI app, mounted by Airflow's api-server at `/tally` (see `plugin`).

Plugin apps are not protected by Airflow; this one is, through Airflow's own auth: every
route needs an Airflow user (the UI's session cookie or an `Authorization: Bearer` token from
`POST /auth/token`) whom the auth manager lets read the nightly DAG's runs. No credential or a
bad/expired one answers 401, a user without that permission 403.

Warehouse reads run in a worker thread with a deadline (`desk_timeout`): the event loop never
waits on storage, and an unreachable warehouse answers 503 with one line saying so. Files are
served only from the report directory (`report-DATE.html`, `reconciliation-DATE.csv`) and
the Data Docs site; every response carries a content security policy allowing no script, the
report's inline styles and its charts (data: images).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from fastapi.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from tally import ledger, ledger_reads, window_evidence
from tally.dates import business_date_of, business_day_end, business_day_start, parse_business_date
from tally.settings import Settings, load_settings
from tally.vocabulary import APPROVE_TASK, NIGHTLY_DAG, SIGNOFF_TASK
from tally_desk import pages

CSP = (
    "default-src 'none'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
    "frame-ancestors 'self'; base-uri 'none'; form-action 'self'"
)
REPORT_FILE = re.compile(r"(report|reconciliation)-(\d{4}-\d{2}-\d{2})\.(html|csv)")
DOCS_PART = re.compile(r"[A-Za-z0-9_.-]+")
DOCS_TYPES = {
    ".html": "text/html",
    ".css": "text/css",
    ".png": "image/png",
    ".svg": "image/svg+xml",
    ".json": "application/json",
}
T = TypeVar("T")


@dataclass(frozen=True)
class DeskConfig:
    """What the desk needs from tally's settings (read once, when the app is built)."""

    location: ledger_reads.Location
    report_dir: Path
    docs_dir: Path
    timeout_s: float
    report_timezone: str

    @classmethod
    def from_settings(cls, settings: Settings) -> DeskConfig:
        return cls(
            location=ledger_reads.Location(
                settings.warehouse,
                settings.s3_endpoint,
                settings.s3_region,
                settings.s3_path_style,
            ),
            report_dir=Path(settings.report_location).resolve(),
            docs_dir=(Path(settings.gx_location) / "gx" / "uncommitted" / "data_docs").resolve(),
            timeout_s=settings.desk_timeout / 1000,
            report_timezone=settings.report_timezone,
        )


# -- auth -------------------------------------------------------------------------------------


async def airflow_user(request: Request) -> Any:
    """The Airflow user of the request (Airflow's `get_user`: bearer token, else the UI's
    cookie). Airflow answers 403 to an invalid token; here any bad credential is 401."""
    from airflow.api_fastapi.core_api.security import bearer_scheme, get_user

    credentials = await bearer_scheme(request)
    try:
        return await get_user(request, None, credentials)
    except HTTPException as exc:
        if exc.status_code in (401, 403):
            raise HTTPException(
                401, f"not authenticated: {exc.detail}", headers={"WWW-Authenticate": "Bearer"}
            ) from None
        raise


AirflowUser = Annotated[Any, Depends(airflow_user)]


async def reviewer(user: AirflowUser) -> Any:
    """The user, if the auth manager lets them read the nightly DAG's runs (else 403)."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import (
        DagAccessEntity,
        DagDetails,
    )

    def allowed() -> bool:
        return bool(
            get_auth_manager().is_authorized_dag(
                method="GET",
                access_entity=DagAccessEntity.RUN,
                details=DagDetails(id=NIGHTLY_DAG),
                user=user,
            )
        )

    if not await run_in_threadpool(allowed):
        raise HTTPException(403, f"forbidden: reading the runs of {NIGHTLY_DAG} is not allowed")
    return user


# -- reads off the event loop -------------------------------------------------------------------


async def off_loop(config: DeskConfig, fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in a worker thread, given up after the desk's timeout (503)."""
    try:
        return await asyncio.wait_for(run_in_threadpool(fn, *args), config.timeout_s)
    except TimeoutError:
        raise HTTPException(
            503,
            f"warehouse unreachable: {config.location.warehouse} did not answer within "
            f"{config.timeout_s:g} s",
        ) from None
    except ledger_reads.WarehouseUnavailable as exc:
        raise HTTPException(503, f"warehouse unreachable: {exc}") from None


# What the date page reads of `validation_results`: the verdict, and what failed.
FAILED_CHECK_COLUMNS = ("suite", "check_name", "severity", "observed_value", "description")
VALIDATION_COLUMNS = ("business_date", "success", "data_docs_page", *FAILED_CHECK_COLUMNS)


def read_ledger(config: DeskConfig, now: datetime) -> list[dict[str, Any]]:
    return ledger_reads.read_ledger(config.location, now)


def read_date(config: DeskConfig, day: date, now: datetime) -> dict[str, Any]:
    loc = config.location
    summaries = ledger_reads.read_rows(loc, ledger_reads.SUMMARY, ledger.SUMMARY_COLUMNS, day)
    runs = ledger_reads.read_rows(loc, ledger_reads.RUNS, None, day)
    validation = ledger_reads.read_rows(loc, ledger_reads.VALIDATION, VALIDATION_COLUMNS, day)
    signoffs = ledger_reads.read_rows(loc, ledger_reads.SIGNOFFS, ledger.SIGNOFF_COLUMNS, day)
    alerts = [
        a for a in ledger_reads.read_rows(loc, ledger_reads.ALERTS) if a.get("business_date") == day
    ]
    copies = sorted(
        ledger_reads.read_rows(loc, ledger_reads.COPIES, ledger.COPY_COLUMNS, day),
        key=lambda r: (ledger.when(r["window_start"]), r["key"] or "", r["event_id"] or ""),
    )
    (row,) = ledger.ledger_rows(
        summaries,
        [{"business_date": r["business_date"], "run_time": r.get("run_time")} for r in runs],
        validation,
        signoffs,
        [day],
        ledger_reads.read_reopened(loc, runs, day),
        ledger_reads.read_items(loc, day),
        now,
    )
    default_currency = ledger.run_currency(runs[0]) if runs else None
    return {
        "business_date": day.isoformat(),
        "ledger": row,
        # the records behind the gap: each UNEXPLAINED window's page
        "unexplained_windows": unexplained_windows(config, day, default_currency),
        "provenance": ledger.provenance(runs[0] if runs else None),
        "signoffs": ledger.plain_rows(
            sorted(signoffs, key=lambda r: ledger.when(r["decided_at"]), reverse=True)
        ),
        "alerts": ledger.plain_rows(
            sorted(alerts, key=lambda r: ledger.when(r["alert_time"]), reverse=True)
        ),
        # the evidence of EXPLAINED_BY_COPIES: each copy the stream counted, by window
        "copies": {"rows": len(copies), "shown": ledger.plain_rows(copies[: ledger.COPIES_SHOWN])},
        "files": date_files(config, day, validation),
        # what failed, critical first, each with its Data Docs page where the desk serves it
        "failed_checks": [
            {**{k: r.get(k) for k in FAILED_CHECK_COLUMNS}, "docs_page": docs_page(config, r)}
            for r in sorted(
                (r for r in validation if r.get("success") is False),
                key=lambda r: (r.get("severity") != "critical", r["suite"], r["check_name"]),
            )
        ],
    }


# The date page lists at most this many UNEXPLAINED windows (largest residual first).
UNEXPLAINED_SHOWN = 50


def unexplained_windows(
    config: DeskConfig, day: date, default_currency: str | None
) -> dict[str, Any]:
    """The date's UNEXPLAINED windows, largest residual amount first, each with its page."""
    rows = ledger_reads.read_unexplained(config.location, day)
    shown = []
    for row in rows[:UNEXPLAINED_SHOWN]:
        currency = row.get("currency") or default_currency or ""
        shown.append(
            {
                **ledger.plain_rows([row])[0],
                "currency": currency,
                "page": window_evidence.window_path(day, row["window_start"], row["key"], currency),
            }
        )
    return {"rows": len(rows), "shown": shown}


def read_window(
    config: DeskConfig, ref: window_evidence.WindowRef
) -> tuple[Mapping[str, Any] | None, list[dict[str, Any]]]:
    """A window's `reconciliation` row (None: the date has no such window) and evidence."""
    recon, evidence = ledger_reads.read_window(config.location, ref)
    runs = ledger_reads.read_rows(config.location, ledger_reads.RUNS, None, ref.business_date)
    default = ledger.run_currency(runs[0]) if runs else None
    return window_evidence.matching_row(recon, ref, default), evidence


def docs_page(config: DeskConfig, row: Mapping[str, Any]) -> str | None:
    """A validation row's Data Docs page as a path the desk serves (`docs/...`: under its
    Data Docs directory, and there), or None."""
    text = str(row.get("data_docs_page") or "")
    if not text:
        return None
    local = Path(text.removeprefix("file://"))
    try:
        relative = local.resolve().relative_to(config.docs_dir)
    except ValueError:
        return None
    return f"docs/{relative.as_posix()}" if (config.docs_dir / relative).is_file() else None


def date_files(config: DeskConfig, day: date, validation: list[dict[str, Any]]) -> dict[str, str]:
    """The date's files the desk serves, as paths relative to the app's prefix."""
    out = {}
    for key, name in (
        ("report", f"report-{day.isoformat()}.html"),
        ("csv", f"reconciliation-{day.isoformat()}.csv"),
    ):
        if (config.report_dir / name).is_file():
            out[key] = f"files/{name}"
    index = {"data_docs_page": str(config.docs_dir / "local_site" / "index.html")}
    for candidate in [*validation, index]:
        served = docs_page(config, candidate)
        if served is not None:
            out["data_docs"] = served
            break
    return out


def airflow_runs(config: DeskConfig, day: date) -> list[dict[str, Any]]:
    """The nightly runs whose data interval starts on the date (newest first), with a link
    to each and to its pending Required Action."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    start = business_day_start(day, config.report_timezone)
    end = business_day_end(day, config.report_timezone)
    with create_session() as session:
        runs = session.scalars(
            select(DagRun)
            .where(
                DagRun.dag_id == NIGHTLY_DAG,
                DagRun.data_interval_start >= start,
                DagRun.data_interval_start < end,
            )
            .order_by(DagRun.run_after.desc())
            .limit(20)
        ).all()
        waiting = dict(
            session.execute(
                select(TaskInstance.run_id, TaskInstance.task_id).where(
                    TaskInstance.dag_id == NIGHTLY_DAG,
                    TaskInstance.task_id.in_([SIGNOFF_TASK, APPROVE_TASK]),
                    TaskInstance.run_id.in_([r.run_id for r in runs]),
                    TaskInstance.state.in_(["awaiting_input", "deferred"]),
                )
            ).all()
        )
        out = []
        for r in runs:
            url = f"/dags/{NIGHTLY_DAG}/runs/{r.run_id}"
            out.append(
                {
                    "run_id": r.run_id,
                    "state": str(r.state),
                    "url": url,
                    "required_action": f"{url}/tasks/{waiting[r.run_id]}/required_actions"
                    if r.run_id in waiting
                    else None,
                    "awaiting": waiting.get(r.run_id),
                }
            )
        return out


def business_date_of_run(config: DeskConfig, dag_id: str, run_id: str) -> date | None:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        run = session.scalars(
            select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id)
        ).one_or_none()
        if run is None:
            return None
        start = run.data_interval_start or (run.run_after - timedelta(days=1))
        return business_date_of(start, config.report_timezone)


# -- the app ------------------------------------------------------------------------------------


def parse_day(text: str) -> date:
    try:
        return parse_business_date(text)
    except ValueError as exc:
        raise HTTPException(400, str(exc)) from None


def report_file(config: DeskConfig, name: str) -> Path:
    """A report or CSV of the report directory, by exact name (404 otherwise)."""
    if not REPORT_FILE.fullmatch(name):
        raise HTTPException(404, "no such file: expected report-YYYY-MM-DD.html or .csv")
    path = (config.report_dir / name).resolve()
    if not path.is_relative_to(config.report_dir) or not path.is_file():
        raise HTTPException(404, f"no such file: {name}")
    return path


def docs_file(config: DeskConfig, relative: str) -> Path:
    """A file of the Data Docs site (404 for anything outside it or of another kind)."""
    parts = relative.split("/")
    if not all(DOCS_PART.fullmatch(p) and p not in (".", "..") for p in parts):
        raise HTTPException(404, "no such Data Docs file")
    path = config.docs_dir.joinpath(*parts).resolve()
    if (
        not path.is_relative_to(config.docs_dir)
        or path.suffix not in DOCS_TYPES
        or not path.is_file()
    ):
        raise HTTPException(404, "no such Data Docs file")
    return path


@dataclass
class WindowParams:
    """A window page's query parameters (its start and date are in the path)."""

    key: str | None = None
    currency: str | None = None
    kind: str | None = None
    page: str = "1"
    page_size: str = "100"

    def query(self) -> window_evidence.EvidenceQuery:
        """Which rows the page shows (a bad kind or page: 400, one line)."""
        try:
            return window_evidence.EvidenceQuery.parse(self.kind, self.page, self.page_size)
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from None


WindowAsked = Annotated[WindowParams, Depends()]


async def security_headers(request: Request, call_next: Any) -> Response:
    response: Response = await call_next(request)
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers.setdefault("Cache-Control", "no-store")
    return response


async def http_error(request: Request, exc: Exception) -> Response:
    """JSON under /api/, a page elsewhere."""
    assert isinstance(exc, StarletteHTTPException)
    headers = dict(exc.headers or {})
    if "/api/" in request.url.path:
        return JSONResponse({"detail": exc.detail}, exc.status_code, headers=headers)
    title = {401: "Log in to Airflow", 403: "Not allowed", 503: "Warehouse unreachable"}
    return HTMLResponse(
        pages.message_page(title.get(exc.status_code, "Error"), str(exc.detail)),
        exc.status_code,
        headers=headers,
    )


def create_app(config: DeskConfig | None = None) -> FastAPI:
    """The desk app; `config` from tally's settings (TALLY_*) when not given."""
    cfg = config or DeskConfig.from_settings(load_settings())
    app = FastAPI(
        title="tally reconciliation desk",
        description="tally's ledger of business dates, reports and sign-offs (Airflow plugin).",
        dependencies=[Depends(reviewer)],
        docs_url=None,  # no unauthenticated pages: every route is behind `reviewer`
        redoc_url=None,
        openapi_url=None,
    )
    app.middleware("http")(security_headers)
    app.add_exception_handler(StarletteHTTPException, http_error)
    for routes in (ledger_routes, date_routes, window_routes, file_routes):
        app.include_router(routes(cfg))
    return app


def ledger_routes(cfg: DeskConfig) -> APIRouter:
    """The ledger of business dates, as JSON and as a page."""
    router = APIRouter()

    async def ledger_page(
        status: str | None,
        date_from: str | None,
        date_to: str | None,
        page: str,
        size: str,
        older_than: str | None,
    ) -> tuple[dict[str, Any], ledger.LedgerQuery]:
        try:
            query = ledger.LedgerQuery.parse(status, date_from, date_to, page, size, older_than)
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from None
        rows = await off_loop(cfg, read_ledger, cfg, datetime.now(UTC))
        return ledger.select_page(rows, query), query

    @router.get("/api/ledger")
    async def ledger_json(
        status: str | None = None,
        date_from: str | None = None,
        date_to: str | None = None,
        page: str = "1",
        page_size: str = "50",
        older_than: str | None = None,
    ) -> dict[str, Any]:
        return (await ledger_page(status, date_from, date_to, page, page_size, older_than))[0]

    @router.get("/ledger", response_class=HTMLResponse)
    async def ledger_html(
        status: str | None = None,
        date_from: str | None = None,
        date_to: str | None = None,
        page: str = "1",
        page_size: str = "50",
        older_than: str | None = None,
    ) -> HTMLResponse:
        result, query = await ledger_page(status, date_from, date_to, page, page_size, older_than)
        return HTMLResponse(pages.ledger_page(result, query))

    return router


def date_routes(cfg: DeskConfig) -> APIRouter:
    """One business date, as JSON and as a page, and a nightly run's link to its date."""
    router = APIRouter()

    async def detail(day_text: str) -> dict[str, Any]:
        day = parse_day(day_text)
        found = await off_loop(cfg, read_date, cfg, day, datetime.now(UTC))
        found["airflow_runs"] = await run_in_threadpool(airflow_runs, cfg, day)
        return found

    @router.get("/api/dates/{day}")
    async def date_json(day: str) -> dict[str, Any]:
        return await detail(day)

    @router.get("/dates/{day}", response_class=HTMLResponse)
    async def date_html(day: str) -> HTMLResponse:
        return HTMLResponse(pages.date_page(await detail(day)))

    @router.get("/runs/{dag_id}/{run_id}")
    async def run_page(dag_id: str, run_id: str) -> Response:
        if dag_id != NIGHTLY_DAG:
            return HTMLResponse(
                pages.message_page("Not a reconciliation run", f"{dag_id} is not {NIGHTLY_DAG}")
            )
        day = await run_in_threadpool(business_date_of_run, cfg, dag_id, run_id)
        if day is None:
            raise HTTPException(404, f"no run {run_id} of {dag_id}")
        return RedirectResponse(f"../../dates/{day.isoformat()}", status_code=307)

    return router


def window_routes(cfg: DeskConfig) -> APIRouter:
    """One window's records: JSON, a page, and their CSV."""
    router = APIRouter()

    async def window(
        day: str,
        start: str,
        key: str | None,
        currency: str | None,
        query: window_evidence.EvidenceQuery,
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        try:
            ref = window_evidence.WindowRef.parse(day, start, key, currency)
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from None
        recon, evidence = await off_loop(cfg, read_window, cfg, ref)
        if recon is None:
            raise HTTPException(
                404,
                f"no window {ref.start_text()} of key {ref.key!r} in {ref.currency} on "
                f"{ref.business_date.isoformat()} (not reconciled, or no such window)",
            )
        found = window_evidence.window_detail(ref, recon, evidence, query)
        found["links"] = {
            "date": f"dates/{ref.business_date.isoformat()}",
            "csv": ref.path("/evidence.csv"),
            **{k: v for k, v in date_files(cfg, ref.business_date, []).items() if k != "data_docs"},
        }
        return found, evidence

    @router.get("/api/dates/{day}/windows/{start}")
    async def window_json(day: str, start: str, asked: WindowAsked) -> dict[str, Any]:
        return (await window(day, start, asked.key, asked.currency, asked.query()))[0]

    @router.get("/dates/{day}/windows/{start}", response_class=HTMLResponse)
    async def window_html(day: str, start: str, asked: WindowAsked) -> HTMLResponse:
        found, _ = await window(day, start, asked.key, asked.currency, asked.query())
        return HTMLResponse(pages.window_page(found))

    @router.get("/dates/{day}/windows/{start}/evidence.csv")
    async def window_csv(
        day: str, start: str, key: str | None = None, currency: str | None = None
    ) -> Response:
        found, evidence = await window(day, start, key, currency, window_evidence.EvidenceQuery())
        name = f"evidence-{found['business_date']}.csv"
        return PlainTextResponse(
            window_evidence.evidence_csv(evidence),
            media_type="text/csv",
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )

    return router


def file_routes(cfg: DeskConfig) -> APIRouter:
    """The report's files and the published Data Docs, inside the warehouse's allowed paths."""
    router = APIRouter()

    @router.get("/files/{name}")
    async def files(name: str) -> FileResponse:
        path = report_file(cfg, name)
        if path.suffix == ".csv":
            return FileResponse(path, media_type="text/csv", filename=path.name)
        return FileResponse(path, media_type="text/html")

    @router.get("/docs/{relative:path}")
    async def docs(relative: str) -> FileResponse:
        path = docs_file(cfg, relative)
        return FileResponse(path, media_type=DOCS_TYPES[path.suffix])

    return router
