"""Browser tests: Debian's Chromium driven by Playwright against the whole stack (the end-to-end
tier's four services as processes on real NATS and PostgreSQL, with real trainings).

They skip, saying why, when Playwright or /usr/bin/chromium is missing (``make browser``
installs Chromium with apt-get). Screenshots go to ``test-artifacts/browser/`` (gitignored); a
failing test also leaves a screenshot of every page it had open.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Stack, stack  # noqa: F401  (the stack fixture, shared with the e2e tier)

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "browser"
CHROMIUM = Path(os.environ.get("FORGE_TEST_CHROMIUM", "/usr/bin/chromium"))  # Debian's; Playwright's own download does not work here
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture(scope="session")
def chromium() -> Path:
    """Chromium's path, once Playwright and the browser are known to be here (else: skip)."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("playwright is not installed (pip install playwright)")
    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium, or make browser)")
    return CHROMIUM


@pytest.fixture(scope="module")
def web(chromium: Path, stack: Stack) -> Stack:  # noqa: F811
    """The stack, started only when a browser can drive it."""
    return stack


@pytest.fixture(scope="module")
def browser(web: Stack, chromium: Path) -> Iterator[Any]:
    """Playwright's synchronous API keeps an event loop running in this thread: it starts after
    the stack and stops before the stack's teardown (which runs asyncio)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        instance = p.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS)
        try:
            yield instance
        finally:
            instance.close()


def is_error(msg: Any) -> bool:
    """A console error, except the browser's note about an API answer with a 4xx status (the
    pages show those to the user, e.g. a 422 next to its field)."""
    if msg.type != "error":
        return False
    url = (msg.location or {}).get("url", "")
    return not ("/v1/" in url and re.search(r"status of 4\d\d", msg.text))


def screenshot(page: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


@pytest.fixture
def open_page(browser: Any, web: Stack, request: pytest.FixtureRequest) -> Iterator[Callable[[str], Any]]:
    """Open a page of the stack's web UI; JavaScript errors on any page fail the test."""
    context = browser.new_context(base_url=web.url, viewport={"width": 1280, "height": 900}, reduced_motion="reduce")
    context.set_default_timeout(20_000)
    errors: list[str] = []
    pages: list[Any] = []

    def open_(path: str) -> Any:
        page = context.new_page()
        page.on("pageerror", lambda exc: errors.append(f"{page.url}: {exc}"))
        page.on("console", lambda msg: errors.append(f"{page.url}: console {msg.text}") if is_error(msg) else None)
        page.goto(path)
        pages.append(page)
        return page

    yield open_
    failed = getattr(request.node, "report_call", None)
    if failed is not None and failed.failed:
        slug = re.sub(r"\W+", "-", request.node.name)
        for i, page in enumerate(pages):
            if not page.is_closed():
                screenshot(page, f"FAILED-{slug}-{i}")
    seen = list(errors)  # what happens while closing is not the page's fault
    context.close()
    if seen:
        pytest.fail("JavaScript errors:\n" + "\n".join(seen))
