"""The layers of the package and what each may import (docs/architecture.md).

Every import counts: module level, inside functions and under TYPE_CHECKING.
A new module joins a layer by living in its package.
"""

from __future__ import annotations

from test_imports import import_graph

ALLOWED = {
    "base": set(),
    "domain": {"base"},
    "store": {"base"},
    "process": {"base"},
    "api": {"base", "domain", "store"},
    "daemon": {"base", "domain", "store", "process", "api"},
    "cli": {"base", "domain", "store", "api", "daemon"},
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
