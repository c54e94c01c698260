from __future__ import annotations

import asyncio

from forge_common.host import ServiceHost, serve
from forge_common.runtime import configure_logging, run_service
from forge_common.settings import CommonSettings

from . import handlers
from .mlflow_mirror import MlflowMirror
from .service import LogRelay
from .settings import LogRelaySettings


async def main(stop: asyncio.Event, common: CommonSettings | None = None, settings: LogRelaySettings | None = None) -> None:
    common = common or CommonSettings()
    settings = settings or LogRelaySettings()
    host = ServiceHost("log-relay", common, health_port=settings.health_port)

    async def setup(host: ServiceHost) -> None:
        relay = LogRelay(host.pool, host.js, host.subjects, settings)
        handlers.register(host.broker, host.subjects, relay)
        host.at_close(relay.close)
        await relay.resume()
        if common.mlflow_tracking_uri:
            mirror = MlflowMirror(host.pool, common.mlflow_tracking_uri, experiment=common.mlflow_experiment, job_url=common.public_url)
            handlers.register_mirror(host.broker, host.subjects, mirror)
            host.spawn(mirror.run(stop), "mlflow-mirror")

    await serve(host, setup, stop)


def run() -> None:
    configure_logging(CommonSettings().log_level)
    run_service(main)
