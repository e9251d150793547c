"""The systemd notify protocol (READY=1, STATUS=, STOPPING=1, WATCHDOG=1).

A datagram to $NOTIFY_SOCKET; a leading '@' means the abstract namespace.
Without the variable every call is a no-op, so the supervisor needs no
"am I under systemd?" branch.
"""

from __future__ import annotations

import contextlib
import os
import socket


class Notifier:
    def __init__(self, address: str | None = None) -> None:
        address = address if address is not None else os.environ.get("NOTIFY_SOCKET")
        self._address = ("\0" + address[1:]) if address and address.startswith("@") else address
        self._socket: socket.socket | None = None
        usec = os.environ.get("WATCHDOG_USEC", "")
        self.watchdog_interval = int(usec) / 2_000_000 if usec.isdigit() and int(usec) else None

    def send(self, *fields: str) -> None:
        if not self._address:
            return
        if self._socket is None:
            self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._socket.set_inheritable(False)
        # A vanished socket must not take the scheduler down with it.
        with contextlib.suppress(OSError):
            self._socket.sendto("\n".join(fields).encode(), self._address)

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
