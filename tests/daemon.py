"""Run the real `wfsched supervise` in a subprocess, and wait on the store.

Every wait polls a deadline; nothing sleeps a fixed time and hopes.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


StoreName = Path | str
"""A SQLite store directory or a PostgreSQL URL."""


def log_dir_for(store: StoreName) -> Path:
    """Beside a SQLite store; for a PostgreSQL store, in the test's local state directory."""
    if isinstance(store, Path):
        return store.parent
    folder = Path(os.environ["XDG_STATE_HOME"])
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def wfsched(
    store: StoreName, *args: str, env: dict[str, str] | None = None, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wfsched", "--store", str(store), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        input=input,
        timeout=60,
    )


def wfsched_json(store: StoreName, *args: str) -> Any:
    result = wfsched(store, *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def wait_for(
    predicate: Callable[[], T],
    timeout: float = 15.0,
    what: str = "condition",
    explain: Callable[[], str] | None = None,
) -> T:
    """`explain` adds what the state was at the timeout, for a failure seen
    only under a loaded CI run."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = f"\n{explain()}" if explain is not None else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{detail}")
        time.sleep(0.05)


RUNNING: list[Daemon] = []
"""Every daemon a test started; conftest kills the ones a failing test left."""


class Daemon:
    """One supervisor process on `store`, its stderr in `log`."""

    def __init__(
        self,
        store: StoreName,
        *args: str,
        env: dict[str, str] | None = None,
        prefix: list[str] | None = None,
    ) -> None:
        """`prefix`: a command the supervisor runs under (e.g. `ip netns exec NS`)."""
        RUNNING.append(self)
        self.store = store
        self.log = log_dir_for(store) / f"supervisor-{time.monotonic_ns()}.log"
        self._log_handle = open(self.log, "w")  # noqa: SIM115 - closed in stop()/wait()
        self.proc = subprocess.Popen(
            [
                *(prefix or []),
                sys.executable,
                "-m",
                "wfsched",
                "--store",
                str(store),
                "supervise",
                "--poll-interval",
                "0.2",
                *args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=self._log_handle,
            env={**os.environ, **(env or {})},
        )

    def text(self) -> str:
        return self.log.read_text()

    def wait_started(self, timeout: float = 15.0) -> None:
        wait_for(
            lambda: " ready pid=" in self.text() or self.proc.poll() is not None,
            timeout,
            "the supervisor to start",
        )
        assert self.proc.poll() is None, self.text()

    def wait_exit(self, timeout: float = 30.0) -> int:
        try:
            code = self.proc.wait(timeout)
        finally:
            self._log_handle.close()
        return code

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.wait_exit(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.wait_exit()


def write_definition(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.toml"
    path.write_text(text)
    return path


def define(store: StoreName, tmp_path: Path, name: str, body: str) -> None:
    """`wfsched create` of schedule `name` (`body` is the definition after its
    id), written under `tmp_path/defs`; asserts that it was created."""
    path = write_definition(tmp_path / "defs", name, f'id = "{name}"\n{body}')
    result = wfsched(store, "create", str(path))
    assert result.returncode == 0, result.stderr


def utc_ago(seconds: float) -> str:
    """An RFC 3339 instant at least `seconds` ago (whole seconds).

    A one-shot at such an instant is due the moment it is created, so a test
    need not wait for a future instant, but only under `misfire = "latest"`:
    an instant at or before the moment the supervisor took ownership counts
    as missed while no supervisor ran, and `skip` (the default) drops it.
    """
    moment = math.floor(time.time() - seconds)
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(moment))


def utc_in(seconds: float) -> str:
    """An RFC 3339 instant at least `seconds` from now (whole seconds): for
    the tests that need the supervisor idle before an instant."""
    moment = math.ceil(time.time() + seconds)
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(moment))
