"""Domain errors, each carrying the exit status docs/operations.md ("Exit statuses") assigns.

The CLI turns these into one line on stderr and the exit status; nothing below
the CLI prints or exits.
"""

from __future__ import annotations


class WfschedError(Exception):
    """Base for every error an operator is meant to read."""

    exit_code = 1


class OperationError(WfschedError):
    """The operation was valid but failed (exit 1)."""

    exit_code = 1


class UsageError(WfschedError, ValueError):
    """Bad arguments, e.g. a malformed cursor (exit 2)."""

    exit_code = 2


class DefinitionError(WfschedError, ValueError):
    """A schedule definition is invalid (exit 2).

    The message is always `<source>: <key.path>: <what is wrong>` so an
    operator can go straight to the offending line.
    """

    exit_code = 2

    def __init__(self, source: str, path: str, message: str) -> None:
        self.source = source
        self.path = path
        self.detail = message
        where = f"{source}: {path}: " if path else f"{source}: "
        super().__init__(f"{where}{message}")


class DefinitionErrors(WfschedError, ValueError):
    """Several invalid definitions, all found in one pass (exit 2).

    The CLI prints one line per invalid file (`lines()`), then a summary, so
    an operator fixes them all before the next run instead of one a run.
    """

    exit_code = 2

    def __init__(self, errors: list[DefinitionError], checked: int, outcome: str = "") -> None:
        self.errors = errors
        self.checked = checked
        super().__init__(f"{len(errors)} of {checked} definition files are invalid{outcome}")

    def lines(self) -> list[str]:
        return [*(str(error) for error in self.errors), str(self)]


class NotFoundError(WfschedError, LookupError):
    """A schedule or run does not exist (exit 3)."""

    exit_code = 3


class ConflictError(WfschedError):
    """Stale revision, id taken, deleted schedule, store owned (exit 4)."""

    exit_code = 4


class StoreError(WfschedError):
    """The store is unusable: newer schema, corrupt row, unsupported locking."""

    exit_code = 1


class StoreUnavailable(StoreError):
    """The store cannot be used right now, for a reason outside wfsched: its
    filesystem is full or read-only, the disk fails, the database is held
    locked by another process, a process limit is reached.

    A resource fault: the operation failed (exit 1) and may succeed when the
    operator has fixed the cause, which the message names. `kind` is one of
    `disk-full`, `read-only`, `io-error`, `locked`, `unreachable`, `fd-limit`,
    `process-limit`, `no-memory` (the supervisor's fault episodes use it).
    """

    exit_code = 1

    def __init__(self, kind: str, message: str, where: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.where = where
        """The directory whose filesystem failed, when the system named it (a
        run directory may live on another filesystem than the database)."""


class CalendarError(WfschedError, ValueError):
    """The calendar library answered something we refuse to act on.

    Raised for a backward or non-advancing answer; the supervisor blocks the
    schedule with this message instead of making silent progress.
    """

    exit_code = 1


class ZoneUnavailable(WfschedError, ValueError):
    """A stored schedule's time zone does not resolve on this host.

    Earlier releases accepted any zone file the host listed; a name can also
    leave the tz database. The schedule stays readable, pausable, deletable
    and updatable; what needs its calendar (deciding, resume, `next`) says
    which zone and to update the schedule.
    """

    exit_code = 1


class CalendarExhausted(WfschedError):
    """The expression has no further instant (croniter's CroniterBadDateError).

    At create time this is a definition error ("never fires"); later it makes
    the schedule `exhausted`.
    """

    exit_code = 1


class EndOfTime(CalendarExhausted):
    """The calendar ran off the years 1-9999, the instants wfsched represents.

    Near year 9999 croniter overflows instead of answering; that is the end
    of the calendar like any other, and a query there is told so plainly.
    """


class StoreConnectionLost(StoreUnavailable):
    """The store's database cannot be reached or the connection was lost (exit 1).

    Raised by a networked store (PostgreSQL): the server restarted, stopped,
    refuses connections or cannot be reached. A resource fault of kind
    `unreachable`: the supervisor rides it out as a fault episode (it
    reconnects, with backoff, and takes ownership again), a command reports
    it as its one line.
    """

    def __init__(self, message: str) -> None:
        super().__init__("unreachable", message)


class LeaseLost(WfschedError):
    """A leader's transaction found its lease gone (exit 1): another supervisor
    took over (a newer epoch) or the lease expired. The transaction was rolled
    back; the supervisor that gets this becomes a standby at once."""
