"""High availability on a PostgreSQL store: one leader, standbys, fencing.

Real PostgreSQL, real supervisors; each "host" has its own local state
directory (its own runs root). Leases are 1 s (renewed every 0.2 s) so every
takeover is quick. After each failure the invariants hold: no occurrence
admitted twice, no run launched twice, every instant with a ledger row,
`audit` clean.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.daemon import Daemon, utc_in, wait_for, wfsched, wfsched_json, write_definition
from tests.ha import (
    LEASE,
    Host,
    check_invariants,
    leader_pid,
    leader_then_standby,
    lease,
    ledger,
    wait_leader,
)
from tests.pgserver import SUPERUSER, PostgresServer, dbname, find_bindir
from wfsched.errors import LeaseLost
from wfsched.store.location import resolve_store
from wfsched.store.postgres import LOCK_CLASS, WRITE_LOCK, PostgresStore


def one_shot(folder: Path, name: str, at: str, marker: Path, **policy: str) -> Path:
    extra = "".join(f'{key} = "{value}"\n' for key, value in policy.items())
    return write_definition(
        folder,
        name,
        f'id = "{name}"\n[trigger]\nat = "{at}"\n'
        f'[run]\ncommand = ["sh", "-c", "echo $WFSCHED_RUN_ID >> {marker}"]\n'
        + (f"[policy]\n{extra}" if extra else ""),
    )


def completed(url: str) -> list[str]:
    runs = wfsched_json(url, "runs")["items"]
    return [run["schedule_id"] for run in runs if run["state"] == "completed"]


# -- the lease and its fence, on the store itself ---------------------------------------


def test_one_lease_an_epoch_per_takeover_and_a_fenced_transaction_rolls_back(
    pg_url: str, tmp_path: Path
) -> None:
    """Two channels: the first takes epoch 1, the second nothing while it is
    live; once it expires the second takes epoch 2. A transaction fenced with
    epoch 1 then rolls back (LeaseLost) and writes nothing; the old holder's
    renewal is refused (it is deposed, never revived)."""
    location = resolve_store(pg_url)
    store = PostgresStore(location)
    first = store.lease_channel("a", 1)
    second = store.lease_channel("b", 2)
    try:
        assert first.take(0.5) == 1
        assert second.take(0.5) is None
        assert first.renew(1, 0.5)
        store.fence(1)
        with store.atomic():
            store.set_meta(note="as leader of epoch 1")
        wait_for(lambda: second.take(5) == 2, what="the lease to expire and be taken")
        with pytest.raises(LeaseLost, match="epoch 1"), store.atomic():
            store.set_meta(note="after the takeover")
        store.fence(None)
        assert store.get_meta("note") == "as leader of epoch 1"
        assert not first.renew(1, 5)
        row = store.leader_lease()
        assert row is not None and (row.epoch, row.host, row.pid, row.live) == (2, "b", 2, True)
        second.release(2)
        assert first.take(5) == 3
    finally:
        first.close()
        second.close()
        store.close()


def test_a_takeover_waits_for_a_leader_transaction_in_flight(pg_url: str) -> None:
    """The fence holds the lease row until COMMIT: a standby's takeover of an
    expired lease cannot land between a leader's check and its commit."""
    import threading

    store = PostgresStore(resolve_store(pg_url))
    leader = store.lease_channel("a", 1)
    standby = store.lease_channel("b", 2)
    taken: list[int | None] = []
    try:
        assert leader.take(0.5) == 1
        store.fence(1)
        with pytest.raises(LeaseLost), store.atomic():
            store.set_meta(note="x")
            store._check_fence(1)  # the check the commit makes, taken early
            wait_for(lambda: not lease(pg_url)[2], what="the lease to expire")  # type: ignore[index]
            thread = threading.Thread(target=lambda: taken.append(standby.take(5)))
            thread.start()
            thread.join(0.5)
            assert thread.is_alive(), "the takeover did not wait for the leader's commit"
        # The commit's own check found the lease expired: rolled back.
        thread.join(10)
        assert taken == [2]
        store.fence(None)
        assert store.get_meta("note") is None
    finally:
        leader.close()
        standby.close()
        store.close()


# -- supervisors -----------------------------------------------------------------------


def test_one_leader_and_a_standby_that_takes_over_after_sigkill(
    pg_url: str, tmp_path: Path
) -> None:
    """Two hosts: exactly one leads; SIGKILL it and the standby leads within
    lease + 1 s, with a higher epoch, and runs the one-shots due during the
    handover exactly once (judged by lateness: they are not dropped as
    missed at startup)."""
    a, b = Host(tmp_path, "a"), Host(tmp_path, "b")
    marker = tmp_path / "ran"
    first, second = leader_then_standby(pg_url, a, b)
    try:
        epoch_before = lease(pg_url)[0]  # type: ignore[index]
        assert leader_pid(pg_url) == first.proc.pid
        defs = tmp_path / "defs"
        for index in range(4):
            path = one_shot(defs, f"o{index}", utc_in(2 + index), marker)
            assert wfsched(pg_url, "create", str(path)).returncode == 0
        wait_for(lambda: "o0" in completed(pg_url), what="the first one-shot")
        # The standby admitted, launched and answered nothing while it stood by.
        assert " admitted " not in second.text() and " started run=" not in second.text()
        first.proc.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        first.wait_exit()
        wait_leader(pg_url, [second])
        took = time.monotonic() - killed
        assert took <= 1 + 1 + 1.5, f"takeover took {took:.2f}s"  # lease + 1 s, + load
        assert lease(pg_url)[0] > epoch_before  # type: ignore[index]
        # A one-shot host a had started when it was killed (a loaded host
        # sees o0 complete late) is recorded by host a's agent once it is
        # back: restarted, it stands by and records what its keeper kept.
        first = a.supervise(pg_url)
        first.wait_started()
        wait_for(lambda: len(completed(pg_url)) == 4, timeout=20, what="every one-shot")
        assert "handover=True" in second.text()
        assert " leading " not in first.text()
    finally:
        assert second.stop() == 0
        first.kill()
    lines = marker.read_text().splitlines()
    assert len(lines) == 4 == len(set(lines))
    rows = ledger(pg_url)
    assert sorted(row[0] for row in rows if row[2] == "admitted") == ["o0", "o1", "o2", "o3"]
    check_invariants(pg_url, [marker], [a, b])


def test_a_sigtermed_leader_hands_over_within_a_second_and_drains_its_runs(
    pg_url: str, tmp_path: Path
) -> None:
    """SIGTERM: the leader releases the lease first (the standby leads well
    within a second, woken by the release), then waits for its running run,
    which completes and is recorded by it as a standby.

    The run waits for a gate the test opens after the handover, so a busy
    host cannot end it before the test has seen it running."""
    a, b = Host(tmp_path, "a"), Host(tmp_path, "b")
    out = tmp_path / "slow"
    gate = tmp_path / "gate"
    first, second = leader_then_standby(pg_url, a, b, "--lease", "5s", "--lease-renew", "1s")
    try:
        slow = write_definition(
            tmp_path / "defs",
            "slow",
            f'id = "slow"\n[trigger]\nat = "{utc_in(1)}"\n'
            f'[run]\ncommand = ["sh", "-c", '
            f'"while [ ! -e {gate} ]; do sleep 0.05; done; echo done > {out}"]\n',
        )
        assert wfsched(pg_url, "create", str(slow)).returncode == 0
        wait_for(
            lambda: [r for r in wfsched_json(pg_url, "runs")["items"] if r["state"] == "running"],
            what="the slow run to start",
        )
        first.proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        wait_leader(pg_url, [second], timeout=10)
        took = time.monotonic() - sent
        # Well inside the 5 s lease: the release handed over, not its expiry
        # (the bound leaves room for the status polls on a busy host).
        assert took < 3.0, f"handover after SIGTERM took {took:.2f}s"
        assert first.proc.poll() is None, "the old leader must wait for its run"
        gate.touch()
        assert first.wait_exit(30) == 0
    finally:
        assert second.stop() == 0
        first.kill()
    assert out.read_text() == "done\n"
    runs = wfsched_json(pg_url, "runs")["items"]
    assert [r["state"] for r in runs] == ["completed"]
    check_invariants(pg_url, None, [a, b])


def test_a_leader_stopped_past_its_lease_commits_nothing_after_it_wakes(
    pg_url: str, tmp_path: Path
) -> None:
    """SIGSTOP the leader past its lease; the standby takes over; a one-shot
    falls due while the old leader is still stopped, and SIGCONT lands right
    after: the old leader admits nothing (it finds its lease lapsed by its own
    clock, or the fence refuses its commit), the instant is admitted once, by
    the new leader, and the old one logs that it stands by."""
    a, b = Host(tmp_path, "a"), Host(tmp_path, "b")
    marker = tmp_path / "ran"
    first, second = leader_then_standby(pg_url, a, b)
    try:
        # Stopped before the one-shot exists: however slow `create` is on a
        # busy host, the old leader cannot admit it before it is stopped.
        first.proc.send_signal(signal.SIGSTOP)
        path = one_shot(tmp_path / "defs", "wake", utc_in(3), marker)
        assert wfsched(pg_url, "create", str(path)).returncode == 0
        wait_leader(pg_url, [second])
        wait_for(lambda: "wake" in completed(pg_url), what="the new leader's run")
        # Due the moment the old leader wakes: it must not admit it.
        path = one_shot(tmp_path / "defs", "woken", utc_in(1), marker)
        assert wfsched(pg_url, "create", str(path)).returncode == 0
        first.proc.send_signal(signal.SIGCONT)
        wait_for(lambda: " standby " in first.text(), what="the old leader to stand by")
        wait_for(lambda: "woken" in completed(pg_url), what="the new leader's second run")
        assert " admitted " not in first.text()
        assert "tick-error" not in first.text()
        assert leader_pid(pg_url) == second.proc.pid
    finally:
        first.proc.send_signal(signal.SIGCONT)
        assert first.stop() == 0
        assert second.stop() == 0
    assert marker.read_text().count("\n") == 2
    admitted = [row[0] for row in ledger(pg_url) if row[2] == "admitted"]
    assert sorted(admitted) == ["wake", "woken"]
    check_invariants(pg_url, [marker], [a, b])


def test_status_shows_the_leader_the_standbys_and_the_hosts(pg_url: str, tmp_path: Path) -> None:
    a, b = Host(tmp_path, "a"), Host(tmp_path, "b")
    first, second = leader_then_standby(pg_url, a, b)
    try:
        shown = wait_for(
            lambda: (lambda s: s if len(s["standbys"]) == 1 else None)(
                wfsched_json(pg_url, "status")
            ),
            what="a standby in status",
        )
        assert shown["store_kind"] == "postgresql"
        leader = shown["leader"]
        assert leader["pid"] == first.proc.pid and leader["epoch"] >= 1
        assert leader["lease_expires_at"]
        assert shown["standbys"][0]["pid"] == second.proc.pid
        text = wfsched(pg_url, "status")
        assert f"pid {first.proc.pid}" in text.stdout, text.stdout
        assert json.dumps(shown)
    finally:
        assert second.stop() == 0
        assert first.stop() == 0


def test_a_sigkilled_leader_shows_as_silent_not_as_leader_or_live_standby(
    pg_url: str, tmp_path: Path
) -> None:
    """SIGKILL the standby: at once (two renew intervals) it is `silent
    since ...`, not a live standby, while host_timeout is far off. SIGKILL
    the leader: `status` says its lease is held by a silent host and when it
    expires, and `status --check` fails on it. A long lease keeps that
    window wide under any load; a takeover is another test's."""
    slow = ("--lease", "30", "--lease-renew", "0.25", "--host-timeout", "120")
    a, b = Host(tmp_path, "a"), Host(tmp_path, "b")
    first, second = leader_then_standby(pg_url, a, b, *slow)
    try:
        wait_for(lambda: len(wfsched_json(pg_url, "status")["standbys"]) == 1, what="b standing by")
        assert wfsched(pg_url, "status", "--check").returncode == 0
        second.proc.send_signal(signal.SIGKILL)
        second.wait_exit()

        def host(name: str, role: str) -> dict | None:
            shown = wfsched_json(pg_url, "status")
            rows = [h for h in shown["hosts"] if h["host"] == name and h["role"] == role]
            return shown if rows else None

        shown = wait_for(lambda: host("b", "silent"), what="the dead standby shown silent")
        (dead,) = [h for h in shown["hosts"] if h["host"] == "b"]
        assert dead["silent_since"] == dead["last_seen"] and shown["standbys"] == []
        assert any(w.startswith("host b: silent since ") for w in shown["warnings"])
        assert f"host b: silent since {dead['last_seen']}" in wfsched(pg_url, "status").stdout
        assert wfsched(pg_url, "status", "--check").returncode == 0  # a leader still leads

        first.proc.send_signal(signal.SIGKILL)
        first.wait_exit()

        def silent_leader() -> dict | None:
            shown = wfsched_json(pg_url, "status")
            leader = shown["leader"]
            return shown if leader is not None and leader["silent_since"] else None

        shown = wait_for(silent_leader, what="the leader shown silent")
        leader = shown["leader"]
        assert leader["host"] == "a" and leader["pid"] == first.proc.pid
        assert 0 <= leader["lease_expires_in"] <= 30
        assert [h["role"] for h in shown["hosts"] if h["host"] == "a"] == ["leader"]
        human = wfsched(pg_url, "status", env={"COLUMNS": "250"}).stdout
        assert "): lease held by a silent host, expires in " in human, human
        assert "host a: silent since " in human and "(holds the lease)" in human, human
        # Both killed: no supervisor holds the store, which --check says
        # first (leader-silent, with a standby alive, is pinned in
        # tests/test_first_week.py over the status object).
        checked = wfsched(pg_url, "status", "--check")
        assert checked.returncode == 1, checked.stdout
        assert checked.stdout.startswith("no-supervisor: "), checked.stdout
    finally:
        first.kill()
        second.kill()


def test_a_lost_host_has_its_runs_abandoned_and_a_late_exit_is_only_disclosed(
    pg_url: str, tmp_path: Path
) -> None:
    """The leader (host a) runs a job, then is stopped longer than
    host_timeout: host b takes over and fails the run as abandoned naming
    host a, never re-running it. When a wakes, the job's exit it records is
    appended to the run's reason and the run stays failed."""
    a, b = Host(tmp_path, "a"), Host(tmp_path, "b")
    out = tmp_path / "job"
    first, second = leader_then_standby(pg_url, a, b, "--host-timeout", "2")
    try:
        job = write_definition(
            tmp_path / "defs",
            "job",
            f'id = "job"\n[trigger]\nat = "{utc_in(1)}"\n'
            f'[run]\ncommand = ["sh", "-c", "sleep 5; echo ran >> {out}"]\n',
        )
        assert wfsched(pg_url, "create", str(job)).returncode == 0
        wait_for(
            lambda: [r for r in wfsched_json(pg_url, "runs")["items"] if r["state"] == "running"],
            what="the job to start on host a",
        )
        first.proc.send_signal(signal.SIGSTOP)
        wait_leader(pg_url, [second])
        failed = wait_for(
            lambda: [r for r in wfsched_json(pg_url, "runs")["items"] if r["state"] == "failed"],
            timeout=20,
            what="the run of the lost host to be abandoned",
        )
        assert failed[0]["host"] == "a"
        assert failed[0]["reason"].startswith("abandoned: its host a has sent no heartbeat")
        assert "external effects" in failed[0]["reason"]
        lost = wfsched_json(pg_url, "status")
        assert [h["role"] for h in lost["hosts"] if h["host"] == "a"] == ["lost"]
        assert any("host a: no heartbeat" in w for w in lost["warnings"])
        first.proc.send_signal(signal.SIGCONT)
        wait_for(lambda: out.exists(), timeout=20, what="the job to finish on host a")
        run = wait_for(
            lambda: (lambda r: r if "reported later" in (r["reason"] or "") else None)(
                wfsched_json(pg_url, "runs")["items"][0]
            ),
            timeout=20,
            what="the late exit to be disclosed",
        )
        assert run["state"] == "failed"
        assert "its host reported later that it exited with status 0" in run["reason"]
    finally:
        first.proc.send_signal(signal.SIGCONT)
        assert first.stop() == 0
        assert second.stop() == 0
    assert out.read_text() == "ran\n"
    runs = wfsched_json(pg_url, "runs")["items"]
    assert len(runs) == 1
    check_invariants(pg_url, None, [a, b])


# -- failures with a standby waiting ---------------------------------------------------

KILL_POINTS = (
    "before-admission-commit",
    "after-admission-commit",
    "after-run-dir",
    "after-attempt-mark",
    "after-spawn",
    "before-ingest",
    "after-ingest",
)


@pytest.mark.parametrize("point", KILL_POINTS)
def test_sigkill_of_the_leader_at_a_persistence_boundary_with_a_standby_waiting(
    pg_url: str, tmp_path: Path, point: str
) -> None:
    """The leader SIGKILLs itself at `point`; the standby takes over; the dead
    leader's host gets its supervisor back (as its service manager would) and
    settles what it had launched. The instant has one ledger row and one run,
    the job ran at most once, and a run that ran is recorded completed."""
    a, b = Host(tmp_path, "a"), Host(tmp_path, "b")
    marker = tmp_path / "ran"
    first, second = leader_then_standby(pg_url, a, b, leader_env={"WFSCHED_FAULT": point})
    again = None
    try:
        path = one_shot(tmp_path / "defs", "x", utc_in(2), marker)
        assert wfsched(pg_url, "create", str(path)).returncode == 0
        assert first.wait_exit(30) == -signal.SIGKILL, first.text()
        wait_leader(pg_url, [second])
        again = a.supervise(pg_url)
        again.wait_started()

        def finished() -> list[dict[str, object]]:
            runs = wfsched_json(pg_url, "runs")["items"]
            return [r for r in runs if r["state"] in ("completed", "failed")]

        runs = wait_for(finished, timeout=30, what="the run to be settled")
    finally:
        assert second.stop() == 0
        if again is not None:
            assert again.stop() == 0
    assert len(wfsched_json(pg_url, "runs")["items"]) == 1
    rows = [row for row in ledger(pg_url) if row[0] == "x"]
    assert len(rows) == 1 and rows[0][2] == "admitted", rows
    ran = marker.read_text().splitlines() if marker.exists() else []
    assert len(ran) <= 1
    if ran:
        assert runs[0]["state"] == "completed", runs
    else:
        # Marked (with its admission, or apart from it), never started.
        marked = ("after-admission-commit", "after-attempt-mark")
        assert point in marked and runs[0]["state"] == "failed", runs
    check_invariants(pg_url, [marker], [a, b])


def every_half_second(folder: Path, marker: Path, count: int, start: float) -> list[str]:
    """One-shots due every 0.5 s from `start` s from now (whole seconds only
    in `at`, so pairs share a second under two names... each its own id)."""
    import math

    names = []
    base = math.ceil(time.time() + start)
    for index in range(count):
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(base + index // 2))
        name = f"t{index:02d}"
        one_shot(folder, name, at, marker)
        names.append(name)
    return names


def assert_none_ran_and_failed(runs: list[dict[str, object]], marker: Path) -> None:
    """Runs are completed, or failed without having run: a run SIGKILLed in
    the middle of its launch may fail as abandoned (its command never wrote
    its line), but no run that ran is recorded failed."""
    ran = set(marker.read_text().split()) if marker.exists() else set()
    for run in runs:
        if run["run_id"] in ran:
            assert run["state"] == "completed", run
        else:
            assert run["state"] == "failed", run


def create_all(url: str, folder: Path) -> None:
    result = wfsched(url, "apply", str(folder))
    assert result.returncode == 0, result.stderr


def settled(url: str, count: int) -> list[dict[str, object]]:
    runs = wfsched_json(url, "runs", "--limit", "100")["items"]
    done = [r for r in runs if r["state"] in ("completed", "failed")]
    return done if len(done) == count else []


def test_store_outages_with_a_standby_waiting(
    pg_server: PostgresServer, pg_url: str, tmp_path: Path
) -> None:
    """Instants fall due throughout: every supervisor's connection is killed
    (pg_terminate_backend), then the database restarts (fast shutdown), then
    it refuses connections for longer than a lease. Afterwards every instant
    has exactly one ledger row, was admitted once and ran once, and one
    supervisor leads."""
    a, b = Host(tmp_path, "a"), Host(tmp_path, "b")
    marker = tmp_path / "ran"
    first, second = leader_then_standby(pg_url, a, b)
    name = dbname(pg_url)
    try:
        names = every_half_second(tmp_path / "defs", marker, 16, 2)
        create_all(pg_url, tmp_path / "defs")
        wait_for(lambda: marker.exists(), what="the first run")
        assert pg_server.terminate(dbname=name) >= 2
        wait_for(lambda: " fault-cleared " in first.text() + second.text(), timeout=30)
        pg_server.restart("fast")
        with psycopg.connect(pg_server.url(), autocommit=True) as admin:
            admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
            try:
                pg_server.terminate(dbname=name)
                time.sleep(2.5)  # the outage itself: longer than the 1 s lease
            finally:
                admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        wait_leader(pg_url, [first, second], timeout=30)
        runs = wait_for(lambda: settled(pg_url, 16), timeout=60, what="every run")
    finally:
        assert first.stop() == 0
        assert second.stop() == 0
    assert_none_ran_and_failed(runs, marker)
    admitted = sorted(row[0] for row in ledger(pg_url) if row[2] == "admitted")
    assert admitted == names
    assert len(marker.read_text().splitlines()) == 16
    check_invariants(pg_url, [marker], [a, b])


def stopped(pid: int) -> bool:
    """The process is stopped by a signal (state T in /proc)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "T"


def test_the_database_restarted_in_the_middle_of_an_admission(
    pg_server: PostgresServer, pg_url: str, tmp_path: Path
) -> None:
    """The leader stops itself inside its admission transaction, just before
    COMMIT; the database restarts (fast shutdown) while it is stopped; then
    it goes on. Its commit cannot have happened, so the instant is decided
    again, once, by whichever supervisor leads: one ledger row, one run, one
    start, and the job ran."""
    a, b = Host(tmp_path, "a"), Host(tmp_path, "b")
    marker = tmp_path / "ran"
    first, second = leader_then_standby(
        pg_url, a, b, leader_env={"WFSCHED_FAULT": "before-admission-commit:stop"}
    )
    try:
        path = one_shot(tmp_path / "defs", "x", utc_in(2), marker, misfire="latest")
        assert wfsched(pg_url, "create", str(path)).returncode == 0
        wait_for(lambda: stopped(first.proc.pid), timeout=30, what="the leader mid-admission")
        pg_server.restart("fast")
        os.kill(first.proc.pid, signal.SIGCONT)
        runs = wait_for(lambda: settled(pg_url, 1), timeout=60, what="the run")
    finally:
        os.kill(first.proc.pid, signal.SIGCONT)
        assert first.stop() == 0
        assert second.stop() == 0
    assert [run["state"] for run in runs] == ["completed"], runs
    rows = [row for row in ledger(pg_url) if row[0] == "x"]
    assert len(rows) == 1 and rows[0][2] == "admitted", rows
    assert len(marker.read_text().splitlines()) == 1
    check_invariants(pg_url, [marker], [a, b])


@pytest.mark.parametrize("skew", [30, -30])
def test_a_standby_with_a_skewed_clock_takes_over_without_doubling_or_dropping(
    pg_url: str, tmp_path: Path, skew: int
) -> None:
    """The standby's clock is 30 s ahead of (or behind) the database's; the
    leader dies; the standby leads (leases run on the database's clock) and
    every instant is admitted exactly once: none twice, none without a row.
    `status` warns about the offset."""
    a, b = Host(tmp_path, "a"), Host(tmp_path, "b")
    marker = tmp_path / "ran"
    first = a.supervise(pg_url)
    first.wait_started()
    wait_leader(pg_url, [first])
    second = b.supervise(pg_url, env={"WFSCHED_TEST_CLOCK_SKEW": str(skew)})
    second.wait_started()
    again = None
    try:
        names = every_half_second(tmp_path / "defs", marker, 4, 2)
        create_all(pg_url, tmp_path / "defs")
        wait_for(lambda: marker.exists(), what="the first run, by the leader")
        shown = wfsched_json(pg_url, "status")
        assert any("host b: clock 30" in w for w in shown["warnings"]), shown["warnings"]
        first.proc.send_signal(signal.SIGKILL)
        first.wait_exit()
        wait_leader(pg_url, [second])
        # Host a's supervisor comes back (its runs' exits are its to record).
        again = a.supervise(pg_url)
        again.wait_started()
        runs = wait_for(lambda: settled(pg_url, 4), timeout=90, what="every run")
    finally:
        assert second.stop() == 0
        first.kill()
        if again is not None:
            assert again.stop() == 0
    assert_none_ran_and_failed(runs, marker)
    admitted = sorted(row[0] for row in ledger(pg_url) if row[2] == "admitted")
    assert admitted == names
    check_invariants(pg_url, [marker], [a, b])


class NetworkCut:
    """A network namespace whose only way out is a veth pair to this host's
    namespace, with a PostgreSQL server listening on the host side: a
    supervisor started in the namespace reaches the database over TCP, and
    taking the veth down cuts it off (its TCP connections hang, as across a
    real network partition)."""

    def __init__(self, tmp_path: Path) -> None:
        tag = os.getpid() % 10000
        self.netns = f"wfsched-cut-{tag}"
        self.outer = f"wfc{tag}h"
        self.inner = f"wfc{tag}n"
        # A /30 of its own per test process: two runs at once (a CI clone and
        # a developer's suite) must not route each other's cut.
        self.network = ipaddress.IPv4Network(
            (int(ipaddress.IPv4Address("10.232.0.0")) + 4 * tag, 30)
        )
        self.address = str(self.network[1])
        self.tmp_path = tmp_path
        self.server: PostgresServer | None = None

    def _ip(self, *args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)

    def create(self) -> str | None:
        """Set up the namespace and the server; None, or why it cannot."""
        if os.geteuid() != 0 or shutil.which("ip") is None:
            return "needs root and iproute2 to create a network namespace"
        try:
            self._ip("netns", "add", self.netns)
            self._ip("link", "add", self.outer, "type", "veth", "peer", "name", self.inner)
            self._ip("link", "set", self.inner, "netns", self.netns)
            self._ip("addr", "add", f"{self.address}/30", "dev", self.outer)
            self._ip("link", "set", self.outer, "up")
            inside = ("netns", "exec", self.netns, "ip")
            self._ip(*inside, "addr", "add", f"{self.network[2]}/30", "dev", self.inner)
            self._ip(*inside, "link", "set", self.inner, "up")
            self._ip(*inside, "link", "set", "lo", "up")
        except (subprocess.CalledProcessError, OSError) as exc:
            self.remove()
            return f"cannot create a network namespace with a veth pair here: {exc}"
        bindir = find_bindir()
        if bindir is None:
            self.remove()
            return "no PostgreSQL server binaries"
        self.server = TcpServer(bindir, self.address, str(self.network))
        self.server.start()
        return None

    def url(self) -> str:
        assert self.server is not None
        return self.server.create_database()

    def command(self) -> list[str]:
        """The prefix that runs a program inside the namespace."""
        return ["ip", "netns", "exec", self.netns]

    def cut(self) -> None:
        self._ip("link", "set", self.outer, "down")

    def mend(self) -> None:
        self._ip("link", "set", self.outer, "up")

    def remove(self) -> None:
        if self.server is not None:
            self.server.stop()
        subprocess.run(["ip", "link", "del", self.outer], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True, timeout=30)


@contextlib.contextmanager
def network_cut(tmp_path: Path) -> Iterator[tuple[NetworkCut, str]]:
    """A namespace behind a veth pair and a server reachable through it
    (skipped where one cannot be made), and the server's TCP URL."""
    cut = NetworkCut(tmp_path)
    why = cut.create()
    if why is not None:
        pytest.skip(why)
    try:
        assert cut.server is not None
        yield cut, cut.server.tcp_url(cut.url())
    finally:
        cut.mend()
        cut.remove()


class TcpServer(PostgresServer):
    """The test server, listening on TCP at `address` too (trusting that subnet)."""

    def __init__(self, bindir: Path, address: str, network: str) -> None:
        super().__init__(bindir)
        self.address = address
        self.network = network
        self.port = 20000 + os.getpid() % 20000

    def _start(self) -> None:
        hba = self.data / "pg_hba.conf"
        if self.network not in hba.read_text():
            hba.write_text(hba.read_text() + f"host all all {self.network} trust\n")
        options = (
            f"-k {self.socket_dir} -c listen_addresses='{self.address}' -p {self.port}"
            " -c fsync=off -c synchronous_commit=off -c max_connections=50"
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@/{dbname}?host={self.socket_dir}&port={self.port}"

    def tcp_url(self, socket_url: str) -> str:
        return f"postgresql://{SUPERUSER}@{self.address}:{self.port}/{dbname(socket_url)}"


def test_a_network_cut_between_the_leader_and_the_database(tmp_path: Path) -> None:
    """The leader runs in a network namespace that reaches the database over a
    veth pair; the pair is taken down. The standby (outside) takes over after
    the lease and admits what falls due; when the network comes back the old
    leader stands by without committing anything as leader. Every instant is
    admitted once, none is lost, audit is clean."""
    with network_cut(tmp_path) as (cut, url):
        a, b = Host(tmp_path, "a"), Host(tmp_path, "b")
        marker = tmp_path / "ran"
        # Host a's runs in flight at the cut stay unfinished (hence hold an
        # execution slot) until host a records them or is lost; room for all
        # eight keeps this test about admission, not capacity.
        room = ("--max-concurrent-runs", "16")
        first = Daemon(url, "--host", "a", *LEASE, *room, env=a.env, prefix=cut.command())
        first.wait_started()
        wait_leader(url, [first])
        second = b.supervise(url, *room)
        second.wait_started()

        def state() -> str:
            rows = "\n".join(map(str, ledger(url)))
            logs = f"host a:\n{first.text()[-3000:]}\nhost b:\n{second.text()[-3000:]}"
            return f"ledger:\n{rows}\n{logs}"

        try:
            names = every_half_second(tmp_path / "defs", marker, 8, 3)
            create_all(url, tmp_path / "defs")
            wait_for(lambda: marker.exists(), what="the first run, by the leader")
            cut.cut()
            wait_leader(url, [second], timeout=20)
            wait_for(
                lambda: len([row for row in ledger(url) if row[2] == "admitted"]) == 8,
                timeout=30,
                what="the new leader to admit what falls due during the cut",
                explain=state,
            )
            # A run host a was executing is recorded by host a once it is back.
            cut.mend()
            wait_for(lambda: " standby " in first.text(), timeout=30, what="the old leader")
            runs = wait_for(lambda: settled(url, 8), timeout=40, what="every run", explain=state)
        finally:
            cut.mend()
            assert second.stop() == 0
            assert first.stop() == 0
        assert_none_ran_and_failed(runs, marker)
        admitted = sorted(row[0] for row in ledger(url) if row[2] == "admitted")
        assert admitted == names
        check_invariants(url, [marker], [a, b])


HOLD_IN_A_PIPELINE = """
import sys, time
from wfsched.store.location import resolve_store
from wfsched.store.postgres import LOCK_CLASS, WRITE_LOCK, PostgresStore

store = PostgresStore(resolve_store(sys.argv[1]))
if len(sys.argv) > 2:
    store.set_idle_limit(float(sys.argv[2]))
conn = store._conn
with conn.pipeline():
    conn.execute("BEGIN")
    conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_CLASS, WRITE_LOCK))
    print(conn.info.backend_pid, flush=True)
    time.sleep(120)
"""


@pytest.mark.parametrize("limit", [None, "1"], ids=["command", "leader"])
def test_a_session_cut_off_inside_a_pipeline_gives_the_write_lock_back(
    tmp_path: Path, limit: str | None
) -> None:
    """A session cut off after its pipeline's statements and before their
    Sync has never said it is ready for a query, so the server's idle in
    transaction timeout is not running for it: it holds the write lock
    while it waits for the rest. The settings every connection of ours
    starts with (and a leader's, scaled to its lease) make the server end
    it once its client stays silent: the lock is free again within
    seconds, not after the kernel's two hours."""
    with network_cut(tmp_path) as (cut, url):
        PostgresStore(resolve_store(url)).close()  # the schema, before the cut
        script = tmp_path / "hold.py"
        script.write_text(HOLD_IN_A_PIPELINE)
        holder = subprocess.Popen(
            [*cut.command(), sys.executable, str(script), url, *([limit] if limit else [])],
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).parent.parent,
        )
        try:
            assert holder.stdout is not None
            backend = int(holder.stdout.readline())
            with psycopg.connect(url, autocommit=True) as conn:
                state = conn.execute(
                    "SELECT state FROM pg_stat_activity WHERE pid = %s", (backend,)
                ).fetchone()
                assert state is not None and state[0] != "idle in transaction", state
                cut.cut()
                cut_at = time.monotonic()
                conn.execute("SET lock_timeout = '20s'")
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_CLASS, WRITE_LOCK))
                freed = time.monotonic() - cut_at
        finally:
            holder.kill()
            holder.wait()
        assert freed < (4 if limit else 8), f"the write lock came back {freed:.1f}s after the cut"


def test_the_leader_gauge_epoch_and_health_body_follow_the_leadership(tmp_path: Path) -> None:
    """`wfsched_leader{host}` is 1 while leading and 0 standing by,
    `wfsched_lease_epoch` the epoch last led with; /healthz says which."""
    from prometheus_client.parser import text_string_to_metric_families

    from wfsched.daemon.metrics import Metrics, health
    from wfsched.daemon.metrics_render import Renderer
    from wfsched.store import SQLiteStore

    metrics = Metrics(poll_interval=1.0, host="sched-2", store_kind="postgresql")
    store = SQLiteStore(tmp_path / "s")
    metrics.started(store)
    metrics.ticked(None)
    store.close()

    def scraped() -> dict[str, float]:
        snapshot = metrics.snapshot
        assert snapshot is not None
        text = Renderer().render(snapshot).decode()
        return {
            f"{sample.name}{sample.labels}": sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name in ("wfsched_leader", "wfsched_lease_epoch", "wfsched_store_info")
        }

    metrics.leadership(False, None)
    assert scraped()["wfsched_leader{'host': 'sched-2'}"] == 0
    assert health(metrics.snapshot, time.monotonic())[1].startswith("standby ok")
    metrics.leadership(True, 7)
    shown = scraped()
    assert shown["wfsched_leader{'host': 'sched-2'}"] == 1
    assert shown["wfsched_lease_epoch{}"] == 7
    assert shown["wfsched_store_info{'kind': 'postgresql'}"] == 1
    assert health(metrics.snapshot, time.monotonic())[1].startswith("leader ok")
    metrics.leadership(False, None)
    assert scraped()["wfsched_lease_epoch{}"] == 7


def test_a_host_back_after_its_runs_were_abandoned_discloses_their_real_end(
    pg_url: str, tmp_path: Path
) -> None:
    """Host a's supervisor is SIGKILLed while its job runs; the leader (b)
    fails the run as abandoned once a's heartbeat is older than host_timeout.
    a's supervisor comes back (its service manager restarts it): it finds the
    abandoned run of its host, watches it to its end and appends the job's
    real outcome to the reason; the run stays failed and is never re-run."""
    a, b = Host(tmp_path, "a"), Host(tmp_path, "b")
    out = tmp_path / "job"
    first, second = leader_then_standby(pg_url, a, b, "--host-timeout", "2")
    again = None
    try:
        job = write_definition(
            tmp_path / "defs",
            "job",
            f'id = "job"\n[trigger]\nat = "{utc_in(1)}"\n'
            f'[run]\ncommand = ["sh", "-c", "sleep 6; echo ran >> {out}"]\n',
        )
        assert wfsched(pg_url, "create", str(job)).returncode == 0
        wait_for(
            lambda: [r for r in wfsched_json(pg_url, "runs")["items"] if r["state"] == "running"],
            what="the job to start on host a",
        )
        first.proc.send_signal(signal.SIGKILL)
        first.wait_exit()
        wait_for(
            lambda: wfsched_json(pg_url, "runs")["items"][0]["state"] == "failed",
            timeout=20,
            what="the run of the lost host to be abandoned",
        )
        again = a.supervise(pg_url, "--host-timeout", "2")
        again.wait_started()
        run = wait_for(
            lambda: (lambda r: r if "reported later" in (r["reason"] or "") else None)(
                wfsched_json(pg_url, "runs")["items"][0]
            ),
            timeout=30,
            what="the real end to be disclosed",
        )
        assert run["state"] == "failed"
        assert "its host reported later that it exited with status 0" in run["reason"]
    finally:
        assert second.stop() == 0
        if again is not None:
            assert again.stop() == 0
    assert out.read_text() == "ran\n"
    assert len(wfsched_json(pg_url, "runs")["items"]) == 1
    check_invariants(pg_url, None, [a, b])


@pytest.mark.parametrize(
    ("args", "config", "where"),
    [
        (["--lease", "1", "--lease-renew", "1"], None, "command line"),
        (["--lease-renew", "5"], None, "command line"),
        ([], "lease = 2\nlease_renew = 3\n", "config.toml"),
        (["--lease", "0.1"], None, "--lease: must be at least 0.2 seconds"),
        (["--host-timeout", "0.5"], None, "--host-timeout: must be at least 1 seconds"),
    ],
)
def test_bad_lease_settings_refuse_the_start_in_one_line(
    tmp_path: Path, args: list[str], config: str | None, where: str
) -> None:
    """A renewal not shorter than the lease (or a lease too short) is exit 2,
    one line naming the setting and where it came from; nothing is created."""
    store = tmp_path / "store"
    if config is not None:
        store.mkdir()
        (store / "config.toml").write_text(config)
    result = wfsched(store, "supervise", *args)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and where in result.stderr, result.stderr
    if "lease_renew" in " ".join(args) + (config or "") or "renew" in " ".join(args):
        assert "lease_renew: must be shorter than lease" in result.stderr
    assert not (store / "wfsched.db").exists()
