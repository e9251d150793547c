"""The operator docs (docs/*.md, docs/systemd/wfsched.service) checked against
the code, so they cannot drift silently.

- every command and subcommand is documented and has help text; every
  option is mentioned somewhere in docs/;
- every TOML block holding a definition (a line `id = ...`) parses, and a
  block marked `<!-- invalid -->` fails, with exactly the message of the
  ```text block right after it when that block shows one;
- every config.toml block (first line a comment naming config.toml) loads,
  or fails as shown when marked invalid;
- every `$ wfsched ...` line of a ```console block runs against a store with
  examples/ applied and exits 0, or with the status its `# exit N` comment
  states; an error line shown under it must be what the command printed. A
  block preceded by `<!-- not run ... -->` is left alone (it needs a running
  supervisor, a real editor or a particular run);
- the systemd unit has the settings docs/operations.md asks for and passes
  `systemd-analyze verify` where that tool exists;
- names the code defines (config keys, audit checks, fault points, bench
  scripts, occurrence states) appear where an operator would look for them,
  and relative links point at files and anchors that exist;
- the DST examples of docs/semantics.md (the table and the `wfsched next`
  output shown) are what `wfsched next --after` prints.
"""

from __future__ import annotations

import configparser
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from conftest import CliRun

from wfsched.cli.main import cli
from wfsched.domain.config import load_config
from wfsched.domain.definition import parse_definition
from wfsched.errors import DefinitionError

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
UNIT = DOCS / "systemd" / "wfsched.service"
DROP_IN = DOCS / "systemd" / "wfsched.service.d" / "postgresql.conf"
PAGES = ("operations", "definitions", "semantics", "runs", "recovery", "benchmarks", "architecture")
COMMAND_PAGES = ("operations.md", "runs.md", "definitions.md")
REQUIRED_RUN = {"validate", "apply", "list", "get", "next", "occurrences", "status"}
ERROR_PREFIX = "wfsched: error: "
SHELL_SYNTAX = {"|", ">", ">>", "<", "&&", "||", ";", "&"}


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    text: str
    marker: str | None
    """The HTML comment on the last non-blank line before the fence, if any."""
    following: Block | None = field(default=None, repr=False)

    @property
    def where(self) -> str:
        return f"docs/{self.page}:{self.line}"


def _parse_blocks(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[tuple[int, str, str, str | None]] = []
    index = 0
    while index < len(lines):
        opening = re.match(r"^```(\w*)\s*$", lines[index])
        if opening is None:
            index += 1
            continue
        marker = None
        for back in range(index - 1, -1, -1):
            if lines[back].strip():
                comment = re.fullmatch(r"\s*<!--\s*(.*?)\s*-->\s*", lines[back])
                marker = comment.group(1) if comment else None
                break
        end = index + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        found.append((index + 1, opening.group(1), "\n".join(lines[index + 1 : end]), marker))
        index = end + 1
    blocks: list[Block] = []
    for line, lang, text, marker in reversed(found):
        following = blocks[0] if blocks else None
        blocks.insert(0, Block(path.name, line, lang, text, marker, following))
    return blocks


def _doc_files() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def _all_blocks() -> list[Block]:
    return [block for path in _doc_files() for block in _parse_blocks(path)]


def _docs_text(*names: str) -> str:
    paths = [DOCS / name for name in names] if names else _doc_files()
    return "\n".join(path.read_text(encoding="utf-8") for path in paths)


def _is_definition(block: Block) -> bool:
    return block.lang == "toml" and re.search(r"(?m)^id\s*=", block.text) is not None


def _is_config(block: Block) -> bool:
    first = block.text.lstrip().splitlines()[0] if block.text.strip() else ""
    return block.lang == "toml" and first.startswith("#") and "config.toml" in first


def _shown_error(block: Block) -> str | None:
    """The message a ```text block right after `block` shows, if it shows one."""
    shown = block.following
    if shown is None or shown.lang != "text" or not shown.text.startswith(ERROR_PREFIX):
        return None
    return shown.text.strip()[len(ERROR_PREFIX) :]


def _invalid(block: Block) -> bool:
    return block.marker is not None and block.marker.startswith("invalid")


# ------------------------------------------------------------- the pages exist


@pytest.mark.parametrize("page", PAGES)
def test_page_exists(page: str) -> None:
    assert (DOCS / f"{page}.md").is_file(), f"docs/{page}.md is missing"


# ---------------------------------------------------------------- commands


def _commands(
    group: click.Group, prefix: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        path = (*prefix, name)
        yield path, command
        if isinstance(command, click.Group):
            yield from _commands(command, path)


COMMANDS = list(_commands(cli))


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_every_command_is_documented_and_has_help(
    path: tuple[str, ...], command: click.Command
) -> None:
    mention = "wfsched " + " ".join(path)
    text = _docs_text(*COMMAND_PAGES)
    assert re.search(re.escape(mention) + r"\b", text), (
        f"`{mention}` is not mentioned in docs/{', docs/'.join(COMMAND_PAGES)}"
    )
    assert (command.help or "").strip(), f"`{mention}` has no help text"
    result = CliRunner().invoke(cli, [*path, "--help"], prog_name="wfsched")
    assert result.exit_code == 0, result.output
    assert f"Usage: {mention}" in result.output


def test_every_option_is_documented() -> None:
    text = _docs_text()
    missing = set()
    for path, command in [((), cli), *COMMANDS]:
        for param in command.params:
            if not isinstance(param, click.Option):
                continue
            for name in param.opts:
                if name.startswith("--") and name != "--help" and name not in text:
                    missing.add(f"{' '.join(('wfsched', *path))} {name}")
    assert not missing, f"options never mentioned in docs/: {sorted(missing)}"


# ------------------------------------------------------- definition blocks

DEFINITIONS = [block for block in _all_blocks() if _is_definition(block)]


def test_definition_blocks_exist() -> None:
    assert len(DEFINITIONS) >= 10
    assert sum(_invalid(block) for block in DEFINITIONS) >= 5


@pytest.mark.parametrize("block", DEFINITIONS, ids=[block.where for block in DEFINITIONS])
def test_definition_block(block: Block) -> None:
    shown = _shown_error(block)
    source = shown.split(": ", 1)[0] if shown else "doc.toml"
    now = int(time.time())
    if not _invalid(block):
        assert shown is None, f"{block.where}: a valid block followed by an error message"
        parse_definition(block.text, source, now=now)
        return
    with pytest.raises(DefinitionError) as info:
        parse_definition(block.text, source, now=now)
    if shown is not None:
        assert str(info.value) == shown, f"{block.where}: the doc shows another message"


# ----------------------------------------------------------- config blocks

CONFIGS = [block for block in _all_blocks() if _is_config(block)]


def test_config_blocks_exist() -> None:
    assert CONFIGS, "no config.toml example in docs/"


@pytest.mark.parametrize("block", CONFIGS, ids=[block.where for block in CONFIGS])
def test_config_block(block: Block, tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(block.text + "\n", encoding="utf-8")
    if not _invalid(block):
        load_config(tmp_path, {})
        return
    with pytest.raises(DefinitionError) as info:
        load_config(tmp_path, {})
    shown = _shown_error(block)
    if shown is not None:
        # The doc names the store it documents; the test's store is elsewhere.
        expected = re.sub(r"^\S*/config\.toml", str(tmp_path / "config.toml"), shown)
        assert str(info.value) == expected, f"{block.where}: the doc shows another message"


# ---------------------------------------------------------- console blocks


@dataclass(frozen=True)
class Invocation:
    where: str
    args: list[str]
    expected: int
    errors: list[str]


def _invocations(page: str) -> list[Invocation]:
    found = []
    for block in _parse_blocks(DOCS / page):
        if block.lang != "console" or (block.marker or "").startswith("not run"):
            continue
        lines = block.text.splitlines()
        for number, line in enumerate(lines):
            if not line.startswith("$ wfsched"):
                continue
            command, _, comment = line[2:].partition(" #")
            status = re.search(r"\bexit (\d+)", comment)
            words = shlex.split(command)
            output = []
            for later in lines[number + 1 :]:
                if later.startswith("$ "):
                    break
                output.append(later)
            errors = [text[len(ERROR_PREFIX) :] for text in output if text.startswith(ERROR_PREFIX)]
            found.append(
                Invocation(
                    f"docs/{page}:{block.line + number + 1}",
                    words[1:],
                    int(status.group(1)) if status else 0,
                    errors,
                )
            )
    return found


def _without_store(args: list[str]) -> list[str]:
    """The test's store replaces the one a doc names."""
    args = list(args)
    if "--store" in args:
        at = args.index("--store")
        del args[at : at + 2]
    return args


def _prepared_args(invocation: Invocation) -> list[str]:
    args = _without_store(invocation.args)
    assert not SHELL_SYNTAX.intersection(args), (
        f"{invocation.where}: shell syntax in an executed console line; mark the block"
        " `<!-- not run -->` or drop the pipe/redirection"
    )
    expanded: list[str] = []
    for arg in args:
        matches = sorted(glob.glob(arg, root_dir=ROOT)) if any(c in arg for c in "*?[") else []
        expanded.extend(matches or [arg])
    return expanded


CONSOLE_PAGES = sorted(path.name for path in _doc_files() if _invocations(path.name))


def test_console_examples_cover_the_read_commands() -> None:
    ran = {
        _without_store(inv.args)[0]
        for page in CONSOLE_PAGES
        for inv in _invocations(page)
        if _without_store(inv.args)
    }
    assert ran >= REQUIRED_RUN, f"no executed console example for {sorted(REQUIRED_RUN - ran)}"


@pytest.mark.parametrize("page", CONSOLE_PAGES)
def test_console_examples_run(page: str, run_cli: CliRun, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    code, out, err = run_cli("apply", "examples")
    assert code == 0, err
    for invocation in _invocations(page):
        args = _prepared_args(invocation)
        code, out, err = run_cli(*args)
        assert code == invocation.expected, (
            f"{invocation.where}: `wfsched {' '.join(invocation.args)}` exited {code},"
            f" the doc says {invocation.expected}\nstdout: {out}\nstderr: {err}"
        )
        for shown in invocation.errors:
            assert ERROR_PREFIX + shown in err, f"{invocation.where}: stderr was {err!r}"


# ------------------------------------------------------------------ systemd


def _unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(UNIT.read_text(encoding="utf-8"))
    return parser


def _timespan_seconds(text: str) -> float:
    """systemd time spans as this unit writes them: `90`, `90s`, `2min`, `1min 30s`."""
    units = {"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hr": 3600}
    total = 0.0
    for number, unit in re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", text.strip()):
        assert unit in units, f"unexpected time unit {unit!r} in {text!r}"
        total += float(number) * units[unit]
    return total


def test_unit_has_the_settings_the_design_asks_for() -> None:
    service = _unit()["Service"]
    assert service["Type"] == "notify"
    assert service["KillMode"] in ("mixed", "process")
    assert _timespan_seconds(service["TimeoutStopSec"]) >= 40
    assert service["Restart"] == "on-failure"
    assert service["StateDirectory"] == "wfsched"
    argv = shlex.split(service["ExecStart"])
    assert "supervise" in argv
    assert argv[argv.index("--store") + 1] == "/var/lib/wfsched"
    assert "--apply" in argv[argv.index("supervise") :]
    assert "ProtectSystem" not in service or service["ProtectSystem"] != "strict"
    assert "WantedBy" in _unit()["Install"]


def _unit_lines(path: Path) -> list[str]:
    return [line for line in path.read_text(encoding="utf-8").splitlines()]


def test_the_unit_family_agrees_with_operations_md() -> None:
    """One unit family: the PostgreSQL drop-in inherits every setting that
    operations.md explains, and those settings are the ones it recommends."""
    from wfsched.domain.config import SupervisorConfig
    from wfsched.domain.definition import parse_definition

    service = _unit()["Service"]
    operations = _docs_text("operations.md")
    assert service["KillMode"] == "process"
    assert "Recommendation: `KillMode=process`, as shipped" in operations
    defaults = parse_definition(
        'id = "x"\n[trigger]\ncron = "* * * * *"\n[run]\ncommand = ["true"]\n', "x.toml"
    )
    floor = SupervisorConfig().drain_grace + defaults.run.kill_grace + 5
    stop = _timespan_seconds(service["TimeoutStopSec"])
    assert stop >= floor
    assert f"`TimeoutStopSec={service['TimeoutStopSec']}`" in operations
    assert service["RestartPreventExitStatus"].split() == ["2", "4"]
    lines = _unit_lines(UNIT)
    at = next(i for i, line in enumerate(lines) if line.startswith("RestartPreventExitStatus="))
    comment = " ".join(line for line in lines[at - 8 : at] if line.startswith("#"))
    assert "Exit 2" in comment and "Exit 4" in comment, comment
    assert service["StateDirectory"] == "wfsched"
    drop_in = configparser.ConfigParser(strict=False, interpolation=None)
    drop_in.optionxform = str  # type: ignore[assignment,method-assign]
    drop_in.read_string(DROP_IN.read_text(encoding="utf-8"))
    overrides = set(drop_in["Service"])
    assert overrides == {"EnvironmentFile", "ExecStart", "RestartSec"}, overrides
    # What high-availability.md shows is the shipped drop-in, line for line.
    settings = [line for line in _unit_lines(DROP_IN) if line and not line.startswith("#")]
    assert "```ini\n" + "\n".join(settings) + "\n```" in _docs_text("high-availability.md")


def test_the_readme_installs_what_the_unit_runs() -> None:
    """The README's service section creates the binary the unit's ExecStart
    runs and the folder its --apply reads, from files that exist."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Run it as a service", 1)[1].split("\n## ", 1)[0]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [shlex.split(line.split("  #", 1)[0]) for line in block.splitlines()]
    argv = shlex.split(_unit()["Service"]["ExecStart"])
    assert ["ln", "-s", "/opt/wfsched/bin/wfsched", argv[0]] in commands
    assert ["python3", "-m", "venv", "/opt/wfsched"] in commands
    folder = argv[argv.index("--apply") + 1]
    assert ["mkdir", "-p", folder] in commands
    copies = [command for command in commands if command[:1] == ["cp"]]
    for command in copies:
        assert (ROOT / command[1]).exists(), command
    assert ["cp", "docs/systemd/wfsched.service", "/etc/systemd/system/"] in copies
    assert "systemctl daemon-reload && systemctl enable --now wfsched" in block
    store = argv[argv.index("--store") + 1]
    assert ["wfsched", "--store", store, "status", "--check"] in commands


def test_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed")
    script = Path(sys.executable).with_name("wfsched")
    installed = str(script) if script.exists() else shutil.which("wfsched")
    if installed is None:
        pytest.skip("the wfsched console script is not installed")
    # verify insists that ExecStart's binary exists: point it at this one.
    text = UNIT.read_text(encoding="utf-8").replace("/usr/local/bin/wfsched", installed)
    unit = tmp_path / "wfsched.service"
    unit.write_text(text, encoding="utf-8")
    # With the PostgreSQL drop-in beside it, as installed.
    drop_in = tmp_path / "wfsched.service.d"
    drop_in.mkdir()
    (drop_in / "postgresql.conf").write_text(
        DROP_IN.read_text(encoding="utf-8").replace("/usr/local/bin/wfsched", installed),
        encoding="utf-8",
    )
    result = subprocess.run(
        [tool, "verify", str(unit)],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "SYSTEMD_LOG_LEVEL": "warning"},
    )
    if result.returncode != 0 and re.search(
        r"Failed to (initialize|allocate) manager", result.stderr
    ):
        pytest.skip(f"systemd-analyze cannot run here: {result.stderr.strip()}")
    assert result.returncode == 0, result.stderr
    assert "wfsched.service" not in result.stderr, result.stderr


# ----------------------------------------------------- names from the code


def _logged_events() -> set[str]:
    """Every event name the code logs: the literal first argument of each
    `log(...)`/`_note(...)` call, the ledger states a tick logs by name
    (`Entry(...)`, `span_entry(..., state, ...)` in the decisions the
    supervisor writes; administration's rows are not logged), and the run outcomes
    logged by their state."""
    import ast

    names = {"completed", "interrupted", "failed"}
    for path in (ROOT / "wfsched").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            position = {"log": 0, "_note": 0}.get(called)
            if path.name == "decisions.py":  # the rows a tick writes, and logs
                position = {"Entry": 0, "span_entry": 1}.get(called)
            if position is None or len(node.args) <= position:
                continue
            arg = node.args[position]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                names.add(arg.value)
    return names


def test_every_logged_event_is_in_the_event_table() -> None:
    text = _docs_text("operations.md")
    table = text.split("| event | fields | when |", 1)[1].split("\n\n", 1)[0]
    documented = {
        name
        for row in table.splitlines()[2:]
        for name in re.findall(r"`([a-z-]+)`", row.split("|")[1])
    }
    missing = sorted(_logged_events() - documented)
    assert not missing, f"events logged but missing from operations.md's event table: {missing}"
    assert {"ready", "leading", "standby", "late-exit", "apply-summary", "passed-over"} <= (
        documented
    )


def test_config_keys_are_documented() -> None:
    from wfsched.domain.config import _KEYS

    text = _docs_text("operations.md")
    missing = [key for key in _KEYS if f"`{key}`" not in text]
    assert not missing, f"config.toml keys missing from docs/operations.md: {missing}"


def test_audit_checks_are_documented() -> None:
    from wfsched.api.audit_checks import CHECKS

    text = _docs_text("operations.md")
    missing = [check for check in CHECKS if f"`{check}`" not in text]
    assert not missing, f"audit checks missing from docs/operations.md: {missing}"


def test_fault_points_are_documented() -> None:
    from wfsched.faults import POINTS

    text = _docs_text("recovery.md")
    missing = [point for point in POINTS if f"`{point}`" not in text]
    assert not missing, f"crash points missing from docs/recovery.md: {missing}"


def test_tick_phases_are_documented() -> None:
    from wfsched.domain.tickerrors import PHASES

    text = _docs_text("operations.md")
    missing = [phase for phase in PHASES if f"| `{phase}` |" not in text]
    assert not missing, f"tick phases missing from docs/operations.md: {missing}"


def test_bench_scripts_are_documented() -> None:
    text = _docs_text("benchmarks.md")
    scripts = sorted(path.name for path in (ROOT / "bench").glob("bench_*.py"))
    missing = [name for name in scripts if f"bench/{name}" not in text]
    assert not missing, f"benchmarks missing from docs/benchmarks.md: {missing}"


def test_occurrence_states_are_documented() -> None:
    states = (
        "pending",
        "superseded",
        "skipped-overlap",
        "skipped-misfire",
        "skipped-paused",
        "preflight-rejected",
        "admitted",
        "running",
        "interrupted",
        "completed",
        "failed",
        "exhausted",
        "pruned",
    )
    text = _docs_text("semantics.md")
    missing = [state for state in states if f"`{state}`" not in text]
    assert not missing, f"occurrence states missing from docs/semantics.md: {missing}"


def test_definition_keys_are_documented() -> None:
    from wfsched.domain import definition

    text = _docs_text("definitions.md")
    keys = [
        *definition._TOP_KEYS,
        *(f"trigger.{key}" for key in definition._TRIGGER_KEYS),
        *(f"run.{key}" for key in definition._RUN_KEYS),
        *(f"policy.{key}" for key in definition._POLICY_KEYS),
        *(f"notify.{key}" for key in definition._NOTIFY_KEYS),
    ]
    spellings = ("`{}`", "`[{}]`", "`[[{}]]`")
    missing = [key for key in keys if not any(s.format(key) in text for s in spellings)]
    assert not missing, f"definition keys missing from docs/definitions.md: {missing}"


def _anchors(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    anchors = set(re.findall(r'<a id="([^"]+)"', text))
    for heading in re.findall(r"(?m)^#{1,6}\s+(.*?)\s*$", text):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


def test_relative_links_resolve() -> None:
    broken = []
    for path in _doc_files():
        text = re.sub(r"(?ms)^```.*?^```", "", path.read_text(encoding="utf-8"))
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            linked = (path.parent / file).resolve() if file else path
            if not linked.exists():
                broken.append(f"{path.name}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{path.name}: {target} (no such anchor)")
    assert not broken, broken


# ------------------------------------------------------------ DST examples

_DST_ROW = re.compile(r"\| `([^`]+)` \| `([^`]+)` \| `([^`]+)` \| (.+) \|$")
_DST_ITEM = re.compile(r"`(\S+Z)` = (\d\d:\d\d [+-]\d\d:\d\d)(?: `(dst-[a-z-]+)`)?")


def _dst_section() -> str:
    text = (DOCS / "semantics.md").read_text(encoding="utf-8")
    return text[text.index("## DST") : text.index("## The history")]


def _dst_rows() -> list[tuple[str, str, str, list[tuple[str, str, str | None]]]]:
    rows = []
    for line in _dst_section().splitlines():
        match = _DST_ROW.fullmatch(line)
        if match is None:
            continue
        expr, zone, after, cell = match.groups()
        items = []
        for part in cell.split("; "):
            item = _DST_ITEM.fullmatch(part)
            assert item is not None, f"docs/semantics.md: cannot read {part!r} in {line!r}"
            items.append((item.group(1), item.group(2), item.group(3)))
        rows.append((expr, zone, after, items))
    return rows


DST_ROWS = _dst_rows()


def test_dst_examples_cover_both_rules() -> None:
    notes = {note for *_, items in DST_ROWS for _, _, note in items}
    assert len(DST_ROWS) >= 10 and notes == {None, "dst-gap-shifted", "dst-fold-repeat"}


@pytest.mark.parametrize(
    ("expr", "zone", "after", "items"), DST_ROWS, ids=[f"{r[0]} {r[1]}" for r in DST_ROWS]
)
def test_dst_example_is_what_next_shows(
    expr: str,
    zone: str,
    after: str,
    items: list[tuple[str, str, str | None]],
    run_cli: CliRun,
) -> None:
    text = (
        f'id = "dst"\n[trigger]\ncron = "{expr}"\ntimezone = "{zone}"\n[run]\ncommand = ["true"]\n'
    )
    code, _, err = run_cli("create", "-", input=text)
    assert code == 0, err
    code, out, err = run_cli("next", "dst", "--after", after, "--count", str(len(items)), "--json")
    assert code == 0, err
    shown = [
        (item["scheduled_at"], " ".join(item["local"].split()[1:3]), item["note"])
        for item in json.loads(out)["items"]
    ]
    assert shown == items, f"docs/semantics.md: `{expr}` in {zone} after {after}"


def test_dst_notes_in_words_are_what_the_table_view_prints() -> None:
    from wfsched.cli.schedules import _NOTES

    section = " ".join(_dst_section().split())
    for note, words in _NOTES.items():
        assert f'`{note}` as "{words}"' in section, f"docs/semantics.md: {note}"


def test_dst_console_example_output_is_true(
    run_cli: CliRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    section = _dst_section()
    (block,) = [
        b
        for b in _parse_blocks(DOCS / "semantics.md")
        if b.lang == "console" and b.text.strip() in section
    ]
    command, *expected = block.text.splitlines()
    monkeypatch.chdir(ROOT)
    code, _, err = run_cli("apply", "examples")
    assert code == 0, err
    code, out, err = run_cli(*shlex.split(command)[2:])
    assert code == 0, err
    printed = [line.rstrip() for line in out.splitlines() if not set(line.strip()) <= {"─"}]
    assert printed == [line.rstrip() for line in expected]


# The lead owns benchmarks.md (it cites a design note; to be reworded there).
SELF_CONTAINED_EXEMPT = ("benchmarks.md",)


def test_docs_never_send_the_reader_outside_the_repository() -> None:
    """The docs say each rule where it is used: no DESIGN.md, no `../shared`."""
    pages = [path for path in _doc_files() if path.name not in SELF_CONTAINED_EXEMPT]
    pages.append(ROOT / "README.md")
    outside = []
    for path in pages:
        text = path.read_text(encoding="utf-8")
        for number, line in enumerate(text.splitlines(), 1):
            if re.search(r"DESIGN(\.md)?\b|\.\./shared|/work/", line):
                outside.append(f"{path.name}:{number}: {line.strip()}")
        for target in re.findall(r"\]\(([^)\s#]+)", text):
            if re.match(r"[a-z]+:", target):
                continue
            linked = (path.parent / target).resolve()
            if not linked.is_relative_to(ROOT):
                outside.append(f"{path.name}: link to {target}")
    assert not outside, outside


def test_docs_say_local_is_the_schedules_zone() -> None:
    text = " ".join(_docs_text("operations.md").split())
    assert '"Local" in every listing and view' in text
    assert "is the schedule's own zone" in text


def test_monitoring_section_names_what_to_alert_on() -> None:
    """Both sources: every `status --json` field the section names exists,
    and every alert rule and metric it names is one monitoring.md ships."""
    text = _docs_text("operations.md")
    section = text.split("## Monitoring", 1)[1].split("\n## ", 1)[0]
    from wfsched.api.status import status_without_store

    shape = status_without_store(str(ROOT), kind="postgresql")
    for name in ("running", "stale", "fault"):
        assert name in shape["supervisor"] and f".supervisor.{name}" in section, name
    for name in ("blocked", "preflight_rejected", "errors", "interrupted", "launcher"):
        assert name in shape and f".{name}" in section, name
    for name in ("leader", "hosts", "warnings"):  # the PostgreSQL store's
        assert name in shape and f".{name}" in section, name
    for name in ("total", "last", "by_phase", "fault_episodes"):
        assert name in shape["errors"] and f".errors.{name}" in section, name
    from wfsched.api.status import _launcher

    launcher = _launcher({"launcher_state": "down", "launcher_since": None, "launcher_error": "x"})
    assert launcher is not None
    assert "state" in launcher and ".launcher.state" in section
    assert "last_error" in launcher and ".launcher.last_error" in section
    assert "wfsched audit" in section and "exit" in section
    rules = _docs_text("monitoring.md")
    named_rules = set(re.findall(r"`(Wfsched[A-Za-z]+)`", section))
    shipped = set(re.findall(r"- alert: (Wfsched[A-Za-z]+)", rules))
    assert named_rules and named_rules <= shipped, named_rules - shipped
    assert shipped <= named_rules, f"alert rules the section does not map: {shipped - named_rules}"
    for metric in set(re.findall(r"`(wfsched_[a-z_]+)", section)):
        assert f"| `{metric}` |" in rules, metric


def test_the_architecture_map_names_every_module() -> None:
    """Each package's section of the module map names every module of that
    package and no module it does not have (a map of a tree that moved on)."""
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    module_map = text.split("## Module map", 1)[1].split("\n## ", 1)[0]
    parts = re.split(r"\*\*(The root|\w+/)\*\*", module_map)
    sections = dict(zip(parts[1::2], parts[2::2], strict=True))
    package = ROOT / "wfsched"
    missing, stale = [], []
    for heading, body in sections.items():
        directory = package if heading == "The root" else package / heading.rstrip("/")
        present = {path.name for path in directory.glob("*.py")}
        named = set(re.findall(r"`([\w]+\.py)`", body))
        stale += [f"{heading}: {name}" for name in sorted(named - present)]
        required = present - ({"__init__.py"} if heading != "cli/" else set())
        missing += [f"{heading}: {name}" for name in sorted(required - named)]
    packages = {path.parent.name + "/" for path in package.glob("*/__init__.py")}
    missing += sorted(packages - set(sections))
    assert not missing, f"docs/architecture.md does not name: {missing}"
    assert not stale, f"docs/architecture.md names modules that do not exist: {stale}"


def test_every_test_the_architecture_page_cites_exists() -> None:
    """Each rule's "enforced by" names a test that is really there."""
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    cited = re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?`", text)
    assert cited, "the page cites no test"
    missing = []
    for path, name in cited:
        source = ROOT / path
        if not source.exists() or (name and f"def {name}(" not in source.read_text()):
            missing.append(f"{path}::{name}" if name else path)
    assert not missing, missing


def test_run_json_fields_are_documented(tmp_path: Path) -> None:
    """Every field of a run's JSON (`runs show --json`, `runs --json`) is named in
    the JSON table of docs/operations.md."""
    from tests.test_supervisor_loop import T0, Harness

    h = Harness(tmp_path / "s")
    h.define("a", cron="0 * * * *")
    h.tick_at(T0)
    view = h.runs.show("run-000001")
    row = next(
        line
        for line in (DOCS / "operations.md").read_text().splitlines()
        if line.startswith("| run (")
    )
    missing = [key for key in (*view, *view["attempts"][0]) if f"`{key}`" not in row]
    assert not missing, f"run JSON fields missing from docs/operations.md: {missing}"
