"""KPI history from the RIC's InfluxDB (1.x, or 2.x through its v1-compatible API), where
O-RAN SC's QoE predictor and anomaly detector read cell reports:
``influx://[USER:PASSWORD@]HOST:PORT/DATABASE?measurement=CellReports&cell=nrCellIdentity``.

The cell is read from a tag or a field of that name, whichever the measurement has (ric-app-qp
writes it as a field, the Viavi RIC tester as a tag); the target KPI is a field. Points are
read over the HTTP API a time window at a time, as CSV (``Accept: application/csv``), and
returned as the columns a file gives (``files.read_table``), so that ``ingest.load_panel``
checks them alike; a problem is one line naming the source."""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv

from kpi_forecast.data.files import CELL_ID, TIMESTAMP
from kpi_forecast.data.panel import DataError

SCHEME = "influx"
DEFAULT_PORT = 8086
TIMEOUT_S = 60.0  # of one query: a window of points, or a listing
WINDOW_NS = 30 * 86_400 * 10**9  # points read per query: a month of every cell's


def is_influx(source: object) -> bool:
    """Whether ``source`` (a --data argument) names an InfluxDB rather than a file."""
    return isinstance(source, str) and source.startswith(f"{SCHEME}://")


def _quoted(name: str) -> str:
    """An identifier in InfluxQL: double-quoted, its quotes and backslashes escaped."""
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class InfluxSource:
    host: str
    port: int
    database: str
    measurement: str
    cell: str
    username: str | None = None
    password: str | None = None

    @classmethod
    def parse(cls, url: str, cell_needed: bool = True) -> InfluxSource:
        """The source ``url`` names; DataError (one line) for one that names none. A
        measurement only written to (``cell_needed`` false) needs no cell."""
        parts = urllib.parse.urlsplit(url)
        query = urllib.parse.parse_qs(parts.query)
        database = urllib.parse.unquote(parts.path.strip("/"))
        try:
            port = parts.port or DEFAULT_PORT
        except ValueError:
            raise DataError(f"{url}: not a port: {parts.netloc.rsplit(':', 1)[-1]!r}") from None
        measurement, cell = query.get("measurement", [""])[0], query.get("cell", [""])[0]
        unknown = sorted(set(query) - {"measurement", "cell"})
        if parts.scheme != SCHEME or not parts.hostname or not database or "/" in database:
            raise DataError(f"{url}: not an InfluxDB source; write influx://HOST:PORT/DATABASE"
                            "?measurement=MEASUREMENT&cell=CELL_TAG_OR_FIELD")
        if not measurement or (cell_needed and not cell):
            missing = " and ".join(n for n, v in (("measurement", measurement), ("cell", cell))
                                   if not v)
            raise DataError(f"{url}: name the {missing} (?measurement=...&cell=...)")
        if unknown:
            raise DataError(f"{url}: unknown parameter {unknown[0]!r}; the parameters are "
                            "measurement and cell")
        return cls(parts.hostname, port, database, measurement, cell,
                   urllib.parse.unquote(parts.username) if parts.username else None,
                   urllib.parse.unquote(parts.password) if parts.password else None)

    def __str__(self) -> str:
        """How messages name it: host, database and measurement (never the password)."""
        return (f"influx://{self.host}:{self.port}/{self.database}"
                f"?measurement={self.measurement}" + (f"&cell={self.cell}" if self.cell else ""))

    def write(self, lines: bytes) -> None:
        """Write points (line protocol, nanosecond times); DataError (one line) on failure."""
        self._request("write", {"precision": "ns"}, lines)

    def _get(self, statement: str, csv: bool) -> bytes:
        return self._request("query", {"q": statement, "epoch": "ns"}, None, csv)

    def _request(self, path: str, params: dict[str, str], body: bytes | None,
                 csv: bool = False) -> bytes:
        params = {"db": self.database, **params}
        if self.username is not None:
            params.update(u=self.username, p=self.password or "")
        request = urllib.request.Request(
            f"http://{self.host}:{self.port}/{path}?{urllib.parse.urlencode(params)}",
            data=body, headers={"Accept": "application/csv" if csv else "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
                return answer.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace").strip().strip('"')
            raise DataError(f"{self}: InfluxDB answered {exc.code}: "
                            f"{_first_line(detail) or exc.reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise DataError(f"{self}: cannot reach InfluxDB at {self.host}:{self.port}: "
                            f"{_first_line(str(reason))}") from None

    def _series(self, statement: str) -> list[dict]:
        """The series of a statement's JSON answer; DataError for the error it holds."""
        answer = self._get(statement, csv=False)
        try:
            [result] = json.loads(answer)["results"]
        except (ValueError, KeyError) as exc:
            raise DataError(f"{self}: not an InfluxDB answer to {statement!r}: {exc}") from None
        if "error" in result:
            raise DataError(f"{self}: {result['error']}")
        return result.get("series", [])

    def _names(self, statement: str) -> list[str]:
        return [str(row[0]) for series in self._series(statement) for row in series["values"]]

    def read(self, target: str, span_ns: int | None = None) -> tuple[pd.DataFrame, list[str]]:
        """The timestamp, cell and ``target`` columns of the measurement's points, in time
        order (only those of the ``span_ns`` up to the newest, where given), and the names of
        its other fields."""
        databases = self._names("SHOW DATABASES")
        if self.database not in databases:
            raise DataError(f"{self}: no database {self.database!r} at {self.host}:{self.port}; "
                            f"databases: {', '.join(map(repr, databases)) or 'none'}")
        measurements = self._names("SHOW MEASUREMENTS")
        if self.measurement not in measurements:
            raise DataError(f"{self}: no measurement {self.measurement!r} in database "
                            f"{self.database!r}; measurements: "
                            f"{', '.join(map(repr, measurements)) or 'none'}")
        fields = self._names(f"SHOW FIELD KEYS FROM {_quoted(self.measurement)}")
        tags = self._names(f"SHOW TAG KEYS FROM {_quoted(self.measurement)}")
        if target not in fields or target == self.cell:
            raise DataError(f"{self}: target field {target!r} not found; fields: "
                            f"{', '.join(repr(f) for f in fields if f != self.cell)}")
        if self.cell not in tags and self.cell not in fields:
            raise DataError(f"{self}: cell {self.cell!r} is neither a tag nor a field of "
                            f"{self.measurement!r}; tags: {', '.join(map(repr, tags)) or 'none'}"
                            f"; fields: {', '.join(map(repr, fields))}")
        frame = self._points(target, span_ns)
        return frame, [f for f in fields if f not in (target, self.cell)]

    def _points(self, target: str, span_ns: int | None) -> pd.DataFrame:
        measurement = _quoted(self.measurement)
        first, last = (self._series(f"SELECT {how}({_quoted(target)}) FROM {measurement}")
                       for how in ("first", "last"))
        if not first:
            return pd.DataFrame({TIMESTAMP: pd.Series([], dtype="datetime64[ns, UTC]"),
                                 CELL_ID: pd.Series([], dtype=str), target: []})
        start, end = int(first[0]["values"][0][0]), int(last[0]["values"][0][0]) + 1
        if span_ns is not None:
            start = max(start, end - span_ns)
        tables = []
        for low in range(start, end, WINDOW_NS):
            text = self._get(f"SELECT {_quoted(target)}, {_quoted(self.cell)} FROM "
                             f"{measurement} WHERE time >= {low} AND "
                             f"time < {min(low + WINDOW_NS, end)}", csv=True)
            if text.strip():
                tables.append(self._table(text, target))
        table = pa.concat_tables(tables)
        return pd.DataFrame({
            TIMESTAMP: pd.to_datetime(table.column("time").to_numpy(), unit="ns", utc=True),
            CELL_ID: table.column(self.cell).to_pandas().astype(str),
            target: table.column(target).to_numpy(zero_copy_only=False)})

    def _table(self, text: bytes, target: str) -> pa.Table:
        try:
            return pacsv.read_csv(io.BytesIO(text), convert_options=pacsv.ConvertOptions(
                include_columns=["time", target, self.cell],
                column_types={"time": pa.int64(), target: pa.float64(),
                              self.cell: pa.string()}))
        except (pa.ArrowInvalid, KeyError) as exc:
            raise DataError(f"{self}: cannot read the points of {target!r}: "
                            f"{_first_line(str(exc))}") from None


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0]
