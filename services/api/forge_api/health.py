from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from .deps import ServicesDep

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(services: ServicesDep) -> JSONResponse:
    """The database and the bus are reachable."""
    checks = {"nats": services.nc.is_connected, "database": False}
    try:
        async with services.pool.acquire(timeout=5) as conn:
            checks["database"] = bool(await conn.fetchval("SELECT true"))
    except Exception:
        pass
    ok = all(checks.values())
    return JSONResponse(status_code=200 if ok else 503, content={"status": "ok" if ok else "unavailable", **checks})
