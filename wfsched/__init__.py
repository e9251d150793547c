"""wfsched: a durable cron replacement, on one host (SQLite) or several (PostgreSQL)."""

__version__ = "0.1.0"
