"""Request bodies are bounded before they are read: a declared ``Content-Length`` over the limit is
refused at once (413, nothing read, nothing spooled to disk) and a body without one (chunked) is
counted as it arrives and cut off at the limit. Dataset archives get the upload limit, every other
body (job specs, trainer profiles) a small one.

Starlette's ``RequestBodyLimitResponder`` does the counting; FastAPI's own ``max_body_size`` is
fixed when a route is declared, and these limits are settings read when the app is created."""

from __future__ import annotations

import re

from starlette.datastructures import Headers
from starlette.middleware.body_limit import MAX_BODY_SIZE_SCOPE_KEY, RequestBodyLimitResponder
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

# The multipart framing around an archive (boundaries, part headers, the small form fields).
MULTIPART_SLACK = 64 * 1024
_UPLOAD = re.compile(r"^/v1/datasets/[^/]+/versions/?$")


def limit_for(method: str, path: str, *, upload_bytes: int, body_bytes: int) -> int:
    if method == "POST" and _UPLOAD.match(path):
        return upload_bytes + MULTIPART_SLACK
    return body_bytes


def refusal(limit: int) -> dict[str, object]:
    return {"type": "payload_too_large", "detail": f"the request body is over this endpoint's {limit}-byte limit", "limit": limit}


def current_limit(scope: Scope) -> int | None:
    """The limit the request at hand was held to (for the error message)."""
    value = scope.get(MAX_BODY_SIZE_SCOPE_KEY)
    return value if isinstance(value, int) else None


class BodyLimit:
    def __init__(self, app: ASGIApp, *, upload_bytes: int, body_bytes: int) -> None:
        self.app = app
        self.upload_bytes = upload_bytes
        self.body_bytes = body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = limit_for(scope["method"], scope["path"], upload_bytes=self.upload_bytes, body_bytes=self.body_bytes)
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await JSONResponse(refusal(limit), status_code=413, headers={"connection": "close"})(scope, receive, send)
            return
        await RequestBodyLimitResponder(self.app, limit)(scope, receive, send)
