"""Whether a run's host can be reached: requests for a run (cancel, resume)
are carried out by the agent of the host that runs it, so both the CLI and
the leader ask this before counting on that agent (docs/high-availability.md,
"Requests go to the run's host")."""

from __future__ import annotations

from wfsched.domain.timeutil import format_event
from wfsched.store import RunRow, Store
from wfsched.store.lease import HostRow


def host_row(store: Store, host: str | None) -> HostRow | None:
    """The heartbeat of `host`, if it has written one."""
    if host is None:
        return None
    return next((row for row in store.host_rows() if row.host == host), None)


def unreachable(store: Store, host: str | None, host_timeout: float) -> str | None:
    """Why the agent of `host` cannot carry out a request now (`no heartbeat
    since ..., host_timeout 60s`: the host is lost), or None while it is up. A
    store without heartbeats (SQLite: one host, its supervisor's) or a run
    with no recorded host never counts as unreachable.

    Draining hosts (no new placements) will refuse resumes beside this."""
    if host is None:
        return None
    rows = store.host_rows()
    if not rows:
        return None
    row = next((row for row in rows if row.host == host), None)
    if row is None:
        return "it never sent a heartbeat to this store"
    if row.db_now - row.last_seen <= host_timeout:
        return None
    return f"no heartbeat since {format_event(row.last_seen)}, host_timeout {host_timeout:g}s"


def resume_refusal(store: Store, run: RunRow, host_timeout: float) -> str | None:
    """Why `run` cannot resume now: it resumes only on its own host (its state
    directory is there), and that host is lost. None if it can."""
    why = unreachable(store, run.host, host_timeout)
    if why is None:
        return None
    return (
        f"{run.run_id} resumes only on its host {run.host}, where its state directory is,"
        f" and host {run.host} is lost ({why}); start its supervisor there, then resume"
    )
