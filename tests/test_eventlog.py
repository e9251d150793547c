"""The journal is a side path: a broken stderr never stops the supervisor."""

from __future__ import annotations

import io
from pathlib import Path

from tests.test_supervisor_loop import T0, Harness, iso
from wfsched.daemon.eventlog import EventLog


class BrokenPipe(io.StringIO):
    """A stream whose reader went away, as stderr is when journald restarts."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_line_that_cannot_be_written_is_dropped_and_counted() -> None:
    log = EventLog("human", stream=BrokenPipe(), clock=lambda: 0.0)
    log("admitted", schedule="a")
    log("started", run="run-000001")
    assert log.dropped == 2


def test_a_closed_stream_is_dropped_too() -> None:
    stream = io.StringIO()
    stream.close()
    log = EventLog("json", stream=stream, clock=lambda: 0.0)
    log("admitted", schedule="a")
    assert log.dropped == 1


def test_the_supervisor_admits_and_launches_with_a_broken_journal(tmp_path: Path) -> None:
    h = Harness(tmp_path / "store")
    h.define("a", cron="* * * * *")
    broken = EventLog("human", stream=BrokenPipe(), clock=h.clock)
    h.supervisor.log = broken
    h.tick_at(T0)
    assert h.history("a") == [(iso(T0), "running", None)]
    assert len(h.control.spawned) == 1
    assert broken.dropped >= 2  # admitted and started were both attempted
