"""Where a store lives: one function, with the env override, so tests can
point every command at a temporary directory."""

from __future__ import annotations

import os
from pathlib import Path


def default_store_path() -> Path:
    state_home = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(state_home) / "wfsched"


def resolve_store_path(path: str | os.PathLike[str] | None) -> Path:
    """Resolve symlinks so two aliases of one store contend on one lock."""
    chosen = path or os.environ.get("WFSCHED_STORE") or default_store_path()
    return Path(os.path.realpath(os.path.expanduser(str(chosen))))
