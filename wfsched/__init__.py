"""wfsched: a durable cron replacement for one host."""

__version__ = "0.1.0"
