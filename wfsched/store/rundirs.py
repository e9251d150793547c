"""Per-run directories: `runs/<run-id>/` with the input, the state dir kept
across attempts, and one `attempt-N/` per attempt (the command's logs); and,
apart from them, `records/<run-id>/attempt-N/` for the run keeper's records.

Files are written before the attempt's mark commits (for a scheduled run,
inside its admission's transaction, so a rollback can leave them for a seq
the store never knew: every step here is idempotent, and the next run with
that seq prepares them again); the database stays the authority, the
directory is the run's working material. The job may write
anything under its run directory (it is told where it is), so nothing the
supervisor trusts lives there: the keeper's records (launch lock, started and
exit records) are in the store's private `records/` tree (mode 0700), which
the job is never told about.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path
from typing import Any

RECORDS_DIR = "records"

NO_RESUME_INPUT: Any = object()
"""A resume without `--input` (distinct from one whose input is JSON null)."""


class RunDir:
    """One run's directory. Its paths are kept as strings: a burst builds one
    per launch, and the launch needs strings (the spawn request, the job's
    environment), where pathlib would cost more than the directories'
    creation in Python time. The `Path` views are for the readers."""

    __slots__ = ("dir", "input", "state")

    def __init__(self, runs_root: str | os.PathLike[str], run_id: str) -> None:
        self.dir = os.path.join(runs_root, run_id)
        self.input = os.path.join(self.dir, "input.json")
        self.state = os.path.join(self.dir, "state")

    @property
    def path(self) -> Path:
        return Path(self.dir)

    def attempt(self, attempt: int) -> str:
        """The attempt's directory (`attempt_dir`, as a string)."""
        return os.path.join(self.dir, f"attempt-{attempt}")

    def resume_input(self, attempt: int) -> str:
        return os.path.join(self.attempt(attempt), "resume-input.json")

    def attempt_dir(self, attempt: int) -> Path:
        return Path(self.attempt(attempt))

    def log_path(self, attempt: int, stream: str) -> Path:
        return self.attempt_dir(attempt) / f"{stream}.log"

    def prepare(self, input_document: Any) -> None:
        """Create the run directory with its input; idempotent, so a launch
        retried after recovery rewrites the same content. OSError if a job
        left something in the way (the caller fails the launch closed).

        A directory this call created is new: its input is written in place
        (no job has seen it yet, and a launch that crashes before its mark
        comes back through the rewrite path). The usual launch costs three
        system calls this way instead of eight."""
        try:
            os.mkdir(self.dir)
            os.mkdir(self.state, 0o700)
        except OSError:
            Path(self.state).mkdir(parents=True, exist_ok=True, mode=0o700)
            write_json_atomic(self.input, input_document)
            return
        _write_json(self.input, input_document)

    def prepare_attempt(self, attempt: int, resume_input: Any = NO_RESUME_INPUT) -> str:
        """The attempt's directory; OSError if a job left something in the
        way. A directory that already existed (a job made it, or a launch
        that crashed before its mark) may hold logs the keeper would open:
        anything there but a regular file (a directory, a symlink to where
        the job chose) is refused before the attempt is marked."""
        directory = self.attempt(attempt)
        try:
            os.mkdir(directory, 0o700)
        except OSError:
            Path(directory).mkdir(parents=True, exist_ok=True, mode=0o700)
            for stream in ("stdout", "stderr"):
                _regular_or_absent(self.log_path(attempt, stream))
        if resume_input is not NO_RESUME_INPUT:
            write_json_atomic(self.resume_input(attempt), resume_input)
        return directory


def _regular_or_absent(path: Path) -> None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise FileExistsError(f"{path}: not a regular file; wfsched did not put it there")


def records_root(store_root: Path) -> Path:
    return store_root / RECORDS_DIR


STARTED_RECORD = "shim.json"
"""The run keeper's started record in an attempt's record directory
(`wfsched.process.launcher.SHIM_RECORD`; the layers keep the two apart)."""


def never_launched(store_root: Path, names: list[str]) -> set[str]:
    """Of these run directory names, those whose run has a record directory
    but no attempt with a started record: prepared, never launched (an
    admission in flight, or one that rolled back)."""
    found = set()
    for name in names:
        try:
            with os.scandir(records_root(store_root) / name) as attempts:
                started = any(
                    os.path.lexists(os.path.join(attempt.path, STARTED_RECORD))
                    for attempt in attempts
                )
        except (FileNotFoundError, NotADirectoryError):
            continue
        if not started:
            found.add(name)
    return found


def record_dir(store_root: Path, run_id: str, name: str) -> Path:
    """`records/<run-id>/<name>` (`attempt-N` or a hook's `notify-N`)."""
    return records_root(store_root) / run_id / name


def attempt_record_dir(store_root: Path, run_id: str, attempt: int) -> Path:
    return record_dir(store_root, run_id, f"attempt-{attempt}")


def prepare_record_dir(directory: str | os.PathLike[str]) -> str:
    """Create a record directory (0700 all the way from `records/`); OSError
    if the path is not a plain directory (a symlink is refused: records are
    never written through a link someone else placed).

    `records/` itself is looked at (lstat) rather than made again: it exists
    but for a new store, and a mkdir that fails with EEXIST and its lstat
    cost more, once per launch."""
    directory = os.fspath(directory)
    parent = os.path.dirname(directory)
    root = os.path.dirname(parent)
    try:
        mode = os.lstat(root).st_mode
    except FileNotFoundError:
        _plain_directory(root)
    else:
        if not stat.S_ISDIR(mode):
            raise NotADirectoryError(20, "not a directory", root)
    _plain_directory(parent)
    _plain_directory(directory)
    return directory


def _plain_directory(path: str) -> None:
    """Make `path` (0700), or check that what is there is a directory."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            raise NotADirectoryError(20, "not a directory", path) from None


def write_json_atomic(path: str | os.PathLike[str], document: Any) -> None:
    """Complete or absent, never torn (tmp + rename). No fsync: the database
    holds the frozen input as the authority, and an fsync per run would cost
    a burst of a thousand launches whole seconds."""
    head, name = os.path.split(os.fspath(path))
    tmp = os.path.join(head, f".{name}.tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # whatever a job left there (a directory makes this fail)
    _write_json(tmp, document)
    os.replace(tmp, path)


def _write_json(path: str, document: Any) -> None:
    """A new file (never through a symlink a job placed: O_EXCL | O_NOFOLLOW)."""
    data = json.dumps(document, ensure_ascii=False).encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


LOG_TRUNCATED = b"[wfsched: "
"""The start of the line the run keeper writes where it cut a log. The
keeper's own copy lives in the launcher, which the keeper imports alone (it
may not import the store layer); tests/test_layers.py pins that the two agree."""


def log_truncation(path: Path) -> int | None:
    """How many bytes of earlier output the keeper dropped from this log to
    keep it within max_log_bytes; None if it was never cut (or is absent or
    not a regular file: a job may have replaced it)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        first = os.read(fd, 200)
    except OSError:
        return None
    finally:
        os.close(fd)
    if not first.startswith(LOG_TRUNCATED):
        return None
    count = first[len(LOG_TRUNCATED) :].split(b" ", 1)[0]
    return int(count) if count.isdigit() else None


OUTPUT_TAIL_BYTES = 64 * 1024
"""How much of the end of each output stream an attempt's exit record keeps
in the store, so its output can be read from any host."""


def attempt_log_paths(runs_root: Path, run_id: str, attempt: int) -> tuple[str, str]:
    """The attempt's stdout.log and stderr.log (`RunDir.log_path`), joined
    as strings: exit ingestion asks for them once per run, where building
    a RunDir and two pathlib paths cost more than reading both tails."""
    attempt_dir = os.path.join(runs_root, run_id, f"attempt-{attempt}")
    return os.path.join(attempt_dir, "stdout.log"), os.path.join(attempt_dir, "stderr.log")


def log_tail(path: str | os.PathLike[str], limit: int = OUTPUT_TAIL_BYTES) -> bytes | None:
    """The last `limit` bytes of a log; None when it is absent or not a regular
    file (the job may have replaced it with a FIFO or a link: never followed,
    never blocked on).

    An empty or absent log, the usual case for a job that writes its
    results elsewhere, is answered from one lstat instead of an open, an
    fstat, a read and a close: exit ingestion asks twice per run."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    if info.st_size == 0:
        return b""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        start = max(0, info.st_size - limit)
        data = b""
        while len(data) < limit and (chunk := os.pread(fd, limit - len(data), start + len(data))):
            data += chunk
        return data
    except OSError:
        return None
    finally:
        os.close(fd)
