"""Shared fixtures: every test gets its own store, and the CLI runs in-process.

The store is found through one seam (`--store` / `WFSCHED_STORE` / XDG), so an
autouse fixture pointing it at `tmp_path` keeps every test hermetic. CLI tests
call `run_cli(...)`, which drives the real `wfsched` group through click's
runner with a settable clock injected as `CliState.clock` (no environment
flag, no patching of `time`).
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
import textwrap
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.pgserver import PostgresServer, find_bindir

if TYPE_CHECKING:
    from wfsched.store import Store

CLI_NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC).timestamp()
"""The injected wall clock's default: 2026-06-01T12:00:00Z."""


class SettableClock:
    """A wall clock the test moves by hand."""

    def __init__(self, start: float = CLI_NOW) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture(autouse=True)
def store_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh, not yet created store directory; WFSCHED_STORE points at it."""
    path = tmp_path / "wfsched-store"
    monkeypatch.setenv("WFSCHED_STORE", str(path))
    # The default location must never be the real ~/.local/state/wfsched.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    # A supervisor's fault file (wfsched.store.runtime_file) never lands in the host's /run.
    monkeypatch.setenv("WFSCHED_RUNTIME_DIR", str(tmp_path / "runtime"))
    for name in ("VISUAL", "EDITOR", "_WFSCHED_COMPLETE", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)
    return path


@pytest.fixture
def clock() -> SettableClock:
    return SettableClock()


CliRun = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run_cli(clock: SettableClock) -> CliRun:
    """`run_cli(*args, input=None)` -> (exit_code, stdout, stderr).

    Goes through `WfschedGroup.main`, the same error edge the console script
    uses, so exit codes and the one-line stderr are the real ones.
    """
    from click.testing import CliRunner
    from rich.console import Console

    from wfsched.cli import CliState
    from wfsched.cli.main import cli

    def run(*args: str, input: str | None = None) -> tuple[int, str, str]:
        state = CliState(
            clock=clock,
            console=Console(width=200, color_system=None, highlight=False, soft_wrap=False),
        )
        result = CliRunner().invoke(
            cli, list(args), input=input, obj=state, prog_name="wfsched", catch_exceptions=False
        )
        return result.exit_code, result.stdout, result.stderr

    return run


@pytest.fixture
def write_toml(tmp_path: Path) -> Callable[..., Path]:
    """`write_toml(name, text, folder="defs")` -> the written file (text dedented)."""

    def write(name: str, text: str, folder: str = "defs") -> Path:
        directory = tmp_path / folder
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / name
        path.write_text(textwrap.dedent(text))
        return path

    return write


def definition_text(
    schedule_id: str,
    cron: str = "0 * * * *",
    timezone: str = "UTC",
    extra: str = "",
    command: str = '["/bin/true"]',
) -> str:
    """A small valid definition; `extra` is appended (more tables, bindings)."""
    return (
        f'id = "{schedule_id}"\n\n[trigger]\ncron = "{cron}"\ntimezone = "{timezone}"\n\n'
        f"[run]\ncommand = {command}\n" + textwrap.dedent(extra)
    )


@pytest.fixture
def make_definition(write_toml: Callable[..., Path]) -> Callable[..., Path]:
    """`make_definition(id, folder="defs", **fields)` writes `<id>.toml`."""

    def make(schedule_id: str, folder: str = "defs", **fields: str) -> Path:
        return write_toml(f"{schedule_id}.toml", definition_text(schedule_id, **fields), folder)

    return make


@pytest.fixture
def fake_editor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Path]:
    """`fake_editor(body)` installs a Python script as $VISUAL and $EDITOR.

    `body` runs with `path` (the file being edited) and `text` (its content)
    bound; if it sets `save = True` the (possibly changed) `text` is written
    back with a later mtime, as a real editor's save would be.
    """

    def install(body: str) -> Path:
        script = tmp_path / f"editor-{len(list(tmp_path.glob('editor-*')))}.py"
        script.write_text(
            f"#!{sys.executable}\n"
            "import os, subprocess, sys, pathlib\n"
            "path = pathlib.Path(sys.argv[1])\n"
            "text = path.read_text()\n"
            "save = False\n" + textwrap.dedent(body) + "\n"
            "if save:\n"
            "    path.write_text(text)\n"
            "    mtime = os.stat(path).st_mtime + 10\n"
            "    os.utime(path, (mtime, mtime))\n"
        )
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
        monkeypatch.setenv("VISUAL", str(script))
        monkeypatch.setenv("EDITOR", str(script))
        return script

    return install


def wfsched_executable() -> str:
    """The installed `wfsched` console script of this interpreter."""
    beside = Path(sys.executable).with_name("wfsched")
    if beside.exists():
        return str(beside)
    found = shutil.which("wfsched", path=os.environ.get("PATH"))
    if found is None:
        pytest.skip("the wfsched console script is not installed")
    return found


@pytest.fixture(autouse=True)
def _no_leaked_supervisors() -> Iterator[None]:
    """A test that fails before stopping its daemon must not leave it running."""
    from tests.daemon import RUNNING

    yield
    while RUNNING:
        daemon = RUNNING.pop()
        if daemon.proc.poll() is None:
            daemon.kill()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """One real PostgreSQL server for the whole session (see tests/pgserver.py).

    Missing server binaries or driver skip the PostgreSQL tests with the
    reason, except on CI, where they fail: CI must test both stores.
    """
    bindir = find_bindir()
    missing = None
    if bindir is None:
        missing = "no PostgreSQL server binaries (initdb, pg_ctl) found"
    else:
        try:
            import psycopg  # noqa: F401
        except ImportError:
            missing = "psycopg is not installed (pip install '.[postgres]')"
    if missing is not None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"{missing}; CI must run the PostgreSQL tests", pytrace=False)
        pytest.skip(missing)
    assert bindir is not None
    server = PostgresServer(bindir)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server: PostgresServer) -> Iterator[str]:
    """The URL of a fresh, empty database on the session's server."""
    url = pg_server.create_database()
    yield url
    pg_server.drop_database(url)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_kind(request: pytest.FixtureRequest) -> str:
    """The backend a store-touching test runs on: every such test runs on both."""
    return str(request.param)


@pytest.fixture
def make_store(store_kind: str, request: pytest.FixtureRequest) -> Callable[[Path], Store]:
    """`make_store(root)` opens (creating) the test's store of `store_kind`: SQLite in
    `root`, or PostgreSQL in a fresh database with `root` as its local directory
    (run directories). Opening again reaches the same store."""
    from wfsched.store import SQLiteStore

    if store_kind == "sqlite":
        return SQLiteStore
    from dataclasses import replace

    from wfsched.store.location import resolve_store
    from wfsched.store.postgres import PostgresStore

    location = resolve_store(request.getfixturevalue("pg_url"))

    def open_postgres(root: Path) -> Store:
        root.mkdir(parents=True, exist_ok=True)
        return PostgresStore(replace(location, local_dir=root))

    return open_postgres
