"""The store contract: what every `wfsched.store.Store` backend guarantees.

Written against the interface only (no SQL, no driver calls beyond naming the
backend's integrity exception), parametrized by backend: a second backend
adds a param to `store_backend` and must pass every case here unchanged.
"""

from __future__ import annotations

import select
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.daemon import wait_for
from wfsched.errors import ConflictError
from wfsched.store import SQLiteStore, Store
from wfsched.store.rows import AttemptEnd

T0 = 1_780_000_000


@dataclass(frozen=True)
class Backend:
    name: str
    open: Callable[[], Store]
    integrity_error: type[Exception]
    """What the database raises when it refuses a write."""


@pytest.fixture(params=["sqlite", "postgresql"])
def store_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        return Backend("sqlite", lambda: SQLiteStore(tmp_path / "contract"), sqlite3.IntegrityError)
    if request.param == "postgresql":
        import psycopg

        from wfsched.store.location import resolve_store
        from wfsched.store.postgres import PostgresStore

        location = resolve_store(request.getfixturevalue("pg_url"))
        return Backend("postgresql", lambda: PostgresStore(location), psycopg.IntegrityError)
    raise AssertionError(request.param)


@pytest.fixture
def store(store_backend: Backend) -> Iterator[Store]:
    opened = store_backend.open()
    yield opened
    opened.close()


def add_schedule(store: Store, schedule_id: str = "s", next_due: int | None = T0 + 60) -> None:
    with store.atomic():
        store.insert_schedule(schedule_id, f'{{"id": "{schedule_id}"}}', T0, T0, next_due)


def admit(store: Store, schedule_id: str, at: int, kind: str = "scheduled") -> int:
    with store.atomic():
        seq = store.insert_run(schedule_id, kind, at, 1, '{"argv": ["true"]}', T0)
        if kind == "scheduled":
            store.insert_occurrence(schedule_id, at, "admitted", 1, T0, run_seq=seq)
    return seq


# -- the database refuses what must never happen ------------------------------------


def test_one_decision_per_instant_is_enforced_by_the_database(
    store: Store, store_backend: Backend
) -> None:
    add_schedule(store)
    admit(store, "s", T0 + 60)
    with pytest.raises(store_backend.integrity_error), store.atomic():
        store.insert_occurrence("s", T0 + 60, "skipped-misfire", 1, T0)
    with pytest.raises(store_backend.integrity_error), store.atomic():
        store.insert_run("s", "scheduled", T0 + 60, 1, "{}", T0)
        store.insert_occurrence("s", T0 + 60, "admitted", 1, T0, run_seq=None)
    # A summary row may share its first instant with a row of its own.
    with store.atomic():
        store.insert_occurrence(
            "s", T0 + 60, "skipped-misfire", 1, T0, last_at=T0 + 120, count=2, summary=True
        )
    rows = store.page_occurrences("s", None, 10)
    assert [(r.state, r.summary) for r in rows] == [("admitted", False), ("skipped-misfire", True)]
    assert len(store.list_runs()) == 1, "the refused admission's run row was rolled back"


def test_one_run_is_claimed_by_one_occurrence_row(store: Store, store_backend: Backend) -> None:
    add_schedule(store)
    seq = admit(store, "s", T0 + 60)
    with pytest.raises(store_backend.integrity_error), store.atomic():
        store.insert_occurrence("s", T0 + 120, "admitted", 1, T0, run_seq=seq)


def test_the_watermark_never_moves_back(store: Store, store_backend: Backend) -> None:
    add_schedule(store)
    with store.atomic():
        store.update_schedule("s", consumed_through=T0 + 600)
        store.update_schedule("s", consumed_through=T0 + 600)
    with pytest.raises(store_backend.integrity_error), store.atomic():
        store.update_schedule("s", revision=2, consumed_through=T0 + 599)
    row = store.get_schedule("s")
    assert row is not None
    assert (row.consumed_through, row.revision) == (T0 + 600, 1)


def test_a_refused_write_raises_one_of_the_driver_errors_the_store_names(store: Store) -> None:
    """Callers outside the store contain an unworded database error by
    `store.driver_errors`, never by importing a driver (the metrics do)."""
    add_schedule(store)
    admit(store, "s", T0 + 60)
    with pytest.raises(store.driver_errors), store.atomic():
        store.insert_occurrence("s", T0 + 60, "skipped-misfire", 1, T0)
    assert all(issubclass(error, Exception) for error in store.driver_errors)


def _owned(store: Store) -> bool:
    try:
        store.take_ownership()
    except ConflictError:
        return False
    return True


def test_ownership_is_exclusive_until_the_owner_closes(store_backend: Backend) -> None:
    """`store copy` owns both stores through the interface alone: a second
    owner is refused (exit 4) until the first closes its store."""
    first = store_backend.open()
    first.take_ownership()
    second = store_backend.open()
    try:
        with pytest.raises(ConflictError, match="owns this store"):
            second.take_ownership()
        first.close()
        # A PostgreSQL server ends the closed session's backend (and its lock)
        # a moment after the client closed it.
        wait_for(lambda: _owned(second), timeout=10, what="the first owner's lock to go")
    finally:
        second.close()
    joining = store_backend.open()
    try:
        joining.join_supervisors()  # no copy holds it: a supervisor may serve it
    finally:
        joining.close()


def test_only_known_columns_can_be_updated(store: Store) -> None:
    add_schedule(store)
    seq = admit(store, "s", T0 + 60)
    with pytest.raises(ValueError, match="not mutable"):
        store.update_schedule("s", id="t")
    with pytest.raises(ValueError, match="not mutable"):
        store.update_run(seq, schedule_id="t")
    with pytest.raises(ValueError, match="not mutable"):
        store.update_attempt(seq, 1, started=2)


def test_schedules_inserted_together_are_those_inserted_one_by_one(store: Store) -> None:
    """apply creates its new schedules in one batch: each gets its row at
    revision 1 and its first revision, exactly as `insert_schedule` gives."""
    with store.atomic():
        store.insert_schedule("one", '{"id": "one"}', T0, T0 - 1, T0 + 60)
        store.insert_schedules(
            [
                ("two", '{"id": "two"}', T0, T0 - 1, T0 + 60, False),
                ("three", '{"id": "three"}', T0 + 0.5, T0, None, True),
            ]
        )
        store.insert_schedules([])
    one, two, three = (store.get_schedule(name) for name in ("one", "two", "three"))
    assert one is not None and two is not None and three is not None
    assert (two.revision, two.definition, two.consumed_through, two.next_due, two.exhausted) == (
        one.revision,
        '{"id": "two"}',
        one.consumed_through,
        one.next_due,
        one.exhausted,
    )
    assert (three.created_at, three.consumed_through, three.next_due, three.exhausted) == (
        T0 + 0.5,
        T0,
        None,
        True,
    )
    history = store.revision_history()
    assert [(r.revision, r.definition, r.watermark) for r in history["three"]] == [
        (1, '{"id": "three"}', T0)
    ]
    assert [(r.revision, r.watermark) for r in history["two"]] == [
        (r.revision, r.watermark) for r in history["one"]
    ]


# -- transactions -------------------------------------------------------------------


class Boom(Exception):
    pass


def test_atomic_is_all_or_nothing_and_keeps_the_error(store: Store) -> None:
    with pytest.raises(Boom), store.atomic():
        store.insert_schedule("a", "{}", T0, T0, None)
        store.set_meta(pid="1")
        raise Boom
    assert store.get_schedule("a") is None
    assert store.get_meta("pid") is None
    with store.atomic():
        store.insert_schedule("a", "{}", T0, T0, None)
    assert store.get_schedule("a") is not None


def test_a_nested_atomic_rolls_back_only_its_own_writes(store: Store) -> None:
    with store.atomic():
        store.insert_schedule("outer", "{}", T0, T0, None)
        with pytest.raises(Boom), store.atomic():
            store.insert_schedule("inner", "{}", T0, T0, None)
            raise Boom
        store.set_meta(after="yes")
        # Writes nobody reads the answer of (a server store holds them back
        # until the next answered statement): undone all the same.
        with pytest.raises(Boom), store.atomic():
            store.set_meta(inner="no")
            store.update_schedule("outer", paused=1)
            raise Boom
    assert store.get_schedule("outer") is not None
    assert store.get_schedule("inner") is None
    assert store.get_meta("after") == "yes"
    assert store.get_meta("inner") is None
    assert store.get_schedule("outer").paused is False  # type: ignore[union-attr]


def test_a_refused_write_fails_its_own_nested_atomic_not_a_later_one(
    store: Store, store_backend: Backend
) -> None:
    """The supervisor decides each schedule in a nested atomic and blocks
    that schedule alone when its writes are refused: the refusal must be
    raised inside the block that made the write, however late a store
    sends it, and the transaction goes on to commit the rest."""
    add_schedule(store)
    with store.atomic():
        store.update_schedule("s", consumed_through=T0 + 600)
    with store.atomic():
        store.set_meta(before="1")
        with pytest.raises(store_backend.integrity_error), store.atomic():
            store.update_schedule("s", consumed_through=T0 + 599)
        with store.atomic():
            store.update_schedule("s", paused=1)
        store.set_meta(after="1")
    row = store.get_schedule("s")
    assert row is not None and (row.consumed_through, row.paused) == (T0 + 600, True)
    assert (store.get_meta("before"), store.get_meta("after")) == ("1", "1")


def test_writes_of_a_transaction_that_failed_are_never_sent_later(store: Store) -> None:
    add_schedule(store)
    with pytest.raises(Boom), store.atomic():
        store.update_schedule("s", paused=1)
        store.set_meta(lost="1")
        raise Boom
    with store.atomic():
        store.set_meta(kept="1")
    assert store.get_meta("lost") is None and store.get_meta("kept") == "1"
    assert store.get_schedule("s").paused is False  # type: ignore[union-attr]


def test_an_error_after_a_nested_commit_rolls_back_everything(store: Store) -> None:
    with pytest.raises(Boom), store.atomic():
        with store.atomic():
            store.insert_schedule("inner", "{}", T0, T0, None)
        raise Boom
    assert store.get_schedule("inner") is None


def test_snapshot_reads_inside_and_outside_a_write(store: Store) -> None:
    add_schedule(store)
    with store.snapshot():
        assert [row.id for row in store.list_schedules()] == ["s"]
    with store.atomic(), store.snapshot():
        store.insert_schedule("t", "{}", T0, T0, None)
        assert [row.id for row in store.list_schedules()] == ["s", "t"]


# -- schedules ------------------------------------------------------------------------


def test_schedules_listing_due_and_blocked(store: Store) -> None:
    add_schedule(store, "a", next_due=T0 + 30)
    add_schedule(store, "b", next_due=T0 + 10)
    add_schedule(store, "c", next_due=None)
    with store.atomic():
        store.update_schedule("c", blocked_reason="calendar regression")
        store.update_schedule("a", deleted_at=T0 + 1, next_due=None)
    assert [row.id for row in store.list_schedules()] == ["b", "c"]
    assert [row.id for row in store.list_schedules(include_deleted=True)] == ["a", "b", "c"]
    earliest = store.earliest_due_schedule()
    assert earliest is not None and earliest.id == "b"
    assert [row.id for row in store.due_schedules(T0 + 10, limit=10)] == ["b"]
    assert store.due_schedules(T0 + 9, limit=10) == []
    assert [(row.id, row.state) for row in store.blocked_schedules()] == [("c", "blocked")]


def test_schedules_by_id_crosses_the_in_list_chunk(store: Store) -> None:
    ids = [f"s{n:04d}" for n in range(1203)]
    with store.atomic():
        for schedule_id in ids:
            store.insert_schedule(schedule_id, "{}", T0, T0, None)
    found = store.schedules_by_id([*ids, "missing"])
    assert sorted(found) == ids
    seq = admit(store, ids[-1], T0 + 60)
    assert store.active_run_counts(ids) == {ids[-1]: 1}
    assert {key: run.state for key, run in store.last_runs(ids).items()} == {ids[-1]: "admitted"}
    assert store.get_run(seq) is not None


def test_runs_by_seq_crosses_the_in_list_chunk(store: Store) -> None:
    add_schedule(store)
    with store.atomic():
        seqs = [store.insert_run("s", "manual", T0, 1, "{}", T0) for _ in range(503)]
    found = store.runs_by_seq([*seqs, 10_000])
    assert sorted(found) == seqs
    assert all(found[seq].seq == seq and found[seq].kind == "manual" for seq in seqs)
    assert store.runs_by_seq([]) == {}


def test_revisions_are_kept_per_schedule(store: Store) -> None:
    add_schedule(store)
    with store.atomic():
        store.update_schedule("s", revision=2, definition="{}")
        store.insert_revision("s", 2, "{}", T0 + 5, T0 + 5)
    history = store.revision_history()["s"]
    assert [(entry.revision, entry.watermark) for entry in history] == [(1, T0), (2, T0 + 5)]


# -- paging ---------------------------------------------------------------------------


def test_occurrences_page_in_record_order_by_ledger_position(store: Store) -> None:
    add_schedule(store)
    minutes = (5, 1, 3, 2, 4)
    with store.atomic():
        for minute in minutes:
            store.insert_occurrence("s", T0 + 60 * minute, "skipped-misfire", 1, T0)
    seen: list[int] = []
    positions: list[int] = []
    after: int | None = None
    while True:
        page = store.page_occurrences("s", after, 2)
        if not page:
            break
        seen.extend(row.scheduled_at for row in page)
        positions.extend(row.ledger_pos for row in page)
        after = page[-1].ledger_pos
    # Record order, not instant order: a row written later never lands
    # before a position already handed out.
    assert seen == [T0 + 60 * minute for minute in minutes]
    assert positions == sorted(set(positions))
    assert store.page_occurrences("other", None, 10) == []
    backwards: list[int] = []
    before: int | None = None
    while page := store.page_occurrences("s", before, 2, newest_first=True):
        backwards.extend(row.scheduled_at for row in page)
        before = page[-1].ledger_pos
    assert backwards == seen[::-1]


def test_runs_page_newest_first_with_filters(store: Store) -> None:
    add_schedule(store, "a")
    add_schedule(store, "b")
    seqs = [admit(store, schedule, T0 + 60 * n) for n, schedule in enumerate("ababa", 1)]
    assert [run.seq for run in store.list_runs(limit=2)] == seqs[::-1][:2]
    assert [run.seq for run in store.list_runs(before_seq=seqs[2], limit=10)] == seqs[:2][::-1]
    assert [run.seq for run in store.list_runs(schedule_id="b")] == [seqs[3], seqs[1]]
    with store.atomic():
        store.update_run(seqs[0], state="failed", finished_at=T0 + 1)
    assert [run.seq for run in store.list_runs(state="failed")] == [seqs[0]]
    oldest = store.list_runs(limit=2, oldest_first=True)
    assert [run.seq for run in oldest] == seqs[:2]
    after = store.list_runs(before_seq=seqs[1], limit=10, oldest_first=True)
    assert [run.seq for run in after] == seqs[2:]
    assert store.last_runs(["a", "b", "none"]).keys() == {"a", "b"}
    assert store.last_runs(["a"])["a"].seq == seqs[4]


# -- run and attempt lifecycle ----------------------------------------------------------


def test_an_admitted_run_of_a_blocked_schedule_holds_no_slot(store: Store) -> None:
    """Capacity counts only runs that can execute: an admitted run of a
    blocked schedule waits without a slot (counted apart) until `resume`
    clears the block; a running run of a blocked schedule keeps its slot."""
    add_schedule(store, "a")
    add_schedule(store, "b")
    waiting = admit(store, "a", T0 + 60)
    running = admit(store, "a", T0 + 120)
    admit(store, "b", T0 + 60)
    admit(store, "a", T0 + 180, kind="manual")
    with store.atomic():
        store.insert_attempt(running, 1, T0 + 121)
        store.update_run(running, state="running", started_at=T0 + 121, attempt=1)
    assert (store.executing_count(), store.blocked_admitted_count()) == (3, 0)
    with store.atomic():
        store.update_schedule("a", blocked_reason="run-000009: unreadable records")
    assert (store.executing_count(), store.blocked_admitted_count()) == (2, 1)
    assert store.get_run(waiting).state == "admitted"  # type: ignore[union-attr]
    with store.atomic():
        store.update_schedule("a", blocked_reason=None)
    assert (store.executing_count(), store.blocked_admitted_count()) == (3, 0)


def test_a_resumed_attempt_leaves_the_previous_reason_on_its_own_row(store: Store) -> None:
    """While attempt 2 runs, the run reports no reason or exit code: the
    interruption belongs to attempt 1's row, where it stays."""
    add_schedule(store)
    seq = admit(store, "s", T0 + 60)
    with store.atomic():
        store.mark_attempts([(seq, 1, T0 + 61, T0 + 61)])
    with store.atomic():
        reason = "exited with interrupt_exit_code 75"
        store.update_attempt(seq, 1, state="interrupted", exit_code=75, reason=reason)
        store.update_run(seq, state="interrupted", exit_code=75, reason=reason)
    with store.atomic():
        store.mark_attempts([(seq, 2, T0 + 90, T0 + 61)])
    run = store.get_run(seq)
    assert run is not None
    assert (run.state, run.attempt, run.reason, run.exit_code) == ("running", 2, None, None)
    assert run.started_at == T0 + 61
    first = store.get_attempt(seq, 1)
    assert first is not None and (first.state, first.exit_code, first.reason) == (
        "interrupted",
        75,
        reason,
    )


def test_an_admitted_run_is_written_with_its_ledger_row(
    store: Store, store_backend: Backend
) -> None:
    """`insert_admitted_run` writes what `insert_run` then `insert_occurrence`
    write (one statement on a server): the run admitted, its ledger row
    naming it, recorded when it was admitted, placed after earlier rows."""
    add_schedule(store)
    with store.atomic():
        store.insert_occurrence("s", T0 + 30, "skipped-misfire", 1, T0)
        seq = store.insert_admitted_run("s", T0 + 60, 1, '{"argv": ["true"]}', T0 + 1, host="h")
    run = store.get_run(seq)
    assert run is not None
    assert (run.kind, run.state, run.scheduled_at, run.admitted_at, run.host, run.attempt) == (
        "scheduled", "admitted", T0 + 60, T0 + 1, "h", 0
    )  # fmt: skip
    row = store.occurrence_for_run(seq)
    assert row is not None
    assert (row.scheduled_at, row.state, row.revision, row.recorded_at, row.summary) == (
        T0 + 60, "admitted", 1, T0 + 1, False
    )  # fmt: skip
    assert [r.scheduled_at for r in store.page_occurrences("s", None, 10)] == [T0 + 30, T0 + 60]
    # The instant decided twice is refused, and with it the second run.
    with pytest.raises(store_backend.integrity_error), store.atomic():
        store.insert_admitted_run("s", T0 + 60, 1, "{}", T0 + 2)
    assert [r.seq for r in store.list_runs()] == [seq]


def test_a_run_from_admission_to_completion(store: Store) -> None:
    add_schedule(store)
    seq = admit(store, "s", T0 + 60)
    manual = admit(store, "s", T0 + 70, kind="manual")
    run = store.get_run(seq)
    assert run is not None and (run.state, run.attempt, run.kind) == ("admitted", 0, "scheduled")
    assert [r.seq for r in store.admitted_runs()] == [seq, manual]
    assert store.executing_count() == 1, "manual runs hold no slot"
    assert store.run_state_counts() == {"admitted": 2}
    occurrence = store.occurrence_for_run(seq)
    assert occurrence is not None and occurrence.run_state == "admitted"

    with store.atomic():
        store.insert_attempt(seq, 1, T0 + 61)
        store.update_run(seq, state="running", started_at=T0 + 61, attempt=1)
    assert store.scheduled_running_count() == 1
    assert store.admitted_runs()[0].seq == manual
    attempt = store.get_attempt(seq, 1)
    assert attempt is not None and attempt.state == "running"

    with store.atomic():
        store.update_attempt(seq, 1, state="completed", exit_code=0, finished_at=T0 + 62)
        store.update_run(seq, state="completed", exit_code=0, finished_at=T0 + 62)
    assert [r.seq for r in store.unfinished_runs()] == [manual]
    assert store.active_run_counts(["s"]) == {}
    assert store.all_active_run_counts() == {"s": 1}
    assert [(a.attempt, a.state, a.exit_code) for a in store.attempts(seq)] == [(1, "completed", 0)]
    done = store.occurrence_for_run(seq)
    assert done is not None and (done.run_state, done.finished_at) == ("completed", T0 + 62)
    assert store.get_run(10_000) is None
    assert store.get_attempt(seq, 2) is None


def test_the_endings_of_a_tick_are_written_together(store: Store) -> None:
    """`end_attempts`: each attempt row gets its state, times, exit code,
    reason and output tails, and its run the same state (an interrupted
    run no finished time: it may be resumed); other runs are untouched."""
    add_schedule(store)
    done, cut, other = (admit(store, "s", T0 + at) for at in (60, 120, 180))
    with store.atomic():
        store.mark_attempts([(seq, 1, T0 + 200, T0 + 200) for seq in (done, cut, other)])
    with store.atomic():
        store.end_attempts(
            [
                AttemptEnd(done, 1, "completed", T0 + 201, 0, None, b"out", b"", T0 + 201),
                AttemptEnd(cut, 1, "interrupted", T0 + 202, 75, "exited 75", None, b"e", None),
            ]
        )
    ended = [store.get_run(seq) for seq in (done, cut, other)]
    assert [(r.state, r.exit_code, r.reason, r.finished_at) for r in ended if r] == [
        ("completed", 0, None, T0 + 201),
        ("interrupted", 75, "exited 75", None),
        ("running", None, None, None),
    ]
    attempts = [store.get_attempt(seq, 1) for seq in (done, cut)]
    assert [(a.state, a.exit_code, a.reason, a.finished_at) for a in attempts if a] == [
        ("completed", 0, None, T0 + 201),
        ("interrupted", 75, "exited 75", T0 + 202),
    ]
    assert store.attempt_output(done, 1) == (b"out", b"")
    assert store.attempt_output(cut, 1) == (None, b"e")


# -- requests and bookkeeping ------------------------------------------------------------


def test_requests_queue_in_order_until_answered(store: Store) -> None:
    add_schedule(store)
    with store.atomic():
        first = store.insert_request("trigger", T0, schedule_id="s", payload='{"input": 1}')
        second = store.insert_request("cancel", T0 + 1, run_seq=7)
    assert [r.seq for r in store.pending_requests()] == [first, second]
    with store.atomic():
        store.finish_request(first, "done", "run-000001", T0 + 2)
    assert [r.seq for r in store.pending_requests()] == [second]
    answered = store.get_request(first)
    assert answered is not None
    assert (answered.state, answered.result, answered.handled_at) == ("done", "run-000001", T0 + 2)
    assert answered.payload == '{"input": 1}'
    assert store.get_request(10_000) is None


def test_a_request_is_answered_once_and_keeps_its_progress_note_until_then(store: Store) -> None:
    """Whoever answers first (the run's host's agent or the leader) wins: a
    second answer writes nothing and says so; a progress note is kept only
    while the request is pending."""
    add_schedule(store)
    with store.atomic():
        seq = store.insert_request("cancel", T0, run_seq=7)
        store.note_request(seq, "run-000007 cancelling on host a")
    pending = store.get_request(seq)
    assert pending is not None
    assert (pending.state, pending.result) == ("pending", "run-000007 cancelling on host a")
    with store.atomic():
        assert store.finish_request(seq, "done", "run-000007 cancelled", T0 + 1) is True
    with store.atomic():
        assert store.finish_request(seq, "done", "run-000007 failed", T0 + 2) is False
        store.note_request(seq, "late note")
    answered = store.get_request(seq)
    assert answered is not None
    assert (answered.state, answered.result, answered.handled_at) == (
        "done",
        "run-000007 cancelled",
        T0 + 1,
    )


def test_each_host_sees_the_cancels_and_resumes_of_its_own_runs(store: Store) -> None:
    """A host's agent reads the pending cancels and resumes of runs recorded on
    it (and of runs recorded on no host), never a trigger or another host's;
    an execution slot counts on the host that holds it."""
    add_schedule(store)
    on_a, on_b, nowhere = (admit(store, "s", T0 + 60 * n) for n in (1, 2, 3))
    with store.atomic():
        store.update_run(on_a, host="a", state="running", attempt=1)
        store.update_run(on_b, host="b", state="running", attempt=1)
        asks = [
            store.insert_request("cancel", T0, run_seq=on_b),
            store.insert_request("resume", T0, run_seq=on_a),
            store.insert_request("trigger", T0, schedule_id="s"),
            store.insert_request("cancel", T0, run_seq=nowhere),
            store.insert_request("cancel", T0, run_seq=on_a),
        ]
    assert [r.seq for r in store.pending_run_requests("a")] == [asks[1], asks[3], asks[4]]
    assert [r.seq for r in store.pending_run_requests("b")] == [asks[0], asks[3]]
    with store.atomic():
        store.finish_request(asks[1], "done", "run attempt 2", T0 + 1)
    assert [r.seq for r in store.pending_run_requests("a")] == [asks[3], asks[4]]
    assert (store.executing_count(), store.executing_count("a")) == (3, 1)
    assert (store.executing_count("b"), store.executing_count("c")) == (1, 0)


def test_meta_is_an_upsert(store: Store) -> None:
    with store.atomic():
        store.set_meta(pid="1", started_at="5.0")
        store.set_meta(pid="2")
    store.touch_meta(last_tick_at="6.0")
    assert [store.get_meta(key) for key in ("pid", "started_at", "last_tick_at", "x")] == [
        "2",
        "5.0",
        "6.0",
        None,
    ]


def test_reopening_keeps_everything_and_the_schema(store_backend: Backend) -> None:
    first = store_backend.open()
    add_schedule(first)
    version = first.schema_version
    first.close()
    again = store_backend.open()
    try:
        assert again.schema_version == version >= 1
        assert again.get_schedule("s") is not None
        assert again.schema_problems() == []
    finally:
        again.close()


# -- what the operator sees: hook outcomes, standing rejections, apply's memory ----------


def test_hook_outcomes_are_recorded_once_and_abandoned_when_orphaned(store: Store) -> None:
    add_schedule(store)
    seq = admit(store, "s", T0 + 60)
    with store.atomic():
        first = store.insert_notification("s", seq, T0 + 60, 1, T0 + 61)
        second = store.insert_notification("s", seq, T0 + 60, 2, T0 + 62)
        rejected = store.insert_notification(
            "s", None, T0 + 120, 0, T0 + 121, state="failed", reason="exit 1"
        )
    assert len({first, second, rejected}) == 3
    with store.atomic():
        store.finish_notification(first, "succeeded", None, T0 + 63)
        store.finish_notification(first, "failed", "late", T0 + 64)  # a finished one stays
        assert store.abandon_notifications("supervisor gone", T0 + 65) == 1
    rows = store.run_notifications(seq)
    assert [(r.attempt, r.state, r.reason, r.finished_at) for r in rows] == [
        (1, "succeeded", None, T0 + 63),
        (2, "failed", "supervisor gone", T0 + 65),
    ]


def test_a_rejection_stands_until_a_later_run_completes(store: Store) -> None:
    add_schedule(store)
    add_schedule(store, "t")
    with store.atomic():
        store.insert_occurrence("s", T0 + 60, "preflight-rejected", 1, T0 + 60, reason="cwd")
        store.insert_occurrence("s", T0 + 120, "preflight-rejected", 1, T0 + 120, reason="exe")
        store.insert_occurrence("t", T0 + 60, "preflight-rejected", 1, T0 + 60, reason="cwd")
    standing = store.standing_rejections()
    assert [(r.schedule_id, r.scheduled_at, r.reason) for r in standing] == [
        ("s", T0 + 120, "exe"),
        ("t", T0 + 60, "cwd"),
    ]
    with store.atomic():
        seq = store.insert_run("t", "manual", T0 + 130, 1, '{"argv": ["true"]}', T0 + 130)
        store.update_run(seq, state="completed", exit_code=0, finished_at=T0 + 131)
    assert [r.schedule_id for r in store.standing_rejections()] == ["s"]


def test_apply_remembers_the_last_revision_per_schedule(store: Store) -> None:
    add_schedule(store)
    add_schedule(store, "t")
    with store.atomic():
        store.set_applied("s", 1, T0)
        store.set_applied("s", 3, T0 + 1)
        store.set_applied("t", 2, T0 + 2)
    assert store.applied_revisions(["s", "t", "u"]) == {"s": 3, "t": 2}
    assert store.applied_revisions([]) == {}


def test_finished_run_counts_tell_cancellations_apart(store: Store) -> None:
    add_schedule(store)
    runs = [admit(store, "s", T0 + 60 * n) for n in (1, 2, 3)]
    with store.atomic():
        store.update_run(runs[0], state="completed", exit_code=0, finished_at=T0 + 70)
        store.update_run(runs[1], state="failed", reason="cancelled", finished_at=T0 + 130)
        store.update_run(runs[2], state="failed", finished_at=T0 + 190)
    counts = {
        (c.state, c.cancelled): (c.count, c.last_finished_at) for c in store.finished_run_counts()
    }
    assert counts == {
        ("completed", False): (1, T0 + 70),
        ("failed", True): (1, T0 + 130),
        ("failed", False): (1, T0 + 190),
    }


def test_a_run_row_says_whether_it_is_manual_and_its_occurrence(store: Store) -> None:
    from wfsched.api.views import run_occurrence_id

    add_schedule(store)
    scheduled = store.get_run(admit(store, "s", T0 + 60))
    manual = store.get_run(admit(store, "s", T0 + 70, kind="manual"))
    assert scheduled is not None and manual is not None
    assert (scheduled.is_manual, manual.is_manual) == (False, True)
    assert run_occurrence_id(scheduled) == "s@20260528T202740Z"
    assert run_occurrence_id(manual) is None


def test_the_commit_watch_sees_every_commit_another_connection_makes(
    store: Store, store_backend: Backend
) -> None:
    """A watch exists only where the change counter sees every commit (a
    SQLite store, written from this host alone): it is readable after
    another connection commits, and `changes()` then differs. Elsewhere
    there is no watch and the supervisor polls."""
    watch = store.watch_commits()
    if store.changes() is None:
        assert watch is None
        return
    assert watch is not None
    try:
        before = store.changes()
        watch.drain()
        assert not select.select([watch.fileno()], [], [], 0)[0]
        other = store_backend.open()
        add_schedule(other)
        other.close()
        assert select.select([watch.fileno()], [], [], 0)[0]
        assert watch.drain() and not watch.drain()
        assert store.changes() != before
    finally:
        watch.close()


def test_started_pids_are_noted_in_a_commit_of_their_own_and_durability_comes_back(
    store: Store,
) -> None:
    """The pids are noted without an fsync (the keeper's started record is the
    durable copy), in a commit of their own or in the caller's transaction;
    the commits after it are fsync'd again (SQLite: synchronous back to FULL)."""
    add_schedule(store)
    seq = admit(store, "s", T0 + 60)
    with store.atomic():
        store.mark_attempts([(seq, 1, T0 + 61, T0 + 61)])
    store.note_shim_handles([(seq, 1, 4242, 99)])
    noted = store.get_attempt(seq, 1)
    assert noted is not None and (noted.shim_pid, noted.shim_start_time) == (4242, 99)
    with store.atomic():
        store.note_shim_handles([(seq, 1, 4343, 100)])
        store.set_meta(after="1")
    again = store.get_attempt(seq, 1)
    assert again is not None and (again.shim_pid, store.get_meta("after")) == (4343, "1")
    if type(store) is SQLiteStore:
        assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


# -- read-only opening and the web view's paged queries ------------------------------


@pytest.fixture
def read_only(store_backend: Backend, request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    from wfsched.store import open_location
    from wfsched.store.location import resolve_store

    place = (
        tmp_path / "contract"
        if store_backend.name == "sqlite"
        else request.getfixturevalue("pg_url")
    )
    opened = open_location(resolve_store(str(place)), create=False, read_only=True)
    assert opened is not None
    request.addfinalizer(opened.close)
    return opened


def test_a_read_only_store_reads_and_the_database_refuses_its_writes(
    store: Store, read_only: Store
) -> None:
    add_schedule(store, "r")
    assert read_only.read_only and not store.read_only
    row = read_only.get_schedule("r")
    assert row is not None and row.id == "r"
    with pytest.raises(Exception, match=r"(?i)read.only"), read_only.atomic():
        read_only.update_schedule("r", paused=1)
    again = store.get_schedule("r")
    assert again is not None and not again.paused


def test_schedules_after_pages_in_id_order(store: Store) -> None:
    for name in ("c", "a", "b", "d"):
        add_schedule(store, name)
    assert [row.id for row in store.schedules_after(None, 2)] == ["a", "b"]
    assert [row.id for row in store.schedules_after("b", 5)] == ["c", "d"]


def test_find_runs_filters_by_host_kind_state_and_admission_time(store: Store) -> None:
    from wfsched.store.web_queries import RunFilter

    add_schedule(store, "s")
    first = admit(store, "s", T0 + 60)
    manual = admit(store, "s", T0 + 120, kind="manual")
    with store.atomic():
        store.update_run(first, host="h1", state="completed", finished_at=T0 + 70)
        late = store.insert_run("s", "manual", T0 + 180, 1, '{"argv": ["true"]}', T0 + 500)
    seqs = lambda **where: [r.seq for r in store.find_runs(RunFilter(**where))]  # noqa: E731
    assert seqs() == [late, manual, first]
    assert seqs(host="h1") == [first]
    assert seqs(kind="manual") == [late, manual]
    assert seqs(state="completed", schedule_id="s") == [first]
    assert seqs(since=T0 + 1) == [late]
    assert seqs(until=T0 + 1) == [manual, first]
    assert [r.seq for r in store.find_runs(RunFilter(), before_seq=late, limit=1)] == [manual]


def test_ledger_days_and_window_group_instants_by_day_and_run_state(store: Store) -> None:
    add_schedule(store, "s")
    day = 86400
    base = (T0 // day) * day
    ran = admit(store, "s", base + 60)
    admit(store, "s", base + 120)
    with store.atomic():
        store.update_run(ran, state="failed", finished_at=base + 70, host="h1")
        store.insert_occurrence("s", base + day + 5, "skipped-overlap", 1, T0, reason="overlap")
        store.insert_occurrence(
            "s",
            base + day + 60,
            "skipped-misfire",
            1,
            T0,
            last_at=base + day + 600,
            count=10,
            summary=True,
        )
    got = {
        (d.day, d.state, d.run_state, d.count)
        for d in store.ledger_days(["s"], base, base + 2 * day)
    }
    first = base // day
    assert got == {
        (first, "admitted", "failed", 1),
        (first, "admitted", "admitted", 1),
        (first + 1, "skipped-overlap", None, 1),
        (first + 1, "skipped-misfire", None, 10),
    }
    assert store.ledger_days(["s"], base + 2 * day, base + 3 * day) == []
    window = store.ledger_in_window(["s"], base, base + day + 10, 10)
    assert [(w.scheduled_at, w.run_state, w.host) for w in window] == [
        (base + 60, "failed", "h1"),
        (base + 120, "admitted", None),
        (base + day + 5, None, None),
    ]
    assert len(store.ledger_in_window(["s"], base, base + 2 * day, 2)) == 2


def test_schedules_after_prefilters_on_a_flag_and_on_text(store: Store) -> None:
    for name in ("a_1", "ab1", "b%2", "c"):
        add_schedule(store, name)
    with store.atomic():
        store.update_schedule("ab1", paused=1)
        store.update_schedule("c", blocked_reason="zone gone")
    assert [r.id for r in store.schedules_after(None, 9, having="paused")] == ["ab1"]
    assert [r.id for r in store.schedules_after(None, 9, having="blocked_reason")] == ["c"]
    # LIKE's wildcards in the text are literal: `_` is not any character.
    assert [r.id for r in store.schedules_after(None, 9, containing="a_")] == ["a_1"]
    assert [r.id for r in store.schedules_after(None, 9, containing="B%")] == ["b%2"]
    assert [r.id for r in store.schedules_after("a_1", 9, containing="1")] == ["ab1"]
