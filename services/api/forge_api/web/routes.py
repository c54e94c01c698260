"""The web pages, served by the api itself: plain HTML, one small vanilla JS module per page, one
stylesheet, no build step and nothing from a CDN.

Pages are static documents (the layout plus each page's ``<main>``) rendered once from the
package data; every datum comes from the JSON API with ``fetch`` and live updates arrive over
Server-Sent Events (``EventSource``). Responses carry an ``ETag`` (a reload costs a 304), are
gzipped for clients that accept it (compressed once per process), and HTML carries a
Content-Security-Policy that allows only this origin.
"""

from __future__ import annotations

import gzip
import hashlib
import uuid
from dataclasses import dataclass
from functools import cache
from importlib import resources

from fastapi import APIRouter, Request
from fastapi.responses import Response

router = APIRouter(include_in_schema=False)

PACKAGE = "forge_api.web"

CONTENT_TYPES = {
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
}

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}

NAV = (("jobs", "/jobs", "Jobs"), ("new", "/jobs/new", "New job"), ("models", "/models", "Models"))


@dataclass(frozen=True)
class Page:
    title: str
    body: str  # the file in pages/ holding the page's <main> content
    script: str  # its module in static/
    nav: str  # which navigation entry is the current page


PAGES = {
    "jobs": Page("Jobs", "jobs.html", "jobs.js", "jobs"),
    "new": Page("New job", "new.html", "new.js", "new"),
    "job": Page("Job", "job.html", "job.js", "jobs"),
    "models": Page("Models", "models.html", "models.js", "models"),
    "missing": Page("Page not found", "missing.html", "", ""),
}


def _read(folder: str, name: str) -> bytes | None:
    node = resources.files(PACKAGE).joinpath(folder, name)
    return node.read_bytes() if node.is_file() else None


def _etag(body: bytes) -> str:
    return '"' + hashlib.sha256(body).hexdigest()[:20] + '"'


@cache
def render(key: str) -> tuple[bytes, str]:
    """A page's whole document and its ETag (computed once per process)."""
    page = PAGES[key]
    layout = (_read("pages", "layout.html") or b"").decode()
    main = (_read("pages", page.body) or b"").decode()
    current = ' aria-current="page"'
    nav = "\n".join(f'      <li><a href="{href}"{current if name == page.nav else ""}>{label}</a></li>' for name, href, label in NAV)
    script = f'<script type="module" src="/assets/{page.script}"></script>' if page.script else ""
    html = (
        layout.replace("{{title}}", page.title).replace("{{script}}", script).replace("{{nav}}", nav).replace("{{main}}", main.rstrip("\n"))
    )
    body = html.encode()
    return body, _etag(body)


@cache
def _shipped() -> dict[str, tuple[bytes, str, str]]:
    """Every static file with its content type and ETag, read once (a lookup of any other name
    caches nothing, so requests for made-up names cannot grow memory)."""
    out = {}
    for node in resources.files(PACKAGE).joinpath("static").iterdir():
        suffix = node.name[node.name.rfind(".") :] if "." in node.name else ""
        if node.is_file() and suffix in CONTENT_TYPES and not node.name.startswith("."):
            body = node.read_bytes()
            out[node.name] = (body, CONTENT_TYPES[suffix], _etag(body))
    return out


def asset(name: str) -> tuple[bytes, str, str] | None:
    """A static file's bytes, content type and ETag; None for anything not shipped."""
    return _shipped().get(name)


@cache
def _gzipped(body: bytes) -> bytes:
    return gzip.compress(body, compresslevel=9, mtime=0)


def _respond(request: Request, body: bytes, media_type: str, etag: str, status: int = 200, extra: dict[str, str] | None = None) -> Response:
    headers = {"ETag": etag, "Cache-Control": "no-cache", "Vary": "Accept-Encoding", **(extra or {})}
    if status == 200 and etag in request.headers.get("if-none-match", ""):
        return Response(status_code=304, headers=headers)
    if len(body) > 1024 and "gzip" in request.headers.get("accept-encoding", ""):
        body = _gzipped(body)
        headers["Content-Encoding"] = "gzip"
    return Response(body, status_code=status, media_type=media_type, headers=headers)


def page(request: Request, key: str, status: int = 200) -> Response:
    body, etag = render(key)
    return _respond(request, body, "text/html; charset=utf-8", etag, status, SECURITY_HEADERS)


@router.get("/")
async def home(request: Request) -> Response:
    return page(request, "jobs")


@router.get("/jobs")
async def jobs_page(request: Request) -> Response:
    return page(request, "jobs")


@router.get("/jobs/new")
async def new_job_page(request: Request) -> Response:
    return page(request, "new")


@router.get("/jobs/{job_id}")
async def job_page(request: Request, job_id: str) -> Response:
    try:
        uuid.UUID(job_id)
    except ValueError:
        return page(request, "missing", status=404)
    return page(request, "job")


@router.get("/models")
async def models_page(request: Request) -> Response:
    return page(request, "models")


@router.get("/assets/{name:path}")
async def static_asset(request: Request, name: str) -> Response:
    found = asset(name)
    if found is None:
        return page(request, "missing", status=404)
    body, media_type, etag = found
    return _respond(request, body, media_type, etag, extra={"X-Content-Type-Options": "nosniff"})


@router.get("/favicon.ico")
async def favicon(request: Request) -> Response:
    found = asset("favicon.svg")
    assert found is not None
    body, media_type, etag = found
    return _respond(request, body, media_type, etag)
