"""Helpers for the high-availability tests: several supervisors ("hosts") on
one PostgreSQL store, each with a store-local directory of its own (its own
runs root), and the invariants every failover must keep."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import psycopg

from tests.daemon import Daemon, wait_for, wfsched

LEASE = ("--lease", "1", "--lease-renew", "0.2")
"""Short leases keep the failover tests fast."""


class Host:
    """One "host": its own local state directory, hence its own runs root."""

    def __init__(self, root: Path, name: str) -> None:
        self.name = name
        self.state = root / f"host-{name}"
        self.state.mkdir(parents=True, exist_ok=True)
        self.env = {"XDG_STATE_HOME": str(self.state)}

    def supervise(self, url: str, *args: str, env: dict[str, str] | None = None) -> Daemon:
        return Daemon(url, "--host", self.name, *LEASE, *args, env={**self.env, **(env or {})})


def lease(url: str) -> tuple[Any, ...] | None:
    """(epoch, pid, live) of the lease row, straight from the database."""
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(
            "SELECT epoch, pid, released = 0 AND expires_at >"
            " EXTRACT(EPOCH FROM clock_timestamp()) FROM leader_lease"
        ).fetchone()


def leader_pid(url: str) -> int | None:
    row = lease(url)
    return int(row[1]) if row is not None and row[2] else None


def wait_leader(url: str, daemons: list[Daemon], timeout: float = 15.0) -> Daemon:
    """The daemon whose pid holds a live lease and that logged it leads."""

    def find() -> Daemon | None:
        pid = leader_pid(url)
        for daemon in daemons:
            if daemon.proc.pid == pid and " leading " in daemon.text():
                return daemon
        return None

    def explain() -> str:
        logs = "\n".join(f"pid {d.proc.pid}:\n{d.text()[-2000:]}" for d in daemons)
        return f"{database_state(url)}\n{logs}"

    return wait_for(find, timeout, "a leader", explain)


def database_state(url: str) -> str:
    """The lease row, the sessions and the locks waited for: what a test
    that timed out on leadership prints."""
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        lines = [f"lease: {conn.execute('SELECT * FROM leader_lease').fetchall()}"]
        lines += [
            f"session: {row}"
            for row in conn.execute(
                "SELECT pid, application_name, client_addr, state, wait_event_type,"
                " wait_event, backend_xid, now() - state_change, left(query, 100)"
                " FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid()"
            )
        ]
        lines += [
            f"lock: {row}"
            for row in conn.execute(
                "SELECT pid, locktype, relation::regclass, mode, granted FROM pg_locks"
                " WHERE locktype IN ('relation', 'tuple', 'transactionid', 'advisory')"
                " AND database IS NOT DISTINCT FROM (SELECT oid FROM pg_database"
                " WHERE datname = current_database()) OR NOT granted"
            )
        ]
    return "\n".join(lines)


def leader_then_standby(
    url: str,
    leader: Host,
    standby: Host,
    *args: str,
    leader_env: dict[str, str] | None = None,
    standby_env: dict[str, str] | None = None,
) -> tuple[Daemon, Daemon]:
    """`leader`'s supervisor started and seen leading, then `standby`'s
    started: the order that makes known which one leads."""
    first = leader.supervise(url, *args, env=leader_env)
    first.wait_started()
    wait_leader(url, [first])
    second = standby.supervise(url, *args, env=standby_env)
    second.wait_started()
    return first, second


def ledger(url: str) -> list[tuple[str, int, str, str | None, int | None, int]]:
    """Every ledger row: (schedule, instant, state, reason, run, summary)."""
    with psycopg.connect(url, autocommit=True) as conn:
        return [
            tuple(row)  # type: ignore[misc]
            for row in conn.execute(
                "SELECT schedule_id, scheduled_at, state, reason, run_seq, summary"
                " FROM occurrences ORDER BY schedule_id, scheduled_at, seq"
            )
        ]


def check_invariants(
    url: str,
    started_runs: list[Path] | None = None,
    hosts: list[Host] | None = None,
    resumed: dict[int, int] | None = None,
) -> None:
    """What no failover may break: no occurrence admitted twice, no run
    launched twice (one attempt mark, one start line; `resumed`: run seq to
    the attempts an operator's resumes made), `audit` clean. Run
    directories live on the host that executed the run: a run's directory
    found under another host's runs root is where it belongs."""
    with psycopg.connect(url, autocommit=True) as conn:
        doubled = conn.execute(
            "SELECT schedule_id, scheduled_at, COUNT(*) FROM occurrences WHERE summary = 0"
            " GROUP BY schedule_id, scheduled_at HAVING COUNT(*) > 1"
        ).fetchall()
        assert doubled == [], doubled
        attempts = conn.execute(
            "SELECT run_seq, COUNT(*) FROM attempts GROUP BY run_seq HAVING COUNT(*) > 1"
        ).fetchall()
        assert [row for row in attempts if (resumed or {}).get(row[0]) != row[1]] == [], attempts
    for marker in started_runs or []:
        if marker.exists():
            lines = marker.read_text().splitlines()
            assert len(lines) == len(set(lines)), f"a run started twice: {lines}"
    audit = wfsched(url, "audit", "--json")
    violations = [
        v
        for v in json.loads(audit.stdout)["violations"]
        if not (v["check"] == "rundir-mismatch" and _elsewhere(v, hosts or []))
    ]
    assert violations == [], audit.stdout + audit.stderr


def _elsewhere(violation: dict[str, Any], hosts: list[Host]) -> bool:
    run = violation["run_id"]
    return any(
        "has no directory" in violation["detail"]
        and list(host.state.glob(f"wfsched/postgresql/*/runs/{run}"))
        for host in hosts
    )


def pids_alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        alive.append(pid)
    return alive
