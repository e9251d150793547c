"""A store with a real supervisor for the web view's tests: schedules that
complete, fail, are skipped, are rejected at preflight, are paused, and one
that is due later; plus a WSGI client and a real `wfsched web` process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from wsgiref.util import setup_testing_defaults

from tests.daemon import RUNNING, Daemon, StoreName, utc_ago, wait_for, wfsched, write_definition

SECRET = "hunter2-secret-value"
HOSTILE = "<script>alert('owned')</script> & friends"

DEFINITIONS = {
    "ok": """description = "@HOSTILE@"
[trigger]
at = "@AGO5@"
[policy]
misfire = "latest"
[run]
command = ["/bin/sh", "-c", "echo hello from ok; echo a warning >&2"]
env = { SECRET_TOKEN = "@SECRET@", LANG = "C" }
""",
    "bad": """[trigger]
at = "@AGO5@"
[policy]
misfire = "latest"
[run]
command = ["/bin/sh", "-c", "echo going down; exit 3"]
""",
    "missed": """[trigger]
at = "@AGO120@"
[run]
command = ["/bin/true"]
""",
    "rejected": """[trigger]
at = "@AGO5@"
[policy]
misfire = "latest"
[run]
command = ["/nonexistent/wfsched-test-command"]
""",
    "hourly": """description = "paused on purpose"
[trigger]
cron = "0 * * * *"
timezone = "Europe/Berlin"
[run]
command = ["/bin/true"]
""",
    "daily": """description = "every night in New York"
[trigger]
cron = "30 3 * * *"
timezone = "America/New_York"
[run]
command = ["/bin/true"]
""",
    "printer": """description = "prints a line every 0.3 s"
[trigger]
cron = "0 0 1 1 *"
[run]
command = ["/bin/sh", "-c", "for i in $(seq 40); do echo line $i; sleep 0.3; done"]
""",
}


@dataclass
class World:
    store: StoreName
    folder: Path
    env: dict[str, str]
    daemon: Daemon
    runs: dict[str, str] = field(default_factory=dict)
    """schedule id -> its run's id."""

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return wfsched(self.store, *args, env=self.env)

    def read(self, ask: Any) -> Any:
        """`ask(store)` over a read-only connection in this process (a CLI
        process per poll would cost seconds on a loaded machine)."""
        from wfsched.store import open_location

        store = open_location(self.location(), create=False, read_only=True)
        assert store is not None
        try:
            return ask(store)
        finally:
            store.close()

    def location(self) -> Any:
        """The store's location as the CLI sees it with the world's environment."""
        from unittest import mock

        from wfsched.store.location import resolve_store

        with mock.patch.dict(os.environ, self.env):
            return resolve_store(str(self.store))

    def app(self, **config: Any) -> Any:
        """The web view's WSGI application over this store, opened read-only."""
        import socket

        from wfsched.store import open_location
        from wfsched.web.app import WebConfig
        from wfsched.web.site import make_app

        location = self.location()

        def open_store() -> Any:
            return open_location(location, create=False, read_only=True)

        return make_app(WebConfig(open_store=open_store, host=socket.gethostname(), **config))

    def state(self) -> tuple[Any, Any]:
        """Everything a write could change: the schedules and the runs."""
        from wfsched.api.reads import Reads
        from wfsched.api.run_ops import Runs

        return self.read(lambda store: (Reads(store).schedules(True), Runs(store).list(limit=100)))


def build_world(store: StoreName, folder: Path) -> World:
    env = {
        "XDG_STATE_HOME": str(folder / "xdg"),
        "WFSCHED_RUNTIME_DIR": str(folder / "runtime"),
    }
    values = {"@AGO5@": utc_ago(5), "@AGO120@": utc_ago(120), "@SECRET@": SECRET}
    values["@HOSTILE@"] = HOSTILE
    defs = folder / "defs"
    for name, body in DEFINITIONS.items():
        for mark, value in values.items():
            body = body.replace(mark, value)
        write_definition(defs, name, f'id = "{name}"\n' + body)
    applied = wfsched(store, "apply", str(defs), env=env)
    assert applied.returncode == 0, applied.stderr
    assert wfsched(store, "pause", "hourly", env=env).returncode == 0
    from unittest import mock

    with mock.patch.dict(os.environ, env):  # where the supervisor's log goes
        daemon = Daemon(store, env=env)
    # The world outlives one test: its fixture stops the supervisor, not the
    # per-test reaper of leaked supervisors.
    RUNNING.remove(daemon)
    daemon.wait_started()
    world = World(store, folder, env, daemon)

    from wfsched.api.reads import Reads
    from wfsched.api.run_ops import Runs

    def finished() -> bool:
        runs = world.read(lambda store: Runs(store).list(limit=100)[0])
        done = {run["schedule_id"]: run for run in runs if run["state"] in ("completed", "failed")}
        if {"ok", "bad"} <= set(done):
            world.runs = {name: run["run_id"] for name, run in done.items()}
            return True
        return False

    wait_for(finished, 30, "ok and bad to finish", explain=daemon.text)
    wait_for(
        lambda: any(
            row["state"] == "preflight-rejected"
            for row in world.read(lambda store: Reads(store).occurrences("rejected")[0])
        ),
        30,
        "the preflight rejection",
    )
    return world


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: str


class WsgiClient:
    """Calls a WSGI application as a server would (wsgiref's defaults)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def request(
        self, method: str, url: str, headers: dict[str, str] | None = None, body: bytes = b""
    ) -> Reply:
        import io

        path, _, query = url.partition("?")
        environ: dict[str, Any] = {
            "REQUEST_METHOD": method,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "wsgi.input": io.BytesIO(body),
            "CONTENT_LENGTH": str(len(body)),
        }
        for key, value in (headers or {}).items():
            environ["HTTP_" + key.upper().replace("-", "_")] = value
        setup_testing_defaults(environ)
        seen: dict[str, Any] = {}

        def start_response(status: str, response_headers: list[tuple[str, str]]) -> None:
            seen["status"] = int(status.split()[0])
            seen["headers"] = dict(response_headers)

        data = b"".join(self.app(environ, start_response))
        return Reply(seen["status"], seen["headers"], data.decode("utf-8"))

    def get(self, url: str, **headers: str) -> Reply:
        return self.request("GET", url, headers)


def visible_text(html: str) -> str:
    """The page's text without tags, for asserting what a reader sees."""
    import html as html_module

    return html_module.unescape(re.sub(r"<[^>]+>", " ", html))


class WebServer:
    """The real `wfsched web` in a subprocess, on a port the kernel chose."""

    def __init__(self, store: StoreName, *args: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "wfsched", "--store", str(store), "web", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self.url = ""
        self.log = ""

    def wait_serving(self, timeout: float = 20.0) -> str:
        assert self.proc.stderr is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            found = re.search(r"read-only at (http://\S+/)", line)
            if found:
                self.url = found.group(1).rstrip("/")
                return self.url
        self.stop()
        raise AssertionError(f"wfsched web did not start: {self.proc.returncode}")

    def fetch(self, path: str, method: str = "GET", headers: dict[str, str] | None = None) -> Reply:
        request = urllib.request.Request(self.url + path, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return Reply(response.status, _lower(response.headers), response.read().decode())
        except urllib.error.HTTPError as error:
            return Reply(error.code, _lower(error.headers), error.read().decode())

    def stop(self) -> int:
        """SIGTERM, then the exit status (its stderr's rest in `self.log`)."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            _, self.log = self.proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, self.log = self.proc.communicate()
        return self.proc.returncode


def _lower(headers: Any) -> dict[str, str]:
    """Header names in lower case (servers may write them in any case)."""
    return {name.lower(): value for name, value in headers.items()}


def page_urls(world: World) -> Iterable[str]:
    """Every page of the view, with the world's own ids."""
    yield from (
        "/",
        "/schedules",
        "/schedules?state=paused",
        "/schedules/ok",
        "/schedules/daily",
        "/runs",
        f"/runs/{world.runs['ok']}",
        f"/runs/{world.runs['ok']}/log?stream=stderr",
        "/timeline",
        "/calendar",
        "/hosts",
        "/status",
    )
