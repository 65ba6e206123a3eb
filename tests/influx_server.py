"""A real InfluxDB 1.x server (Debian's influxdb) on loopback, its files in a test's directory,
and the line-protocol writes that put a KPI file's rows into it as the RIC's apps write cell
reports."""

from __future__ import annotations

import contextlib
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

import pandas as pd

from benchmarks.ports import free_port
from tests.system_tools import system_tool

START_WITHIN_S = 30.0


def _config(directory: Path, port: int) -> str:
    return f"""reporting-disabled = true
bind-address = "127.0.0.1:{free_port()}"
[meta]
  dir = "{directory / 'meta'}"
[data]
  dir = "{directory / 'data'}"
  wal-dir = "{directory / 'wal'}"
  query-log-enabled = false
[http]
  bind-address = "127.0.0.1:{port}"
  log-enabled = false
[logging]
  level = "warn"
"""


def answers(port: int) -> bool:
    with contextlib.suppress(OSError), urllib.request.urlopen(
            f"http://127.0.0.1:{port}/ping", timeout=0.5) as answer:
        return answer.status == 204
    return False


@contextlib.contextmanager
def influx_server(directory: Path) -> Iterator[int]:
    """influxd on a free port; yields the port once it answers /ping."""
    port = free_port()
    config = directory / "influxdb.conf"
    config.write_text(_config(directory, port))
    process = subprocess.Popen([system_tool("influxd"), "-config", str(config)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + START_WITHIN_S
        while not answers(port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"influxd did not start: {process.stderr.read()!r}")
            time.sleep(0.1)
        yield port
    finally:
        process.terminate()
        process.wait(30)


def query(port: int, statement: str, database: str | None = None, csv: bool = False) -> bytes:
    params = {"q": statement, **({"db": database} if database else {})}
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/query", data=urllib.parse.urlencode(params).encode(),
        headers={"Accept": "application/csv"} if csv else {})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return answer.read()


def post_lines(port: int, database: str, lines: Sequence[str], chunk: int = 200_000) -> None:
    """Write points (line protocol, nanosecond times) a chunk of lines per request."""
    for first in range(0, len(lines), chunk):
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/write?db={urllib.parse.quote(database)}",
            data="\n".join(lines[first:first + chunk]).encode())
        with urllib.request.urlopen(request, timeout=600) as answer:
            assert answer.status == 204


def _escaped(text: str, chars: str) -> str:
    for char in "\\" + chars:
        text = text.replace(char, "\\" + char)
    return text


def write_rows(port: int, database: str, measurement: str, frame: pd.DataFrame,
               cell: str, cell_as: str) -> pd.DataFrame:
    """Write ``frame``'s rows (timestamp, cell_id and KPI columns) as points of
    ``measurement``: the cell under the name ``cell``, as a tag (``cell_as="tag"``, as the
    Viavi RIC tester writes) or a string field ("field", as ric-app-qp writes); each KPI a
    float field, a missing value left out. InfluxDB keeps one point per measurement, tag set
    and time, so with the cell as a field each cell's points are a microsecond apart from
    the next cell's, as reports written as they arrive are. Returns the rows as written (their
    timestamps in UTC)."""
    query(port, f'CREATE DATABASE "{database}"')
    kpis = [c for c in frame.columns if c not in ("timestamp", "cell_id")]
    stamps = pd.to_datetime(frame["timestamp"], utc=True).dt.as_unit("ns").astype("int64")
    if cell_as == "field":
        stamps = stamps + pd.factorize(frame["cell_id"])[0] * 1000
    lines = []
    for stamp, cell_id, values in zip(stamps, frame["cell_id"], frame[kpis].itertuples(
            index=False), strict=True):
        fields = [f"{_escaped(k, ',= ')}={v!r}" for k, v in zip(kpis, values, strict=True)
                  if pd.notna(v)]
        name = _escaped(measurement, ", ")
        if cell_as == "tag":
            head = f"{name},{_escaped(cell, ',= ')}={_escaped(str(cell_id), ',= ')}"
        else:
            head = name
            fields.append(f'{_escaped(cell, ",= ")}="{_escaped(str(cell_id), chr(34))}"')
        lines.append(f"{head} {','.join(fields)} {stamp}")
    post_lines(port, database, lines)
    return frame.assign(timestamp=pd.to_datetime(stamps, utc=True))
