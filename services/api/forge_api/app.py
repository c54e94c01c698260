"""The FastAPI application: one lifespan owns every client; one handler renders every error."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import asyncpg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from forge_common import bus, db, telemetry
from forge_common.errors import ForgeError
from forge_common.outbox import OutboxRelay
from forge_common.runtime import configure_logging
from forge_common.settings import CommonSettings
from forge_common.storage import open_store
from forge_common.subjects import Subjects

from . import events_endpoints, health, limits, queue_endpoints, tasks
from .basemodels import endpoints as basemodels
from .basemodels import service as basemodels_service
from .datasets import endpoints as datasets
from .deps import Services
from .jobs import endpoints as jobs
from .models import endpoints as models
from .projects import current_project
from .settings import ApiSettings
from .trainers import endpoints as trainers
from .web import routes as web

log = logging.getLogger(__name__)

PRODUCER = "api"


def _first_error(exc: RequestValidationError) -> tuple[str, str]:
    err = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
    loc = [str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path")]
    field = ".".join(loc)
    msg = str(err.get("msg", "invalid"))
    if err.get("type") == "extra_forbidden":
        msg = "unknown field"
    return field, f"{field}: {msg}" if field else msg


def create_app(common: CommonSettings | None = None, settings: ApiSettings | None = None) -> FastAPI:
    common = common or CommonSettings()
    settings = settings or ApiSettings()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        telemetry.setup("api", common)
        subjects = Subjects(common.bus_prefix)
        pool = await db.connect(common.database_url, size=common.db_pool_size)
        nc, js = await bus.connect(common, name="forge-api")
        await bus.ensure_streams(js, subjects, max_age_days=common.bus_max_age_days)
        store = await asyncio.to_thread(open_store, common)
        async with pool.acquire() as conn:
            await basemodels_service.seed(conn, current_project())
        app.state.services = Services(common, settings, subjects, pool, nc, js, store)
        relay = asyncio.create_task(OutboxRelay(pool, js, producer=PRODUCER).run(), name="api:outbox")
        log.info("api: ready (bus prefix %s)", subjects.prefix)
        try:
            yield
        finally:
            relay.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await relay
            with contextlib.suppress(Exception):
                await asyncio.wait_for(nc.drain(), 10)
            await db.close(pool)
            telemetry.shutdown()

    app = FastAPI(
        title="Forge",
        version="0.1.0",
        description="Train models on immutable dataset versions; follow them live; get registered model versions.",
        lifespan=lifespan,
    )

    @app.exception_handler(ForgeError)
    async def forge_error(request: Request, exc: ForgeError) -> JSONResponse:
        body: dict[str, object] = {"type": exc.type, "detail": exc.detail}
        if exc.field:
            body["field"] = exc.field
        body.update(exc.extra)
        return JSONResponse(status_code=exc.status, content=body)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        field, detail = _first_error(exc)
        return JSONResponse(status_code=422, content={"type": "invalid_input", "detail": detail, "field": field})

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}.get(exc.status_code, "http_error")
        content: dict[str, object] = {"type": kind, "detail": str(exc.detail)}
        if exc.status_code == 413 and (limit := limits.current_limit(request.scope)) is not None:
            content = limits.refusal(limit)
        return JSONResponse(status_code=exc.status_code, content=content, headers=exc.headers)

    @app.exception_handler(asyncpg.IntegrityConstraintViolationError)
    async def lost_race(request: Request, exc: asyncpg.IntegrityConstraintViolationError) -> JSONResponse:
        # Checks run before writes, so this is a concurrent request winning between the two.
        log.info("conflict on %s %s: %s", request.method, request.url.path, exc)
        if isinstance(exc, asyncpg.UniqueViolationError):
            detail = "it already exists: a concurrent request created it first; reload and use it, or pick another name"
        elif isinstance(exc, asyncpg.ForeignKeyViolationError):
            detail = "something it refers to was deleted by a concurrent request; reload and try again"
        else:
            detail = f"the request conflicts with the stored data ({exc.__class__.__name__}); reload and try again"
        return JSONResponse(status_code=409, content={"type": "conflict", "detail": detail})

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return JSONResponse(status_code=500, content={"type": "internal", "detail": "unexpected server error; see the api log"})

    app.add_middleware(limits.BodyLimit, upload_bytes=settings.max_upload_bytes, body_bytes=settings.max_body_bytes)
    app.include_router(health.router)
    app.include_router(tasks.router)
    app.include_router(datasets.router)
    app.include_router(basemodels.router)
    app.include_router(trainers.router)
    app.include_router(jobs.router)
    app.include_router(models.router)
    app.include_router(queue_endpoints.router)
    app.include_router(events_endpoints.router)
    app.include_router(web.router)
    return app


def run() -> None:
    import uvicorn

    common = CommonSettings()
    settings = ApiSettings()
    configure_logging(common.log_level)
    uvicorn.run(create_app(common, settings), host=settings.host, port=settings.port, log_level="warning")
