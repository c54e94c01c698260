from __future__ import annotations

import asyncio

from forge_common.host import ServiceHost, serve
from forge_common.runtime import configure_logging, run_service
from forge_common.settings import CommonSettings

from . import handlers
from .executors.base import Executor
from .executors.local import LocalExecutor, probe_devices
from .service import PRODUCER, Scheduler
from .settings import SchedulerSettings


async def main(stop: asyncio.Event, common: CommonSettings | None = None, settings: SchedulerSettings | None = None) -> None:
    common = common or CommonSettings()
    settings = settings or SchedulerSettings()
    host = ServiceHost("scheduler", common, health_port=settings.health_port, outbox_producer=PRODUCER)

    async def setup(host: ServiceHost) -> None:
        executor = await make_executor(settings, common)
        scheduler = Scheduler(host.pool, host.store, executor, host.subjects, settings, common)
        handlers.register(host.broker, host.subjects, scheduler)
        # catch up with whatever happened while no scheduler ran: exits, then free slots
        await scheduler.refresh_capacity()
        await scheduler.check_running()
        await scheduler.admit()
        host.spawn(scheduler.run_monitor(stop), "monitor")

    await serve(host, setup, stop)


async def make_executor(settings: SchedulerSettings, common: CommonSettings) -> Executor:
    if settings.executor == "kubernetes":
        from .executors.kubernetes import KubernetesExecutor

        return KubernetesExecutor.from_settings(settings, common)
    devices, note = ({}, "device detection is off")
    if settings.detect_devices:
        devices, note = await asyncio.to_thread(probe_devices, settings.trainer_python)
    return LocalExecutor(
        settings.run_dir or common.home / "runs",
        cpu_slots=settings.cpu_slots,
        devices=devices,
        device_note=note,
        container_runtime=settings.container_runtime,
    )


def run() -> None:
    configure_logging(CommonSettings().log_level)
    run_service(main)
