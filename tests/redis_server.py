"""A real redis-server (the Debian package) on loopback, for the shared-history tests and the
fault tests, which restart it, with its data or without, and hang it (SIGSTOP)."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from benchmarks.ports import free_port
from tests.system_tools import system_tool

START_WITHIN_S = 10.0


class RedisServer:
    """redis-server on ``port``, its files in ``directory``; with ``persistence`` every write
    is in the append-only file, fsynced, before it is answered (what survives a restart)."""

    def __init__(self, directory: Path, port: int | None = None,
                 persistence: bool = False) -> None:
        self.directory = directory
        self.port = port or free_port()
        self.persistence = persistence
        self.process: subprocess.Popen | None = None

    def start(self) -> RedisServer:
        persist = (["--appendonly", "yes", "--appendfsync", "always"] if self.persistence
                   else ["--appendonly", "no"])
        self.process = subprocess.Popen(
            [system_tool("redis-server"), "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", *persist, "--dir", str(self.directory)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + START_WITHIN_S
        while not self.answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start: {self.process.stderr.read()!r}")
            time.sleep(0.05)
        return self

    def answers(self) -> bool:
        with contextlib.suppress(OSError), socket.create_connection(
                ("127.0.0.1", self.port), timeout=0.5) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
        return False

    def stop(self) -> None:
        """SIGTERM: Redis finishes writing its files and exits."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)  # a hung one must hear it
            self.process.terminate()
            self.process.wait(10)

    def hang(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)


@contextlib.contextmanager
def redis_server(directory: Path, port: int | None = None,
                 persistence: bool = False) -> Iterator[int]:
    """redis-server on ``port`` or a free one; yields the port once it answers PING."""
    server = RedisServer(directory, port, persistence).start()
    try:
        yield server.port
    finally:
        server.stop()
