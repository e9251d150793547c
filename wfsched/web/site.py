"""The view assembled: the application with its page table (kept apart so
the application does not import the pages that use it)."""

from __future__ import annotations

from wfsched.web.app import Handler, WebApp, WebConfig
from wfsched.web.pages import ROUTES, Pages, template_globals


def make_app(config: WebConfig) -> WebApp:
    def routes(app: WebApp) -> list[tuple[str, Handler]]:
        pages = Pages(app)
        return [(pattern, getattr(pages, name)) for pattern, name in ROUTES]

    return WebApp(config, routes, template_globals())
