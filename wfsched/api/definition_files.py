"""Definition files written into a folder: `export` and `import-crontab`.

Both hand the operator a folder that `apply` then makes true, so both
follow one rule: a file already there with other content is never
overwritten silently (the folder may be an operator's own), and a refusal
writes nothing at all.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from wfsched.api.admin import Admin
from wfsched.errors import ConflictError, NotFoundError, OperationError, UsageError


@dataclass(frozen=True)
class Written:
    path: Path
    changed: bool
    """False when the file was already there with the same content."""


def write_definition_files(
    folder: Path, files: Mapping[str, str], *, force: bool = False
) -> list[Written]:
    """Write `files` (file name -> text) into `folder`, creating it.

    A file there with other content is refused (ConflictError, exit 4,
    nothing written) unless `force`. Each file is replaced atomically
    (a temporary file beside it, then rename), so `apply` never reads half
    of one."""
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{folder}: not a folder")
    clashes = [
        folder / name
        for name, text in files.items()
        if (folder / name).exists() and _read(folder / name) != text
    ]
    if clashes and not force:
        more = f" and {len(clashes) - 1} more" if len(clashes) > 1 else ""
        raise ConflictError(
            f"{clashes[0]}{more} already exist with other content; nothing was written"
            " (use an empty folder, or --force to replace them)"
        )
    try:
        folder.mkdir(parents=True, exist_ok=True)
        written = []
        for name, text in files.items():
            path = folder / name
            same = path.exists() and _read(path) == text
            if not same:
                _replace(path, text)
            written.append(Written(path, not same))
    except OSError as exc:
        raise OperationError(f"cannot write into {folder}: {exc.strerror or exc}") from None
    return written


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _replace(path: Path, text: str) -> None:
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def exported_files(admin: Admin) -> dict[str, str]:
    """Every schedule that is not deleted, as `<id>.toml` -> its definition
    file (what `get --toml` prints): `apply --prune` of the folder changes
    nothing. Paused, blocked and exhausted schedules are included (their
    state is not part of a definition); deleted ones are history."""
    from wfsched.domain.definition import to_toml

    files = {}
    with admin.store.snapshot():
        rows = admin.store.list_schedules()
    for row in rows:
        header = f"# {row.id}, exported by `wfsched export` at revision {row.revision}\n"
        files[f"{row.id}.toml"] = header + to_toml(admin.definition(row))
    return files


# ------------------------------------------------------------------- crontabs


def read_crontab(path: str | None, user: str | None) -> tuple[str, str]:
    """(text, source name) of a crontab: a file, `-` (stdin), or, with no
    path, the output of `crontab -l` (for `user` when given), as a cron user
    lists their own."""
    import sys

    if path == "-":
        return sys.stdin.read(), "<stdin>"
    if path is not None:
        try:
            return Path(path).read_text(encoding="utf-8"), path
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or exc
            raise UsageError(f"{path}: cannot read: {reason}") from None
    argv = ["crontab", "-l", *(["-u", user] if user else [])]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise UsageError(
            "no `crontab` command on this host; give the crontab file instead"
            " (e.g. /var/spool/cron/crontabs/USER, or - for standard input)"
        ) from None
    if done.returncode != 0:
        said = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "no crontab"
        raise NotFoundError(f"`{' '.join(argv)}` failed: {said}")
    return done.stdout, f"`{' '.join(argv)}`"


def host_zone() -> str | None:
    """The IANA zone this host's cron reads times in (its /etc/localtime
    link, else $TZ), or None when neither names a zone."""
    from wfsched.domain.calendar import load_zone

    candidates = []
    try:
        target = os.readlink("/etc/localtime")
        if "zoneinfo/" in target:
            candidates.append(target.split("zoneinfo/", 1)[1])
    except OSError:
        pass
    candidates.append(os.environ.get("TZ", "").removeprefix(":"))
    for name in candidates:
        try:
            return load_zone(name).key
        except ValueError:
            continue
    return None


def home_of(user: str) -> str | None:
    """`user`'s home directory when it exists here (cron's cwd for its jobs)."""
    try:
        home = pwd.getpwnam(user).pw_dir
    except KeyError:
        return None
    return home if os.path.isdir(home) else None


def invoking_user() -> str | None:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return None
