"""The leader lease on a PostgreSQL store, over a connection of its own.

The supervisor's leadership thread renews (or, as a standby, watches and
takes) the lease here, so a long tick on the main connection never delays a
renewal. Every time comes from the database's clock (`clock_timestamp()`),
never a host's: hosts whose clocks disagree still agree on who leads.

Statements (each one autocommitted on its own):
- take: insert the lease row (epoch 1), or, if the lease is released or
  expired, move it to this holder with epoch + 1. The row lock makes two
  takers serialize; the loser sees a live lease and takes nothing. A leader
  transaction in flight holds the row FOR SHARE (its fencing check), so a
  takeover waits for it to end: no leader commit can land after a takeover.
- renew: push the expiry only while this epoch still holds an unexpired
  lease; an expired lease is never revived (that holder is deposed, even if
  nobody has taken over yet, and must take a new epoch).
- release: expire the lease at once and NOTIFY, so standbys take over now
  instead of at their next poll.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from typing import Any

import psycopg

from wfsched.errors import StoreConnectionLost, StoreError
from wfsched.store.lease import LeaseRow

DB_NOW = "EXTRACT(EPOCH FROM clock_timestamp())::float8"
"""The database's clock in epoch seconds, read at the moment it is evaluated."""
CHANNEL = "wfsched_lease"
"""The NOTIFY channel a released lease is announced on."""
LEASE_COLUMNS = "epoch, host, pid, acquired_at, renewed_at, expires_at, released"
CONNECT_TIMEOUT = 5


class PgLeaseChannel:
    """One connection for the lease; every method is one statement.

    A lost connection raises StoreConnectionLost; the next call reconnects.
    """

    def __init__(
        self,
        conninfo: str,
        display: str,
        host: str,
        pid: int,
        scrub: Callable[[BaseException], str],
    ) -> None:
        self._conninfo = conninfo
        self.display = display
        self._scrub = scrub
        self.host = host
        self.pid = pid
        self._conn: psycopg.Connection[Any] | None = None

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            try:
                self._conn = psycopg.connect(
                    self._conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT
                )
                self._conn.execute(f"LISTEN {CHANNEL}")
            except psycopg.Error as exc:
                self._conn = None
                raise StoreConnectionLost(
                    f"store {self.display}: lease connection lost: {self._scrub(exc)}"
                ) from None
        return self._conn

    def _one(self, statement: str, params: tuple[Any, ...] = ()) -> tuple[Any, ...] | None:
        conn = self._connection()
        try:
            row = conn.execute(statement, params).fetchone()  # type: ignore[arg-type]
        except psycopg.OperationalError as exc:
            self.close()
            raise StoreConnectionLost(
                f"store {self.display}: lease connection lost: {self._scrub(exc)}"
            ) from None
        except psycopg.Error as exc:
            raise StoreError(f"store {self.display}: lease: {self._scrub(exc)}") from None
        return tuple(row) if row is not None else None

    def take(self, lease: float) -> int | None:
        """Become the leader if nobody holds a live lease: the new epoch, or None."""
        row = self._one(
            "INSERT INTO leader_lease AS l (id, epoch, host, pid, acquired_at, renewed_at,"
            f" expires_at, released) VALUES (1, 1, %s, %s, {DB_NOW}, {DB_NOW}, {DB_NOW} + %s, 0)"
            " ON CONFLICT (id) DO UPDATE SET epoch = l.epoch + 1, host = EXCLUDED.host,"
            " pid = EXCLUDED.pid, acquired_at = EXCLUDED.acquired_at,"
            " renewed_at = EXCLUDED.renewed_at, expires_at = EXCLUDED.expires_at, released = 0"
            f" WHERE l.released = 1 OR l.expires_at <= {DB_NOW}"
            " RETURNING epoch",
            (self.host, self.pid, lease),
        )
        return int(row[0]) if row is not None else None

    def renew(self, epoch: int, lease: float) -> bool:
        """Extend the lease of `epoch`; False if it is no longer held (deposed)."""
        row = self._one(
            f"UPDATE leader_lease SET renewed_at = {DB_NOW}, expires_at = {DB_NOW} + %s"
            f" WHERE id = 1 AND epoch = %s AND released = 0 AND expires_at > {DB_NOW}"
            " RETURNING epoch",
            (lease, epoch),
        )
        return row is not None

    def release(self, epoch: int) -> None:
        """Give the lease up now (a SIGTERMed leader) and wake the standbys."""
        self._one(
            f"UPDATE leader_lease SET released = 1, expires_at = {DB_NOW}"
            " WHERE id = 1 AND epoch = %s RETURNING epoch",
            (epoch,),
        )
        self._one(f"SELECT pg_notify('{CHANNEL}', %s)", (str(epoch),))

    def read(self) -> LeaseRow | None:
        row = self._one(f"SELECT {LEASE_COLUMNS}, {DB_NOW} FROM leader_lease WHERE id = 1")
        return lease_row(row) if row is not None else None

    def wait(self, timeout: float) -> bool:
        """Sleep up to `timeout` seconds for a lease release; True if one came."""
        conn = self._connection()
        try:
            return any(True for _ in conn.notifies(timeout=timeout, stop_after=1))
        except psycopg.OperationalError as exc:
            self.close()
            raise StoreConnectionLost(
                f"store {self.display}: lease connection lost: {self._scrub(exc)}"
            ) from None

    def heartbeat(self, started_at: float, now: float, executing: int) -> None:
        """This host's heartbeat (database time), with its clock's offset from
        the database's (`now` is this host's clock): every supervisor, leader
        or standby, writes its own host's row."""
        self._one(
            "INSERT INTO hosts (host, pid, started_at, last_seen, clock_offset, executing, stopped)"
            f" VALUES (%s, %s, %s, {DB_NOW}, %s - {DB_NOW}, %s, 0) ON CONFLICT (host) DO UPDATE"
            " SET pid = EXCLUDED.pid, started_at = EXCLUDED.started_at,"
            " last_seen = EXCLUDED.last_seen, clock_offset = EXCLUDED.clock_offset,"
            " executing = EXCLUDED.executing, stopped = 0 RETURNING 1",
            (self.host, self.pid, started_at, now, executing),
        )

    def stopped(self) -> None:
        """A supervisor that shut down says so: its host is not lost."""
        self._one(
            f"UPDATE hosts SET stopped = 1, last_seen = {DB_NOW} WHERE host = %s AND pid = %s"
            " RETURNING 1",
            (self.host, self.pid),
        )

    def close(self) -> None:
        if self._conn is not None:
            with suppress(psycopg.Error):
                self._conn.close()
            self._conn = None


def lease_row(row: tuple[Any, ...] | Any) -> LeaseRow:
    epoch, host, pid, acquired, renewed, expires, released, now = row
    return LeaseRow(
        int(epoch),
        str(host),
        int(pid),
        float(acquired),
        float(renewed),
        float(expires),
        bool(released),
        float(now),
    )
