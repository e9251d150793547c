"""Queries behind `wfsched prune` and automatic retention (mixed into SQLiteStore).

Every statement `wfsched.api.retention` needs lives here; that module decides
what to remove and owns the transactions. Nothing here deletes a schedule or
a revision, nothing touches a row tied to an unfinished run (the `finished`
predicates below are the only way a run becomes removable), and nothing
removes a request that is still pending.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from wfsched.store.batching import chunked
from wfsched.store.connection import Connected
from wfsched.store.rows import PRUNED_STATE, LedgerItem, PrunableRow

_FINISHED = "('completed', 'failed')"
_LEDGER_COLUMNS = (
    "o.seq, o.scheduled_at, o.last_at, o.count, o.summary, o.state, o.revision, o.ledger_pos"
)


def _ledger_item(row: Sequence[Any]) -> LedgerItem:
    seq, first, last, count, summary, state, revision, ledger_pos = row
    return LedgerItem(
        seq=seq,
        first=first,
        last=last if last is not None else first,
        count=count if summary else 1,
        state=state,
        revision=revision,
        ledger_pos=ledger_pos,
    )


def _marks(values: Sequence[object]) -> str:
    return ",".join("?" for _ in values)


class RetentionQueries(Connected):
    # -- what is removable ------------------------------------------------------

    def retention_schedule_ids(self) -> list[str]:
        """Every schedule, deleted ones included: their history ages too."""
        return [row[0] for row in self._execute("SELECT id FROM schedules ORDER BY id")]

    def prunable_ledger_rows(
        self,
        schedule_id: str,
        cutoff: float,
        after: tuple[int, int] | None,
        limit: int,
    ) -> list[PrunableRow]:
        """The schedule's oldest removable occurrence rows, by (instant, seq).

        Removable: the row of a finished run that finished before `cutoff`,
        or a row with no run whose instant(s) and recording are all before
        it. `pruned` rows are the record of earlier pruning and stay. The
        range `scheduled_at < cutoff` keeps this an index seek on
        occurrences_page however long the history is; keys start after
        `after` (keyset order).
        """
        after_at, after_seq = after if after is not None else (-(2**62), 0)
        rows = self._execute(
            f"SELECT {_LEDGER_COLUMNS}, o.run_seq FROM occurrences o"
            " LEFT JOIN runs r ON r.seq = o.run_seq"
            " WHERE o.schedule_id = ? AND o.scheduled_at < ?"
            " AND (o.scheduled_at, o.seq) > (?, ?) AND o.state != ?"
            " AND ((o.run_seq IS NULL AND o.recorded_at < ?"
            "       AND COALESCE(o.last_at, o.scheduled_at) < ?)"
            f"   OR (r.state IN {_FINISHED} AND r.finished_at < ?))"
            " ORDER BY o.scheduled_at, o.seq LIMIT ?",
            (
                schedule_id,
                cutoff,
                after_at,
                after_seq,
                PRUNED_STATE,
                cutoff,
                cutoff,
                cutoff,
                limit,
            ),
        )
        return [PrunableRow(_ledger_item(row[:8]), schedule_id, row[8]) for row in rows.fetchall()]

    def prunable_runs(self, cutoff: float, after_seq: int, limit: int) -> list[tuple[int, str]]:
        """Finished runs that finished before `cutoff`, by seq: (seq, schedule_id).

        Manual runs (no occurrence row) are found only here. There is no
        index on finished_at, so this walks runs by rowid from `after_seq`.
        """
        rows = self._execute(
            f"SELECT seq, schedule_id FROM runs WHERE seq > ? AND state IN {_FINISHED}"
            " AND finished_at < ? ORDER BY seq LIMIT ?",
            (after_seq, cutoff, limit),
        )
        return [(int(seq), str(schedule_id)) for seq, schedule_id in rows.fetchall()]

    def occurrence_rows_of_runs(self, run_seqs: Sequence[int]) -> list[PrunableRow]:
        """The ledger rows linked to these runs (occurrences_run index)."""
        found: list[PrunableRow] = []
        for chunk in chunked(run_seqs):
            rows = self._execute(
                f"SELECT {_LEDGER_COLUMNS}, o.run_seq, o.schedule_id FROM occurrences o"
                f" WHERE o.run_seq IN ({_marks(chunk)})",
                chunk,
            )
            found.extend(
                PrunableRow(_ledger_item(row[:8]), str(row[9]), row[8]) for row in rows.fetchall()
            )
        return found

    def attempt_count(self, run_seqs: Sequence[int]) -> int:
        total = 0
        for chunk in chunked(run_seqs):
            row = self._execute(
                f"SELECT COUNT(*) FROM attempts WHERE run_seq IN ({_marks(chunk)})", chunk
            ).fetchone()
            total += int(row[0])
        return total

    def run_seqs_between(self, low: int, high: int) -> set[int]:
        """Run rows that exist with low <= seq <= high (a rowid range)."""
        rows = self._execute("SELECT seq FROM runs WHERE seq BETWEEN ? AND ?", (low, high))
        return {int(row[0]) for row in rows.fetchall()}

    # -- removing -----------------------------------------------------------------

    def delete_occurrence_rows(self, seqs: Sequence[int]) -> int:
        """Occurrence rows first: they reference runs (occurrences.run_seq)."""
        removed = 0
        for chunk in chunked(seqs):
            cursor = self._execute(
                f"DELETE FROM occurrences WHERE seq IN ({_marks(chunk)}) AND state != ?",
                (*chunk, PRUNED_STATE),
            )
            removed += cursor.rowcount
        return removed

    def delete_finished_runs(self, run_seqs: Sequence[int]) -> tuple[int, int]:
        """Attempts, then the runs; (runs, attempts) removed.

        The state test is repeated here so that no caller can remove an
        unfinished run's attempts or row, whatever list it passes.
        """
        runs = attempts = 0
        for chunk in chunked(run_seqs):
            marks = _marks(chunk)
            self._execute(
                f"DELETE FROM notifications WHERE run_seq IN (SELECT seq FROM runs"
                f" WHERE seq IN ({marks}) AND state IN {_FINISHED})",
                chunk,
            )
            attempts += self._execute(
                f"DELETE FROM attempts WHERE run_seq IN (SELECT seq FROM runs"
                f" WHERE seq IN ({marks}) AND state IN {_FINISHED})",
                chunk,
            ).rowcount
            runs += self._execute(
                f"DELETE FROM runs WHERE seq IN ({marks}) AND state IN {_FINISHED}", chunk
            ).rowcount
        return runs, attempts

    # -- answered requests ------------------------------------------------------------

    def prunable_requests(self, cutoff: float, after_seq: int, limit: int) -> list[int]:
        """Answered requests (done or refused) answered before `cutoff`, by seq.

        A pending request is never selected, however old: it is still owed an
        answer (a trigger recorded while no supervisor runs waits for one).
        """
        rows = self._execute(
            "SELECT seq FROM requests WHERE seq > ? AND state IN ('done', 'refused')"
            " AND handled_at < ? ORDER BY seq LIMIT ?",
            (after_seq, cutoff, limit),
        )
        return [int(seq) for (seq,) in rows.fetchall()]

    def delete_answered_requests(self, seqs: Sequence[int]) -> int:
        """The state test is repeated so no caller can remove a pending request."""
        removed = 0
        for chunk in chunked(seqs):
            removed += self._execute(
                f"DELETE FROM requests WHERE seq IN ({_marks(chunk)})"
                " AND state IN ('done', 'refused')",
                chunk,
            ).rowcount
        return removed

    # -- the ledger around what was removed ---------------------------------------

    def ledger_window(self, schedule_id: str, low: int, high: int) -> list[LedgerItem]:
        """Rows with low <= instant <= high, by (instant, seq)."""
        rows = self._execute(
            f"SELECT {_LEDGER_COLUMNS} FROM occurrences o WHERE o.schedule_id = ?"
            " AND o.scheduled_at BETWEEN ? AND ? ORDER BY o.scheduled_at, o.seq",
            (schedule_id, low, high),
        )
        return [_ledger_item(row) for row in rows.fetchall()]

    def ledger_neighbour(
        self, schedule_id: str, instant: int, *, before: bool
    ) -> LedgerItem | None:
        """The row just before (or after) `instant` in ledger order."""
        if before:
            sql = (
                f"SELECT {_LEDGER_COLUMNS} FROM occurrences o WHERE o.schedule_id = ?"
                " AND o.scheduled_at < ? ORDER BY o.scheduled_at DESC, o.seq DESC LIMIT 1"
            )
        else:
            sql = (
                f"SELECT {_LEDGER_COLUMNS} FROM occurrences o WHERE o.schedule_id = ?"
                " AND o.scheduled_at > ? ORDER BY o.scheduled_at, o.seq LIMIT 1"
            )
        row = self._execute(sql, (schedule_id, instant)).fetchone()
        return _ledger_item(row) if row else None

    def update_pruned_row(
        self,
        seq: int,
        first: int,
        last: int,
        count: int | None,
        revision: int,
        reason: str,
        recorded_at: float,
        ledger_pos: int,
    ) -> None:
        self._execute(
            "UPDATE occurrences SET scheduled_at = ?, last_at = ?, count = ?, revision = ?,"
            " reason = ?, recorded_at = ?, ledger_pos = ? WHERE seq = ? AND state = ?",
            (first, last, count, revision, reason, recorded_at, ledger_pos, seq, PRUNED_STATE),
        )

    def delete_pruned_rows(self, seqs: Sequence[int]) -> None:
        """Merged away: another `pruned` row now covers their span."""
        for chunk in chunked(seqs):
            self._execute(
                f"DELETE FROM occurrences WHERE seq IN ({_marks(chunk)}) AND state = ?",
                (*chunk, PRUNED_STATE),
            )
