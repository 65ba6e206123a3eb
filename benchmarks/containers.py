"""The container images built with podman as docs/images.md says, where no registry or GitHub
is reached: its build blocks run as printed in a copy of the project (with ``../shared``
beside it, as on the build machines), each command timed. The tests (tests/test_container.py)
and the image benchmark (benchmarks/images.py) use the images built so.

podman keeps its images in a storage of this run's own (``home``), configured through
``$CONTAINERS_CONF`` and ``$CONTAINERS_STORAGE_CONF``: runc, the cgroupfs manager and no
default ulimits (this kernel's hybrid cgroups and its rlimits refuse crun's defaults).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.readme import Block, blocks

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
DOC = ROOT / "docs" / "images.md"
TOOLS = ("podman", "runc", "debootstrap")  # Debian's packages of the same names
SERVING, GPU, TRAINING = ("localhost/kpi-forecast:0.1.0", "localhost/kpi-forecast:0.1.0-gpu",
                          "localhost/kpi-forecast-train:0.1.0")
# What the project copy leaves out: what git ignores and nothing a build reads.
NOT_COPIED = (".git", ".venv", "artifacts", "rmr-source", "__pycache__", ".pytest_cache",
              ".ruff_cache", ".hypothesis", ".schemathesis")

CONTAINERS_CONF = """[containers]
default_ulimits = []
[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
"""


def build_blocks() -> list[Block]:
    """docs/images.md's build blocks (those the container tests run), in order."""
    return [b for b in blocks(DOC) if b.run_by == "tests/test_container.py"]


def missing() -> list[str]:
    """What the builds need that this machine lacks: tools, the RMR archive, the torch wheel."""
    lacking = [tool for tool in TOOLS if shutil.which(tool) is None]
    if not list((SHARED / "rmr" / "source").glob("ric-plt-lib-rmr-*.tar.gz")):
        lacking.append(f"RMR's source archive in {SHARED / 'rmr' / 'source'}")
    if not list(Path("/opt/wheels").glob("torch-2.13.0+cpu-*.whl")):
        lacking.append("torch 2.13.0+cpu's wheel in /opt/wheels")
    return lacking


@dataclass
class Podman:
    home: Path  # storage, configuration, the project copy: removed by ``close``
    seconds: dict[str, float] = field(default_factory=dict)  # each build command's time

    def __post_init__(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "containers.conf").write_text(CONTAINERS_CONF)
        (self.home / "storage.conf").write_text(
            f'[storage]\ndriver = "overlay"\ngraphroot = "{self.home / "storage"}"\n'
            f'runroot = "{self.home / "run"}"\n')

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "CONTAINERS_CONF": str(self.home / "containers.conf"),
                "CONTAINERS_STORAGE_CONF": str(self.home / "storage.conf")}

    @property
    def project(self) -> Path:
        """A copy of the project with ``../shared`` beside it, as the doc's commands expect."""
        copy = self.home / "work" / ROOT.name
        if not copy.is_dir():
            shutil.copytree(ROOT, copy, symlinks=True,
                            ignore=shutil.ignore_patterns(*NOT_COPIED))
            (copy.parent / "shared").symlink_to(SHARED)
        return copy

    def build(self) -> None:
        """Every build command of docs/images.md, as printed, timed; a failure raises."""
        for block in build_blocks():
            for command in block.commands:
                started = time.monotonic()
                done = subprocess.run(["bash", "-o", "pipefail", "-c", command],
                                      cwd=self.project, env=self.env, capture_output=True,
                                      text=True, timeout=1800)
                if done.returncode != 0:
                    raise RuntimeError(f"`{command}` exited {done.returncode}:\n"
                                       f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
                self.seconds[command] = time.monotonic() - started

    def __call__(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """``podman ARGS`` in this storage."""
        return subprocess.run(["podman", *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout)

    def size_mb(self, image: str) -> float:
        done = self("image", "inspect", "--format", "{{.Size}}", image)
        return int(done.stdout.strip()) / 1e6

    def close(self) -> None:
        """Remove the images and the storage (overlay mounts included)."""
        self("system", "reset", "--force", timeout=300)
        shutil.rmtree(self.home, ignore_errors=True)
