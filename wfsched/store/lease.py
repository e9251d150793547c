"""Leadership rows as the store hands them out: the lease and the hosts.

Plain values, no driver: `status`, the metrics and the supervisor read these.
Every time here is epoch seconds of the database's clock (`db_now` is that
clock when the row was read), so comparing them never involves a host's
clock. A SQLite store has no lease (its supervisor is fenced by its lock
file) and returns none of these.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LeaseRow:
    """The leader's lease: `epoch` grows by one at every takeover."""

    epoch: int
    host: str
    pid: int
    acquired_at: float
    renewed_at: float
    expires_at: float
    released: bool
    db_now: float

    @property
    def live(self) -> bool:
        """Held now: not released, not expired (by the database's clock)."""
        return not self.released and self.expires_at > self.db_now


@dataclass(frozen=True)
class HostRow:
    """One host's heartbeat, written by its supervisor (leader or standby)."""

    host: str
    pid: int
    started_at: float
    last_seen: float
    clock_offset: float
    """The host's clock minus the database's, at its last heartbeat."""
    executing: int
    stopped: bool
    db_now: float
