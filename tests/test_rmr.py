"""The RMR transport on the real librmr: the RIC's health check, and the mistakes a deployment
can make with it named in one line."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import random
import socket
import subprocess
from pathlib import Path

import pytest

from benchmarks.ports import free_port
from kpi_forecast.model.errors import UserError
from kpi_forecast.xapp.descriptor.config_file import ConfigError
from kpi_forecast.xapp.ric import rmr
from kpi_forecast.xapp.ric.a1.policy_type import A1_POLICY_QUERY, POLICY_TYPE_ID
from kpi_forecast.xapp.ric.e2 import e2ap, kpm
from kpi_forecast.xapp.ric.e2.ingest import Route
from kpi_forecast.xapp.ric.e2.kpm_indication import (
    encode_indication_header,
    encode_indication_message,
)
from kpi_forecast.xapp.ric.rmr import RIC_HEALTH_CHECK_REQ, RmrError, RmrTransport
from kpi_forecast.xapp.ric.transport import (
    RIC_INDICATION,
    RIC_SUB_DEL_RESP,
    RIC_SUB_FAILURE,
    RIC_SUB_RESP,
    Frame,
)
from tests.a1_mediator import Mediator
from tests.processes import BIN, answers, running
from tests.rmr_library import RMR, rmr_transport
from tests.xapp_helpers import descriptor, make_model, write_descriptor
from tests.xapp_helpers import running as xapp_running

E2 = {"enabled": True, "kpis": {"kpi": {"measurement": "RRU.PrbUsedDl"}}}


def test_no_probe_answer_once_the_transport_is_closed(rmr_library: Path) -> None:
    port = free_port()

    async def go() -> None:
        transport = RmrTransport(port)
        await transport.start(lambda frame: asyncio.sleep(0))
        await transport.close()
        probe = await asyncio.to_thread(
            subprocess.run, [str(RMR / "bin" / "rmr_probe"), "-h", f"127.0.0.1:{port}",
                             "-t", "2"], capture_output=True, text=True, timeout=30)
        assert probe.returncode != 0

    asyncio.run(go())


def test_a_missing_library_is_named_with_where_to_put_it() -> None:
    with pytest.raises(RmrError, match="LD_LIBRARY_PATH") as caught:
        RmrTransport(4560, library="/nonexistent/librmr_si.so.4")
    assert isinstance(caught.value, UserError)  # one line and exit 2 from the CLI


def test_a_port_in_use_is_named_before_anything_starts(rmr_library: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(RmrError, match=f"RMR cannot listen on port {port}") as caught:
            RmrTransport(port)
    assert isinstance(caught.value, UserError)


def test_rmr_needs_its_port_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="controls.e2.port: 0 is less than the minimum of 1"):
        descriptor(tmp_path, tmp_path / "model", e2={**E2, "port": 0})


def test_serve_over_rmr_as_a_process(mediator_routes: int, rmr_library: Path,
                                     tmp_path: Path) -> None:
    """`kpi-forecast serve --a1` as a RIC runs it: librmr on LD_LIBRARY_PATH, healthy to
    rmr_probe, asking the A1 mediator its route table names for the policy instances and
    taking one, and out within seconds of SIGTERM; without the library, one line and exit 2."""
    http, rmr_port = free_port(), free_port()
    config = write_descriptor(tmp_path / "config", make_model(tmp_path / "model"),
                              e2={**E2, "port": rmr_port})
    argv = [str(BIN / "kpi-forecast"), "serve", "--config", str(config), "--host",
            "127.0.0.1", "--port", str(http), "--a1"]
    env = {**os.environ, "LD_LIBRARY_PATH": str(rmr_library.parent)}

    async def mediate() -> dict:
        mediator = Mediator(mediator_routes)
        await mediator.start()
        try:
            with running(argv, answers(f"http://127.0.0.1:{http}/ric/v1/health/ready"),
                         tmp_path / "serve.log", env=env):
                probe = await asyncio.to_thread(
                    subprocess.run, [str(RMR / "bin" / "rmr_probe"), "-h",
                                     f"127.0.0.1:{rmr_port}", "-t", "10"],
                    capture_output=True, text=True, timeout=30)
                assert probe.returncode == 0, probe.stdout + probe.stderr
                assert await mediator.next(A1_POLICY_QUERY) == {"policy_type_id": POLICY_TYPE_ID}
                return await mediator.request(rmr_port, "CREATE", "i1", {"cells": ["c1"]})
        finally:
            await mediator.transport.close()

    assert asyncio.run(mediate())["status"] == "OK"
    without = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=without)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith(
        "kpi-forecast: error: cannot load librmr_si.so.4"), done.stderr
    assert "Traceback" not in done.stderr


def test_a_malformed_message_of_every_type_is_counted_and_ingestion_goes_on(
        rmr_library: Path, tmp_path: Path) -> None:
    """Garbage, empty and oversized payloads under every message type the xApp can be sent:
    each one counted by reason, none stops the receiving thread or the probe's answer, and a
    good indication after them is ingested."""
    model_dir = make_model(tmp_path / "model")
    rng = random.Random(0)
    payloads = [bytes(rng.getrandbits(8) for _ in range(24)), b"",
                bytes(rng.getrandbits(8) for _ in range(60_000))]
    # What each type is counted as: all on the indication path (subscription outcomes come
    # over HTTP to a REST subscriber; with A1 off, an A1 policy request, 20010, is not taken).
    expected = {RIC_SUB_RESP: "msg-type", RIC_SUB_FAILURE: "msg-type",
                RIC_SUB_DEL_RESP: "msg-type", RIC_INDICATION: "e2ap", 20010: "msg-type",
                999: "msg-type"}
    port = free_port()
    e2 = {**E2, "port": port, "submgrUrl": f"http://127.0.0.1:{free_port()}"}

    async def go() -> None:
        async with xapp_running(descriptor(tmp_path, model_dir, e2=e2)) as client:
            service = client.app.state.components
            service.ingestor.add_route(7, 1, Route("cell-A", 3_600_000))
            sender = rmr_transport()
            for msg_type in [*expected, RIC_HEALTH_CHECK_REQ]:
                for payload in payloads:
                    await sender.send("127.0.0.1", port, Frame(msg_type, 7, payload))
            await sender.send("127.0.0.1", port, good_indication())
            registry = service.metrics.registry
            for _ in range(400):
                if registry.get_sample_value("kpi_forecast_e2_indications_total") == 1.0:
                    break
                await asyncio.sleep(0.025)
            counts = {reason: registry.get_sample_value(
                "kpi_forecast_e2_indications_rejected_total", {"reason": reason})
                for reason in set(expected.values())}
            wanted = {reason: float(list(expected.values()).count(reason) * len(payloads))
                      for reason in set(expected.values())}
            assert counts == wanted
            assert registry.get_sample_value("kpi_forecast_e2_indications_total") == 1.0
            probe = await asyncio.to_thread(
                subprocess.run, [str(RMR / "bin" / "rmr_probe"), "-h", f"127.0.0.1:{port}",
                                 "-t", "10"], capture_output=True, text=True, timeout=30)
            assert probe.returncode == 0, probe.stdout + probe.stderr
            await sender.close()

    asyncio.run(go())


def good_indication() -> Frame:
    start = dt.datetime(2024, 3, 1, tzinfo=dt.UTC)
    message = encode_indication_message(kpm.IndicationMessage(
        [kpm.Measurement("RRU.PrbUsedDl", [42.0])], granularity_ms=3_600_000))
    payload = e2ap.encode_indication(1, 7, 2, 1, None, encode_indication_header(start),
                                     message)
    return Frame(RIC_INDICATION, 7, payload)


def test_a_burst_beyond_the_receive_queue_is_counted_and_the_rest_handled_in_order(
        rmr_library: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While the handler is held (the store's back-pressure), the receiving thread keeps
    draining librmr's ring into the xApp's queue; what that cannot hold is counted by reason,
    and what it holds is handled, in order, once the handler goes on."""
    monkeypatch.setattr(rmr, "RECEIVE_QUEUE", 20)
    port, dropped, handled = free_port(), [], []

    async def go() -> None:
        release = asyncio.Event()

        async def handler(frame: Frame) -> None:
            await release.wait()
            handled.append(frame.subscription_id)

        receiver = RmrTransport(port, on_broken=dropped.append)
        sender = RmrTransport(free_port())
        await receiver.start(handler)
        await sender.start(lambda frame: asyncio.sleep(0))
        try:
            for number in range(50):
                await sender.send("127.0.0.1", port, Frame(RIC_INDICATION, number, b"x"))
            deadline = asyncio.get_running_loop().time() + 10
            # 20 wait in the queue, and one in the held handler where it took one already.
            while len(dropped) < 29 and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)  # nothing more comes
            release.set()
            while (len(handled) + len(dropped) < 50
                   and asyncio.get_running_loop().time() < deadline):
                await asyncio.sleep(0.01)
        finally:
            await sender.close()
            await receiver.close()

    asyncio.run(go())
    assert set(dropped) == {"receive-queue-full"}
    assert len(handled) in (20, 21) and len(handled) + len(dropped) == 50
    assert handled == list(range(len(handled)))
