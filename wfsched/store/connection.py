"""The connection every query group shares: statements, transactions, dialect.

The SQLite store and its query groups (audit, retention) derive from
`Connected`, so each group runs its statements through one `_execute` and
one `atomic()` without importing the store class that combines them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

from wfsched.errors import StoreError
from wfsched.store.dialect import Dialect
from wfsched.store.worded import WordedConnection


class Connected:
    _conn: WordedConnection
    dialect: Dialect

    def _execute(self, statement: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        return self._conn.execute(self.dialect.sql(statement), params)

    def _execute_many(self, statement: str, rows: Sequence[Sequence[Any]]) -> sqlite3.Cursor:
        return self._conn.executemany(self.dialect.sql(statement), rows)

    def _write(self, statement: str, params: Sequence[Any] = ()) -> None:
        """A write whose answer (rows, row count) nobody reads. A store on a
        server may hold it back inside a transaction and send it with the
        next statement that must be answered (`PostgresStore`: one round
        trip for both); an embedded database runs it at once."""
        self._execute(statement, params)

    def _write_many(self, statement: str, rows: Sequence[Sequence[Any]]) -> None:
        """`_write` for one statement over many rows."""
        self._execute_many(statement, rows)

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """One write transaction; nested calls become savepoints.

        A failing rollback never hides the error that caused it.
        """
        if self._conn.in_transaction:
            create, rollback, release = self.dialect.savepoint(f"sp{id(object())}")
            self._conn.execute(create)
            try:
                yield
            except BaseException:
                self._conn.execute(rollback)
                self._conn.execute(release)
                raise
            self._conn.execute(release)
            return
        self._conn.execute(self.dialect.begin_write())
        try:
            yield
            # Inside the try: a COMMIT that fails (disk full, I/O error, a
            # deferred constraint) can leave the transaction open, and every
            # later atomic() would then nest in it as a savepoint and never
            # commit. Roll it back so the caller's retry starts clean.
            self._conn.execute("COMMIT")
        except BaseException:
            with suppress(sqlite3.Error, StoreError):
                self._conn.execute("ROLLBACK")
            raise

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """A read transaction, so multi-statement reads see one state."""
        if self._conn.in_transaction:
            yield
            return
        self._conn.execute("BEGIN")
        try:
            yield
        finally:
            self._conn.execute("COMMIT")
