"""Crontab lines to definition files (`wfsched import-crontab`).

Pure: text in, definition texts and the lines that could not be translated
out; reading the crontab and writing the files is the caller's. Each
definition is parsed back with the one validator before it is offered, so a
file this module writes is one `apply` takes.

What cron does and how each translates (docs/operations.md,
"Coming from cron"):
- `m h dom mon dow command` (user crontab) or `... user command` (system
  crontab: /etc/crontab, /etc/cron.d): the five fields become
  `trigger.cron` as written, in the zone of the last `CRON_TZ` line before
  it, else the default zone (the host's, as cron's).
- cron runs the command with `$SHELL -c` (default /bin/sh) in the user's
  home directory: a string `command` (wfsched's /bin/sh -c) or
  `[SHELL, "-c", command]`, and `cwd` = that home when it exists.
- `NAME=value` lines set the environment of the lines after them: `[run]
  env`. `MAILTO`/`MAILFROM` have no equivalent (the output is kept in the
  run's logs) and are written as a comment.
- `%` in a command is a newline and standard input in cron: not translated
  (`\\%` is a plain percent sign). `@reboot`, `RANDOM_DELAY` and fields
  wfsched refuses are reported with the line number and not translated.
"""

from __future__ import annotations

import os
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field

from wfsched.errors import DefinitionError

_ENV_LINE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$")
_SPLIT = re.compile(r"[ \t]+")
_NOT_SHELL_DEFAULT = "/bin/sh"
_OPERATORS = re.compile(r"&&|\|\||[;|&(){}]")
_SKIPPED_PROGRAMS = frozenset({"cd", "test", "[", "true", ":", "export", "set", "if", "then", "!"})
_WRAPPERS = frozenset(
    {"nice", "ionice", "nohup", "exec", "time", "env", "chronic", "sudo", "timeout", "flock"}
)
_WITH_VALUE = {"nice": {"-n"}, "ionice": {"-c", "-n"}, "sudo": {"-u", "-g"}}
"""Options of a wrapper that take the next word as their value."""
_POSITIONAL_BEFORE_COMMAND = {"timeout": 1, "flock": 1}
"""Words a wrapper takes before the command it runs (a duration, a lock file)."""
_DESCRIPTION_LIMIT = 200


@dataclass(frozen=True)
class Translated:
    """One crontab line as a definition file."""

    line: int
    schedule_id: str
    text: str
    notes: tuple[str, ...]
    """What the operator should know (also written as comments in `text`)."""


@dataclass(frozen=True)
class Untranslated:
    line: int
    why: str


@dataclass
class CrontabImport:
    translated: list[Translated] = field(default_factory=list)
    untranslated: list[Untranslated] = field(default_factory=list)


@dataclass
class _Environment:
    """What the lines so far have set, as cron keeps it while it reads."""

    env: dict[str, str] = field(default_factory=dict)
    zone: str = "UTC"
    shell: str = _NOT_SHELL_DEFAULT
    mailto: str | None = None


def translate_crontab(
    text: str,
    *,
    source: str,
    system: bool,
    zone: str,
    owner: str | None,
    now: int,
    home_of: Callable[[str], str | None] = lambda user: None,
) -> CrontabImport:
    """Every line of a crontab, translated or explained.

    `system`: lines carry a user field (/etc/crontab, /etc/cron.d).
    `zone`: the zone of lines before any `CRON_TZ`. `owner`: whose user
    crontab this is (its jobs' user in cron). `home_of`: a user's home
    directory if it exists on this host (the job's cwd, as cron's).
    """
    result = CrontabImport()
    state = _Environment(zone=zone)
    taken: set[str] = set()
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        env = _ENV_LINE.match(line)
        if env is not None and not _looks_like_job(line):
            problem = _set(state, env.group(1), _unquote(env.group(2)), zone)
            if problem is not None:
                result.untranslated.append(Untranslated(number, problem))
            continue
        try:
            job = _job(line, system)
        except ValueError as exc:
            result.untranslated.append(Untranslated(number, str(exc)))
            continue
        times, user, command = job
        user = user if system else owner
        try:
            translated = _definition(
                number, raw, times, user, command, state, source, now, taken, home_of
            )
        except ValueError as exc:
            result.untranslated.append(Untranslated(number, str(exc)))
            continue
        result.translated.append(translated)
    return result


def _looks_like_job(line: str) -> bool:
    """`0 * * * * A=1 cmd` matches the variable pattern too; a line whose
    first word is a minute field or an alias is a job."""
    first = _SPLIT.split(line, 1)[0]
    return first.startswith("@") or bool(re.fullmatch(r"[0-9*][0-9*,/-]*", first))


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _set(state: _Environment, name: str, value: str, default_zone: str) -> str | None:
    """Apply one `NAME=value` line; why it cannot be translated, if so."""
    if name == "CRON_TZ":
        from wfsched.domain.calendar import load_zone

        try:
            state.zone = load_zone(value).key if value else default_zone
        except ValueError as exc:
            return f"CRON_TZ: {exc}; the lines after it keep {state.zone}"
    elif name == "SHELL":
        state.shell = value or _NOT_SHELL_DEFAULT
    elif name == "MAILTO":
        state.mailto = value
    elif name == "MAILFROM":
        pass  # only the sender of cron's mail, which wfsched does not send
    elif name == "RANDOM_DELAY":
        return "RANDOM_DELAY has no equivalent in wfsched yet; the lines after it start on time"
    elif name.startswith("WFSCHED_"):
        return f"{name}: names starting with WFSCHED_ are reserved for wfsched"
    else:
        state.env[name] = value
    return None


def _job(line: str, system: bool) -> tuple[str, str | None, str]:
    """(time fields, user, command) of a job line."""
    words = 1 if line.startswith("@") else 5
    if system:
        words += 1
    parts = _SPLIT.split(line, words)
    if len(parts) <= words:
        wanted = "the time fields, a user and a command" if system else "time fields and a command"
        raise ValueError(f"expected {wanted}; got {line!r}")
    if parts[0].lower() == "@reboot":
        raise ValueError("@reboot has no equivalent: wfsched has no boot event")
    command = parts[words]
    user = parts[words - 1] if system else None
    times = " ".join(parts[: words - 1] if system else parts[:words])
    return times, user, command


def _command(command: str) -> str:
    """cron's `%` rule: unescaped, a newline and standard input; escaped, a `%`."""
    if re.search(r"(?<!\\)%", command):
        raise ValueError(
            "'%' in a cron command starts its standard input; wfsched has no equivalent:"
            " move the input into a script (write \\% for a literal percent sign)"
        )
    return command.replace("\\%", "%")


def _definition(
    number: int,
    raw: str,
    times: str,
    user: str | None,
    command: str,
    state: _Environment,
    source: str,
    now: int,
    taken: set[str],
    home_of: Callable[[str], str | None],
) -> Translated:
    import tomli_w

    from wfsched.domain.advice import advise
    from wfsched.domain.calendar import normalize_cron
    from wfsched.domain.definition import parse_definition

    normalize_cron(times)  # the calendar's own message for a field it refuses
    command = _command(command)
    schedule_id = _unique(_derive_id(command), taken)
    run: dict[str, object] = {
        "command": command if state.shell == _NOT_SHELL_DEFAULT else [state.shell, "-c", command]
    }
    home = home_of(user) if user is not None else None
    if home is not None:
        run["cwd"] = home
    if state.env:
        run["env"] = dict(state.env)
    description = command if len(command) <= _DESCRIPTION_LIMIT else command[:197] + "..."
    body = tomli_w.dumps(
        {
            "id": schedule_id,
            "description": description,
            "trigger": {"cron": times, "timezone": state.zone},
            "run": run,
        }
    )
    try:
        defn = parse_definition(body, f"line {number}", now=now)
    except DefinitionError as exc:
        raise ValueError(exc.detail if exc.path == "" else f"{exc.path}: {exc.detail}") from None
    notes = _notes(user, home, state, [message for _, message in advise(defn, now)])
    header = [
        f"# Imported by `wfsched import-crontab` from {source}, line {number}:",
        f"#   {raw.strip()}",
        *(
            wrapped
            for note in notes
            for wrapped in textwrap.wrap(note, 76, initial_indent="# ", subsequent_indent="#   ")
        ),
    ]
    return Translated(number, schedule_id, "\n".join(header) + "\n" + body, tuple(notes))


def _notes(user: str | None, home: str | None, state: _Environment, advice: list[str]) -> list[str]:
    notes = []
    if user is not None:
        notes.append(
            f"cron ran it as user {user}; wfsched runs it as the supervisor's user"
            + (f" (in {user}'s home directory, as cron does)" if home is not None else "")
        )
    if state.mailto is not None:
        notes.append(
            f"cron mailed its output to MAILTO={state.mailto!r}; wfsched keeps it"
            " (`wfsched runs logs`); [notify] on_failure can mail on failure"
        )
    notes.append(
        "cron starts a run even while the last one still runs; wfsched skips that"
        ' instant (overlap = "skip"): set overlap = "parallel" with max_active_runs for'
        " cron's way"
    )
    notes.extend(f"NOTE: {message}" for message in advice)
    return notes


def _derive_id(command: str) -> str:
    """A readable id from the program a command runs: `backup.sh --full`
    gives `backup.sh`, `cd / && run-parts /etc/cron.daily` gives
    `cron.daily`. Shell words (cd, test, variables) and wrappers (nice,
    timeout, flock...) are looked through."""
    for simple in _OPERATORS.split(command):
        words = [word for word in simple.split() if "=" not in word or word.startswith("-")]
        program = _program(words)
        if program is None:
            continue
        name = os.path.basename(program)
        if name == "run-parts":
            targets = [word for word in words[words.index(program) + 1 :] if word[:1] != "-"]
            if targets:
                name = os.path.basename(targets[-1].rstrip("/")) or name
        slug = re.sub(r"[^a-z0-9_.-]+", "-", name.lower()).strip("-._")
        if slug:
            return slug[:56]
    return "cron-job"


def _program(words: list[str]) -> str | None:
    """The first word of a simple command that names the program it runs."""
    index = 0
    while index < len(words):
        word = words[index]
        base = os.path.basename(word)
        if base in _SKIPPED_PROGRAMS:
            return None
        if base not in _WRAPPERS:
            return word
        index += 1
        valued = _WITH_VALUE.get(base, set())
        while index < len(words) and words[index].startswith("-"):
            index += 2 if words[index] in valued else 1
        index += _POSITIONAL_BEFORE_COMMAND.get(base, 0)
    return None


def _unique(base: str, taken: set[str]) -> str:
    """`base`, or `base-2`, `base-3`... for the second and later lines with it."""
    schedule_id, count = base, 1
    while schedule_id in taken:
        count += 1
        schedule_id = f"{base}-{count}"
    taken.add(schedule_id)
    return schedule_id
