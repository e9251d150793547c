"""Layer 1: administration and the watermark (docs/semantics.md, "Administration",
"Administration", and section 9), against a real store with an injected clock.

Each test is a short timeline: move the clock (`t[0]`), call the API, read
the schedule row and its ledger. No supervisor, no processes, no sleeps.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.pgserver import integrity_errors
from wfsched.api.admin import Admin
from wfsched.api.paging import encode_cursor
from wfsched.domain.calendar import OneShotCalendar
from wfsched.domain.decisions import ScheduleView, decide
from wfsched.domain.definition import parse_definition
from wfsched.domain.model import Definition
from wfsched.domain.timeutil import format_instant
from wfsched.errors import ConflictError, UsageError
from wfsched.store import OccurrenceRow, ScheduleRow, Store

T0 = 1_796_083_200  # 2026-12-01T00:00:00Z
MIN = 60
HOUR = 3600


class Env:
    def __init__(self, store: Store) -> None:
        self.t = [T0 + 0.25]
        self.store = store
        self.admin = Admin(self.store, clock=lambda: self.t[0])

    def at(self, when: float) -> Env:
        self.t[0] = when
        return self

    def row(self, schedule_id: str = "job") -> ScheduleRow:
        row = self.store.get_schedule(schedule_id)
        assert row is not None
        return row

    def ledger(self, schedule_id: str = "job") -> list[OccurrenceRow]:
        return self.store.page_occurrences(schedule_id, None, 10_000)

    def hold(self, at: int, why: str = "misfire", schedule_id: str = "job") -> None:
        """Plant a held candidate the way the supervisor persists one."""
        with self.store.atomic():
            row = self.row(schedule_id)
            self.store.update_schedule(
                schedule_id,
                consumed_through=max(row.consumed_through, at),
                candidate_at=at,
                candidate_why=why,
            )


@pytest.fixture
def env(tmp_path: Path, make_store: Callable[[Path], Store]) -> Env:
    return Env(make_store(tmp_path / "store"))


def cron_def(cron: str = "0 * * * *", schedule_id: str = "job", extra: str = "") -> Definition:
    text = f'id = "{schedule_id}"\n[trigger]\ncron = "{cron}"\n[run]\ncommand = ["true"]\n{extra}'
    return parse_definition(text, f"{schedule_id}.toml", now=T0)


def once_def(at: int, schedule_id: str = "job", misfire: str = "skip") -> Definition:
    text = (
        f'id = "{schedule_id}"\n[trigger]\nat = "{format_instant(at)}"\n'
        f'[run]\ncommand = ["true"]\n[policy]\nmisfire = "{misfire}"\n'
    )
    return parse_definition(text, f"{schedule_id}.toml", now=T0)


def brief(rows: list[OccurrenceRow]) -> list[tuple[str, int, str | None, int | None, bool]]:
    return [(r.state, r.scheduled_at, r.reason, r.count, r.summary) for r in rows]


# ------------------------------------------------------------------ create


def test_create_starts_the_watermark_at_creation_time(env: Env) -> None:
    env.at(T0 + 30 * MIN + 0.5).admin.create(cron_def())
    row = env.row()
    assert row.consumed_through == T0 + 30 * MIN  # no backfill of 00:00
    assert row.next_due == T0 + HOUR
    assert row.revision == 1 and row.state == "active"
    assert row.candidate_at is None
    assert env.ledger() == []
    assert env.admin.get("job")["next_due"] == "2026-12-01T01:00:00Z"


def test_create_exactly_at_an_instant_does_not_backfill_it(env: Env) -> None:
    env.at(T0 + HOUR).admin.create(cron_def())
    assert env.row().consumed_through == T0 + HOUR
    assert env.row().next_due == T0 + 2 * HOUR


def test_create_future_one_shot(env: Env) -> None:
    env.at(T0).admin.create(once_def(T0 + 90))
    row = env.row()
    assert (row.consumed_through, row.next_due, row.exhausted) == (T0, T0 + 90, False)


@pytest.mark.parametrize("age", [0, 1, 3 * HOUR])
def test_create_one_shot_already_past_stays_due(env: Env, age: int) -> None:
    at = T0 - age
    env.at(T0 + 0.9).admin.create(once_def(at))
    row = env.row()
    assert row.consumed_through == at - 1
    assert row.next_due == at
    assert not row.exhausted and row.state == "active"
    assert env.ledger() == []


@pytest.mark.parametrize("misfire", ["skip", "latest"])
def test_past_one_shot_is_left_to_the_misfire_policy(env: Env, misfire: str) -> None:
    at = T0 - HOUR
    env.at(T0).admin.create(once_def(at, misfire=misfire))
    row = env.row()
    view = ScheduleView(row.id, row.consumed_through, None, "skip", None, misfire, 60)
    d = decide(view, OneShotCalendar(at), T0, active=0, capacity_left=1)
    if misfire == "skip":
        assert [(e.state, e.at) for e in d.entries] == [("skipped-misfire", at)]
        assert d.admit == []
    else:
        assert d.admit == [(at, "misfire")]
    assert d.exhausted


# ------------------------------------------------------------------ update


def test_update_with_a_stale_revision_changes_nothing(env: Env) -> None:
    env.at(T0).admin.create(cron_def())
    env.hold(T0 - HOUR)
    before = env.row()
    env.at(T0 + 5 * HOUR)
    with pytest.raises(ConflictError, match="stale revision"):
        env.admin.update(cron_def("*/15 * * * *"), expected_revision=7)
    with pytest.raises(ConflictError):
        env.admin.update(cron_def("*/15 * * * *"), expected_revision=0)
    assert env.row() == before
    assert env.ledger() == []


def test_update_unchanged_definition_changes_nothing(env: Env) -> None:
    env.at(T0).admin.create(cron_def())
    env.hold(T0 - HOUR)
    before = env.row()
    view, changed = env.at(T0 + 5 * HOUR).admin.update(cron_def(), expected_revision=1)
    assert not changed and view["revision"] == 1
    assert env.row() == before  # candidate still held, watermark untouched
    assert env.ledger() == []


def test_update_bumps_revision_clears_candidate_and_moves_the_watermark(env: Env) -> None:
    env.at(T0).admin.create(cron_def())
    env.hold(T0 - HOUR)  # a catch-up candidate is held
    env.at(T0 + 2 * HOUR + 10 * MIN + 0.7)
    view, changed = env.admin.update(cron_def("*/15 * * * *"), expected_revision=1)
    assert changed and view["revision"] == 2
    row = env.row()
    assert row.revision == 2
    assert row.candidate_at is None and row.candidate_why is None
    assert row.consumed_through == T0 + 2 * HOUR + 10 * MIN
    assert row.next_due == T0 + 2 * HOUR + 15 * MIN  # the new trigger, from now
    superseded = [r for r in env.ledger() if r.state == "superseded"]
    assert [(r.scheduled_at, r.reason, r.revision) for r in superseded] == [
        (T0 - HOUR, "update", 1)
    ]
    assert not any(r.state == "admitted" for r in env.ledger())
    # The next update needs the new revision.
    with pytest.raises(ConflictError):
        env.admin.update(cron_def("0 * * * *"), expected_revision=1)
    _, changed = env.admin.update(cron_def("0 * * * *"), expected_revision=2)
    assert changed and env.row().revision == 3


def test_update_never_moves_the_watermark_back(env: Env) -> None:
    env.at(T0).admin.create(cron_def())
    with env.store.atomic():
        env.store.update_schedule("job", consumed_through=T0 + 5 * HOUR)
    env.at(T0 + HOUR)  # the wall clock is behind the watermark
    env.admin.update(cron_def("*/30 * * * *"), expected_revision=1)
    assert env.row().consumed_through == T0 + 5 * HOUR
    assert env.row().next_due == T0 + 5 * HOUR + 30 * MIN


# ------------------------------------------------------------------ pause / resume


def test_pause_clears_candidate_consumes_span_and_is_idempotent(env: Env) -> None:
    env.at(T0).admin.create(cron_def())
    env.hold(T0 - HOUR, "capacity")
    env.at(T0 + 20 * MIN)
    view, changed = env.admin.pause("job")
    assert changed and view["state"] == "paused" and view["next_due"] is None
    row = env.row()
    assert row.paused and row.revision == 1
    assert row.candidate_at is None and row.candidate_why is None
    assert row.consumed_through == T0 + 20 * MIN
    assert row.next_due is None
    assert brief(env.ledger()) == [("superseded", T0 - HOUR, "pause", None, False)]
    before = env.row()
    env.at(T0 + 3 * HOUR)
    view, changed = env.admin.pause("job")
    assert not changed and view["state"] == "paused"
    assert env.row() == before
    assert len(env.ledger()) == 1


def test_resume_writes_one_skipped_paused_row_and_continues_in_the_future(env: Env) -> None:
    env.at(T0).admin.create(cron_def())
    env.at(T0 + 10 * MIN).admin.pause("job")
    env.at(T0 + 5 * HOUR + 10 * MIN + 0.3)
    view, changed = env.admin.resume("job")
    assert changed and view["state"] == "active"
    assert view["next_due"] == format_instant(T0 + 6 * HOUR)
    row = env.row()
    assert not row.paused and row.revision == 1
    assert row.consumed_through == T0 + 5 * HOUR + 10 * MIN
    assert row.next_due == T0 + 6 * HOUR
    (paused,) = env.ledger()
    assert (paused.state, paused.summary, paused.count) == ("skipped-paused", True, 5)
    assert (paused.scheduled_at, paused.last_at) == (T0 + HOUR, T0 + 5 * HOUR)
    before = env.row()
    view, changed = env.at(T0 + 7 * HOUR).admin.resume("job")
    assert not changed and env.row() == before and len(env.ledger()) == 1


@pytest.mark.parametrize(("minutes", "count"), [(100, 100), (101, None), (3 * 24 * 60, None)])
def test_resume_summary_count_is_exact_up_to_the_cap(env: Env, minutes: int, count: int) -> None:
    env.at(T0).admin.create(cron_def("* * * * *"))
    env.admin.pause("job")
    env.at(T0 + minutes * MIN + 5).admin.resume("job")
    (paused,) = env.ledger()
    assert paused.state == "skipped-paused" and paused.summary
    assert paused.count == count
    assert (paused.scheduled_at, paused.last_at) == (T0 + MIN, T0 + minutes * MIN)
    assert env.row().next_due == T0 + (minutes + 1) * MIN


def test_pause_resume_without_time_passing_writes_nothing(env: Env) -> None:
    env.at(T0 + 10).admin.create(cron_def())
    env.admin.pause("job")
    env.admin.resume("job")
    assert env.ledger() == []
    assert env.row().next_due == T0 + HOUR


def test_one_shot_passing_while_paused_gets_its_own_row_and_is_exhausted(env: Env) -> None:
    at = T0 + 2 * HOUR + 7
    env.at(T0).admin.create(once_def(at, misfire="latest"))
    env.at(T0 + HOUR).admin.pause("job")
    view, _ = env.at(T0 + 3 * HOUR).admin.resume("job")
    assert view["state"] == "exhausted" and view["next_due"] is None
    (row,) = env.ledger()
    assert (row.state, row.scheduled_at, row.summary, row.count) == (
        "skipped-paused",
        at,
        False,
        None,
    )
    assert env.admin.occurrences("job")[0][0]["occurrence_id"] == "job@20261201T020007Z"
    assert env.row().exhausted and env.row().candidate_at is None


def test_pause_resume_delete_never_bump_the_revision(env: Env) -> None:
    env.at(T0).admin.create(cron_def())
    env.admin.update(cron_def("*/5 * * * *"), expected_revision=1)
    for step, op in enumerate((env.admin.pause, env.admin.resume, env.admin.delete), 1):
        env.at(T0 + step * HOUR)
        assert op("job")[0]["revision"] == 2
        assert env.row().revision == 2


def test_update_while_paused_records_paused_time_per_revision(env: Env) -> None:
    """Update consumes up to its own instant (docs/semantics.md: consumed = max(.., now)),
    so the paused span splits at the edit: the old revision's part is written
    by the update, the rest by resume, both as paused time."""
    env.at(T0).admin.create(cron_def())
    env.at(T0 + 10 * MIN).admin.pause("job")
    changed_env = cron_def(extra='env = { A = "1" }\n')  # same trigger, new revision
    env.at(T0 + 3 * HOUR + 10 * MIN).admin.update(changed_env, expected_revision=1)
    env.at(T0 + 5 * HOUR + 10 * MIN).admin.resume("job")
    assert brief(env.ledger()) == [
        ("skipped-paused", T0 + HOUR, "update", 3, True),
        ("skipped-paused", T0 + 4 * HOUR, "paused", 2, True),
    ]
    assert [row.revision for row in env.ledger()] == [1, 2]


def test_update_while_paused_recomputes_exhaustion(env: Env) -> None:
    env.at(T0).admin.create(once_def(T0 + HOUR))
    env.at(T0 + 10 * MIN).admin.pause("job")
    env.at(T0 + 2 * HOUR).admin.resume("job")
    assert env.row().state == "exhausted"  # the one-shot passed while paused
    env.admin.pause("job")
    env.admin.update(cron_def(), expected_revision=1)
    view, _ = env.at(T0 + 2 * HOUR + 1).admin.resume("job")
    assert view["state"] == "active"
    assert view["next_due"] == format_instant(T0 + 3 * HOUR)
    assert not env.row().exhausted


# ------------------------------------------------------------------ delete


def test_delete_is_soft_and_the_id_is_never_reusable(env: Env, tmp_path: Path) -> None:
    env.at(T0).admin.create(cron_def())
    env.store.insert_occurrence("job", T0 - HOUR, "skipped-misfire", 1, T0, reason="late")
    env.hold(T0 - 2 * HOUR)
    env.at(T0 + 30 * MIN)
    view, changed = env.admin.delete("job")
    assert changed and view["state"] == "deleted" and view["next_due"] is None
    row = env.row()
    assert row.deleted_at == T0 + 30 * MIN and row.revision == 1
    assert row.candidate_at is None and row.next_due is None
    assert ("superseded", T0 - 2 * HOUR, "delete", None, False) in brief(env.ledger())
    assert ("skipped-misfire", T0 - HOUR, "late", None, False) in brief(env.ledger())
    # History stays readable under the same id.
    assert env.admin.get("job")["state"] == "deleted"
    assert len(env.admin.occurrences("job")[0]) == len(env.ledger())
    assert [v["id"] for v in env.admin.schedules(include_deleted=True)] == ["job"]
    assert env.admin.schedules() == []
    # Idempotent.
    assert env.admin.delete("job")[1] is False
    # Never reusable: create, apply (nothing written by a refused apply).
    with pytest.raises(ConflictError, match="undelete job` revives it"):
        env.admin.create(cron_def())
    folder = tmp_path / "defs"
    folder.mkdir()
    (folder / "job.toml").write_text(
        'id = "job"\n[trigger]\ncron = "0 * * * *"\n[run]\ncommand = ["true"]\n'
    )
    (folder / "other.toml").write_text(
        'id = "other"\n[trigger]\ncron = "0 * * * *"\n[run]\ncommand = ["true"]\n'
    )
    with pytest.raises(ConflictError):
        env.admin.apply([str(folder)], strict=True)
    assert env.store.get_schedule("other") is None
    for op in (env.admin.pause, env.admin.resume):
        with pytest.raises(ConflictError):
            op("job")
    with pytest.raises(ConflictError):
        env.admin.update(cron_def("*/5 * * * *"), expected_revision=1)
    assert env.row().revision == 1 and env.row().deleted_at == T0 + 30 * MIN


def test_create_of_an_existing_id_is_a_conflict(env: Env) -> None:
    env.at(T0).admin.create(cron_def())
    before = env.row()
    with pytest.raises(ConflictError, match="already exists"):
        env.at(T0 + HOUR).admin.create(cron_def("*/5 * * * *"))
    assert env.row() == before


# ------------------------------------------------------------------ the watermark


def test_the_store_refuses_to_move_the_watermark_back(env: Env) -> None:
    env.at(T0).admin.create(cron_def())
    with pytest.raises(integrity_errors(), match="may not move back"), env.store.atomic():
        env.store.update_schedule("job", consumed_through=T0 - 1)
    assert env.row().consumed_through == T0
    with env.store.atomic():  # standing still and moving forward are fine
        env.store.update_schedule("job", consumed_through=T0)
        env.store.update_schedule("job", consumed_through=T0 + 1)
    assert env.row().consumed_through == T0 + 1


def test_no_operation_moves_the_watermark_back_under_clock_rollback(env: Env) -> None:
    env.at(T0 + 5 * HOUR).admin.create(cron_def())
    env.at(T0).admin.pause("job")
    assert env.row().consumed_through == T0 + 5 * HOUR
    env.at(T0 + HOUR).admin.resume("job")
    assert env.row().consumed_through == T0 + 5 * HOUR
    assert env.row().next_due == T0 + 6 * HOUR
    env.admin.update(cron_def("*/10 * * * *"), expected_revision=1)
    env.at(T0 + 2 * HOUR).admin.delete("job")
    assert env.row().consumed_through == T0 + 5 * HOUR
    assert env.ledger() == []


# ------------------------------------------------------------------ occurrences paging


def seed(env: Env, count: int, schedule_id: str = "job") -> list[tuple[int, str]]:
    """`count` rows whose reasons name them; every fourth is a summary row
    sharing the instant of its neighbour. Returns the expected order (the
    order of recording) as (scheduled_at, reason)."""
    rows = []
    for i in range(count):
        summary = i % 4 == 3
        at = T0 - 10_000 * MIN + (i - 1 if summary else i) * MIN
        rows.append(
            (
                schedule_id,
                at,
                at + MIN if summary else None,
                2 if summary else None,
                int(summary),
                "skipped-misfire",
                f"r{i}",
                1,
                None,
                float(T0),
            )
        )
    # Inserted out of instant order: pages follow the order of recording.
    scrambled = rows[1::2] + rows[::2]
    with env.store.atomic():
        env.store.insert_occurrences(scrambled)
    stored = env.ledger(schedule_id)
    assert [r.reason for r in stored] == [row[6] for row in scrambled]
    return [(r.scheduled_at, r.reason or "") for r in stored]


def walk(env: Env, limit: int, schedule_id: str = "job") -> tuple[list[dict], int]:
    items: list[dict] = []
    cursor = None
    pages = 0
    while True:
        page, cursor = env.admin.occurrences(schedule_id, limit=limit, cursor=cursor)
        pages += 1
        assert len(page) <= limit
        items += page
        if cursor is None:
            return items, pages
        assert pages < 10_000


@pytest.mark.parametrize("limit", [0, -1, 101, 10_000])
def test_occurrences_limit_bounds(env: Env, limit: int) -> None:
    env.at(T0).admin.create(cron_def())
    with pytest.raises(UsageError):
        env.admin.occurrences("job", limit=limit)


def test_occurrences_limit_edges_are_accepted(env: Env) -> None:
    env.at(T0).admin.create(cron_def())
    assert env.admin.occurrences("job", limit=1) == ([], None)
    assert env.admin.occurrences("job", limit=100) == ([], None)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        "",
        "garbage!",
        "not base64 at all ☃",
        _b64(b"not json"),
        _b64(b"[1, 2]"),
        _b64(json.dumps({"v": 2, "pos": 1}).encode()),
        _b64(json.dumps({"v": 1}).encode()),
        _b64(json.dumps({"v": 1, "pos": 1, "extra": 1}).encode()),
        encode_cursor(pos="1"),
        encode_cursor(pos=1.5),
        encode_cursor(pos=True),
        encode_cursor(run=1),
        # A cursor of the instant-ordered pages before schema version 2.
        encode_cursor(at=1, seq=1),
    ],
)
def test_malformed_cursor_is_a_usage_error(env: Env, cursor: str) -> None:
    env.at(T0).admin.create(cron_def())
    seed(env, 5)
    with pytest.raises(UsageError, match="malformed cursor"):
        env.admin.occurrences("job", cursor=cursor)


def test_out_of_range_cursor_is_a_usage_error(env: Env) -> None:
    env.at(T0).admin.create(cron_def())
    with pytest.raises(UsageError):
        env.admin.occurrences("job", cursor=encode_cursor(pos=10**30))


def test_pending_row_tops_page_one_and_counts_toward_limit(env: Env) -> None:
    env.at(T0).admin.create(cron_def())
    expected = seed(env, 5)
    env.hold(T0 - HOUR, "capacity")
    page, cursor = env.admin.occurrences("job", limit=3)
    assert len(page) == 3
    assert page[0]["state"] == "pending"
    assert page[0]["occurrence_id"] == "job@20261130T230000Z"
    assert page[0]["scheduled_at"] == "2026-11-30T23:00:00Z"
    assert [p["reason"] for p in page[1:]] == [reason for _, reason in expected[:2]]
    rest, pages = [], 0
    while cursor is not None:
        more, cursor = env.admin.occurrences("job", limit=3, cursor=cursor)
        assert all(item["state"] != "pending" for item in more)
        rest += more
        pages += 1
    assert [p["reason"] for p in rest] == [reason for _, reason in expected[2:]]
    assert pages == 1


def test_limit_one_with_a_pending_row_still_reaches_the_history(env: Env) -> None:
    env.at(T0).admin.create(cron_def())
    expected = seed(env, 3)
    env.hold(T0 - HOUR)
    page, cursor = env.admin.occurrences("job", limit=1)
    assert [p["state"] for p in page] == ["pending"]
    assert cursor is not None
    items, _ = [], None
    while cursor is not None:
        page, cursor = env.admin.occurrences("job", limit=1, cursor=cursor)
        items += page
    assert [p["reason"] for p in items] == [reason for _, reason in expected]


@pytest.mark.parametrize("limit", [100, 7, 1])
def test_walking_a_thousand_row_history_returns_each_row_once_in_order(
    env: Env, limit: int
) -> None:
    env.at(T0).admin.create(cron_def())
    env.at(T0).admin.create(cron_def(schedule_id="other"))
    expected = seed(env, 1000)
    seed(env, 50, schedule_id="other")  # another schedule's rows never leak in
    items, pages = walk(env, limit)
    assert [(p["scheduled_at"], p["reason"]) for p in items] == [
        (format_instant(at), reason) for at, reason in expected
    ]
    assert len({p["reason"] for p in items}) == 1000
    assert pages == -(-1000 // limit)  # no trailing empty page
    summaries = [p for p in items if p["occurrence_id"] is None]
    assert len(summaries) == 250 and all(p["count"] == 2 for p in summaries)


@pytest.mark.parametrize("limit", [1, 3, 10])
def test_pages_are_stable_while_rows_arrive(env: Env, limit: int) -> None:
    """Between pages, rows keep arriving, most for instants older than every
    row already paged (a candidate superseded or admitted late, a summary
    written after a restart). Each is seen exactly once, after the rows
    recorded before it, and no page shows a row twice."""
    env.at(T0).admin.create(cron_def())
    expected = [reason for _, reason in seed(env, 12)]
    items, cursor = env.admin.occurrences("job", limit=limit)
    arrived = 0
    while cursor is not None:
        with env.store.atomic():
            for at in (T0 - 50_000 * MIN - arrived, T0 + 50_000 * MIN + arrived)[: 8 - arrived]:
                reason = f"late-{arrived}"
                env.store.insert_occurrence("job", at, "superseded", 1, T0, reason=reason)
                expected.append(reason)
                arrived += 1
        page, cursor = env.admin.occurrences("job", limit=limit, cursor=cursor)
        items += page
    assert arrived >= 2
    assert [item["reason"] for item in items] == expected


def test_pages_miss_no_row_that_concurrent_writers_commit_out_of_order(
    tmp_path: Path, pg_url: str
) -> None:
    """PostgreSQL lets several connections write at once (SQLite has one
    writer at a time, so the test above covers it): a position drawn by one
    transaction must never be committed after a higher one that a reader
    already paged past. A slow writer holds its row uncommitted, a fast one
    writes three more meanwhile, a reader pages in between, and continuing
    from its last cursor it sees every row exactly once, in commit order."""
    import threading
    from dataclasses import replace

    import psycopg

    from tests.daemon import wait_for
    from wfsched.store.location import resolve_store
    from wfsched.store.postgres import PostgresStore

    location = resolve_store(pg_url)
    root = tmp_path / "store"
    root.mkdir()

    def open_store() -> Store:
        return PostgresStore(replace(location, local_dir=root))

    env = Env(open_store())
    env.at(T0).admin.create(cron_def())
    expected = [reason for _, reason in seed(env, 4)]
    slow, fast = open_store(), open_store()
    fast_done = threading.Event()

    def fast_writes() -> None:
        with fast.atomic():
            for n in range(3):
                at = T0 - 90_000 * MIN + n * MIN
                fast.insert_occurrence("job", at, "superseded", 1, T0, reason=f"fast{n}")
        fast_done.set()

    def fast_waits() -> bool:
        with psycopg.connect(pg_url, autocommit=True) as probe:
            row = probe.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock'"
            ).fetchone()
        return bool(row and row[0])

    seen: list[str] = []
    cursors: list[str] = []
    writer = threading.Thread(target=fast_writes)
    with slow.atomic():
        slow.insert_occurrence("job", T0 - 80_000 * MIN, "superseded", 1, T0, reason="slow")
        writer.start()
        wait_for(lambda: fast_done.is_set() or fast_waits(), what="the fast writer")
        cursor: str | None = None
        while True:
            page, cursor = env.admin.occurrences("job", limit=1, cursor=cursor)
            seen += [item["reason"] for item in page]
            if cursor is None:
                break
            cursors.append(cursor)
    writer.join(timeout=30)
    assert fast_done.is_set()
    # The reader goes on from the last cursor it was given.
    kept = seen[: len(cursors)]
    cursor = cursors[-1]
    while cursor is not None:
        page, cursor = env.admin.occurrences("job", limit=1, cursor=cursor)
        kept += [item["reason"] for item in page]
    assert kept == [*expected, "slow", "fast0", "fast1", "fast2"]
    for store in (slow, fast, env.store):
        store.close()


def test_update_to_a_past_one_shot_exhausts_without_backfill(env: Env) -> None:
    env.at(T0).admin.create(cron_def("30 * * * *"))
    # The new `at` is also an instant of the old calendar inside the span the
    # update consumes: exactly one row for it, from the old revision.
    env.at(T0 + 40 * MIN).admin.update(once_def(T0 + 30 * MIN), expected_revision=1)
    assert brief(env.ledger()) == [("skipped-misfire", T0 + 30 * MIN, "update", None, False)]
    assert env.row().exhausted and env.row().next_due is None
    assert env.row().revision == 2


def test_pending_only_page_has_no_cursor_without_history(env: Env) -> None:
    env.at(T0).admin.create(cron_def())
    with env.store.atomic():
        env.store.update_schedule("job", candidate_at=T0, candidate_why="misfire")
    items, cursor = env.admin.occurrences("job", limit=1)
    assert [item["state"] for item in items] == ["pending"] and cursor is None


def test_apply_skips_hidden_paths_dedupes_files_and_refuses_an_empty_prune(
    env: Env, tmp_path: Path
) -> None:
    folder = tmp_path / "defs"
    (folder / ".git").mkdir(parents=True)
    text = 'id = "job"\n[trigger]\ncron = "0 * * * *"\n[run]\ncommand = ["true"]\n'
    (folder / "job.toml").write_text(text)
    (folder / ".git" / "stale.toml").write_text("not toml at all [")
    (folder / ".#job.toml").write_text("editor lock")
    actions = env.at(T0).admin.apply([str(folder), str(folder / "job.toml")])
    assert [(a.schedule_id, a.action) for a in actions] == [("job", "created")]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UsageError, match="refusing to --prune"):
        env.admin.apply([str(empty)], prune=True)
    assert env.row().deleted_at is None


def test_apply_reads_files_in_path_order_and_skips_what_is_no_regular_file(
    tmp_path: Path,
) -> None:
    """Files are taken in the order of their path's components below the
    folder (`a/z.toml` before `a-b/a.toml`, though `-` sorts before `/` as
    text); a folder named `*.toml` is entered, not read; a FIFO named
    `*.toml` is never opened (reading it would wait forever); a linked
    folder is not entered (a link to a folder above would never end)."""
    import os

    from wfsched.api.admin import load_sources

    folder = tmp_path / "defs"
    for name in ("a/z.toml", "a-b/a.toml", "b.toml/inner.toml", "c/d/e.toml", "b.toml0.toml"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        schedule_id = name.replace("/", "_").replace(".", "_")
        (folder / name).write_text(
            f'id = "{schedule_id}"\n[trigger]\ncron = "0 * * * *"\n[run]\ncommand = ["true"]\n'
        )
    os.mkfifo(folder / "pipe.toml")
    (folder / "c" / "up").symlink_to(folder)
    sources = load_sources([str(folder)], T0, {})
    assert list(sources.ids.values()) == [
        str(folder / "a" / "z.toml"),
        str(folder / "a-b" / "a.toml"),
        str(folder / "b.toml" / "inner.toml"),
        str(folder / "b.toml0.toml"),
        str(folder / "c" / "d" / "e.toml"),
    ]
