"""A model fetched at start from where the descriptor says (``controls.modelUrl``), for a pod
that mounts none, such as the one of the chart ``dms_cli`` builds: a ``.tar.gz`` of a model
directory (``kpi-forecast k8s package`` writes one, the chart's init container unpacks the
same), from an http(s) URL or a file path, unpacked into ``modelDir``.

The URL it came from is kept beside the model (``SOURCE_FILE``), so a restart with the same
URL serves what is there and a new URL fetches anew. The archive is unpacked into a folder
of its own first and its files moved in with ``metadata.json`` last: an interrupted fetch
leaves no directory that looks like a model.
"""

from __future__ import annotations

import logging
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

import httpx

from kpi_forecast.model.artifact import METADATA_FILE, ArtifactError

log = logging.getLogger(__name__)

SOURCE_FILE = ".model-url"  # beside the model: the URL it was fetched from
TIMEOUT_S = 30.0


def fetched_from(model_dir: str | Path) -> str | None:
    """The URL the model in ``model_dir`` was fetched from (None: not fetched, or no model)."""
    directory = Path(model_dir)
    if not (directory / METADATA_FILE).is_file():
        return None
    try:
        return (directory / SOURCE_FILE).read_text().strip()
    except OSError:
        return None


async def fetch(url: str, model_dir: str | Path) -> None:
    """Download (or copy) the archive at ``url`` and unpack it into ``model_dir``. Raises
    OSError (the folder cannot be written), httpx.HTTPError or ArtifactError (not an archive
    of a model directory)."""
    directory = Path(model_dir)
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=directory, prefix=".fetching-") as scratch:
        archive = Path(scratch) / "model.tar.gz"
        if url.startswith(("http://", "https://")):
            async with (httpx.AsyncClient(timeout=TIMEOUT_S, follow_redirects=True) as client,
                        client.stream("GET", url) as response):
                response.raise_for_status()
                with archive.open("wb") as sink:
                    async for chunk in response.aiter_bytes(1 << 20):
                        sink.write(chunk)
        else:
            shutil.copyfile(url.removeprefix("file://"), archive)
        staged = Path(scratch) / "model"
        try:
            with tarfile.open(archive, "r:*") as unpacking:
                unpacking.extractall(staged, filter="data")
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise ArtifactError(f"{url}: not a .tar.gz of a model directory ({exc})") from None
        if not (staged / METADATA_FILE).is_file():
            raise ArtifactError(f"{url}: the archive holds no {METADATA_FILE} at its top")
        (directory / METADATA_FILE).unlink(missing_ok=True)  # no model while files change
        for path in sorted(staged.iterdir(), key=lambda p: p.name == METADATA_FILE):
            target = directory / path.name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            os.replace(path, target)
    (directory / SOURCE_FILE).write_text(url + "\n")
    log.info("model fetched from %s into %s", url, directory)
