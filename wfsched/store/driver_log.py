"""psycopg's own log lines, kept out of the supervisor's log.

When a connection breaks inside a pipeline (or a COPY), psycopg raises the
block's error and logs, at WARNING on its `psycopg` logger, the second error
its cleanup then hit: `error ignored terminating <psycopg.Pipeline [BAD] at
0x...>: the connection is lost`. Nothing configures Python's logging in
wfsched, so that record went to stderr raw, which is the supervisor's log.
The error that matters is the one raised: the store words it
(`StoreConnectionLost`: what broke, what to do) and the supervisor logs the
fault episode it opens. The cleanup's note adds only a driver object's repr
and a repeat of that error, so it is dropped; any other psycopg record goes
where it went before.
"""

from __future__ import annotations

import logging

CLEANUP_NOTE = "error ignored terminating"
"""How psycopg's note about an error during a pipeline's or COPY's cleanup begins."""


class _CleanupNotes(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(CLEANUP_NOTE)


def drop_cleanup_notes() -> None:
    """Install the filter on psycopg's logger (once, however often called)."""
    logger = logging.getLogger("psycopg")
    if not any(isinstance(item, _CleanupNotes) for item in logger.filters):
        logger.addFilter(_CleanupNotes())
