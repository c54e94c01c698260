"""What a request may need, created once per process by the lifespan, and the ``Annotated``
dependency aliases handlers use to ask for it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated

import asyncpg
from fastapi import Depends, Request
from nats.aio.client import Client
from nats.js import JetStreamContext

from forge_common.settings import CommonSettings
from forge_common.storage import ObjectStore
from forge_common.subjects import Subjects

from .settings import ApiSettings


@dataclass
class Services:
    common: CommonSettings
    settings: ApiSettings
    subjects: Subjects
    pool: asyncpg.Pool
    nc: Client
    js: JetStreamContext
    store: ObjectStore


def get_services(request: Request) -> Services:
    return request.app.state.services  # type: ignore[no-any-return]


async def get_conn(request: Request) -> AsyncIterator[asyncpg.Connection]:
    async with get_services(request).pool.acquire() as conn:
        yield conn


ServicesDep = Annotated[Services, Depends(get_services)]
ConnDep = Annotated[asyncpg.Connection, Depends(get_conn)]
