"""The web pages over plain HTTP (no browser): served by the api with the right content types, every
asset they load is served too (and nothing comes from elsewhere), and every page's HTML has a
title, a main landmark and labelled inputs."""

from __future__ import annotations

import gzip
import re
import tomllib
from collections.abc import AsyncIterator
from fnmatch import fnmatch
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest

from forge_api.app import create_app
from forge_common.settings import CommonSettings

ROOT = Path(__file__).resolve().parents[2]
WEB = ROOT / "services" / "api" / "forge_api" / "web"
JOB_ID = "0b0e0c3a-9a53-4d7e-8a8e-2d7c1f9c6a11"
PAGES = {"/": "Jobs", "/jobs": "Jobs", "/jobs/new": "New job", f"/jobs/{JOB_ID}": "Job", "/models": "Models"}
TYPES = {".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}


@pytest.fixture
async def web() -> AsyncIterator[httpx.AsyncClient]:
    """The api application without its lifespan: pages and assets need no database and no bus."""
    app = create_app(CommonSettings())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://forge") as client:
        yield client


class Document(HTMLParser):
    """What the checks need from a page: title, landmarks, controls, labels, loaded URLs, ids."""

    def __init__(self) -> None:
        super().__init__()
        self.title = ""
        self.in_title = False
        self.mains = 0
        self.controls: list[dict[str, str | None]] = []
        self.label_for: set[str] = set()
        self.label_depth = 0
        self.urls: list[str] = []
        self.ids: list[str] = []
        self.lang: str | None = None
        self.headings: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids.append(str(a["id"]))
        if tag == "html":
            self.lang = a.get("lang")
        elif tag == "title":
            self.in_title = True
        elif tag == "main":
            self.mains += 1
        elif tag in ("h1", "h2", "h3"):
            self.headings.append(tag)
        elif tag == "label":
            self.label_depth += 1
            if a.get("for"):
                self.label_for.add(str(a["for"]))
        elif tag in ("input", "select", "textarea") and a.get("type") != "hidden":
            self.controls.append({**a, "_wrapped": "yes" if self.label_depth else None})
        if tag in ("script", "img") and a.get("src"):
            self.urls.append(str(a["src"]))
        if tag == "link" and a.get("href"):
            self.urls.append(str(a["href"]))

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
        elif tag == "label":
            self.label_depth -= 1

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title += data

    def unlabelled(self) -> list[dict[str, str | None]]:
        return [
            c
            for c in self.controls
            if not (c["_wrapped"] or c.get("aria-label") or c.get("aria-labelledby") or (c.get("id") and c["id"] in self.label_for))
        ]


def parse(html: str) -> Document:
    doc = Document()
    doc.feed(html)
    return doc


@pytest.mark.parametrize("path", list(PAGES))
async def test_every_page_is_html_with_a_title_a_main_landmark_and_labelled_inputs(web: httpx.AsyncClient, path: str) -> None:
    response = await web.get(path)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert "default-src 'self'" in response.headers["content-security-policy"]
    assert response.headers["x-content-type-options"] == "nosniff"
    doc = parse(response.text)
    assert doc.lang == "en"
    assert doc.title.strip() == f"{PAGES[path]} · Forge"
    assert doc.mains == 1
    assert doc.headings and doc.headings[0] == "h1", "the page starts with its h1"
    assert doc.unlabelled() == [], f"inputs without a label on {path}"
    assert len(doc.ids) == len(set(doc.ids)), f"duplicate ids on {path}"
    assert 'href="#main"' in response.text, "a skip link to the main landmark"


async def test_the_new_job_form_labels_each_field_and_offers_draft_and_start(web: httpx.AsyncClient) -> None:
    html = (await web.get("/jobs/new")).text
    doc = parse(html)
    names = {c.get("name") for c in doc.controls}
    assert {"name", "task", "dataset", "version", "base_model", "accelerator", "devices", "priority", "registration"} <= names
    assert re.search(r'<button type="submit" name="start" value="false"[^>]*>Save as draft</button>', html)
    assert re.search(r'<button type="submit" name="start" value="true"[^>]*>Start</button>', html)
    assert 'role="alert"' in html


async def test_the_job_page_explains_stop_versus_cancel_without_javascript(web: httpx.AsyncClient) -> None:
    html = (await web.get(f"/jobs/{JOB_ID}")).text
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html))
    assert "After at least one completed epoch the job ends Stopped and keeps its best model" in text
    assert "before that it ends Canceled and keeps nothing" in text
    for button in ("Stop", "Duplicate", "Resume", "Deploy", "Start"):
        assert re.search(rf'<button type="button"[^>]*>{button}</button>', html), button
    assert 'aria-live="polite"' in html


async def test_assets_are_served_with_their_content_types_and_nothing_comes_from_elsewhere(web: httpx.AsyncClient) -> None:
    loaded: set[str] = set()
    for path in PAGES:
        html = (await web.get(path)).text
        for url in parse(html).urls:
            assert url.startswith("/assets/"), f"{path} loads {url} from elsewhere"
            loaded.add(url)
    # module imports inside the scripts are assets too
    pending = [u for u in loaded if u.endswith(".js")]
    while pending:
        body = (await web.get(pending.pop())).text
        for name in re.findall(r'from "\./([\w.-]+\.js)"', body):
            if f"/assets/{name}" not in loaded:
                loaded.add(f"/assets/{name}")
                pending.append(f"/assets/{name}")
    assert {"/assets/forge.css", "/assets/common.js", "/assets/chart.js", "/assets/job.js", "/assets/new.js"} <= loaded
    for url in sorted(loaded):
        response = await web.get(url)
        assert response.status_code == 200, url
        suffix = url[url.rfind(".") :]
        assert response.headers["content-type"].startswith(TYPES[suffix]), (url, response.headers["content-type"])
        assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", response.text), f"{url} names another origin"
    assert (await web.get("/favicon.ico")).headers["content-type"] == "image/svg+xml"


async def test_assets_revalidate_with_etags_and_travel_gzipped(web: httpx.AsyncClient) -> None:
    first = await web.get("/assets/job.js", headers={"Accept-Encoding": "identity"})
    assert first.headers["cache-control"] == "no-cache" and first.headers["etag"]
    again = await web.get("/assets/job.js", headers={"If-None-Match": first.headers["etag"]})
    assert again.status_code == 304 and again.content == b""
    raw = await web.get("/assets/job.js", headers={"Accept-Encoding": "gzip"}, extensions={})
    assert raw.headers["content-encoding"] == "gzip"
    assert raw.text == first.text  # httpx decodes it
    assert len(gzip.compress(first.content)) < len(first.content) / 2


async def test_unknown_pages_and_assets_are_404_html_and_paths_cannot_escape(web: httpx.AsyncClient) -> None:
    for path in ("/jobs/not-a-job-id", "/assets/nope.js", "/assets/..%2Froutes.py", "/assets/routes.py", "/assets/.hidden.js"):
        response = await web.get(path)
        assert response.status_code == 404, path
        assert response.headers["content-type"] == "text/html; charset=utf-8"
        assert "Page not found" in response.text
    from forge_api.web import routes

    shipped = dict(routes._shipped())
    for i in range(200):  # made-up names are answered without being remembered anywhere
        assert (await web.get(f"/assets/made-up-{i}.js")).status_code == 404
    assert routes._shipped() == shipped and getattr(routes.asset, "cache_info", None) is None


async def test_the_pages_do_not_shadow_the_json_api(api: httpx.AsyncClient) -> None:
    """With the real lifespan (database, bus): the JSON API answers next to the pages."""
    assert (await api.get("/v1/jobs")).json() == []
    assert (await api.get("/jobs")).headers["content-type"].startswith("text/html")
    assert "/jobs" not in (await api.get("/openapi.json")).json()["paths"]


def test_every_shipped_file_is_package_data() -> None:
    """A non-editable install carries every page and asset (pyproject's package-data globs)."""
    config = tomllib.loads((ROOT / "services" / "api" / "pyproject.toml").read_text())
    globs = config["tool"]["setuptools"]["package-data"]["forge_api.web"]
    files = [p.relative_to(WEB).as_posix() for p in WEB.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".py"]
    assert files
    assert [f for f in files if not any(fnmatch(f, g) for g in globs)] == []
