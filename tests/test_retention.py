"""Retention (`wfsched prune`): what goes, what stays, and the ledger after.

The store is built by the real supervisor loop with a fake process control
and an injected clock (as in test_supervisor_loop), so runs, attempts, run
directories and ledger rows are the ones production writes. No processes,
no sleeps.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import CliRun, SettableClock

from tests.fakes import Clock, FakeControl
from wfsched.api.admin import Admin
from wfsched.api.retention import prune
from wfsched.api.run_ops import Runs
from wfsched.daemon.supervisor import Supervisor
from wfsched.domain.config import SupervisorConfig
from wfsched.domain.definition import parse_definition
from wfsched.store import SQLiteStore, Store

T0 = int(datetime(2026, 1, 5, 9, 0, tzinfo=UTC).timestamp())
HOUR = 3600
DAY = 86400
NOW = T0 + 60 * DAY
BOUND = 30 * DAY
CUTOFF = NOW - BOUND

A = (
    'id = "a"\n[trigger]\ncron = "0 * * * *"\n[run]\ncommand = ["true"]\n'
    'interrupt_exit_code = 75\n[policy]\noverlap = "parallel"\nmax_active_runs = 5\n'
)
B = 'id = "b"\n[trigger]\ncron = "30 * * * *"\n[run]\ncommand = ["true"]\n'


class Builder:
    """A store whose history is built by the supervisor at chosen instants."""

    def __init__(self, root: Path, open_store: Callable[[Path], Store] = SQLiteStore) -> None:
        self.root = root
        self.clock = Clock(T0 - 30)
        self.store = open_store(root)
        self.admin = Admin(self.store, self.clock)
        self.runs = Runs(self.store, self.clock)
        self.control = FakeControl()
        self.supervisor = Supervisor(
            self.store,
            SupervisorConfig(),
            self.control,
            clock=self.clock,
            log=lambda *_, **__: None,
        )
        self.supervisor.tick()

    def define(self, text: str) -> None:
        self.admin.create(parse_definition(text, "x.toml", now=int(self.clock())))

    def tick(self, instant: float) -> None:
        self.clock.set(instant)
        self.supervisor.tick()

    def finish(self, run: str, exit_code: int, at: float) -> None:
        """The shim ends at `at` (the exit record carries the finish time)."""
        self.control.finish(run, exit_code)
        spec, _ = self.control.spec(run)
        record = Path(spec.record_dir) / "exit.json"
        document = json.loads(record.read_text())
        document.update(started_at=at - 5, finished_at=at)
        record.write_text(json.dumps(document))
        self.tick(at)

    def run_state(self, run: str) -> str:
        return str(self.runs.show(run)["state"])


def build(root: Path, open_store: Callable[[Path], Store] = SQLiteStore) -> Builder:
    """Old history (day 0) and new history (day 59) for schedules a and b.

    run-000001 a@T0        completed (old)
    run-000002 b@T0+30m    failed    (old; b skips overlapping instants meanwhile)
    run-000003 a@T0+1h     interrupted (old, unfinished: stays)
    run-000004 a@T0+2h     running     (old, unfinished: stays)
    run-000005 b@T0+150m   completed (old)
    run-000006 a manual    completed (old; no ledger row)
    run-000007 a@T0+3h     completed (old)
    then both paused until day 59, and new runs for a and b.
    """
    b = Builder(root, open_store)
    b.define(A)
    b.define(B)
    b.tick(T0)  # run-1
    b.finish("run-000001", 0, T0 + 60)
    b.tick(T0 + 30 * 60)  # run-2 (b), keeps running
    b.tick(T0 + HOUR)  # run-3
    b.finish("run-000003", 75, T0 + HOUR + 60)  # interrupted
    b.tick(T0 + 90 * 60)  # b: skipped-overlap
    b.tick(T0 + 2 * HOUR)  # run-4, never finishes
    b.finish("run-000002", 3, T0 + 2 * HOUR + 60)
    b.tick(T0 + 150 * 60)  # run-5 (b)
    b.finish("run-000005", 0, T0 + 150 * 60 + 60)
    b.clock.set(T0 + 160 * 60)
    b.runs.request_trigger("a")
    b.tick(T0 + 160 * 60)  # run-6 (manual)
    b.finish("run-000006", 0, T0 + 161 * 60)
    b.tick(T0 + 3 * HOUR)  # run-7
    b.finish("run-000007", 0, T0 + 3 * HOUR + 60)
    b.clock.set(T0 + 3 * HOUR + 120)
    b.admin.pause("a")
    b.admin.pause("b")
    b.clock.set(NOW - DAY - 10)
    b.admin.resume("a")
    b.admin.resume("b")
    b.tick(NOW - DAY)  # run-8 (a)
    b.finish("run-000008", 0, NOW - DAY + 60)
    b.tick(NOW - DAY + 30 * 60)  # run-9 (b)
    b.finish("run-000009", 0, NOW - DAY + 31 * 60)
    b.clock.set(NOW)
    assert b.run_state("run-000003") == "interrupted"
    assert b.run_state("run-000004") == "running"
    return b


OLD_FINISHED = ["run-000001", "run-000002", "run-000005", "run-000006", "run-000007"]
KEPT = ["run-000003", "run-000004", "run-000008", "run-000009"]


@pytest.fixture
def built(tmp_path: Path) -> Builder:
    """SQLite only: the tests using it compare the database file's rows."""
    return build(tmp_path / "store")


@pytest.fixture
def built_any(tmp_path: Path, make_store: Callable[[Path], Store]) -> Builder:
    """On both backends."""
    return build(tmp_path / "store", make_store)


def dump(root: Path) -> tuple[list[str], list[tuple[str, float, int]]]:
    """Every row (a fresh connection reads what is committed) and every file."""
    conn = sqlite3.connect(root / "wfsched.db")
    try:
        rows = list(conn.iterdump())
    finally:
        conn.close()
    files = []
    for dirpath, dirnames, filenames in os.walk(root / "runs"):
        for name in sorted(dirnames + filenames):
            path = Path(dirpath) / name
            info = path.lstat()
            files.append((str(path.relative_to(root)), info.st_mtime, info.st_size))
    return rows, sorted(files)


def ledger(
    store: Store, schedule_id: str
) -> list[tuple[int, int | None, int | None, str, int | None]]:
    """(first, last, count, state, run_seq) in ledger order."""
    rows = store.page_occurrences(schedule_id, None, 10_000)
    return [(r.scheduled_at, r.last_at, r.count, r.state, r.run_seq) for r in rows]


def table_rows(root: Path, table: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(root / "wfsched.db")
    try:
        return conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
    finally:
        conn.close()


def run_dirs(store: Store) -> list[str]:
    return sorted(path.name for path in store.runs_dir.iterdir())


def pruned_rows(store: Store, schedule_id: str) -> list[tuple[int, int | None, int | None]]:
    return [
        (f, last, c) for f, last, c, state, _ in ledger(store, schedule_id) if state == "pruned"
    ]


# -- what goes and what stays -------------------------------------------------------


def test_prune_removes_exactly_the_old_finished_runs_and_old_rows(built: Builder) -> None:
    store = built.store
    assert run_dirs(store) == sorted(OLD_FINISHED + KEPT)
    definitions = table_rows(built.root, "schedules") + table_rows(built.root, "revisions")
    report = prune(store, BOUND, NOW)
    assert table_rows(built.root, "schedules") + table_rows(built.root, "revisions") == definitions
    conn = sqlite3.connect(built.root / "wfsched.db")
    try:
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    finally:
        conn.close()
    assert sorted(report.run_ids) == OLD_FINISHED
    assert (report.runs, report.attempts, report.run_dirs) == (5, 5, 5)
    assert not report.more and not report.errors
    assert sorted(row.run_id for row in store.list_runs(limit=100)) == KEPT
    assert run_dirs(store) == KEPT
    for run in ("run-000003", "run-000004"):
        assert store.attempts(int(run[4:])), f"{run} lost its attempts"
        assert (store.runs_dir / run / "attempt-1").is_dir()
    assert built.run_state("run-000003") == "interrupted"
    assert built.run_state("run-000004") == "running"

    # a: T0 and T0+3h went (split by the kept runs 3 and 4); b: its three old
    # rows (failed, skipped-overlap, completed) are one stretch.
    a = ledger(store, "a")
    assert a[:4] == [
        (T0, T0, 1, "pruned", None),
        (T0 + HOUR, None, None, "admitted", 3),
        (T0 + 2 * HOUR, None, None, "admitted", 4),
        (T0 + 3 * HOUR, T0 + 3 * HOUR, 1, "pruned", None),
    ]
    assert pruned_rows(store, "b") == [(T0 + 30 * 60, T0 + 150 * 60, 3)]
    # Everything recorded after the cutoff stays: the paused span (recorded at
    # resume, day 59) and the new runs' rows.
    for schedule_id, run_seq in (("a", 8), ("b", 9)):
        rows = ledger(store, schedule_id)
        assert any(state == "skipped-paused" for _, _, _, state, _ in rows)
        assert any(seq == run_seq for *_, seq in rows)
    assert report.occurrences == 2 + 3  # a: T0, T0+3h; b: three rows
    assert report.summary_rows == 3
    summary = store.page_occurrences("b", None, 1)[0]
    assert summary.reason == "retention: history before 2026-02-04T09:00:00Z pruned"


def test_every_removed_instant_stays_accounted_for(built_any: Builder) -> None:
    store = built_any.store
    before = {sid: ledger(store, sid) for sid in ("a", "b")}
    report = prune(store, BOUND, NOW)
    # A prune that removed nothing would pass every check below trivially.
    assert report.occurrences > 0 and report.summary_rows > 0
    for schedule_id, rows in before.items():
        after = ledger(store, schedule_id)
        pruned = [(f, last or f, c) for f, last, c, state, _ in after if state == "pruned"]
        kept = {(f, state) for f, _, _, state, _ in after if state != "pruned"}
        removed_count = 0
        for first, last, count, state, _ in rows:
            end = last or first
            inside = [span for span in pruned if span[0] <= first and end <= span[1]]
            # each old row either stayed or lies inside exactly one pruned row
            assert ((first, state) in kept) != bool(inside), (schedule_id, first, state)
            assert len(inside) <= 1
            if inside:
                removed_count += 1 if last is None else (count or 0)
        # a pruned row never spans a row that stayed (that would count it twice)
        for instant, _ in kept:
            assert not any(lo <= instant <= hi for lo, hi, _ in pruned)
        assert sum(c or 0 for _, _, c in pruned) == removed_count


def test_dry_run_changes_nothing_and_predicts_the_real_prune(built: Builder) -> None:
    before = dump(built.root)
    dry = prune(built.store, BOUND, NOW, dry_run=True)
    assert dump(built.root) == before
    real = prune(built.store, BOUND, NOW)
    assert real.runs and real.attempts and real.occurrences and real.run_dirs
    assert (dry.runs, dry.attempts, dry.occurrences, dry.run_dirs) == (
        real.runs,
        real.attempts,
        real.occurrences,
        real.run_dirs,
    )
    assert dry.run_ids == real.run_ids
    assert dry.to_json()["summary_rows"] is None


def test_second_prune_removes_nothing(built: Builder) -> None:
    first = prune(built.store, BOUND, NOW)
    assert first.runs and first.occurrences and first.run_dirs and first.summary_rows
    after_first = dump(built.root)
    again = prune(built.store, BOUND, NOW)
    assert (again.runs, again.occurrences, again.run_dirs, again.summary_rows) == (0, 0, 0, 0)
    assert dump(built.root) == after_first


def test_bounded_batches_end_where_one_call_ends(
    tmp_path: Path, make_store: Callable[[Path], Store]
) -> None:
    whole = build(tmp_path / "whole")
    prune(whole.store, BOUND, NOW)
    stepped = build(tmp_path / "stepped", make_store)
    calls = 0
    while True:
        calls += 1
        report = prune(stepped.store, BOUND, NOW, max_batches=1, batch_size=1)
        assert report.batches <= 1
        if not report.more:
            break
    assert calls > 5
    for schedule_id in ("a", "b"):
        strip = [row[:4] for row in ledger(whole.store, schedule_id)]
        assert [row[:4] for row in ledger(stepped.store, schedule_id)] == strip
    assert run_dirs(stepped.store) == run_dirs(whole.store)


def test_a_later_prune_extends_the_pruned_row(built_any: Builder) -> None:
    prune(built_any.store, BOUND, NOW)
    assert pruned_rows(built_any.store, "b") == [(T0 + 30 * 60, T0 + 150 * 60, 3)]
    # run-9 (b, day 59) finishes out of range too once the bound is small.
    report = prune(built_any.store, HOUR, NOW)
    assert "run-000009" in report.run_ids
    assert "run-000003" not in report.run_ids and "run-000004" not in report.run_ids
    (row,) = pruned_rows(built_any.store, "b")
    assert row[0] == T0 + 30 * 60 and row[1] == NOW - DAY + 30 * 60 and row[2] is None


def test_orphan_directories_are_removed_only_when_old_and_rowless(built_any: Builder) -> None:
    runs_dir = built_any.store.runs_dir
    old, recent, foreign = runs_dir / "run-000900", runs_dir / "run-000901", runs_dir / "notes"
    for path in (old, recent, foreign):
        (path / "attempt-1").mkdir(parents=True)
    os.utime(old, (CUTOFF - 10, CUTOFF - 10))
    os.utime(recent, (CUTOFF + 10, CUTOFF + 10))
    os.utime(foreign, (CUTOFF - 10, CUTOFF - 10))
    # A kept run's directory is never an orphan, however old it looks.
    os.utime(runs_dir / "run-000003", (T0, T0))
    report = prune(built_any.store, BOUND, NOW)
    assert report.run_dirs == 5 + 1
    assert not old.exists()
    assert recent.exists() and foreign.exists() and (runs_dir / "run-000003").exists()


def test_a_rowless_directory_younger_than_a_minute_is_kept_whatever_the_bound(
    built_any: Builder,
) -> None:
    """A scheduled run's directory is made inside its admission's transaction,
    before its row commits: `prune --older-than 0` must not take it from an
    admission in flight. Past ORPHAN_MIN_AGE it is an orphan like any other."""
    from wfsched.api.retention import ORPHAN_MIN_AGE

    runs_dir = built_any.store.runs_dir
    fresh, stale = runs_dir / "run-000950", runs_dir / "run-000951"
    for path, age in ((fresh, ORPHAN_MIN_AGE - 5), (stale, ORPHAN_MIN_AGE + 5)):
        (path / "attempt-1").mkdir(parents=True)
        os.utime(path, (NOW - age, NOW - age))
    prune(built_any.store, 0, NOW)
    assert fresh.exists() and not stale.exists()


def test_a_crash_before_directory_removal_leaves_an_orphan_the_next_prune_removes(
    built_any: Builder, monkeypatch: pytest.MonkeyPatch
) -> None:
    import wfsched.api.retention as retention

    for run in OLD_FINISHED:
        os.utime(built_any.store.runs_dir / run, (T0, T0))

    def crash(self: object, run_seqs: list[int]) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(retention._Pruner, "_remove_run_dirs", crash)
    with pytest.raises(KeyboardInterrupt):
        prune(built_any.store, BOUND, NOW)
    monkeypatch.undo()
    assert "run-000001" not in [r.run_id for r in built_any.store.list_runs(limit=100)]
    assert (built_any.store.runs_dir / "run-000001").exists()
    report = prune(built_any.store, BOUND, NOW)
    assert run_dirs(built_any.store) == KEPT
    assert report.run_dirs >= 1


# -- the command line ------------------------------------------------------------------


def cli_store(store_path: Path) -> Builder:
    built = build(store_path)
    built.store.close()
    return built


def test_cli_prune_dry_run_then_prune(
    store_path: Path, run_cli: CliRun, clock: SettableClock
) -> None:
    built = cli_store(store_path)
    clock.now = NOW
    before = dump(built.root)
    code, out, err = run_cli("prune", "--older-than", "30d", "--dry-run")
    assert (code, err) == (0, "")
    assert "would remove" in out and "runs:             5 (5 attempts)" in out
    assert "dry run: nothing was written" in out
    assert dump(built.root) == before

    code, out, _ = run_cli("prune", "--older-than", "30d", "--json")
    assert code == 0
    document = json.loads(out)
    assert document["older_than"] == BOUND
    assert document["cutoff"] == "2026-02-04T09:00:00Z"
    assert sorted(document["run_ids"]) == OLD_FINISHED
    assert (document["runs"], document["run_dirs"], document["summary_rows"]) == (5, 5, 3)
    assert document["dry_run"] is False and document["more"] is False

    code, out, _ = run_cli("prune", "--older-than", str(BOUND))
    assert code == 0 and "runs:             0 (0 attempts)" in out


@pytest.mark.parametrize(
    "args",
    [
        ["prune", "--older-than", "30x"],
        ["prune", "--older-than", "-5"],
        ["prune", "--older-than", ""],
        ["prune"],
        # Beyond 3650d the cutoff falls before year 1 and could not be shown.
        ["prune", "--older-than", "9999999999d"],
        ["prune", "--older-than", "99999999999999999999"],
        ["prune", "--older-than", "\u00b2"],  # "²".isdigit() is true
    ],
)
def test_cli_bad_duration_is_a_usage_error(
    store_path: Path, run_cli: CliRun, args: list[str]
) -> None:
    SQLiteStore(store_path).close()
    code, out, err = run_cli(*args)
    assert code == 2, (out, err)
    assert err.startswith("wfsched: error:") and err.count("\n") == 1


def test_cli_prune_without_a_store_removes_nothing(store_path: Path, run_cli: CliRun) -> None:
    code, out, err = run_cli("prune", "--older-than", "30d")
    assert code == 0 and "runs:             0" in out
    assert err.startswith("wfsched: note: no store at") and err.count("\n") == 1
    assert not store_path.exists()


def test_paging_walks_the_remaining_history_once(
    store_path: Path, run_cli: CliRun, clock: SettableClock
) -> None:
    cli_store(store_path)
    clock.now = NOW
    assert run_cli("prune", "--older-than", "30d")[0] == 0
    store = SQLiteStore(store_path)
    try:
        expected = ledger(store, "a")
    finally:
        store.close()
    seen: list[dict[str, object]] = []
    cursor: str | None = None
    while True:
        args = ["occurrences", "a", "--json", "--limit", "2"]
        if cursor:
            args += ["--page", cursor]
        code, out, err = run_cli(*args)
        assert code == 0, err
        page = json.loads(out)
        seen.extend(page["items"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == len(expected)
    assert seen[0]["state"] == "pruned" and seen[0]["count"] == 1
    assert seen[0]["first"] == seen[0]["last"] == "2026-01-05T09:00:00Z"
    keys = [(item["scheduled_at"], item["state"], item["run_id"]) for item in seen]
    assert len(set(keys)) == len(keys)
    assert [item["run_id"] for item in seen if item["run_id"]] == [
        "run-000003",
        "run-000004",
        "run-000008",
    ]


def test_answered_requests_age_out_and_pending_ones_never(built: Builder) -> None:
    """The requests table (trigger, resume, cancel) is covered by retention:
    an answer older than the bound goes, a request still owed one stays."""
    store = built.store
    with store.atomic():
        old_pending = store.insert_request("trigger", T0 + 10, schedule_id="a")
        old_refused = store.insert_request("cancel", T0 + 20, run_seq=3)
        store.finish_request(old_refused, "refused", "no such run", T0 + 21)
        recent = store.insert_request("trigger", NOW - DAY, schedule_id="b")
        store.finish_request(recent, "done", "run-000010", NOW - DAY + 1)
        answered_late = store.insert_request("cancel", T0 + 30, run_seq=4)
        store.finish_request(answered_late, "refused", "late", CUTOFF + 1)
    seqs = [row[0] for row in table_rows(built.root, "requests")]
    trigger_of_run_6 = min(seqs)
    before = dump(built.root)
    dry = prune(store, BOUND, NOW, dry_run=True)
    assert dry.requests == 2 and dump(built.root) == before
    report = prune(store, BOUND, NOW)
    assert report.requests == 2 and report.to_json()["requests"] == 2
    left = {row[0]: row[6] for row in table_rows(built.root, "requests")}
    assert trigger_of_run_6 not in left and old_refused not in left
    assert left == {old_pending: "pending", recent: "done", answered_late: "refused"}
    assert prune(store, BOUND, NOW).requests == 0
    # Even with no bound at all, a pending request is never removed.
    prune(store, 0, NOW + 10)
    assert [row[0] for row in table_rows(built.root, "requests")] == [old_pending]


def test_automatic_retention_prunes_answered_requests(built: Builder) -> None:
    events: list[tuple[str, dict[str, object]]] = []
    supervisor = Supervisor(
        built.store,
        SupervisorConfig(retention=float(BOUND)),
        built.control,
        clock=built.clock,
        log=lambda event, **fields: events.append((event, fields)),
    )
    for _ in range(20):
        supervisor.retain(NOW)
    assert table_rows(built.root, "requests") == []
    pruned = [fields["requests"] for event, fields in events if event == "pruned"]
    assert sum(pruned) == 1  # type: ignore[arg-type]


def test_answered_requests_age_out_on_both_backends(built_any: Builder) -> None:
    """The same rule through the store interface, PostgreSQL included."""
    store = built_any.store
    with store.atomic():
        old_pending = store.insert_request("trigger", T0 + 10, schedule_id="a")
        old_done = store.insert_request("cancel", T0 + 20, run_seq=3)
        store.finish_request(old_done, "refused", "no such run", T0 + 21)
        recent = store.insert_request("trigger", NOW - DAY, schedule_id="b")
        store.finish_request(recent, "done", "run-000010", NOW - DAY + 1)
    assert prune(store, BOUND, NOW, dry_run=True).requests >= 1
    assert store.get_request(old_done) is not None
    report = prune(store, BOUND, NOW)
    assert report.requests >= 1  # the builder's own old trigger goes too
    assert store.get_request(old_done) is None
    assert store.get_request(recent) is not None
    assert store.get_request(old_pending) is not None
    prune(store, 0, NOW + 10)
    assert store.get_request(recent) is None
    pending = store.get_request(old_pending)
    assert pending is not None and pending.state == "pending"
