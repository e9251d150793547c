"""Layer 3: SIGKILL the real supervisor at each persistence boundary, restart
it, and check that nothing was doubled, lost or replayed.

The supervisor kills itself at a named point (WFSCHED_FAULT=point[:N], the
test-only hook in wfsched.faults). Jobs append a line to a file per start, so
a double launch cannot hide. Schedules are one-shots already past when
created (due at once, no waiting for a future instant), with misfire =
"latest" so the instant is still owed after the restart and every boundary
ends in exactly one run, except where the launch became ambiguous: that run
must be failed with the external-effects disclosure and never retried.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.daemon import (
    Daemon,
    StoreName,
    define,
    utc_ago,
    wait_for,
    wfsched,
    wfsched_json,
    write_definition,
)

FINAL = ("completed", "failed")


def define_one_shot(store: StoreName, tmp_path: Path, ledger: Path, body: str = "") -> None:
    text = (
        f'id = "job"\n[trigger]\nat = "{utc_ago(1)}"\n[run]\n'
        f'command = ["sh", "-c", "echo $WFSCHED_RUN_ID $WFSCHED_ATTEMPT >> {ledger}; '
        f'sleep 0.3; echo done >> {ledger}"]\n{body}'
        '[policy]\nmisfire = "latest"\nlateness = "1h"\n'
    )
    path = write_definition(tmp_path / "defs", "job", text)
    assert wfsched(store, "create", str(path)).returncode == 0


def define_ledger_jobs(
    store: StoreName, tmp_path: Path, ledger: Path, count: int, then: str
) -> None:
    """One-shots job0..job<count-1>, due a second ago, each appending its run
    and attempt to `ledger` (one line per start), then running `then`."""
    for index in range(count):
        text = (
            f'id = "job{index}"\n[trigger]\nat = "{utc_ago(1)}"\n[run]\n'
            f'command = ["sh", "-c", "echo $WFSCHED_RUN_ID $WFSCHED_ATTEMPT >> {ledger}; '
            f'{then}"]\n[policy]\nmisfire = "latest"\nlateness = "1h"\n'
        )
        path = write_definition(tmp_path / "defs", f"job{index}", text)
        assert wfsched(store, "create", str(path)).returncode == 0


# What the store shows right after the kill: proof the crash hit its boundary.
# A scheduled run's directories are made, and its first attempt marked, inside
# the admission's transaction: before its commit nothing of the run is in the
# store (its directories are left behind, see LEFT_BEHIND); after it, the run
# is admitted and marked at once.
AFTER_CRASH = {
    "before-admission-commit": [],
    "after-admission-commit": [("running", 1, None, True)],
    "after-run-dir": [],
    "after-attempt-mark": [("running", 1, None, True)],
    "after-spawn": [("running", 1, True, True)],
    "before-ingest": [("running", 1, True, True)],
    "after-ingest": [("completed", 1, True, True)],
}


def query(store: StoreName, sql: str) -> list[tuple[Any, ...]]:
    """Rows straight from the database of either backend (a fresh connection)."""
    if isinstance(store, str):
        import psycopg

        with psycopg.connect(store) as conn:
            return conn.execute(sql).fetchall()  # type: ignore[arg-type]
    db = sqlite3.connect(store / "wfsched.db")
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def runs_root(store: StoreName) -> Path:
    """Where this host keeps run directories (a PostgreSQL store's are local)."""
    if isinstance(store, str):
        from wfsched.store.location import resolve_store

        return resolve_store(store).local_dir / "runs"
    return store / "runs"


def crashed_state(store: StoreName) -> list[tuple[str, int, bool | None, bool]]:
    rows = query(
        store,
        "SELECT r.seq, r.state, r.attempt, a.shim_pid FROM runs r"
        " LEFT JOIN attempts a ON a.run_seq = r.seq AND a.attempt = r.attempt",
    )
    return [
        (
            state,
            attempt,
            None if pid is None else True,
            (runs_root(store) / f"run-{seq:06d}" / "input.json").exists(),
        )
        for seq, state, attempt, pid in rows
    ]


# Kills inside the admission's transaction: the run directory of the run it
# would have committed is left behind, for a seq the store never knew.
LEFT_BEHIND = ("after-run-dir", "before-admission-commit")


def crash_then_recover(
    store: StoreName, point: str, expected: list[tuple[str, int, bool | None, bool]] | None = None
) -> Daemon:
    crashing = Daemon(store, env={"WFSCHED_FAULT": point})
    assert crashing.wait_exit(timeout=30) == -9, crashing.text()
    if expected is not None:
        assert crashed_state(store) == expected
        if point in LEFT_BEHIND:
            assert (runs_root(store) / "run-000001" / "input.json").exists()
    restarted = Daemon(store)
    restarted.wait_started()
    return restarted


def runs(store: StoreName) -> list[dict]:
    return wfsched_json(store, "runs")["items"]


def assert_store_invariants(store: StoreName) -> None:
    twice = query(
        store,
        "SELECT schedule_id, scheduled_at, COUNT(*) FROM occurrences WHERE state = 'admitted'"
        " GROUP BY 1, 2 HAVING COUNT(*) > 1",
    )
    assert twice == []
    orphans = query(
        store,
        "SELECT r.seq FROM runs r LEFT JOIN occurrences o ON o.run_seq = r.seq"
        " WHERE r.kind = 'scheduled' AND o.seq IS NULL",
    )
    assert orphans == []
    behind = query(
        store,
        "SELECT s.id FROM schedules s JOIN occurrences o ON o.schedule_id = s.id"
        " WHERE o.summary = 0 AND o.scheduled_at > s.consumed_through",
    )
    assert behind == []
    audit = wfsched(store, "audit", "--json")
    assert audit.returncode == 0, audit.stdout + audit.stderr


@pytest.mark.parametrize(
    ("point", "launched", "outcome"),
    [
        ("before-admission-commit", 1, "completed"),
        ("after-admission-commit", 0, "failed"),
        ("after-run-dir", 1, "completed"),
        ("after-attempt-mark", 0, "failed"),
        ("after-spawn", 1, "completed"),
        ("before-ingest", 1, "completed"),
        ("after-ingest", 1, "completed"),
    ],
)
def test_kill_at_each_admission_and_exit_boundary(
    tmp_path: Path, point: str, launched: int, outcome: str
) -> None:
    check_kill_at_boundary(tmp_path / "store", tmp_path, point, launched, outcome)


@pytest.mark.parametrize(
    ("point", "launched", "outcome"),
    [
        ("after-admission-commit", 0, "failed"),
        ("after-attempt-mark", 0, "failed"),
        ("before-ingest", 1, "completed"),
    ],
)
def test_kill_at_boundaries_on_postgresql(
    tmp_path: Path, pg_url: str, point: str, launched: int, outcome: str
) -> None:
    """The same SIGKILLs on a PostgreSQL store: the database's keys, the store's
    transactions and recovery give the same single run."""
    check_kill_at_boundary(pg_url, tmp_path, point, launched, outcome)


@pytest.mark.parametrize(
    ("point", "abandoned"),
    [
        ("before-admission-commit:2", False),
        ("after-admission-commit:2", True),
        ("after-spawn:1", False),
    ],
)
def test_a_kill_between_the_chunks_of_a_burst_doubles_and_loses_nothing(
    tmp_path: Path, point: str, abandoned: bool
) -> None:
    """20 one-shots due at once: the supervisor dies before the second chunk's
    commit (the first chunk launched, the second rolled back), right after
    it (the second admitted and marked, not spawned), or after the first
    chunk's launch. After the restart every schedule has one run: each ran
    once, except the marked chunk whose spawn the crash cut off: its runs
    are failed as abandoned, never run."""
    store, ledger, count = tmp_path / "store", tmp_path / "ledger", 20
    at = utc_ago(1)
    for number in range(count):
        write_definition(
            tmp_path / "defs",
            f"b{number:02d}",
            f'id = "b{number:02d}"\n[trigger]\nat = "{at}"\n[run]\n'
            f'command = ["sh", "-c", "echo $WFSCHED_SCHEDULE_ID >> {ledger}"]\n'
            '[policy]\nmisfire = "latest"\nlateness = "1h"\n',
        )
    assert wfsched(store, "apply", str(tmp_path / "defs")).returncode == 0
    daemon = crash_then_recover(store, point)
    try:
        wait_for(
            lambda: len([r for r in runs(store) if r["state"] in FINAL]) == count,
            timeout=60,
            what="every run to finish",
        )
    finally:
        daemon.stop()
    items = runs(store)
    assert sorted(r["schedule_id"] for r in items) == [f"b{number:02d}" for number in range(count)]
    completed = sorted(r["schedule_id"] for r in items if r["state"] == "completed")
    assert sorted(ledger.read_text().split()) == completed
    failed = [r for r in items if r["state"] == "failed"]
    assert bool(failed) == abandoned, failed
    assert all("external effects may already have happened" in r["reason"] for r in failed)
    assert_store_invariants(store)


def check_kill_at_boundary(
    store: StoreName, tmp_path: Path, point: str, launched: int, outcome: str
) -> None:
    ledger = tmp_path / "ledger"
    define_one_shot(store, tmp_path, ledger)
    daemon = crash_then_recover(store, point, AFTER_CRASH[point])
    try:
        items = wait_for(
            lambda: [r for r in runs(store) if r["state"] in FINAL], timeout=20, what="a final run"
        )
        if launched:
            wait_for(lambda: "done" in ledger.read_text(), what="the job to finish")
    finally:
        daemon.stop()
    assert len(runs(store)) == 1, "an occurrence produced two runs"
    run = items[0]
    assert run["state"] == outcome, run
    starts = [
        line
        for line in (ledger.read_text().splitlines() if ledger.exists() else [])
        if line != "done"
    ]
    assert starts == ["run-000001 1"] * launched, "the job was launched twice (or lost)"
    if outcome == "failed":
        assert "external effects may already have happened" in run["reason"]
    history = wfsched_json(store, "occurrences", "job")["items"]
    assert [item["state"] for item in history] == [outcome]
    assert_store_invariants(store)


@pytest.mark.parametrize(
    ("point", "crashed", "launched", "outcome"),
    [
        ("after-run-dir", ("admitted", 0, None, True), 1, "completed"),
        ("after-attempt-mark", ("running", 1, None, True), 0, "failed"),
    ],
)
def test_kill_around_the_mark_of_a_triggered_run(
    tmp_path: Path,
    point: str,
    crashed: tuple[str, int, bool | None, bool],
    launched: int,
    outcome: str,
) -> None:
    """A manual run is admitted by its request's own transaction, then
    prepared and marked by a second one (the first attempt of a scheduled
    run shares its admission's): a kill between the two leaves it admitted
    with its directory, launched once by the restart; a kill after the mark
    fails it as abandoned, never run."""
    store, ledger = tmp_path / "store", tmp_path / "ledger"
    text = (
        'id = "job"\n[trigger]\ncron = "0 0 1 1 *"\n[run]\n'
        f'command = ["sh", "-c", "echo $WFSCHED_RUN_ID >> {ledger}"]\n'
    )
    assert wfsched(store, "create", str(write_definition(tmp_path, "job", text))).returncode == 0
    crashing = Daemon(store, env={"WFSCHED_FAULT": point})
    crashing.wait_started()
    assert wfsched(store, "trigger", "job").returncode == 0
    assert crashing.wait_exit(timeout=30) == -9, crashing.text()
    assert crashed_state(store) == [crashed]
    daemon = Daemon(store)
    daemon.wait_started()
    try:
        [run] = wait_for(
            lambda: [r for r in runs(store) if r["state"] in FINAL], timeout=20, what="a final run"
        )
    finally:
        daemon.stop()
    assert run["state"] == outcome, run
    assert (ledger.read_text().split() if ledger.exists() else []) == ["run-000001"] * launched
    if outcome == "failed":
        assert "external effects may already have happened" in run["reason"]
    assert len(runs(store)) == 1


@pytest.mark.parametrize(
    ("point", "second_attempt_ran", "outcome"),
    [
        ("before-resume-mark", True, "completed"),
        ("after-resume-mark", False, "failed"),
        ("after-spawn", True, "completed"),
        ("before-ingest", True, "completed"),
        ("after-ingest", True, "completed"),
    ],
)
def test_kill_around_resume(
    tmp_path: Path, point: str, second_attempt_ran: bool, outcome: str
) -> None:
    store = tmp_path / "store"
    ledger = tmp_path / "ledger"
    text = (
        f'id = "job"\n[trigger]\nat = "{utc_ago(1)}"\n[run]\n'
        f'command = ["sh", "-c", "echo $WFSCHED_ATTEMPT >> {ledger}; '
        '[ $WFSCHED_ATTEMPT = 1 ] && exit 75; exit 0"]\ninterrupt_exit_code = 75\n'
        '[policy]\nmisfire = "latest"\nlateness = "1h"\n'
    )
    assert wfsched(store, "create", str(write_definition(tmp_path, "job", text))).returncode == 0
    first = Daemon(store)
    first.wait_started()
    wait_for(lambda: [r for r in runs(store) if r["state"] == "interrupted"], what="interruption")
    assert first.stop() == 0
    assert wfsched(store, "runs", "resume", "run-000001").returncode == 0
    if point == "before-resume-mark":
        # Not marked, request still pending: the restart performs the resume.
        expected = [("interrupted", 1, True, True)]
    else:
        shim = None if point == "after-resume-mark" else True
        state = "completed" if point == "after-ingest" else "running"
        expected = [(state, 2, shim, True)]
    daemon = crash_then_recover(store, point, expected)
    try:
        wait_for(lambda: runs(store)[0]["state"] in FINAL, timeout=20, what="a final state")
    finally:
        daemon.stop()
    run = runs(store)[0]
    assert run["state"] == outcome, run
    assert ledger.read_text().split() == (["1", "2"] if second_attempt_ran else ["1"])
    assert [a["attempt"] for a in run["attempts"]] == [1, 2]
    if outcome == "failed":
        assert "external effects" in run["reason"]
    assert len(runs(store)) == 1
    assert_store_invariants(store)


def test_repeated_crashes_never_move_the_watermark_back(tmp_path: Path) -> None:
    store = tmp_path / "store"
    ledger = tmp_path / "ledger"
    define_one_shot(store, tmp_path, ledger)
    instant = wfsched_json(store, "get", "job")["next_due"]
    watermarks = []
    # Twice rolled back inside the admission (the seq is taken again), then
    # killed once the run ended, before its exit was recorded.
    for point in ("before-admission-commit", "after-run-dir", "before-ingest"):
        crashing = Daemon(store, env={"WFSCHED_FAULT": point})
        assert crashing.wait_exit(timeout=30) == -9, crashing.text()
        db = sqlite3.connect(store / "wfsched.db")
        watermarks.append(db.execute("SELECT consumed_through FROM schedules").fetchone()[0])
        db.close()
    daemon = Daemon(store)
    daemon.wait_started()
    try:
        wait_for(lambda: [r for r in runs(store) if r["state"] in FINAL], timeout=20, what="done")
    finally:
        daemon.stop()
    due = int(datetime.fromisoformat(instant.replace("Z", "+00:00")).timestamp())
    assert watermarks == sorted(watermarks) and watermarks[0] < due <= watermarks[-1]
    assert [r["state"] for r in runs(store)] == ["completed"]
    assert ledger.read_text().splitlines()[0] == "run-000001 1"
    assert_store_invariants(store)


def test_a_failing_notification_never_stops_the_real_supervisor(tmp_path: Path) -> None:
    """The reported crash: an error while notifying a failure, after its exit
    was committed (WFSCHED_FAULT=before-notify:raise, a stand-in for a store
    error). The daemon logs and counts it, fires the hook on its next tick
    (once), and keeps running runs; status shows the error."""
    store = tmp_path / "store"
    done = tmp_path / "good-ran"
    hooked = tmp_path / "hooked"
    defs = tmp_path / "defs"
    write_definition(
        defs,
        "bad",
        'id = "bad"\n[trigger]\ncron = "0 0 1 1 *"\n[run]\ncommand = ["false"]\n'
        f'[notify]\non_failure = ["sh", "-c", "echo $WFSCHED_RUN_ID >> {hooked}"]\n',
    )
    write_definition(
        defs,
        "good",
        f'id = "good"\n[trigger]\ncron = "0 0 1 1 *"\n[run]\ncommand = ["touch", "{done}"]\n',
    )
    assert wfsched(store, "apply", str(defs)).returncode == 0
    daemon = Daemon(store, env={"WFSCHED_FAULT": "before-notify:raise"})
    daemon.wait_started()
    try:
        assert wfsched(store, "trigger", "bad").returncode == 0
        wait_for(lambda: " notified " in daemon.text(), what="the hook, on the retry")
        assert wfsched(store, "trigger", "good").returncode == 0
        wait_for(lambda: [r for r in runs(store) if r["state"] == "completed"], what="good run")
        assert done.exists() and daemon.proc.poll() is None
        errors = wfsched_json(store, "status")["errors"]
        human = wfsched(store, "status").stdout
    finally:
        code = daemon.stop()
    assert code == 0, daemon.text()
    assert errors["by_phase"] == {"notification": 1} and errors["total"] == 1
    assert errors["last"]["error"] == "injected fault at before-notify"
    assert (errors["last"]["phase"], errors["last"]["run"]) == ("notification", "run-000001")
    assert "1 (notification 1)" in human
    log = daemon.text()
    assert "tick-error phase=notification run=run-000001 schedule=bad" in log
    assert "Traceback" not in log
    assert hooked.read_text().split() == ["run-000001"]
    assert [(r["run_id"], r["state"]) for r in runs(store)] == [
        ("run-000002", "completed"),
        ("run-000001", "failed"),
    ]


def test_a_failed_ingestion_in_the_real_supervisor_records_the_exit_once(
    tmp_path: Path,
) -> None:
    """An error after the exit record was read (before-ingest:raise): the
    run is recorded on the next tick, once, and the daemon runs on."""
    store = tmp_path / "store"
    ledger = tmp_path / "ledger"
    define_one_shot(store, tmp_path, ledger)
    daemon = Daemon(store, env={"WFSCHED_FAULT": "before-ingest:raise"})
    daemon.wait_started()
    try:
        wait_for(lambda: [r for r in runs(store) if r["state"] in FINAL], what="a final run")
        errors = wfsched_json(store, "status")["errors"]
    finally:
        assert daemon.stop() == 0, daemon.text()
    assert errors["by_phase"] == {"ingestion": 1}
    assert "tick-error phase=ingestion runs=run-000001" in daemon.text()
    assert [r["state"] for r in runs(store)] == ["completed"]
    assert ledger.read_text().split() == ["run-000001", "1", "done"]
    assert_store_invariants(store)


@pytest.mark.parametrize("point", ["after-attempt-mark", "after-spawn"])
def test_an_error_after_the_attempt_mark_in_the_real_supervisor_settles_the_run(
    tmp_path: Path, point: str
) -> None:
    """An error right after the attempt mark committed (`:raise`): the run is
    settled as a lost launch, never left `running` with nothing watching it.
    Before the spawn it is recorded failed as never started (the job never
    ran); after it, the running shim is kept and its exit recorded."""
    store = tmp_path / "store"
    ledger = tmp_path / "ledger"
    define_one_shot(store, tmp_path, ledger)
    daemon = Daemon(store, env={"WFSCHED_FAULT": f"{point}:raise"})
    daemon.wait_started()
    try:
        wait_for(lambda: [r for r in runs(store) if r["state"] in FINAL], what="a final run")
    finally:
        assert daemon.stop() == 0, daemon.text()
    [run] = runs(store)
    if point == "after-attempt-mark":
        assert run["state"] == "failed" and "not started" in run["reason"], run
        assert "injected fault" in run["reason"]
        assert not ledger.exists()
    else:
        assert run["state"] == "completed", run
        assert ledger.read_text().split() == ["run-000001", "1", "done"]
    assert "tick-error phase=launch" in daemon.text()
    assert_store_invariants(store)


@pytest.mark.parametrize("mode", ["kill", "raise"])
def test_kill_or_error_while_the_admission_waits_for_its_instant(tmp_path: Path, mode: str) -> None:
    """A future instant: the pre-wake decides its admission, writes the run's
    directory and holds the transaction open until the instant
    (`admission-held`). Killed there, nothing is committed (the directory is
    left behind) and the restart runs the instant once; an error there is
    rolled back and contained, and the instant's own tick admits it once."""
    store, ledger = tmp_path / "store", tmp_path / "ledger"
    define(
        store,
        tmp_path,
        "job",
        f'[trigger]\nat = "{utc_ago(-4)}"\n[run]\n'
        f'command = ["sh", "-c", "echo $WFSCHED_RUN_ID $WFSCHED_ATTEMPT >> {ledger}"]\n'
        '[policy]\nmisfire = "latest"\nlateness = "1h"\n',
    )
    suffix = ":raise" if mode == "raise" else ""
    daemon = Daemon(store, env={"WFSCHED_FAULT": f"admission-held{suffix}"})
    if mode == "kill":
        assert daemon.wait_exit(timeout=30) == -9, daemon.text()
        assert crashed_state(store) == []
        assert (runs_root(store) / "run-000001" / "input.json").exists()
        daemon = Daemon(store)
    daemon.wait_started()
    try:
        wait_for(lambda: [r for r in runs(store) if r["state"] in FINAL], what="a final run")
        wait_for(lambda: ledger.exists(), what="the job's line")
    finally:
        assert daemon.stop() == 0, daemon.text()
    [run] = runs(store)
    assert run["state"] == "completed", run
    assert ledger.read_text().split() == ["run-000001", "1"]
    assert [item["state"] for item in wfsched_json(store, "occurrences", "job")["items"]] == [
        "completed"
    ]
    if mode == "raise":
        assert "tick-error phase=admission" in daemon.text()
    assert_store_invariants(store)


# -- the run keeper killed ----------------------------------------------------------------

# Where the keeper dies, what the one run becomes: (state, how many times the
# job started, a phrase of its reason). Before its started record nothing ran
# and the launch is retried on a new keeper; from the record on, the run lost
# its parent: failed as abandoned (its leftovers terminated), never re-run;
# once its exit record is on disk, it is recorded as the job ended.
KEEPER_KILLED = {
    "keeper-before-started": ("completed", [1], None),
    "keeper-after-started": ("failed", [0], "external effects may already have happened"),
    "keeper-after-fork": ("failed", [0, 1], "external effects may already have happened"),
    "keeper-after-spawn": ("failed", [0, 1], "external effects may already have happened"),
    "keeper-after-reply": ("failed", [0, 1], "external effects may already have happened"),
    "keeper-before-exit-record": ("failed", [1], "external effects may already have happened"),
    "keeper-exit-record-renamed": ("completed", [1], None),
    "keeper-after-exit-record": ("completed", [1], None),
}


@pytest.mark.parametrize("point", list(KEEPER_KILLED))
def test_keeper_killed_at_each_boundary_never_runs_the_job_twice(
    tmp_path: Path, point: str
) -> None:
    check_keeper_killed(tmp_path / "store", tmp_path, point)


@pytest.mark.parametrize(
    "point", ["keeper-before-started", "keeper-after-spawn", "keeper-after-exit-record"]
)
def test_keeper_killed_at_boundaries_on_postgresql(tmp_path: Path, pg_url: str, point: str) -> None:
    """The keeper is per host whatever the store; what its death leaves is
    settled and recorded through the PostgreSQL store the same way."""
    check_keeper_killed(pg_url, tmp_path, point)


def check_keeper_killed(store: StoreName, tmp_path: Path, point: str) -> None:
    ledger = tmp_path / "ledger"
    define_one_shot(store, tmp_path, ledger)
    daemon = Daemon(store, env={"WFSCHED_FAULT": point})
    try:
        daemon.wait_started()
        wait_for(lambda: [r for r in runs(store) if r["state"] in FINAL], timeout=20, what="end")
        assert daemon.proc.poll() is None, daemon.text()
        assert "launcher-lost" in daemon.text()
    finally:
        assert daemon.stop() == 0, daemon.text()
    state, started, reason = KEEPER_KILLED[point]
    [run] = runs(store)
    assert run["state"] == state, run
    lines = ledger.read_text().splitlines() if ledger.exists() else []
    assert lines.count("run-000001 1") in started, lines
    if reason is not None:
        assert reason in run["reason"], run
    if point == "keeper-before-started":
        assert "launch-retried" in daemon.text()
    assert_store_invariants(store)


def test_a_keeper_killed_before_naming_its_command_leaves_no_job_running(tmp_path: Path) -> None:
    """The keeper dies right after the spawn, its started record still naming
    itself: the command is found by its fingerprint and terminated before its
    run is recorded (it used to run on, unwatched, its overlap slot freed)."""
    store = tmp_path / "store"
    pidfile = tmp_path / "job.pid"
    define(
        store,
        tmp_path,
        "job",
        f'[trigger]\nat = "{utc_ago(1)}"\n[run]\n'
        f'command = ["sh", "-c", "echo $$ > {pidfile}; exec sleep 60"]\nkill_grace = "1s"\n'
        '[policy]\nmisfire = "latest"\nlateness = "1h"\n',
    )
    daemon = Daemon(store, env={"WFSCHED_FAULT": "keeper-after-fork"})
    try:
        daemon.wait_started()
        [run] = wait_for(
            lambda: [r for r in runs(store) if r["state"] in FINAL], timeout=40, what="the end"
        )
    finally:
        assert daemon.stop() == 0, daemon.text()
    if pidfile.exists():  # it got as far as its first line
        job = int(pidfile.read_text())
        assert _state(job) in ("", "Z", "X"), "recorded while its job still ran"
    assert run["state"] == "failed" and "external effects" in run["reason"], run
    assert "launcher-lost" in daemon.text() and "terminating" in daemon.text(), daemon.text()


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


@pytest.mark.parametrize(
    ("point", "recorded"),
    [
        ("keeper-before-exit-record", 0),
        ("keeper-exit-record-renamed", 1),
        ("keeper-after-exit-record", 2),
    ],
)
def test_keeper_killed_inside_a_batch_of_exit_records_loses_or_doubles_nothing(
    tmp_path: Path, point: str, recorded: int
) -> None:
    """Two runs end while their keeper is stopped, so it reaps both in one
    turn and writes their exit records as one batch; it is killed before
    the batch, between its two renames, or after it. A run whose record
    was renamed into place is recorded once as it ended; the other is
    failed as abandoned with the disclosure; neither is ever started again."""
    store = tmp_path / "store"
    ledger = tmp_path / "ledger"
    go = tmp_path / "go"
    define_ledger_jobs(store, tmp_path, ledger, 2, f"while [ ! -e {go} ]; do sleep 0.02; done")
    daemon = Daemon(store, env={"WFSCHED_FAULT": point})
    try:
        daemon.wait_started()
        wait_for(
            lambda: ledger.exists() and len(ledger.read_text().splitlines()) == 2,
            timeout=20,
            what="both jobs running",
        )
        [keeper] = [pid for pid in _children(daemon.proc.pid) if _comm(pid) == "wfsched-keeper"]
        jobs = _children(keeper)
        assert len(jobs) == 2, jobs
        os.kill(keeper, signal.SIGSTOP)
        try:
            go.touch()
            # Both commands end while their parent cannot reap them.
            wait_for(lambda: all(_state(job) == "Z" for job in jobs), timeout=10, what="zombies")
        finally:
            os.kill(keeper, signal.SIGCONT)
        wait_for(
            lambda: len(items := all_runs(store)) == 2 and all(r["state"] in FINAL for r in items),
            timeout=30,
            what="both runs to end",
        )
        assert daemon.proc.poll() is None, daemon.text()
        assert "launcher-lost" in daemon.text()
    finally:
        assert daemon.stop() == 0, daemon.text()
    lines = ledger.read_text().splitlines()
    assert sorted(lines) == ["run-000001 1", "run-000002 1"], lines  # none started twice
    states = sorted(r["state"] for r in all_runs(store))
    assert states == ["completed"] * recorded + ["failed"] * (2 - recorded), states
    for run in all_runs(store):
        if run["state"] == "failed":
            assert "external effects may already have happened" in run["reason"], run
        assert len(wfsched_json(store, "runs", "show", run["run_id"])["attempts"]) == 1, run
    assert_store_invariants(store)


@pytest.mark.parametrize("point", ["keeper-before-started:3", "keeper-after-reply:3"])
def test_keeper_killed_inside_a_pipelined_chunk_never_runs_an_attempt_twice(
    tmp_path: Path, point: str
) -> None:
    """Six runs due at once go to the keeper as pipelined spawn requests; it
    dies at its third: the two it started are abandoned (at most one start
    each); the requests behind it on the wire are asked again of the next
    keeper, which starts each exactly once (the third too, when the first
    keeper died before its started record)."""
    store = tmp_path / "store"
    ledger = tmp_path / "ledger"
    define_ledger_jobs(store, tmp_path, ledger, 6, "sleep 0.3")
    daemon = Daemon(store, env={"WFSCHED_FAULT": point})
    try:
        daemon.wait_started()
        wait_for(
            lambda: len(items := all_runs(store)) == 6 and all(r["state"] in FINAL for r in items),
            timeout=30,
            what="every run to end",
        )
        assert daemon.proc.poll() is None, daemon.text()
    finally:
        assert daemon.stop() == 0, daemon.text()
    assert "launcher-lost" in daemon.text()
    lines = ledger.read_text().splitlines() if ledger.exists() else []
    assert len(lines) == len(set(lines)), f"an attempt ran twice: {lines}"
    states = sorted(r["state"] for r in all_runs(store))
    abandoned = 2 if point.startswith("keeper-before-started") else 3
    assert states == ["completed"] * (6 - abandoned) + ["failed"] * abandoned, states
    for run in all_runs(store):
        ran = f"{run['run_id']} 1" in lines
        if run["state"] == "completed":
            assert ran, run
        else:
            assert "external effects may already have happened" in run["reason"], run
    assert_store_invariants(store)


def test_keeper_killed_repeatedly_during_a_burst_never_runs_an_attempt_twice(
    tmp_path: Path,
) -> None:
    from wfsched.api.run_ops import Runs
    from wfsched.store import SQLiteStore

    store = tmp_path / "store"
    ledger = tmp_path / "ledger"
    text = (
        'id = "led"\n[trigger]\ncron = "0 0 1 1 *"\n[run]\n'
        f'command = ["sh", "-c", "echo $WFSCHED_RUN_ID $WFSCHED_ATTEMPT $$ >> {ledger}; sleep 1"]\n'
        '[policy]\noverlap = "parallel"\nmax_active_runs = 1000\n'
    )
    assert wfsched(store, "create", str(write_definition(tmp_path, "led", text))).returncode == 0
    daemon = Daemon(store, "--max-concurrent-runs", "8")
    handle = SQLiteStore(store)
    try:
        daemon.wait_started()
        requests = Runs(handle)
        # A trigger every 50 ms while the keeper is SIGKILLed once it is up
        # (it names itself wfsched-keeper), so launches are in flight at the
        # kills; a replacement may still die while it starts.
        kills, triggered = 0, 0
        # 2 s of triggers, longer if a loaded machine was slow to bring a
        # replacement up: the test needs launches in flight at two kills.
        burst_began = time.monotonic()
        while time.monotonic() < burst_began + 2.0 or (
            kills < 2 and time.monotonic() < burst_began + 10.0
        ):
            requests.request_trigger("led")
            triggered += 1
            for pid in _children(daemon.proc.pid):
                if _comm(pid) == "wfsched-keeper":
                    os.kill(pid, signal.SIGKILL)
                    kills += 1
            time.sleep(0.05)
        assert daemon.proc.poll() is None, daemon.text()
        try:
            wait_for(
                lambda: (
                    len(items := all_runs(store)) == triggered
                    and all(r["state"] in FINAL for r in items)
                ),
                timeout=60,
                what="every run to end",
            )
        except AssertionError as exc:
            left = [(r["run_id"], r["state"]) for r in all_runs(store) if r["state"] not in FINAL]
            raise AssertionError(
                f"{exc}; triggered {triggered}, unfinished {left}\n{daemon.text()}"
            ) from None
    finally:
        handle.close()
        assert daemon.stop() == 0, daemon.text()
    assert "launcher-lost" in daemon.text()
    assert kills >= 2
    lines = [line.split() for line in ledger.read_text().splitlines()]
    started = [(run, attempt) for run, attempt, _pid in lines]
    assert len(started) == len(set(started)), "an attempt ran twice"
    for run in all_runs(store):
        ran = (run["run_id"], "1") in started
        if run["state"] == "completed":
            assert ran, run
        else:
            # Its keeper died under it: abandoned (it may have run, once),
            # or nothing of it started (and it never ran).
            assert run["state"] == "failed", run
            if run["reason"].startswith("not started"):
                assert not ran, run
            else:
                assert "external effects may already have happened" in run["reason"], run
    assert_store_invariants(store)


def test_a_supervisor_killed_while_the_keeper_lives_re_attaches_and_records_exits(
    tmp_path: Path,
) -> None:
    """SIGKILL the supervisor with two runs in flight: one ends while no
    supervisor runs (its keeper records it), the other still runs at the
    restart (re-adopted through the same keeper, its end reported by it)."""
    store = tmp_path / "store"
    ledger = tmp_path / "ledger"
    go = tmp_path / "go"
    for name, wait in (("quick", ""), ("slow", f"while [ ! -e {go} ]; do sleep 0.02; done; ")):
        text = (
            f'id = "{name}"\n[trigger]\nat = "{utc_ago(1)}"\n[run]\n'
            f'command = ["sh", "-c", "echo $WFSCHED_RUN_ID >> {ledger}; {wait}echo {name} >> '
            f'{ledger}"]\n[policy]\nmisfire = "latest"\nlateness = "1h"\n'
        )
        path = write_definition(tmp_path / "defs", name, text)
        assert wfsched(store, "create", str(path)).returncode == 0
    crashing = Daemon(store, env={"WFSCHED_FAULT": "after-spawn"})
    assert crashing.wait_exit(timeout=30) == -9, crashing.text()
    wait_for(lambda: "quick" in ledger.read_text(), what="the quick run to end")
    keepers = _keepers(store)
    assert len(keepers) == 1  # it outlived the supervisor
    restarted = Daemon(store)
    try:
        restarted.wait_started()
        wait_for(lambda: "re-adopted" in restarted.text(), what="the slow run's re-adoption")
        assert _keepers(store) == keepers
        go.touch()
        wait_for(
            lambda: all(r["state"] in FINAL for r in runs(store)) and len(runs(store)) == 2,
            timeout=20,
            what="both runs to end",
        )
    finally:
        assert restarted.stop() == 0, restarted.text()
    assert sorted(r["state"] for r in runs(store)) == ["completed", "completed"]
    assert "recovered" in restarted.text()  # the quick one, from its record
    lines = ledger.read_text().splitlines()
    assert sorted(lines) == sorted(["run-000001", "run-000002", "quick", "slow"])
    assert_store_invariants(store)


def _keepers(store: Path) -> list[int]:
    """Pids of the run keepers serving `store` (its directory is in their argv)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and _comm(int(name)) == "wfsched-keeper":
            with contextlib.suppress(OSError):
                if os.fsencode(store) in Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0"):
                    found.append(int(name))
    return found


def all_runs(store: Path) -> list[dict]:
    return wfsched_json(store, "runs", "--limit", "100")["items"]


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as comm:
            return comm.read().strip()
    except OSError:
        return ""


def _children(pid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as stat:
                if int(stat.read().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(name))
        except (OSError, ValueError, IndexError):
            continue
    return found
