"""The web view's pages, rendered against a real store (SQLite and
PostgreSQL) with a real supervisor running, their content asserted.

The world (tests/webworld.py): `ok` completed, `bad` failed, `missed`
skipped, `rejected` refused at preflight, `hourly` paused, `daily` due
later, `printer` never due. Pages are called through WSGI in-process.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.webworld import HOSTILE, SECRET, World, WsgiClient, build_world, page_urls, visible_text

pytest.importorskip("jinja2")
pytest.importorskip("waitress")


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def world(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    folder = tmp_path_factory.mktemp(f"web-{request.param}")
    if request.param == "sqlite":
        store: Path | str = folder / "store"
        built = build_world(store, folder)
        try:
            yield built
        finally:
            built.daemon.stop()
        return
    server = request.getfixturevalue("pg_server")
    url = server.create_database()
    built = build_world(url, folder)
    try:
        yield built
    finally:
        built.daemon.stop()
        server.drop_database(url)


@pytest.fixture(scope="module")
def client(world: World) -> Iterator[WsgiClient]:
    app = world.app()
    yield WsgiClient(app)
    app.close()


def rows(html: str, table_id: str) -> list[str]:
    """The visible text of each body row of the table with this id."""
    table = html.split(f'id="{table_id}"', 1)[1].split("</table>", 1)[0]
    body = table.split("<tbody>", 1)[1]
    return [" ".join(visible_text(row).split()) for row in body.split("<tr>")[1:]]


def row_of(html: str, table_id: str, first: str) -> str:
    found = [row for row in rows(html, table_id) if row.split()[0] == first]
    assert len(found) == 1, (first, rows(html, table_id))
    return found[0]


def test_schedules_page_shows_state_next_due_countdown_outcome_and_flags(
    client: WsgiClient,
) -> None:
    page = client.get("/schedules")
    assert page.status == 200
    assert "completed" in row_of(page.body, "schedules", "ok")
    assert "failed" in row_of(page.body, "schedules", "bad")
    assert "paused" in row_of(page.body, "schedules", "hourly")
    assert "preflight-rejected" in row_of(page.body, "schedules", "rejected")
    daily = row_of(page.body, "schedules", "daily")
    assert "active" in daily and " UTC" in daily and "(America/New_York)" in daily
    assert re.search(r"E[SD]T", daily), daily
    assert re.search(r"in \d+ h \d\d min", daily), daily
    assert 'class="countdown" data-epoch="' in page.body
    assert client.get("/").body.count("<tr>") == page.body.count("<tr>")


def test_schedules_page_filters_by_state_and_text(client: WsgiClient) -> None:
    paused = client.get("/schedules?state=paused").body
    assert [row.split()[0] for row in rows(paused, "schedules")] == ["hourly"]
    found = client.get("/schedules?q=new+york").body
    assert [row.split()[0] for row in rows(found, "schedules")] == ["daily"]
    assert "No schedules match." in client.get("/schedules?q=nothing-like-this").body
    wrong = client.get("/schedules?state=sleeping")
    assert wrong.status == 400 and "state must be one of" in wrong.body


def test_schedules_page_is_paged_with_stable_urls(world: World) -> None:
    from wfsched.web import pages

    app = world.app()
    try:
        limit, pages.PAGE = pages.PAGE, 3
        client = WsgiClient(app)
        first = client.get("/schedules").body
        assert [row.split()[0] for row in rows(first, "schedules")] == ["bad", "daily", "hourly"]
        assert 'href="/schedules?after=hourly"' in first
        second = client.get("/schedules?after=hourly").body
        assert [row.split()[0] for row in rows(second, "schedules")] == ["missed", "ok", "printer"]
        third = client.get("/schedules?after=printer").body
        assert [row.split()[0] for row in rows(third, "schedules")] == ["rejected"]
        assert "Next page" not in third
    finally:
        pages.PAGE = limit
        app.close()


def test_schedule_page_shows_definition_instants_ledger_runs_and_durations(
    client: WsgiClient, world: World
) -> None:
    page = client.get("/schedules/ok").body
    text = visible_text(page)
    assert "echo hello from ok" in text and "SECRET_TOKEN" in text
    ledger = rows(page, "ledger")
    assert len(ledger) == 1 and "completed" in ledger[0] and world.runs["ok"] in ledger[0]
    assert f'href="/runs/{world.runs["ok"]}"' in page
    assert '<svg class="chart" id="durations"' in page and 'class="bar o-completed"' in page

    daily = client.get("/schedules/daily").body
    upcoming = rows(daily, "upcoming")
    assert len(upcoming) == 10
    assert all(re.search(r"03:30 -0[45]:00 \(E[SD]T\)", row) for row in upcoming), upcoming

    missed = rows(client.get("/schedules/missed").body, "ledger")
    assert len(missed) == 1 and "skipped-misfire" in missed[0] and "supervisor-down" in missed[0]
    rejected = client.get("/schedules/rejected").body
    assert "preflight-rejected" in rows(rejected, "ledger")[0]
    assert "Preflight rejected" in rejected


def test_schedule_page_refuses_a_malformed_ledger_cursor(client: WsgiClient) -> None:
    broken = client.get("/schedules/ok?cursor=not-a-cursor")
    assert broken.status == 400 and "malformed cursor" in broken.body


def test_runs_page_filters_by_state_schedule_host_kind_and_time(
    client: WsgiClient, world: World
) -> None:
    def listed(query: str) -> set[str]:
        body = client.get(f"/runs?{query}").body
        if "No runs." in body:
            return set()
        return {row.split()[1] for row in rows(body, "runs") if row}

    everything = listed("")
    assert {"ok", "bad"} <= everything
    assert listed("state=failed") == {"bad"}
    assert listed("schedule=ok") == {"ok"}
    assert listed("kind=scheduled") >= {"ok", "bad"}
    here = socket.gethostname()
    assert listed(f"host={here}") == everything
    assert listed("host=some-other-host") == set()
    assert listed("since=2999-01-01T00:00:00Z") == set()
    assert listed("until=2000-01-01T00:00:00Z") == set()
    assert listed("since=2000-01-01T00:00:00Z") == everything
    bad = client.get("/runs?since=yesterday")
    assert bad.status == 400 and "since:" in bad.body
    assert client.get("/runs?kind=weird").status == 400
    assert client.get("/runs?state=weird").status == 400


def test_run_page_shows_invocation_placement_attempts_exit_and_logs(
    client: WsgiClient, world: World
) -> None:
    ok = client.get(f"/runs/{world.runs['ok']}").body
    text = visible_text(ok)
    assert "hello from ok" in text and "a warning" in text
    assert row_of(ok, "attempts", "1").split()[1] == "completed"
    assert socket.gethostname() in text
    bad = client.get(f"/runs/{world.runs['bad']}").body
    assert "going down" in visible_text(bad)
    assert "exited with code 3" in visible_text(bad)
    log = client.get(f"/runs/{world.runs['ok']}/log?stream=stderr")
    assert log.status == 200 and log.body == "a warning\n"
    assert log.headers["Content-Type"].startswith("text/plain")
    assert client.get(f"/runs/{world.runs['ok']}/log?stream=both").status == 400
    assert client.get("/runs/run-999999").status == 404


def test_timeline_draws_runs_as_bars_and_skips_as_marks(client: WsgiClient, world: World) -> None:
    page = client.get("/timeline").body
    svg = page.split('id="timeline"', 1)[1].split("</svg>", 1)[0]
    assert 'class="bar o-completed"' in svg and 'class="bar o-failed"' in svg
    assert 'class="mark o-skipped"' in svg  # missed
    assert 'class="mark o-failed"' in svg  # rejected at preflight
    assert f'href="/runs/{world.runs["ok"]}"' in svg
    assert svg.count('class="lane"') == 7
    assert client.get("/timeline?hours=0").status == 400


def test_calendar_colours_today_by_outcome_and_links_to_its_runs(client: WsgiClient) -> None:
    page = client.get("/calendar").body
    svg = page.split('id="calendar"', 1)[1].split("</svg>", 1)[0]
    assert svg.count('class="cell') == 7 * 90
    lanes = re.findall(r'class="lane" x="4" y="[\d.]+">([^<]+)<', svg)
    assert lanes == ["bad", "daily", "hourly", "missed", "ok", "printer", "rejected"]
    today = {name: "" for name in lanes}
    for name, kind in re.findall(r"<title>(\S+) \d{4}-\d\d-\d\d \(UTC\): ([^<]+)</title>", svg):
        if "nothing decided" not in kind:
            today[name] = kind
    assert today["ok"].endswith("completed") and today["bad"].endswith("failed")
    assert today["missed"].endswith("skipped") and today["rejected"].endswith("failed")
    assert today["daily"] == ""
    assert 'href="/runs?schedule=ok&amp;since=' in svg


def test_hosts_and_status_pages(client: WsgiClient, world: World) -> None:
    status = " ".join(visible_text(client.get("/status").body).split())
    assert f"running pid {world.daemon.proc.pid}" in status
    assert "rejected at" in status and "wfsched audit" in status
    hosts = " ".join(visible_text(client.get("/hosts").body).split())
    if isinstance(world.store, Path):
        assert f"the supervisor holding the store's lock (pid {world.daemon.proc.pid})" in hosts
    else:
        assert f"{socket.gethostname()} (pid {world.daemon.proc.pid}), epoch" in hosts
        assert "leader" in hosts


def test_every_text_is_escaped(client: WsgiClient) -> None:
    for url in ("/schedules", "/schedules/ok", "/schedules?q=%3Cscript%3E"):
        body = client.get(url).body
        assert "<script>alert" not in body
        assert "&lt;script&gt;alert(&#39;owned&#39;)&lt;/script&gt; &amp; friends" in body
    assert HOSTILE in visible_text(client.get("/schedules/ok").body)
    reflected = client.get("/schedules/%3Cb%3Ebold%3C%2Fb%3E")
    assert reflected.status == 404 and "<b>bold" not in reflected.body


def test_secrets_never_appear_unless_show_env(client: WsgiClient, world: World) -> None:
    for url in page_urls(world):
        reply = client.get(url)
        assert reply.status == 200, (url, reply.body[:500])
        assert SECRET not in reply.body, url
    shown = world.app(show_env=True)
    try:
        assert SECRET in WsgiClient(shown).get("/schedules/ok").body
        assert SECRET in WsgiClient(shown).get(f"/runs/{world.runs['ok']}").body
    finally:
        shown.close()


def test_every_other_method_is_405_and_changes_nothing(client: WsgiClient, world: World) -> None:
    before = world.state()
    for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "PROPFIND"):
        for url in [*page_urls(world), "/static/app.js", "/nope"]:
            reply = client.request(method, url, body=b"paused=1")
            assert reply.status == 405, (method, url)
            assert reply.headers["Allow"] == "GET, HEAD"
    assert world.state() == before


def test_head_answers_like_get_without_a_body(client: WsgiClient) -> None:
    reply = client.request("HEAD", "/schedules")
    assert reply.status == 200 and reply.body == ""
    assert int(reply.headers["Content-Length"]) == len(client.get("/schedules").body.encode())


def test_unknown_pages_and_ids_are_404(client: WsgiClient) -> None:
    assert client.get("/schedules/no-such").status == 404
    assert "no schedule 'no-such'" in visible_text(client.get("/schedules/no-such").body)
    assert client.get("/nothing/here").status == 404
    assert client.get("/static/../pyproject.toml").status == 404


def test_pages_load_nothing_from_outside(client: WsgiClient, world: World) -> None:
    for url in page_urls(world):
        reply = client.get(url)
        assert "default-src 'none'" in reply.headers["Content-Security-Policy"]
        assert not re.search(r'(src|href)="(https?:)?//', reply.body), url
    assert client.get("/static/htmx.min.js").body.startswith("var htmx=")
