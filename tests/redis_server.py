"""A real redis-server (the Debian package) on loopback, for the shared-history tests."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from benchmarks.ports import free_port
from tests.system_tools import system_tool


@contextlib.contextmanager
def redis_server(directory: Path, port: int | None = None) -> Iterator[int]:
    """Start redis-server on ``port`` or a free one (no persistence: the tests restart xApps,
    not Redis); yields the port once it answers PING."""
    port = port or free_port()
    process = subprocess.Popen(
        [system_tool("redis-server"), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(directory)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", port), timeout=0.5) as conn:
                conn.sendall(b"PING\r\n")
                if conn.recv(16).startswith(b"+PONG"):
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start: {process.stderr.read()!r}")
            time.sleep(0.05)
        yield port
    finally:
        process.terminate()
        process.wait(10)
