"""A stand-in for ChartMuseum, the chart repository O-RAN SC's onboarder uploads xApp charts to.

It answers the calls the onboarder makes (its repo_manager.py), in ChartMuseum's shapes: the
health GET of the root, GET /index.yaml, POST /api/charts (a packaged chart as the body; 201,
409 when that name and version are there already), DELETE /api/charts/{name}/{version},
GET /api/charts[/{name}] and GET /charts/{name}-{version}.tgz. Charts are kept in memory.
"""

from __future__ import annotations

import contextlib
import io
import json
import tarfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import yaml


class ChartRepository:
    def __init__(self) -> None:
        self.charts: dict[tuple[str, str], bytes] = {}  # (name, version) -> the .tgz
        self._lock = threading.Lock()

    def versions(self, name: str | None = None) -> dict[str, list[dict[str, Any]]]:
        with self._lock:
            keys = sorted(self.charts)
        entries: dict[str, list[dict[str, Any]]] = {}
        for chart, version in keys:
            if name is None or chart == name:
                entries.setdefault(chart, []).append(
                    {"name": chart, "version": version,
                     "urls": [f"charts/{chart}-{version}.tgz"]})
        return entries

    def upload(self, package: bytes) -> tuple[int, dict[str, Any]]:
        try:
            with tarfile.open(fileobj=io.BytesIO(package), mode="r:gz") as archive:
                member = next(m for m in archive.getmembers()
                              if m.name.count("/") == 1 and m.name.endswith("/Chart.yaml"))
                chart = yaml.safe_load(archive.extractfile(member))  # type: ignore[arg-type]
        except (tarfile.TarError, StopIteration, yaml.YAMLError) as exc:
            return 400, {"error": f"not a chart package: {exc}"}
        key = (str(chart["name"]), str(chart["version"]))
        with self._lock:
            if key in self.charts:
                return 409, {"error": "file already exists"}
            self.charts[key] = package
        return 201, {"saved": True}

    def delete(self, name: str, version: str) -> tuple[int, dict[str, Any]]:
        with self._lock:
            if self.charts.pop((name, version), None) is None:
                return 404, {"error": f"remove {name}-{version}.tgz: no such file or directory"}
        return 200, {"deleted": True}

    def package(self, file_name: str) -> bytes | None:
        with self._lock:
            for (name, version), package in self.charts.items():
                if file_name == f"{name}-{version}.tgz":
                    return package
        return None


def _handler(repository: ChartRepository) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
            pass

        def _answer(self, status: int, body: Any, content_type: str = "application/json"
                    ) -> None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (the base's name)
            parts = self.path.strip("/").split("/")
            if self.path == "/":
                self._answer(200, {"health": "OK"})
            elif self.path == "/index.yaml":
                index = {"apiVersion": "v1", "entries": repository.versions()}
                self._answer(200, yaml.safe_dump(index).encode(), "application/x-yaml")
            elif parts[:2] == ["api", "charts"] and len(parts) <= 3:
                found = repository.versions(parts[2] if len(parts) == 3 else None)
                if len(parts) == 3:
                    self._answer(200, found[parts[2]]) if found else self._answer(
                        404, {"error": "chart not found"})
                else:
                    self._answer(200, found)
            elif parts[0] == "charts" and len(parts) == 2 and (
                    package := repository.package(parts[1])) is not None:
                self._answer(200, package, "application/x-tar")
            else:
                self._answer(404, {"error": "not found"})

        def do_POST(self) -> None:  # noqa: N802
            if self.path != "/api/charts":
                return self._answer(404, {"error": "not found"})
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self._answer(*repository.upload(body))

        def do_DELETE(self) -> None:  # noqa: N802
            parts = self.path.strip("/").split("/")
            if parts[:2] != ["api", "charts"] or len(parts) != 4:
                return self._answer(404, {"error": "not found"})
            self._answer(*repository.delete(parts[2], parts[3]))

    return Handler


@contextlib.contextmanager
def chart_repository(port: int) -> Iterator[ChartRepository]:
    """A running repository on 127.0.0.1:port."""
    repository = ChartRepository()
    server = ThreadingHTTPServer(("127.0.0.1", port), _handler(repository))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield repository
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
