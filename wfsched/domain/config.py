"""Supervisor settings: `<store>/config.toml`, overridden by flags.

Invalid values are refused at start with the file and key named, like a
definition error, so a typo never silently becomes a default.
"""

from __future__ import annotations

import math
import os
import re
import socket
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from wfsched.domain.definition import BOM, validate_argv
from wfsched.domain.timeutil import MAX_DURATION, check_duration, parse_duration
from wfsched.errors import DefinitionError

CONFIG_NAME = "config.toml"
_FLAGS = {"metrics_listen": "--metrics"}
"""Settings whose command-line flag is not `--<key>`."""


@dataclass(frozen=True)
class SupervisorConfig:
    """The supervisor's settings; the defaults are the documented ones.

    Lives here, not in the supervisor, so `status` (which reports the default
    capacity when no supervisor recorded one) does not import the daemon.
    """

    poll_interval: float = 1.0
    max_concurrent_runs: int = 4
    drain_grace: float = 30.0
    drain_record_window: float = 30.0
    """How long a drain keeps retrying to record its runs' ends through a
    store fault, past the cancel and the longest kill_grace (docs/operations.md,
    "Stopping")."""
    max_admissions_per_tick: int = 1000
    on_failure: tuple[str, ...] | None = None
    """Default failure hook for schedules without `[notify] on_failure`."""
    retention: float | None = None
    """Prune finished runs and history older than this many seconds, if set."""
    metrics_listen: str | None = None
    """Serve /metrics and /healthz on this address (`HOST:PORT`), if set."""
    max_log_bytes: int = 100 * 1024 * 1024
    """Each run's stdout.log and stderr.log are kept within this (the tail)."""
    busy_timeout: float = 15.0
    """How long a store write waits for another process's lock before the
    store counts as locked (a fault episode)."""
    host: str = field(default_factory=lambda: socket.gethostname())
    """The name this supervisor records on every run it admits (`--host`)."""
    lease: float = 5.0
    """A PostgreSQL store's leader lease: a leader not heard from for this long
    is replaced by a standby."""
    lease_renew: float = 1.0
    """How often the leader renews its lease (less than `lease`)."""
    host_timeout: float = 60.0
    """A PostgreSQL store's host whose heartbeat is older than this is lost:
    the leader fails its unfinished runs as abandoned (never re-run)."""
    runs_dir: str | None = None
    """This host's run directories (`--runs-dir`); None: beside the store's
    local directory (`<local dir>/runs`)."""


@dataclass(frozen=True)
class _Key:
    kind: str  # "seconds" | "count" | "argv"
    minimum: float
    maximum: float = MAX_DURATION


MAX_POLL_INTERVAL = 86400
"""The supervisor sleeps one poll interval in a single epoll wait, which
cannot wait longer than about 24 days; a day is already far past useful."""

_KEYS = {
    "poll_interval": _Key("seconds", 0.01, MAX_POLL_INTERVAL),
    "max_concurrent_runs": _Key("count", 1),
    "drain_grace": _Key("seconds", 0),
    "drain_record_window": _Key("seconds", 0, 86400),
    "max_admissions_per_tick": _Key("count", 1),
    "on_failure": _Key("argv", 0),
    "retention": _Key("seconds", 3600),
    "metrics_listen": _Key("listen", 0),
    "busy_timeout": _Key("seconds", 0.1, 3600),
    "max_log_bytes": _Key("count", 4096),
    "host": _Key("host", 0),
    "lease": _Key("seconds", 0.2, 3600),
    "lease_renew": _Key("seconds", 0.05, 3600),
    "host_timeout": _Key("seconds", 1, 86400),
    "runs_dir": _Key("path", 0),
}

MAX_HOST_LENGTH = 253
"""A DNS name's limit: any real host name fits, a pasted paragraph does not."""
_HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def load_config(store_root: Path, overrides: dict[str, Any]) -> SupervisorConfig:
    """Defaults, then config.toml, then the flags that were given."""
    import tomllib  # only the daemon reads config.toml; `status` needs just the defaults

    path = store_root / CONFIG_NAME
    values: dict[str, Any] = {}
    if path.exists():
        source = str(path)
        try:
            document = tomllib.loads(path.read_text(encoding="utf-8").removeprefix(BOM))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise DefinitionError(source, "", f"cannot read: {exc}") from None
        unknown = sorted(set(document) - set(_KEYS))
        if unknown:
            raise DefinitionError(
                source, unknown[0], f"unknown setting; valid: {', '.join(sorted(_KEYS))}"
            )
        for key, raw in document.items():
            values[key] = _value(source, key, raw)
    for key, raw in overrides.items():
        if raw is not None:
            flag = _FLAGS.get(key, f"--{key.replace('_', '-')}")
            values[key] = _value("command line", flag, raw, flag=key)
    known = {field.name for field in fields(SupervisorConfig)}
    config = replace(SupervisorConfig(), **{k: v for k, v in values.items() if k in known})
    if "host" not in values:
        try:
            check_host(config.host)
        except ValueError as exc:
            raise DefinitionError(
                "this machine's host name", "host", f"{exc}; give --host or config host"
            ) from None
    if config.lease_renew >= config.lease:
        where = "command line" if {"lease", "lease_renew"} & set(_given(overrides)) else str(path)
        raise DefinitionError(
            where,
            "lease_renew",
            f"must be shorter than lease ({config.lease_renew:g}s is not less than"
            f" {config.lease:g}s): a leader renews several times per lease",
        )
    return config


def _given(overrides: dict[str, Any]) -> list[str]:
    return [key for key, value in overrides.items() if value is not None]


def _value(
    source: str, key: str, raw: Any, flag: str | None = None
) -> float | int | str | tuple[str, ...]:
    spec = _KEYS[flag or key]
    if spec.kind == "host":
        if not isinstance(raw, str):
            raise DefinitionError(source, key, 'must be a string like "db-host-1"')
        try:
            return check_host(raw)
        except ValueError as exc:
            raise DefinitionError(source, key, str(exc)) from None
    if spec.kind == "path":
        return check_runs_dir(source, key, raw, relative_ok=flag is not None)
    if spec.kind == "listen":
        if not isinstance(raw, str):
            raise DefinitionError(source, key, 'must be a string like "127.0.0.1:9464"')
        try:
            return str(parse_listen(raw))
        except ValueError as exc:
            raise DefinitionError(source, key, str(exc)) from None
    if spec.kind == "argv":
        return validate_argv(raw, source, key)
    if isinstance(raw, bool):
        raise DefinitionError(source, key, "must be a number")
    if spec.kind == "count":
        if not isinstance(raw, int) or raw < spec.minimum:
            raise DefinitionError(source, key, f"must be an integer >= {spec.minimum:g}")
        return raw
    try:
        value = float(raw) if isinstance(raw, float) else float(parse_duration(raw))
        if not math.isfinite(value):
            raise ValueError(f"{raw!r} is not a number of seconds")
        check_duration(value, raw)
    except ValueError as exc:
        raise DefinitionError(source, key, str(exc)) from None
    if value < spec.minimum:
        raise DefinitionError(source, key, f"must be at least {spec.minimum:g} seconds")
    if value > spec.maximum:
        raise DefinitionError(source, key, f"must be at most {spec.maximum:g} seconds")
    return value


def check_host(name: str) -> str:
    """A host name as runs record it: 1-253 characters, letters, digits, `.`,
    `-`, `_`, starting with a letter or digit (an operator reads it in
    `runs show` and finds the host by it). ValueError saying what is wrong."""
    if not name:
        raise ValueError("must not be empty")
    if len(name) > MAX_HOST_LENGTH:
        raise ValueError(f"is {len(name)} characters long; at most {MAX_HOST_LENGTH}")
    if not _HOST_NAME.fullmatch(name):
        raise ValueError(
            f"{name!r}: only letters, digits, '.', '-' and '_', starting with a letter or digit"
        )
    return name


def check_runs_dir(source: str, key: str, raw: Any, *, relative_ok: bool) -> str:
    """A runs root as an absolute path (`~` expanded). In config.toml it must be
    absolute (relative to what would be a guess); on the command line it is
    relative to the working directory. An existing path must be a directory."""
    if not isinstance(raw, str) or not raw.strip() or "\0" in raw:
        raise DefinitionError(source, key, "must be a non-empty path without NUL characters")
    expanded = os.path.expanduser(raw)
    if not os.path.isabs(expanded) and not relative_ok:
        raise DefinitionError(source, key, f"{raw!r} must be an absolute path")
    path = os.path.abspath(expanded)
    if os.path.exists(path) and not os.path.isdir(path):
        raise DefinitionError(source, key, f"{path} exists and is not a directory")
    return path


@dataclass(frozen=True)
class LocalSettings:
    """What a command on this host needs of config.toml without starting a
    supervisor: the host's name and its runs root."""

    host: str
    runs_dir: str | None


def local_settings(
    local_dir: Path, *, host: str | None = None, runs_dir: str | None = None
) -> LocalSettings:
    """`host` and `runs_dir` from the flags, else `<local dir>/config.toml`, else
    the defaults. Only these two keys are read and checked: the other settings
    are the supervisor's, checked when it starts."""
    values: dict[str, Any] = {}
    path = local_dir / CONFIG_NAME
    if (host is None or runs_dir is None) and path.exists():
        import tomllib

        try:
            document = tomllib.loads(path.read_text(encoding="utf-8").removeprefix(BOM))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise DefinitionError(str(path), "", f"cannot read: {exc}") from None
        for key in ("host", "runs_dir"):
            if key in document:
                values[key] = _value(str(path), key, document[key])
    if host is not None:
        values["host"] = _value("command line", "--host", host, flag="host")
    if runs_dir is not None:
        values["runs_dir"] = _value("command line", "--runs-dir", runs_dir, flag="runs_dir")
    runs_root = values.get("runs_dir")
    return LocalSettings(
        host=str(values.get("host") or socket.gethostname()),
        runs_dir=None if runs_root is None else str(runs_root),
    )


# -- listen addresses (`metrics_listen`): parsed here, so reading the
# configuration imports nothing of the daemon (no HTTP server, no sockets).

LOOPBACK = "127.0.0.1"
_FORMS = "expected HOST:PORT, :PORT or PORT (an IPv6 address as [ADDR]:PORT)"
_HOST_PORT = re.compile(r"(?:\[(?P<v6>[0-9A-Fa-f:.%a-zA-Z]+)\]|(?P<host>[^:\[\]]*)):(?P<port>\d+)")


@dataclass(frozen=True)
class Listen:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_listen(text: str) -> Listen:
    """`HOST:PORT`, `:PORT` or `PORT` (loopback), `[ADDR]:PORT` for IPv6.

    Raises ValueError saying which forms are accepted; port 0 asks the kernel
    for a free port (the supervisor logs the one it got).
    """
    text = text.strip()
    if text.isdigit():
        host, port_text = LOOPBACK, text
    else:
        match = _HOST_PORT.fullmatch(text)
        if match is None:
            raise ValueError(f"{text!r}: {_FORMS}")
        host = match["v6"] or match["host"] or LOOPBACK
        port_text = match["port"]
    port = int(port_text)
    if port > 65535:
        raise ValueError(f"{text!r}: port {port} is out of range (0-65535)")
    return Listen(host, port)
