"""What the supervisor tells an observer about the facts it commits.

The supervisor calls these at the few places where it commits a fact (a
schedule decided or blocked, a run launched or ended) and once per tick.
This base class does nothing, so a supervisor without metrics pays a method
call and no more; `wfsched.daemon.metrics.Metrics` is the real one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wfsched.store import Store


class Observer:
    paces_ticks = False
    """Whether something judges the loop by a tick every poll interval (the
    metrics' health check): the loop then never sleeps longer while idle."""

    def started(self, store: Store) -> None:
        """Ownership taken, before recovery: derive what the store already holds."""

    def ticked(self, seconds: float | None) -> None:
        """A tick ended (None: a drain step, no tick duration to record)."""

    def sleeping(self, due_in: float | None) -> None:
        """The loop is about to sleep until an instant due in `due_in`
        seconds (None: the sleep ends without one). Until the next call it
        is near that instant or admitting it: latency-bound."""

    def leadership(self, leading: bool, epoch: int | None) -> None:
        """This supervisor started leading (with the lease's epoch; None
        without a lease) or stood by."""

    def schedule_changed(self, schedule_id: str) -> None:
        """The tick decided or blocked this schedule (next due, blocked...)."""

    def run_launched(self, seq: int) -> None:
        """An attempt of this run was marked running and its shim started."""

    def run_ended(self, seq: int) -> None:
        """This run's end (or interruption) was committed."""

    def fault_opened(self, kind: str) -> None:
        """A resource-fault episode of this kind began (one call per episode)."""

    def fault_closed(self) -> None:
        """The open resource-fault episode ended."""
