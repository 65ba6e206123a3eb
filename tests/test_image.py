"""The container image without a Docker engine: hadolint and the Dockerfile's promises (a
non-root, torch-free serving stage as the default target), then the serving venv built the way
the Dockerfile builds it, from the files it copies, serving a forecast and stopping cleanly."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from benchmarks.ports import free_port
from kpi_forecast.cli.smoke import wait_ready
from tests.rmr_library import RMR
from tests.xapp_helpers import CONTEXT, make_model, write_descriptor

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
HADOLINT = Path(sys.executable).parent / "hadolint"
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"


# --- a small Dockerfile reader: enough for the checks below, not a full parser -----------------


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def args(self, keyword: str) -> list[str]:
        return [rest for kw, rest in self.instructions if kw == keyword]


def logical_lines(text: str) -> list[str]:
    """Instructions one per line: comments dropped (Docker drops them inside continuations
    too) and backslash continuations joined."""
    lines: list[str] = []
    current = ""
    for raw in text.splitlines():
        if raw.lstrip().startswith("#"):
            continue
        if raw.rstrip().endswith("\\"):
            current += raw.rstrip()[:-1] + " "
            continue
        current += raw
        if current.strip():
            lines.append(current.strip())
        current = ""
    if current.strip():
        lines.append(current.strip())
    return lines


def stages(text: str) -> list[Stage]:
    found: list[Stage] = []
    for line in logical_lines(text):
        keyword, _, rest = line.partition(" ")
        keyword, rest = keyword.upper(), rest.strip()
        if keyword == "FROM":
            words = [w for w in rest.split() if not w.startswith("--")]
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else str(len(found))
            found.append(Stage(name, words[0]))
        elif found:  # global ARGs before the first FROM belong to no stage
            found[-1].instructions.append((keyword, rest))
    return found


def pip_installs(run: str) -> list[str]:
    """Each `pip install ...` command in a RUN, up to the next command separator."""
    return [part[part.index("pip install"):] for part in re.split(r"&&|\|\||;", run)
            if "pip install" in part]


def chain(by_name: dict[str, Stage], name: str) -> list[Stage]:
    """A stage and the stages it is built FROM, nearest first."""
    found = [by_name[name]]
    while found[-1].base in by_name:
        found.append(by_name[found[-1].base])
    return found


def trim_instruction(parsed: dict[str, Stage]) -> str:
    """The serving builder's RUN that removes what the server never loads."""
    [trim] = [run for stage in chain(parsed, "builder") for run in stage.args("RUN")
              if "pycrate_asn1dir" in run]
    return trim


def copy_sources(stage: Stage) -> list[str]:
    """What a stage COPYs from the build context (not --from another stage)."""
    sources: list[str] = []
    for rest in stage.args("COPY"):
        words = rest.split()
        if any(w.startswith("--from") for w in words):
            continue
        sources += [w for w in words if not w.startswith("--")][:-1]
    return sources


@pytest.fixture(scope="module")
def parsed() -> dict[str, Stage]:
    return {stage.name: stage for stage in stages(DOCKERFILE.read_text())}


# --- lint and structure ------------------------------------------------------------------------


def test_hadolint_has_no_findings(tmp_path: Path) -> None:
    if not HADOLINT.exists():
        pytest.skip(f"hadolint is not installed next to the interpreter ({HADOLINT})")
    # An empty config and no HADOLINT_* variables: a stray user config must not hide findings.
    config = tmp_path / "hadolint.yaml"
    config.write_text("{}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HADOLINT_")}
    result = subprocess.run(
        [str(HADOLINT), "--config", str(config), "--no-color", "--failure-threshold", "style",
         str(DOCKERFILE)],
        capture_output=True, text=True, env=env, timeout=60,
    )
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_default_target_is_a_non_root_serving_stage(parsed: dict[str, Stage]) -> None:
    names = list(parsed)
    assert {"builder", "train", "serve"} <= set(names)
    assert names[-1] == "serve"  # `docker build .` without --target builds the last stage
    serve = parsed["serve"]

    users = serve.args("USER")
    assert users, "the serving stage runs as root"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0  # numeric, so that runAsNonRoot can check it

    assert any("/ric/v1/health/alive" in h for h in serve.args("HEALTHCHECK"))
    exposed = {port for rest in serve.args("EXPOSE") for port in rest.split()}
    assert {"8080", "4560", "4561"} <= exposed
    assert json.loads(serve.args("ENTRYPOINT")[-1]) == ["kpi-forecast", "serve"]
    assert json.loads(serve.args("CMD")[-1]) == ["--host", "0.0.0.0", "--port", "8080"]
    envs = " ".join(serve.args("ENV"))
    assert "PYTHONDONTWRITEBYTECODE=1" in envs and "PYTHONUNBUFFERED=1" in envs
    # The packaged descriptor is the default; the chart points CONFIG_FILE at its ConfigMap.
    assert "CONFIG_FILE" not in envs
    assert any("/opt/ric/model" in v for v in serve.args("VOLUME"))
    assert any(kw == "LABEL" and "org.opencontainers.image." in rest
               for kw, rest in serve.instructions)


def test_serving_venv_has_the_serve_extra_only(parsed: dict[str, Stage]) -> None:
    serve = parsed["serve"]
    venv_from = [rest for rest in serve.args("COPY") if "/opt/venv" in rest]
    assert venv_from, "the serving stage does not copy a venv"
    source = re.search(r"--from=(\S+)", venv_from[0])
    assert source is not None
    installs = [cmd for stage in chain(parsed, source.group(1))
                for run in stage.args("RUN") for cmd in pip_installs(run)]
    assert any("[serve]" in cmd for cmd in installs), installs
    for cmd in installs:
        assert "torch" not in cmd and "[train" not in cmd and ",train" not in cmd, cmd


def test_the_serving_venv_keeps_the_asn1_modules_the_xapp_imports(
        parsed: dict[str, Stage]) -> None:
    """The builder deletes pycrate's compiled ASN.1 modules but those it names; they must be
    the ones xapp/ imports, and the Makefile leaves the same ones to compile."""
    imported = {name for path in (ROOT / "xapp").rglob("*.py")
                for name in re.findall(r"from pycrate_asn1dir import (\w+)", path.read_text())}
    assert imported
    trim = trim_instruction(parsed)
    kept = set(re.findall(r"! -name '(\w+)\.\*'", trim))
    assert kept == imported | {"__init__"}, kept
    compiled = re.search(r"pycrate_asn1dir/\(\?!(.*?)\)\)", (ROOT / "Makefile").read_text())
    assert compiled is not None
    assert set(re.findall(r"(\w+)\\\.py", compiled.group(1))) == imported | {"__init__"}


def test_the_serving_image_carries_the_librmr_the_tests_run_against(
        parsed: dict[str, Stage]) -> None:
    """librmr built from the commit ../shared/rmr was built from, and put where the loader
    finds it (ldconfig after the copy)."""
    serve = parsed["serve"]
    copies = [rest for rest in serve.args("COPY") if "--from=rmr-builder" in rest]
    assert copies and copies[0].split()[-1] == "/usr/local/lib/", copies
    position = serve.instructions.index(("COPY", copies[0]))
    assert any(kw == "RUN" and "ldconfig" in rest
               for kw, rest in serve.instructions[position:])
    builder = parsed["rmr-builder"]
    # Built FROM the source stage RMR_SOURCE names: the clone of the commit, or its archive.
    assert builder.base == "rmr-source-${RMR_SOURCE}"
    commit = re.search(r"RMR_COMMIT=(\w+)", " ".join(parsed["rmr-source-git"].args("ARG")))
    assert commit is not None
    source = RMR / "SOURCE.md"
    if not source.is_file():
        pytest.skip(f"{source} not present (RMR 4.9.4 in ../shared/rmr)")
    assert f"`{commit.group(1)}`" in source.read_text()
    archives = list((RMR / "source").glob(f"ric-plt-lib-rmr-{commit.group(1)[:7]}.tar.gz"))
    assert archives, "no archive of that commit in ../shared/rmr/source"
    assert copy_sources(parsed["rmr-source-archive"]) == ["rmr-source/"]
    assert any("make -C /rmr-build install" in rest for rest in builder.args("RUN"))


def test_training_stage_takes_torch_from_the_cpu_index(parsed: dict[str, Stage]) -> None:
    train = parsed["train"]
    assert json.loads(train.args("ENTRYPOINT")[-1]) == ["kpi-forecast"]
    venv_from = [rest for rest in train.args("COPY") if "/opt/venv" in rest]
    source = re.search(r"--from=(\S+)", venv_from[0])
    assert source is not None
    installs = [cmd for stage in chain(parsed, source.group(1))
                for run in stage.args("RUN") for cmd in pip_installs(run)]
    train_installs = [run for stage in chain(parsed, source.group(1))
                      for run in stage.args("RUN") if "[train]" in run]
    assert train_installs, installs
    # Without the CPU index pip takes PyPI's torch, which pulls the CUDA wheels (gigabytes):
    # it is the default, and the install reads it (a folder of wheels may stand in for it).
    stage_args = " ".join(parsed["train-builder"].args("ARG"))
    assert f"TORCH_INDEX={CPU_TORCH_INDEX}" in stage_args
    assert all('PIP_EXTRA_INDEX_URL="${TORCH_INDEX}"' in run for run in train_installs)


# --- the serving venv, built as the image builds it --------------------------------------------



# Run inside the new venv, from outside the repository: where the packages were imported from,
# and whether the package data (descriptor, schema, ASN.1, sample data) was installed.
INSTALLED = """
import json, sys
from importlib.resources import files
import kpi_forecast.data, kpi_forecast.model, kpi_forecast.xapp
from kpi_forecast.xapp.descriptor.config_file import descriptor_path, load_descriptor
packaged = load_descriptor(descriptor_path(environ={}))
print(json.dumps({
    "modules": [m.__file__ for m in (kpi_forecast.data, kpi_forecast.model, kpi_forecast.xapp)],
    "model_dir": str(packaged.controls.model_dir),
    "data": [str(p) for p in (files("kpi_forecast.xapp.descriptor") / "schema.json",
                              files("kpi_forecast.xapp.ric.e2") / "kpm.asn",
                              files("kpi_forecast.data.sample") / "cells_hourly.csv.gz")
             if not p.is_file()],
}))
"""


@pytest.mark.slow
def test_serving_venv_built_like_the_image_serves_without_torch(
    parsed: dict[str, Stage], tmp_path: Path,
) -> None:
    # The build context as the image sees it: only what the Dockerfile COPYs. Building from
    # this copy also keeps pip's build/ and *.egg-info out of the repository.
    src = tmp_path / "src"
    src.mkdir()
    sources = copy_sources(parsed["build-base"])  # the package's, not RMR's source archive
    assert "pyproject.toml" in sources
    for name in sources:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.py[cod]"))
        else:
            shutil.copy2(path, src / name)

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python, bin_dir = venv / "bin" / "python", venv / "bin"
    built = subprocess.run(
        [str(python), "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path), str(src)],
        capture_output=True, text=True, timeout=900, cwd=tmp_path,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = tmp_path.glob("kpi_forecast-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        top = {name.split("/")[0] for name in archive.namelist()}
    # One import name beside its metadata: nothing that shadows another project's `data`.
    assert {name for name in top if not name.endswith(".dist-info")} == {"kpi_forecast"}, top
    install = subprocess.run(
        # --no-compile: bytecode of all of pandas and pyarrow was two thirds of this install's
        # time, and this venv starts only a handful of processes (the image compiles).
        [str(python), "-m", "pip", "install", "--quiet", "--no-compile", f"{wheel}[serve]"],
        capture_output=True, text=True, timeout=900, cwd=tmp_path,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    # Trimmed by the builder's own instruction, whose closing checks import what serving does.
    trim = trim_instruction(parsed)
    trimmed = subprocess.run(["bash", "-c", trim], capture_output=True, text=True, cwd=tmp_path,
                             env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
                             timeout=300)
    assert trimmed.returncode == 0, trimmed.stdout + trimmed.stderr
    assert not (venv / "bin" / "pip").exists()

    # Away from the repository and with no PYTHONPATH, only the installed copy can be found.
    env = {k: v for k, v in os.environ.items()
           if k not in {"PYTHONPATH", "CONFIG_FILE", "XAPP_DESCRIPTOR_PATH"}}
    torch = subprocess.run([str(python), "-c", "import torch"], capture_output=True, text=True,
                           cwd=tmp_path, env=env, timeout=60)
    assert torch.returncode != 0 and "No module named 'torch'" in torch.stderr, torch.stderr

    check = subprocess.run([str(python), "-c", INSTALLED], capture_output=True, text=True,
                           cwd=tmp_path, env=env, timeout=120)
    assert check.returncode == 0, check.stderr
    installed = json.loads(check.stdout)
    assert all(Path(m).is_relative_to(venv) for m in installed["modules"]), installed
    assert installed["data"] == []
    assert installed["model_dir"] == "/opt/ric/model"

    # Served as the chart runs it: CONFIG_FILE names the descriptor. Its budget is 1 s so that
    # a busy test machine does not turn this into a latency test and answer from the fallback.
    model_dir = make_model(tmp_path / "model")
    env["CONFIG_FILE"] = str(write_descriptor(tmp_path / "config", model_dir,
                                              latencyBudgetMs=1000))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(bin_dir / "kpi-forecast"), "serve", "--model", str(model_dir),
             "--host", "127.0.0.1", "--port", str(port)],
            cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT,
        )
        try:
            assert wait_ready(url, process, 90.0), log.read_text()
            request = {"cell_id": "c1", "start": "2024-01-01T00:00:00+00:00", "freq": "1h",
                       "values": [float(i % 24) for i in range(CONTEXT)]}
            answer = httpx.post(f"{url}/v1/forecast", json=request, timeout=30)
            assert answer.status_code == 200, answer.text
            assert answer.json()["source"] == "model"
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=30) == 0, log.read_text()
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert "Traceback" not in log.read_text(), log.read_text()
