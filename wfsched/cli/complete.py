"""Shell completion of schedule ids and run ids, read from the store.

Completion runs on every Tab press: it opens the store only if it exists,
never creates one, and is silent on any failure (a broken completion must
not print a traceback into the operator's prompt).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from wfsched.cli import CliState

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

    from wfsched.store import Store

RUN_CANDIDATES = 1000
"""Newest runs offered; older ones are still accepted when typed in full."""


def _from_store(ctx: click.Context, read: Callable[[Store], list[str]]) -> list[str]:
    state = CliState(store_option=ctx.find_root().params.get("store"))
    try:
        store = state.store(create=False)
        if store is None:
            return []
        try:
            return read(store)
        finally:
            store.close()
    except Exception:
        return []


def schedule_ids(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    from click.shell_completion import CompletionItem

    ids = _from_store(
        ctx, lambda store: [row.id for row in store.list_schedules(include_deleted=True)]
    )
    return [CompletionItem(value) for value in ids if value.startswith(incomplete)]


def run_ids(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    from click.shell_completion import CompletionItem

    ids = _from_store(
        ctx, lambda store: [row.run_id for row in store.list_runs(limit=RUN_CANDIDATES)]
    )
    return [CompletionItem(value) for value in ids if value.startswith(incomplete)]


def schedule_argument() -> Any:
    return click.argument("schedule_id", metavar="ID", shell_complete=schedule_ids)


def run_argument() -> Any:
    return click.argument("run", metavar="RUN", shell_complete=run_ids)
