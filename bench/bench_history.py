"""History growth: does a large ledger slow ticks or paging, and how fast does
`prune` remove it?

    python bench/bench_history.py                       # 1,000,000 rows, 100,000 runs (~3 min)
    python bench/bench_history.py --occurrences 100000 --runs 10000 --repeat 11   # quick

Three stores, each seeded through SQLiteStore methods with 1 busy schedule (`hot`,
every minute) plus 100 others (daily):

- empty: no history at all;
- small: `hot` has 1,000 occurrence rows (100 finished runs);
- grown: `hot` has --occurrences rows (every 10th an admitted run that
  completed, --runs in all, each with one attempt; the rest skipped-overlap),
  spanning ~694 days that end now; --dirs of the old runs get a run directory.

Measured on each (medians over --repeat):

- `Supervisor.tick()` in-process with the fake control of tests/fakes.py,
  on a due `hot` (each tick ingests the previous run's exit, admits one
  instant, prepares its run directory and "launches" it), and the store
  queries a tick runs (`due_schedules`, `active_run_counts`,
  `executing_count`, `pending_requests`, `unfinished_runs`, `earliest_due_schedule`);
- `Admin.occurrences("hot", limit=100)`: first, middle and last page (small,
  grown, pruned); ratios against empty (tick, queries) and small (paging).

Then `prune --older-than 30d` on the grown store: a dry run, 20 bounded calls
(`max_batches=1`, what a supervisor would do per tick), one unbounded call for
the rest (rows/s, and the longest write transaction, i.e. how long a
supervisor could be kept waiting), then the cost of a prune that finds
nothing; and everything above again on the pruned store. Last, EXPLAIN QUERY
PLAN of every statement those calls ran (captured from the store's own
connection), flagging full scans.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import re
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes import Clock, FakeControl  # noqa: E402
from wfsched.api.admin import Admin  # noqa: E402
from wfsched.api.paging import encode_cursor  # noqa: E402
from wfsched.api.retention import PruneReport, prune  # noqa: E402
from wfsched.api.run_ops import Runs  # noqa: E402
from wfsched.daemon.supervisor import Supervisor  # noqa: E402
from wfsched.domain.config import SupervisorConfig  # noqa: E402
from wfsched.domain.definition import parse_definition  # noqa: E402
from wfsched.domain.timeutil import parse_duration  # noqa: E402
from wfsched.store import SQLiteStore, run_id  # noqa: E402
from wfsched.store.rundirs import RunDir  # noqa: E402

MINUTE = 60
DAY = 86400
T_END = 1_790_000_040 - 1_790_000_040 % MINUTE  # 2026-09-21, a whole minute
OTHERS = 100
RUN_EVERY = 10
INVOCATION = json.dumps(
    {
        "command": ["true"],
        "cwd": None,
        "env": {},
        "input": {},
        "timeout": None,
        "kill_grace": 10,
        "interrupt_exit_code": None,
    }
)


# -- seeding --------------------------------------------------------------------------


def create_schedules(store: SQLiteStore, start: int) -> None:
    admin = Admin(store, Clock(start))
    texts = ['id = "hot"\n[trigger]\ncron = "* * * * *"\n[run]\ncommand = ["true"]\n']
    texts += [
        f'id = "other-{i:03d}"\n[trigger]\ncron = "{i % 60} 3 * * *"\n[run]\ncommand = ["true"]\n'
        for i in range(OTHERS)
    ]
    for text in texts:
        admin.create(parse_definition(text, "bench.toml", now=start))


def seed(root: Path, occurrences: int, runs: int, dirs: int) -> SQLiteStore:
    """`hot` gets `occurrences` instants ending at T_END; every
    RUN_EVERY-th of the last `runs * RUN_EVERY` is a completed run."""
    start = T_END - occurrences * MINUTE
    store = SQLiteStore(root)
    create_schedules(store, start - MINUTE)
    run_from = occurrences - runs * RUN_EVERY
    chunk = 50_000
    made_runs: list[int] = []
    for low in range(0, occurrences, chunk):
        rows: list[tuple[Any, ...]] = []
        with store.atomic():
            for i in range(low, min(low + chunk, occurrences)):
                at = start + (i + 1) * MINUTE
                if i >= run_from and (i - run_from) % RUN_EVERY == 0:
                    seq = store.insert_run("hot", "scheduled", at, 1, INVOCATION, at + 0.01)
                    store.insert_attempt(seq, 1, at + 0.02)
                    store.update_attempt(seq, 1, state="completed", finished_at=at + 5, exit_code=0)
                    store.update_run(
                        seq,
                        state="completed",
                        exit_code=0,
                        started_at=at + 0.02,
                        finished_at=at + 5,
                        attempt=1,
                    )
                    made_runs.append(seq)
                    rows.append(("hot", at, None, None, 0, "admitted", None, 1, seq, at + 0.01))
                else:
                    rows.append(
                        (
                            "hot",
                            at,
                            None,
                            None,
                            0,
                            "skipped-overlap",
                            "a run of this schedule is unfinished",
                            1,
                            None,
                            at,
                        )
                    )
            store.insert_occurrences(rows)
    with store.atomic():
        store.update_schedule("hot", consumed_through=T_END, next_due=T_END + MINUTE)
    # Directories for the oldest runs (the ones prune will remove).
    for seq in made_runs[:dirs]:
        rundir = RunDir(store.runs_dir, run_id(seq))
        rundir.prepare({})
        log = Path(rundir.prepare_attempt(1)) / "stdout.log"
        log.write_text("output\n" * 20)
    return store


# -- measuring ------------------------------------------------------------------------


def median_seconds(fn: Callable[[], Any], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


class TickBench:
    """A supervisor over the store; each tick admits the next `hot` instant."""

    def __init__(self, store: SQLiteStore) -> None:
        self.store = store
        self.clock = Clock(T_END + 1)
        self.control = FakeControl()
        self.supervisor = Supervisor(
            store,
            SupervisorConfig(),
            self.control,
            clock=self.clock,
            log=lambda *_, **__: None,
        )
        self.supervisor.tick()  # the startup tick
        row = store.get_schedule("hot")
        assert row is not None
        self.next_at = row.next_due or T_END + MINUTE

    def tick_samples(self, repeat: int) -> list[float]:
        samples = []
        for _ in range(repeat):
            self._finish_previous()
            self.clock.set(self.next_at)
            t0 = time.perf_counter()
            self.supervisor.tick()
            samples.append(time.perf_counter() - t0)
            self.next_at += MINUTE
        self._finish_previous()
        self.clock.set(self.next_at - MINUTE + 1)
        self.supervisor.tick()
        assert len(self.control.spawned) >= repeat, "a measured tick admitted nothing"
        return samples

    def _finish_previous(self) -> None:
        if not self.control.spawned:
            return
        spec, handle = self.control.spawned[-1]
        if handle.pid not in self.control.alive_pids:
            return
        self.control.finish(spec.run_id)
        record = Path(spec.record_dir) / "exit.json"
        document = json.loads(record.read_text())
        document.update(started_at=self.clock() + 0.1, finished_at=self.clock() + 1)
        record.write_text(json.dumps(document))


def query_timings(store: SQLiteStore, repeat: int) -> dict[str, float]:
    hot = store.get_schedule("hot")
    now = hot.next_due if hot is not None and hot.next_due is not None else T_END
    ids = [row.id for row in store.due_schedules(T_END + 10 * MINUTE, limit=100_000)] or ["hot"]
    calls: dict[str, Callable[[], Any]] = {
        "due_schedules": lambda: store.due_schedules(now, limit=100_000),
        "active_run_counts": lambda: store.active_run_counts(ids),
        "executing_count": store.executing_count,
        "pending_requests": store.pending_requests,
        "unfinished_runs": store.unfinished_runs,
        "earliest_due_schedule": store.earliest_due_schedule,
    }
    return {name: median_seconds(fn, repeat) for name, fn in calls.items()}


def page_keys(store: SQLiteStore) -> dict[str, str | None]:
    """Cursors for the first, middle and last page of `hot`."""
    total = history_rows(store, "hot")
    keys: dict[str, str | None] = {"first": None}
    for name, index in (("middle", total // 2), ("last", max(0, total - 100))):
        position = nth_position(store, index)
        keys[name] = encode_cursor(pos=position) if position is not None else None
    return keys


def history_rows(store: SQLiteStore, schedule_id: str) -> int:
    conn = store._conn  # bench-only peek; the product has no count query
    return int(
        conn.execute(
            "SELECT COUNT(*) FROM occurrences WHERE schedule_id = ?", (schedule_id,)
        ).fetchone()[0]
    )


def nth_position(store: SQLiteStore, index: int) -> int | None:
    """The ledger position of the index-th row of `hot` (history order)."""
    if index <= 0:
        return None
    row = store._conn.execute(
        "SELECT ledger_pos FROM occurrences WHERE schedule_id = 'hot'"
        " ORDER BY ledger_pos LIMIT 1 OFFSET ?",
        (index - 1,),
    ).fetchone()
    return int(row[0]) if row else None


def paging_timings(store: SQLiteStore, repeat: int) -> dict[str, float]:
    admin = Admin(store, Clock(T_END))
    timings = {}
    for name, cursor in page_keys(store).items():
        if name != "first" and cursor is None:
            continue
        items, _ = admin.occurrences("hot", limit=100, cursor=cursor)
        assert items, f"{name} page is empty"
        timings[f"occurrences {name} page"] = median_seconds(
            functools.partial(admin.occurrences, "hot", limit=100, cursor=cursor), repeat
        )
    runs = Runs(store, Clock(T_END))
    timings["runs list first page"] = median_seconds(lambda: runs.list(limit=100), repeat)
    timings["list (schedules)"] = median_seconds(admin.schedules, max(3, repeat // 3))
    return timings


def measure(label: str, store: SQLiteStore, repeat: int, paging: bool = True) -> dict[str, float]:
    figures: dict[str, float] = {}
    bench = TickBench(store)
    figures["tick (due hot, ingest+admit+launch)"] = statistics.median(bench.tick_samples(repeat))
    figures.update(query_timings(store, repeat * 5))
    if paging:
        figures.update(paging_timings(store, repeat))
    print(f"  measured {label}")
    return figures


# -- prune --------------------------------------------------------------------------


@contextlib.contextmanager
def timed_transactions(store: SQLiteStore, durations: list[float]) -> Iterator[None]:
    """Time every top-level write transaction prune opens (the supervisor
    waits at most that long for the write lock)."""
    original = store.atomic

    @contextlib.contextmanager
    def atomic() -> Iterator[None]:
        outer = not store._conn.in_transaction
        t0 = time.perf_counter()
        with original():
            yield
        if outer:
            durations.append(time.perf_counter() - t0)

    store.atomic = atomic  # type: ignore[method-assign]
    try:
        yield
    finally:
        del store.atomic


def rows_of(report: PruneReport) -> int:
    return report.occurrences + report.runs + report.attempts


@contextlib.contextmanager
def timed_rmtree(spent: list[float]) -> Iterator[None]:
    """Time spent removing run directories (file-system work, no lock held)."""
    original = shutil.rmtree

    def rmtree(path: Any, *args: Any, **kwargs: Any) -> None:
        t0 = time.perf_counter()
        try:
            original(path, *args, **kwargs)
        finally:
            spent.append(time.perf_counter() - t0)

    shutil.rmtree = rmtree  # type: ignore[assignment]
    try:
        yield
    finally:
        shutil.rmtree = original


def bench_prune(store: SQLiteStore, now: float, bound: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    t0 = time.perf_counter()
    dry = prune(store, bound, now, dry_run=True)
    out["dry_run_s"] = time.perf_counter() - t0
    out["dry"] = dry
    transactions: list[float] = []
    calls: list[float] = []
    total = PruneReport(cutoff=now - bound, dry_run=False)
    rmtree_s: list[float] = []
    with timed_transactions(store, transactions), timed_rmtree(rmtree_s):
        for _ in range(20):
            t0 = time.perf_counter()
            step = prune(store, bound, now, max_batches=1)
            calls.append(time.perf_counter() - t0)
            _add(total, step)
        t0 = time.perf_counter()
        rest = prune(store, bound, now)
        out["rest_s"] = time.perf_counter() - t0
        _add(total, rest)
    out["rmtree_s"] = rmtree_s
    out["bounded_call_s"] = calls
    out["transactions_s"] = transactions
    out["rest"] = rest
    out["total"] = total
    out["noop_s"] = median_seconds(lambda: prune(store, bound, now), 5)
    assert not prune(store, bound, now).removed_anything
    return out


def _add(total: PruneReport, step: PruneReport) -> None:
    for name in ("runs", "attempts", "occurrences", "run_dirs", "summary_rows", "batches"):
        setattr(total, name, getattr(total, name) + getattr(step, name))


# -- query plans ------------------------------------------------------------------------


class RecordingConnection:
    """Stands in for the store's connection and records each statement with
    its parameters, so the plans below are those of the statements as bound.

    (Explaining the trace callback's expanded SQL would mislead: with the
    values written as literals SQLite can use a partial index that it does
    not use for the same statement with bound parameters.)
    """

    def __init__(self, conn: sqlite3.Connection, seen: list[tuple[str, Any]]) -> None:
        self._conn = conn
        self._seen = seen

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        self._seen.append((sql, params))
        return self._conn.execute(sql, params)

    def executemany(self, sql: str, rows: Any) -> sqlite3.Cursor:
        return self._conn.executemany(sql, rows)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def capture_plans(store: SQLiteStore, now: float, bound: float) -> dict[str, list[str]]:
    """EXPLAIN QUERY PLAN of each distinct statement the measured calls run."""
    seen: list[tuple[str, Any]] = []
    conn = store._conn
    store._conn = RecordingConnection(conn, seen)  # type: ignore[assignment]
    try:
        bench = TickBench(store)
        bench.tick_samples(1)
        paging_timings(store, 1)
        prune(store, bound, now, dry_run=True)
        prune(store, bound, now, max_batches=1)
    finally:
        store._conn = conn
    plans: dict[str, list[str]] = {}
    for sql, params in seen:
        head = sql.lstrip().split(None, 1)[0].upper()
        if head not in ("SELECT", "UPDATE", "DELETE", "INSERT"):
            continue
        key = _shape(" ".join(sql.split()))
        if key in plans:
            continue
        try:
            rows = conn.execute(f"EXPLAIN QUERY PLAN {sql}", params).fetchall()
        except sqlite3.Error as exc:
            plans[key] = [f"(cannot explain: {exc})"]
            continue
        plans[key] = [row[3] for row in rows]
    return plans


def _shape(sql: str) -> str:
    """Placeholder lists collapsed, so statements differing only in their
    number of values are explained once."""
    return re.sub(r"\(\?(,\s*\?)+\)", "(?...)", sql)


# -- report ---------------------------------------------------------------------------


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.3f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--occurrences", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--dirs", type=int, default=10_000, help="old runs given a directory")
    parser.add_argument("--repeat", type=int, default=31)
    parser.add_argument("--older-than", default="30d", help="prune bound (default 30d)")
    parser.add_argument("--keep", action="store_true", help="keep the stores")
    parser.add_argument("--plans", action="store_true", help="print every query plan")
    args = parser.parse_args()
    if args.runs * RUN_EVERY > args.occurrences:
        parser.error("--runs * 10 must not exceed --occurrences")

    scratch = Path(tempfile.mkdtemp(prefix="wfsched-bench-history-"))
    try:
        print(f"stores under {scratch}")
        t0 = time.perf_counter()
        empty = seed(scratch / "empty", 0, 0, 0)
        small = seed(scratch / "small", 1000, 100, 0)
        grown = seed(scratch / "grown", args.occurrences, args.runs, args.dirs)
        size = (scratch / "grown" / "wfsched.db").stat().st_size
        print(
            f"seeded in {time.perf_counter() - t0:.1f}s: grown has {args.occurrences:,}"
            f" occurrence rows, {args.runs:,} runs, {args.dirs:,} run directories,"
            f" {OTHERS + 1} schedules; database {size / 2**20:.0f} MiB"
        )
        results = {
            "empty": measure("empty", empty, args.repeat, paging=False),
            "small": measure("small", small, args.repeat),
            "grown": measure("grown", grown, args.repeat),
        }
        now = float(T_END + 3 * DAY)
        bound = float(parse_duration(args.older_than))
        plans = capture_plans(grown, now, bound)
        pr = bench_prune(grown, now, bound)
        results["pruned"] = measure("pruned", grown, args.repeat)
        report(results, pr, args)
        print_plans(plans, args.plans)
        for store in (empty, small, grown):
            store.close()
    finally:
        if args.keep:
            print(f"kept: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


def report(results: dict[str, dict[str, float]], pr: dict[str, Any], args: Any) -> None:
    names = list(results["grown"])
    print("\nmedians (ratio = grown / baseline, pruned / baseline; baseline = empty store for")
    print("the tick and its queries, the 1,000-row store for pages and listings)")
    stages = ("empty", "small", "grown", "pruned")
    print(f"  {'ms':38}" + "".join(f"{stage:>10}" for stage in stages) + "   grown x  pruned x")
    for name in names:
        base_key = "small" if ("page" in name or name.startswith("list")) else "empty"
        base = results[base_key].get(name)
        cells = ""
        for stage in stages:
            value = results[stage].get(name)
            cells += f"{value * 1000:10.3f}" if value is not None else f"{'-':>10}"
        ratios = ""
        for stage in ("grown", "pruned"):
            value = results[stage].get(name)
            ratios += f"  x{value / base:6.2f}" if base and value is not None else "        -"
        print(f"  {name:38}{cells} {ratios}")

    total: PruneReport = pr["total"]
    dry: PruneReport = pr["dry"]
    elapsed = sum(pr["bounded_call_s"]) + pr["rest_s"]
    print(f"\nprune --older-than {args.older_than} on the grown store")
    print(
        f"  dry run: {pr['dry_run_s']:.2f}s, would remove {dry.occurrences:,} occurrence rows,"
        f" {dry.runs:,} runs, {dry.attempts:,} attempts, {dry.run_dirs:,} run directories"
    )
    print(
        f"  removed: {total.occurrences:,} occurrence rows, {total.runs:,} runs,"
        f" {total.attempts:,} attempts, {total.run_dirs:,} run directories;"
        f" {total.summary_rows} `pruned` row writes, {total.batches} batches"
    )
    dirs_s = sum(pr["rmtree_s"])
    db_s = elapsed - dirs_s
    print(
        f"  throughput: {rows_of(total) / elapsed:,.0f} rows/s over {elapsed:.2f}s in all;"
        f" database work alone {rows_of(total) / db_s:,.0f} rows/s"
        f" ({total.occurrences / db_s:,.0f} occurrence rows/s) over {db_s:.2f}s"
    )
    if total.run_dirs:
        print(
            f"  run directories: {total.run_dirs / dirs_s:,.0f}/s,"
            f" {dirs_s / total.run_dirs * 1000:.2f} ms each, {dirs_s:.2f}s in all"
            " (file-system work, no lock held)"
        )
    calls = pr["bounded_call_s"]
    print(
        f"  a bounded call (max_batches=1, 500 rows): median {ms(statistics.median(calls))},"
        f" max {ms(max(calls))}"
    )
    tx = pr["transactions_s"]
    if tx:
        print(
            f"  write transactions: {len(tx)}, median {ms(statistics.median(tx))},"
            f" p99 {ms(sorted(tx)[int(len(tx) * 0.99) - 1 if len(tx) > 1 else 0])},"
            f" max {ms(max(tx))} (the longest a supervisor waits for the lock)"
        )
    print(f"  a prune that finds nothing (periodic cost): {ms(pr['noop_s'])}")
    if dry.runs != total.runs or dry.occurrences != total.occurrences:
        print("  !! the dry run predicted different counts")


HISTORY_SCAN = re.compile(r"^SCAN (runs|occurrences|attempts|r|o)\b")
WHOLE_SCHEDULE = re.compile(
    r"^SEARCH (runs|r) USING (COVERING )?INDEX runs_schedule \(schedule_id=\?\)$"
)


def plan_verdict(sql: str, plan: list[str]) -> str:
    """How a statement's cost grows with history (runs, occurrences, attempts)."""
    bounded = " LIMIT " in sql and not any("TEMP B-TREE" in step for step in plan)
    if any(HISTORY_SCAN.match(step) for step in plan):
        return "scan, stops at LIMIT" if bounded else "SCAN: grows with history"
    if any(WHOLE_SCHEDULE.match(step) for step in plan) and not bounded:
        return "READS ALL RUNS OF THE SCHEDULE"
    return "ok"


def print_plans(plans: dict[str, list[str]], everything: bool) -> None:
    print("\nquery plans (statements run by a tick, paging, listing and prune, as bound)")
    flagged = 0
    for sql, plan in plans.items():
        verdict = plan_verdict(sql, plan)
        if verdict.isupper() or verdict.startswith("SCAN:"):
            flagged += 1
        elif not everything:
            continue
        print(f"  [{verdict}] {sql[:240]}")
        for step in plan:
            print(f"      {step}")
    if not everything:
        print(f"  ({len(plans) - flagged} other statements are index seeks; --plans prints all)")


if __name__ == "__main__":
    sys.exit(main())
