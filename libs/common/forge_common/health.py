"""A tiny HTTP health endpoint for services that have no web framework (scheduler, log-relay,
registrar): ``GET /healthz`` answers 200 while the process runs, ``GET /readyz`` 200 while its
check passes (database and bus reachable), 503 otherwise. Used by compose and Kubernetes probes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable


async def serve(host: str, port: int, ready: Callable[[], Awaitable[bool]]) -> asyncio.Server:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readline(), 5)
            while (await asyncio.wait_for(reader.readline(), 5)) not in (b"\r\n", b"\n", b""):
                pass
            path = request.split(b" ")[1].decode() if request.count(b" ") >= 2 else "/"
            if path.startswith("/readyz"):
                ok = False
                with contextlib.suppress(Exception):
                    ok = await asyncio.wait_for(ready(), 5)
            else:
                ok = path.startswith("/healthz")
            status, body = (
                ("200 OK", b"ok\n")
                if ok
                else (("503 Service Unavailable", b"not ready\n") if path.startswith("/readyz") else ("404 Not Found", b"not found\n"))
            )
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body
            )
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, host, port)
