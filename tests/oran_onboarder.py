"""O-RAN SC's xApp onboarder (`dms_cli`) from ../shared/oran/xapp_onboarder, in a venv of its
own with its pinned requirements, as an operator installs it.

The venv is made once per requirements and kept under this venv (``sys.prefix``), as the helm
binary is. The source is copied first: pip builds in the source tree, and ../shared is
read-only. ``dms_cli`` is run with the real ``helm`` first on PATH (it would download a helm
2 otherwise) and a chart repository it reaches at ``CHART_REPO_URL``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

SOURCE = Path(__file__).resolve().parents[1].parent / "shared" / "oran" / "xapp_onboarder"
CACHE = Path(sys.prefix) / "oran-onboarder"


def dms_cli() -> Path:
    """The dms_cli of a venv holding the onboarder; the calling test is skipped (with the
    reason) where ../shared/oran is absent."""
    if not (SOURCE / "setup.py").is_file():
        pytest.skip(f"O-RAN SC's onboarder not present ({SOURCE}; ../shared/oran)")
    pinned = hashlib.sha256((SOURCE / "requirements.txt").read_bytes()
                            + (SOURCE / "setup.py").read_bytes()).hexdigest()[:16]
    venv = CACHE / pinned
    cli, installed = venv / "bin" / "dms_cli", venv / ".installed"
    if installed.is_file():
        return cli
    shutil.rmtree(venv, ignore_errors=True)  # what an interrupted install left
    CACHE.mkdir(parents=True, exist_ok=True)
    # Made where it stays: a venv's scripts name its interpreter by path.
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    with tempfile.TemporaryDirectory(dir=CACHE) as scratch:
        source = Path(scratch) / "xapp_onboarder"
        shutil.copytree(SOURCE, source)
        install = subprocess.run(
            [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check",
             "-r", str(source / "requirements.txt"), str(source)],
            capture_output=True, text=True, timeout=600, check=False)
    if install.returncode != 0:
        shutil.rmtree(venv, ignore_errors=True)
        raise AssertionError(f"installing the onboarder failed: {install.stderr[-2000:]}")
    installed.touch()
    return cli


def run_dms_cli(cli: Path, helm: Path, repository_url: str, workspace: Path, *args: str,
                cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``dms_cli ARGS`` with the real helm first on PATH. dms_cli exits 0 whether or not it
    did what it was asked: callers read its answer, printed as JSON."""
    tools = workspace / "bin"
    tools.mkdir(parents=True, exist_ok=True)
    link = tools / "helm"
    if not link.exists():
        link.symlink_to(helm)
    env = {**os.environ, "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}",
           "CHART_REPO_URL": repository_url, "CHART_WORKSPACE_PATH": str(workspace / "charts"),
           "HTTP_RETRY": "0"}
    return subprocess.run([str(cli), *args], capture_output=True, text=True, timeout=300,
                          env=env, cwd=cwd, check=False)


def answer(done: subprocess.CompletedProcess[str]) -> Any:
    """dms_cli's answer: the JSON document that ends its standard output, or the mapping that
    python-fire prints as ``key: value`` lines where a command returns a dict."""
    out = done.stdout
    if "{" not in out:
        return yaml.safe_load(out)
    start = out.rfind("\n{")
    return json.loads(out[start + 1 if start >= 0 else out.index("{"):])
