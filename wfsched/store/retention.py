"""Queries behind `wfsched prune` and automatic retention (mixed into Store)."""

from __future__ import annotations

import sqlite3


class RetentionQueries:
    _conn: sqlite3.Connection
