"""Retention: remove finished runs and old ledger rows (`wfsched prune`, and
the supervisor's periodic call).

`prune(store, older_than_seconds, now, dry_run)` is the single entry point.
With `cutoff = now - older_than_seconds`:

- A run is removable when it is finished (completed or failed) and its
  `finished_at` is before the cutoff. Its occurrence row, its attempts and its
  run directory go with it. Manual runs age the same way.
- An occurrence row with no run is removable when it was recorded before the
  cutoff and every instant it covers (`scheduled_at`, and `last_at` for a
  summary) is before it.
- A request (`trigger`, `runs resume`, `runs cancel`) is removable once it
  was answered (done or refused) before the cutoff; a pending one never is.
- Rows and directories of unfinished runs (admitted, running, interrupted)
  are never touched, however old. Schedules and revisions are never removed.

The ledger stays a complete account (docs/semantics.md, "The history (ledger)"). Removed rows are
replaced, per schedule, by `pruned` summary rows (`first`, `last`, `count`,
reason `retention: history before <cutoff> pruned`). One `pruned` row covers
one contiguous stretch of removed history: a row that stays (an old
interrupted run, say) splits the stretch in two, because a summary spanning a
kept row would account for that instant twice. So a schedule normally has one
`pruned` row at the head of its history, plus one more per kept row inside
the removed span. Later prunes extend the adjacent `pruned` row instead of
adding one per prune or per batch. `count` is the sum of the removed rows'
counts (1 for a row of its own), exact even above 100; it is null when a
removed summary had no count (a catch-up jump over more than 100 instants).
`pruned` rows are retention's own record and are never pruned themselves.

Work is done in batches of `batch_size` (500) rows, one transaction each, so a
supervisor sharing the database waits at most one batch; `max_batches`
bounds the work of one call and `PruneReport.more` says whether work is left.
Run directories are removed only after the transaction that removed their
rows committed. A crash in between leaves an orphan directory: prune also
removes directories under `runs/` whose run row no longer exists and whose
mtime is before the cutoff (a directory half-removed by the crash may carry
a recent mtime, and then waits for a later prune: harmless).

For the supervisor: call `prune(store, retention, now, max_batches=N)`
between ticks and call again soon while `report.more` is true. Measured
(bench/bench_history.py, 1M rows): a 500-row batch holds the write lock for
~7 ms (p99 ~22 ms); its run directories are removed afterwards without the
lock, and on a slow file system that dominates (1-9 ms per directory on ext4
mounted with `discard`), so an in-loop caller wanting short calls should pass
a smaller `batch_size` (rows and directories per batch). A call that finds
nothing costs ~1 ms plus one scan of `runs/` and of the runs table.

`dry_run` reads the same batches without writing anything or touching any
file; it does not report the summary rows it would write (`summary_rows` is
null), because their merging depends on the deletions it does not make.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path
from typing import Any

from wfsched.domain.timeutil import format_instant
from wfsched.errors import UsageError
from wfsched.store import PRUNED_STATE, LedgerItem, PrunableRow, Store, parse_run_id, run_id
from wfsched.store.batching import chunked
from wfsched.store.rundirs import records_root

BATCH_SIZE = 500


ORPHAN_MIN_AGE = 60.0
"""Seconds a run directory without a row is left alone whatever the prune
bound: it may belong to an admission whose transaction has not committed."""


@dataclass
class PruneReport:
    cutoff: float
    dry_run: bool
    runs: int = 0
    attempts: int = 0
    occurrences: int = 0
    run_dirs: int = 0
    """Run directories removed: those of removed runs plus orphans."""
    requests: int = 0
    """Answered requests removed."""
    summary_rows: int = 0
    """`pruned` rows written or extended (not computed on a dry run)."""
    run_ids: list[str] = field(default_factory=list)
    batches: int = 0
    more: bool = False
    """True when `max_batches` ran out before the work did."""
    errors: list[str] = field(default_factory=list)
    """Run directories that could not be removed (left for the next prune)."""

    @property
    def removed_anything(self) -> bool:
        return bool(self.runs or self.occurrences or self.run_dirs or self.requests)

    def to_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "cutoff": format_instant(self.cutoff),
            "runs": self.runs,
            "attempts": self.attempts,
            "occurrences": self.occurrences,
            "run_dirs": self.run_dirs,
            "requests": self.requests,
            "summary_rows": None if self.dry_run else self.summary_rows,
            "run_ids": list(self.run_ids),
            "more": self.more,
            "errors": list(self.errors),
        }


def prune(
    store: Store,
    older_than_seconds: float,
    now: float,
    dry_run: bool = False,
    *,
    max_batches: int | None = None,
    batch_size: int = BATCH_SIZE,
) -> PruneReport:
    """Remove (or, with `dry_run`, count) what is older than the bound.

    Safe while a supervisor runs and while another prune runs: each batch
    selects and removes inside one write transaction.
    """
    if older_than_seconds < 0:
        raise UsageError("the retention bound must not be negative")
    if batch_size < 1 or (max_batches is not None and max_batches < 1):
        raise UsageError("batch_size and max_batches must be at least 1")
    return _Pruner(store, now - older_than_seconds, now, dry_run, max_batches, batch_size).run()


class _BudgetSpent(Exception):
    """More work was found after `max_batches` batches (raised before the
    next batch's transaction opens)."""


class _Pruner:
    def __init__(
        self,
        store: Store,
        cutoff: float,
        now: float,
        dry_run: bool,
        max_batches: int | None,
        batch_size: int,
    ) -> None:
        self.store = store
        self.cutoff = cutoff
        self.now = now
        self.dry_run = dry_run
        self.max_batches = max_batches
        self.batch_size = batch_size
        self.report = PruneReport(cutoff=cutoff, dry_run=dry_run)
        self.reason = f"retention: history before {format_instant(cutoff)} pruned"
        # A dry run deletes nothing, so the run phase would meet the runs the
        # ledger phase already counted.
        self._counted: set[int] = set()
        self._failed_dirs: set[str] = set()

    def run(self) -> PruneReport:
        try:
            self._ledger()
            self._runs()
            self._orphans()
            self._requests()
        except _BudgetSpent:
            self.report.more = True
        return self.report

    def _transaction(self) -> AbstractContextManager[None]:
        return self.store.snapshot() if self.dry_run else self.store.atomic()

    def _spend(self) -> None:
        """Called once a batch has found work: the probe for `more` is free."""
        if self.max_batches is not None and self.report.batches >= self.max_batches:
            raise _BudgetSpent
        self.report.batches += 1

    # -- phase 1: each schedule's ledger, oldest first ----------------------------------

    def _ledger(self) -> None:
        for schedule_id in self.store.retention_schedule_ids():
            after: tuple[int, int] | None = None
            while True:
                # Look without the write lock first: most schedules have
                # nothing to remove most of the time, and a supervisor sharing
                # the database should not queue behind empty transactions. (A
                # dry run takes no lock, so its look is the batch itself.)
                probe = self.store.prunable_ledger_rows(
                    schedule_id, self.cutoff, after, self.batch_size if self.dry_run else 1
                )
                if not probe:
                    break
                self._spend()
                rows = probe
                with self._transaction():
                    if not self.dry_run:
                        # Selected again under the lock, from the probe on, so
                        # a concurrent prune's work is never counted twice.
                        start = (probe[0].item.first, probe[0].item.seq - 1)
                        rows = self.store.prunable_ledger_rows(
                            schedule_id, self.cutoff, start, self.batch_size
                        )
                    removed_runs = self._remove(rows, [r.run_seq for r in rows if r.run_seq])
                self._remove_run_dirs(removed_runs)
                if rows:
                    # Keyset continuation: kept rows (and a dry run's rows,
                    # which stay in place) are not scanned again.
                    after = (rows[-1].item.first, rows[-1].item.seq)
                if len(rows) < self.batch_size and self.dry_run:
                    break

    # -- phase 2: runs the ledger did not reach (manual runs, mostly) ---------------------

    def _runs(self) -> None:
        after = 0
        while True:
            probe = self.store.prunable_runs(
                self.cutoff, after, self.batch_size if self.dry_run else 1
            )
            if not probe:
                return
            found = probe
            if self.dry_run:
                after = probe[-1][0]
                found = [(seq, sid) for seq, sid in probe if seq not in self._counted]
                if not found:
                    continue
            self._spend()
            with self._transaction():
                if not self.dry_run:
                    found = self.store.prunable_runs(self.cutoff, probe[0][0] - 1, self.batch_size)
                    if found:
                        after = found[-1][0]
                seqs = [seq for seq, _ in found]
                removed_runs = self._remove(self.store.occurrence_rows_of_runs(seqs), seqs)
            self._remove_run_dirs(removed_runs)

    def _remove(self, rows: list[PrunableRow], run_seqs: list[int]) -> list[int]:
        """Inside the batch's transaction: ledger rows first (they reference
        the runs), then attempts and runs, then the summary rows."""
        report = self.report
        if self.dry_run:
            report.occurrences += len(rows)
            report.runs += len(run_seqs)
            report.attempts += self.store.attempt_count(run_seqs)
            self._counted.update(run_seqs)
        else:
            report.occurrences += self.store.delete_occurrence_rows([r.item.seq for r in rows])
            runs, attempts = self.store.delete_finished_runs(run_seqs)
            if runs != len(run_seqs):
                # Unreachable while the selections hold; never leave a run
                # whose ledger row is gone.
                raise RuntimeError("retention: a selected run was not removable; rolled back")
            report.runs += runs
            report.attempts += attempts
            ordered = sorted(rows, key=lambda r: r.schedule_id)
            for schedule_id, group in groupby(ordered, key=lambda r: r.schedule_id):
                self._account(schedule_id, [r.item for r in group])
        report.run_ids.extend(run_id(seq) for seq in run_seqs)
        return run_seqs

    # -- keeping the ledger a complete account --------------------------------------------

    def _account(self, schedule_id: str, removed: list[LedgerItem]) -> None:
        """Cover the removed rows with `pruned` rows, merged with adjacent
        ones, split at every row that stays."""
        low = min(item.first for item in removed)
        high = max(item.last for item in removed)
        pieces: list[tuple[LedgerItem, str]] = [(item, "removed") for item in removed]
        for item in self.store.ledger_window(schedule_id, low, high):
            pieces.append((item, "pruned" if item.state == PRUNED_STATE else "kept"))
        for before in (True, False):
            neighbour = self.store.ledger_neighbour(
                schedule_id, low if before else high, before=before
            )
            if neighbour is not None and neighbour.state == PRUNED_STATE:
                pieces.append((neighbour, "pruned"))
        pieces.sort(key=lambda piece: (piece[0].first, piece[0].last, piece[0].seq))
        for group in _stretches(pieces):
            if any(kind == "removed" for _, kind in group):
                self._write_summary(schedule_id, group)

    def _write_summary(self, schedule_id: str, group: list[tuple[LedgerItem, str]]) -> None:
        items = [item for item, _ in group]
        counts = [item.count for item in items]
        count = None if any(c is None for c in counts) else sum(c for c in counts if c is not None)
        first = min(item.first for item in items)
        last = max(item.last for item in items)
        revision = max(item.revision for item in items)
        # In the history's record order, the summary stands where the first
        # row it replaces stood (those rows are gone, so the place is free).
        position = min(item.ledger_pos for item in items)
        existing = [item.seq for item, kind in group if kind == "pruned"]
        if existing:
            keep, *merged = sorted(existing)
            self.store.delete_pruned_rows(merged)
            self.store.update_pruned_row(
                keep, first, last, count, revision, self.reason, self.now, position
            )
        else:
            self.store.insert_occurrence(
                schedule_id,
                first,
                PRUNED_STATE,
                revision,
                self.now,
                reason=self.reason,
                last_at=last,
                count=count,
                summary=True,
                ledger_pos=position,
            )
        self.report.summary_rows += 1

    # -- run directories ---------------------------------------------------------------------

    def _remove_run_dirs(self, run_seqs: list[int]) -> None:
        """After the commit: the rows are gone, so is the working material."""
        for seq in run_seqs:
            self._remove_dir(self.store.runs_dir / run_id(seq))
            self._remove_records(run_id(seq))

    def _remove_dir(self, path: Path) -> None:
        if self.dry_run:
            if path.is_dir() and not path.is_symlink():
                self.report.run_dirs += 1
            return
        try:
            shutil.rmtree(path)
        except FileNotFoundError:
            return
        except OSError as exc:
            self._failed_dirs.add(path.name)
            self.report.errors.append(f"{path}: {exc.strerror or exc}")
            return
        self.report.run_dirs += 1

    def _remove_records(self, name: str) -> None:
        """The run's shim records (`records/<run-id>/`), not counted apart."""
        if not self.dry_run:
            with contextlib.suppress(OSError):
                shutil.rmtree(records_root(self.store.root) / name)

    def _orphans(self) -> None:
        """Directories left by a crash between a batch's commit and its
        directory removal, or by an admission a crash rolled back: no run
        row, and last changed before the cutoff and ORPHAN_MIN_AGE ago.

        The listing comes before the row lookup. A scheduled run's directory
        is made inside its admission's transaction, before its row commits:
        one listed without a row may be an admission in flight, which
        ORPHAN_MIN_AGE (far longer than any transaction) keeps whatever the
        cutoff (`prune --older-than 0`)."""
        listed = dict(self._run_dirs())
        if not listed:
            return
        existing = self.store.run_seqs_between(min(listed), max(listed))
        orphans: list[Path] = []
        for seq, entry in sorted(listed.items()):
            if seq in existing or entry.name in self._failed_dirs:
                continue
            try:
                mtime = entry.stat(follow_symlinks=False).st_mtime
            except FileNotFoundError:
                continue
            if mtime < min(self.cutoff, self.now - ORPHAN_MIN_AGE):
                orphans.append(Path(entry.path))
        for batch in chunked(orphans, self.batch_size):
            self._spend()
            for path in batch:
                self._remove_dir(path)

    # -- phase 4: answered requests ------------------------------------------------------

    def _requests(self) -> None:
        after = 0
        while True:
            probe = self.store.prunable_requests(
                self.cutoff, after, self.batch_size if self.dry_run else 1
            )
            if not probe:
                return
            self._spend()
            if self.dry_run:
                self.report.requests += len(probe)
                after = probe[-1]
                continue
            with self.store.atomic():
                seqs = self.store.prunable_requests(self.cutoff, probe[0] - 1, self.batch_size)
                self.report.requests += self.store.delete_answered_requests(seqs)
            after = seqs[-1] if seqs else probe[0]

    def _run_dirs(self) -> Iterator[tuple[int, os.DirEntry[str]]]:
        try:
            entries = list(os.scandir(self.store.runs_dir))
        except FileNotFoundError:
            return
        for entry in entries:
            seq = parse_run_id(entry.name)
            # Only names this store would have made (`run-000042`), and only
            # real directories: anything else under runs/ is not ours to remove.
            if seq is None or entry.name != run_id(seq):
                continue
            if entry.is_dir(follow_symlinks=False):
                yield seq, entry


def _stretches(
    pieces: list[tuple[LedgerItem, str]],
) -> Iterator[list[tuple[LedgerItem, str]]]:
    """Consecutive removed/pruned pieces, split at each kept row."""
    group: list[tuple[LedgerItem, str]] = []
    for piece in pieces:
        if piece[1] == "kept":
            if group:
                yield group
            group = []
        else:
            group.append(piece)
    if group:
        yield group
