"""How a long-running command (training, watching a rollout) stops on SIGTERM or Ctrl-C."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator

log = logging.getLogger(__name__)


@contextlib.contextmanager
def stop_on_signals(doing: str) -> Iterator[threading.Event]:
    """SIGTERM or Ctrl-C asks a long-running command to stop: the event is set, the command
    winds down (``doing`` says how) and exits 0. A second signal stops the process at once."""
    stop = threading.Event()

    def ask(signum: int, frame: object) -> None:
        if stop.is_set():
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)
        stop.set()
        log.warning("%s: %s (again to stop at once)", signal.Signals(signum).name, doing)

    previous = {signum: signal.signal(signum, ask) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
