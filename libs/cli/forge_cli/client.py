"""A small synchronous client of the Forge HTTP API, with the API's errors as exceptions."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx


class ApiError(Exception):
    def __init__(self, status: int, kind: str, detail: str, body: dict[str, Any] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.kind = kind
        self.detail = detail
        self.body = body or {}


class ForgeClient:
    def __init__(self, base_url: str, *, timeout: float = 60.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.http = httpx.Client(base_url=self.base_url, timeout=timeout)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> ForgeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check(self, response: httpx.Response) -> Any:
        if response.is_success:
            return response.json() if response.content else None
        try:
            body = response.json()
        except ValueError:
            body = {"detail": response.text or response.reason_phrase}
        raise ApiError(response.status_code, str(body.get("type", "error")), str(body.get("detail", body)), body)

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            return self._check(self.http.request(method, path, **kwargs))
        except httpx.TransportError as exc:
            raise ApiError(
                0, "unreachable", f"cannot reach the Forge API at {self.base_url} ({exc}); is the stack running? (make up)"
            ) from None

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None})

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, json=body)

    # -- datasets --------------------------------------------------------------------------------

    def upload_version(self, name: str, archive: Path, fmt: str | None = None, tokenizer: str | None = None) -> Any:
        with open(archive, "rb") as fh:
            files = {"file": (archive.name, fh, "application/octet-stream")}
            data = {k: v for k, v in (("format", fmt), ("tokenizer", tokenizer)) if v}
            return self.request("POST", f"/v1/datasets/{name}/versions", files=files, data=data, timeout=None)

    # -- streams ---------------------------------------------------------------------------------

    def events(self, job_id: str, last_event_id: str | None = None) -> Iterator[tuple[str, str | None, Any]]:
        """(event name, id, decoded data) for each Server-Sent Event of a job, until the caller stops
        (keep-alives come as ``("ping", None, None)``)."""
        headers = {"Accept": "text/event-stream"}
        if last_event_id:
            headers["Last-Event-ID"] = last_event_id
        try:
            with self.http.stream("GET", f"/v1/jobs/{job_id}/events", headers=headers, timeout=httpx.Timeout(10.0, read=None)) as response:
                if not response.is_success:
                    response.read()
                    self._check(response)
                event, eid, data = "message", None, []
                for line in response.iter_lines():
                    if line == "":
                        if data:
                            text = "\n".join(data)
                            try:
                                payload: Any = json.loads(text)
                            except ValueError:
                                payload = text
                            yield event, eid, payload
                        event, eid, data = "message", None, []
                    elif line.startswith(":"):
                        yield "ping", None, None  # a keep-alive: lets a follower check its deadlines
                        continue
                    else:
                        key, _, value = line.partition(":")
                        value = value[1:] if value.startswith(" ") else value
                        if key == "event":
                            event = value
                        elif key == "id":
                            eid = value
                        elif key == "data":
                            data.append(value)
        except httpx.TransportError as exc:
            raise ApiError(0, "unreachable", f"lost the event stream from {self.base_url} ({exc})") from None
