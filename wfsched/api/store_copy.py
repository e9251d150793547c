"""`wfsched store copy`: a whole store into an empty one of either kind, then audited.

Both stores are owned for the whole copy (the same lock a supervisor takes),
so the copy is refused while a supervisor runs on either side and no
supervisor can start on either side until it ends. A refused copy (a
supervisor owns the source, the destination is not empty) creates no
destination store. The rows are read in one snapshot of the source and
written in one transaction of the destination: a copy that fails while
writing leaves the destination an empty store, which a new copy takes. This host's run directories
and shim records are copied beside the rows (a store's runs live on the
host that executed them), and the destination is then audited like any
store.
"""

from __future__ import annotations

import shutil
import time
from typing import Any

from wfsched.api.audit_checks import audit
from wfsched.errors import ConflictError, NotFoundError
from wfsched.store import Store, StoreLocation, open_location
from wfsched.store.copying import COPY_TABLES
from wfsched.store.rundirs import records_root


def copy_store(
    source: StoreLocation, destination: StoreLocation, host: str | None = None
) -> dict[str, Any]:
    """Copy `source` into `destination`; the counts per table, seconds, and the
    audit (`host`: this host's name, whose runs' directories the copy carries)."""
    if source.display == destination.display:
        raise ConflictError(f"{source.display}: a store cannot be copied onto itself")
    src = open_location(source, create=False)
    if src is None:
        raise NotFoundError(f"no store at {source.display}; nothing to copy")
    try:
        # Each is owned until it is closed below. Every refusal comes before
        # the destination is created: a refused copy leaves nothing there.
        src.take_ownership()
        dest = _empty_destination(destination)
        try:
            started = time.monotonic()
            counts = _copy_rows(src, dest)
            _copy_tree(src.runs_dir, dest.runs_dir)
            _copy_tree(records_root(src.root), records_root(dest.root))
            seconds = round(time.monotonic() - started, 3)
            report = audit(dest, host)
        finally:
            dest.close()
    finally:
        src.close()
    return {
        "from": source.display,
        "to": destination.display,
        "copied": counts,
        "seconds": seconds,
        "audit": report,
    }


def _empty_destination(destination: StoreLocation) -> Store:
    """The destination, owned: an existing store only if it is empty (else
    ConflictError), otherwise created now, once nothing refuses the copy."""
    dest = open_location(destination, create=False)
    if dest is None:
        dest = open_location(destination, create=True)
        assert dest is not None
    try:
        dest.take_ownership()
        if not dest.is_empty():
            raise ConflictError(
                f"{destination.display}: the destination store is not empty; copy into a new store"
            )
    except BaseException:
        dest.close()
        raise
    return dest


def _copy_rows(src: Store, dest: Store) -> dict[str, int]:
    counts: dict[str, int] = {}
    with src.snapshot(), dest.atomic():
        for table, columns in COPY_TABLES:
            counts[table] = dest.import_rows(table, columns, src.export_rows(table, columns))
        dest.after_import()
    return counts


def _copy_tree(source: Any, destination: Any) -> None:
    if source.is_dir():
        shutil.copytree(source, destination, symlinks=True, dirs_exist_ok=True)
