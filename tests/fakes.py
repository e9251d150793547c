"""Test doubles for the supervisor: a fake process control and a settable clock.

The fake control never starts a process; tests decide when a "shim" ends by
writing the same exit record the real shim writes, so the supervisor's
ingestion path is the production one.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import sqlite3
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wfsched.process import launcher
from wfsched.process.launcher import ExitRecord, LaunchSpec, ShimHandle


class Clock:
    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def set(self, value: float) -> None:
        self.now = value

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class FakeControl:
    spawned: list[tuple[LaunchSpec, ShimHandle]] = field(default_factory=list)
    encoded: list[list[LaunchSpec]] = field(default_factory=list)
    """Each `encode_ahead` call's specs (a held chunk's, before its commit)."""
    cancelled: list[int] = field(default_factory=list)
    alive_pids: set[int] = field(default_factory=set)
    sessions: set[int] = field(default_factory=set)
    """Shims (by pid) whose session still has processes (a command left behind)."""
    session_signals: list[tuple[int, int]] = field(default_factory=list)
    _exited: list[int] = field(default_factory=list)
    _pids: itertools.count[int] = field(default_factory=lambda: itertools.count(40000))
    clock: Clock | None = None
    """When set, exit records carry its time (as a real shim's would)."""

    def __post_init__(self) -> None:
        self._read, self._write = os.pipe()

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def spawn(self, spec: LaunchSpec) -> ShimHandle:
        handle = ShimHandle(next(self._pids), 1)
        self.spawned.append((spec, handle))
        self.alive_pids.add(handle.pid)
        return handle

    def fileno(self) -> int:
        return self._read

    def warm(self) -> None:
        pass

    def encode_ahead(self, specs: Sequence[LaunchSpec]) -> None:
        self.encoded.append(list(specs))

    def probe_fork(self) -> None:
        pass

    def drain_exits(self) -> list[int]:
        exited, self._exited = self._exited, []
        return exited

    def alive(self, handle: ShimHandle) -> bool:
        return handle.pid in self.alive_pids

    def cancel(self, handle: ShimHandle, reason: str | None = None) -> bool:
        self.cancelled.append(handle.pid)
        return handle.pid in self.alive_pids

    def read_exit(self, record_dir: str) -> ExitRecord | None:
        return launcher.read_exit_record(record_dir)

    def read_shim(self, record_dir: str) -> ShimHandle | None:
        return launcher.read_shim_record(record_dir)

    def launch_locked(self, record_dir: str) -> bool:
        return any(
            spec.record_dir == record_dir and handle.pid in self.alive_pids
            for spec, handle in self.spawned
        )

    def signal_session(self, shim: ShimHandle, signum: int) -> bool:
        self.session_signals.append((shim.pid, signum))
        return shim.pid in self.sessions

    # -- test controls -----------------------------------------------------------

    def spec(self, run_id: str, attempt: int | None = None) -> tuple[LaunchSpec, ShimHandle]:
        matches = [
            pair
            for pair in self.spawned
            if pair[0].run_id == run_id and (attempt is None or pair[0].attempt == attempt)
        ]
        assert matches, f"{run_id} was never spawned"
        return matches[-1]

    def finish(
        self,
        run_id: str,
        exit_code: int | None = 0,
        outcome: str = "exited",
        reason: str | None = None,
        attempt: int | None = None,
        record_attempt: int | None = None,
        report: bool = True,
    ) -> None:
        """End the run's shim as the real one does: exit record, then exit."""
        spec, handle = self.spec(run_id, attempt)
        write_exit_record(
            Path(spec.record_dir),
            record_attempt if record_attempt is not None else spec.attempt,
            outcome,
            exit_code,
            reason,
            at=self.clock() if self.clock else 2.0,
        )
        self.alive_pids.discard(handle.pid)
        if report:
            self._exited.append(handle.pid)

    def die(self, run_id: str) -> None:
        """The shim vanished without writing a record."""
        _, handle = self.spec(run_id)
        self.alive_pids.discard(handle.pid)
        self._exited.append(handle.pid)


def write_exit_record(
    attempt_dir: Path,
    attempt: int,
    outcome: str = "exited",
    exit_code: int | None = 0,
    reason: str | None = None,
    at: float = 2.0,
) -> None:
    attempt_dir.mkdir(parents=True, exist_ok=True)
    (attempt_dir / "exit.json").write_text(
        json.dumps(
            {
                "attempt": attempt,
                "outcome": outcome,
                "exit_code": exit_code,
                "signal": None,
                "reason": reason,
                "started_at": at - 1.0,
                "finished_at": at,
            }
        )
    )


def in_the_database_file(store_root: Path, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    """The rows `sql` finds in a SQLite store's database file alone, without
    its write-ahead log: what checkpoints have folded into it so far (none
    when not even the schema has been folded in yet)."""
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch, "file-only.db")
        copy.write_bytes((store_root / "wfsched.db").read_bytes())
        with contextlib.closing(sqlite3.connect(copy)) as db:
            try:
                return db.execute(sql, params).fetchall()
            except sqlite3.OperationalError:  # no such table: nothing folded in yet
                return []
