"""A loop that waits on an event with a timeout must stop when cancelled, even when the event is
set in the same instant (Python 3.11's asyncio.wait_for swallows that cancellation)."""

from __future__ import annotations

import asyncio

import pytest

from forge_common.runtime import wait_event


async def _loop_until_cancelled(wait: object, event: asyncio.Event) -> None:
    while True:
        event.clear()
        await wait(event)  # type: ignore[operator]


async def test_a_cancellation_racing_the_event_still_stops_the_loop() -> None:
    event = asyncio.Event()
    task = asyncio.create_task(_loop_until_cancelled(lambda e: wait_event(e, 30), event))
    await asyncio.sleep(0.01)  # the loop is waiting
    event.set()  # a notification ...
    task.cancel()  # ... and shutdown, in the same instant
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 2)


async def test_it_reports_whether_the_event_came() -> None:
    event = asyncio.Event()
    assert await wait_event(event, 0.01) is False
    event.set()
    assert await wait_event(event, 0.01) is True
