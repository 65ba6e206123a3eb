"""The RIC's own message router: an RMR transport behind the ``Transport`` protocol.

On an O-RAN SC near-RT RIC the E2 termination delivers RIC Indications and subscription
outcomes to xApps over RMR (librmr, SI95). This binds the few librmr calls the xApp needs
through ctypes, against ``rmr.h`` of RMR 4.9.4: the O-RAN SC Python framework's bindings
would pin redis 4 and protobuf 3 into the serving image.

librmr's calls block, so they run on threads of their own: one receives (with a timeout, so
that it notices a stop), sends run in a worker thread. The receiving thread never waits for
the event loop: it drains librmr's receive ring into a queue of the xApp's own, which the
event loop empties in turns of ``RECEIVE_BATCH`` frames (so that forecasts are served between
them). librmr drops what arrives while its ring is full, and counts none of it
(docs/decisions/e2-receive-queue.md). The xApp's queue is larger, and what it cannot hold is
counted (``kpi_forecast_e2_indications_rejected_total``,
reason ``receive-queue-full``). RMR health checks (RIC_HEALTH_CHECK_REQ, 100) are
answered on the receiving thread with RIC_HEALTH_CHECK_RESP (101), as O-RAN SC xApps do, so
that ``rmr_probe`` can serve as a probe.

Routes come as on any O-RAN SC RIC: from the routing manager (``RMR_RTG_SVC``) or a static
table (``RMR_SEED_RT``), both set by the chart. Where neither is set (a run outside a RIC),
the xApp takes an empty static table: it answers through wormholes and return-to-sender, and
RMR counts as ready once a table is loaded.
"""

from __future__ import annotations

import asyncio
import collections
import ctypes
import logging
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib.resources import files

from kpi_forecast.model.errors import UserError
from kpi_forecast.xapp.failures import describe
from kpi_forecast.xapp.ric.transport import Frame, Handler

log = logging.getLogger(__name__)

# The library's soname: found where the dynamic loader looks (LD_LIBRARY_PATH, ldconfig).
LIBRARY = "librmr_si.so.4"
MAX_MESSAGE = 65536  # bytes; E2SM-KPM indications of a cell are far smaller
RECEIVE_TIMEOUT_MS = 100  # how soon the receiving thread notices a stop
CLOSE_WAIT_S = 2.0  # for the receiving thread to stop, at most
RECEIVE_BATCH = 64  # frames the event loop takes in one turn, at most
# Frames received and not yet handled: a few seconds of 10^4 cells reporting every second.
RECEIVE_QUEUE = 65_536
RMR_OK = 0
RMR_ERR_NOENDPT = 2
RMR_ERR_TIMEOUT = 12
RIC_HEALTH_CHECK_REQ = 100
RIC_HEALTH_CHECK_RESP = 101
HEALTHY = b"OK\x00"
NO_ROUTES = files("kpi_forecast.xapp.ric.e2") / "no-routes.rt"


class RmrError(UserError, RuntimeError):
    """librmr could not be loaded, started or sent with; the message says which."""


class _MBuf(ctypes.Structure):
    """rmr_mbuf_t of rmr.h: the fields up to ``cookie``, in order."""

    _fields_ = [
        ("state", ctypes.c_int),
        ("mtype", ctypes.c_int),
        ("len", ctypes.c_int),
        ("payload", ctypes.POINTER(ctypes.c_ubyte)),
        ("xaction", ctypes.POINTER(ctypes.c_ubyte)),
        ("sub_id", ctypes.c_int),
        ("tp_state", ctypes.c_int),
        ("tp_buf", ctypes.c_void_p),
        ("header", ctypes.c_void_p),
        ("id", ctypes.c_void_p),
        ("flags", ctypes.c_int),
        ("alloc_len", ctypes.c_int),
        ("ring", ctypes.c_void_p),
        ("rts_fd", ctypes.c_int),
        ("cookie", ctypes.c_int),
    ]


_Msg = ctypes.POINTER(_MBuf)
# libc's memmove, keeping the GIL (ctypes.memmove gives it up): see _send_blocking.
_memmove = ctypes.PyDLL(None).memmove
_memmove.argtypes, _memmove.restype = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t], None


def load(path: str = LIBRARY, hold_gil: bool = False) -> ctypes.CDLL:
    """librmr with the signatures of the calls used here; with ``hold_gil``, calls that keep
    the GIL, for those that never block."""
    try:
        lib = ctypes.PyDLL(path) if hold_gil else ctypes.CDLL(path)
    except OSError as exc:
        raise RmrError(f"cannot load {path} (RMR's library; put its folder on "
                       f"LD_LIBRARY_PATH): {exc}") from None
    signatures = {
        "rmr_init": ([ctypes.c_char_p, ctypes.c_int, ctypes.c_int], ctypes.c_void_p),
        "rmr_ready": ([ctypes.c_void_p], ctypes.c_int),
        "rmr_alloc_msg": ([ctypes.c_void_p, ctypes.c_int], _Msg),
        "rmr_torcv_msg": ([ctypes.c_void_p, _Msg, ctypes.c_int], _Msg),
        "rmr_rts_msg": ([ctypes.c_void_p, _Msg], _Msg),
        "rmr_send_msg": ([ctypes.c_void_p, _Msg], _Msg),
        "rmr_free_msg": ([_Msg], None),
        "rmr_wh_open": ([ctypes.c_void_p, ctypes.c_char_p], ctypes.c_int),
        "rmr_wh_send_msg": ([ctypes.c_void_p, ctypes.c_int, _Msg], _Msg),
        "rmr_close": ([ctypes.c_void_p], None),
    }
    for name, (arguments, result) in signatures.items():
        function = getattr(lib, name)
        function.argtypes, function.restype = arguments, result
    return lib


class RmrTransport:
    """Receives the RIC's messages on ``port`` (rmr-data); sends through wormholes to the
    endpoints named (``host:port``), as RMR does for a reply to a known peer, or by the route
    table (A1 answers and queries, which the RIC routes to its A1 mediator)."""

    def __init__(self, port: int, on_broken: Callable[[str], None] | None = None,
                 library: str | None = None) -> None:
        """Loads librmr and listens on ``port`` at once, so that a missing library or a port
        in use is said (RmrError, one line from the CLI) before anything else starts."""
        self.port = port
        self._on_broken = on_broken or (lambda reason: None)
        self._lib = load(library or LIBRARY)
        # A ctypes call gives up the GIL and, behind a busy event loop, waits a switch interval
        # to take it back; the drain's calls never block (timeout 0: a pop from the ring), so
        # they keep it and the ring never overflows (docs/decisions/e2-receive-queue.md).
        self._polling = load(library or LIBRARY, hold_gil=True)
        self._stop = threading.Event()
        self._receiver: threading.Thread | None = None
        self._sender = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rmr-send")
        # Appended by the receiving thread, taken by the event loop (deque's ends are atomic).
        self._frames: collections.deque[Frame] = collections.deque()
        self._arrived = asyncio.Event()
        self._signalled = False  # a wake-up of the event loop is on its way
        self._draining: asyncio.Task | None = None
        self._wormholes: dict[str, int] = {}
        if "RMR_RTG_SVC" not in os.environ and "RMR_SEED_RT" not in os.environ:
            os.environ.update(RMR_SEED_RT=str(NO_ROUTES), RMR_RTG_SVC="-1")
            log.info("rmr: no routing manager (RMR_RTG_SVC) or static route table "
                     "(RMR_SEED_RT) named: an empty static table, answers by return-to-sender "
                     "and wormholes only")
        self._context: int | None = self._lib.rmr_init(str(port).encode(), MAX_MESSAGE, 0)
        if not self._context:
            raise RmrError(f"RMR cannot listen on port {port} (rmr_init failed: is the port "
                           "in use?)")

    async def start(self, handler: Handler) -> None:
        """Hand what arrives to ``handler``, on the running event loop."""
        loop = asyncio.get_running_loop()
        self._draining = asyncio.create_task(self._drain(handler))
        self._receiver = threading.Thread(target=self._receive, args=(loop,),
                                          name="rmr-receive", daemon=True)
        self._receiver.start()

    def ready(self) -> bool:
        """RMR has a route table (from the routing manager or the static one)."""
        return self._context is not None and bool(self._lib.rmr_ready(self._context))

    def _receive(self, loop: asyncio.AbstractEventLoop) -> None:
        lib, context, message = self._lib, self._context, None
        wait, poll = lib.rmr_torcv_msg, self._polling.rmr_torcv_msg
        received, polling = 0, False
        while not self._stop.is_set():
            # Waits for a message; then takes what is queued without waiting until the ring
            # is empty, waking the event loop once per batch, not once per message.
            message = poll(context, message, 0) if polling else wait(context, message,
                                                                      RECEIVE_TIMEOUT_MS)
            m = message.contents if message else None
            if m is not None and m.state == RMR_OK:
                polling = True
                if m.mtype == RIC_HEALTH_CHECK_REQ:
                    message = self._answer_health_check(message)
                elif len(self._frames) >= RECEIVE_QUEUE:
                    self._on_broken("receive-queue-full")
                else:
                    self._frames.append(Frame(m.mtype, m.sub_id,
                                              ctypes.string_at(m.payload, m.len)))
                    received += 1
                if received >= RECEIVE_BATCH:
                    if not self._wake(loop):
                        break
                    received = 0
                continue
            if m is not None and m.state != RMR_ERR_TIMEOUT:
                self._on_broken("rmr")
            if received and not self._wake(loop):
                break
            received, polling = 0, False
        if message:
            lib.rmr_free_msg(message)

    def _wake(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Tell the event loop that frames are queued; False once it has closed."""
        if not self._signalled:
            self._signalled = True
            try:
                loop.call_soon_threadsafe(self._arrived.set)
            except RuntimeError:  # the loop has closed: the process is stopping
                return False
        return True

    async def _drain(self, handler: Handler) -> None:
        """Run the handler on each queued frame, in order; it may wait (the store's
        back-pressure), and the queue fills meanwhile."""
        frames = self._frames
        while True:
            await self._arrived.wait()
            # Cleared before the queue is read: a frame queued from here on wakes it again.
            self._arrived.clear()
            self._signalled = False
            while frames:
                for _ in range(min(len(frames), RECEIVE_BATCH)):
                    frame = frames.popleft()
                    try:
                        await handler(frame)
                    except Exception as exc:  # one bad message never stops ingestion
                        self._on_broken("handler")
                        log.warning("e2: a message of type %d could not be handled: %s",
                                    frame.msg_type, describe(exc))
                await asyncio.sleep(0)  # forecasts are served between batches

    def _answer_health_check(self, message: _Msg) -> _Msg:
        m = message.contents
        if m.alloc_len and len(HEALTHY) > m.alloc_len:
            return message
        _memmove(m.payload, HEALTHY, len(HEALTHY))
        m.len, m.mtype = len(HEALTHY), RIC_HEALTH_CHECK_RESP
        return self._lib.rmr_rts_msg(self._context, message)

    async def send(self, host: str, port: int, frame: Frame) -> None:
        await asyncio.get_running_loop().run_in_executor(self._sender, self._send_blocking,
                                                         f"{host}:{port}", frame)

    async def send_many(self, host: str, port: int, frames: Sequence[Frame]
                        ) -> tuple[int, Exception | None]:
        return await asyncio.get_running_loop().run_in_executor(
            self._sender, self._send_all_blocking, f"{host}:{port}", frames)

    async def route_many(self, frames: Sequence[Frame]) -> tuple[int, Exception | None]:
        return await asyncio.get_running_loop().run_in_executor(
            self._sender, self._send_all_blocking, None, frames)

    def _send_all_blocking(self, target: str | None, frames: Sequence[Frame]
                           ) -> tuple[int, Exception | None]:
        for sent, frame in enumerate(frames):
            try:
                self._send_blocking(target, frame)
            except RmrError as exc:
                return sent, exc
        return len(frames), None

    async def route(self, frame: Frame) -> None:
        await asyncio.get_running_loop().run_in_executor(self._sender, self._send_blocking,
                                                         None, frame)

    def _send_blocking(self, target: str | None, frame: Frame) -> None:
        """To ``target`` (host:port) through a wormhole, or by the route table (None)."""
        lib, context = self._lib, self._context
        if context is None:
            raise RmrError("the RMR transport is not started")
        wormhole = None if target is None else self._wormholes.get(target)
        if target is not None and wormhole is None:
            wormhole = lib.rmr_wh_open(context, target.encode())
            if wormhole < 0:
                raise RmrError(f"cannot open an RMR wormhole to {target}")
            self._wormholes[target] = wormhole
        # Allocating, filling, freeing and a wormhole send keep the GIL, as the receiving
        # thread's drain does (docs/decisions/e2-receive-queue.md). A send to a socket that
        # would block does not wait on it: SI95 polls it and librmr gives up after a bounded
        # number of tries (RMR_ERR_RETRY). A send by the route table gives the GIL up: it may
        # connect to an endpoint first.
        quick = self._polling
        message = quick.rmr_alloc_msg(context, max(len(frame.payload), 1))
        try:
            m = message.contents
            m.mtype, m.sub_id, m.len = frame.msg_type, frame.subscription_id, len(frame.payload)
            _memmove(m.payload, frame.payload, len(frame.payload))
            message = (lib.rmr_send_msg(context, message) if target is None
                       else quick.rmr_wh_send_msg(context, wormhole, message))
            if not message or message.contents.state != RMR_OK:
                state = message.contents.state if message else "none"
                if target is None:
                    where = ("no endpoint in the route table" if state == RMR_ERR_NOENDPT
                             else f"state {state}")
                    raise RmrError(f"RMR send of type {frame.msg_type} by route failed "
                                   f"({where})")
                self._wormholes.pop(target, None)  # reopened on the next send: a restart
                raise RmrError(f"RMR send of type {frame.msg_type} to {target} failed "
                               f"(state {state})")
        finally:
            if message:
                quick.rmr_free_msg(message)

    async def close(self) -> None:
        self._stop.set()
        if self._receiver is not None:
            # librmr's timed receive waits for a wall-clock instant (sem_timedwait): a clock
            # stepped back holds it past its timeout, so the wait for it is bounded as well;
            # the thread is a daemon and is left behind.
            await asyncio.to_thread(self._receiver.join, CLOSE_WAIT_S)
            if self._receiver.is_alive():
                log.warning("rmr: the receiving thread did not stop within %.0f s; left "
                            "behind", CLOSE_WAIT_S)
        if self._draining is not None:
            self._draining.cancel()
        self._sender.shutdown(wait=True)
        if self._context is not None:
            self._lib.rmr_close(self._context)
            self._context = None
