"""The end of an attempt's log, from wherever it can be read.

On the host that ran it the log file itself is read (its last 64 KiB);
elsewhere the 64 KiB tail the attempt's exit record kept in the store; a
running attempt on another host has neither yet, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from wfsched.api.run_ops import TAIL_BYTES, Runs, read_tail
from wfsched.errors import UsageError
from wfsched.store.rundirs import RunDir

STREAMS = ("stdout", "stderr")


@dataclass(frozen=True)
class LogTail:
    text: str
    source: str
    """"file" (read here), "store" (the stored tail) or "none"."""
    where: str
    """Where the full log is: a path here, or the host and directory."""
    running: bool
    attempt: int
    cut: bool
    """Only the end is shown: the log is longer than the tail."""


def log_tail(runs: Runs, text: str, stream: str, attempt: int | None = None) -> LogTail:
    if stream not in STREAMS:
        raise UsageError(f"stream must be one of {', '.join(STREAMS)}")
    place = runs.log_place(text, attempt)
    if place.here:
        path = RunDir(runs.store.runs_dir, place.run_id).log_path(place.attempt, stream)
        data, size = read_tail(path)
        return LogTail(
            _decoded(data), "file", str(path), place.running, place.attempt, size > len(data)
        )
    stdout, stderr = runs.stored_output(place)
    stored = stdout if stream == "stdout" else stderr
    return LogTail(
        _decoded(stored or b""),
        "none" if stored is None else "store",
        place.elsewhere(),
        place.running,
        place.attempt,
        stored is not None and len(stored) >= TAIL_BYTES,
    )


def _decoded(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")
