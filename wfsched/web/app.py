"""The WSGI application: a table of GET routes, basic auth, static files.

Read-only by construction: a method other than GET or HEAD is answered 405
before anything else happens, the routes only call reading API methods,
and the store is opened read-only (the database refuses writes). Each
server thread opens its own store connection on its first request
(SQLite connections are not shared between threads).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, quote

from jinja2 import Environment, PackageLoader, select_autoescape

from wfsched.errors import NotFoundError, UsageError, WfschedError
from wfsched.store import Store
from wfsched.web.auth import Credential, basic_credentials

StartResponse = Callable[..., Any]
Handler = Callable[["Request"], "Response"]

READ_METHODS = ("GET", "HEAD")
SECURITY_HEADERS = [
    # Everything the page loads comes from this process; no inline script or style.
    (
        "Content-Security-Policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self';"
        " connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-store"),
]
STATIC_TYPES = {
    ".js": "text/javascript",
    ".css": "text/css",
    ".txt": "text/plain",
    ".svg": "image/svg+xml",
}
VERIFIED_KEEP = 32
"""Authorization headers remembered as verified (keyed digests), so a page's
refresh every few seconds does not pay for an scrypt hash each time."""


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    match: tuple[str, ...] = ()

    def arg(self, name: str) -> str | None:
        """A query parameter, None when absent or blank."""
        values = self.query.get(name)
        value = values[-1].strip() if values else ""
        return value or None

    def int_arg(self, name: str, default: int) -> int:
        value = self.arg(name)
        if value is None:
            return default
        try:
            return int(value)
        except ValueError:
            raise UsageError(f"{name}: not a whole number: {value!r}") from None

    @property
    def url(self) -> str:
        query = "&".join(
            f"{quote(key)}={quote(value)}" for key, values in self.query.items() for value in values
        )
        return quote(self.path) + (f"?{query}" if query else "")


@dataclass
class Response:
    body: bytes
    status: str = "200 OK"
    content_type: str = "text/html; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class WebConfig:
    open_store: Callable[[], Store]
    """A new read-only connection to the store (one per server thread)."""
    credential: Credential | None = None
    show_env: bool = False
    host: str | None = None
    """This host's name: runs executed here have their full logs here."""
    refresh_seconds: int = 5


class WebApp:
    """The application over the routes `routes(app)` returns: (path pattern,
    handler) pairs (`wfsched.web.site.make_app` gives it the page table)."""

    def __init__(
        self,
        config: WebConfig,
        routes: Callable[[WebApp], list[tuple[str, Handler]]],
        template_globals: dict[str, Any],
    ) -> None:
        self.config = config
        self.templates = Environment(
            loader=PackageLoader("wfsched.web", "templates"),
            autoescape=select_autoescape(["html", "svg"], default=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self._local = threading.local()
        self._opened: list[Store] = []
        self._lock = threading.Lock()
        self._verified: dict[bytes, None] = {}
        self._key = os.urandom(32)
        self.templates.globals.update(template_globals)
        self.routes: list[tuple[re.Pattern[str], Handler]] = [
            (re.compile(f"^{pattern}$"), handler) for pattern, handler in routes(self)
        ]

    def store(self) -> Store:
        store: Store | None = getattr(self._local, "store", None)
        if store is None:
            store = self.config.open_store()
            self._local.store = store
            with self._lock:
                self._opened.append(store)
        return store

    def close(self) -> None:
        with self._lock:
            opened, self._opened = self._opened, []
        for store in opened:
            store.close()

    def render(self, name: str, status: str = "200 OK", **context: Any) -> Response:
        body = self.templates.get_template(name).render(**context)
        content_type = "image/svg+xml" if name.endswith(".svg") else "text/html; charset=utf-8"
        return Response(body.encode("utf-8"), status, content_type)

    # -- WSGI ------------------------------------------------------------------------

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        method = str(environ.get("REQUEST_METHOD", "GET")).upper()
        response = self._respond(method, environ)
        headers = [
            ("Content-Type", response.content_type),
            ("Content-Length", str(len(response.body))),
            *SECURITY_HEADERS,
            *response.headers,
        ]
        start_response(response.status, headers)
        return [b""] if method == "HEAD" else [response.body]

    def _respond(self, method: str, environ: dict[str, Any]) -> Response:
        if method not in READ_METHODS:
            return Response(
                b"405 method not allowed: this view is read-only (GET and HEAD only)\n",
                "405 Method Not Allowed",
                "text/plain; charset=utf-8",
                [("Allow", "GET, HEAD")],
            )
        if not self._authorized(environ.get("HTTP_AUTHORIZATION")):
            return Response(
                b"401 unauthorized: this view needs the user and password of its password file\n",
                "401 Unauthorized",
                "text/plain; charset=utf-8",
                [("WWW-Authenticate", 'Basic realm="wfsched", charset="UTF-8"')],
            )
        raw_path = str(environ.get("PATH_INFO") or "/")
        # WSGI hands the path as latin-1 decoded bytes; ids are UTF-8.
        path = raw_path.encode("latin-1", errors="replace").decode("utf-8", errors="replace")
        request = Request(
            method,
            path,
            parse_qs(str(environ.get("QUERY_STRING") or ""), keep_blank_values=False),
            {
                key[5:].replace("_", "-").lower(): str(value)
                for key, value in environ.items()
                if key.startswith("HTTP_")
            },
        )
        if path.startswith("/static/"):
            return self._static(path[len("/static/") :])
        for pattern, handler in self.routes:
            found = pattern.match(path)
            if found is not None:
                request.match = found.groups()
                return self._handle(handler, request)
        return self._error("404 Not Found", f"no page at {path}; start at the schedules page", path)

    def _handle(self, handler: Handler, request: Request) -> Response:
        try:
            return handler(request)
        except NotFoundError as exc:
            return self._error("404 Not Found", str(exc), request.path)
        except UsageError as exc:
            return self._error("400 Bad Request", str(exc), request.path)
        except WfschedError as exc:
            # The store unreachable or damaged: said in its words; a refresh retries.
            return self._error("503 Service Unavailable", str(exc), request.path)
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            return self._error(
                "500 Internal Server Error",
                f"{type(exc).__name__}: the server's log has the details",
                request.path,
            )

    def _error(self, status: str, message: str, path: str) -> Response:
        return self.render(
            "error.html",
            status,
            status_line=status,
            message=message,
            title=status,
            here=path,
            self_url=quote(path),
            refresh=self.config.refresh_seconds,
            now=time.time(),
        )

    def _authorized(self, header: str | None) -> bool:
        credential = self.config.credential
        if credential is None:
            return True
        given = basic_credentials(header)
        if given is None or header is None:
            return False
        key = hmac.new(self._key, header.encode("utf-8", "replace"), hashlib.sha256).digest()
        if key in self._verified:
            return True
        if not credential.matches(*given):
            return False
        with self._lock:
            self._verified[key] = None
            while len(self._verified) > VERIFIED_KEEP:
                del self._verified[next(iter(self._verified))]
        return True

    def _static(self, name: str) -> Response:
        suffix = os.path.splitext(name)[1]
        if not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", name) or suffix not in STATIC_TYPES:
            return self._error("404 Not Found", f"no static file {name}", f"/static/{name}")
        try:
            body = resources.files("wfsched.web").joinpath("static", name).read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            return self._error("404 Not Found", f"no static file {name}", f"/static/{name}")
        return Response(body, content_type=f"{STATIC_TYPES[suffix]}; charset=utf-8")
