"""An interpreter set up as on an air-gapped GPU node: python3 with no site-packages but the
distributions such a node has (torch, numpy, pandas, ONNX Runtime's CPU build, and what they
require), kpi-forecast not installed. Built from this environment's own copies, linked into a
folder that is the only thing on the path besides the standard library."""

from __future__ import annotations

import importlib.metadata as metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

NODE_DISTRIBUTIONS = ("torch", "numpy", "pandas", "onnxruntime")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def gpu_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What ``python -m benchmarks.gpu_check --prepare`` writes for a GPU node; its model (the
    default network, both graphs) also serves the float16 graph's tests."""
    bundle = tmp_path_factory.mktemp("gpu-check") / "bundle"
    done = subprocess.run([sys.executable, "-m", "benchmarks.gpu_check", "--prepare",
                           str(bundle)], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert f"PYTHONPATH={bundle / 'site'} python3 -m benchmarks.gpu_check" in done.stdout
    return bundle


def required(names: tuple[str, ...]) -> set[str]:
    """``names`` and every distribution they require, transitively (no extras)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in seen:
            continue
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue  # a requirement of another platform or Python
        seen.add(name)
        for text in requires:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return seen


def node_site(folder: Path) -> Path:
    """``folder`` holding links to the top-level files of the node's distributions."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in required(NODE_DISTRIBUTIONS):
        distribution = metadata.distribution(name)
        for entry in {Path(str(file)).parts[0] for file in distribution.files or []}:
            source = Path(str(distribution.locate_file(entry)))
            target = folder / entry
            if source.exists() and not target.exists() and not entry.startswith(".."):
                target.symlink_to(source)
    return folder
