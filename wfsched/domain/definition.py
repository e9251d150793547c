"""Parse and validate schedule definitions (docs/definitions.md).

This is the only place that validates; everything downstream receives a frozen
`Definition` and may trust it. Validation is strict on purpose: unknown keys
are refused (a typo such as `timout` must not silently mean "no timeout"), and
every message is `<file>: <key.path>: <what is wrong and what would be valid>`
so the operator can go straight to the line.

The same validator reads two shapes: TOML files and the JSON document the
store keeps (`Definition.to_document()`), whose absent optional values are
null. A null value is therefore treated as an absent key; TOML cannot write
one, so this loosens nothing for files.

Bounds tighten between releases; a definition the store already holds was
accepted under the rules of its day and must still load after an upgrade,
or its schedule could be neither run, paused, deleted nor fixed. So a stored
definition (`stored=True`) is read with the shapes and types every release
required, but without the bounds that came later: durations over 3650d,
the size caps, the tz-database-only zone rule (its zone is resolved when its
calendar is built, `calendar.resolve_zone`) and whole-string patterns.
Where a deadline is computed, such a duration is clamped to MAX_DURATION.
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
from collections.abc import Mapping, Sequence
from datetime import date, datetime, time
from pathlib import Path
from typing import Any, cast

from wfsched import __version__
from wfsched.domain.inputs import sample_input, toml_key, validate_bindings, whole_match
from wfsched.domain.model import (
    CronTrigger,
    Definition,
    Misfire,
    OneShotTrigger,
    Overlap,
    Policy,
    RunSpec,
    Trigger,
)
from wfsched.domain.timeutil import (
    MIN_INSTANT,
    check_instant,
    format_duration,
    parse_duration,
    parse_unchecked_instant,
)
from wfsched.errors import DefinitionError

# Every pattern is applied with fullmatch: `$` also matches before a final
# newline, so `match` with `^...$` would let "nl\n" through as an id.
ID_PATTERN = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
RESERVED_ENV_PREFIX = "WFSCHED_"
SHELL = ("/bin/sh", "-c")

MAX_ENV_VARS = 256
MAX_ENV_BYTES = 64 * 1024
"""`run.env` as the `NAME=value` strings exec receives (UTF-8): frozen into
every run and passed to every exec, so it is bounded like the input document."""
MAX_ARGV_BYTES = 64 * 1024
"""`run.command` and `notify.on_failure`, all strings together (UTF-8), well
under the kernel's 128 KiB limit for one argument."""
MAX_DESCRIPTION_BYTES = 4096
MAX_ACTIVE_RUNS = 10_000
"""`policy.max_active_runs`: runs of one schedule at once; far above what a
host runs (`max_concurrent_runs` is at most 10,000 too)."""
MAX_PATH_BYTES = 4095
"""PATH_MAX (4096) less the terminating NUL: a longer `cwd` cannot be entered."""
BOM = "\ufeff"

_RFC3339 = re.compile(
    r"(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(?:\.\d+)?([Zz]|[+-]\d{2}:\d{2})", re.ASCII
)
_NAIVE = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(?:\.\d+)?", re.ASCII)

_TOP_KEYS = ("id", "description", "trigger", "run", "policy", "notify", "input")
_TRIGGER_KEYS = ("cron", "timezone", "at")
_RUN_KEYS = ("command", "cwd", "env", "timeout", "kill_grace", "interrupt_exit_code")
_POLICY_KEYS = ("overlap", "max_active_runs", "misfire", "lateness")
_NOTIFY_KEYS = ("on_failure",)
_OVERLAPS = ("skip", "queue", "parallel")
_MISFIRES = ("skip", "latest")
_DURATION_KEYS = {"run": ("timeout", "kill_grace"), "policy": ("lateness",)}


def parse_definition(text: str, source: str, *, now: int | None = None) -> Definition:
    """Parse TOML text; syntax errors keep tomllib's line and column.

    A leading byte-order mark is dropped: Windows editors write one, it is
    not part of the TOML, and tomllib would report it as an invalid statement.
    """
    text = text.removeprefix(BOM)
    try:
        document = _load_toml(text)
    except tomllib.TOMLDecodeError as exc:
        raise DefinitionError(source, "", f"invalid TOML: {exc}{_python_spelling(text)}") from None
    except RecursionError:
        raise DefinitionError(source, "", "invalid TOML: nested too deeply") from None
    return definition_from_document(document, source, now=now)


_PYTHON_VALUE = re.compile(r"(?:^|[=\[,{])[ \t]*(True|False|None)\b", re.MULTILINE)


def _python_spelling(text: str) -> str:
    """A hint when the file spells a value the way Python does: a common
    slip for people who write Python, and tomllib's own message (`Invalid
    value`) does not say which word is wrong."""
    match = _PYTHON_VALUE.search(text)
    if match is None:
        return ""
    word = match.group(1)
    line = text.count("\n", 0, match.start(1)) + 1
    if word == "None":
        return f"; line {line}: TOML has no None (leave the key out)"
    return f"; line {line}: TOML writes {word} as {word.lower()} (lower case)"


def _load_toml(text: str) -> dict[str, Any]:
    """The TOML document in `text`, exactly as the standard library's tomllib reads it.

    tomllib is a copy of tomli (same author, same code); tomli's own wheels
    are compiled (mypyc) and parse about twice as fast, which is most of what
    `apply` of many new files spends. tomli is pinned below 2.4, whose
    releases read TOML 1.1 where tomllib (Python 3.11-3.14) reads TOML 1.0.
    Whatever tomli refuses, tomllib parses again and has the last word: its
    document or its error (message, line and column) is the answer, so an
    operator sees the same error text as before, and no file tomllib accepts
    is refused.
    """
    import tomli  # here, not at the top: read-only commands such as `list` never parse TOML

    try:
        return tomli.loads(text)
    except Exception:  # any refusal: the reference parser decides (see above)
        return tomllib.loads(text)


def load_definition_file(path: str | Path, *, now: int | None = None) -> Definition:
    """Read and parse one definition file; `-` reads standard input."""
    if str(path) == "-":
        source = "<stdin>"
        try:
            text = sys.stdin.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise DefinitionError(source, "", f"cannot read: {exc}") from None
        return parse_definition(text, source, now=now)
    source = str(path)
    return parse_definition_bytes(read_definition_bytes(source), source, now=now)


def read_definition_bytes(source: str) -> bytes:
    """A definition file's bytes (`apply` digests them before parsing).

    Unbuffered: the whole file is wanted at once, and the buffer layer
    cost a fifth of reading a small file (`apply` reads every file of its
    folder, changed or not)."""
    try:
        with open(source, "rb", buffering=0) as file:
            return file.readall()
    except OSError as exc:
        raise DefinitionError(source, "", f"cannot read: {exc.strerror or exc}") from None


def source_digest(data: bytes) -> str:
    """The digest `apply` keeps of a definition file's bytes, tied to the
    wfsched version: after an upgrade (whose validation may have changed)
    every file is parsed and validated once more."""
    from hashlib import sha256

    return sha256(f"wfsched {__version__}\n".encode() + data).hexdigest()


def parse_definition_bytes(data: bytes, source: str, *, now: int | None = None) -> Definition:
    """Decode a file's bytes as reading it as text does (UTF-8, universal
    newlines), then parse it."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DefinitionError(source, "", f"cannot read: not UTF-8 text ({exc.reason})") from None
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return parse_definition(text, source, now=now)


def definition_from_document(
    doc: Mapping[str, Any], source: str, *, now: int | None = None, stored: bool = False
) -> Definition:
    """Validate a mapping (parsed TOML or the store's JSON) into a Definition.

    `now` (epoch seconds) enables the never-fires probe. It is None when the
    store loads back a definition it already accepted: a cron that fired then
    may legitimately have no future instant now, and that is the supervisor's
    `exhausted` state, not an invalid definition. `stored`: read a definition
    the store holds, without the bounds added since it was accepted (see the
    module docstring).
    """
    top = _table(doc, source, "", _TOP_KEYS)
    schedule_id = _schedule_id(top.get("id"), source, stored)
    description = top.get("description")
    if description is not None and not isinstance(description, str):
        raise DefinitionError(source, "description", "must be a string")
    if description is not None and not stored and _utf8_len(description) > MAX_DESCRIPTION_BYTES:
        raise DefinitionError(
            source,
            "description",
            f"{_utf8_len(description):,} bytes; at most {MAX_DESCRIPTION_BYTES:,} (UTF-8)",
        )
    if "trigger" not in top:
        raise DefinitionError(source, "trigger", "required: a [trigger] table with `cron` or `at`")
    if "run" not in top:
        raise DefinitionError(source, "run", "required: a [run] table with `command`")
    trigger = _trigger(
        _table(top["trigger"], source, "trigger", _TRIGGER_KEYS), source, now, stored
    )
    run = _run(_table(top["run"], source, "run", _RUN_KEYS), source, stored)
    policy = _policy(_table(top.get("policy", {}), source, "policy", _POLICY_KEYS), source, stored)
    notify = _table(top.get("notify", {}), source, "notify", _NOTIFY_KEYS)
    on_failure = None
    if notify.get("on_failure") is not None:
        on_failure = validate_argv(notify["on_failure"], source, "notify.on_failure", stored=stored)
    bindings = validate_bindings(top.get("input", []), source, stored=stored)
    sample_input(bindings, schedule_id, source=source)
    return Definition(
        id=schedule_id,
        trigger=trigger,
        run=run,
        policy=policy,
        description=description,
        on_failure=on_failure,
        inputs=bindings,
    )


def to_toml(defn: Definition) -> str:
    """A TOML file that `update` accepts and that parses back to `defn`.

    Durations are written in their shortest `<n>d|h|m|s` spelling for the
    reader; nulls and empty optional tables are dropped (TOML has no null).
    """
    document = _drop_empty(defn.to_document())
    for table, keys in _DURATION_KEYS.items():
        for key in keys:
            if key in document.get(table, {}):
                document[table][key] = format_duration(document[table][key])
    # Multi-line strings keep a shell script in `command` readable, but TOML
    # folds CRLF inside them to LF, so a carriage return forces escapes.
    import tomli_w

    return tomli_w.dumps(document, multiline_strings=not _has_carriage_return(document))


def _has_carriage_return(value: object) -> bool:
    if isinstance(value, str):
        return "\r" in value
    if isinstance(value, dict):
        return any(_has_carriage_return(item) for item in value.values())
    if isinstance(value, list):
        return any(_has_carriage_return(item) for item in value)
    return False


def canonical_json(defn: Definition) -> str:
    """Deterministic JSON of the definition: the stored form and the change test.

    Two definitions are "unchanged" for `apply` exactly when these strings are
    equal, so keys are sorted and the output is compact and ASCII-stable.
    """
    return _CANONICAL.encode(defn.to_document())


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
"""What `json.dumps` with these options builds anew on every call (an
encoder holds only its options): `apply` encodes every new definition."""


def _schedule_id(value: object, source: str, stored: bool) -> str:
    if value is None:
        raise DefinitionError(source, "id", 'required, e.g. id = "hourly-report"')
    if not isinstance(value, str) or not whole_match(ID_PATTERN, value, stored=stored):
        raise DefinitionError(
            source,
            "id",
            f"{value!r} is not a valid id: 1-63 characters of a-z, 0-9, _, . and -, "
            "starting with a letter or digit",
        )
    return value


def _trigger(table: Mapping[str, Any], source: str, now: int | None, stored: bool) -> Trigger:
    # Lazy: croniter costs tens of ms, and `list`/`get` never need it.
    from wfsched.domain import calendar

    has_cron, has_at = "cron" in table, "at" in table
    if has_cron == has_at:
        found = "has both" if has_cron else "has neither"
        raise DefinitionError(source, "trigger", f"needs exactly one of `cron` or `at` ({found})")
    if has_at:
        if "timezone" in table:
            raise DefinitionError(
                source,
                "trigger.timezone",
                "not allowed with `at`: the offset written in `at` is the zone; remove it",
            )
        return _one_shot(table["at"], source)
    cron = table["cron"]
    if not isinstance(cron, str):
        raise DefinitionError(source, "trigger.cron", 'must be a string, e.g. "0 * * * *"')
    timezone = table.get("timezone", "UTC")
    if not isinstance(timezone, str):
        raise DefinitionError(
            source, "trigger.timezone", 'must be an IANA zone name string, e.g. "Europe/Berlin"'
        )
    try:
        normalized = calendar.normalize_cron(cron)
    except ValueError as exc:
        raise DefinitionError(source, "trigger.cron", str(exc)) from None
    try:
        if not stored:
            calendar.load_zone(timezone)
    except ValueError as exc:
        raise DefinitionError(source, "trigger.timezone", str(exc)) from None
    if now is not None:
        try:
            # calendar.check_fires takes the zone *name* (it loads it itself).
            calendar.check_fires(normalized, timezone, now)
        except ValueError as exc:
            raise DefinitionError(source, "trigger.cron", str(exc)) from None
    return CronTrigger(cron=cron, timezone=timezone, normalized=normalized)


def _one_shot(value: object, source: str) -> OneShotTrigger:
    """An instant WITH an offset: a wall time alone is ambiguous across zones and DST."""
    path = "trigger.at"
    example = "e.g. 2026-12-24T18:00:00+01:00"
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise DefinitionError(
                source, path, f"a local date-time has no UTC offset; add one, {example}"
            )
        written = value.isoformat()
        at = int(value.replace(microsecond=0).timestamp())
        return OneShotTrigger(at=_representable(at, written, source), written=written)
    if isinstance(value, date | time):
        raise DefinitionError(
            source,
            path,
            "a TOML local date or time is not an instant; "
            f"write a date-time with an offset, {example}",
        )
    if not isinstance(value, str):
        raise DefinitionError(
            source, path, f"must be an offset date-time or RFC 3339 string, {example}"
        )
    match = _RFC3339.fullmatch(value.strip())
    if match is None:
        naive = _NAIVE.fullmatch(value.strip())
        why = "has no UTC offset" if naive else "is not an RFC 3339 date-time"
        raise DefinitionError(source, path, f"{value!r} {why}; write it with an offset, {example}")
    day, clock, offset = match.groups()
    try:
        # Fractions are dropped before parsing: the instant keeps whole
        # seconds (truncated), and fromisoformat is picky about digit counts.
        at = parse_unchecked_instant(f"{day}T{clock}{offset.upper()}")
    except ValueError as exc:
        raise DefinitionError(source, path, f"{exc}; {example}") from None
    return OneShotTrigger(at=_representable(at, value, source), written=value)


def _representable(at: int, written: str, source: str) -> int:
    """`at` in years 1-9999 in UTC, and not the very first second of year 1:
    a one-shot is due while the watermark is one second before it, and that
    second must exist too."""
    try:
        check_instant(at, repr(written))
        if at == MIN_INSTANT:
            raise ValueError(f"{written!r} is the first representable second; write a later one")
    except ValueError as exc:
        raise DefinitionError(source, "trigger.at", str(exc)) from None
    return at


def _run(table: Mapping[str, Any], source: str, stored: bool) -> RunSpec:
    if table.get("command") is None:
        raise DefinitionError(
            source,
            "run.command",
            'required: an argv list such as ["python3", "job.py"] or a shell string',
        )
    written = table["command"]
    if isinstance(written, str):
        if not written.strip():
            raise DefinitionError(
                source, "run.command", "must be a non-blank shell command string or an argv list"
            )
        _check_text(written, source, "run.command", None if stored else MAX_ARGV_BYTES)
        command: tuple[str, ...] = (*SHELL, written)
        command_written: str | tuple[str, ...] = written
    else:
        command = command_written = validate_argv(written, source, "run.command", stored=stored)
    cwd = table.get("cwd")
    if cwd is not None and (not isinstance(cwd, str) or not cwd.startswith("/")):
        # Relative to what? The supervisor's directory, the file's, the
        # store's... An absolute path leaves no room for that surprise.
        raise DefinitionError(
            source, "run.cwd", f'{cwd!r} must be an absolute path such as "/srv/reports"'
        )
    if cwd is not None:
        _check_text(cwd, source, "run.cwd", None if stored else MAX_PATH_BYTES)
    timeout = _duration(table, "timeout", None, source, "run", stored)
    if timeout == 0:
        raise DefinitionError(source, "run.timeout", "must be positive (omit it for no timeout)")
    exit_code = table.get("interrupt_exit_code")
    if exit_code is not None and (
        isinstance(exit_code, bool) or not isinstance(exit_code, int) or not 1 <= exit_code <= 255
    ):
        raise DefinitionError(
            source,
            "run.interrupt_exit_code",
            f"{exit_code!r} must be an integer from 1 to 255 (0 means success)",
        )
    return RunSpec(
        command=command,
        command_written=command_written,
        cwd=cwd,
        env=_env(table.get("env", {}), source, stored),
        timeout=timeout,
        kill_grace=cast(int, _duration(table, "kill_grace", 10, source, "run", stored)),
        interrupt_exit_code=exit_code,
    )


def _env(value: object, source: str, stored: bool) -> tuple[tuple[str, str], ...]:
    if type(value) is dict and not value:
        return ()  # the usual case, which the checks below all pass
    if not isinstance(value, Mapping):
        raise DefinitionError(
            source, "run.env", 'must be a table of strings, e.g. { LANG = "C.UTF-8" }'
        )
    if len(value) > MAX_ENV_VARS and not stored:
        raise DefinitionError(
            source, "run.env", f"{len(value):,} variables; at most {MAX_ENV_VARS} are allowed"
        )
    pairs = []
    for name, text in value.items():
        path = f"run.env.{toml_key(name)}"
        if not isinstance(name, str) or not whole_match(ENV_NAME, name, stored=stored):
            raise DefinitionError(
                source,
                path,
                "not a valid environment name: letters, digits and _, not starting with a digit",
            )
        if name.startswith(RESERVED_ENV_PREFIX):
            raise DefinitionError(
                source, path, f"names starting with {RESERVED_ENV_PREFIX} are reserved for wfsched"
            )
        if not isinstance(text, str):
            raise DefinitionError(
                source, path, f"must be a string (quote it: {json.dumps(str(text))})"
            )
        _check_text(text, source, path, None if stored else MAX_ENV_BYTES)
        pairs.append((name, text))
    size = sum(_utf8_len(name) + 1 + _utf8_len(text) for name, text in pairs)
    if size > MAX_ENV_BYTES and not stored:
        raise DefinitionError(
            source,
            "run.env",
            f"{size:,} bytes as NAME=value strings; at most {MAX_ENV_BYTES:,} (64 KiB)",
        )
    # Sorted: the order of environment variables means nothing, so it must
    # not make two equal definitions compare different.
    return tuple(sorted(pairs))


def _policy(table: Mapping[str, Any], source: str, stored: bool) -> Policy:
    overlap = table.get("overlap", "skip")
    if overlap not in _OVERLAPS:
        raise DefinitionError(
            source, "policy.overlap", f"{overlap!r} is not one of: {', '.join(_OVERLAPS)}"
        )
    misfire = table.get("misfire", "skip")
    if misfire not in _MISFIRES:
        raise DefinitionError(
            source, "policy.misfire", f"{misfire!r} is not one of: {', '.join(_MISFIRES)}"
        )
    limit = table.get("max_active_runs")
    if overlap == "parallel":
        if limit is None:
            raise DefinitionError(
                source, "policy.max_active_runs", 'required when overlap = "parallel"'
            )
        if (
            isinstance(limit, bool)
            or not isinstance(limit, int)
            or limit < 1
            or (limit > MAX_ACTIVE_RUNS and not stored)
        ):
            raise DefinitionError(
                source,
                "policy.max_active_runs",
                f"{limit!r} must be an integer from 1 to {MAX_ACTIVE_RUNS:,}",
            )
    elif limit is not None:
        raise DefinitionError(
            source,
            "policy.max_active_runs",
            f'only allowed when overlap = "parallel" (overlap is "{overlap}"); remove it',
        )
    return Policy(
        overlap=cast(Overlap, overlap),
        max_active_runs=limit,
        misfire=cast(Misfire, misfire),
        lateness=cast(int, _duration(table, "lateness", 60, source, "policy", stored)),
    )


def validate_argv(
    value: object, source: str, path: str, *, stored: bool = False
) -> tuple[str, ...]:
    """A non-empty list of non-empty strings that exec can take: no NUL (exec
    would refuse it at launch, long after validation said yes) and at most
    MAX_ARGV_BYTES in all (not checked for a `stored` definition)."""
    if not isinstance(value, list) or not value:
        raise DefinitionError(
            source,
            path,
            'must be a non-empty argv list of strings, e.g. ["mail", "ops@example.com"]',
        )
    for index, item in enumerate(value):
        if not isinstance(item, str) or not item:
            raise DefinitionError(source, f"{path}[{index}]", "must be a non-empty string")
        _check_text(item, source, f"{path}[{index}]", None if stored else MAX_ARGV_BYTES)
    size = sum(_utf8_len(item) + 1 for item in value)
    if size > MAX_ARGV_BYTES and not stored:
        raise DefinitionError(
            source, path, f"{size:,} bytes in all; at most {MAX_ARGV_BYTES:,} (64 KiB)"
        )
    return tuple(value)


def _check_text(text: str, source: str, path: str, limit: int | None) -> None:
    """No NUL (the C strings of exec and chdir end at one) and at most `limit`
    bytes (None: no limit, for a stored definition)."""
    if "\0" in text:
        raise DefinitionError(
            source, path, "contains a NUL character (\\0), which the operating system cannot pass"
        )
    if limit is not None and _utf8_len(text) > limit:
        raise DefinitionError(source, path, f"{_utf8_len(text):,} bytes; at most {limit:,} (UTF-8)")


def _utf8_len(text: str) -> int:
    if text.isascii():  # one byte a character, and isascii() reads a flag
        return len(text)
    # surrogatepass: TOML cannot hold a lone surrogate, but the store's JSON can.
    return len(text.encode("utf-8", "surrogatepass"))


def _duration(
    table: Mapping[str, Any],
    key: str,
    default: int | None,
    source: str,
    parent: str,
    stored: bool,
) -> int | None:
    value = table.get(key)
    if value is None:
        return default
    try:
        return parse_duration(value, bounded=not stored)
    except ValueError as exc:
        raise DefinitionError(source, f"{parent}.{key}", str(exc)) from None


def _table(value: object, source: str, path: str, allowed: Sequence[str]) -> dict[str, Any]:
    """A table with known keys only; null members are dropped (absent)."""
    # `type(...) is dict` first: both shapes read here are plain dicts, and
    # the ABC check alone costs more than the rest for a small table.
    if type(value) is not dict and not isinstance(value, Mapping):
        raise DefinitionError(source, path or "<document>", "must be a table")
    for key in value:
        if key not in allowed:
            where = f"{path}.{key}" if path else str(key)
            raise DefinitionError(
                source, where, f"unknown key; valid keys here: {', '.join(allowed)}"
            )
    if None in value.values():
        return {k: v for k, v in value.items() if v is not None}
    # A plain dict is returned as it is: nothing here or in the callers
    # writes to a table, and the copy cost more than its checks.
    return value if type(value) is dict else dict(value)


def _drop_empty(document: dict[str, Any]) -> dict[str, Any]:
    """Drop nulls and the empty optional tables/arrays they leave behind."""
    out: dict[str, Any] = {}
    for key, value in document.items():
        if isinstance(value, dict):  # trigger, run, policy, notify: one level deep
            value = {k: v for k, v in value.items() if v is not None and v != {}}
        if value is None or value == {} or value == []:
            continue
        out[key] = value
    return out
