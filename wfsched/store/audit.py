"""Read-only queries behind `wfsched audit` (mixed into Store)."""

from __future__ import annotations

import sqlite3


class AuditQueries:
    _conn: sqlite3.Connection
