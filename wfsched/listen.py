"""A listen address (`HOST:PORT`) parsed once, where config validates it.

Kept apart from the metrics server so reading the configuration imports
nothing of the daemon (no HTTP server, no sockets).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LOOPBACK = "127.0.0.1"
_FORMS = "expected HOST:PORT, :PORT or PORT (an IPv6 address as [ADDR]:PORT)"
_HOST_PORT = re.compile(r"(?:\[(?P<v6>[0-9A-Fa-f:.%a-zA-Z]+)\]|(?P<host>[^:\[\]]*)):(?P<port>\d+)")


@dataclass(frozen=True)
class Listen:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_listen(text: str) -> Listen:
    """`HOST:PORT`, `:PORT` or `PORT` (loopback), `[ADDR]:PORT` for IPv6.

    Raises ValueError saying which forms are accepted; port 0 asks the kernel
    for a free port (the supervisor logs the one it got).
    """
    text = text.strip()
    if text.isdigit():
        host, port_text = LOOPBACK, text
    else:
        match = _HOST_PORT.fullmatch(text)
        if match is None:
            raise ValueError(f"{text!r}: {_FORMS}")
        host = match["v6"] or match["host"] or LOOPBACK
        port_text = match["port"]
    port = int(port_text)
    if port > 65535:
        raise ValueError(f"{text!r}: port {port} is out of range (0-65535)")
    return Listen(host, port)
