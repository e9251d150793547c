"""The layers of the package and what each may import (docs/architecture.md).

Every import counts: module level, inside functions and under TYPE_CHECKING.
A new module joins a layer by living in its package.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from test_imports import PACKAGE, import_graph, module_name

ALLOWED = {
    "base": set(),
    "domain": {"base"},
    "store": {"base"},
    "process": {"base"},
    "api": {"base", "domain", "store"},
    "daemon": {"base", "domain", "store", "process", "api"},
    "web": {"base", "domain", "store", "api"},
    "cli": {"base", "domain", "store", "api", "daemon", "web"},
}
"""layer -> the other layers it may import (its own is always allowed)."""

AT_THE_ROOT = {
    "wfsched": "cli",  # the package itself (`__version__`)
    "wfsched.__main__": "cli",  # `python -m wfsched`
    "wfsched.entry": "cli",  # the console script
    "wfsched.errors": "base",  # every layer raises these
    "wfsched.faults": "base",  # crash-test kill points: the daemon's and the run keeper's
}


def layer(module: str) -> str:
    return AT_THE_ROOT.get(module) or module.split(".")[1]


def test_every_module_belongs_to_a_layer() -> None:
    assert {layer(module) for module in import_graph()} <= set(ALLOWED)


def test_each_layer_imports_only_the_layers_below_it() -> None:
    wrong = sorted(
        f"{module} -> {target}"
        for module, targets in import_graph().items()
        for target in targets
        if target != "wfsched"  # `from wfsched import __version__`
        and layer(target) != layer(module)
        and layer(target) not in ALLOWED[layer(module)]
    )
    assert wrong == []


def test_the_log_cut_mark_is_the_same_on_both_sides_of_the_layer_line() -> None:
    from wfsched.process import launcher
    from wfsched.store import rundirs

    assert rundirs.LOG_TRUNCATED == launcher.LOG_TRUNCATED


def external_imports() -> dict[str, set[str]]:
    """module -> the top-level names of what it imports from outside wfsched,
    wherever the import stands (module level, functions, TYPE_CHECKING)."""
    found: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names.add(node.module.split(".")[0])
        found[module_name(path)] = names - {"wfsched", "__future__"}
    return found


def test_no_database_driver_outside_the_store() -> None:
    """Everything outside wfsched/store reaches persistence through the
    `Store` interface: no driver module, not even for its exception types."""
    drivers = {"sqlite3", "psycopg", "psycopg_pool", "psycopg2"}
    leaks = sorted(
        f"{module} imports {name}"
        for module, names in external_imports().items()
        if layer(module) != "store"
        for name in names & drivers
    )
    assert leaks == []


SQL = re.compile(
    r"\b(SELECT\s.+\sFROM|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|CREATE\s+(TABLE|INDEX)"
    r"|BEGIN\s+(IMMEDIATE|TRANSACTION)|PRAGMA\s+\w+|SAVEPOINT\s+\w+)\b",
    re.IGNORECASE | re.DOTALL,
)


def test_no_sql_outside_the_store() -> None:
    found = sorted(
        f"{path.relative_to(PACKAGE)}:{node.lineno}"
        for path in PACKAGE.rglob("*.py")
        if layer(module_name(path)) != "store"
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and SQL.search(node.value)
        and not _is_docstring(node, path)
    )
    assert found == []


def _is_docstring(node: ast.Constant, path: Path) -> bool:
    """Docstrings may name a statement (`BEGIN IMMEDIATE`) to explain a rule."""
    for parent in ast.walk(ast.parse(path.read_text(), str(path))):
        body = getattr(parent, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and value.lineno == node.lineno:
                return True
    return False


def test_process_handling_imports_only_the_standard_library() -> None:
    """The run keeper lives as long as runs do, on every host: no third-party
    module (nor the store's drivers) in process/."""
    wrong = sorted(
        f"{module} imports {name}"
        for module, names in external_imports().items()
        if layer(module) == "process"
        for name in names
        if name not in sys.stdlib_module_names
    )
    assert wrong == []


def test_files_in_different_layers_never_share_a_name() -> None:
    """A name says which file it is: only a CLI module named after its command
    may share its name with a module of another layer."""
    from wfsched.cli.main import COMMAND_MODULES

    commands = {name for names in COMMAND_MODULES.values() for name in names}
    by_name: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name != "__init__.py":
            by_name.setdefault(path.stem, []).append(module_name(path))
    shared = {
        name: modules
        for name, modules in by_name.items()
        if len([m for m in modules if not (layer(m) == "cli" and name in commands)]) > 1
    }
    assert shared == {}
