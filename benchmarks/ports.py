"""Ports for the servers the benchmarks and the tests start."""

from __future__ import annotations

import random
import socket
from pathlib import Path

UNRESERVED = 10_000  # above the well-known and most registered services' ports
_handed_out: set[int] = set()
_draw = random.Random()  # its own: a benchmark or test that seeds the global one is not moved


def _ephemeral_low() -> int:
    """Where the kernel's own port choices start (bind to 0, outgoing connections)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default; other kernels keep theirs higher still


def free_port() -> int:
    """A TCP port free now and never handed out before in this process. Drawn below the
    ephemeral range: a port the kernel picked for bind(0) may be picked again by the next call,
    or taken by an outgoing connection, before the server it was handed to binds it. Where
    that range starts too low to leave room below it, the kernel chooses (bind to 0)."""
    low = _ephemeral_low()
    while True:
        port = _draw.randrange(UNRESERVED, low) if low - UNRESERVED >= 1024 else 0
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            port = probe.getsockname()[1]  # the kernel's choice where the range left no room
        if port not in _handed_out:
            _handed_out.add(port)
            return port
