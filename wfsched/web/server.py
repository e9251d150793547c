"""Serving the view: the listen address, the loopback rule, waitress.

waitress is a pure-Python production WSGI server (threads, HTTP/1.1
keep-alive, request size limits, slow-client buffering), so the view does
not rest on `http.server`. A non-loopback address is refused unless a
password file is given: anyone who reaches the port would otherwise read
every schedule, command and log.
"""

from __future__ import annotations

import ipaddress
import signal
import socket
import sys
from dataclasses import dataclass
from types import FrameType

from wfsched.errors import UsageError
from wfsched.web.app import WebApp

DEFAULT_LISTEN = "127.0.0.1:8765"
THREADS = 4


@dataclass(frozen=True)
class Listen:
    host: str
    port: int

    @property
    def url_host(self) -> str:
        return f"[{self.host}]" if ":" in self.host else self.host


def parse_listen(text: str) -> Listen:
    """`HOST:PORT`, `[IPv6]:PORT`; a clear exit 2 otherwise."""
    host, colon, port_text = text.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not colon or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise UsageError(
            f"--listen {text!r}: expected HOST:PORT (e.g. 127.0.0.1:8765, [::1]:8765, 0.0.0.0:8765)"
        )
    return Listen(host, int(port_text))


def is_loopback(host: str) -> bool:
    """Every address `host` names is a loopback address (a name that does not
    resolve counts as not loopback)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        found = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(found) and all(
        ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_loopback for info in found
    )


def check_exposure(listen: Listen, has_password: bool) -> None:
    if not has_password and not is_loopback(listen.host):
        raise UsageError(
            f"--listen {listen.host}:{listen.port}: not a loopback address; a reachable view"
            " needs --password-file (make one with `wfsched web hash-password --user NAME FILE`)"
            " and TLS from a reverse proxy (docs/web.md)"
        )


def _stop(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def serve(app: WebApp, listen: Listen, store_display: str) -> None:
    """Serve until SIGTERM or SIGINT; the line on stderr names the bound URL
    (the port the kernel chose when the port was 0)."""
    from waitress.server import create_server

    try:
        server = create_server(app, host=listen.host, port=listen.port, threads=THREADS)
    except OSError as exc:
        raise UsageError(f"--listen {listen.host}:{listen.port}: cannot listen: {exc}") from None
    port = getattr(server, "effective_port", listen.port)
    signal.signal(signal.SIGTERM, _stop)
    sys.stderr.write(
        f"wfsched web: serving {store_display} read-only at http://{listen.url_host}:{port}/\n"
    )
    sys.stderr.flush()
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
        app.close()
