"""Import rules: no cycles between modules, and the cheap paths stay cheap.

- The package's import graph has no cycle, counting every import: module
  level, inside functions and under `TYPE_CHECKING` (a cycle hidden there is
  still two modules that each need the other).
- The read path (`list`, `get`, `occurrences`, `runs`, `status`) never
  imports croniter (nor the supervisor or the launcher): it is a whole
  process per command, and croniter (with dateutil behind it) is most of a
  cold start.
- `config` and `status` import without the supervisor.
- The run keeper imports only the process modules and errors: that rule's test is
  `tests/test_launcher.py::test_the_keeper_imports_nothing_heavy`.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import CliRun

PACKAGE = Path(__file__).resolve().parent.parent / "wfsched"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """module -> the wfsched modules it imports, wherever the import stands."""
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                targets = [base]
                # `from wfsched import launcher` imports the submodule itself.
                targets += [f"{base}.{alias.name}" for alias in node.names]
            for target in targets:
                if target in modules and target != name:
                    graph[name].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for following in sorted(graph[node]):
            if state.get(following) == 1:
                return [*path[path.index(following) :], following]
            if following not in state:
                found = visit(following)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_package_has_no_import_cycle() -> None:
    graph = import_graph()
    assert "wfsched.daemon.supervisor" in graph["wfsched.cli.supervise"], (
        "the graph sees lazy imports"
    )
    assert "wfsched.domain.calendar" in graph["wfsched.api.admin"], (
        "the graph sees TYPE_CHECKING imports"
    )
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_daemon_imports_neither_the_operator_api_nor_a_process_adapter() -> None:
    """The supervisor shares the definition cache and the ledger writer with
    the operator API (both in views) instead of importing `Admin`; process
    control is the launcher's own protocol."""
    graph = import_graph()
    assert "wfsched.api.admin" not in graph["wfsched.daemon.supervisor"]
    assert "wfsched.process.launcher" in graph["wfsched.daemon.supervisor"]


def test_the_cycle_finder_finds_a_cycle_behind_type_checking() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def run_python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.slow
def test_the_read_path_never_imports_croniter(
    run_cli: CliRun, store_path: Path, tmp_path: Path
) -> None:
    definition = tmp_path / "job.toml"
    definition.write_text(
        'id = "job"\n[trigger]\ncron = "*/5 * * * *"\n[run]\ncommand = ["true"]\n'
    )
    assert run_cli("create", str(definition))[0] == 0
    assert run_cli("trigger", "job")[0] == 0
    result = run_python(
        """
        import sys
        from wfsched.cli.main import cli

        commands = [["list"], ["list", "--json"], ["get", "job"], ["get", "job", "--json"],
                    ["occurrences", "job"], ["occurrences", "job", "--json"], ["runs"],
                    ["runs", "--json"], ["status"], ["status", "--json"]]
        for command in commands:
            code = cli.main(["--store", sys.argv[1], *command], standalone_mode=False)
            assert code == 0, (command, code)
            heavy = ("croniter", "wfsched.daemon.supervisor", "wfsched.process.launcher")
            loaded = [name for name in heavy if name in sys.modules]
            if loaded:
                sys.exit(f"{' '.join(command)} imported {loaded}")
        """,
        str(store_path),
    )
    assert result.returncode == 0, result.stderr


def test_the_program_freezes_its_objects_before_the_interpreter_exits(tmp_path: Path) -> None:
    """The interpreter's exit collects garbage over every object the imports
    built (about 15 ms with psycopg loaded): the program freezes them first,
    after its command, and the command's output and exit status are intact."""
    result = run_python(
        """
        import atexit, gc, sys
        atexit.register(lambda: print("frozen", gc.get_freeze_count(), file=sys.stderr))
        sys.argv = ["wfsched", "--store", sys.argv[1], "list", "--json"]
        from wfsched.entry import main
        main()
        """,
        str(tmp_path / "absent-store"),
    )
    assert result.returncode == 0, result.stderr
    assert '"items": []' in result.stdout
    frozen = int(result.stderr.split("frozen ")[-1])
    assert frozen > 1000, result.stderr


def test_config_and_status_import_without_the_supervisor(tmp_path: Path) -> None:
    result = run_python(
        """
        import sys
        from pathlib import Path
        import wfsched.domain.config, wfsched.api.status
        # Validating a listen address must not pull in the metrics server.
        config = wfsched.domain.config.load_config(Path(sys.argv[1]), {"metrics_listen": "9464"})
        assert config.metrics_listen == "127.0.0.1:9464", config
        heavy = (
            "wfsched.daemon.supervisor",
            "wfsched.daemon.metrics_server",
            "wfsched.domain.calendar",
            "croniter",
        )
        loaded = sorted(m for m in heavy if m in sys.modules)
        sys.exit(f"loaded {loaded}" if loaded else 0)
        """,
        str(tmp_path),
    )
    assert result.returncode == 0, result.stderr + result.stdout


def test_supervise_imports_no_other_commands_module() -> None:
    """The daemon runs for months: the other commands' modules (about 2 MB
    resident) are imported only when one of their commands is asked for."""
    result = run_python(
        """
        import sys
        import click
        from wfsched.cli.main import cli

        assert cli.get_command(click.Context(cli), "supervise").name == "supervise"
        loaded = sorted(m for m in sys.modules if m.startswith("wfsched.cli."))
        expected = ["wfsched.cli.interrupts", "wfsched.cli.main", "wfsched.cli.output",
                    "wfsched.cli.params", "wfsched.cli.supervise"]
        sys.exit(0 if loaded == expected else f"loaded {loaded}")
        """
    )
    assert result.returncode == 0, result.stderr + result.stdout


def test_every_command_is_in_the_registration_table() -> None:
    """COMMAND_MODULES names each module's commands: a command a module
    registers but the table omits would be unreachable until listed."""
    import importlib

    import click

    from wfsched.cli.main import COMMAND_MODULES

    for module, names in COMMAND_MODULES.items():
        group = click.Group()
        importlib.import_module(module).register(group)
        assert tuple(group.commands) == names, module


def test_the_supervisor_loads_neither_openssl_nor_a_lock_library() -> None:
    """OpenSSL's libcrypto (through hashlib) would be about 3.4 MB of the
    daemon's resident memory, the lock library's imports about 1 MB more."""
    result = run_python(
        """
        import sys
        from pathlib import Path
        import wfsched.daemon.supervisor, wfsched.store.ownership
        from wfsched.store.runtime_file import fault_path

        assert fault_path(Path("/srv/store")).name == "fault-c405508f53fa7389.json"
        loaded = sorted(m for m in ("_hashlib", "hashlib", "filelock") if m in sys.modules)
        sys.exit(f"loaded {loaded}" if loaded else 0)
        """
    )
    assert result.returncode == 0, result.stderr + result.stdout
