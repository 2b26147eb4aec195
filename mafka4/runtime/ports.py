"""Free loopback ports for the servers a local cluster starts."""

from __future__ import annotations

import socket

LOOPBACK = "127.0.0.1"


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now.

    The port is released before it is returned, so another process could take it first;
    callers that start a server on it retry with a new port when the server fails to bind.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return probe.getsockname()[1]


def is_listening(port: int, host: str = LOOPBACK) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.2)
        return probe.connect_ex((host, port)) == 0
