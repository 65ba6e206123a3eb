"""The images built and run for real: podman builds them as docs/images.md says (a Debian base
from debootstrap, RMR's source from its archive, torch from the machine's wheel), then the
serving image runs as a user runs it (user 10001, read-only root, a model mounted, E2 over RMR
from a mock node outside the container, SIGTERM), the training image trains on the sample,
and the GPU variant carries ONNX Runtime's CUDA provider and NVIDIA's libraries."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from benchmarks.containers import (
    GPU,
    SERVING,
    TOOLS,
    TRAINING,
    Podman,
    build_blocks,
    missing,
)
from benchmarks.ports import free_port
from kpi_forecast.data.synthetic import generate
from tests import image_builds
from tests.processes import BIN, answers, running
from tests.system_tools import system_tool
from tests.xapp_helpers import CONTEXT, make_model, write_descriptor

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "helm" / "kpi-forecast"
MEASUREMENT = "RRU.PrbUsedDl"
SAMPLE = "/opt/venv/lib/python3.11/site-packages/kpi_forecast/data/sample/cells_hourly.csv.gz"

# The builds take minutes (most of it pip inside them, and the GPU variant's NVIDIA wheels):
# more than the suite's per-test bound, which the first test's set-up counts them in.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]


@pytest.fixture(scope="session")
def podman() -> Iterator[Podman]:
    """The engine whose images were built in the background since collection
    (tests/image_builds.py)."""
    for tool in TOOLS:
        system_tool(tool)
    lacking = missing()
    if lacking:
        pytest.skip(f"the image builds need {', '.join(lacking)}")
    try:
        yield image_builds.built()
    finally:
        image_builds.close()


def in_image(podman: Podman, image: str, script: str) -> subprocess.CompletedProcess[str]:
    return podman("run", "--rm", "--network=none", "--entrypoint", "sh", image, "-c", script)


def test_the_images_build_as_docs_images_md_says(podman: Podman) -> None:
    assert list(podman.seconds) == [c for b in build_blocks() for c in b.commands]
    for image in (SERVING, GPU, TRAINING):
        assert podman("image", "exists", image).returncode == 0, image


def test_the_serving_image_holds_the_xapp_and_no_torch_or_compilers(podman: Podman) -> None:
    done = in_image(podman, SERVING, (
        "id -u; command -v gcc cc g++ cmake git make || true; ldconfig -p | grep -c librmr_si;"
        " python -c 'import importlib.util as u; print(u.find_spec(\"torch\") is None,"
        " u.find_spec(\"kubernetes\") is None)';"
        " python -c 'from kpi_forecast.xapp.descriptor import config_file as c;"
        " print(c.load_descriptor(c.descriptor_path(environ={})).controls.model_dir)'"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["10001", "2", "True", "True", "/opt/ric/model"], done.stdout
    (image,) = json.loads(podman("image", "inspect", SERVING).stdout)
    config = image["Config"]
    assert config["User"] == "10001:10001" and config["StopSignal"] == "SIGTERM"
    assert config["Entrypoint"] == ["kpi-forecast", "serve"]
    assert "/ric/v1/health/alive" in " ".join(image["Healthcheck"]["Test"])


def test_the_serving_image_runs_as_a_user_runs_it(
        podman: Podman, tmp_path: Path, rmr_library: Path) -> None:
    model_dir = make_model(tmp_path / "model")
    node_port, rmr_port, http_port = free_port(), free_port(), free_port()
    node_url = f"http://127.0.0.1:{node_port}"
    config = write_descriptor(tmp_path / "config", Path("/opt/ric/model"), e2={
        "enabled": True, "port": rmr_port, "submgrUrl": f"{node_url}/ric/v1",
        "e2mgrUrl": f"{node_url}/v1", "kpis": {"kpi": {"measurement": MEASUREMENT}}})
    data = tmp_path / "cells.csv"
    generate(n_cells=4, days=9, seed=1, start="2024-03-04", tz="UTC").to_csv(data, index=False)
    e2sim = [str(BIN / "kpi-forecast"), "e2sim", "--data", str(data), "--kpi",
             f"prb_util={MEASUREMENT}", "--listen", f"127.0.0.1:{node_port}", "--speed", "0",
             "--rmr-port", str(free_port())]
    name = f"kpi-forecast-{http_port}"
    serve = ["podman", "run", "--rm", "--name", name, "--network=host", "--read-only",
             "--tmpfs", "/tmp", "-v", f"{model_dir}:/opt/ric/model:ro",
             "-v", f"{config.parent}:/opt/ric/config:ro",
             "-e", "CONFIG_FILE=/opt/ric/config/config-file.json",
             SERVING, "--host", "127.0.0.1", "--port", str(http_port)]
    url = f"http://127.0.0.1:{http_port}"
    with (running(e2sim, answers(f"{node_url}/v1/nodeb/states"), tmp_path / "e2sim.log"),
          running(serve, answers(f"{url}/ric/v1/health/ready"), tmp_path / "xapp.log",
                  env=podman.env, seconds=120) as xapp):
        assert podman("exec", name, "id", "-u").stdout.strip() == "10001"
        wrote = podman("exec", name, "sh", "-c", "touch /opt/ric/x")
        assert wrote.returncode != 0 and "Read-only file system" in wrote.stderr
        assert podman("exec", name, "sh", "-c", "touch /tmp/x").returncode == 0
        request = {"cell_id": "c1", "start": "2024-01-01T00:00:00+00:00", "freq": "1h",
                   "values": [float(i % 24) for i in range(CONTEXT)]}
        answer = httpx.post(f"{url}/v1/forecast", json=request, timeout=30)
        assert answer.status_code == 200 and answer.json()["source"] == "model", answer.text
        held = {}
        for _ in range(600):  # the node's reports, over RMR into the container
            held = httpx.get(f"{url}/v1/cells", timeout=5).json()
            if held["count"] == 4 and all(c["steps_held"] >= CONTEXT for c in held["cells"]):
                break
            time.sleep(0.1)
        assert held["count"] == 4, (held, xapp.log[-3000:])
        cell = held["cells"][0]["cell_id"]
        forecast = httpx.get(f"{url}/v1/cells/{cell}/forecast", timeout=30)
        assert forecast.status_code == 200, forecast.text
    # running() sent SIGTERM to `podman run`, which hands it to the xApp, and checked that it
    # exited 0 within 5 s.
    assert "Traceback" not in xapp.log, xapp.log[-3000:]


def test_the_charts_default_image_is_the_one_built() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())["image"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert values["tag"] == ""  # the chart's appVersion, "-gpu" with gpu.enabled
    built, gpu = SERVING.rsplit("/", 1)[1], GPU.rsplit("/", 1)[1]
    assert f"{values['repository']}:{chart['appVersion']}" == built
    assert f"{values['repository']}:{chart['appVersion']}-gpu" == gpu


def test_the_training_image_trains_on_the_sample(podman: Podman, tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir(mode=0o777)
    workspace.chmod(0o777)  # the image's user, 10001, writes there
    done = podman("run", "--rm", "--network=none", "-v", f"{workspace}:/workspace",
                  TRAINING, "train", "--data", SAMPLE, "--target", "traffic_mb", "--out",
                  "model", "--max-minutes", "0.5", "--quiet", timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    meta = json.loads((workspace / "model" / "metadata.json").read_text())
    assert meta["target"] == "traffic_mb"
    assert (workspace / "model" / "model.onnx").is_file()
    torch = in_image(podman, TRAINING, "python -c 'import torch; print(torch.__version__)'")
    assert torch.stdout.strip() == "2.13.0+cpu"


def test_the_gpu_variant_carries_the_cuda_provider_and_libraries(podman: Podman) -> None:
    done = in_image(podman, GPU, (
        "python -c 'import onnxruntime; print(onnxruntime.get_available_providers())';"
        " ldconfig -p | grep -Eo 'lib(cudnn|cublas|cudart)[^ ]*so\\.[0-9]+' | sort -u"))
    assert done.returncode == 0, done.stderr
    providers, *libraries = done.stdout.splitlines()
    assert "CUDAExecutionProvider" in providers
    assert {lib.split(".so")[0] for lib in libraries} >= {"libcudnn", "libcublas", "libcudart"}
