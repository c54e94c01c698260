from __future__ import annotations

import asyncio

from forge_common.host import ServiceHost, serve
from forge_common.runtime import configure_logging, run_service
from forge_common.settings import CommonSettings

from . import handlers
from .service import PRODUCER, Registrar
from .settings import RegistrarSettings


async def main(stop: asyncio.Event, common: CommonSettings | None = None, settings: RegistrarSettings | None = None) -> None:
    common = common or CommonSettings()
    settings = settings or RegistrarSettings()
    host = ServiceHost("registrar", common, health_port=settings.health_port, outbox_producer=PRODUCER)

    async def setup(host: ServiceHost) -> None:
        handlers.register(host.broker, host.subjects, Registrar(host.pool, host.subjects, host.store.s3))

    await serve(host, setup, stop)


def run() -> None:
    configure_logging(CommonSettings().log_level)
    run_service(main)
