"""Long-running commands as real processes: started, waited on until they answer, and stopped
with SIGTERM, which every one of them must obey within seconds, exiting 0."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent  # the venv's scripts: kpi-forecast, schemathesis, torchrun
STOP_WITHIN_S = 5.0  # what the project promises for SIGTERM


def answers(url: str) -> Callable[[], bool]:
    """Ready once ``url`` answers 200."""
    def check() -> bool:
        try:
            return httpx.get(url, timeout=2).status_code == 200
        except httpx.TransportError:
            return False
    return check


class Server:
    """A process whose output goes to a file (a pipe nobody reads would block it)."""

    def __init__(self, argv: list[str], log: Path, cwd: Path, env: dict | None) -> None:
        self.argv = argv
        self.log_path = log
        self._log = log.open("w")
        self.process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=self._log,
                                        stderr=subprocess.STDOUT, text=True)

    @property
    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text()

    def wait_until(self, ready: Callable[[], bool], seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not ready():
            if self.process.poll() is not None:
                raise AssertionError(f"{self.argv[:3]} exited with {self.process.returncode} "
                                     f"before it was ready:\n{self.log[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.argv[:3]} not ready after {seconds:.0f} s:\n"
                                     f"{self.log[-3000:]}")
            time.sleep(0.1)

    def stop(self, within_s: float = STOP_WITHIN_S) -> float:
        """SIGTERM; the seconds it took to exit. Fails unless it exits 0 within
        ``within_s``."""
        started = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=within_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"{self.argv[:3]} still running {within_s:.0f} s after "
                                 f"SIGTERM:\n{self.log[-3000:]}") from None
        finally:
            self._log.close()
        took = time.monotonic() - started
        assert code == 0, f"{self.argv[:3]} exited {code} on SIGTERM:\n{self.log[-3000:]}"
        return took


@contextlib.contextmanager
def running(argv: list[str], ready: Callable[[], bool], log: Path, cwd: Path = ROOT,
            env: dict | None = None, seconds: float = 60.0) -> Iterator[Server]:
    """``argv`` running until ``ready()``; stopped with SIGTERM on the way out (checked)."""
    server = Server(argv, log, cwd, env)
    try:
        server.wait_until(ready, seconds)
        yield server
    except BaseException:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait()
        raise
    server.stop()
