"""The log-relay follows a trainer's output file: lines become events and rows, exactly once,
across restarts."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import asyncpg

from forge_common.events import EpochCompleted, LogLines, MetricsReported, decode
from forge_common.settings import CommonSettings
from forge_common.subjects import Subjects
from forge_log_relay.service import LogRelay
from forge_log_relay.settings import LogRelaySettings
from forge_sdk.protocol import Epoch, Outcome, Step, format_line

from .conftest import collect
from .helpers import insert_attempt, insert_job


def lines_for(epochs: int) -> list[str]:
    out = ["starting"]
    step = 0
    for e in range(1, epochs + 1):
        for _ in range(3):
            step += 1
            out.append(format_line(Step(step=step, epoch=e, metrics={"loss": 1.0 / step})))
        out.append(f"epoch {e} done")
        out.append(format_line(Epoch(epoch=e, metrics={"acc": e / 10}, is_best=True, total_epochs=epochs)))
    out.append(format_line(Outcome(state="succeeded", epochs_completed=epochs)))
    return out


async def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not await predicate():
            await asyncio.sleep(0.05)


async def test_output_becomes_events_and_rows(pool: asyncpg.Pool, js: Any, common_settings: CommonSettings, tmp_path: Path) -> None:
    subjects = Subjects(common_settings.bus_prefix)
    relay = LogRelay(pool, js, subjects, LogRelaySettings(poll_seconds=0.01))
    job_id, log = uuid.uuid4(), tmp_path / "output.log"
    log.write_text("")
    await relay.follow(job_id, 1, log.as_uri())
    lines = lines_for(2)
    with open(log, "a") as fh:
        for line in lines[:5]:
            fh.write(line + "\n")
        fh.flush()
        fh.write("half a li")  # not complete yet: must not be read
        fh.flush()
        await asyncio.sleep(0.3)
        fh.write("ne\n")
        for line in lines[5:]:
            fh.write(line + "\n")
    await relay.finish(job_id, 1, log.as_uri())

    async def done() -> bool:
        async with pool.acquire() as conn:
            return bool(await conn.fetchval("SELECT done FROM log_cursors WHERE job_id = $1", job_id))

    await wait_for(done)
    async with pool.acquire() as conn:
        texts = [r["text"] for r in await conn.fetch("SELECT text FROM log_lines WHERE job_id = $1 ORDER BY line_no", job_id)]
        points = await conn.fetch("SELECT scope, idx, name, value FROM metric_points WHERE job_id = $1 ORDER BY scope, idx", job_id)
    assert texts == ["starting", "epoch 1 done", "half a line", "epoch 2 done"]
    assert [(p["scope"], p["idx"], p["name"]) for p in points if p["scope"] == "epoch"] == [("epoch", 1, "acc"), ("epoch", 2, "acc")]
    assert [p["idx"] for p in points if p["scope"] == "step"] == [1, 2, 3, 4, 5, 6]
    events = [decode(m.data) for m in await collect(js, subjects.all_of_job(job_id), 13)]
    kinds = [type(e).__name__ for e in events]
    assert kinds.count("MetricsReported") == 6 and kinds.count("EpochCompleted") == 2
    epochs = [e for e in events if isinstance(e, EpochCompleted)]
    assert [e.data.epoch for e in epochs] == [1, 2] and epochs[0].data.metrics == {"acc": 0.1}
    assert isinstance(events[-1], LogLines) and events[-1].data.eof
    steps = [e for e in events if isinstance(e, MetricsReported)]
    assert [s.data.step for s in steps] == [1, 2, 3, 4, 5, 6]
    await relay.close()


async def test_a_restarted_relay_continues_without_duplicates(
    pool: asyncpg.Pool, js: Any, common_settings: CommonSettings, tmp_path: Path
) -> None:
    subjects = Subjects(common_settings.bus_prefix)
    log = tmp_path / "output.log"
    lines = lines_for(3)
    log.write_text("".join(x + "\n" for x in lines[:6]))
    async with pool.acquire() as conn:
        job_id = await insert_job(conn)
        await insert_attempt(conn, job_id, log_uri=log.as_uri())
    first = LogRelay(pool, js, subjects, LogRelaySettings(poll_seconds=0.01))
    await first.resume()

    async def read_six() -> bool:
        async with pool.acquire() as conn:
            return (await conn.fetchval("SELECT line_no FROM log_cursors WHERE job_id = $1", job_id)) == 6

    await wait_for(read_six)
    await first.close()  # the relay goes away mid-run
    with open(log, "a") as fh:
        fh.write("".join(x + "\n" for x in lines[6:]))
    async with pool.acquire() as conn:
        await conn.execute("UPDATE attempts SET finished_at = now() WHERE job_id = $1", job_id)
    second = LogRelay(pool, js, subjects, LogRelaySettings(poll_seconds=0.01))
    await second.resume()

    async def done() -> bool:
        async with pool.acquire() as conn:
            return bool(await conn.fetchval("SELECT done FROM log_cursors WHERE job_id = $1", job_id))

    await wait_for(done)
    async with pool.acquire() as conn:
        n_steps = await conn.fetchval("SELECT count(*) FROM metric_points WHERE job_id = $1 AND scope = 'step'", job_id)
        n_lines = await conn.fetchval("SELECT count(*) FROM log_lines WHERE job_id = $1", job_id)
    assert (n_steps, n_lines) == (9, 4)
    epochs = [decode(m.data) for m in await collect(js, subjects.job(job_id, "epoch-completed"), 3)]
    assert [e.data.epoch for e in epochs] == [1, 2, 3]
    info = await js.stream_info(subjects.jobs_stream, subjects_filter=subjects.job(job_id, "epoch-completed"))
    assert info.state.subjects == {subjects.job(job_id, "epoch-completed"): 3}
    await second.close()
    # an attempt read to the end is not followed again
    third = LogRelay(pool, js, subjects, LogRelaySettings())
    await third.resume()
    assert third.followers == {}


async def test_a_missing_output_file_is_waited_for(pool: asyncpg.Pool, js: Any, common_settings: CommonSettings, tmp_path: Path) -> None:
    subjects = Subjects(common_settings.bus_prefix)
    relay = LogRelay(pool, js, subjects, LogRelaySettings(poll_seconds=0.01))
    job_id, log = uuid.uuid4(), tmp_path / "later.log"
    await relay.follow(job_id, 1, log.as_uri())
    await asyncio.sleep(0.2)
    log.write_text("finally\n")
    await relay.finish(job_id, 1, log.as_uri())

    async def done() -> bool:
        async with pool.acquire() as conn:
            return bool(await conn.fetchval("SELECT done FROM log_cursors WHERE job_id = $1", job_id))

    await wait_for(done)
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT text FROM log_lines WHERE job_id = $1", job_id) == "finally"
    await relay.close()


async def test_a_failing_bus_or_database_repeats_the_step_exactly(
    pool: asyncpg.Pool, js: Any, common_settings: CommonSettings, tmp_path: Path
) -> None:
    subjects = Subjects(common_settings.bus_prefix)
    relay = LogRelay(pool, js, subjects, LogRelaySettings(poll_seconds=0.01))
    job_id, log = uuid.uuid4(), tmp_path / "output.log"
    log.write_text("".join(x + "\n" for x in lines_for(1)))
    from forge_log_relay.service import Follower, source_for

    follower = Follower(relay, job_id, 1, source_for(log.as_uri()), offset=0, line_no=0)
    from forge_common import bus as bus_module

    real = bus_module.publish
    calls = {"n": 0}

    async def flaky(*args: Any, **kwargs: Any) -> int:
        calls["n"] += 1
        if calls["n"] == 3:
            raise ConnectionError("nats restarting")
        return await real(*args, **kwargs)

    bus_module.publish = flaky  # type: ignore[assignment]
    try:
        try:
            await follower.step(final=True)
        except ConnectionError:
            pass
        assert (follower.offset, follower.line_no) == (0, 0)  # nothing moved
        assert await follower.step(final=True)
    finally:
        bus_module.publish = real  # type: ignore[assignment]
    async with pool.acquire() as conn:
        numbers = [r["line_no"] for r in await conn.fetch("SELECT line_no FROM log_lines WHERE job_id = $1 ORDER BY line_no", job_id)]
    assert numbers == [1, 5]  # "starting" and "epoch 1 done", numbered once
    steps = [decode(m.data) for m in await collect(js, subjects.job(job_id, "metrics"), 3)]
    info = await js.stream_info(subjects.jobs_stream, subjects_filter=subjects.job(job_id, "metrics"))
    assert info.state.subjects == {subjects.job(job_id, "metrics"): 3} and [s.data.step for s in steps] == [1, 2, 3]


async def test_unusable_records_and_newline_floods_do_not_stall_the_relay(
    pool: asyncpg.Pool, js: Any, common_settings: CommonSettings, tmp_path: Path
) -> None:
    subjects = Subjects(common_settings.bus_prefix)
    relay = LogRelay(pool, js, subjects, LogRelaySettings(poll_seconds=0.01))
    job_id, log = uuid.uuid4(), tmp_path / "output.log"
    flood = "x" * (1 << 20) + "\r"
    weird = '@@forge {"kind":"step","step":1,"epoch":1,"metrics":{"loss":1},"t":1e300}'
    log.write_text(f"before\n{weird}\n{flood}\nafter\n")
    await relay.follow(job_id, 1, log.as_uri(), finished=True)

    async def done() -> bool:
        async with pool.acquire() as conn:
            return bool(await conn.fetchval("SELECT done FROM log_cursors WHERE job_id = $1", job_id))

    await wait_for(done, timeout=20)
    async with pool.acquire() as conn:
        texts = [r["text"] for r in await conn.fetch("SELECT text FROM log_lines WHERE job_id = $1 ORDER BY line_no", job_id)]
        steps = await conn.fetchval("SELECT count(*) FROM metric_points WHERE job_id = $1", job_id)
    assert texts[0] == "before" and texts[-1] == "after" and steps == 1  # the odd timestamp is replaced, the step kept
    assert any(len(t) == LogRelaySettings().max_line_bytes for t in texts)  # the flood, cut to a line
    await relay.close()
