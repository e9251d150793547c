"""Layer 1: a resource fault is one episode, and log lines state committed facts.

Driven with the fake launcher and an injected clock: a store method raises
what the store layer raises for a full disk (StoreUnavailable), and the
tests check what the operator sees (one line when the episode starts, one
with its duration when it ends, the fault file `status` reads, STATUS=,
the config hook once) and what the supervisor does meanwhile (no
admission, no launch, probes with backoff, then resumes by itself).
"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.test_supervisor_loop import T0, Harness, iso
from wfsched.api.status import status
from wfsched.daemon.supervisor import Supervisor, SupervisorConfig
from wfsched.domain.tickerrors import FAULT_BACKOFF_FIRST, FAULT_BACKOFF_MAX
from wfsched.errors import ConflictError, StoreConnectionLost, StoreUnavailable
from wfsched.faults import InjectedFault
from wfsched.process.launcher import SpawnRefused, _LogCap
from wfsched.store import open_store
from wfsched.store.resource_faults import classify
from wfsched.store.rundirs import log_truncation
from wfsched.store.runtime_file import read_fault


class Notes:
    """Records what would go to the notify socket."""

    watchdog_interval = None

    def __init__(self) -> None:
        self.sent: list[str] = []

    def send(self, *fields: str) -> None:
        self.sent.extend(fields)

    def close(self) -> None:
        pass


def events(h: Harness, name: str) -> list[dict[str, object]]:
    return [fields for event, fields in h.events if event == name]


def supervisor(h: Harness, notes: Notes | None = None, **kwargs: Any) -> Supervisor:
    return Supervisor(
        h.store,
        SupervisorConfig(on_failure=("alert",)),
        h.control,
        clock=h.clock,
        log=lambda event, **fields: h.events.append((event, fields)),
        notifier=notes,  # type: ignore[arg-type]
        **kwargs,
    )


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    harness = Harness(tmp_path / "store")
    harness.define("a", cron="0 * * * *")
    return harness


def disk_full(h: Harness, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Every store write fails as on a full disk while the flag is up."""
    full = [True]
    real_atomic = h.store.atomic
    message = f"the store's filesystem is full: free space under {h.store.root}"

    def atomic() -> Any:
        if full[0]:
            raise StoreUnavailable("disk-full", message)
        return real_atomic()

    monkeypatch.setattr(h.store, "atomic", atomic)
    real_touch = h.store.touch_meta

    def touch_meta(**values: str) -> None:
        if full[0]:
            raise StoreUnavailable("disk-full", message)
        real_touch(**values)

    monkeypatch.setattr(h.store, "touch_meta", touch_meta)
    return full


def test_a_full_disk_is_one_episode_that_admits_nothing_and_ends_by_itself(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h.define("b", '[policy]\nlateness = "5s"\n', cron="0 * * * *")
    notes = Notes()
    h.supervisor = supervisor(h, notes)
    h.tick_at(T0 - 10)
    full = disk_full(h, monkeypatch)
    h.tick_at(T0 - 5)  # the liveness stamp fails: the episode opens
    for second in range(0, 30):
        h.tick_at(T0 + second)  # the instant falls due meanwhile
    assert h.run_ids() == [] and h.control.spawned[1:] == []
    (opened,) = events(h, "fault")
    assert opened["kind"] == "disk-full" and "free space under" in str(opened["reason"])
    assert events(h, "tick-error") == []
    assert any(note.startswith("STATUS=fault since") for note in notes.sent)
    published = read_fault(h.store.root, os.getpid())
    assert published is not None and published["kind"] == "disk-full"
    hooks = [spec for spec, _ in h.control.spawned if spec.run_id == "fault-notify"]
    assert len(hooks) == 1
    assert hooks[0].env["WFSCHED_FAULT_KIND"] == "disk-full"
    # Probes back off (0.5, 1, 2, ... up to the cap), not one write per tick.
    episode = h.supervisor.errors.episode
    assert episode is not None and 3 <= episode.probes <= 7
    assert episode.backoff <= FAULT_BACKOFF_MAX
    full[0] = False
    h.tick_at(T0 + 30 + FAULT_BACKOFF_MAX)
    (cleared,) = events(h, "fault-cleared")
    assert cleared["kind"] == "disk-full"
    assert cleared["duration"] == f"{35 + FAULT_BACKOFF_MAX:.1f}s"
    assert "STATUS=supervising" in notes.sent
    assert read_fault(h.store.root, os.getpid()) is None
    # The instant was due during the fault and is judged by its lateness (60s).
    assert h.run_ids() == ["run-000001"]
    assert h.history("b") == [(iso(T0), "skipped-misfire", "store-unavailable")]
    assert status(h.store, clock=h.clock)["errors"]["last_fault"]["kind"] == "disk-full"


def test_the_first_probe_waits_for_the_backoff(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    h.supervisor = supervisor(h)
    full = disk_full(h, monkeypatch)
    h.tick_at(T0 - 10)
    full[0] = False
    h.tick_at(T0 - 10 + FAULT_BACKOFF_FIRST / 2)
    assert events(h, "fault-cleared") == []
    h.tick_at(T0 - 10 + FAULT_BACKOFF_FIRST)
    assert len(events(h, "fault-cleared")) == 1


def connection_lost(h: Harness, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A networked store whose server went away: every statement fails as
    a lost connection until `down` is lowered; `ensure_connected` then
    reconnects once (or, with `taken`, finds another supervisor owning it)."""
    state: dict[str, Any] = {"down": True, "broken": True, "reconnects": 0, "taken": False}
    message = f"store {h.store.display}: connection lost: server closed the connection"
    real_atomic, real_touch = h.store.atomic, h.store.touch_meta

    def atomic() -> Any:
        if state["down"] or state["broken"]:
            raise StoreConnectionLost(message)
        return real_atomic()

    def touch_meta(**values: str) -> None:
        if state["down"] or state["broken"]:
            raise StoreConnectionLost(message)
        real_touch(**values)

    def ensure_connected() -> bool:
        if not state["broken"]:
            return False
        if state["down"]:
            raise StoreConnectionLost(f"cannot connect to store {h.store.display}: refused")
        if state["taken"]:
            raise ConflictError("another supervisor owns this store")
        state["broken"] = False
        state["reconnects"] += 1
        return True

    monkeypatch.setattr(h.store, "atomic", atomic)
    monkeypatch.setattr(h.store, "touch_meta", touch_meta)
    monkeypatch.setattr(h.store, "ensure_connected", ensure_connected)
    return state


def test_a_lost_connection_is_an_episode_that_reconnects_by_itself(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The PostgreSQL server restarted or out of reach: one `unreachable`
    episode (log, STATUS=, fault file, hook once), nothing admitted, probes
    that reconnect with backoff, then the instants due meanwhile judged by
    lateness (`store-unavailable`). It used to escape the tick."""
    h.define("b", '[policy]\nlateness = "5s"\n', cron="0 * * * *")
    notes = Notes()
    h.supervisor = supervisor(h, notes)
    h.tick_at(T0 - 10)
    state = connection_lost(h, monkeypatch)
    h.tick_at(T0 - 5)
    for second in range(0, 30):
        h.tick_at(T0 + second)
    assert h.run_ids() == []
    (opened,) = events(h, "fault")
    assert opened["kind"] == "unreachable" and "connection lost" in str(opened["reason"])
    assert events(h, "tick-error") == []
    assert any(note.startswith("STATUS=fault since") for note in notes.sent)
    published = read_fault(h.store.root, os.getpid())
    assert published is not None and published["kind"] == "unreachable"
    hooks = [spec for spec, _ in h.control.spawned if spec.run_id == "fault-notify"]
    assert [spec.env["WFSCHED_FAULT_KIND"] for spec in hooks] == ["unreachable"]
    episode = h.supervisor.errors.episode
    assert episode is not None and 3 <= episode.probes <= 7
    state["down"] = False
    h.tick_at(T0 + 30 + FAULT_BACKOFF_MAX)
    assert state["reconnects"] == 1
    (cleared,) = events(h, "fault-cleared")
    assert cleared["kind"] == "unreachable"
    assert read_fault(h.store.root, os.getpid()) is None
    assert h.run_ids() == ["run-000001"]
    assert h.history("b") == [(iso(T0), "skipped-misfire", "store-unavailable")]


def test_a_store_taken_while_the_connection_was_lost_stops_the_supervisor(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h.supervisor = supervisor(h)
    h.tick_at(T0 - 10)
    state = connection_lost(h, monkeypatch)
    h.tick_at(T0 - 5)
    state.update(down=False, taken=True)
    with pytest.raises(ConflictError):
        h.tick_at(T0 + FAULT_BACKOFF_MAX)
    assert h.run_ids() == []


def test_a_failing_watch_during_an_episode_is_contained_and_the_exit_recorded_once(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watch phase is the one that still runs while the disk is full
    (it takes the run keeper's exit reports, no store write). An error in
    it (a bug, a launcher client that raises) is counted under `watch`
    and logged like any phase's; the next tick takes the report, and the
    exit is recorded once the episode ends, exactly once."""
    h.supervisor = supervisor(h)
    h.tick_at(T0 - 10)
    h.tick_at(T0)
    assert h.run_ids() == ["run-000001"]
    full = disk_full(h, monkeypatch)
    h.tick_at(T0 + 1)  # the liveness stamp fails: the episode opens
    assert h.supervisor.errors.episode is not None
    h.control.finish("run-000001")
    real = h.control.drain_exits
    broken = [True]

    def drain_exits() -> list[int]:
        if broken[0]:
            broken[0] = False
            raise RuntimeError("the exit report could not be read")
        return real()

    monkeypatch.setattr(h.control, "drain_exits", drain_exits)
    h.tick_at(T0 + 2)
    assert h.supervisor.errors.counts == {"liveness": 1, "watch": 1}
    (error,) = events(h, "tick-error")
    assert error["phase"] == "watch" and error["reason"] == "the exit report could not be read"
    h.tick_at(T0 + 3)  # still full: the report is taken, nothing written
    assert h.supervisor.errors.counts["watch"] == 1
    assert h.runs.show("run-000001")["state"] == "running"
    full[0] = False
    h.tick_at(T0 + 3 + FAULT_BACKOFF_MAX)
    assert len(events(h, "fault-cleared")) == 1
    assert h.runs.show("run-000001")["state"] == "completed"
    assert len(events(h, "completed")) == 1
    assert h.run_ids() == ["run-000001"]


def test_admitted_is_logged_only_after_the_admission_commits(h: Harness) -> None:
    failed: list[str] = []

    def fault(point: str) -> None:
        if point == "before-admission-commit" and not failed:
            failed.append(point)
            raise InjectedFault("the commit fails")

    h.supervisor = supervisor(h, fault=fault)
    h.tick_at(T0 - 10)  # the startup tick
    h.tick_at(T0)
    assert failed and h.run_ids() == []
    assert events(h, "admitted") == []  # rolled back: never said
    h.tick_at(T0 + 1)
    assert h.run_ids() == ["run-000001"]
    assert [e["run"] for e in events(h, "admitted")] == ["run-000001"]


def test_a_database_locked_past_the_busy_timeout_is_said_in_words(tmp_path: Path) -> None:
    store = open_store(tmp_path / "store", busy_timeout=0.05)
    holder = sqlite3.connect(store.db_path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreUnavailable) as caught, store.atomic():
            store.set_meta(probe="1")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    message = str(caught.value)
    assert caught.value.kind == "locked"
    assert f"the database {store.db_path} is held locked by another process" in message
    assert "busy timeout (0.05s)" in message and f"fuser {store.db_path}" in message
    assert "OperationalError" not in message and "sqlite" not in message.lower()
    with store.atomic():  # usable again once the holder is gone
        store.set_meta(probe="1")


def test_a_log_over_max_log_bytes_keeps_its_tail_and_says_what_was_dropped(
    tmp_path: Path,
) -> None:
    log = tmp_path / "stdout.log"
    log.write_bytes(b"a" * 6000 + b"b" * 4000)
    cap = _LogCap(str(tmp_path), 4096)
    cap.check(0.0, final=True)
    text = log.read_bytes()
    first, rest = text.split(b"\n", 1)
    assert first == b"[wfsched: 7952 bytes of earlier output dropped (max_log_bytes = 4096)]"
    assert rest == b"b" * 2048  # the last half of the limit
    assert log_truncation(log) == 7952
    with open(log, "ab") as more:
        more.write(b"c" * 5000)
    cap.check(0.0, final=True)
    assert log_truncation(log) == 7952 + len(text) + 5000 - 2048 - len(first) - 1
    assert log.read_bytes().endswith(b"c" * 2048) and len(log.read_bytes()) <= 4096
    assert log_truncation(tmp_path / "stderr.log") is None  # never written, never cut


@pytest.mark.parametrize(
    ("error", "kind", "words"),
    [
        (OSError(errno.ENOSPC, "No space left on device", "/s/runs/x"), "disk-full", "free space"),
        (OSError(errno.EDQUOT, "Disk quota exceeded", "/s/runs/x"), "disk-full", "free space"),
        (OSError(errno.EROFS, "Read-only file system", "/s/x"), "read-only", "remount"),
        (OSError(errno.EIO, "Input/output error", "/s/x"), "io-error", "dmesg"),
        (OSError(errno.EMFILE, "Too many open files"), "fd-limit", "LimitNOFILE="),
        (SpawnRefused(errno.EAGAIN, "fork failed"), "process-limit", "TasksMax="),
        (BlockingIOError(errno.EAGAIN, "would block"), None, ""),
        (OSError(errno.ENOENT, "No such file or directory", "/s/x"), None, ""),
    ],
)
def test_system_errors_become_fault_kinds_in_words(
    error: OSError, kind: str | None, words: str
) -> None:
    fault = classify(error, Path("/s"))
    if kind is None:
        assert fault is None
        return
    assert fault is not None and fault.kind == kind
    assert words in str(fault) and "Error" not in str(fault)


def test_a_disk_full_episode_gives_the_log_back_on_its_way_out(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The supervisor's connection never checkpoints by itself and its
    checkpoint phase waits while an episode lasts: the probe that ends a
    disk-full episode folds the log and truncates it, or the log's own
    pages would keep the disk full after the operator freed it."""
    h.supervisor = supervisor(h)
    h.tick_at(T0 - 10)
    for number in range(300):  # a log of about 2.4 MB, not yet folded
        h.store.touch_meta(filler=str(number) * 500)
    wal = Path(f"{h.store.db_path}-wal")
    assert wal.stat().st_size > 1 << 20
    full = disk_full(h, monkeypatch)
    h.tick_at(T0 - 5)
    assert h.supervisor.errors.episode is not None
    full[0] = False
    h.tick_at(T0 - 5 + FAULT_BACKOFF_FIRST)
    assert len(events(h, "fault-cleared")) == 1
    assert wal.stat().st_size < 64 << 10  # the probe's stamp alone, after the truncation


def runs_spawned(h: Harness) -> list[str]:
    """The runs spawned (not the fault hook)."""
    return [spec.run_id for spec, _ in h.control.spawned if spec.run_id.startswith("run-")]


def test_a_spawn_refused_for_a_full_disk_waits_for_the_episode_and_then_starts(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run keeper could not write the attempt's started record (the
    disk filled between the mark's commit and the spawn): nothing started.
    The attempt waits, marked, and starts once the episode ends; it used to
    be failed (a write the same full disk refused, so the run stayed
    `running` with no exit, holding its execution slot)."""
    h.supervisor = supervisor(h)
    h.tick_at(T0 - 10)
    real_spawn = h.control.spawn
    refused: list[str] = []

    def spawn(spec: Any) -> Any:
        if not refused:
            refused.append(spec.run_id)
            raise SpawnRefused(
                errno.ENOSPC,
                f"cannot launch {spec.run_id}: cannot write the started record"
                " (No space left on device)",
            )
        return real_spawn(spec)

    monkeypatch.setattr(h.control, "spawn", spawn)
    h.tick_at(T0)
    assert refused == ["run-000001"]
    (opened,) = events(h, "fault")
    assert opened["kind"] == "disk-full" and opened["phase"] == "launch"
    assert h.runs.show("run-000001")["state"] == "running"
    assert events(h, "failed") == [] and runs_spawned(h) == []
    h.tick_at(T0 + FAULT_BACKOFF_FIRST)
    assert len(events(h, "fault-cleared")) == 1
    assert runs_spawned(h) == ["run-000001"]
    h.control.finish("run-000001", exit_code=0)
    h.tick_at(T0 + 2)
    shown = h.runs.show("run-000001")
    assert shown["state"] == "completed" and len(shown["attempts"]) == 1
    assert [e["run"] for e in events(h, "started")] == ["run-000001"]


def test_a_spawn_refused_for_a_full_disk_and_a_shutdown_record_it_never_started(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopped while such an attempt waits: the drain records it failed as
    never started once the store takes the write, not as the launcher's."""
    h.supervisor = supervisor(h)
    h.tick_at(T0 - 10)

    def spawn(spec: Any) -> Any:
        raise SpawnRefused(errno.ENOSPC, f"cannot launch {spec.run_id}: no space")

    monkeypatch.setattr(h.control, "spawn", spawn)
    h.tick_at(T0)
    assert h.runs.show("run-000001")["state"] == "running"
    h.clock.set(T0 + FAULT_BACKOFF_FIRST)
    h.supervisor.drain()
    shown = h.runs.show("run-000001")
    assert shown["state"] == "failed" and len(shown["attempts"]) == 1
    assert shown["reason"] == (
        "not started: the store's disk refused its launch until the supervisor shut down"
    )
    assert runs_spawned(h) == []
