"""The store layer: the only package that speaks SQL."""

from wfsched.store.core import DB_NAME, LOCK_NAME, RUNS_DIR, Store
from wfsched.store.paths import default_store_path, resolve_store_path
from wfsched.store.rows import (
    AttemptRow,
    OccurrenceRow,
    RequestRow,
    RunRow,
    ScheduleRow,
    parse_run_id,
    run_id,
)

__all__ = [
    "DB_NAME",
    "LOCK_NAME",
    "RUNS_DIR",
    "AttemptRow",
    "OccurrenceRow",
    "RequestRow",
    "RunRow",
    "ScheduleRow",
    "Store",
    "default_store_path",
    "parse_run_id",
    "resolve_store_path",
    "run_id",
]
