"""The model fetched at start from controls.modelUrl, as an xApp whose chart mounts no model
(the one dms_cli builds) finds it: an archive `kpi-forecast k8s package` wrote, over HTTP from
a real server or from a file; the xApp unready, saying why, until it is there."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import http.server
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.ports import free_port
from kpi_forecast.cli.deployment import package
from kpi_forecast.xapp.serving import model_source
from tests.xapp_helpers import descriptor, make_model, running


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("published")
    package(make_model(folder / "model", version="fetched"), folder / "fetched.tar.gz")
    return folder / "fetched.tar.gz"


@contextlib.contextmanager
def serving(folder: Path) -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on ``folder``: its base URL and the paths asked for."""
    asked: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            asked.append(self.path)

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", free_port()), functools.partial(Handler, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", asked
    finally:
        server.shutdown()
        server.server_close()


async def ready_answer(client) -> tuple[int, dict]:
    answer = await client.get("/ric/v1/health/ready")
    return answer.status_code, answer.json()


def test_the_model_is_fetched_once_from_its_url(archive: Path, tmp_path: Path) -> None:
    model_dir = tmp_path / "model"  # absent, as in an image that carries none

    async def go() -> None:
        with serving(archive.parent) as (base, asked):
            url = f"{base}/{archive.name}"
            desc = descriptor(tmp_path, model_dir, modelUrl=url)
            async with running(desc) as client:
                assert (await ready_answer(client))[1]["model_version"] == "fetched"
                # A new URL is fetched at the next start, not under a serving model.
                moved = descriptor(tmp_path / "moved", model_dir, modelUrl=f"{url}?v=2")
                with pytest.raises(ValueError, match="controls.modelUrl changes take effect "
                                                     "at the next start"):
                    client.app.state.components.apply_descriptor(moved)
            assert asked.count(f"/{archive.name}") == 1
            assert model_source.fetched_from(model_dir) == url
            async with running(desc) as client:  # a restart serves what was fetched
                assert (await ready_answer(client))[1]["model_version"] == "fetched"
            assert asked.count(f"/{archive.name}") == 1

    asyncio.run(go())


def test_unready_saying_why_until_the_model_is_published(
        archive: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    published = tmp_path / "published"
    published.mkdir()
    urls: list[str] = []

    async def go() -> None:
        with serving(published) as (base, _):
            url = f"{base}/model.tar.gz"
            urls.append(url)
            desc = descriptor(tmp_path, tmp_path / "model", modelUrl=url)
            async with running(desc, wait_ready=False) as client:
                for _ in range(100):
                    if "404" in caplog.text:
                        break
                    await asyncio.sleep(0.05)
                status, answer = await ready_answer(client)
                assert status == 503
                assert answer["error"] == ("models not ready yet: model: LOADING (fetching "
                                           f"the model from {url})")
                (published / "model.tar.gz").write_bytes(archive.read_bytes())
                for _ in range(200):
                    if (await ready_answer(client))[0] == 200:
                        break
                    await asyncio.sleep(0.05)
                assert (await ready_answer(client))[1]["model_version"] == "fetched"

    with caplog.at_level(logging.WARNING, logger="kpi_forecast.xapp.serving.model_holder"):
        asyncio.run(go())
    # Each failed attempt is logged with its type and reason.
    assert (f"fetching the model from {urls[0]}: HTTPStatusError: Client error '404 File not "
            "found'") in caplog.text


def test_a_file_path_and_an_archive_that_is_no_model(archive: Path, tmp_path: Path) -> None:
    async def go() -> None:
        target = tmp_path / "from-file"
        await model_source.fetch(str(archive), target)
        assert model_source.fetched_from(target) == str(archive)
        assert (target / "model.onnx").is_file()
        bad = tmp_path / "bad.tar.gz"
        bad.write_bytes(b"not an archive")
        with pytest.raises(model_source.ArtifactError, match="not a .tar.gz of a model"):
            await model_source.fetch(str(bad), tmp_path / "other")
        # What was there stays a model: a failed fetch leaves no half-unpacked directory.
        with pytest.raises(model_source.ArtifactError):
            await model_source.fetch(str(bad), target)
        assert model_source.fetched_from(target) == str(archive)

    asyncio.run(go())
