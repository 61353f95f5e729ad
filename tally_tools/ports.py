"""Free TCP ports on 127.0.0.1 for the local servers tests and benchmarks start (S3, Kafka,
a Spark standalone cluster, Airflow). A port is free when it is chosen; another process may
take it before the server binds it, which these one-machine runs accept."""

from __future__ import annotations

import socket
from contextlib import ExitStack

__all__ = ["free_port", "free_port_pair", "free_ports"]

LOCALHOST = "127.0.0.1"


def free_ports(count: int) -> list[int]:
    """`count` distinct ports free right now (held open together while chosen)."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind((LOCALHOST, 0))
        return [int(sock.getsockname()[1]) for sock in socks]


def free_port() -> int:
    """One port free right now."""
    (port,) = free_ports(1)
    return port


def free_port_pair() -> int:
    """A port whose successor is free too (the Kafka broker's controller listens on PORT + 1)."""
    for _ in range(50):
        port = free_port()
        with socket.socket() as sock:
            try:
                sock.bind((LOCALHOST, port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no two adjacent free ports")
