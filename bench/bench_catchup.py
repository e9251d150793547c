"""Catch-up: a per-minute schedule after three years of downtime.

    python bench/bench_catchup.py               # in-process ticks + the real supervisor
    python bench/bench_catchup.py --repeat 10 --years 10
    python bench/bench_catchup.py --no-real     # in-process only

The past is built, not waited for: the schedule (`* * * * *`) is created
through `Admin(store, clock=lambda: then)` with `then` = now - 3 years, so
its watermark (`consumed_through`) is three years old. Then:

- restart: a fresh `Supervisor` (wall clock, a ProcessControl that starts
  nothing) runs recovery and its first tick, the startup tick
  (docs/semantics.md, "Startup after downtime");
- clock jump: a supervisor already running at `then` sees the wall clock
  leap three years between two ticks (the `catch-up-jump` path of 4.1);
- real: `wfsched supervise` on such a store, stopped with SIGTERM once the
  ledger has its rows (the delay is read from its JSON event log).

Each in-process scenario is timed with time.perf_counter() around
Supervisor.tick(), on a fresh store per repetition, for misfire = skip and
misfire = latest; the ledger rows the tick wrote are counted and shown.

Targets (issue): the first tick < 50 ms and ONE summary row.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import (
    NullControl,
    Verdicts,
    cron_definition,
    load_note,
    log_events,
    report_log_problems,
    start_supervisor,
    stop_supervisor,
    temp_store,
    wait_for,
)

from wfsched.api.admin import Admin
from wfsched.daemon.supervisor import Supervisor
from wfsched.domain.config import SupervisorConfig
from wfsched.domain.definition import parse_definition
from wfsched.domain.timeutil import format_instant
from wfsched.store import SQLiteStore

YEAR = 365 * 86400


class SettableClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def make_store(root: Path, misfire: str, then: float) -> SQLiteStore:
    store = SQLiteStore(root)
    text = cron_definition(
        f"minutely-{misfire}",
        "* * * * *",
        ["/bin/true"],
        extra=f'[policy]\nmisfire = "{misfire}"\n',
    )
    admin = Admin(store, clock=lambda: then)
    admin.create(parse_definition(text, "minutely.toml", now=int(then)))
    return store


def ledger(store: SQLiteStore, schedule_id: str) -> list[tuple]:
    return store._conn.execute(  # a read-only peek at the ledger, for the report
        "SELECT seq, state, reason, scheduled_at, last_at, count, summary FROM occurrences"
        " WHERE schedule_id = ? ORDER BY seq",
        (schedule_id,),
    ).fetchall()


def describe(rows: list[tuple]) -> str:
    out = []
    for _seq, state, reason, first, last, count, summary in rows:
        span = (
            f"{format_instant(first)}..{format_instant(last)} count={count}"
            if summary
            else format_instant(first)
        )
        out.append(f"{'summary ' if summary else ''}{state}({reason}) {span}")
    return "; ".join(out)


def one_scenario(scenario: str, misfire: str, years: float) -> tuple[float, list[tuple], int]:
    """(seconds of the measured tick, ledger rows it wrote, runs admitted)."""
    with tempfile.TemporaryDirectory(prefix="wfsched-bench-catchup-") as tmp:
        now = time.time()
        then = now - years * YEAR
        store = make_store(Path(tmp), misfire, then)
        control = NullControl()
        clock = SettableClock(then + 1 if scenario == "clock-jump" else now)
        sup = Supervisor(store, SupervisorConfig(), control, clock=clock, log=lambda *a, **k: None)
        sup.recover()
        if scenario == "clock-jump":
            sup.tick()  # the startup tick, one second after creation: nothing due
            clock.now = now
        before = len(ledger(store, f"minutely-{misfire}"))
        t0 = time.perf_counter()
        sup.tick()
        elapsed = time.perf_counter() - t0
        rows = ledger(store, f"minutely-{misfire}")[before:]
        runs = len(control.spawned)
        control.stop()
        store.close()
        return elapsed, rows, runs


def real_supervisor(misfire: str, years: float, keep: bool) -> tuple[float | None, list[tuple]]:
    with temp_store(keep, "wfsched-bench-catchup-real-") as root:
        store_dir = root / "store"
        then = time.time() - years * YEAR
        make_store(store_dir, misfire, then).close()
        sup = start_supervisor(store_dir, root / "supervisor.log")
        try:
            db = SQLiteStore(store_dir, create=False)
            wait_for(lambda: len(ledger(db, f"minutely-{misfire}")) > 0, 10)
            time.sleep(0.5)
            rows = ledger(db, f"minutely-{misfire}")
            db.close()
        finally:
            rc = stop_supervisor(sup)
        events = log_events(sup)
        started = next((e for e in events if e.get("event") == "started"), None)
        first = next((e for e in events if e.get("event") in ("skipped-misfire", "admitted")), None)
        delay = None
        if started and first:
            delay = _event_seconds(first["time"]) - _event_seconds(started["time"])
        report_log_problems(sup, expected=("skipped-misfire",))
        if rc != 0:
            print(f"!! supervisor exited {rc} on SIGTERM")
        return delay, rows


def _event_seconds(text: str) -> float:
    from wfsched.domain.timeutil import parse_instant

    return parse_instant(text[:19] + "Z") + float(text[19:-1] or 0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--years", type=float, default=3.0, help="downtime [3]")
    parser.add_argument("--repeat", type=int, default=5, help="fresh stores per case [5]")
    parser.add_argument("--no-real", action="store_true", help="skip the real supervisor")
    parser.add_argument("--keep", action="store_true", help="keep the real run's directory")
    args = parser.parse_args()
    print(f"{args.years:g} years of downtime, `* * * * *`; {load_note()}")
    verdicts = Verdicts()
    for scenario in ("restart", "clock-jump"):
        for misfire in ("skip", "latest"):
            times, last_rows, runs = [], [], 0
            for _ in range(args.repeat):
                elapsed, rows, runs = one_scenario(scenario, misfire, args.years)
                times.append(elapsed)
                last_rows = rows
            summaries = [r for r in last_rows if r[6]]
            label = f"{scenario}, misfire={misfire}"
            print(
                f"\n{label}: first tick median {statistics.median(times) * 1e3:.1f} ms,"
                f" max {max(times) * 1e3:.1f} ms ({args.repeat} fresh stores);"
                f" {len(last_rows)} ledger row(s), {len(summaries)} summary, {runs} run(s)"
            )
            print(f"  rows: {describe(last_rows)}")
            verdicts.check(f"{label}: first tick (max)", max(times) * 1000, 50, "ms")
            verdicts.require(
                f"{label}: one summary row",
                len(summaries) == 1,
                f"{len(summaries)} summary / {len(last_rows)} rows",
            )
    if not args.no_real:
        for misfire in ("skip", "latest"):
            delay, rows = real_supervisor(misfire, args.years, args.keep)
            summaries = [r for r in rows if r[6]]
            shown = f"{delay * 1e3:.0f} ms" if delay is not None else "?"
            print(
                f"\nreal supervisor, misfire={misfire}: first ledger event {shown} after"
                f" `started`; {len(rows)} row(s): {describe(rows)}"
            )
            verdicts.require(
                f"real, misfire={misfire}: one summary row",
                len(summaries) == 1,
                f"{len(summaries)} summary / {len(rows)} rows",
            )
    return verdicts.print()


if __name__ == "__main__":
    sys.exit(main())
