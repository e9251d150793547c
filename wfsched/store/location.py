"""Where a store is: a SQLite directory or a PostgreSQL URL, and how to show it.

`--store`, `WFSCHED_STORE` and the default all end here. A value starting
with `postgresql://` or `postgres://` is a PostgreSQL store in libpq's URL
syntax (parsed by libpq itself through psycopg, never by hand). Any other
value shaped like a URL (`NAME:/...`, `NAME://...`) or like a libpq
`key=value` connection string is refused: taken as a path it would become a
SQLite directory named after it, password included. Anything else is a path
to a SQLite store directory.

A PostgreSQL URL may carry a password, so it is never shown as given:
`display` rebuilds it from its parts without the password, and every error
about the store names the store by `display`; `masked_store` is the form
a printed command line (the next-page hint) repeats. Passwords may also
come from `PGPASSWORD` or `~/.pgpass`, which libpq reads itself.

The local directory (`local_dir`) holds what stays on this host: for SQLite
the store directory itself; for PostgreSQL a directory of its own, where the
supervisor finds `config.toml` and keeps the run directories of the runs this
host executes. It is `--local-dir` / `$WFSCHED_LOCAL_DIR` when given, else
one directory per store under `$STATE_DIRECTORY` (what systemd's
`StateDirectory=` sets for a service, whose user may have no home), else
under `$XDG_STATE_HOME/wfsched` or `~/.local/state/wfsched`. There is no
config.toml key for it: config.toml is read from that directory.
"""

from __future__ import annotations

import contextlib
import errno
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from wfsched.errors import UsageError
from wfsched.store.paths import default_store_path

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
INSTALL_HINT = "pip install 'wfsched[postgres]'"
SECRET_PARAMETERS = frozenset({"password", "sslpassword"})
"""libpq URL parameters that carry a secret (the userinfo's password is the other place)."""
EXPECTED = (
    "a PostgreSQL store is postgresql://[user@][host][:port]/dbname[?param=value...],"
    " a SQLite store is a directory path"
)


@dataclass(frozen=True)
class StoreLocation:
    kind: str
    """"sqlite" or "postgresql"."""
    path: Path | None
    """The SQLite store directory (None for PostgreSQL)."""
    conninfo: str | None
    """The libpq connection string, password included (never shown)."""
    display: str
    """How the store is named in output and errors: the path, or the URL without password."""
    local_dir: Path
    """This host's directory for config.toml and run directories."""
    runs_dir: Path | None = None
    """This host's runs root when set (`--runs-dir`, config `runs_dir`); None:
    `<local_dir>/runs`."""
    local_dir_from: str = "the store directory"
    """Where `local_dir` came from, for the error that says how to choose another."""

    @property
    def is_postgres(self) -> bool:
        return self.kind == "postgresql"


def is_postgres_url(text: str) -> bool:
    return text.strip().lower().startswith(POSTGRES_SCHEMES)


def resolve_store(
    option: str | os.PathLike[str] | None, local_dir: str | os.PathLike[str] | None = None
) -> StoreLocation:
    """The store named by `--store`, else `$WFSCHED_STORE`, else the default path;
    `local_dir` is `--local-dir` / `$WFSCHED_LOCAL_DIR` (PostgreSQL stores only)."""
    chosen = str(option or os.environ.get("WFSCHED_STORE") or default_store_path())
    if is_postgres_url(chosen):
        return postgres_location(chosen.strip(), local_dir)
    refuse_unsupported(chosen)
    if local_dir is not None:
        raise UsageError(
            "--local-dir (WFSCHED_LOCAL_DIR): only a PostgreSQL store has a local directory"
            " of its own; a SQLite store keeps everything in its directory (--store)"
        )
    path = Path(os.path.realpath(os.path.expanduser(chosen)))
    _refuse_non_directory(path)
    return StoreLocation("sqlite", path, None, str(path), path)


def _refuse_non_directory(path: Path) -> None:
    """A SQLite store is a directory: a path that is (or lies under) something
    else is a usage error for every command, never "no store yet"."""
    for place in (path, *path.parents):
        if place.exists():
            if not place.is_dir():
                what = "is a file" if place == path else f"lies under {place}, a file"
                raise UsageError(
                    f"store {path} {what}, not a directory: a SQLite store is a directory"
                    " (give --store or WFSCHED_STORE a directory, or a postgresql:// URL)"
                )
            return


def refuse_unsupported(text: str) -> None:
    """A usage error for a store value that is meant as a URL or a libpq
    connection string but is not a supported URL (`postgressql://`, `pg://`,
    `postgresql:/x`, `sqlite:///x`, `host=x password=y`): taken as a path it
    would silently become a new SQLite directory named after it. The message
    names only the scheme or the keywords, never a value (one may be the
    password)."""
    stripped = text.strip()
    scheme = urlsplit(stripped).scheme
    rest = stripped[len(scheme) + 1 :]
    if len(scheme) > 1 and rest.startswith("/"):
        shown = stripped[: len(scheme) + 1] + ("//" if rest.startswith("//") else "/")
        hint = " (did you mean postgresql://?)" if _looks_postgres(scheme) else ""
        raise UsageError(
            f"--store: {shown}... is not a supported store URL{hint}; {EXPECTED};"
            " nothing was created"
        )
    keywords = connection_keywords(stripped)
    if keywords:
        raise UsageError(
            f"--store: a libpq key=value connection string ({', '.join(keywords)}) is not"
            f" accepted, give it as a URL; {EXPECTED}; nothing was created"
        )


def _looks_postgres(scheme: str) -> bool:
    return scheme.lower() in ("pg", "pgsql", "psql") or scheme.lower().startswith("postg")


def connection_keywords(text: str) -> list[str]:
    """The keywords of `text` read as a libpq `key=value` string, or [] when it
    is not one: libpq's own parser decides when the driver is installed; a
    first word of the form `NAME=` (a mistyped keyword, or no driver) counts
    too, as no directory path starts that way by accident."""
    keywords = _libpq_keywords(text) if "=" in text else []
    if keywords:
        return keywords
    name, equals, _ = (text.split() or [""])[0].partition("=")
    return [name] if equals and name.isidentifier() else []


def _libpq_keywords(text: str) -> list[str]:
    try:
        import psycopg.conninfo
    except ImportError:
        return []
    try:
        return sorted(psycopg.conninfo.conninfo_to_dict(text))
    except psycopg.ProgrammingError:
        return []


def carries_password(text: str) -> bool:
    """Whether `text` as a store value may hold a secret: a PostgreSQL URL with
    a password (userinfo or parameter), or a value `resolve_store` refuses
    (a mistyped URL or a connection string, which may hold one anywhere)."""
    if is_postgres_url(text):
        try:
            parts = urlsplit(text.strip())
        except ValueError:
            return True  # too broken to tell: it may hold one anywhere
        return parts.password is not None or any(
            key.lower() in SECRET_PARAMETERS for key, _ in parse_qsl(parts.query)
        )
    try:
        refuse_unsupported(text)
    except UsageError:
        return True
    return False


def masked_store(text: str) -> str:
    """`text` as a command line may repeat it: a PostgreSQL URL without its
    password (userinfo or parameter), its other parts as given; a path as is."""
    if not is_postgres_url(text):
        return text
    try:
        parts = urlsplit(text.strip())
    except ValueError:
        return text.strip().split("//", 1)[0] + "//"  # too broken to keep any part
    netloc = parts.netloc
    if parts.password is not None:
        host = netloc.rpartition("@")[2]
        netloc = f"{parts.username}@{host}" if parts.username else host
    query = urlencode(
        [
            (key, value)
            for key, value in parse_qsl(parts.query, keep_blank_values=True)
            if key.lower() not in SECRET_PARAMETERS
        ],
        safe="/",
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def postgres_location(url: str, local_dir: str | os.PathLike[str] | None = None) -> StoreLocation:
    """Parse `url` with libpq's own parser; a malformed URL is a usage error
    that does not repeat the URL (it may hold a password)."""
    psycopg = require_psycopg()
    if url.lower().startswith("postgres://"):
        # libpq accepts both schemes; one spelling keeps the display stable.
        url = "postgresql://" + url[len("postgres://") :]
    try:
        parts = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise UsageError(
            f"--store: not a valid PostgreSQL URL ({_without_secret(str(exc), url)});"
            " expected postgresql://[user@][host][:port]/dbname[?param=value...]"
        ) from None
    parts.setdefault("application_name", "wfsched")
    conninfo = psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in parts.items()})
    if local_dir is not None and str(local_dir).strip():
        chosen = Path(os.path.abspath(os.path.expanduser(str(local_dir))))
        source = "--local-dir (WFSCHED_LOCAL_DIR)"
    else:
        chosen, source = local_dir_for(parts)
    return StoreLocation(
        "postgresql", None, conninfo, display_url(parts), chosen, local_dir_from=source
    )


def local_dir_for(parts: dict[str, object]) -> tuple[Path, str]:
    """`<state dir>/postgresql/<dbname>@<host>:<port>`: one local directory per
    PostgreSQL store, apart from the default SQLite store's and from each other;
    the state dir is systemd's `$STATE_DIRECTORY` when the service has one
    (its first entry), else the XDG default. With where it came from."""
    host = str(parts.get("host") or "local")
    name = f"{parts.get('dbname') or 'default'}@{host}:{parts.get('port') or 5432}"
    service = os.environ.get("STATE_DIRECTORY", "").split(":")[0]
    if service:
        base, source = Path(service), "$STATE_DIRECTORY"
    else:
        base, source = default_store_path(), "the default under $XDG_STATE_HOME or ~/.local/state"
    return base / "postgresql" / name.replace("/", "_"), source


PRIVATE_MODE = 0o700
_PLACE_ERRORS = (errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.EROFS)
"""Errors that a retry cannot fix: the place itself must change (exit 2)."""


def ensure_local_dir(location: StoreLocation) -> None:
    """Make this host's local directory of a PostgreSQL store, private (0700,
    and so is each missing parent: the runs under it hold inputs and logs).
    A place that cannot be made is a usage error naming the directory and how
    to choose another: a system user without a home must not read only
    `No such file or directory: /nonexistent`."""
    if not location.is_postgres:
        return
    missing = []
    path = location.local_dir
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    try:
        for directory in reversed(missing):
            with contextlib.suppress(FileExistsError):
                os.mkdir(directory, PRIVATE_MODE)
        if not location.local_dir.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
    except OSError as exc:
        if exc.errno not in _PLACE_ERRORS:
            raise
        raise UsageError(
            f"cannot create this host's local directory for store {location.display}"
            f" (config.toml, run directories) at {location.local_dir}"
            f" ({location.local_dir_from}): {exc.strerror or exc}; choose another place"
            " with --local-dir DIR or WFSCHED_LOCAL_DIR (under systemd, StateDirectory=)"
        ) from None


def display_url(parts: dict[str, object]) -> str:
    """`postgresql://user@host:port/dbname`, from the parsed parts, without the
    password (the parts absent from the URL are left out, as libpq defaults them)."""
    user = str(parts.get("user") or "")
    host = str(parts.get("host") or "")
    port = str(parts.get("port") or "")
    dbname = str(parts.get("dbname") or "")
    socket = host.startswith("/")
    netloc = f"{user}@" if user else ""
    if host and not socket:
        netloc += host
    if port:
        netloc += f":{port}"
    query = f"?host={host}" if socket else ""
    return f"postgresql://{netloc}/{dbname}{query}"


def _without_secret(message: str, url: str) -> str:
    """libpq's message, with anything that could be the password removed; none
    of it when the URL is too broken to find its password (libpq may quote
    the whole URL)."""
    try:
        secrets = _secrets(url)
    except ValueError:
        return "the URL cannot be parsed"
    for secret in secrets:
        message = message.replace(secret, "***")
    return " ".join(message.split())


def _secrets(url: str) -> list[str]:
    """Candidate passwords in a URL libpq could not parse: the userinfo's
    password (as given and decoded) and any secret parameter (ValueError:
    the URL is too broken to tell)."""
    parts = urlsplit(url)
    found = [parts.password or "", parts.netloc.rpartition("@")[0].partition(":")[2]]
    found += [
        value
        for key, value in parse_qsl(parts.query, keep_blank_values=True)
        if key.lower() in SECRET_PARAMETERS
    ]
    return sorted({secret for secret in found if secret}, key=len, reverse=True)


def require_psycopg():  # type: ignore[no-untyped-def]
    """psycopg, or one clear usage error (exit 2) naming the extra that installs it."""
    try:
        import psycopg
        import psycopg.conninfo
    except ImportError:
        raise UsageError(
            f"a PostgreSQL store needs the PostgreSQL driver; install it with {INSTALL_HINT}"
        ) from None
    return psycopg
