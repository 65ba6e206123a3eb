"""Crash-consistent artifacts: a training killed (SIGKILL) or out of disk (RLIMIT_FSIZE, as a
full volume answers) while it writes its model or a checkpoint. The runtimes take a complete
model or refuse with one line; a running xApp keeps serving the old one; a rerun never
resumes from a torn checkpoint."""

from __future__ import annotations

import json
import os
import resource
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from benchmarks.ports import free_port
from kpi_forecast.data.synthetic import generate
from kpi_forecast.model.artifact import (
    INT8_ONNX_FILE,
    ONNX_FILE,
    WEIGHTS_FILE,
    load_metadata,
    verified_graph,
)
from kpi_forecast.training.checkpoint import CHECKPOINT_FILE
from tests.faults.conftest import Report
from tests.processes import BIN, Server, answers, running
from tests.waiting import until
from tests.xapp_helpers import write_descriptor

pytestmark = [pytest.mark.faults, pytest.mark.slow]

TRAINED_WITHIN_S = 300.0  # a few epochs of a small panel, and the export
STARTS_WITHIN_S = 60.0  # an xApp's start: imports and the model's load


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("artifacts") / "cells.csv"
    generate(n_cells=3, days=21, seed=5, start="2024-03-04", tz="UTC",
             missing=False).to_csv(path, index=False)
    return path


def train_command(data: Path, out: Path, seed: int, epochs: int = 2) -> list[str]:
    return [str(BIN / "kpi-forecast"), "train", "--data", str(data), "--target", "prb_util",
            "--out", str(out), "--context", "7D", "--max-epochs", str(epochs), "--seed",
            str(seed), "--no-gpu-graph", "--quiet"]


def train(data: Path, out: Path, seed: int, **run: object) -> subprocess.CompletedProcess:
    return subprocess.run(train_command(data, out, seed), capture_output=True, text=True,
                          timeout=TRAINED_WITHIN_S, **run)


def one_line_error(done: subprocess.CompletedProcess, names: Path) -> str:
    """A refusal as the project promises it: exit 2, one line naming the file, no traceback."""
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("kpi-forecast: error: ") and str(names) in line, done.stderr[-2000:]
    return line


def files(model_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in model_dir.iterdir() if p.is_file()}


@pytest.fixture(scope="module")
def trained(data: Path) -> Path:
    model_dir = data.parent / "trained"
    done = train(data, model_dir, seed=0)
    assert done.returncode == 0, done.stderr[-3000:]
    return model_dir


@pytest.fixture
def old_model(trained: Path, tmp_path: Path) -> Path:
    """A complete model directory, trained before the fault (a copy, each test its own)."""
    return Path(shutil.copytree(trained, tmp_path / "models" / "prb"))


def wait_for_file(folder: Path, pattern: str, process: subprocess.Popen, poll_s: float) -> None:
    deadline = time.monotonic() + TRAINED_WITHIN_S
    while not any(folder.glob(pattern)):
        assert process.poll() is None, f"the training ended before {pattern} was written"
        assert time.monotonic() < deadline, f"no {pattern} within {TRAINED_WITHIN_S:.0f} s"
        time.sleep(poll_s)


def test_a_training_killed_while_it_exports_leaves_a_model_refused_with_one_line(
        data: Path, old_model: Path, tmp_path: Path, report: Report) -> None:
    old = load_metadata(old_model)
    int8 = (old_model / INT8_ONNX_FILE).read_bytes()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    config = write_descriptor(tmp_path / "config", old_model)
    serve = [str(BIN / "kpi-forecast"), "serve", "--config", str(config), "--host", "127.0.0.1",
             "--port", str(port)]
    with running(serve, answers(f"{url}/ric/v1/health/ready"), tmp_path / "xapp.log"):
        # Another training into the served directory, killed as soon as its float32 graph is
        # in place (a new file under the name), while it writes the int8 graph: metadata.json
        # is still the old one.
        graph = (old_model / ONNX_FILE).stat().st_ino
        training = subprocess.Popen(train_command(data, old_model, seed=1),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + TRAINED_WITHIN_S
        while (old_model / ONNX_FILE).stat().st_ino == graph:
            assert training.poll() is None and time.monotonic() < deadline
            time.sleep(0.0005)
        training.send_signal(signal.SIGKILL)
        training.wait(10)
        killed = time.monotonic()
        assert load_metadata(old_model).model_version == old.model_version

        # Every runtime refuses the mix with one line; the running xApp keeps the old model.
        reload = httpx.post(f"{url}/v1/model/reload", json={"model_dir": str(old_model)},
                            timeout=60)
        assert reload.status_code == 422 and ONNX_FILE in reload.json()["error"], reload.text
        assert httpx.get(f"{url}/v1/model").json()["model_version"] == old.model_version
        forecast = httpx.post(f"{url}/v1/forecast", timeout=10, json={
            "cell_id": "c1", "start": "2024-03-01T00:00:00Z", "freq": "1h",
            "values": [float(10 + h % 24) for h in range(old.context)]})
        assert forecast.json()["model_version"] == old.model_version
        refused = time.monotonic() - killed
    # A fresh `serve` on the mix stays unready, saying why in one line and on its probe.
    fresh_port = free_port()
    fresh = Server([str(BIN / "kpi-forecast"), "serve", "--model", str(old_model), "--host",
                    "127.0.0.1", "--port", str(fresh_port)], tmp_path / "fresh.log", tmp_path,
                   None)

    def refused_on_the_probe() -> bool:
        try:
            probe = httpx.get(f"http://127.0.0.1:{fresh_port}/ric/v1/health/ready", timeout=2)
        except httpx.TransportError:
            return False
        return probe.status_code == 503 and "model load rejected" in probe.json()["error"]

    fresh.wait_until(refused_on_the_probe, STARTS_WITHIN_S)
    assert ONNX_FILE in httpx.get(f"http://127.0.0.1:{fresh_port}/ric/v1/health/ready").text
    fresh.stop()
    rejected = [line for line in fresh.log.splitlines() if "model load rejected" in line]
    assert len(rejected) == 1 and "sha256" in rejected[0], fresh.log[-2000:]
    one_line_error(subprocess.run(
        [str(BIN / "kpi-forecast"), "predict", "--model", str(old_model), "--data", str(data),
         "--out", str(tmp_path / "forecast.csv")], capture_output=True, text=True, timeout=120),
        old_model / ONNX_FILE)
    one_line_error(subprocess.run(
        [str(BIN / "kpi-forecast"), "export", "--model", str(old_model)], capture_output=True,
        text=True, timeout=120), old_model / WEIGHTS_FILE)
    # The int8 graph it was writing is under a hidden name, never the model file's.
    assert (old_model / INT8_ONNX_FILE).read_bytes() == int8
    report.row(fault="Training killed while it exports", injected="SIGKILL to `kpi-forecast "
               "train` writing into the served model directory, mid int8 graph",
               load="an xApp serving that directory", lost="nothing: the xApp keeps the old "
               "model; serve, reload, predict and export refuse the mix with one line naming "
               "the file",
               recovery_s=refused, recovered="the reload refused, the old model answering")


def test_a_full_disk_while_the_model_is_written_fails_with_one_line_keeping_the_old_graph(
        data: Path, old_model: Path, report: Report) -> None:
    """The limit comes from the old model's own files: above its weights, below its graph."""
    before = files(old_model)
    weights, graph = len(before[WEIGHTS_FILE]), len(before[ONNX_FILE])
    assert weights < graph, "this fault needs weights smaller than the graph"
    limit = (weights + graph) // 2
    checkpoint = old_model / CHECKPOINT_FILE
    training = subprocess.Popen(train_command(data, old_model, seed=2), text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # The disk fills once training is over (its last checkpoint removed): the export's
    # writes fail from then on.
    wait_for_file(old_model, CHECKPOINT_FILE, training, poll_s=0.01)
    until(lambda: not checkpoint.exists(), TRAINED_WITHIN_S, "training never ended")
    resource.prlimit(training.pid, resource.RLIMIT_FSIZE, (limit, limit))
    full = time.monotonic()
    stdout, stderr = training.communicate(timeout=TRAINED_WITHIN_S)
    done = subprocess.CompletedProcess(training.args, training.returncode, stdout, stderr)
    line = one_line_error(done, old_model / ONNX_FILE)
    assert "File too large" in line
    took = time.monotonic() - full
    after = files(old_model)
    assert after[ONNX_FILE] == before[ONNX_FILE]
    assert after["metadata.json"] == before["metadata.json"]
    verified_graph(old_model, load_metadata(old_model))  # the old model, whole
    assert not any(name.startswith(".") for name in after), sorted(after)
    report.row(fault="Disk full while the model is written", injected="RLIMIT_FSIZE on `kpi-"
               "forecast train` once training is over, between its weights' size and its "
               "graph's", load="a complete model in the same directory", lost="nothing: the "
               "old graph and metadata as they were; one line naming model.onnx, exit 2",
               recovery_s=took, recovered="the training's exit, from the disk filling")


def test_a_full_disk_at_a_checkpoint_fails_with_one_line_and_leaves_nothing_torn(
        data: Path, old_model: Path, tmp_path: Path, report: Report) -> None:
    """The limit comes from the model's weights: a checkpoint holds them, their average and
    the optimiser's two moments, so it is over three times their size."""
    limit = 2 * len((old_model / WEIGHTS_FILE).read_bytes())
    out = tmp_path / "new"

    def full_disk() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    started = time.monotonic()
    done = train(data, out, seed=3, preexec_fn=full_disk)
    line = one_line_error(done, out / CHECKPOINT_FILE)
    assert "File too large" in line
    took = time.monotonic() - started
    # Nothing torn is left for a rerun to resume from: it starts clean.
    assert [p.name for p in out.iterdir()] == [], sorted(p.name for p in out.iterdir())
    report.row(fault="Disk full at a checkpoint", injected="RLIMIT_FSIZE on `kpi-forecast "
               "train` below a checkpoint's size", load="training", lost="the run: one line "
               "naming checkpoint.pt, exit 2, no file left for a rerun to resume from",
               recovery_s=took, recovered="the training's exit")


def test_a_checkpoint_that_does_not_match_its_checksum_is_not_resumed_from(
        tmp_path: Path) -> None:
    from kpi_forecast.training.checkpoint import Checkpoint

    saver = Checkpoint(tmp_path / CHECKPOINT_FILE, Checkpoint.key_of(run="x"))
    saver.save({"epoch": 3, "weights": list(range(1000))})
    assert saver.load()["epoch"] == 3
    damaged = bytearray(saver.path.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    saver.path.write_bytes(bytes(damaged))
    assert saver.load() is None
    saver.path.write_bytes(bytes(damaged[: len(damaged) // 2]))  # torn
    assert saver.load() is None
    assert os.listdir(tmp_path) == [CHECKPOINT_FILE]


class Creations:
    """inotify on a folder: each file created in it, as it is created (before it is written)."""

    IN_CREATE = 0x100

    def __init__(self, folder: Path) -> None:
        import ctypes

        self._libc = ctypes.CDLL(None, use_errno=True)
        self._fd = self._libc.inotify_init()
        assert self._fd >= 0, ctypes.get_errno()
        watch = self._libc.inotify_add_watch(self._fd, str(folder).encode(), self.IN_CREATE)
        assert watch >= 0, ctypes.get_errno()

    def names(self, bound_s: float) -> Iterator[str]:
        """Each created file's name, as the kernel reports it, for ``bound_s`` at most."""
        deadline = time.monotonic() + bound_s
        while True:
            ready, _, _ = select.select([self._fd], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, f"no file created within {bound_s:.0f} s"
            events = os.read(self._fd, 4096)
            offset = 0
            while offset < len(events):  # struct inotify_event: wd, mask, cookie, len, name
                length = int.from_bytes(events[offset + 12:offset + 16], "little")
                yield events[offset + 16:offset + 16 + length].rstrip(b"\0").decode()
                offset += 16 + length

    def close(self) -> None:
        os.close(self._fd)


def test_a_training_killed_while_it_writes_a_checkpoint_resumes_from_the_last_whole_one(
        data: Path, tmp_path: Path, report: Report) -> None:
    out = tmp_path / "run"
    out.mkdir()
    creations = Creations(out)
    training = subprocess.Popen(train_command(data, out, seed=4, epochs=2),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # The second (last) checkpoint's file is created, then written: killed in between.
        partial = f".{CHECKPOINT_FILE}.partial-{training.pid}"
        writes = 0
        for name in creations.names(TRAINED_WITHIN_S):
            writes += name == partial
            if writes == 2:
                break
        training.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        training.wait(10)
    finally:
        creations.close()
        if training.poll() is None:
            training.kill()
    assert (out / partial).exists(), "the kill came after the write: nothing torn to test"
    rerun = subprocess.run(train_command(data, out, seed=4, epochs=2), capture_output=True,
                           text=True, timeout=TRAINED_WITHIN_S)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "after epoch 1" in rerun.stderr, rerun.stderr[-3000:]  # the whole one, not the torn
    assert json.loads((out / "metadata.json").read_text())["training"]["epochs"] == 2
    report.row(fault="Training killed at a checkpoint", injected="SIGKILL to `kpi-forecast "
               "train` between the creation of its second checkpoint's file and its rename",
               load="training", lost="the epoch under way: the rerun resumes after epoch 1, "
               "from the whole checkpoint", recovery_s=time.monotonic() - killed,
               recovered="the rerun's end, from the kill")
