"""The supervisor's runtime file: its open fault episode, outside the store.

During a fault episode the store may be unwritable (full, read-only,
locked), so the supervisor cannot publish the fault where `status` reads
everything else. It writes it instead to a small file in a runtime
directory that lives on another filesystem (a tmpfs under /run on most
hosts), keyed by the store's path: the open episode, or none once it
ended; the file is removed at a clean exit. `status` shows the fault only
while the process that wrote the file still holds the store's lock, so a
file left by a crash is never reported as current.

The directory: `$WFSCHED_RUNTIME_DIR` if set, else `$XDG_RUNTIME_DIR/wfsched`,
else `/run/wfsched` for root, else `/tmp/wfsched-<uid>`.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any


def _sha256(data: bytes) -> Any:
    """SHA-256 from CPython's own implementation when it has one: `hashlib`
    loads OpenSSL's libcrypto, about 3.4 MB resident in a daemon that has no
    other use for it."""
    try:
        from _sha2 import sha256  # type: ignore[import-not-found]  # Python 3.12+
    except ImportError:
        try:
            from _sha256 import sha256  # type: ignore[import-not-found,no-redef]  # 3.11
        except ImportError:
            from hashlib import sha256
    return sha256(data)


def runtime_dir() -> Path:
    explicit = os.environ.get("WFSCHED_RUNTIME_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return Path(xdg) / "wfsched"
    if os.geteuid() == 0:
        return Path("/run/wfsched")
    return Path(f"/tmp/wfsched-{os.geteuid()}")


def fault_path(store_root: Path) -> Path:
    digest = _sha256(str(store_root).encode()).hexdigest()[:16]
    return runtime_dir() / f"fault-{digest}.json"


class FaultFile:
    """The supervisor's fault file, opened once and kept open: an episode of
    exhausted file descriptors must still be reported, and then no file can
    be opened. Written in place (one small write, then truncate); a reader
    that catches it half-written sees no valid JSON and shows no fault for
    that moment, never a wrong one."""

    def __init__(self, store_root: Path) -> None:
        self.store_root = store_root
        self.path = fault_path(store_root)
        self._fd: int | None = None

    def write(self, fault: dict[str, Any] | None) -> str | None:
        """Publish the open episode (None: there is none). Best effort: the
        error in words when it could not be written (the log still says it)."""
        document = {"pid": os.getpid(), "store": str(self.store_root), "fault": fault}
        payload = json.dumps(document).encode()
        try:
            if self._fd is None:
                self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            os.pwrite(self._fd, payload, 0)
            os.ftruncate(self._fd, len(payload))
        except OSError as exc:
            return f"cannot write {self.path}: {exc.strerror or exc}"
        return None

    def close(self) -> None:
        """At a clean exit: nothing of this supervisor is left to report."""
        if self._fd is None:
            return
        os.close(self._fd)
        self._fd = None
        with contextlib.suppress(OSError):
            self.path.unlink()


def read_fault(store_root: Path, pid: int | None) -> dict[str, Any] | None:
    """The open episode of the supervisor `pid` (the lock holder), if any."""
    if pid is None:
        return None
    try:
        document = json.loads(fault_path(store_root).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(document, dict) or document.get("pid") != pid:
        return None
    fault = document.get("fault")
    if not isinstance(fault, dict):
        return None
    return {key: fault.get(key) for key in ("kind", "error", "since", "phase")}
