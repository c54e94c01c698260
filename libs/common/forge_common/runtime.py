"""Process plumbing every service shares: logging, and running until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable, Callable


def configure_logging(level: str = "INFO") -> None:
    logging.basicConfig(
        level=level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for noisy in ("nats", "asyncio", "urllib3", "botocore", "werkzeug"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLogger().level))


async def wait_event(event: asyncio.Event, seconds: float) -> bool:
    """Whether ``event`` was set within ``seconds``. For loops that must stay cancellable: on
    Python 3.11 ``asyncio.wait_for`` can swallow a cancellation that arrives as the event is set
    (and the loop then never ends); ``asyncio.timeout`` cannot."""
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        return False
    return True


def run_service(main: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    """Run ``main(stop)`` until it returns; SIGTERM and SIGINT set ``stop``."""

    async def runner() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await main(stop)

    asyncio.run(runner())
