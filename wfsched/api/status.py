"""`wfsched status`: is a supervisor running, how busy is it, what is stuck.

Read-only. Whether a supervisor runs is answered by the kernel's lock table
(`wfsched.store.ownership.holder`), never by taking the lock: even a brief probe
could make a supervisor that is starting at that moment fail. The meta keys
the supervisor writes (`pid`, `started_at`, `last_tick_at`, `poll_interval`,
`stamp_interval`, `max_concurrent_runs`, epoch floats as strings;
`tick_errors`, JSON; `draining:<host>`, JSON, while that host's supervisor
drains) only describe it.
"""

from __future__ import annotations

import json
import math
from typing import Any

from wfsched.domain.config import SupervisorConfig
from wfsched.domain.passed_over import META_KEY as PASSED_OVER_KEY
from wfsched.domain.passed_over import published as passed_over
from wfsched.domain.tickerrors import META_KEY as TICK_ERRORS_KEY
from wfsched.domain.tickerrors import published
from wfsched.domain.timeutil import Clock, format_event, format_instant, wall_clock
from wfsched.store import Store
from wfsched.store.lease import HostRow, LeaseRow
from wfsched.store.runtime_file import read_fault

DEFAULTS = SupervisorConfig()
"""Reported (capacity) or used for staleness (interval) when the supervisor
did not record its own."""
STALE_AFTER_STAMPS = 3
CLOCK_WARNING = 1.0
"""Seconds a host's clock may differ from the database's before `status` warns."""


def status(store: Store, clock: Clock = wall_clock) -> dict[str, Any]:
    """The status object (docs/operations.md, "status"), with a few added fields.

    `supervisor.stale` is true when a process holds the lock but has not
    stamped a tick for three stamp intervals: alive but stuck (or its clock
    jumped). An idle supervisor on a SQLite store stamps every 5 s (its
    `stamp_interval`), a busy one every tick; one that recorded no stamp
    interval (an older version) stamped every poll interval.
    `fault` is the supervisor's open fault episode (kind, error, since,
    phase), read from its runtime file (wfsched.store.runtime_file) because the store
    may be unwritable while it lasts; null when there is none.
    """
    pid = store.supervisor_pid()
    fault = read_fault(store.root, pid)
    if fault is not None and isinstance(fault.get("since"), int | float):
        fault["since"] = format_event(fault["since"])
    with store.snapshot():
        meta = {
            key: store.get_meta(key)
            for key in (
                "started_at",
                "last_tick_at",
                "poll_interval",
                "stamp_interval",
                "max_concurrent_runs",
                TICK_ERRORS_KEY,
                "launcher_state",
                "launcher_since",
                "launcher_error",
                PASSED_OVER_KEY,
            )
        }
        counts = store.run_state_counts()
        executing = store.executing_count()
        waiting = store.blocked_admitted_count()
        due = store.earliest_due_schedule()
        blocked = store.blocked_schedules()
        rejected = store.standing_rejections()
        lease = store.leader_lease()
        hosts = store.host_rows()
        host_timeout = _number(store.get_meta("host_timeout")) or DEFAULTS.host_timeout
        drains = _drains(store.draining_hosts(), clock())
        lease_renew = _number(store.get_meta("lease_renew")) or DEFAULTS.lease_renew
    started_at = _number(meta["started_at"])
    last_tick_at = _number(meta["last_tick_at"])
    poll_interval = _number(meta["poll_interval"]) or DEFAULTS.poll_interval
    stamp_interval = max(poll_interval, _number(meta["stamp_interval"]) or 0.0)
    capacity = _number(meta["max_concurrent_runs"])
    running = pid is not None
    seen = last_tick_at if last_tick_at is not None else started_at
    # During a fault episode the stamp cannot be written: the fault says why.
    stale = (
        running
        and fault is None
        and seen is not None
        and clock() - seen > STALE_AFTER_STAMPS * stamp_interval
    )
    if store.kind == "sqlite":
        # One supervisor: the lock holder, draining if its own mark says so.
        drain = next((item for item in drains.values() if item["pid"] == pid), None)
    else:
        # The leader never drains (it hands the lease over first); with no
        # leader, a draining supervisor is what holds the store.
        drain = None if lease is not None and lease.live else next(iter(drains.values()), None)
    info: dict[str, Any] = {
        "supervisor": {
            "running": running,
            "state": None if not running else "draining" if drain else "supervising",
            "draining": drain if running else None,
            "pid": pid,
            "started_at": format_event(started_at),
            "last_tick_at": format_event(last_tick_at),
            "uptime": round(clock() - started_at, 3) if running and started_at else None,
            "stale": stale,
            "fault": fault,
        },
        # Capacity governs scheduled runs; manual runs bypass it and are
        # counted apart so "executing X of N" never exceeds N.
        "executing": executing,
        "executing_manual": counts.get("admitted", 0)
        + counts.get("running", 0)
        - executing
        - waiting,
        # Admitted runs of blocked schedules: no execution slot until `resume`.
        "waiting_for_unblock": waiting,
        "interrupted": counts.get("interrupted", 0),
        # Trigger/resume/cancel requests no supervisor has taken yet (`requests`).
        "pending_requests": len(store.pending_requests(1000)),
        "max_concurrent_runs": int(capacity) if capacity else DEFAULTS.max_concurrent_runs,
        "next_due": None
        if due is None
        else {"schedule_id": due.id, "at": format_instant(due.next_due)},
        "blocked": [{"schedule_id": row.id, "reason": row.blocked_reason} for row in blocked],
        # Errors the running (or last) supervisor contained, counted per tick
        # phase since it started (wfsched.domain.tickerrors).
        "errors": published(meta[TICK_ERRORS_KEY]),
        "launcher": _launcher(meta) if running else None,
        # A start refused at admission (executable or cwd missing) is a
        # failure; it stays listed until a later run of the schedule succeeds.
        "preflight_rejected": [
            {
                "schedule_id": row.schedule_id,
                "scheduled_at": format_instant(row.scheduled_at),
                "reason": row.reason,
            }
            for row in rejected
        ],
        # What the startup rule passed over when the running (or last)
        # supervisor started (wfsched.domain.passed_over).
        "passed_over_at_start": passed_over(meta[PASSED_OVER_KEY]),
        "store": store.display,
        **_cluster(store.kind, lease, hosts, host_timeout, lease_renew, drains),
    }
    info["problems"] = problems(info)
    return info


def problems(info: dict[str, Any]) -> list[dict[str, str]]:
    """What `status --check` fails on, one `{check, detail}` per problem: no
    supervisor, no leader (none holds the lease, or the one holding it went
    silent), a stale stamp, an open fault episode, each blocked schedule.
    Pure over the status object, so both stores answer alike."""
    found = []
    supervisor = info["supervisor"]
    if not supervisor["running"]:
        found.append(("no-supervisor", f"no supervisor runs on store {info['store']}"))
    elif info["store_kind"] == "postgresql":
        leader = info["leader"]
        if leader is None:
            found.append(("no-leader", "supervisors run, but none holds the leader lease"))
        elif leader["silent_since"] is not None:
            found.append(
                (
                    "leader-silent",
                    f"lease held by a silent host {leader['host']} (pid {leader['pid']}, no"
                    f" heartbeat since {leader['silent_since']}), expires in"
                    f" {leader['lease_expires_in']:g} s",
                )
            )
    if supervisor["stale"]:
        found.append(("stale", f"no tick stamped since {supervisor['last_tick_at']}"))
    fault = supervisor["fault"]
    if fault:
        found.append(("fault", f"{fault['kind']} since {fault['since']}: {fault['error']}"))
    for blocked in info["blocked"]:
        found.append(("blocked", f"schedule {blocked['schedule_id']}: {blocked['reason']}"))
    return [{"check": check, "detail": detail} for check, detail in found]


SILENT_RENEWALS = 2
"""A heartbeat later than this many renew intervals is `silent`: every
supervisor writes one each renew interval, so two missed ones mean it is
dead, stopped (SIGSTOP) or cut off, long before `host_timeout` calls it lost."""


def _drains(marks: dict[str, str], now: float) -> dict[str, dict[str, Any]]:
    """The drains under way, by host: a mark past its drain's deadline is
    left from a supervisor that died draining, and no drain any more."""
    found = {}
    for host, text in marks.items():
        try:
            mark = json.loads(text)
            pid, since, cancel_at, until = (
                int(mark["pid"]),
                float(mark["since"]),
                float(mark["cancel_at"]),
                float(mark["until"]),
            )
        except (ValueError, TypeError, KeyError):
            continue  # garbled: unknown, not fatal
        if now <= until:
            found[host] = {
                "host": host,
                "pid": pid,
                "since": format_event(since),
                "cancel_at": format_event(cancel_at),
                "until": format_event(until),
            }
    return found


def _cluster(
    kind: str,
    lease: LeaseRow | None,
    hosts: list[HostRow],
    host_timeout: float,
    lease_renew: float,
    drains: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """Who leads and which hosts are there (a PostgreSQL store's supervisors).

    Times come from the database's clock. A host is `leader`, `standby`,
    `draining` (its supervisor was told to stop and waits for its runs),
    `silent` (its heartbeat is more than SILENT_RENEWALS renew intervals
    late: a SIGKILLed leader is shown so at once, not as a live standby
    until `host_timeout`), `stopped` (its supervisor shut down cleanly) or
    `lost` (no heartbeat for `host_timeout`); a leader whose host went silent
    keeps the lease until it expires, and says so. A clock more than
    CLOCK_WARNING seconds off the database's is warned about (decisions
    stay right, but its log times and `now` disagree with the other
    hosts')."""
    leader = None
    if lease is not None and lease.live:
        leader = {
            "host": lease.host,
            "pid": lease.pid,
            "epoch": lease.epoch,
            "since": format_event(lease.acquired_at),
            "lease_expires_at": format_event(lease.expires_at),
            "lease_expires_in": round(max(0.0, lease.expires_at - lease.db_now), 1),
            "silent_since": None,
        }
    listed = []
    warnings = []
    for row in hosts:
        late = row.db_now - row.last_seen
        silent = not row.stopped and late > SILENT_RENEWALS * lease_renew
        leads = leader is not None and row.host == leader["host"] and row.pid == leader["pid"]
        drain = drains.get(row.host)
        if drain is not None and drain["pid"] == row.pid:
            role = "draining"
        elif row.stopped:
            role = "stopped"
        elif late > host_timeout:
            role = "lost"
        elif leads:
            role = "leader"
        elif silent:
            role = "silent"
        else:
            role = "standby"
        if leads and silent and leader is not None:
            leader["silent_since"] = format_event(row.last_seen)
        listed.append(
            {
                "host": row.host,
                "pid": row.pid,
                "role": role,
                "last_seen": format_event(row.last_seen),
                "silent_since": format_event(row.last_seen) if silent else None,
                "clock_offset": round(row.clock_offset, 3),
                "executing": row.executing,
            }
        )
        if silent and role != "lost":
            warnings.append(
                f"host {row.host}: silent since {format_event(row.last_seen)} (no heartbeat"
                f" for {late:.1f}s; lost after {host_timeout:g}s)"
            )
        if role != "stopped" and abs(row.clock_offset) > CLOCK_WARNING:
            ahead = "ahead of" if row.clock_offset > 0 else "behind"
            warnings.append(
                f"host {row.host}: clock {abs(row.clock_offset):.1f}s {ahead} the database's"
            )
        if role == "lost":
            warnings.append(
                f"host {row.host}: no heartbeat since {format_event(row.last_seen)}"
                f" (more than {host_timeout:g}s)"
            )
    return {
        "store_kind": kind,
        "leader": leader,
        "standbys": [
            {"host": item["host"], "pid": item["pid"]}
            for item in listed
            if item["role"] == "standby"
        ],
        "hosts": listed,
        "warnings": warnings,
    }


def _launcher(meta: dict[str, str | None]) -> dict[str, Any] | None:
    """The running supervisor's launcher: `state` "up" or "down", `since`
    (when it last changed), `last_error` (why it last went down, kept after
    it is back up; null if it never did)."""
    if meta["launcher_state"] not in ("up", "down"):
        return None
    return {
        "state": meta["launcher_state"],
        "since": format_event(_number(meta["launcher_since"])),
        "last_error": meta["launcher_error"] or None,
    }


def status_without_store(display: str, kind: str = "sqlite") -> dict[str, Any]:
    """The same shape for a store that does not exist yet (nothing to report)."""
    info: dict[str, Any] = {
        "supervisor": {
            "running": False,
            "pid": None,
            "started_at": None,
            "last_tick_at": None,
            "uptime": None,
            "stale": False,
            "fault": None,
            "state": None,
            "draining": None,
        },
        "executing": 0,
        "executing_manual": 0,
        "waiting_for_unblock": 0,
        "interrupted": 0,
        "pending_requests": 0,
        "max_concurrent_runs": DEFAULTS.max_concurrent_runs,
        "next_due": None,
        "blocked": [],
        "errors": published(None),
        "launcher": None,
        "preflight_rejected": [],
        "passed_over_at_start": None,
        "store": display,
        **_cluster(kind, None, [], DEFAULTS.host_timeout, DEFAULTS.lease_renew, {}),
    }
    info["problems"] = problems(info)
    return info


def _number(text: str | None) -> float | None:
    """A meta value as a number; a missing or garbled one is unknown, not fatal."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None
