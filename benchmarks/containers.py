"""The container images built with podman as docs/images.md says, where no registry or GitHub
is reached: its build blocks run as printed in a copy of the project (with ``../shared``
beside it, as on the build machines), each command timed. The tests (tests/test_container.py)
and the image benchmark (benchmarks/images.py) use the images built so.

podman keeps its images in a storage of this run's own (``home``), configured through
``$CONTAINERS_CONF`` and ``$CONTAINERS_STORAGE_CONF``: runc, the cgroupfs manager and no
default ulimits (this kernel's hybrid cgroups and its rlimits refuse crun's defaults).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
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


def build_blocks(root: Path = ROOT) -> list[Block]:
    """docs/images.md's build blocks (those the container tests run), in order: this tree's,
    or those of the tree at ``root``."""
    return [b for b in blocks(root / DOC.relative_to(ROOT))
            if b.run_by == "tests/test_container.py"]


def missing() -> list[str]:
    """What the builds need that this machine lacks: tools, the RMR archive, the torch wheel."""
    lacking = [tool for tool in TOOLS if shutil.which(tool) is None]
    if not list((SHARED / "rmr" / "source").glob("ric-plt-lib-rmr-*.tar.gz")):
        lacking.append(f"RMR's source archive in {SHARED / 'rmr' / 'source'}")
    if not list(Path("/opt/wheels").glob("torch-2.13.0+cpu-*.whl")):
        lacking.append("torch 2.13.0+cpu's wheel in /opt/wheels")
    return lacking


def lower_autogroup(pid: int, niceness: int) -> None:
    """Give the scheduling autogroup of ``pid``'s session ``niceness`` (sched(7)); nothing where
    the kernel has no autogroups."""
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/autogroup").write_text(str(niceness))


@dataclass
class Podman:
    home: Path  # storage, configuration, the project copy: removed by ``close``
    root: Path = ROOT  # the tree whose images are built (another: a revision compared with)
    seconds: dict[str, float] = field(default_factory=dict)  # each build command's time
    _building: threading.Thread | None = None
    _current: subprocess.Popen | None = None
    _failure: BaseException | None = None
    _cancelled: threading.Event = field(default_factory=threading.Event)

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
            shutil.copytree(self.root, copy, symlinks=True,
                            ignore=shutil.ignore_patterns(*NOT_COPIED))
            (copy.parent / "shared").symlink_to(SHARED)
        return copy

    def build(self, niceness: int = 0, serving_only: bool = False) -> None:
        """Every build command of docs/images.md, as printed, timed (``serving_only``: its first
        block's, the base and the serving image); a failure raises.
        ``niceness``: the builds' CPU priority (``nice``), lowered where they run beside other
        work that must keep its pace; their I/O then waits for an idle disk (``ionice``), and
        their RUN steps run in podman's process rather than in a container of their own
        (buildah's chroot isolation): runc puts a container in a CPU cgroup of its own, which
        shares the CPU with the rest as an equal whatever its processes' niceness. Each command
        runs in a session of its own, which the kernel's autogroup scheduling (where enabled)
        weighs as an equal of every other session whatever its processes' niceness, so the
        session's own niceness is lowered too."""
        priority = ["nice", "-n", str(niceness)]
        env = self.env
        if niceness:
            env = {**env, "BUILDAH_ISOLATION": "chroot"}
            if shutil.which("ionice"):
                priority = ["ionice", "-c", "3", *priority]
        chosen = build_blocks(self.root)
        for block in chosen[:1] if serving_only else chosen:
            for command in block.commands:
                if self._cancelled.is_set():
                    raise RuntimeError("the image builds were cancelled")
                started = time.monotonic()
                # Its own process group: a cancel stops podman and whatever it started.
                self._current = subprocess.Popen(
                    [*priority, "bash", "-o", "pipefail", "-c", command],
                    cwd=self.project, env=env, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, text=True, start_new_session=True)
                if niceness:
                    lower_autogroup(self._current.pid, niceness)
                stdout, stderr = self._current.communicate(timeout=1800)
                if self._current.returncode != 0:
                    raise RuntimeError(f"`{command}` exited {self._current.returncode}:\n"
                                       f"{stdout[-3000:]}\n{stderr[-3000:]}")
                self.seconds[command] = time.monotonic() - started

    def build_in_background(self) -> None:
        """Start ``build`` at the lowest CPU and I/O priority in a thread: it takes minutes, mostly
        downloads and unpacking, which the test suite's other tests can run beside;
        ``wait_built`` takes its outcome, ``cancel`` stops it."""

        def run() -> None:
            try:
                self.build(niceness=19)
            except BaseException as exc:  # handed to wait_built's caller
                self._failure = exc

        self._building = threading.Thread(target=run, name="image-builds", daemon=True)
        self._building.start()

    def wait_built(self) -> None:
        """Wait for the background build; raise what it raised."""
        if self._building is not None:
            self._building.join()
        if self._failure is not None:
            raise self._failure

    def cancel(self) -> None:
        """Stop a background build that nobody will use (its command's whole process group)."""
        self._cancelled.set()
        current = self._current
        if current is not None and current.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(current.pid, signal.SIGTERM)
        if self._building is not None:
            self._building.join()

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
