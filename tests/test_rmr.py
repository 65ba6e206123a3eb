"""The RMR transport on the real librmr: the RIC's health check, and the mistakes a deployment
can make with it named in one line."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
from pathlib import Path

import pytest

from kpi_forecast.model.errors import UserError
from kpi_forecast.xapp.config import ConfigError
from kpi_forecast.xapp.e2.rmr import RmrError, RmrTransport
from tests.processes import BIN, answers, free_port, running
from tests.rmr_library import RMR
from tests.xapp_helpers import descriptor, make_model, write_descriptor

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


def test_serve_over_rmr_as_a_process(rmr_library: Path, tmp_path: Path) -> None:
    """`kpi-forecast serve` as a RIC runs it: librmr on LD_LIBRARY_PATH, healthy to rmr_probe,
    and out within seconds of SIGTERM; without the library, one line and exit 2."""
    http, rmr_port = free_port(), free_port()
    config = write_descriptor(tmp_path / "config", make_model(tmp_path / "model"),
                              e2={**E2, "port": rmr_port})
    argv = [str(BIN / "kpi-forecast"), "serve", "--config", str(config), "--host",
            "127.0.0.1", "--port", str(http)]
    env = {**os.environ, "LD_LIBRARY_PATH": str(rmr_library.parent)}
    with running(argv, answers(f"http://127.0.0.1:{http}/ric/v1/health/ready"),
                 tmp_path / "serve.log", env=env):
        probe = subprocess.run([str(RMR / "bin" / "rmr_probe"), "-h",
                                f"127.0.0.1:{rmr_port}", "-t", "10"],
                               capture_output=True, text=True, timeout=30)
        assert probe.returncode == 0, probe.stdout + probe.stderr
    without = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=without)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith(
        "kpi-forecast: error: cannot load librmr_si.so.4"), done.stderr
    assert "Traceback" not in done.stderr
