"""The schedule administration API the CLI calls.

The rules are in docs/semantics.md ("Administration") and the commands in
docs/operations.md ("Command reference").

Each mutating operation is one store transaction and is safe while a
supervisor runs: the supervisor decides inside its own transaction, so the
two serialize. The clock is injected; nothing here reads the time itself.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wfsched.api.reads import Reads
from wfsched.api.views import DefinitionCache, record_entries
from wfsched.domain.decisions import (
    Calendar,
    Candidate,
    Entry,
    ask,
    consume_until,
    next_due_after,
    span_between,
    span_entry,
)
from wfsched.domain.definition import (
    canonical_json,
    load_definition_file,
    parse_definition_bytes,
    read_definition_bytes,
    source_digest,
)
from wfsched.domain.model import Definition, OneShotTrigger, Trigger
from wfsched.domain.timeutil import MAX_INSTANT, Clock, format_instant, parse_instant, wall_clock
from wfsched.errors import (
    CalendarExhausted,
    ConflictError,
    DefinitionError,
    DefinitionErrors,
    EndOfTime,
    UsageError,
    ZoneUnavailable,
)
from wfsched.store import ScheduleRow, Store

if TYPE_CHECKING:
    from wfsched.domain.calendar import CronCalendar, OneShotCalendar

# wfsched.domain.calendar (and croniter behind it) is imported inside the functions
# that compute instants, so importing the admin API does not load croniter by
# itself: start-up time of read commands such as `wfsched list` matters.


LEFT_ALONE = "deleted (left alone)"
"""The apply action for a file whose id belongs to a deleted schedule."""


@dataclass(frozen=True)
class ApplyAction:
    schedule_id: str
    action: str  # "created" | "updated" | "unchanged" | "deleted" | LEFT_ALONE
    revision: int | None
    source: str | None
    blocked_reason: str | None = None
    """An updated schedule's supervisor block, which the update keeps."""
    outside: tuple[int, int] | None = None
    """(revision last applied, revision replaced) when this apply replaces a
    revision made outside the folder (by `edit` or `update`) since then."""
    deleted_at: float | None = None
    """When the schedule of a LEFT_ALONE file was deleted."""
    advice: tuple[tuple[str, str], ...] = ()
    """Warnings for a created or updated definition (`wfsched.domain.advice`)."""


class Admin(Reads):
    """Reads plus everything that validates, computes instants or writes."""

    def __init__(self, store: Store, clock: Clock = wall_clock) -> None:
        super().__init__(store, clock)
        self._definitions = DefinitionCache()

    # -- reading ---------------------------------------------------------------

    def definition(self, row: ScheduleRow) -> Definition:
        """The stored definition, parsed once per (id, revision)."""
        return self._definitions.get(row)

    # -- creating and changing ---------------------------------------------------

    def load(self, path: str) -> Definition:
        return load_definition_file(path, now=int(self.clock()))

    def create(self, defn: Definition) -> dict[str, Any]:
        now = self.clock()
        with self.store.atomic():
            existing = self.store.get_schedule(defn.id)
            if existing is not None:
                raise ConflictError(_taken(existing))
            self._insert(defn, now)
        return self.get(defn.id)

    def _insert(self, defn: Definition, now: float) -> None:
        self.store.insert_schedules([_new_schedule(defn, now)])

    def update(self, defn: Definition, expected_revision: int) -> tuple[dict[str, Any], bool]:
        """Replace the definition; returns (schedule, changed?)."""
        now = self.clock()
        with self.store.atomic():
            row = self.row(defn.id)
            _refuse_deleted(row, "update")
            if row.revision != expected_revision:
                raise ConflictError(
                    f"{row.id}: stale revision {expected_revision}; the store has revision"
                    f" {row.revision}. Re-read it with `wfsched get {row.id} --toml` and"
                    " apply your change to that"
                )
            changed = canonical_json(defn) != row.definition
            if changed:
                self._replace(row, defn, now)
        return self.get(defn.id), changed

    def _replace(self, row: ScheduleRow, defn: Definition, now: float) -> None:
        """A new revision. A supervisor block stays: only `resume` clears it
        (the operator saying its cause was dealt with), so a blocked schedule
        keeps no next due instant until then."""
        from wfsched.domain.calendar import calendar_for

        # A paused schedule's span since the pause is paused time, not a miss.
        change = consume_until(
            self._span_calendar(row),
            row.consumed_through,
            _candidate(row),
            int(now),
            "update",
            span_state="skipped-paused" if row.paused else "skipped-misfire",
        )
        # Updates never backfill: a one-shot `at` already past at the edit
        # precedes the new revision, so the ledger does not owe it and the
        # schedule is exhausted at once (create, by contrast, leaves it due).
        self._record(row, change.entries, now)
        next_due, exhausted = next_due_after(calendar_for(defn.trigger), change.consumed_through)
        if row.paused or row.blocked_reason:
            next_due = None
        revision = row.revision + 1
        definition = canonical_json(defn)
        self.store.update_schedule(
            row.id,
            revision=revision,
            definition=definition,
            updated_at=now,
            consumed_through=change.consumed_through,
            candidate_at=None,
            candidate_why=None,
            next_due=next_due,
            exhausted=int(exhausted),
        )
        self.store.insert_revision(row.id, revision, definition, now, change.consumed_through)

    def apply(
        self,
        paths: Sequence[str],
        *,
        prune: bool = False,
        dry_run: bool = False,
        loaded: Sources | None = None,
        strict: bool = False,
        skip_invalid: bool = False,
        before_commit: Callable[[], None] | None = None,
    ) -> list[ApplyAction]:
        """Make the store match the definitions under `paths` (files or folders).

        Every file is validated before anything is written; one transaction
        covers the whole apply, so it lands completely or not at all. A file
        whose path and bytes are those apply last took its schedule from,
        while the schedule still has the revision apply gave it, is
        unchanged without being parsed again (see `Sources`).
        `loaded`: what `load_sources` already read and validated (before the
        caller opened, and so created, the store).

        A file whose id belongs to a deleted schedule is left alone (a
        LEFT_ALONE action; the caller warns): a file put back by mistake
        must not stop the rest, nor revive the schedule (`undelete` does
        that). `strict` refuses it instead (ConflictError, nothing
        written). `skip_invalid` (`supervise --apply`) applies the valid
        files and leaves out the invalid ones (`Sources.invalid`, which the
        caller reports) instead of refusing them all. `before_commit` is
        called as the transaction's last step (the CLI holds Ctrl-C there,
        so an interrupted apply either committed or wrote nothing).
        """
        now = self.clock()
        sources = (
            loaded
            if loaded is not None
            else load_sources(
                paths,
                int(now),
                self.store.applied_sources(),
                prune=prune,
                skip_invalid=skip_invalid,
            )
        )
        actions: list[ApplyAction] = []
        applied_rows: list[tuple[str, int, float, str | None, str | None]] = []
        created: list[tuple[str, str, float, int, int | None, bool]] = []
        first_due: _FirstDue = {}
        with self.store.atomic():
            # Read again inside the transaction: an `edit` since the first
            # read makes its file one to parse and compare after all.
            sources.recheck(self.store.applied_sources(), int(now), skip_invalid=skip_invalid)
            wanted = sources.parsed
            existing = self.store.schedules_by_id(wanted)
            applied = self.store.applied_revisions(wanted)
            for schedule_id in sorted(sources.ids):
                if schedule_id in sources.kept:
                    revision, source, _digest = sources.kept[schedule_id]
                    actions.append(ApplyAction(schedule_id, "unchanged", revision, source))
                    continue
                defn, source, digest = wanted[schedule_id]
                row = existing.get(schedule_id)
                if row is None:
                    actions.append(
                        ApplyAction(schedule_id, "created", 1, source, advice=_advice(defn, now))
                    )
                    if not dry_run:
                        created.append(_new_schedule(defn, now, first_due))
                        applied_rows.append((schedule_id, 1, now, source, digest))
                    continue
                if row.deleted_at is not None:
                    if strict:
                        raise ConflictError(
                            f"{source}: id: {_deleted_words(row)}; --strict refuses it, so"
                            " nothing was written"
                        )
                    actions.append(
                        ApplyAction(
                            schedule_id, LEFT_ALONE, row.revision, source, deleted_at=row.deleted_at
                        )
                    )
                    continue
                if canonical_json(defn) == row.definition:
                    actions.append(ApplyAction(schedule_id, "unchanged", row.revision, source))
                    if not dry_run:
                        applied_rows.append((schedule_id, row.revision, now, source, digest))
                    continue
                last = applied.get(schedule_id)
                # A revision newer than the one the folder gave was made by
                # `edit` or `update`; the folder wins, but not silently.
                outside = (last, row.revision) if last is not None and last < row.revision else None
                actions.append(
                    ApplyAction(
                        schedule_id,
                        "updated",
                        row.revision + 1,
                        source,
                        blocked_reason=row.blocked_reason,
                        outside=outside,
                        advice=_advice(defn, now),
                    )
                )
                if not dry_run:
                    self._replace(row, defn, now)
                    applied_rows.append((schedule_id, row.revision + 1, now, source, digest))
            # New schedules touch no other row: inserted together, in the
            # same transaction, before `applied` names them.
            self.store.insert_schedules(created)
            self.store.record_applied(applied_rows)
            if prune:
                for row in self.store.list_schedules():
                    if row.id not in sources.ids:
                        actions.append(ApplyAction(row.id, "deleted", row.revision, None))
                        if not dry_run:
                            self._delete(row, now)
            if before_commit is not None:
                before_commit()
        return actions

    # -- pause, resume, delete -------------------------------------------------------

    def pause(self, schedule_id: str) -> tuple[dict[str, Any], bool]:
        now = self.clock()
        with self.store.atomic():
            row = self.row(schedule_id)
            _refuse_deleted(row, "pause")
            if row.paused:
                return self.get(schedule_id), False
            change = consume_until(
                self._span_calendar(row),
                row.consumed_through,
                _candidate(row),
                int(now),
                "pause",
            )
            self._record(row, change.entries, now)
            self.store.update_schedule(
                row.id,
                paused=1,
                updated_at=now,
                consumed_through=change.consumed_through,
                candidate_at=None,
                candidate_why=None,
                next_due=None,
            )
        return self.get(schedule_id), True

    def resume(self, schedule_id: str) -> tuple[dict[str, Any], bool]:
        """Continue from the next future instant; the paused span is one
        `skipped-paused` row (a one-shot that passed gets a row of its own).

        Resume also clears a supervisor block: it is the operator saying the
        cause was dealt with. The diagnostic stays in the supervisor's log
        (`blocked` event); `list`/`status` stop showing it.
        """
        now = self.clock()
        with self.store.atomic():
            row = self.row(schedule_id)
            _refuse_deleted(row, "resume")
            if not row.paused and not row.blocked_reason:
                return self.get(schedule_id), False
            cal = self._calendar(row)
            consumed = max(row.consumed_through, int(now))
            entries: list[Entry] = []
            if row.paused:
                span = span_between(cal, row.consumed_through, int(now))
                if span is not None:
                    entries.append(span_entry(span, "skipped-paused", "paused"))
            else:
                consumed = row.consumed_through
            self._record(row, entries, now)
            next_due, exhausted = next_due_after(cal, consumed)
            self.store.update_schedule(
                row.id,
                paused=0,
                blocked_reason=None,
                updated_at=now,
                consumed_through=consumed,
                next_due=next_due,
                exhausted=int(exhausted),
            )
        return self.get(schedule_id), True

    def delete(self, schedule_id: str) -> tuple[dict[str, Any], bool]:
        now = self.clock()
        with self.store.atomic():
            row = self.row(schedule_id)
            if row.deleted_at is not None:
                return self.get(schedule_id), False
            self._delete(row, now)
        return self.get(schedule_id), True

    def _delete(self, row: ScheduleRow, now: float) -> None:
        consumed = row.consumed_through
        if not row.paused:
            change = consume_until(
                self._span_calendar(row),
                row.consumed_through,
                _candidate(row),
                int(now),
                "delete",
            )
            self._record(row, change.entries, now)
            consumed = change.consumed_through
        self.store.update_schedule(
            row.id,
            deleted_at=now,
            updated_at=now,
            consumed_through=consumed,
            candidate_at=None,
            candidate_why=None,
            next_due=None,
        )

    def undelete(self, schedule_id: str) -> tuple[dict[str, Any], bool]:
        """Revive a deleted schedule under its id and history; (schedule, changed?).

        Its definition comes back as revision + 1 (the revision history
        shows the revival). Nothing is backfilled: the instants of the
        span it spent deleted are consumed and recorded as one
        `skipped-paused` row with reason `deleted` (a single instant gets a
        row of its own), the operator's choice like a pause, not a miss,
        so no missed-run alert fires for it. A schedule paused or blocked
        when it was deleted comes back paused or blocked.
        """
        now = self.clock()
        with self.store.atomic():
            row = self.row(schedule_id)
            if row.deleted_at is None:
                return self.get(schedule_id), False
            cal = self._calendar(row)
            consumed = max(row.consumed_through, int(now))
            span = span_between(cal, row.consumed_through, int(now))
            if span is not None:
                self._record(row, [span_entry(span, "skipped-paused", "deleted")], now)
            next_due, exhausted = next_due_after(cal, consumed)
            if row.paused or row.blocked_reason:
                next_due = None
            revision = row.revision + 1
            self.store.update_schedule(
                row.id,
                revision=revision,
                deleted_at=None,
                updated_at=now,
                consumed_through=consumed,
                next_due=next_due,
                exhausted=int(exhausted),
            )
            self.store.insert_revision(row.id, revision, row.definition, now, consumed)
        return self.get(schedule_id), True

    # -- previews and history ------------------------------------------------------

    def next(
        self, schedule_id: str, count: int = 5, after: str | None = None
    ) -> list[dict[str, Any]]:
        from wfsched.domain.calendar import (
            CronCalendar,
            describe_local,
            describe_one_shot_local,
        )

        if not 1 <= count <= 1000:
            raise UsageError("--count must be between 1 and 1000")
        row = self.row(schedule_id)
        defn = self.definition(row)
        cal = self._calendar(row)
        if after is not None:
            try:
                cursor = parse_instant(after)
            except ValueError as exc:
                raise UsageError(f"--after: {exc}") from None
        else:
            cursor = max(int(self.clock()), row.consumed_through)
        zone = getattr(defn.trigger, "timezone", "UTC")
        # A paused or blocked schedule's calendar goes on, but none of these
        # instants runs unless `resume` comes first: each says so.
        held = row.state if row.state in ("paused", "blocked") else None
        items: list[dict[str, Any]] = []
        for _ in range(count):
            try:
                following = ask(cal.next_after_epoch, cursor)
            except CalendarExhausted as exc:
                if items:
                    break  # the instants before the end are the answer
                if isinstance(exc, EndOfTime):
                    raise UsageError(
                        f"--after: {schedule_id} has no instant after {format_instant(cursor)}"
                        f" before the end of representable time ({format_instant(MAX_INSTANT)})"
                    ) from None
                raise
            if following is None:
                break
            if isinstance(defn.trigger, OneShotTrigger):
                local, note = describe_one_shot_local(following, defn.trigger.written), None
            else:
                local, note = describe_local(
                    following, zone, cal if isinstance(cal, CronCalendar) else None
                )
            items.append(
                {
                    "scheduled_at": format_instant(following),
                    "local": local,
                    "note": note,
                    "held": held,
                }
            )
            cursor = following
        return items

    # -- helpers ---------------------------------------------------------------------

    def _calendar(self, row: ScheduleRow) -> CronCalendar | OneShotCalendar:
        from wfsched.domain.calendar import calendar_for

        try:
            return calendar_for(self.definition(row).trigger)
        except ZoneUnavailable as exc:
            raise ZoneUnavailable(f"{row.id}: {exc} (`wfsched edit {row.id}`)") from None

    def _span_calendar(self, row: ScheduleRow) -> Calendar:
        """The calendar that accounts for the span an operation consumes.

        A stored zone that no longer resolves has no instants anyone can
        list: the supervisor blocked the schedule and ran none of them, so
        pause, delete and update still do their work, recording no span
        (the watermark moves on; nothing before it is ever run).
        """
        try:
            return self._calendar(row)
        except ZoneUnavailable:
            return _UNLISTABLE

    def _record(self, row: ScheduleRow, entries: Iterable[Entry], now: float) -> None:
        record_entries(self.store, row.id, row.revision, entries, now)


class Sources:
    """The definitions an apply found, by schedule id, in file order.

    `parsed`: (definition, path, digest) of each file parsed and validated.
    `kept`: (revision, path, digest) of each file whose path and bytes are
    those apply last took the schedule from, at the revision the schedule
    still has: unchanged, without parsing (its bytes stay in `unparsed`).
    `invalid`: what was wrong with each file left out (`read_sources`).
    """

    def __init__(self) -> None:
        self.ids: dict[str, str] = {}
        self.parsed: dict[str, tuple[Definition, str, str]] = {}
        self.kept: dict[str, tuple[int, str, str]] = {}
        self.unparsed: dict[str, bytes] = {}
        self.invalid: list[DefinitionError] = []
        self.files = 0
        """How many definition files were found."""

    def recheck(
        self,
        known: dict[tuple[str, str], tuple[str, int]],
        now: int,
        *,
        skip_invalid: bool = False,
    ) -> None:
        """Parse each kept file whose schedule changed since it was kept
        (`skip_invalid`: one that no longer validates is left out)."""
        for schedule_id, (revision, source, digest) in list(self.kept.items()):
            if known.get((source, digest)) != (schedule_id, revision):
                del self.kept[schedule_id]
                try:
                    defn = parse_definition_bytes(self.unparsed[schedule_id], source, now=now)
                except DefinitionError as exc:
                    if not skip_invalid:
                        raise
                    self.invalid.append(exc)
                    del self.ids[schedule_id]
                    continue
                self.parsed[schedule_id] = (defn, source, digest)

    def drop(self, schedule_id: str) -> str:
        """Leave a schedule's file out; its path."""
        self.parsed.pop(schedule_id, None)
        self.kept.pop(schedule_id, None)
        self.unparsed.pop(schedule_id, None)
        return self.ids.pop(schedule_id)

    def refuse_invalid(self, outcome: str) -> None:
        """Every invalid file in one error (`outcome` ends its summary line)."""
        if len(self.invalid) == 1:
            raise self.invalid[0]
        if self.invalid:
            raise DefinitionErrors(self.invalid, self.files, outcome)


def load_sources(
    paths: Sequence[str],
    now: int,
    known: dict[tuple[str, str], tuple[str, int]],
    *,
    prune: bool = False,
    skip_invalid: bool = False,
) -> Sources:
    """`read_sources`, refusing every invalid file in one error unless
    `skip_invalid` (then they are in `Sources.invalid`). It writes nothing:
    called before a store exists, an apply with any invalid file leaves
    nothing behind, not even a new empty store."""
    sources = read_sources(paths, now, known)
    if not skip_invalid:
        sources.refuse_invalid("; nothing was written")
    if prune and not sources.ids:
        raise UsageError(
            f"no definitions under {', '.join(paths)}; refusing to --prune every schedule"
        )
    return sources


def read_sources(
    paths: Sequence[str],
    now: int,
    known: dict[tuple[str, str], tuple[str, int]],
    *,
    stdin: Callable[[], bytes] | None = None,
    as_given: bool = False,
) -> Sources:
    """Read and validate every definition file under `paths`, parsing only
    those not in `known` ((path, digest) -> (schedule id, revision), what
    the store says apply last took each schedule from). `validate` and
    `apply` both read their files here, so they accept and refuse the same:
    folders walked the same way, only `*.toml` files in them, and an id
    defined in two files refused in both (neither file says which is meant).
    Invalid files are collected in `Sources.invalid`, never raised; a path
    that does not exist is a usage error. `stdin`: reads the bytes of `-`
    (`validate -`); without it `-` is a path like any other. `as_given`:
    a file named directly is named as written (`validate`'s output),
    not by its real path (which `apply` remembers it by)."""
    # Ordered and de-duplicated by real path. Plain strings, not Paths:
    # hashing and deriving Paths was most of an unchanged apply's cost.
    files: dict[str, None] = {}
    shown: dict[str, str] = {}
    real_dirs: dict[str, str] = {}
    for given in paths:
        path = Path(given)
        if given == "-" and stdin is not None:
            files.setdefault(STDIN_SOURCE, None)
        elif path.is_dir():
            for entry in _toml_entries(given):
                real = _real_file(entry, real_dirs)
                if real is not None:
                    files.setdefault(real, None)
        elif path.exists():
            real = str(path.resolve())
            files.setdefault(real, None)
            if as_given:
                shown.setdefault(real, given)
        else:
            raise UsageError(f"{given}: no such file or directory")
    sources = Sources()
    sources.files = len(files)
    twice: dict[str, list[str]] = {}
    for real in files:
        source = shown.get(real, real)
        try:
            if source == STDIN_SOURCE and stdin is not None:
                data = stdin()
            else:
                data = read_definition_bytes(real)
            digest = source_digest(data)
            found = known.get((source, digest))
            if found is not None:
                schedule_id = found[0]
            else:
                defn = parse_definition_bytes(data, source, now=now)
                schedule_id = defn.id
        except DefinitionError as exc:
            sources.invalid.append(exc)
            continue
        if schedule_id in sources.ids or schedule_id in twice:
            twice.setdefault(schedule_id, []).append(source)
            continue
        sources.ids[schedule_id] = source
        if found is not None:
            sources.kept[schedule_id] = (found[1], source, digest)
            sources.unparsed[schedule_id] = data
        else:
            sources.parsed[schedule_id] = (defn, source, digest)
    for schedule_id, others in twice.items():
        named = [sources.drop(schedule_id), *others]
        for source in named:
            elsewhere = ", ".join(other for other in named if other != source)
            sources.invalid.append(
                DefinitionError(source, "id", f"{schedule_id!r} is also defined in {elsewhere}")
            )
    return sources


STDIN_SOURCE = "<stdin>"
"""How errors name a definition read from standard input."""


class _Unlistable:
    """A calendar with no instant to list (see Admin._span_calendar)."""

    def next_after_epoch(self, t: int) -> int | None:
        return None

    def prev_before_epoch(self, t: int) -> int | None:
        return None


_UNLISTABLE = _Unlistable()


_FirstDue = dict[tuple[Trigger, int], tuple[int | None, bool]]
"""(trigger, watermark) -> (next due instant, exhausted?), within one apply."""


def _new_schedule(
    defn: Definition, now: float, first_due: _FirstDue | None = None
) -> tuple[str, str, float, int, int | None, bool]:
    """The row `Store.insert_schedules` takes for a schedule created at `now`.

    `first_due`: the answers already computed in this apply. Schedules with
    the same trigger (cron as written, zone) share one calendar, and so one
    first due instant after the same watermark: asked once, not per file."""
    consumed = int(now)
    if isinstance(defn.trigger, OneShotTrigger) and defn.trigger.at <= consumed:
        # A one-shot already past at create is accepted and left to the
        # misfire policy: its instant must still be due, not consumed.
        consumed = defn.trigger.at - 1
    key = (defn.trigger, consumed)
    due = first_due.get(key) if first_due is not None else None
    if due is None:
        from wfsched.domain.calendar import calendar_for

        due = next_due_after(calendar_for(defn.trigger), consumed)
        if first_due is not None:
            first_due[key] = due
    next_due, exhausted = due
    return defn.id, canonical_json(defn), now, consumed, next_due, exhausted


def _advice(defn: Definition, now: float) -> tuple[tuple[str, str], ...]:
    from wfsched.domain.advice import advise

    return tuple(advise(defn, int(now)))


def _candidate(row: ScheduleRow) -> Candidate | None:
    if row.candidate_at is None or row.candidate_why is None:
        return None
    return Candidate(row.candidate_at, row.candidate_why)


def _taken(row: ScheduleRow) -> str:
    if row.deleted_at is not None:
        return _deleted_words(row)
    return f"{row.id!r} already exists (revision {row.revision}); use `wfsched update`"


def _deleted_words(row: ScheduleRow) -> str:
    assert row.deleted_at is not None
    return (
        f"{row.id!r} belongs to a schedule deleted at {format_instant(row.deleted_at)};"
        f" `wfsched undelete {row.id}` revives it with its history, or choose another id"
    )


def _refuse_deleted(row: ScheduleRow, operation: str) -> None:
    if row.deleted_at is not None:
        raise ConflictError(
            f"{row.id}: cannot {operation} a deleted schedule (deleted at"
            f" {format_instant(row.deleted_at)}); its history stays readable with `wfsched get`"
        )


def _toml_entries(folder: str) -> list[os.DirEntry[str]]:
    """The `*.toml` entries under `folder`, recursively, sorted by their
    path's components below it (the order of pathlib's `Path.parts`).

    Hidden folders and files (.git, editor swap files) are not definitions
    and are not entered. Linked folders are not entered either (a link to
    a folder above would never end), and a folder that cannot be listed is
    passed over, as pathlib's `rglob` did. One `scandir` per folder, and
    the type of each entry comes with it: walking 10,000 files through
    pathlib cost a fifth of an unchanged apply.
    """
    found: list[tuple[tuple[str, ...], os.DirEntry[str]]] = []
    pending: list[tuple[str, tuple[str, ...]]] = [(folder, ())]
    while pending:
        directory, parts = pending.pop()
        try:
            with os.scandir(directory) as listing:
                entries = list(listing)
        except PermissionError:
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            below = (*parts, entry.name)
            if entry.name.endswith(".toml"):
                found.append((below, entry))
            # try, not contextlib.suppress: this runs once per file.
            try:
                if entry.is_dir(follow_symlinks=False):
                    pending.append((entry.path, below))
            except OSError:
                pass
    found.sort(key=lambda item: item[0])
    return [entry for _parts, entry in found]


def _real_file(entry: os.DirEntry[str], real_dirs: dict[str, str]) -> str | None:
    """The real path of `entry` if it is a file (None otherwise), resolving
    each folder once: a file that is no symlink lies in its folder's real
    path, and resolving every file anew walks its whole path per file."""
    try:
        if entry.is_symlink():
            return os.path.realpath(entry.path) if os.path.isfile(entry.path) else None
        if not entry.is_file(follow_symlinks=False):
            return None
    except OSError:
        return None
    folder, name = os.path.split(entry.path)
    parent = real_dirs.get(folder)
    if parent is None:
        parent = real_dirs[folder] = os.path.realpath(folder or ".")
    return os.path.join(parent, name)
