"""The web view in a real browser: the distribution's headless chromium,
driven by Playwright (never a browser Playwright downloads).

Each page loads without console errors, the links work, a live log tail
grows while a job prints, the refresh updates a countdown and the page in
place, the timeline and calendar render. With WFSCHED_UPDATE_SCREENSHOTS=1
the same tests write the screenshots in docs/web/, so the docs show what
the view really shows.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon import wait_for
from tests.webworld import WebServer, World, build_world

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = Path(__file__).resolve().parent.parent / "docs" / "web"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="no /usr/bin/chromium (apt-get install chromium; .ci/run installs it)",
    ),
]
pytest.importorskip("playwright", reason="playwright is not installed (the test extra)")
pytest.importorskip("jinja2")


@pytest.fixture(scope="session")
def browser_type_launch_args() -> dict[str, Any]:
    """pytest-playwright's launch arguments: the distribution's chromium."""
    return {"executable_path": str(CHROMIUM), "args": ARGS, "headless": True}


@pytest.fixture(scope="session")
def browser_context_args() -> dict[str, Any]:
    return {"viewport": {"width": 1280, "height": 800}, "timezone_id": "UTC"}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    folder = tmp_path_factory.mktemp("web-browser")
    built = build_world(folder / "store", folder)
    try:
        yield built
    finally:
        built.daemon.stop()


@pytest.fixture(scope="module")
def base_url_of(world: World) -> Iterator[str]:
    server = WebServer(world.store, "--listen", "127.0.0.1:0", env=world.env)
    try:
        yield server.wait_serving()
    finally:
        server.stop()


@pytest.fixture
def errors(page: Any) -> list[str]:
    """Console errors and uncaught exceptions of the page, as they happen."""
    seen: list[str] = []
    page.on(
        "console", lambda message: seen.append(message.text) if message.type == "error" else None
    )
    page.on("pageerror", lambda error: seen.append(str(error)))
    return seen


def shoot(page: Any, name: str) -> None:
    if os.environ.get("WFSCHED_UPDATE_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))


PAGES = [
    ("/schedules", "Schedules", "schedules"),
    ("/schedules/daily", "Schedule daily", "schedule"),
    ("/runs", "Runs", "runs"),
    ("/timeline", "Timeline", "timeline"),
    ("/calendar", "Calendar", "calendar"),
    ("/hosts", "Hosts and leadership", "hosts"),
    ("/status", "Status", "status"),
]


@pytest.mark.parametrize(("path", "heading", "shot"), PAGES, ids=[p[2] for p in PAGES])
def test_each_page_loads_without_console_errors(
    page: Any, errors: list[str], base_url_of: str, path: str, heading: str, shot: str
) -> None:
    response = page.goto(base_url_of + path)
    assert response is not None and response.status == 200
    assert page.locator("h1").first.inner_text().startswith(heading)
    page.wait_for_function("typeof htmx !== 'undefined'")
    shoot(page, shot)
    assert errors == []


def test_the_navigation_and_row_links_work(page: Any, errors: list[str], base_url_of: str) -> None:
    page.goto(base_url_of + "/schedules")
    for label, heading in (
        ("Runs", "Runs"),
        ("Timeline", "Timeline"),
        ("Calendar", "Calendar"),
        ("Hosts", "Hosts"),
        ("Status", "Status"),
        ("Schedules", "Schedules"),
    ):
        page.locator("header nav").get_by_role("link", name=label, exact=True).click()
        page.wait_for_load_state()
        assert page.locator("h1").first.inner_text().startswith(heading)
    page.get_by_role("link", name="ok", exact=True).click()
    assert page.locator("h1").first.inner_text().startswith("Schedule ok")
    page.locator("#ledger a").first.click()
    assert page.locator("h1").first.inner_text().startswith("Run run-")
    assert "hello from ok" in page.locator("#log-stdout").inner_text()
    page.get_by_role("link", name="ok", exact=True).first.click()
    assert page.locator("h1").first.inner_text().startswith("Schedule ok")
    assert errors == []


def test_the_countdown_counts_and_the_page_refreshes_in_place(
    page: Any, errors: list[str], base_url_of: str
) -> None:
    page.goto(base_url_of + "/schedules")
    countdown = page.locator("#schedules tr", has_text="daily").locator(".countdown")
    first = countdown.inner_text()
    assert re.fullmatch(r"in \d+ h \d\d min \d\d s", first), first
    page.evaluate("document.body.dataset.marker = 'same document'")
    stamp = page.locator(".stamp").inner_text()
    wait_for(lambda: page.locator(".stamp").inner_text() != stamp, 20, "an in-place refresh")
    # The same document (no reload), with fresh content and a live countdown.
    assert page.evaluate("document.body.dataset.marker") == "same document"
    ticked = countdown.inner_text()
    wait_for(lambda: countdown.inner_text() != ticked, 10, "the countdown to tick")
    assert errors == []


def test_a_live_log_tail_grows_while_the_job_prints(
    page: Any, errors: list[str], base_url_of: str, world: World
) -> None:
    assert world.cli("trigger", "printer").returncode == 0
    from wfsched.api.run_ops import Runs
    from wfsched.store.web_queries import RunFilter

    def started() -> str | None:
        rows = world.read(lambda store: store.find_runs(RunFilter(schedule_id="printer"), limit=1))
        return rows[0].run_id if rows and rows[0].state == "running" else None

    run_id = wait_for(started, 30, "the printer to start")
    page.goto(f"{base_url_of}/runs/{run_id}")
    log = page.locator("#log-stdout")

    def lines() -> int:
        return len(log.inner_text().splitlines()) if log.count() else 0

    wait_for(lambda: lines() > 0, 20, "the first lines")
    first = lines()
    wait_for(lambda: lines() > first + 3, 20, "the tail to grow in place")
    assert "following live" in page.locator("h2", has_text="stdout").inner_text()
    shoot(page, "run")
    assert Runs  # the run page reads through the same Runs API
    assert errors == []


def test_the_timeline_and_calendar_render(page: Any, errors: list[str], base_url_of: str) -> None:
    page.goto(base_url_of + "/timeline")
    assert page.locator("#timeline rect.bar").count() >= 2
    assert page.locator("#timeline path.mark").count() >= 2
    box = page.locator("#timeline").bounding_box()
    assert box is not None and box["width"] > 800 and box["height"] > 100
    page.goto(base_url_of + "/calendar")
    assert page.locator("#calendar rect.cell").count() == 7 * 90
    assert page.locator("#calendar rect.o-completed").count() >= 1
    assert page.locator("#calendar rect.o-failed").count() >= 1
    page.locator("#calendar a rect.o-failed").first.click()
    page.wait_for_load_state()
    assert page.locator("h1").first.inner_text() == "Runs"
    assert page.locator("#runs tbody tr").count() >= 1
    assert errors == []


def test_the_view_works_with_javascript_off(browser: Any, base_url_of: str) -> None:
    context = browser.new_context(java_script_enabled=False)
    try:
        page = context.new_page()
        page.goto(base_url_of + "/schedules")
        assert page.locator("#schedules tr", has_text="daily").locator(".countdown").inner_text()
        page.get_by_role("link", name="Calendar", exact=True).click()
        assert page.locator("#calendar rect.cell").count() == 7 * 90
        refresh = page.locator("noscript").first.inner_html()
        assert 'http-equiv="refresh"' in refresh
    finally:
        context.close()
