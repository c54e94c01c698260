"""Custom training scripts are untrusted downloads: only allowed schemes (and HTTP hosts, when
configured; never the api's own machine unless named), bounded in size and time, optionally pinned by sha256. The api fetches the script
once, at submission, stores it content-addressed, and records its digest on the job — the trainer
runs exactly those bytes."""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlparse

import httpx

from forge_common.errors import InvalidInput
from forge_sdk.storage import StorageError, location_from_uri

from ..deps import Services


@dataclass(frozen=True)
class Fetched:
    uri: str
    sha256: str
    size: int
    stored_uri: str


async def _http(uri: str, max_bytes: int, seconds: float) -> bytes:
    try:
        async with httpx.AsyncClient(timeout=seconds, follow_redirects=False) as client, client.stream("GET", uri) as response:
            if response.status_code != 200:
                raise InvalidInput(f"fetching {uri} answered HTTP {response.status_code}", field="custom_script_uri")
            declared = response.headers.get("content-length")
            if declared and int(declared) > max_bytes:
                raise InvalidInput(f"the script at {uri} is larger than {max_bytes} bytes", field="custom_script_uri")
            data = bytearray()
            async for chunk in response.aiter_bytes():
                data.extend(chunk)
                if len(data) > max_bytes:
                    raise InvalidInput(f"the script at {uri} is larger than {max_bytes} bytes", field="custom_script_uri")
            return bytes(data)
    except httpx.TimeoutException:
        raise InvalidInput(f"fetching {uri} took longer than {seconds:g} s", field="custom_script_uri") from None
    except httpx.HTTPError as exc:
        raise InvalidInput(f"cannot fetch {uri}: {exc}", field="custom_script_uri") from None


async def _s3(services: Services, uri: str, max_bytes: int) -> bytes:
    def read() -> bytes:
        location = location_from_uri(uri, services.store.s3)
        info = location.store.stat(location.prefix)
        if info is None:
            raise InvalidInput(f"no object {uri}", field="custom_script_uri")
        if info.size > max_bytes:
            raise InvalidInput(f"the script at {uri} is larger than {max_bytes} bytes", field="custom_script_uri")
        return location.store.get_bytes(location.prefix)

    try:
        return await asyncio.to_thread(read)
    except StorageError as exc:
        raise InvalidInput(f"cannot read {uri}: {exc}", field="custom_script_uri") from None


async def _refuse_internal_hosts(host: str, port: int) -> None:
    """The api's own machine and the cloud's metadata service are not for users to read: a host
    that resolves to a loopback, link-local, unspecified or multicast address is refused unless
    an operator names it in FORGE_API_SCRIPT_ALLOWED_HOSTS. (Private ranges stay allowed: scripts
    often live on an intranet server.)"""
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise InvalidInput(f"cannot resolve the script's host {host!r}: {exc}", field="custom_script_uri") from None
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%")[0])
        if address.is_loopback or address.is_link_local or address.is_unspecified or address.is_multicast:
            raise InvalidInput(
                f"the script's host {host!r} is {address}, an address on the api's own machine or network link;"
                " an operator can allow it by naming the host in FORGE_API_SCRIPT_ALLOWED_HOSTS",
                field="custom_script_uri",
            )


async def fetch(services: Services, uri: str, sha256: str | None) -> Fetched:
    settings = services.settings
    parsed = urlparse(uri)
    if parsed.scheme not in ("s3", "http", "https"):
        raise InvalidInput(
            f"custom_script_uri must be s3://, http:// or https://, not {parsed.scheme or 'a bare path'}", field="custom_script_uri"
        )
    if parsed.scheme == "s3" and services.store.s3 is None:
        raise InvalidInput("this installation has no S3 endpoint configured, so it cannot read s3:// scripts", field="custom_script_uri")
    if parsed.scheme != "s3":  # s3:// reads the installation's own endpoint, with its credentials
        allowed = [h.strip() for h in settings.script_allowed_hosts.split(",") if h.strip()]
        named = parsed.hostname in allowed or parsed.netloc in allowed
        if allowed and not named:
            raise InvalidInput(
                f"scripts may only come from {', '.join(allowed)}; {parsed.netloc} is not allowed", field="custom_script_uri"
            )
        if not named:
            await _refuse_internal_hosts(parsed.hostname or "", parsed.port or (443 if parsed.scheme == "https" else 80))
    seconds = settings.script_timeout_seconds
    try:
        async with asyncio.timeout(seconds):  # the whole download (httpx's timeout bounds each read)
            if parsed.scheme == "s3":
                data = await _s3(services, uri, settings.script_max_bytes)
            else:
                data = await _http(uri, settings.script_max_bytes, seconds)
    except TimeoutError:
        raise InvalidInput(f"fetching {uri} took longer than {seconds:g} s", field="custom_script_uri") from None
    digest = hashlib.sha256(data).hexdigest()
    if sha256 and digest != sha256:
        raise InvalidInput(f"the script at {uri} has sha256 {digest}, not the pinned {sha256}", field="custom_script_sha256")
    try:
        compile(data, uri, "exec")
    except (SyntaxError, ValueError) as exc:
        raise InvalidInput(f"the script at {uri} is not valid Python: {exc}", field="custom_script_uri") from None
    stored = await services.store.put_bytes(f"scripts/{digest}.py", data)
    return Fetched(uri=uri, sha256=digest, size=len(data), stored_uri=stored)
