"""PostgreSQL's fragments of the store's SQL (see `wfsched.store.dialect`)."""

from __future__ import annotations

from typing import Any

from wfsched.store.dialect import Dialect
from wfsched.store.pg_migrations import PG_MIGRATIONS

# The catalogue of the current schema, each object as its definition with the
# schema's own name removed, so a store's schema compares equal to the one the
# migrations build in a scratch schema.
_SCHEMA_OBJECTS = """
SELECT 'table', c.relname, string_agg(
    a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
    || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END
    || COALESCE(' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid), '')
    || CASE WHEN a.attidentity <> '' THEN ' IDENTITY' ELSE '' END,
    ', ' ORDER BY a.attnum)
FROM pg_class c
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
WHERE c.relkind = 'r' AND c.relnamespace = current_schema()::regnamespace
GROUP BY c.relname
UNION ALL
SELECT 'constraint', c.relname || '.' || k.conname, pg_get_constraintdef(k.oid)
FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
WHERE c.relnamespace = current_schema()::regnamespace
UNION ALL
SELECT 'index', i.indexname, replace(i.indexdef, ' ' || current_schema() || '.', ' ')
FROM pg_indexes i WHERE i.schemaname = current_schema()
UNION ALL
SELECT 'trigger', t.tgname, replace(pg_get_triggerdef(t.oid), ' ' || current_schema() || '.', ' ')
FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
WHERE NOT t.tgisinternal AND c.relnamespace = current_schema()::regnamespace
UNION ALL
SELECT 'function', p.proname, p.prosrc
FROM pg_proc p WHERE p.pronamespace = current_schema()::regnamespace
"""


class PostgresDialect(Dialect):
    name = "postgresql"
    migrations = PG_MIGRATIONS

    def sql(self, statement: str) -> str:
        # psycopg's placeholders are %s, so a literal % is written %%.
        return statement.replace("%", "%%").replace("?", "%s")

    def begin_write(self) -> str:
        return "BEGIN ISOLATION LEVEL READ COMMITTED"

    def get_schema_version(self) -> str:
        # Only once the table exists: `PostgresStore.schema_version` asks first.
        return "SELECT COALESCE(MAX(version), 0) FROM schema_version"

    def set_schema_version(self, version: int) -> str:
        return (
            f"WITH cleared AS (DELETE FROM schema_version)"
            f" INSERT INTO schema_version (version) VALUES ({int(version)})"
        )

    def schema_objects(self) -> str:
        return _SCHEMA_OBJECTS

    def expected_schema(self) -> dict[tuple[str, str], str]:
        # Only a server can say what its catalogue shows for the migrations'
        # DDL; `PostgresStore.schema_problems` asks one (in a scratch schema).
        raise NotImplementedError("PostgresStore builds the expected schema on the server")

    def data_version(self) -> str:
        # The server's WAL position: it moves with every commit, other
        # sessions' included, so a change is never missed (our own commits
        # only cost an extra re-read).
        return "SELECT (pg_current_wal_lsn() - '0/0')::bigint"

    def highest_seq(self, table: str) -> str:
        # A scalar subquery, run once per statement: the function is volatile,
        # so in a WHERE clause it would be called for every row (12 s of the
        # audit's 1,000,000-row ledger scan, against 0.3 s).
        sequence = f"pg_get_serial_sequence('{table}', 'seq')::regclass"
        return f"(SELECT pg_sequence_last_value({sequence}))"

    def next_ledger_position(self) -> str:
        # No position named: the BEFORE INSERT trigger gives the row its own
        # seq, which the identity default has drawn by then.
        return "CAST(NULL AS BIGINT)"

    def group_concat(self, expression: str) -> str:
        return f"string_agg(CAST({expression} AS TEXT), ',')"

    def returning_key(self) -> str:
        # The key comes back with the INSERT's own answer: asking lastval()
        # afterwards cost a second round trip per inserted row.
        return " RETURNING seq"

    def inserted_id(self, cursor: Any) -> int:
        row = cursor.fetchone()
        return int(row[0])


POSTGRES = PostgresDialect()
