"""The metrics listener: `/metrics` and `/healthz` on a daemon thread.

The socket is bound by `MetricsServer(...)` itself, before the supervisor
starts anything (run keeper, lock, recovery), so a bad address or a port in
use is one clear error and nothing has happened yet. Serving starts later,
once there is a snapshot source; a renderer thread renders each published
snapshot and a request sends the latest rendered bytes and nothing else.
Both wait while the loop admits a due instant (`wfsched.daemon.quiet`).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from wfsched.daemon.quiet import Quiet
from wfsched.domain.config import Listen
from wfsched.errors import UsageError

if TYPE_CHECKING:
    from wfsched.daemon.metrics import Snapshot
    from wfsched.daemon.metrics_render import Warm


RENDER_WAIT = 10.0
"""Seconds a scrape waits for the renderer to catch up (Prometheus' default
scrape timeout) before answering 503."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], family: socket.AddressFamily) -> None:
        self.address_family = family
        self.source: Callable[[], Snapshot | None] = lambda: None
        self.monotonic: Callable[[], float] = time.monotonic
        self.warm: Any = None
        self.quiet = Quiet()
        super().__init__(address, _Handler)

    def verify_request(self, request: Any, client_address: Any) -> bool:
        """Accepted: start its thread only once the loop is not admitting."""
        self.quiet.hold()
        return True


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def parse_request(self) -> bool:
        """Parsing the headers is most of a request's Python: held too, for a
        request accepted just before the loop came near an instant."""
        self.server.quiet.hold()
        return super().parse_request()

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        snapshot = self.server.source()
        if path == "/metrics":
            from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4

            if snapshot is None:
                self._send(503, b"starting: no snapshot yet\n", "text/plain; charset=utf-8")
                return
            parts = self.server.warm.parts(RENDER_WAIT)
            if parts is None:
                self._send(
                    503,
                    b"starting: the metrics are still being rendered; retry\n",
                    "text/plain; charset=utf-8",
                )
                return
            self._send(200, parts, CONTENT_TYPE_PLAIN_0_0_4)
        elif path == "/healthz":
            from wfsched.daemon.metrics import health

            status, body = health(snapshot, self.server.monotonic())
            self._send(status, body.encode(), "text/plain; charset=utf-8")
        else:
            self._send(404, b"not found: try /metrics or /healthz\n", "text/plain; charset=utf-8")

    def _send(self, status: int, body: bytes | tuple[bytes, ...], content_type: str) -> None:
        parts = (body,) if isinstance(body, bytes) else body
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(sum(len(part) for part in parts)))
        self.end_headers()
        for part in parts:
            self.wfile.write(part)

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not events worth a journal line."""


class MetricsServer:
    """A bound listener; `start()` serves from a daemon thread, `close()` stops."""

    def __init__(self, listen: Listen, source: str) -> None:
        try:
            infos = socket.getaddrinfo(
                listen.host, listen.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )
        except OSError as exc:
            reason = (exc.strerror or str(exc)).lower()
            raise UsageError(
                f"{source} {listen}: cannot resolve {listen.host!r}: {reason}"
            ) from None
        family, _, _, _, address = infos[0]
        try:
            self._server = _Server((str(address[0]), int(address[1])), family)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise UsageError(
                f"{source} {listen}: cannot listen: {reason.lower()}; pick another port"
                " or stop what holds it"
            ) from None
        host, port = self._server.server_address[:2]
        self.address = Listen(str(host), int(port))
        self._thread: threading.Thread | None = None
        self._warm: Warm | None = None

    def published(self) -> None:
        """The loop published a snapshot: render it now, off the loop and
        the request path."""
        if self._warm is not None:
            self._warm.published()

    def start(
        self,
        source: Callable[[], Snapshot | None],
        monotonic: Callable[[], float] = time.monotonic,
        quiet: Quiet | None = None,
    ) -> None:
        """Serve `source`'s snapshots; with `quiet` (the loop's), requests and
        renderings wait while the loop admits a due instant."""
        from wfsched.daemon.metrics_render import Warm

        self._server.source = source
        self._server.monotonic = monotonic
        if quiet is not None:
            self._server.quiet = quiet
        self._server.warm = self._warm = Warm(source, self._server.quiet)
        self._warm.start()
        self._warm.published()
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="wfsched-metrics", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        if self._warm is not None:
            self._warm.stop()
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(5)
        self._server.server_close()
